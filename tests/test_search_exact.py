"""The pruned BM25 path returns exactly the exhaustive top k (docs/bm25.md).

Random corpora, tiers, private spaces, owner-only notes, policy changes, deletes and queries;
every reader, selective ones included. Three answers are compared:

- ``groundkit._search_pruned`` forced to run the pruned rounds starting one posting deep, so
  it goes through many rounds of pruning and deepening even on a small corpus; forced to scan;
  forced to run the threshold rounds (also reading every round
  in two passes by shares, reading every round's ranges merged in chunk-id order, and merged in
  four pieces of the chunk ids planned for parallel workers); and left
  to choose (on these small corpora: the scan);
- ``groundkit._search_exhaustive``, the one-aggregate scorer over every posting;
- a brute force written here in Python from the raw tables (visibility, statistics scopes and
  the Lucene formula re-implemented, with only the analyzer shared).

Same set and order up to score ties, and k rows whenever k visible chunks match.
"""

from __future__ import annotations

import itertools
import math
import random
import struct
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg.conninfo import make_conninfo

from groundkit import Groundkit
from groundkit.gate import roles
from tests.conftest import drop_database, fresh_database
from tests.properties import examples

VOCAB = ["amber", "basalt", "cedar", "dune", "ember", "fjord", "granite", "harbor", "island", "juniper",
         "kelp", "lagoon", "meadow", "nectar", "orchid"]
TIERS = ["T0", "T1", "T2", "T3"]
MEMBERS = ["m0", "m1", "m2", "m3", "m4", "m5"]
REL_TOL = 1e-9
# _search_pruned's strategies, forced (the last one chooses)
STRATEGIES = (", start_depth => 1", ", start_depth => 3", ", strategy => 'scan'", ", strategy => 'threshold'",
              ", strategy => 'threshold', start_depth => 1", ", strategy => 'threshold', start_depth => 0",
              ", strategy => 'shares'", ", strategy => 'shares', start_depth => 1",
              ", strategy => 'merge'", ", strategy => 'merge', start_depth => 1",
              ", strategy => 'pieces'", ", strategy => 'pieces', start_depth => 1", "")


@dataclass(frozen=True)
class Obj:
    space: int
    tier: str
    owner: int | None
    owner_only: bool
    words: tuple[int, ...]
    title: tuple[int, ...]


def _text(idx: tuple[int, ...]) -> str:
    return " ".join(VOCAB[i] for i in idx)


def _skew(i: int) -> int:
    return (i * i) // 15


objects_st = st.lists(
    st.builds(
        Obj,
        space=st.integers(0, 3),
        tier=st.sampled_from(TIERS),
        owner=st.one_of(st.none(), st.integers(0, len(MEMBERS) - 1)),
        owner_only=st.booleans(),
        # a skewed vocabulary: low indices are common, so ties and long lists both occur
        words=st.lists(st.integers(0, 14).map(_skew), min_size=0, max_size=12).map(tuple),
        title=st.lists(st.integers(0, 14), max_size=2).map(tuple),
    ),
    min_size=1,
    max_size=40,
)


world_st = st.fixed_dictionaries(
    {
        "objects": objects_st,
        "space_tiers": st.lists(st.sampled_from(TIERS), min_size=4, max_size=4),
        "space_private": st.lists(st.booleans(), min_size=4, max_size=4),
        "member_tiers": st.lists(st.sampled_from(TIERS), min_size=len(MEMBERS), max_size=len(MEMBERS)),
        "grants": st.sets(st.tuples(st.integers(0, 3), st.integers(0, len(MEMBERS) - 1)), max_size=8),
        "deletes": st.sets(st.integers(0, 39), max_size=5),
        "retiers": st.dictionaries(st.integers(0, 39), st.sampled_from(TIERS), max_size=5),
        # a policy change after the writes: (space, new min tier, new private flag)
        "policy": st.one_of(st.none(), st.tuples(st.integers(0, 3), st.sampled_from(TIERS), st.booleans())),
        # (k1, b, reference length of the stored impacts: 1.0, 4.0 and 8.0 are below the worlds'
        # average chunk lengths, which search bounds through _imp_ub; 500 above them)
        "params": st.sampled_from([(0.9, 0.4, None), (1.2, 0.75, None), (0.9, 0.4, 1.0), (2.0, 1.0, 500.0),
                                   (0.9, 0.4, 8.0), (1.2, 0.75, 4.0)]),
        # a recompute in steps (docs/bm25.md, "Recomputing the impacts in steps") to this
        # reference, left after its first step over about half the postings: those are at the new
        # reference, the rest at the params' one, and search bounds them all with the smaller
        "halfway": st.one_of(st.none(), st.sampled_from([3.0, 300.0])),
        # sketches of the postings lists (planning only): none, fresh, or wrong in every way
        "sketch": st.sampled_from([None, "fresh", "wrong"]),
        # the pending part (docs/bm25.md, "The pending part"): config.pending_merge_chunks before
        # the writes (0: none, every write to postings; 3: a writer merges every few chunks), or
        # the default with every chunk pending, or a merge after half of the objects
        "pending": st.sampled_from([0, 3, None, "half"]),
        # writes after analyze_postings, which made the term bits (docs/bm25.md, "Term bits"):
        # (object to delete, object to write again with these words, new object's words)
        "later": st.one_of(st.none(), st.tuples(
            st.integers(0, 39), st.integers(0, 39),
            st.lists(st.integers(0, 14).map(_skew), min_size=1, max_size=12).map(tuple))),
        "queries": st.lists(
            st.tuples(st.lists(st.integers(0, 15), min_size=1, max_size=6), st.integers(1, 8)),
            min_size=1, max_size=4,
        ),
    }
)


@pytest.fixture
def server_db(server_dsn: str, template_db: str) -> Iterator[tuple[str, str]]:
    yield server_dsn, template_db


def _brute_force(conn: psycopg.Connection[Any], reader: str, query: str, k: int) -> list[tuple[str, int, float]]:
    """BM25 over the chunks ``reader`` may see, from the raw tables, in Python."""
    cur = conn.cursor()
    rank = {name: r for name, r in cur.execute("select name, rank from groundkit.tiers").fetchall()}
    member = cur.execute("select tier, status from groundkit.members where member_sub = %s", (reader,)).fetchone()
    if member is None or member[1] != "active":
        return []
    r_rank = rank[member[0]]
    spaces = {sid: (rank[t], priv) for sid, t, priv in cur.execute(
        "select space_id, min_tier, private from groundkit.spaces").fetchall()}
    grants = {sid for (sid,) in cur.execute(
        "select space_id from groundkit.space_grants where member_sub = %s", (reader,)).fetchall()}
    objs = {oid: row for oid, *row in cur.execute(
        "select object_id, version, space_id, tier_visibility, owner_sub, owner_only from groundkit.objects"
        " where state = 'live'").fetchall()}
    k1, b = cur.execute("select bm25_k1, bm25_b from groundkit.config").fetchone()  # type: ignore[misc]
    tfs: dict[int, dict[str, int]] = defaultdict(dict)
    meta: dict[int, tuple[str, int, int]] = {}
    for cid, oid, ver, seq in cur.execute(
        "select chunk_id, object_id, object_version, chunk_seq from groundkit.chunks"
    ).fetchall():
        meta[cid] = (oid, ver, seq)
        tfs[cid] = {}
    for cid, term, tf in cur.execute(
        "select c.chunk_id, u.lexeme, coalesce(array_length(u.positions, 1), 1)"
        " from groundkit.chunks c, unnest(c.tsv) u"
    ).fetchall():
        tfs[cid][term] = tf
    stats_scope: dict[int, int | None] = {}
    visible: set[int] = set()
    for cid, (oid, ver, _seq) in meta.items():
        version, sid, tier, owner, owner_only = objs[oid]
        assert version == ver
        s_rank, priv = spaces[sid]
        need = max(rank[tier], s_rank)
        stats_scope[cid] = None if (priv or owner_only) else need
        if r_rank >= need and (not priv or sid in grants) and (not owner_only or owner == reader):
            visible.add(cid)
    counted = [cid for cid, sc in stats_scope.items() if sc is not None and sc <= r_rank]
    n = len(counted)
    total = sum(sum(tfs[cid].values()) for cid in counted)
    avgdl = total / n if n and total else 1.0
    qterms = cur.execute("select term, qtf from groundkit.query_terms(%s)", (query,)).fetchall()
    scores: dict[int, float] = defaultdict(float)
    for term, qtf in qterms:
        df = sum(1 for cid in counted if term in tfs[cid])
        w = qtf * math.log(1 + (max(n - df, 0) + 0.5) / (df + 0.5))
        for cid in visible:
            tf = tfs[cid].get(term)
            if tf:
                dl = sum(tfs[cid].values())
                scores[cid] += score_part(w, tf / (tf + k1 * (1 - b + b * dl / avgdl)))
    ranked = sorted(scores.items(), key=lambda x: (-x[1], meta[x[0]][0], meta[x[0]][2]))[:k]
    return [(meta[cid][0], meta[cid][2], s) for cid, s in ranked]


def score_part(w: float, tf_part: float) -> float:
    """A term's contribution as groundkit._score_part computes it: rounded down to 2^-36."""
    return math.floor(w * tf_part * 2.0**36) / 2.0**36


def _assert_same(got: list[tuple[str, int, float]], want: list[tuple[str, int, float]], what: str) -> None:
    """Same length, same scores position by position, same chunks except where scores tie."""
    assert len(got) == len(want), f"{what}: {len(got)} rows, expected {len(want)}"
    for g, w in zip(got, want, strict=True):
        assert math.isclose(g[2], w[2], rel_tol=REL_TOL, abs_tol=1e-12), f"{what}: {got} != {want}"
    if not want:
        return
    last = want[-1][2]

    def above(rows: list[tuple[str, int, float]]) -> set[tuple[str, int]]:
        return {(o, s) for o, s, sc in rows if not math.isclose(sc, last, rel_tol=REL_TOL, abs_tol=1e-12)}

    assert above(got) == above(want), f"{what}: {got} != {want}"


def _rows(conn: psycopg.Connection[Any], fn: str, reader: str, query: str, k: int, extra: str = "",
          ) -> list[tuple[str, int, float]]:
    rows = conn.execute(
        "select c.object_id, c.chunk_seq, r.score from groundkit." + fn  # noqa: S608 - fixed names
        + "(%s, %s, %s" + extra + ") r join groundkit.chunks c on c.chunk_id = r.chunk_id"
        " order by r.score desc, c.object_id, c.chunk_seq",
        (reader, query, k),
    ).fetchall()
    return [(str(o), int(s), float(sc)) for o, s, sc in rows]


def _build(gk: Groundkit, world: dict[str, Any]) -> None:
    for i, t in enumerate(world["member_tiers"]):
        gk.put_member(MEMBERS[i], t)
    gk.put_member("gone", "T3", "revoked")
    for s in range(4):
        gk.put_space(f"s{s}", world["space_tiers"][s], private=world["space_private"][s])
    for s, m in world["grants"]:
        gk.grant_space(f"s{s}", MEMBERS[m])
    k1, b, ref = world["params"]
    if isinstance(world["pending"], int):
        gk.conn.execute("update groundkit.config set pending_merge_chunks = %s", (world["pending"],))
    for i, o in enumerate(world["objects"]):
        if world["pending"] == "half" and i == len(world["objects"]) // 2:
            gk.merge_pending()
        owner = MEMBERS[o.owner] if o.owner is not None else (MEMBERS[0] if o.owner_only else None)
        gk.put_object(f"o{i:02d}", 1, "member_note" if o.owner_only else "board_post", f"s{o.space}", o.tier,
                      _text(o.title), _text(o.words), owner_sub=owner, owner_only=o.owner_only)
    n = len(world["objects"])
    for i, t in world["retiers"].items():
        if i < n:
            gk.retier_object(f"o{i:02d}", 2, t)
    for i in world["deletes"]:
        if i < n:
            gk.delete_object(f"o{i:02d}", 3)
    if world["policy"] is not None:
        s, t, priv = world["policy"]
        gk.put_space(f"s{s}", t, private=priv)
    # half of the worlds score with impacts computed for other parameters until reindexed
    # (set_bm25 recomputes them at the default reference, then at the world's if it has one)
    gk.conn.execute("select groundkit.set_bm25(%s, %s)", (k1, b))
    if ref is not None:
        gk.conn.execute("select groundkit.reindex_impacts(%s)", (ref,))
    if world["halfway"] is not None:
        gk.conn.execute("select groundkit._reindex_begin(%s)", (world["halfway"],))
        half = gk.conn.execute("select count(*) / 2 + 1 as n from groundkit.postings").fetchone()
        assert half is not None
        gk.conn.execute("select * from groundkit._reindex_step(%s)", (half["n"],))
    gk.conn.execute("delete from groundkit.postings_sketch")
    if world["sketch"] is not None:
        gk.conn.execute("select groundkit.analyze_postings(min_postings => 1)")
    if world["sketch"] == "wrong":
        _corrupt_sketches(gk.conn)
    if world["later"] is not None:
        # bits set for a chunk gone, chunks above the bits' w_max
        gone, again, words = world["later"]
        if gone < n and gone not in world["deletes"]:
            gk.delete_object(f"o{gone:02d}", 4)
        if again < n and again != gone and again not in world["deletes"]:
            o = world["objects"][again]
            owner = MEMBERS[o.owner] if o.owner is not None else (MEMBERS[0] if o.owner_only else None)
            gk.put_object(f"o{again:02d}", 5, "member_note" if o.owner_only else "board_post", f"s{o.space}",
                          o.tier, _text(o.title), _text(words), owner_sub=owner, owner_only=o.owner_only)
        gk.put_object("late", 1, "board_post", "s0", "T0", "", _text(words))


def _corrupt_sketches(conn: psycopg.Connection[Any]) -> None:
    """Sketches that say nothing true: lengths off, impacts scaled, shuffled and out of order."""
    conn.execute("update groundkit.postings_sketch set n = n * 7 + 3,"
                  " ranks = array(select r * 3 - o from unnest(ranks) with ordinality as u(r, o) order by r desc),"
                  " imps = array(select (x * (0.3 + (o % 5) * 0.4))::real"
                  " from unnest(imps) with ordinality as u(x, o) order by (o * 7919) % 13)")


@settings(max_examples=examples(full=40, quick=12), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(world=world_st)
def test_pruned_topk_is_exact(server_db: tuple[str, str], world: dict[str, Any]) -> None:
    server_dsn, template = server_db
    name = fresh_database(server_dsn, template)
    try:
        with Groundkit.connect(make_conninfo(server_dsn, dbname=name)) as gk:
            _build(gk, world)
            conn = gk.conn
            with psycopg.connect(make_conninfo(server_dsn, dbname=name), autocommit=True) as raw:
                for words, k in world["queries"]:
                    query = " ".join(VOCAB[i] if i < len(VOCAB) else "unseenword" for i in words)
                    for reader in [*MEMBERS, "gone", "nobody"]:
                        want = _brute_force(raw, reader, query, k)
                        exhaustive = _rows(raw, "_search_exhaustive", reader, query, k)
                        _assert_same(exhaustive, want, f"exhaustive {reader!r} {query!r} k={k}")
                        for extra in STRATEGIES:
                            pruned = _rows(raw, "_search_pruned", reader, query, k, extra)
                            _assert_same(pruned, want, f"pruned({extra}) {reader!r} {query!r} k={k}")
                        hits = gk.search(reader, query, k=k)
                        _assert_same([(h.object_id, h.chunk_seq, h.score) for h in hits], want,
                                     f"search {reader!r} {query!r} k={k}")
            assert conn.execute("select groundkit.state_checksum()").fetchone() is not None
    finally:
        drop_database(server_dsn, name)


def test_selective_reader_gets_k_rows(community: Groundkit) -> None:
    """A reader who sees a small fraction, behind many better-scoring invisible chunks."""
    gk = community
    for i in range(60):
        gk.put_object(f"hidden{i}", 1, "board_post", "members", "T3", "granite", "granite granite granite")
    for i in range(12):
        gk.put_object(f"open{i}", 1, "board_post", "open", "T0", "notes", "granite and a lot of other words " * 3)
    with psycopg.connect(gk.conn.info.dsn, autocommit=True) as raw:
        for extra in STRATEGIES:
            rows = _rows(raw, "_search_pruned", "t0", "granite", 10, extra)
            assert len(rows) == 10
            assert {o for o, _s, _sc in rows} <= {f"open{i}" for i in range(12)}
            assert rows == _rows(raw, "_search_exhaustive", "t0", "granite", 10)


def test_rebuild_reproduces_postings_and_impacts(community: Groundkit) -> None:
    gk = community
    gk.put_object("a", 1, "board_post", "open", "T1", "Granite", "granite basalt granite")
    gk.put_object("b", 1, "member_note", "notes", "T0", "mine", "basalt", owner_sub="t1", owner_only=True)
    gk.put_object("c", 1, "board_post", "vault", "T2", "vault", "granite vault")
    gk.put_space("members", "T2")
    gk.put_space("vault", "T1", private=False)
    before = gk.state_checksum()
    gk.rebuild()
    assert gk.state_checksum() == before


def test_per_term_depth_multi_term(community: Groundkit) -> None:
    """Lists deepened per term (MaxScore): a common term read shallow, a rare term deep, and the
    best chunks need both, some of them hidden from the reader."""
    gk = community
    for i in range(80):
        gk.put_object(f"common{i}", 1, "board_post", "open", "T0", "stone",
                      "stone " * (1 + i % 5) + "filler words here " * (i % 7))
    for i in range(30):
        tier = "T3" if i % 3 == 0 else "T0"
        gk.put_object(f"both{i}", 1, "board_post", "open", tier, "granite",
                      "granite stone " * (1 + i % 4) + "other words " * (i % 9))
    for i in range(40):
        gk.put_object(f"rare{i}", 1, "board_post", "open", "T0", "notes", "granite " + "pad " * (i % 11))
    gk.merge_pending()  # the rounds read postings (the pending part is scored whole)
    with psycopg.connect(gk.conn.info.dsn, autocommit=True) as raw:
        for reader in ("t0", "t3"):
            for query in ("granite stone", "stone stone granite", "granite stone filler"):
                for k in (1, 5, 10, 40):
                    want = _rows(raw, "_search_exhaustive", reader, query, k)
                    assert len(want) == k
                    for extra in (*STRATEGIES, ", start_depth => 5"):
                        got = _rows(raw, "_search_pruned", reader, query, k, extra)
                        _assert_same(got, want, f"pruned({extra}) {reader!r} {query!r} k={k}")


def test_skipped_scoring_and_early_exit(community: Groundkit) -> None:
    """Both speed rules of _search_pruned are exercised and exact: rounds that skip scoring
    because the survivors outnumber the postings read (step 7 of docs/bm25.md), and searches
    that end with lists left unread (ub_unseen > 0). A seeded Zipf-like corpus, as in the
    benchmark, where the top k of multi-term queries sits deep in several lists."""
    gk = community
    rng = random.Random(5)
    vocab = [f"w{chr(97 + i % 26)}{chr(97 + i // 26)}" for i in range(260)]
    weights = [1.0 / (r + 1) for r in range(len(vocab))]
    for i in range(700):
        words = rng.choices(vocab, weights, k=rng.randint(8, 40))
        gk.put_object(f"z{i}", 1, "board_post", "open", "T3" if i % 5 == 0 else "T0", "", " ".join(words))
    gk.merge_pending()  # the rounds read postings (the pending part is scored whole)
    queries = [" ".join(rng.choices(vocab[5:60], k=rng.randint(2, 4))) for _ in range(12)]
    messages: list[str] = []
    with psycopg.connect(gk.conn.info.dsn, autocommit=True) as raw:
        raw.add_notice_handler(lambda d: messages.append(d.message_primary or ""))
        for reader in ("t0", "t3"):
            for query in queries:
                for k in (1, 3, 10):
                    want = _rows(raw, "_search_exhaustive", reader, query, k)
                    assert len(want) == k
                    for extra in (", start_depth => 1", ", start_depth => 8", ", strategy => 'scan'",
                                  ", strategy => 'threshold'", ""):
                        raw.execute("set client_min_messages = debug1")
                        got = _rows(raw, "_search_pruned", reader, query, k, extra)
                        raw.execute("reset client_min_messages")
                        _assert_same(got, want, f"pruned({extra}) {reader!r} {query!r} k={k}")
    skipped = [m for m in messages if "survivors" in m and m.endswith("deeper")]
    done = [m for m in messages if m.startswith("groundkit pruned: done at")]
    early = [m for m in done if not m.endswith("with ub_unseen 0")]
    assert skipped, "no round skipped scoring"
    assert early, "no search ended with lists left unread"
    # depths 1 and 8 go through the rounds; the scan, and the automatic choice here, where every
    # query's lists are short (at most 10,000 postings), scan; the threshold rounds end done
    scans = [m for m in messages if m.startswith("groundkit pruned: scan of")]
    thresholds = [m for m in messages if m.startswith("groundkit pruned: threshold theta") and m.endswith("done t")]
    assert len(done) == 2 * len(queries) * 3 * 2
    assert len(scans) + len(thresholds) == 2 * len(queries) * 3 * 3
    assert len(thresholds) > len(queries), "the threshold rounds fell back to the scan nearly always"


def _cut_above_zero(message: str) -> bool:
    """Whether a threshold round's debug message shows a term read to a cut (not probed, cut > 0)."""
    cuts = message.split("cuts {")[1].split("}")[0].split(",")
    probed = message.split("probed {")[1].split("}")[0].split(",")
    return any(p == "f" and float(c) > 0 for c, p in zip(cuts, probed, strict=True))


def _zipf_corpus(gk: Groundkit, n: int = 3000) -> list[str]:
    """A seeded Zipf-like corpus with long lists (a quarter of it T3, the rest T0) and 25
    queries of one or two common terms and one to three rarer ones."""
    from groundkit.models import ContentObject

    rng = random.Random(11)
    vocab = [f"v{chr(97 + i % 26)}{chr(97 + i // 26)}" for i in range(400)]
    weights = [1.0 / (r + 1) ** 1.1 for r in range(len(vocab))]
    objs = []
    for i in range(n):
        topic = rng.sample(vocab[20:], 3)
        words = rng.choices(vocab, weights, k=rng.randint(10, 40)) + topic * rng.randint(1, 3)
        rng.shuffle(words)
        objs.append(ContentObject(object_id=f"z{i}", version=1, content_type="board_post", space_id="open",
                                  tier_visibility="T3" if i % 4 == 0 else "T0", title="", body=" ".join(words)))
    for start in range(0, len(objs), 1000):
        gk.put_objects(objs[start:start + 1000])
    return [" ".join(rng.choices(vocab[:8], k=rng.randint(1, 2)) + rng.sample(vocab[20:], rng.randint(1, 3)))
            for _ in range(25)]


def test_threshold_rounds_all_branches(community: Groundkit) -> None:
    """The threshold rounds (docs/bm25.md) on a seeded Zipf-like corpus with long lists, every
    branch taken and every answer exact: a guess too high that goes again, a round done at a
    level below its guess, the final round at the lower bound, probed terms and terms read to a
    cut, rounds read in two passes by shares (forced with 'shares': the automatic choice
    needs ranges of 20,000 postings), and the scan when no lower bound exists (a filter that
    only a dozen chunks, all of them below hundreds of better ones, pass)."""
    gk = community
    queries = _zipf_corpus(gk)
    queries += ["vxa vzd", "vda vyc vka", "vfb voa", "vab vib via", "vha vna vsa", "vja vla vva", "vta vrb", "vsa vyb"]
    # two terms joined, whose answers hold chunks found in one range only (they fail if such rows
    # are dropped from a join 10 % above the bound hi = (thr_f - p_max) / (w * mult))
    queries += ["vwa vef", "vsa vqe", "vob vac"]
    messages: list[str] = []
    with psycopg.connect(gk.conn.info.dsn, autocommit=True) as raw:
        raw.add_notice_handler(lambda d: messages.append(d.message_primary or ""))
        for reader in ("t0", "t3"):
            for query in queries:
                for k in (1, 5, 10, 30):
                    want = _rows(raw, "_search_exhaustive", reader, query, k)
                    for strategy in ("threshold", "shares", "merge", "pieces"):
                        raw.execute("set client_min_messages = debug1")
                        got = _rows(raw, "_search_pruned", reader, query, k, f", strategy => '{strategy}'")
                        raw.execute("reset client_min_messages")
                        _assert_same(got, want, f"{strategy} {reader!r} {query!r} k={k}")
    # every round that reads one or two terms joins their ranges unless forced otherwise; 'merge'
    # reads every round merged in chunk-id order (some with a term read to a positive cut)
    assert any(m == "groundkit pruned: threshold joins 2 ranges" for m in messages), "no round joined two ranges"
    assert any(m == "groundkit pruned: threshold joins 1 ranges" for m in messages), "no round read one range"
    merges = [(m, after) for m, after in itertools.pairwise(messages)
              if m.startswith("groundkit pruned: threshold merges")]
    assert any(int(m.split(" merges ")[1].split(" ")[0]) >= 3 for m, _ in merges), "no round merged three lists"
    assert any(_cut_above_zero(after) for _, after in merges), "no merged round read a term to a cut"
    # 'merge' reads in one piece (short ranges), 'pieces' in four
    assert any(m.endswith(" in 1 pieces") for m, _ in merges) and any(m.endswith(" in 4 pieces") for m, _ in merges)
    rounds = [m for m in messages if m.startswith("groundkit pruned: threshold guess")]
    new = [m for m in rounds if " range sizes " in m]
    ends = [m for m in messages if m.startswith("groundkit pruned: threshold theta")]
    assert any(m.endswith("done f") for m in ends), "no guess was too high"
    assert any("(final t)" in m for m in new), "no final round read its ranges anew"
    assert any("t" in m.split("probed ")[1].split(" ")[0] for m in new), "nothing probed"
    assert any(_cut_above_zero(m) for m in new), "no list read to a cut"
    # range counts: each range read to a positive cut is counted up to 40,000 postings; a cut
    # lower than where the last round counted it adds only the postings between the two
    counts = [m for m in messages if m.startswith("groundkit pruned: threshold counts")]
    checked = 0
    with psycopg.connect(gk.conn.info.dsn, autocommit=True) as raw:
        for m in counts:
            reader = m.split(" reader ")[1]
            terms = m.split("terms {")[1].split("}")[0].split(",")
            cuts = [float(c) for c in m.split("cuts {")[1].split("}")[0].split(",")]
            counted = m.split("counted {")[1].split("}")[0].split(",")
            for term, cut, n in zip(terms, cuts, counted, strict=True):
                if cut > 0:
                    assert n != "NULL", ("no sketches here: every range is counted", m)
                    row = raw.execute(
                        "select count(*) from groundkit.postings p, groundkit._reader(%s) r"
                        " where p.term = %s and p.vis_key between 0 and r.rank and p.imp >= %s",
                        (reader, term, cut)).fetchone()
                    assert row is not None and int(n) == min(row[0], 40000), (m, term, cut, row)
                    checked += 1
    assert checked
    shares = [m for m in messages if m.startswith("groundkit pruned: threshold shares")]
    # (forced with 'shares': pass 2 ran in each; some read fewer chunks than the ranges hold)
    assert any(int(m.split(" D ")[1].split(" ")[0]) < float(m.split(" of ")[1].split(" ")[0]) for m in shares), \
        "no round read two passes"
    # each round: its guess, then its theta and whether it is done
    below = [
        (before, after) for before, after in itertools.pairwise(messages)
        if before.startswith("groundkit pruned: threshold guess") and after in ends and after.endswith("done t")
        and float(after.split("theta ")[1].split(" ")[0]) < float(before.split("guess ")[1].split(" ")[0])
    ]
    assert below, "no round was done below its guess"
    # a final round cannot fail (its guess is a lower bound on the k-th score)
    finals = [after for before, after in itertools.pairwise(messages)
              if before.startswith("groundkit pruned: threshold guess") and "(final t)" in before]
    assert finals and all(m.endswith("done t") for m in finals), finals
    # x_lb waits for three terms or more until a round needs it: every such search starts
    # without it; two-term searches score it at once; a commitment to the final round and a
    # round that kept fewer than k visible chunks score it when it is still missing
    # (docs/bm25.md, "x_lb when a round needs it")
    starts = [m for m in messages if m.startswith("groundkit pruned: threshold terms ")]
    n_terms = [len(m.split("terms {")[1].split("}")[0].split(",")) for m in starts]
    first_x_lb = [float(m.split(" x_lb ")[1].split(" ")[0]) for m in starts]
    assert 2 in n_terms and any(n >= 3 for n in n_terms)
    assert all(x == -math.inf for n, x in zip(n_terms, first_x_lb, strict=True) if n >= 3)
    assert any(math.isfinite(x) for n, x in zip(n_terms, first_x_lb, strict=True) if n == 2)
    waited = [m for m in messages if m.startswith("groundkit pruned: threshold x_lb ")]
    assert any(m.endswith(" for the final round") for m in waited), "x_lb never scored for a final round"
    assert any(" after a round that kept " in m for m in waited), "x_lb never scored after a round short of k"
    # only a dozen chunks of one content type may be returned, all of them below hundreds of
    # better ones: no lower bound from the top of the lists, so the threshold rounds hand over to
    # the scan; still exactly k rows
    for i in range(12):
        gk.put_object(f"ev{i}", 1, "event", "open", "T0", "", "vaa vba and other words " * 3)
    with psycopg.connect(gk.conn.info.dsn, autocommit=True) as raw:
        raw.add_notice_handler(lambda d: messages.append(d.message_primary or ""))
        messages.clear()
        only_events = ", content_types => array['event'], strategy => 'threshold'"
        raw.execute("set client_min_messages = debug1")
        got = _rows(raw, "_search_pruned", "t0", "vaa vba", 10, only_events)
        raw.execute("reset client_min_messages")
        assert got == _rows(raw, "_search_exhaustive", "t0", "vaa vba", 10, ", content_types => array['event']")
        assert len(got) == 10
        assert {o for o, _s, _sc in got} <= {f"ev{i}" for i in range(12)}
        assert any(m.startswith("groundkit pruned: scan of") for m in messages), messages


def _sketch_ranks(n: int) -> list[int]:
    """The 1-based ranks a sketch of an n-posting list holds (migration 0003)."""
    ranks = [min(256, n)]
    i = 2
    while math.floor(256 * 2 ** ((i - 2) / 4)) < n:
        ranks.append(min(math.floor(256 * 2 ** ((i - 1) / 4)), n))
        i += 1
    return ranks


def _size_messages(raw: psycopg.Connection[Any], queries: list[str], ks: tuple[int, ...]) -> list[str]:
    """Run every query through the threshold rounds (all three forms) for t0 and t3, assert each
    answer equals the exhaustive one, and return the rounds' range-size messages."""
    messages: list[str] = []
    raw.add_notice_handler(lambda d: messages.append(d.message_primary or ""))
    for reader in ("t0", "t3"):
        for query in queries:
            for k in ks:
                want = _rows(raw, "_search_exhaustive", reader, query, k)
                for extra in (", strategy => 'threshold'", ", strategy => 'shares'", ""):
                    raw.execute("set client_min_messages = debug1")
                    got = _rows(raw, "_search_pruned", reader, query, k, extra)
                    raw.execute("reset client_min_messages")
                    _assert_same(got, want, f"{extra} {reader!r} {query!r} k={k}")
    return [m for m in messages if m.startswith("groundkit pruned: threshold counts")]


def test_sketched_range_sizes(community: Groundkit) -> None:
    """Range sizes read off sketches (docs/bm25.md, "Sketches"). analyze_postings sketches
    exactly the lists of shared content at least min_postings long, each holding the impacts
    at its ranks; with fresh sketches every size the threshold rounds take from them is within
    one sketch step (2^(1/4)) of the true count; with stale sketches (the corpus grew) and with
    wrong ones every answer is still exact; rebuild, reindex_impacts and set_tier_rank sketch
    afresh with config.sketch_min_postings."""
    gk = community
    queries = _zipf_corpus(gk)
    from groundkit.models import ContentObject

    # a long list in a private space's bucket: never sketched (its length is no shared statistic)
    gk.put_objects([ContentObject(object_id=f"p{i}", version=1, content_type="board_post", space_id="vault",
                                  tier_visibility="T0", title="", body="vaa vba") for i in range(400)])
    with psycopg.connect(gk.conn.info.dsn, autocommit=True) as raw:
        with pytest.raises(psycopg.Error) as bad:
            raw.execute("select groundkit.analyze_postings(min_postings => 0)")
        assert bad.value.sqlstate == "GK005"
        row = raw.execute("select groundkit.analyze_postings(min_postings => 300)").fetchone()
        lists = raw.execute("select term, scope from groundkit.term_stats group by term, scope"
                            " having sum(df) >= 300 order by 1, 2").fetchall()
        sketches = raw.execute("select term, vis_key, n, imps from groundkit.postings_sketch order by 1, 2").fetchall()
        assert row is not None and row[0] == len(lists) == len(sketches) > 10
        assert [(t, v) for t, v, _n, _i in sketches] == lists  # shared content only, every long list
        for term, vis_key, n, imps in sketches[:12]:
            list_imps = [x for (x,) in raw.execute(
                "select imp from groundkit.postings where term = %s and vis_key = %s order by imp desc",
                (term, vis_key)).fetchall()]
            stored = raw.execute("select ranks from groundkit.postings_sketch where term = %s and vis_key = %s",
                                 (term, vis_key)).fetchone()
            assert n == len(list_imps) and stored is not None and stored[0] == _sketch_ranks(n)
            assert imps == [list_imps[r - 1] for r in _sketch_ranks(n)]

        # the size of a range as one sketch gives it, worked out here: between the two sketched
        # ranks whose impacts bracket the cut (linear in the impact), the whole list at or below
        # its last impact, nothing from the sketch (the list is counted) above its first
        # (real values come as their shortest decimal text: round them back to float4)
        by_list = {(t, v): (n, [struct.unpack("f", struct.pack("f", x))[0] for x in imps])
                   for t, v, n, imps in sketches}
        interpolated = 0
        for (term, bucket), (n, imps) in list(by_list.items())[:12]:
            ranks = _sketch_ranks(n)
            lo, hi = min(imps), max(imps)
            for step in range(-2, 43):
                cut = lo + (hi - lo) * step / 40
                row = raw.execute("select n, keys from groundkit._sketched_size(%s, %s, %s)",
                                  (term, cut, [bucket, 1234567])).fetchone()
                real = raw.execute("select count(*) from groundkit.postings where term = %s and vis_key = %s"
                                   " and imp >= %s", (term, bucket, cut)).fetchone()
                assert row is not None and real is not None
                above = sum(1 for x in imps if x >= cut)
                if above == 0:
                    assert row == (0, []), (term, cut)
                    continue
                if above == len(imps):
                    want = float(n)
                else:
                    r1, r2 = ranks[above - 1], ranks[above]
                    want = r1 + (r2 - r1) * (imps[above - 1] - cut) / (imps[above - 1] - imps[above])
                    interpolated += 1
                assert row[1] == [bucket] and row[0] == pytest.approx(want, rel=1e-9), (term, cut)
                # the true count lies in the same bracket, so the two are within one sketch step
                # (2^(1/4)) of each other
                assert real[0] / 1.19 - 1 <= row[0] <= real[0] * 1.19 + 1, (term, cut, real[0], row[0])
        assert interpolated > 100

        # the threshold rounds take their sizes from the sketches (the whole list where the cut
        # is below it: impacts vary little on this corpus) and count the rest
        sizes = _size_messages(raw, queries, (5, 10))
        checked = 0
        for m in sizes:
            rank = {"t0": 0, "t3": 3}[m.split(" reader ")[1]]
            terms = m.split("terms {")[1].split("}")[0].split(",")
            cuts = [float(c) for c in m.split("cuts {")[1].split("}")[0].split(",")]
            counted = m.split("counted {")[1].split("}")[0].split(",")
            estimated = [float(x) for x in m.split("sizes {")[1].split("}")[0].split(",")]
            for term, cut, n_counted, est in zip(terms, cuts, counted, estimated, strict=True):
                if cut > 0 and n_counted == "NULL":
                    parts = raw.execute("select sum(z.n), array_agg(k) from generate_series(0, %s) b,"
                                        " groundkit._sketched_size(%s, %s, array[b::bigint]) z"
                                        " left join lateral unnest(z.keys) k on true", (rank, term, cut)).fetchone()
                    counted_rest = raw.execute(
                        "select count(*) from groundkit.postings where term = %s and vis_key between 0 and %s"
                        " and vis_key <> all(%s) and imp >= %s", (term, rank, [k for k in parts[1] if k is not None]
                                                                  if parts else [], cut)).fetchone()
                    assert parts is not None and counted_rest is not None
                    # (the rest counted up to 40,000 postings together with the sketched part)
                    rest = min(counted_rest[0], max(0, 40000 - min(math.ceil(float(parts[0])), 40000)))
                    assert est == pytest.approx(float(parts[0]) + rest, rel=1e-9), (m, term)
                    checked += 1
        assert checked > 20

        # stale: 600 more objects after the sketches were made; then wrong sketches
        queries = _zipf_corpus(gk, n=3600)[:10]
        _size_messages(raw, queries, (10,))
        # a stale sketch is scaled by its list's live length: a whole list is its live length
        for (term, bucket), (n, _imps) in list(by_list.items())[:12]:
            live = raw.execute("select count(*) from groundkit.postings where term = %s and vis_key = %s",
                               (term, bucket)).fetchone()
            row = raw.execute("select n from groundkit._sketched_size(%s, 0, %s)", (term, [bucket])).fetchone()
            assert live is not None and row is not None and live[0] > n and row[0] == pytest.approx(live[0])
        _corrupt_sketches(raw)
        _size_messages(raw, queries, (10,))

        # the admin calls that change lists or impacts sketch afresh, with the configured minimum
        raw.execute("update groundkit.config set sketch_min_postings = 300")
        for call in ("select groundkit.rebuild()", "select groundkit.reindex_impacts()",
                     "select groundkit.set_tier_rank('T3', 7)"):
            _corrupt_sketches(raw)
            raw.execute(call)
            after = raw.execute("select term, vis_key, n, imps from groundkit.postings_sketch order by 1, 2").fetchall()
            raw.execute("select groundkit.analyze_postings()")
            fresh = raw.execute("select term, vis_key, n, imps from groundkit.postings_sketch order by 1, 2").fetchall()
            assert after == fresh and len(fresh) > 10, call
        assert {v for _t, v, _n, _i in fresh} == {0, 7}  # T3's lists moved to their new rank


def test_automatic_threshold_rounds_are_exact(community: Groundkit) -> None:
    """Without a strategy argument (what groundkit.search calls), on a Zipf-like corpus whose
    common lists are long enough for the threshold rounds: searches of several rounds, a new
    round after a failed one among them, each answer exact. (Every other threshold test names
    its strategy; with none, a test of the argument is null, and a round whose extension test
    came out null once read nothing and kept the last round's chunks.)"""
    gk = community
    queries = _zipf_corpus(gk, n=12_000)
    messages: list[str] = []
    several = 0
    with psycopg.connect(gk.conn.info.dsn, autocommit=True) as raw:
        raw.add_notice_handler(lambda d: messages.append(d.message_primary or ""))
        for reader in ("t0", "t3"):
            for query in queries:
                for k in (1, 10):
                    want = _rows(raw, "_search_exhaustive", reader, query, k)
                    messages.clear()
                    raw.execute("set client_min_messages = debug1")
                    got = _rows(raw, "_search_pruned", reader, query, k)
                    raw.execute("reset client_min_messages")
                    _assert_same(got, want, f"auto {reader!r} {query!r} k={k}")
                    new = [m for m in messages
                           if m.startswith("groundkit pruned: threshold guess") and " range sizes " in m]
                    several += len(new) >= 2
    assert several, "no automatic search ran a new threshold round after a failed one"


def test_threshold_round_done_below_its_guess(community: Groundkit) -> None:
    """A threshold round may end at a level below its guess only above the probed terms' maxima:
    there, chunks holding nothing but probed terms (never read, only looked up) can reach the
    top k. A common term weighted up by repetition in the query and probed, short chunks that
    hold only it, and a rarer term read in longer chunks that also hold the common one. Found
    by search over such worlds (dropping the check in `done` returns wrong answers here)."""
    from groundkit.models import ContentObject

    gk = community
    objs = [ContentObject(object_id=f"f{i}", version=1, content_type="board_post", space_id="open",
                          tier_visibility="T0", title="", body="fx") for i in range(300)]
    worlds = [(5, 1, 0, 120), (5, 3, 0, 120), (5, 3, 8, 40), (5, 3, 8, 120), (3, 3, 8, 120), (2, 1, 30, 40)]
    for n, (ta, tb, pad, na) in enumerate(worlds):
        a, b = f"acommon{chr(97 + n)}", f"brare{chr(97 + n)}"
        objs += [ContentObject(object_id=f"a{n}_{i}", version=1, content_type="board_post", space_id="open",
                               tier_visibility="T0", title="", body=(a + " ") * ta) for i in range(na)]
        objs += [ContentObject(object_id=f"b{n}_{i}", version=1, content_type="board_post", space_id="open",
                               tier_visibility="T0", title="",
                               body=b + " " + (a + " ") * (tb + i % 3) + "fy " * (pad + i)) for i in range(12)]
    gk.put_objects(objs)
    with psycopg.connect(gk.conn.info.dsn, autocommit=True) as raw:
        for n in range(len(worlds)):
            a, b = f"acommon{chr(97 + n)}", f"brare{chr(97 + n)}"
            for repeat in (1, 6, 10):
                query = (a + " ") * repeat + b
                for k in (5, 10):
                    want = _rows(raw, "_search_exhaustive", "t0", query, k)
                    for depth in (0, 1, None):
                        extra = ", strategy => 'threshold'" + (f", start_depth => {depth}" if depth is not None else "")
                        got = _rows(raw, "_search_pruned", "t0", query, k, extra)
                        _assert_same(got, want, f"threshold({extra}) {query!r} k={k}")


def test_strategy_argument_is_checked(community: Groundkit) -> None:
    with psycopg.connect(community.conn.info.dsn, autocommit=True) as raw, pytest.raises(psycopg.Error) as err:
        raw.execute("select * from groundkit._search_pruned('t0', 'granite', 10, strategy => 'fastest')")
    assert err.value.sqlstate == "GK005"
    assert "strategy must be scan, threshold, shares, merge, pieces or rounds" in str(err.value)


def test_automatic_choice_between_strategies(community: Groundkit, server_dsn: str, dsn: str) -> None:
    """Without strategy or start_depth, _search_pruned runs the pruned rounds for one term (over a
    long list or a short one), scans two or three terms when the reader's lists hold at most 10,000
    postings and four or more terms when they hold at most 20,000, and runs the threshold rounds
    for two or more terms over more (docs/bm25.md, "Three strategies"). How such a round reads
    ("How a round reads its ranges"): two long ranges with
    too many postings at or above their shares for two passes are joined, without a pass 1; four
    whole lists are merged in chunk-id order, in one piece (41,000 postings), and five in two
    pieces planned for parallel workers (61,500: at least 50,000), also for a login that may only
    search; three ranges with few such postings are read in two passes; a final round over four
    whole lists looks the two common ones up for the chunks of the two rarer ones ("Candidates of
    a final round"). Every answer equals the exhaustive path."""
    from groundkit.models import ContentObject

    gk = community
    n = 20_500  # 'granite' in every object: one list longer than 20,000 postings
    objs = [
        ContentObject(object_id=f"g{i}", version=1, content_type="board_post", space_id="open",
                      tier_visibility="T0", title="",
                      body="granite " * (1 + i % 4) + "filler " * (i % 13) + "marble "
                      + " ".join(w for j, w in enumerate(("basalt", "quartz", "slate")) if i % 3 == j))
        for i in range(n)
    ]
    for start in range(0, n, 2500):
        gk.put_objects(objs[start:start + 2500])
    # 'obsidian' and 'pumice' in 150 more objects: two short lists
    gk.put_objects([ContentObject(object_id=f"o{i}", version=1, content_type="board_post", space_id="open",
                                  tier_visibility="T0", title="", body="obsidian pumice " + "ash " * (i % 5))
                    for i in range(150)])
    messages: list[str] = []
    reads: dict[tuple[str, str], list[str]] = {}
    probed: dict[str, list[str]] = {}

    def read_messages() -> list[str]:
        # how each round read: two passes by shares, a join, or a merge
        return [m.split("threshold ")[1] for m in messages
                if m.startswith(("groundkit pruned: threshold shares", "groundkit pruned: threshold joins",
                                 "groundkit pruned: threshold merges"))]

    with psycopg.connect(gk.conn.info.dsn, autocommit=True) as raw:
        raw.add_notice_handler(lambda d: messages.append(d.message_primary or ""))
        for query, strategy in [("granite", "rounds"), ("quartz", "rounds"), ("granite basalt", "threshold"),
                                ("granite basalt quartz slate", "threshold"), ("granite filler basalt", "threshold"),
                                ("granite marble basalt quartz slate", "threshold"),
                                ("granite filler basalt quartz", "threshold"),
                                # two terms over 13,667 postings; two over 300; four over 13,967
                                ("basalt quartz", "threshold"), ("obsidian pumice", "scan"),
                                ("basalt quartz obsidian pumice", "scan")]:
            for reader in ("t0", "t3"):
                want = _rows(raw, "_search_exhaustive", reader, query, 10)
                assert len(want) == 10
                messages.clear()
                raw.execute("set client_min_messages = debug1")
                got = _rows(raw, "_search_pruned", reader, query, 10)
                raw.execute("reset client_min_messages")
                _assert_same(got, want, f"auto {reader!r} {query!r}")
                ran = {
                    "scan": any(m.startswith("groundkit pruned: scan of") for m in messages),
                    "rounds": any(m.startswith("groundkit pruned: done at") for m in messages),
                    "threshold": any(m.startswith("groundkit pruned: threshold") for m in messages),
                }
                assert ran == {name: name == strategy for name in ran}, (query, messages)
                reads[(query, reader)] = read_messages()
                if query == "granite filler basalt quartz":
                    probed[reader] = [m for m in messages if m.startswith("groundkit pruned: threshold guess")]
        for reader in ("t0", "t3"):
            assert reads[("granite basalt", reader)] == ["joins 2 ranges"], reads
            assert reads[("granite basalt quartz slate", reader)] == ["merges 4 lists in 1 pieces"], reads
            # 61,500 postings: in four pieces, for parallel workers
            assert reads[("granite marble basalt quartz slate", reader)] == ["merges 5 lists in 4 pieces"], reads
            two = reads[("granite filler basalt", reader)]
            assert len(two) == 1 and two[0].startswith("shares ") and two[0].endswith(", two passes"), reads
            # a final round over whole lists: granite and filler (in 20,500 and 18,923 chunks) are
            # looked up for the chunks of basalt and quartz (13,667 postings), estimated at a few
            # thousand, rather than all four lists merged (53,090 postings)
            assert reads[("granite filler basalt quartz", reader)] == ["joins 2 ranges"], reads
            assert any("(final t)" in m and "probed {t,t,f,f}" in m for m in probed[reader]), probed

    # the same through groundkit.search, for a login that may only search: read in four pieces (in
    # parallel workers, which run as the search function's owner, like the leader), same answer;
    # the login is told nothing of how search ran (its figures come from lists that can hold
    # chunks the reader may not see: tests/test_side_channels.py)
    with psycopg.connect(gk.conn.info.dsn, autocommit=True) as raw:
        want = _rows(raw, "_search_exhaustive", "t3", "granite marble basalt quartz slate", 10)
    with roles.login_roles(server_dsn, dsn) as who, psycopg.connect(who.reader, autocommit=True) as conn:
        messages.clear()
        conn.add_notice_handler(lambda d: messages.append(d.message_primary or ""))
        conn.execute("set client_min_messages = debug1")
        rows = conn.execute("select object_id, chunk_seq, score from groundkit.search('t3',"
                            " 'granite marble basalt quartz slate', 10)").fetchall()
        got = sorted(((str(o), int(q), float(sc)) for o, q, sc in rows), key=lambda r: (-r[2], r[0], r[1]))
        _assert_same(got, want, "search as a reader login")
        assert not [m for m in messages if m.startswith("groundkit")], messages


ORACLE_NAME = "_search_pruned_oracle"
ORACLE_THRESHOLD_NAME = "_search_threshold_oracle"
ORACLE_FIRST_GUESS = ("    guess := greatest(x_lb, groundkit._guess_first() * least(tot, t_maxcs[nt]"
                      " + coalesce(t_maxcs[nt - 1], 0)));\n")
ORACLE_AFTER_MAXIMA = "    full_n := (select sum(x) from unnest(t_dfs) as x);\n"
ORACLE_BEFORE_SCAN = "    if v_strategy = 'scan' then\n"


def _sql_function(file: str, name: str) -> str:
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "sql" / file).read_text(encoding="utf-8")
    start = text.index(f"create or replace function groundkit.{name}(")
    return text[start:text.index("\n$$;\n", start) + len("\n$$;\n")]


def _oracle_function() -> str:
    """The planner _search_pruned (sql/069_search.sql) and _search_threshold
    (sql/064_search_threshold.sql), renamed ORACLE_NAME and ORACLE_THRESHOLD_NAME, with two hooks
    read from session settings: ``groundkit.oracle_theta`` sets the threshold rounds' first guess
    just below it, and ``groundkit.oracle_arm = 'prologue'`` returns nothing once the reader,
    terms, statistics and strategy are known."""
    thr = _sql_function("064_search_threshold.sql", "_search_threshold")
    planner = _sql_function("069_search.sql", "_search_pruned")
    for fn, markers in ((thr, (ORACLE_FIRST_GUESS, ORACLE_AFTER_MAXIMA)),
                        (planner, (ORACLE_BEFORE_SCAN, "groundkit._search_threshold("))):
        for marker in markers:
            assert fn.count(marker) == 1, f"the search SQL changed: {marker.strip()!r} is not found once"
    prologue = "if current_setting('groundkit.oracle_arm', true) = 'prologue' then return; end if;\n"
    thr = thr.replace(ORACLE_FIRST_GUESS, "    guess := greatest(x_lb, current_setting('groundkit.oracle_theta')"
                                          "::double precision * (1 - 1e-9));\n")
    thr = thr.replace(ORACLE_AFTER_MAXIMA, ORACLE_AFTER_MAXIMA + "    " + prologue)
    # (the threshold rounds return at their own hook, after the maxima; the others before they start)
    early = prologue.replace("= 'prologue'", "= 'prologue' and v_strategy <> 'threshold'")
    planner = planner.replace(ORACLE_BEFORE_SCAN, "    " + early + ORACLE_BEFORE_SCAN)
    planner = planner.replace("groundkit._search_threshold(", f"groundkit.{ORACLE_THRESHOLD_NAME}(")
    return (thr.replace("_search_threshold", ORACLE_THRESHOLD_NAME) + "\n"
            + planner.replace("_search_pruned", ORACLE_NAME))  # names and qualified parameter names


def test_any_first_guess_is_exact(community: Groundkit) -> None:
    """The threshold rounds are exact whatever their first guess: below the k-th score, at it
    and above it (docs/bm25/search.md): the first guess is set through a hook in a copy of the
    planner and the threshold rounds (_oracle_function). The copy's 'prologue' arm returns nothing."""
    gk = community
    queries = _zipf_corpus(gk)[:10]
    with psycopg.connect(gk.conn.info.dsn, autocommit=True) as raw:
        raw.execute(_oracle_function().encode())
        for query in queries:
            for k in (3, 10):
                want = _rows(raw, "_search_exhaustive", "t3", query, k)
                theta = want[-1][2] if len(want) == k else float("-inf")
                for scale in (0.3, 0.9, 1.0, 1.1, 3.0):
                    raw.execute("select set_config('groundkit.oracle_arm', '', false),"
                                " set_config('groundkit.oracle_theta', %s, false)", (repr(theta * scale),))
                    got = _rows(raw, ORACLE_NAME, "t3", query, k, ", strategy => 'threshold'")
                    _assert_same(got, want, f"first guess {scale} theta, {query!r} k={k}")
                raw.execute("select set_config('groundkit.oracle_arm', 'prologue', false)")
                assert _rows(raw, ORACLE_NAME, "t3", query, k, ", strategy => 'threshold'") == []
