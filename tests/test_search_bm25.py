"""Issue 2, search: real BM25 checked against a brute-force BM25 written here, plain-text queries,
bounds, k results despite invisible matches, non-negative scores, deterministic order, and
statistics that do not leak content a reader cannot see.

The oracle is independent of groundkit's tables: it analyses the raw text it wrote with
``to_tsvector('groundkit.english', ...)`` and computes visibility, statistics and scores itself.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from groundkit import Groundkit, InvalidArgument, SearchHit
from tests.test_search_exact import score_part

Raw = psycopg.Connection[tuple[Any, ...]]
Rollback = Callable[[], AbstractContextManager[Groundkit]]

K1, B = 0.9, 0.4
RANK = {"T0": 0, "T1": 1, "T2": 2, "T3": 3}


# -- the oracle ------------------------------------------------------------------------------


def analyze(conn: psycopg.Connection[Any], text: str) -> dict[str, int]:
    """Lexeme -> occurrences, straight from Postgres' analyzer on the raw text."""
    with conn.cursor(row_factory=psycopg.rows.tuple_row) as cur:
        rows = cur.execute(
            "select lexeme, array_length(positions, 1) from unnest(to_tsvector('groundkit.english', %s))",
            (text,),
        ).fetchall()
    return {lexeme: (n or 1) for lexeme, n in rows}


@dataclass
class Doc:
    object_id: str
    content_type: str
    space: str
    tier: str
    title: str
    body: str
    owner: str | None = None
    owner_only: bool = False
    live: bool = True
    terms: dict[str, int] = field(default_factory=dict)

    @property
    def length(self) -> int:
        return sum(self.terms.values())


@dataclass
class World:
    spaces: dict[str, tuple[str, bool]]  # space -> (min_tier, private)
    readers: dict[str, str]  # reader -> tier (all active)
    grants: set[tuple[str, str]]  # (space, reader)
    docs: list[Doc]

    def visible(self, doc: Doc, reader: str) -> bool:
        rank = RANK[self.readers[reader]]
        min_tier, private = self.spaces[doc.space]
        return (doc.live and rank >= RANK[doc.tier] and rank >= RANK[min_tier]
                and (not private or (doc.space, reader) in self.grants)
                and (not doc.owner_only or doc.owner == reader))

    def in_statistics(self, doc: Doc, reader: str) -> bool:
        """Shared content whose scope, max(rank(object tier), rank(space min tier)), is within
        the reader's rank. Private spaces and owner-only objects never count."""
        min_tier, private = self.spaces[doc.space]
        scope = max(RANK[doc.tier], RANK[min_tier])
        return doc.live and not private and not doc.owner_only and scope <= RANK[self.readers[reader]]

    def bm25(self, reader: str, query_terms: dict[str, int], content_types: list[str] | None = None,
             space_ids: list[str] | None = None) -> list[tuple[float, str, int]]:
        """Every visible matching chunk as (score, object_id, chunk_seq), best first."""
        stats = [d for d in self.docs if self.in_statistics(d, reader)]
        n = len(stats)
        total = sum(d.length for d in stats)
        avgdl = total / n if n > 0 and total > 0 else 1.0
        idf = {}
        for term, qtf in query_terms.items():
            df = sum(1 for d in stats if term in d.terms)
            idf[term] = qtf * math.log(1 + (n - df + 0.5) / (df + 0.5))
        ranked = []
        for d in self.docs:
            if not self.visible(d, reader):
                continue
            if content_types is not None and d.content_type not in content_types:
                continue
            if space_ids is not None and d.space not in space_ids:
                continue
            matched = [t for t in query_terms if t in d.terms]
            if not matched:
                continue
            score = sum(
                score_part(idf[t], d.terms[t] / (d.terms[t] + K1 * (1 - B + B * d.length / avgdl)))
                for t in matched
            )
            ranked.append((score, d.object_id, 0))
        ranked.sort(key=lambda r: (-r[0], r[1], r[2]))
        return ranked


def check_against_oracle(hits: list[SearchHit], oracle: list[tuple[float, str, int]], k: int) -> None:
    """Same scores; same top-k set and order up to float ties; ties broken by object_id, chunk_seq."""
    assert len(hits) == min(k, len(oracle))
    by_id = {(oid, seq): score for score, oid, seq in oracle}
    keys = [(h.object_id, h.chunk_seq) for h in hits]
    assert len(set(keys)) == len(keys)
    for i, h in enumerate(hits):
        assert (h.object_id, h.chunk_seq) in by_id, "a hit the oracle does not see"
        assert math.isclose(h.score, by_id[(h.object_id, h.chunk_seq)], rel_tol=1e-9, abs_tol=1e-12)
        assert math.isclose(h.score, oracle[i][0], rel_tol=1e-9, abs_tol=1e-12), "out of order"
        assert h.score >= 0
    for a, b in itertools.pairwise(hits):
        assert a.score >= b.score
        if a.score == b.score:
            assert (a.object_id, a.chunk_seq) < (b.object_id, b.chunk_seq)
    if hits:
        # everything the oracle ranks clearly above the last hit is in the result
        floor = hits[-1].score
        for score, oid, seq in oracle:
            if score > floor and not math.isclose(score, floor, rel_tol=1e-9):
                assert (oid, seq) in keys


# -- random worlds ---------------------------------------------------------------------------

VOCAB = ["apple", "apples", "river", "stone", "cloud", "garden", "gardening", "paint", "music",
         "winter", "the", "and", "zebra", "orchard"]
SPACES = {"open": ("T0", False), "members": ("T1", False), "upper": ("T2", False),
          "vault": ("T0", True), "inner": ("T1", True)}
CONTENT_TYPES = ["board_post", "course_section", "event", "document", "member_note"]
READERS = {"r0": "T0", "r1": "T1", "r2": "T2", "r3": "T3"}

words = st.lists(st.sampled_from(VOCAB), min_size=0, max_size=12).map(" ".join)


@st.composite
def worlds(draw: st.DrawFn) -> tuple[World, list[tuple[str, int, str, Any]]]:
    """A world and the writes that build it: puts, retiers, deletes and space policy changes."""
    docs: list[Doc] = []
    later: list[tuple[str, int, str, Any]] = []
    for i in range(draw(st.integers(1, 12))):
        owner_only = draw(st.booleans()) and draw(st.booleans())
        doc = Doc(
            object_id=f"d{i:02d}",
            content_type=draw(st.sampled_from(CONTENT_TYPES)),
            space=draw(st.sampled_from(sorted(SPACES))),
            tier=draw(st.sampled_from(sorted(RANK))),
            title=draw(st.lists(st.sampled_from(VOCAB), max_size=3).map(" ".join)),
            body=draw(words),
            owner=draw(st.sampled_from(sorted(READERS))) if owner_only else None,
            owner_only=owner_only,
        )
        docs.append(doc)
        change = draw(st.sampled_from(["none", "none", "retier", "delete"]))
        if change == "retier":
            new_tier = draw(st.sampled_from(sorted(RANK)))
            later.append(("retier", i, new_tier, None))
        elif change == "delete":
            later.append(("delete", i, "", None))
    for space in draw(st.lists(st.sampled_from(sorted(SPACES)), max_size=2, unique=True)):
        policy = (draw(st.sampled_from(sorted(RANK))), draw(st.booleans()))
        later.append(("space", 0, space, policy))
    grants = {(s, r) for s in sorted(SPACES) for r in sorted(READERS) if draw(st.booleans())}
    world = World(spaces=dict(SPACES), readers=dict(READERS), grants=grants, docs=docs)
    later = draw(st.permutations(later))
    return world, later


def build(gk: Groundkit, world: World, later: list[tuple[str, int, str, Any]]) -> None:
    for sub, tier in world.readers.items():
        gk.put_member(sub, tier)
    for space, (min_tier, private) in world.spaces.items():
        gk.put_space(space, min_tier, private)
    for space, reader in sorted(world.grants):
        gk.grant_space(space, reader)
    for d in world.docs:
        gk.put_object(d.object_id, 1, d.content_type, d.space, d.tier, d.title, d.body,
                      owner_sub=d.owner, owner_only=d.owner_only)
        d.terms = analyze(gk.conn, d.title + "\n" + d.body)
    for kind, i, arg, policy in later:
        if kind == "retier":
            gk.retier_object(world.docs[i].object_id, 2, arg)
            world.docs[i].tier = arg
        elif kind == "delete":
            gk.delete_object(world.docs[i].object_id, 2)
            world.docs[i].live = False
        else:
            gk.put_space(arg, policy[0], policy[1])
            world.spaces[arg] = policy


queries = st.lists(st.sampled_from([*VOCAB, "rivers", "&", "!", "'"]), min_size=1, max_size=5).map(" ".join)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    case=worlds(),
    qs=st.lists(queries, min_size=1, max_size=3),
    k=st.integers(1, 12),
    content_types=st.none() | st.lists(st.sampled_from(CONTENT_TYPES), max_size=2, unique=True),
    space_ids=st.none() | st.lists(st.sampled_from(sorted(SPACES)), max_size=2, unique=True),
)
def test_bm25_matches_brute_force(
    gk: Groundkit, rolled_back: Rollback, case: tuple[World, list[tuple[str, int, str, Any]]],
    qs: list[str], k: int, content_types: list[str] | None, space_ids: list[str] | None,
) -> None:
    world, later = case
    with rolled_back() as g:
        build(g, world, later)
        for q in qs:
            query_terms = analyze(g.conn, q)
            for reader in world.readers:
                oracle = world.bm25(reader, query_terms)
                check_against_oracle(g.search(reader, q, k=k), oracle, k)
                filtered = world.bm25(reader, query_terms, content_types, space_ids)
                hits = g.search(reader, q, k=k, content_types=content_types, space_ids=space_ids)
                check_against_oracle(hits, filtered, k)


def test_oracle_agrees_on_a_hand_checked_example(gk: Groundkit) -> None:
    """A worked example, so that the oracle itself is checked against arithmetic done by hand."""
    gk.put_member("r", "T0")
    gk.put_space("open", "T0")
    gk.put_object("a", 1, "board_post", "open", "T0", "", "orchard orchard river")
    gk.put_object("b", 1, "board_post", "open", "T0", "", "river stone")
    # N = 2, avgdl = (3 + 2) / 2 = 2.5; df(orchard) = 1
    idf = math.log(1 + (2 - 1 + 0.5) / (1 + 0.5))
    expected = idf * 2 / (2 + K1 * (1 - B + B * 3 / 2.5))
    hits = gk.search("r", "orchard")
    assert [h.object_id for h in hits] == ["a"]
    assert math.isclose(hits[0].score, expected, rel_tol=1e-12)
    # a query term repeated counts twice
    assert math.isclose(gk.search("r", "orchard orchards")[0].score, 2 * expected, rel_tol=1e-12)


# -- plain-text queries and bounds -------------------------------------------------------------


@pytest.fixture
def corpus(community: Groundkit) -> Groundkit:
    gk = community
    gk.put_object("a", 1, "board_post", "open", "T0", "Glaze", "glaze recipes: celadon & tenmoku")
    gk.put_object("b", 1, "board_post", "open", "T0", "Kiln", "kiln (electric) firing schedule")
    return gk


METACHARACTERS = [
    "&", "|", "!", ":", "*", "(", ")", "'", "\\", "<->", "<2>", "glaze & kiln", "glaze | kiln", "!glaze",
    "glaze:*", "glaze:A", "(glaze", "glaze)", "'glaze'", "''", "\\'", "glaze <-> kiln", "glaze <1> kiln",
    "&&&|||!!!", "':*", "\"glaze\"", "glaze\\", "-glaze", "glaze OR kiln", "", "   ", "%_", "$$", ";--",
    "\x01", "é ü ß 漢字", "🙂",
]


def test_tsquery_metacharacters_never_raise(corpus: Groundkit, raw: Raw) -> None:
    for query in METACHARACTERS:
        hits = corpus.search("t0", query)
        assert all(h.score >= 0 for h in hits)
        rows = raw.execute("select object_id from groundkit.search(reader_sub => 't0', query => %s)",
                           (query,)).fetchall()
        assert sorted(r[0] for r in rows) == sorted(h.object_id for h in hits), query


def test_metacharacters_are_treated_as_text(corpus: Groundkit) -> None:
    assert {h.object_id for h in corpus.search("t0", "glaze & kiln")} == {"a", "b"}
    assert {h.object_id for h in corpus.search("t0", "!kiln")} == {"b"}
    assert {h.object_id for h in corpus.search("t0", "(electric):*")} == {"b"}


def test_query_over_32768_chars_raises(corpus: Groundkit, raw: Raw) -> None:
    assert corpus.search("t0", "glaze " + "x" * 32762) is not None  # exactly 32,768 is allowed
    with pytest.raises(InvalidArgument):
        corpus.search("t0", "x" * 32769)
    with pytest.raises(psycopg.Error) as info:
        raw.execute("select * from groundkit.search(reader_sub => 't0', query => %s)", ("x" * 32769,))
    assert info.value.sqlstate == "GK005"


def test_k_outside_1_to_200_raises(corpus: Groundkit, raw: Raw) -> None:
    for k in (0, -1, 201, 10**6):
        with pytest.raises(InvalidArgument):
            corpus.search("t0", "glaze", k=k)
        with pytest.raises(psycopg.Error) as info:
            raw.execute("select * from groundkit.search(reader_sub => 't0', query => 'glaze', k => %s)", (k,))
        assert info.value.sqlstate == "GK005"


def test_k_bounds_are_inclusive(corpus: Groundkit) -> None:
    assert len(corpus.search("t0", "glaze kiln", k=1)) == 1
    assert len(corpus.search("t0", "glaze kiln", k=200)) == 2


def test_k_results_despite_mostly_invisible_matches(community: Groundkit) -> None:
    """Regression: post-filtering a candidate list under-returns. Invisible chunks that match
    better must not crowd the visible ones out."""
    gk = community
    for i in range(250):  # invisible to t0, and better matches (the term three times)
        gk.put_object(f"hidden{i:03d}", 1, "board_post", "open", "T3", "Raku", "raku raku raku firing")
    for i in range(3):
        gk.put_object(f"vault{i}", 1, "board_post", "vault", "T0", "Raku", "raku raku raku vault")
    for i in range(7):
        gk.put_object(f"shown{i}", 1, "board_post", "open", "T0", "Notes", f"a note about raku number {i}")
    for k in (1, 5, 7):
        hits = gk.search("t0", "raku", k=k)
        assert len(hits) == k
        assert all(h.object_id.startswith("shown") for h in hits)
    assert {h.object_id for h in gk.search("t0", "raku", k=200)} == {f"shown{i}" for i in range(7)}
    assert len(gk.search("t3", "raku", k=200)) == 200


def test_scores_are_non_negative_for_a_term_in_every_document(community: Groundkit) -> None:
    gk = community
    for i in range(6):
        gk.put_object(f"p{i}", 1, "board_post", "open", "T0", "Clay", "clay " * (i + 1))
    hits = gk.search("t0", "clay", k=20)
    assert len(hits) == 6
    assert all(h.score > 0 for h in hits)  # idf = ln(1 + 0.5 / (N + 0.5)) > 0


def test_order_is_deterministic_with_ties_broken_by_object_id(community: Groundkit) -> None:
    gk = community
    for oid in ["m", "c", "x", "a", "q"]:  # identical documents, written out of order
        gk.put_object(oid, 1, "board_post", "open", "T0", "Wheel", "throwing on the wheel")
    gk.put_object("best", 1, "board_post", "open", "T0", "Wheel", "wheel wheel")
    hits = gk.search("t0", "wheel", k=10)
    assert [h.object_id for h in hits] == ["best", "a", "c", "m", "q", "x"]
    assert len({h.score for h in hits[1:]}) == 1
    assert all([h.object_id for h in gk.search("t0", "wheel", k=10)] == [h.object_id for h in hits]
               for _ in range(3))
    assert [h.object_id for h in gk.search("t0", "wheel", k=3)] == ["best", "a", "c"]


def test_ties_within_an_object_are_broken_by_chunk_seq(community: Groundkit, raw: Raw) -> None:
    gk = community
    body = ("clay " * 561).strip()  # two chunks of 300 words each (checked below)
    chunks = raw.execute("select length(content) from groundkit.chunk_text(%s, 1500, 200)", (body,)).fetchall()
    assert chunks == [(1499,), (1499,)]
    # the query terms are in the title, which every chunk of the object is indexed with
    gk.put_object("long", 1, "document", "open", "T0", "Slip casting", body)
    gk.put_object("aaa", 1, "document", "open", "T0", "Slip casting", body)
    hits = gk.search("t0", "slip casting")
    assert [(h.object_id, h.chunk_seq) for h in hits] == [("aaa", 0), ("aaa", 1), ("long", 0), ("long", 1)]
    assert len({h.score for h in hits}) == 1


def test_statistics_do_not_leak_invisible_content(community: Groundkit) -> None:
    """A reader's scores do not change when content they cannot see is added."""
    gk = community
    gk.put_object("base1", 1, "board_post", "open", "T0", "Stoneware", "stoneware glaze firing")
    gk.put_object("base2", 1, "board_post", "members", "T1", "Porcelain", "porcelain glaze")
    gk.put_object("base3", 1, "board_post", "open", "T1", "Earthenware", "earthenware")
    queries = ["glaze", "stoneware firing", "porcelain earthenware glaze"]

    def scores() -> list[list[tuple[str, float]]]:
        return [[(h.object_id, h.score) for h in gk.search("t1", q, k=50)] for q in queries]

    before = scores()
    assert all(before)
    # higher tier, by object stamp and by space
    gk.put_object("hi1", 1, "board_post", "open", "T2", "Glaze", "glaze glaze stoneware")
    gk.put_space("upper", "T3")
    gk.put_object("hi2", 1, "board_post", "upper", "T0", "Glaze", "porcelain glaze firing")
    # a private space t1 holds no grant on, and one it does
    gk.put_object("priv1", 1, "board_post", "vault", "T0", "Glaze", "stoneware glaze")
    gk.put_space("club", "T0", private=True)
    gk.grant_space("club", "t1")
    gk.put_object("priv2", 1, "board_post", "club", "T0", "Club", "club earthenware")
    # someone else's owner-only note, and t1's own
    gk.put_object("note1", 1, "member_note", "notes", "T0", "Mine", "my glaze firing log", owner_sub="t0",
                  owner_only=True)
    gk.put_object("note2", 1, "member_note", "notes", "T0", "Mine", "firing notes", owner_sub="t1",
                  owner_only=True)
    after = scores()
    unseen_by_t1 = {"hi1", "hi2", "priv1", "note1"}
    for b, a in zip(before, after, strict=True):
        assert not {oid for oid, _ in a} & unseen_by_t1
        shared = [(oid, s) for oid, s in a if oid not in ("priv2", "note2")]
        assert shared == b  # exactly the same floats
    # the visible private and owner-only content is returned, scored with the same statistics
    assert "priv2" in {h.object_id for h in gk.search("t1", "earthenware")}
    assert "note2" in {h.object_id for h in gk.search("t1", "firing")}
