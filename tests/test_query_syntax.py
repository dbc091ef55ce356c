"""The query syntax and long questions (docs/bm25/analysis.md): quoted phrases, exclusions and OR
as filters inside the exact top k in every mode, any text read as a query without an error, and
a long question's most informative terms kept by the reader's own statistics."""

from __future__ import annotations

import math
import random
from collections import defaultdict
from typing import Any

import psycopg
import pytest

from groundkit import Groundkit, embedding, model_swap
from groundkit.dense import build_hnsw_indexes
from tests.dense_fakes import FakeEmbeddings, add_fake_model
from tests.test_search_exact import STRATEGIES, _assert_same, _rows, score_part


def _ids(gk: Groundkit, reader: str, query: str, k: int = 50, **kw: Any) -> list[str]:
    return [h.object_id for h in gk.search(reader, query, k=k, **kw)]


@pytest.fixture
def studio(gk: Groundkit) -> Groundkit:
    gk.put_member("ana", "T0")
    gk.put_space("board", "T0")
    posts = {
        "a": "the kiln fired the glaze overnight",
        "b": "glaze fired in the kiln",
        "c": "wood ash glaze on stoneware",
        "d": "ash from the wood stove, a glaze test",
        "e": "celadon glaze in a reduction kiln",
        "f": "firing of the kiln took twelve hours",
        "g": "firing the kiln",
    }
    for oid, body in posts.items():
        gk.put_object(oid, 1, "board_post", "board", "T0", "", body)
    return gk


def test_a_phrase_matches_only_where_its_words_stand_together(studio: Groundkit) -> None:
    assert _ids(studio, "ana", '"kiln fired"') == ["a"]
    assert _ids(studio, "ana", '"fired kiln"') == []
    assert set(_ids(studio, "ana", '"wood ash"')) == {"c"}
    # its words are scored too, and the bag around it ranks within the filter
    assert set(_ids(studio, "ana", 'glaze "wood ash" stoneware')) == {"c"}
    # stopwords keep their distance: "of the" stands for any two words ("fired in the kiln"),
    # not for one ("firing the kiln")
    assert set(_ids(studio, "ana", '"firing of the kiln"')) == {"b", "f"}


def test_exclusions_leave_out_a_word_or_a_phrase(studio: Groundkit) -> None:
    assert set(_ids(studio, "ana", "glaze")) == {"a", "b", "c", "d", "e"}
    assert set(_ids(studio, "ana", "glaze -kiln")) == {"c", "d"}
    assert set(_ids(studio, "ana", 'glaze -"wood ash"')) == {"a", "b", "d", "e"}  # "ash from the wood" stays
    assert set(_ids(studio, "ana", "glaze -kilns -celadon")) == {"c", "d"}  # stemmed as a query word is
    assert _ids(studio, "ana", "-glaze") == []  # nothing to score: nothing found


def test_or_joins_phrases_and_words(studio: Groundkit) -> None:
    assert set(_ids(studio, "ana", '"wood ash" OR "celadon glaze"')) == {"c", "e"}
    assert set(_ids(studio, "ana", '"wood ash" OR celadon')) == {"c", "e"}
    assert _ids(studio, "ana", "stoneware OR celadon") == _ids(studio, "ana", "stoneware celadon")
    assert set(_ids(studio, "ana", '"kiln fired" OR "wood ash" -stoneware')) == {"a"}


@pytest.mark.parametrize("query,reads_as", [
    ('"kiln fired', "kiln fired"),  # a quote without its pair is ignored
    ('kiln "fired', "kiln fired"),
    ("--force kiln", "force kiln"),  # '--', '-1' and 'a-b' are words
    ("kiln -1", "kiln 1"),
    ("OR kiln", "kiln"),  # OR at an end is a word (a stopword)
    ("kiln OR", "kiln"),
    ("kiln OR OR glaze", "kiln glaze"),
    ("kiln or glaze", "kiln glaze"),
])
def test_a_query_the_syntax_cannot_read_is_plain_words(studio: Groundkit, query: str, reads_as: str) -> None:
    assert [(h.object_id, h.score) for h in studio.search("ana", query, k=50)] == \
           [(h.object_id, h.score) for h in studio.search("ana", reads_as, k=50)]


def test_no_text_is_an_error(studio: Groundkit, raw: psycopg.Connection[Any]) -> None:
    rng = random.Random(52)
    alphabet = ['"', "-", " ", "OR", "or", "kiln", "glaze", "(", ")", "&", "|", "!", "<->", ":*", "'", "\\", "é",
                "pg_stat", "C++", ".NET", "<b>", "\x01", "\x02", "%", "\t"]
    queries = ['""', '-""', '"-"', "- -", "OR OR", '"OR"', '-"OR"', 'fo"o"bar', '"" OR ""', '"a" OR -"b"',
               '"the of and"', '-"the"', '"kiln" OR "the"', "-kiln OR glaze"]
    queries += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12))) for _ in range(150)]
    for query in queries:
        hits = studio.search("ana", query)
        rows = raw.execute("select object_id, score from groundkit.search(reader_sub => 'ana', query => %s)",
                           (query,)).fetchall()
        assert [(h.object_id, h.score) for h in hits] == [(r[0], r[1]) for r in rows], query


def test_phrases_and_exclusions_are_filters_inside_the_exact_top_k(gk: Groundkit, raw: psycopg.Connection[Any]
                                                                   ) -> None:
    """Many better-scoring chunks fail the filter (the phrase's words in another order, an
    excluded word) or may not be seen; every strategy still returns the k best chunks that
    pass both, equal to a brute force over the raw tables; pending and merged alike."""
    gk.put_member("t0", "T0")
    gk.put_member("t3", "T3")
    gk.put_space("open", "T0")
    gk.put_space("vault", "T0", private=True)
    rng = random.Random(7)
    words = ["raku", "glaze", "wood", "ash", "kiln", "smoke", "copper", "crackle"]
    for i in range(240):
        if i == 160:
            gk.merge_pending()
        kind = i % 6
        if kind == 0:
            body = "raku glaze wood ash " + " ".join(rng.choice(words) for _ in range(rng.randint(0, 6)))
        elif kind == 1:
            body = "ash wood raku raku glaze glaze " + " ".join(rng.choice(words) for _ in range(rng.randint(0, 3)))
        elif kind == 2:
            body = "raku raku glaze wood ash smoke smoke"
        else:
            body = " ".join(rng.choice(words) for _ in range(rng.randint(2, 9)))
        tier = "T3" if i % 5 == 0 else "T0"
        space = "vault" if i % 7 == 0 else "open"
        gk.put_object(f"o{i:03d}", 1, "board_post", space, tier, "", body)
    queries = ['raku glaze "wood ash"', 'raku glaze -smoke', 'raku "wood ash" -smoke -copper',
               '"ash wood" OR "wood ash" raku', 'glaze -"wood ash"', 'raku crackle "glaze wood"']
    for query in queries:
        for reader in ("t0", "t3"):
            for k in (1, 3, 10, 40):
                want = _brute_force(raw, reader, query, k)
                assert len(want) == min(k, len(_brute_force(raw, reader, query, 10_000))), query
                _assert_same(_rows(raw, "_search_exhaustive", reader, query, k), want, f"exhaustive {query}")
                for extra in STRATEGIES:
                    _assert_same(_rows(raw, "_search_pruned", reader, query, k, extra), want,
                                 f"pruned({extra}) {reader} {query!r} k={k}")
                hits = gk.search(reader, query, k=k)
                _assert_same([(h.object_id, h.chunk_seq, h.score) for h in hits], want, f"search {query}")


def _brute_force(conn: psycopg.Connection[Any], reader: str, query: str, k: int) -> list[tuple[str, int, float]]:
    """BM25 in Python over the chunks ``reader`` may see (shared spaces by tier, private ones by
    grant) that match the query's filter (evaluated by PostgreSQL's @@ on each chunk's tsvector),
    with the query's terms and the statistics of the reader's scopes."""
    cur = conn.cursor()
    rank = {name: r for name, r in cur.execute("select name, rank from groundkit.tiers").fetchall()}
    (tier,) = cur.execute("select tier from groundkit.members where member_sub = %s", (reader,)).fetchone() or ("",)
    r_rank = rank[tier]
    (flt,) = cur.execute("select (groundkit._parse_query(%s, array['english'])).filter", (query,)).fetchone() \
        or (None,)
    k1, b = cur.execute("select bm25_k1, bm25_b from groundkit.config").fetchone()  # type: ignore[misc]
    grants = {s for (s,) in cur.execute("select space_id from groundkit.space_grants where member_sub = %s",
                                        (reader,)).fetchall()}
    tfs: dict[int, dict[str, int]] = defaultdict(dict)
    meta: dict[int, tuple[str, int]] = {}
    scope: dict[int, int | None] = {}
    visible: set[int] = set()
    for cid, oid, seq, space, private, otier, stier, match in cur.execute(
            "select c.chunk_id, c.object_id, c.chunk_seq, o.space_id, s.private, o.tier_visibility, s.min_tier,"
            "       (%s::tsquery is null or c.tsv @@ %s::tsquery)"
            "  from groundkit.chunks c join groundkit.objects o using (object_id)"
            "  join groundkit.spaces s using (space_id) where o.state = 'live'", (flt, flt)).fetchall():
        meta[cid] = (oid, seq)
        need = max(rank[otier], rank[stier])
        scope[cid] = None if private else need
        if r_rank >= need and (not private or space in grants) and match:
            visible.add(cid)
    for cid, term, tf in cur.execute("select c.chunk_id, u.lexeme, coalesce(array_length(u.positions, 1), 1)"
                                     "  from groundkit.chunks c, unnest(c.tsv) u").fetchall():
        tfs[cid][term] = tf
    counted = [c for c, s in scope.items() if s is not None and s <= r_rank]
    n = len(counted)
    avgdl = sum(sum(tfs[c].values()) for c in counted) / n if n else 1.0
    scores: dict[int, float] = defaultdict(float)
    for term, qtf in cur.execute("select term, qtf from groundkit.query_terms(%s)", (query,)).fetchall():
        df = sum(1 for c in counted if term in tfs[c])
        w = qtf * math.log(1 + (max(n - df, 0) + 0.5) / (df + 0.5))
        for c in visible:
            tf = tfs[c].get(term)
            if tf:
                dl = sum(tfs[c].values())
                scores[c] += score_part(w, tf / (tf + k1 * (1 - b + b * dl / avgdl)))
    ranked = sorted(scores.items(), key=lambda x: (-x[1], meta[x[0]][0], meta[x[0]][1]))[:k]
    return [(meta[c][0], meta[c][1], s) for c, s in ranked]


def test_dense_and_hybrid_keep_to_phrases_and_exclusions(dsn: str, fake: FakeEmbeddings) -> None:
    """Both legs of hybrid and dense alone return only chunks that pass the filter, k of them
    whenever k visible chunks do; the dense leg embeds the query's words, not its syntax."""
    with Groundkit.connect(dsn) as gk:
        gk.put_member("ana", "T0")
        gk.put_space("board", "T0")
        for i in range(30):
            phrase = "wood ash" if i % 3 == 0 else "ash wood"
            extra = " smoke" if i % 2 == 0 else ""
            gk.put_object(f"p{i:02d}", 1, "board_post", "board", "T0", "", f"raku glaze {phrase} firing{extra}")
        add_fake_model(gk, "fake", fake)
        model = embedding.get_model(gk, "fake")
        from groundkit.embedders import embedder_for

        embedding.embed_pending(gk, model, embedder_for(model))
        model_swap.cutover(gk, "fake")
        passing = {f"p{i:02d}" for i in range(30) if i % 3 == 0 and i % 2 == 1}
        for mode in ("bm25", "dense", "hybrid"):
            for k in (1, 3, 10):
                hits = _ids(gk, "ana", 'raku "wood ash" -smoke', k=k, mode=mode)
                assert len(hits) == min(k, len(passing)) and set(hits) <= passing, (mode, k, hits)
        # the same through the dense index's bucket scans (built, and taken whatever the set's size)
        with psycopg.connect(dsn, autocommit=True) as owner:
            assert build_hnsw_indexes(owner, "fake", min_entries=1)
        gk.conn.execute("set groundkit.dense_exact_max = 0")
        for mode in ("dense", "hybrid"):
            for k in (1, 3, 10):
                hits = _ids(gk, "ana", 'raku "wood ash" -smoke', k=k, mode=mode)
                assert len(hits) == min(k, len(passing)) and set(hits) <= passing, ("index", mode, k, hits)
        fake.texts.clear()
        gk.search("ana", 'raku "wood ash" -smoke OR', mode="dense")
        assert fake.texts == ["raku wood ash OR"], fake.texts
        # the SQL function takes the query's text for its filter
        rows = gk.conn.execute(
            "select object_id from groundkit.search_dense('ana', %s, 10, query => %s)",
            (embedding.vector_literal([0.1] * 32), '"wood ash" -smoke')).fetchall()
        assert rows and {r["object_id"] for r in rows} <= passing


def _word(i: int) -> str:
    """A word of letters only, its own stem, no stopword: 'zqaax', 'zqabx', ..."""
    return "zq" + chr(97 + i // 26) + chr(97 + i % 26) + "x"


def _kept_terms(conn: psycopg.Connection[Any], reader: str, query: str) -> list[str]:
    row = conn.execute(
        "select (groundkit._search_terms(%(q)s, r.rank, r.member_sub, null,"
        "        groundkit._reader_buckets(r.rank, r.member_sub),"
        "        (select coalesce(sum(s.n_chunks), 0) from groundkit.scope_stats s where s.scope <= r.rank))).terms"
        "  from groundkit._reader(%(r)s) r", {"q": query, "r": reader}).fetchone()
    assert row is not None
    return list(row[0] or [])


def test_a_long_question_keeps_its_most_informative_terms_by_the_readers_statistics(
        gk: Groundkit, raw: psycopg.Connection[Any]) -> None:
    """Past 64 distinct terms, the 64 of the highest IDF among the terms the reader's statistics
    know are kept, then unknown ones; content the reader may not see (a higher tier, a private
    space without a grant, another member's note) never changes which, nor the answer."""
    gk.put_member("t0", "T0")
    gk.put_member("t3", "T3")
    gk.put_space("open", "T0")
    gk.put_space("secret", "T0", private=True)
    words = [_word(i) for i in range(120)]
    for i in range(120):  # word j in j + 1 posts: the IDF falls as j grows
        gk.put_object(f"p{i:03d}", 1, "board_post", "open", "T0", "", " ".join(words[i:]))
    question = " ".join(words) + " neverseen"
    kept = _kept_terms(raw, "t0", question)
    assert kept == sorted(words[:64])  # no shared content holds "neverseen": known terms come first
    before = [(h.object_id, h.score) for h in gk.search("t0", question, k=20)]
    assert gk.last_query_notice is not None and "distinct terms in english" in gk.last_query_notice
    # content t0 may not see holds the rare words many times and the common ones never
    for i in range(200):
        gk.put_object(f"hidden{i:03d}", 1, "board_post", "open", "T3", "", " ".join(words[:10]))
        gk.put_object(f"private{i:03d}", 1, "board_post", "secret", "T0", "", " ".join(words[:10]))
        gk.put_object(f"note{i:03d}", 1, "member_note", "open", "T0", "", " ".join(words[:10]),
                      owner_sub="t3", owner_only=True)
    assert _kept_terms(raw, "t0", question) == kept
    assert [(h.object_id, h.score) for h in gk.search("t0", question, k=20)] == before
    gk.merge_pending()
    assert _kept_terms(raw, "t0", question) == kept
    assert [(h.object_id, h.score) for h in gk.search("t0", question, k=20)] == before
    # a reader who sees more has other statistics, and may keep other terms
    assert _kept_terms(raw, "t3", question) != kept


def _word3(i: int) -> str:
    """One of 17,576 words of letters only, each its own stem: 'qaaax', 'qaabx', ..."""
    return "q" + chr(97 + i // 676) + chr(97 + i // 26 % 26) + chr(97 + i % 26) + "x"


def test_questions_of_300_and_5000_distinct_terms_are_answered(gk: Groundkit, raw: psycopg.Connection[Any]) -> None:
    """A pasted paragraph and a pasted page (5,000 distinct words, 30,000 characters) are read:
    the answer holds the post with the words the reader's statistics know, 64 terms are kept, and
    the notice says how many the question had (their cost: `python -m evals.bench longquery`)."""
    gk.put_member("t0", "T0")
    gk.put_space("open", "T0")
    gk.put_object("match", 1, "board_post", "open", "T0", "", "kiln glaze " + " ".join(_word3(i) for i in range(3)))
    gk.put_object("other", 1, "board_post", "open", "T0", "", "wood stove")
    for n in (300, 5000):
        question = "kiln glaze " + " ".join(_word3(i) for i in range(n - 2))
        assert [h.object_id for h in gk.search("t0", question)] == ["match"], n
        assert gk.last_query_notice is not None and f"{n} distinct terms in english" in gk.last_query_notice
        kept = _kept_terms(raw, "t0", question)
        assert len(kept) == 64 and {"kiln", "glaze", "qaaax", "qaabx", "qaacx"} <= set(kept)


def test_the_notice_in_sql(gk: Groundkit, raw: psycopg.Connection[Any]) -> None:
    gk.put_member("t0", "T0")
    gk.put_space("open", "T0")
    gk.put_object("p", 1, "board_post", "open", "T0", "", "kiln")
    notices: list[str] = []
    raw.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
    raw.execute("select * from groundkit.search('t0', %s)", ("kiln " + " ".join(_word(i) for i in range(100)),))
    assert notices == ["groundkit: the query has 101 distinct terms in english; search kept the 64 of each "
                       "language with the highest IDF"]
    notices.clear()
    raw.execute("select * from groundkit.search('t0', 'kiln glaze')")
    assert notices == []
