"""The pending part (docs/bm25.md, "The pending part"): one-object writes put their postings in
``pending_postings`` and leave ``term_stats`` alone for them; ``merge_pending()`` moves both in
one transaction. Search reads both parts with the same statistics, so a merge changes no answer,
and the derived state is the same function of the log whichever part a posting is in."""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Sequence
from typing import Any

import psycopg
import pytest

from groundkit import Groundkit
from groundkit.gate.integrity import structure_problems
from tests.conftest import waits_for_commit

Raw = psycopg.Connection[tuple[Any, ...]]

READERS = ("t0", "t1", "t2", "t3")
QUERIES = ("granite quarry", "quarry", "ledge granite obsidian", "basalt", "granite ledge ledge quarry basalt")


def _counts(raw: Raw) -> tuple[int, int, int]:
    row = raw.execute("select (select count(*) from groundkit.pending_postings),"
                      " (select count(*) from groundkit.postings),"
                      " (select coalesce(sum(df), 0) from groundkit.term_stats)").fetchone()
    assert row is not None
    return int(row[0]), int(row[1]), int(row[2])


def _answers(raw: Raw, readers: Sequence[str] = READERS,
             ks: Sequence[int] = (1, 4, 10)) -> dict[tuple[str, str, int], list[tuple[str, float]]]:
    """Every reader's top k for every query, from search's own path, each checked against the
    exhaustive path (which reads both parts)."""
    out = {}
    for reader in readers:
        for query in QUERIES:
            for k in ks:
                got = raw.execute("select chunk_id, score from groundkit._search_pruned(%s, %s, %s)",
                                  (reader, query, k)).fetchall()
                want = raw.execute("select chunk_id, score from groundkit._search_exhaustive(%s, %s, %s)",
                                   (reader, query, k)).fetchall()
                assert len(got) == len(want), (reader, query, k, got, want)
                for (_g, gs), (_w, ws) in zip(got, want, strict=True):
                    assert math.isclose(gs, ws, rel_tol=1e-12), (reader, query, k, got, want)
                out[(reader, query, k)] = [(_name(raw, int(c)), float(s)) for c, s in got]
    return out


def _name(raw: Raw, chunk_id: int) -> str:
    """A chunk by object and place, which a rebuild keeps (chunk ids it does not)."""
    row = raw.execute("select object_id || '#' || chunk_seq from groundkit.chunks where chunk_id = %s",
                      (chunk_id,)).fetchone()
    assert row is not None
    return str(row[0])


def _same(a: dict[tuple[str, str, int], list[tuple[str, float]]],
          b: dict[tuple[str, str, int], list[tuple[str, float]]]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert [s for _c, s in a[key]] == pytest.approx([s for _c, s in b[key]], rel=1e-12), key
        # chunks too, except where scores tie: among themselves or with the last one, which may
        # tie with chunks below the top k (the two parts sum in different orders)
        if not a[key]:
            continue
        last = a[key][-1][1]

        def sure(rows: list[tuple[str, float]], last: float = last) -> set[str]:
            return {c for c, s in rows if sum(math.isclose(s, t, rel_tol=1e-9) for _d, t in rows) == 1
                    and not math.isclose(s, last, rel_tol=1e-9)}

        assert sure(a[key]) == sure(b[key]), key


def _write(gk: Groundkit, rng: random.Random, prefix: str, n: int) -> None:
    words = ["granite", "quarry", "ledge", "obsidian", "basalt", "filler", "stone", "words"]
    weights = [6, 5, 3, 1, 1, 8, 4, 8]
    spaces = [("open", "T0"), ("open", "T2"), ("members", "T1"), ("vault", "T0")]
    for i in range(n):
        space, tier = spaces[i % len(spaces)]
        body = " ".join(rng.choices(words, weights, k=rng.randint(3, 30)))
        owner_only = i % 11 == 0
        gk.put_object(f"{prefix}{i}", 1, "member_note" if owner_only else "board_post", space, tier, "", body,
                      owner_sub="t1" if owner_only else None, owner_only=owner_only)


def test_pending_writes_are_searched_and_a_merge_changes_nothing(community: Groundkit, raw: Raw) -> None:
    gk = community
    rng = random.Random(3)
    _write(gk, rng, "a", 60)
    gk.merge_pending()
    _write(gk, rng, "b", 60)  # (the default merges every 2,048 chunks: these stay pending)
    pending, merged, df = _counts(raw)
    assert pending > 0 and merged > 0 and df > 0
    before = _answers(raw)
    pending_ids = {_name(raw, c) for (c,) in raw.execute("select distinct chunk_id from groundkit.pending_postings")}
    assert any(c in pending_ids for rows in before.values() for c, _s in rows), "no pending chunk in any answer"
    checksum = gk.state_checksum()
    assert structure_problems(raw) == []

    moved = gk.merge_pending()
    assert moved == pending and _counts(raw)[0] == 0 and _counts(raw)[1] == merged + pending
    _same(before, _answers(raw))
    # the derived state is the same function of the log, whichever part holds a posting
    assert gk.state_checksum() == checksum
    gk.rebuild()
    assert gk.state_checksum() == checksum
    assert gk.merge_pending() == 0


def test_writers_merge_every_pending_merge_chunks(community: Groundkit, raw: Raw) -> None:
    gk = community
    raw.execute("update groundkit.config set pending_merge_chunks = 5")
    rng = random.Random(4)
    for i in range(40):
        _write(gk, rng, f"w{i}-", 1)
        pending_chunks = raw.execute("select count(distinct chunk_id) from groundkit.pending_postings").fetchone()
        # a writer whose chunk ids pass a multiple of 5 merges: never 5 chunks or more pending
        assert pending_chunks is not None and pending_chunks[0] < 5
    assert _counts(raw)[1] > 0
    # 0: no pending part, every write to postings and term_stats directly
    raw.execute("select groundkit.merge_pending()")
    raw.execute("update groundkit.config set pending_merge_chunks = 0")
    _write(gk, rng, "direct", 10)
    assert _counts(raw)[0] == 0
    checksum = gk.state_checksum()
    gk.rebuild()
    assert gk.state_checksum() == checksum


def test_pending_content_a_reader_cannot_see_changes_none_of_its_scores(community: Groundkit, raw: Raw) -> None:
    """The pending part's document frequencies are scoped like term_stats: content above the
    reader's tier, in a private space or owner-only, pending or merged, changes nothing."""
    gk = community
    _write(gk, random.Random(5), "a", 40)
    gk.merge_pending()
    t0_before = _answers(raw, ["t0"], [10])
    for i in range(30):
        gk.put_object(f"hidden{i}", 1, "board_post", "open", "T3", "", "granite granite quarry basalt")
        gk.put_object(f"vault{i}", 1, "board_post", "vault", "T0", "", "granite quarry obsidian")
        gk.put_object(f"note{i}", 1, "member_note", "open", "T0", "", "granite ledge", owner_sub="t3",
                      owner_only=True)
    assert _counts(raw)[0] > 0
    # equal up to the last bits a plan made on other statistics may sum differently (a leak
    # would move a document frequency, and the scores far more than that)
    _same(t0_before, _answers(raw, ["t0"], [10]))
    # and the readers who may see it do: the pending chunks are in their answers
    t3 = raw.execute("select count(*) from groundkit._search_pruned('t3', 'granite basalt', 10) r"
                     " join groundkit.chunks c using (chunk_id) where c.object_id like 'hidden%%'").fetchone()
    assert t3 is not None and t3[0] > 0


def test_chunks_replaced_deleted_redacted_and_moved_while_pending(community: Groundkit, raw: Raw) -> None:
    """Every write that replaces, removes or moves chunks does so in whichever part holds their
    postings; after each, the state is what a rebuild from the log makes, before and after a
    merge."""
    gk = community
    rng = random.Random(6)
    _write(gk, rng, "m", 30)
    gk.merge_pending()
    _write(gk, rng, "p", 30)

    def check() -> None:
        assert structure_problems(raw) == []
        checksum = gk.state_checksum()
        answers = _answers(raw)
        with psycopg.connect(raw.info.dsn) as conn:  # a rebuild, rolled back
            conn.execute("select groundkit.rebuild()")
            row = conn.execute("select groundkit.state_checksum()").fetchone()
            assert row is not None and row[0] == checksum
            conn.rollback()
        with psycopg.connect(raw.info.dsn) as conn:  # a merge, rolled back
            conn.execute("select groundkit.merge_pending()")
            row = conn.execute("select groundkit.state_checksum()").fetchone()
            assert row is not None and row[0] == checksum
            conn.rollback()
        # the same data with fresh statistics (autovacuum may analyze meanwhile anyway): another
        # plan can sum in another order, last-bit differences and ties, as between the parts
        raw.execute("analyze")
        _same(answers, _answers(raw))

    # new versions: of a merged object (its postings leave postings and term_stats) and of a
    # pending one (its pending postings go), both written pending
    gk.put_object("m1", 2, "board_post", "open", "T0", "", "granite granite granite quarry")
    gk.put_object("p1", 2, "board_post", "open", "T0", "", "granite granite quarry quarry")
    gk.retier_object("m2", 2, "T3")
    gk.retier_object("p2", 2, "T3")
    check()
    gk.delete_object("m3", 2)
    gk.delete_object("p3", 2)
    gk.redact_object("m5", 2)
    gk.redact_object("p5", 2)
    check()
    # a policy change moves chunks of both parts between scopes and buckets
    gk.put_space("open", "T1")
    gk.put_space("members", "T1", private=True)
    check()
    gk.put_space("members", "T1")
    gk.conn.execute("select groundkit.set_tier_rank('T2', 7)")
    check()
    assert _counts(raw)[0] > 0


def test_a_merge_waits_for_writers_that_replace_chunks_and_writers_skip_a_running_merge(
        community: Groundkit, dsn: str, raw: Raw) -> None:
    gk = community
    _write(gk, random.Random(7), "a", 20)
    pending = _counts(raw)[0]
    assert pending > 0
    writer = psycopg.connect(dsn)
    try:
        # a new version of a pending object, not committed: it holds the merge lock shared
        writer.execute("select groundkit.put_object(object_id => 'a1', version => 2, content_type => 'board_post',"
                       " space_id => 'open', tier_visibility => 'T0', title => '', body => 'basalt basalt')")
        waits_for_commit(writer, dsn, "select groundkit.merge_pending()",
                         "the merge did not wait for a writer replacing chunks")
    finally:
        writer.close()
    assert _counts(raw)[0] == 0
    assert structure_problems(raw) == []

    # while a merge runs (here: holds its lock), a writer whose chunk ids pass the mark goes on
    raw.execute("update groundkit.config set pending_merge_chunks = 1")
    with psycopg.connect(dsn) as merging:
        merging.execute("select groundkit.merge_pending()")
        with psycopg.connect(dsn, autocommit=True) as other:
            other.execute("set lock_timeout = '2s'")
            other.execute("select groundkit.put_object(object_id => 'late', version => 1,"
                          " content_type => 'board_post', space_id => 'open', tier_visibility => 'T0',"
                          " title => '', body => 'granite late')")
        merging.rollback()
    assert _counts(raw)[0] > 0  # it left its postings pending
    checksum = gk.state_checksum()
    gk.rebuild()
    assert gk.state_checksum() == checksum


def test_merges_and_writers_at_once(community: Groundkit, dsn: str, raw: Raw) -> None:
    """Writers of new objects and new versions, and merges, on four connections at once: no
    error, and the state is a function of the log at the end."""
    gk = community
    _write(gk, random.Random(8), "a", 30)
    errors: list[BaseException] = []
    stop = time.monotonic() + 4

    def writer(w: int) -> None:
        rng = random.Random(w)
        try:
            with Groundkit.connect(dsn) as g:
                v = 1
                while time.monotonic() < stop:
                    v += 1
                    g.put_object(f"a{rng.randrange(30)}", 100 * v + w, "board_post", "open", "T0", "",
                                 " ".join(rng.choices(["granite", "quarry", "ledge", "basalt"], k=12)))
                    g.put_object(f"n{w}-{v}", 1, "board_post", "members", "T1", "", "quarry ledge")
                    if v % 5 == 0:
                        g.delete_object(f"n{w}-{v - 1}", 2)
        except BaseException as exc:  # reported below
            errors.append(exc)

    def merger() -> None:
        try:
            with Groundkit.connect(dsn) as g:
                while time.monotonic() < stop:
                    g.merge_pending()
                    time.sleep(0.05)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(3)] + [threading.Thread(target=merger)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert structure_problems(raw) == []
    answers = _answers(raw)
    checksum = gk.state_checksum()
    gk.rebuild()
    assert gk.state_checksum() == checksum
    _same(answers, _answers(raw))


def test_reindex_impacts_waits_for_a_merge(community: Groundkit, dsn: str, raw: Raw) -> None:
    """A merge computes impacts with the parameters it read; reindex_impacts() waits for it
    (and any write to postings), so no posting keeps the parameters it replaced."""
    gk = community
    _write(gk, random.Random(9), "a", 30)
    with psycopg.connect(dsn) as merging:
        merging.execute("select groundkit.merge_pending()")
        waits_for_commit(merging, dsn, "select groundkit.reindex_impacts(55.0)",
                         "reindex_impacts() did not wait for the merge")
    stale = raw.execute(
        "select count(*) from groundkit.postings p cross join groundkit.bm25_impact i"
        " where p.imp <> (p.tf / (p.tf + i.k1 * (1 - i.b + i.b * p.doc_len / i.avgdl_ref)))::real").fetchone()
    assert stale == (0,)
    _answers(raw)


def test_plans_made_while_the_pending_part_was_empty_never_scan_it(community: Groundkit, dsn: str, raw: Raw) -> None:
    """The pending part grows from empty to thousands of rows between merges. Plans cached in a
    session while it was empty (searches, writers) must still read it by key once it has grown:
    a sequential scan per term, or per old posting of a write, grows with it."""
    from tests.test_search_plans import _plans

    gk = community
    _write(gk, random.Random(10), "a", 40)
    gk.merge_pending()
    raw.execute("vacuum analyze groundkit.pending_postings")  # empty, and known to be
    stmt = "select * from groundkit.search(%s, %s, 10)"
    for _ in range(8):  # past the plan cache's first custom plans: generic ones from here on
        for query in QUERIES:
            raw.execute(stmt, ("t3", query)).fetchall()
        raw.execute("select groundkit.put_object(object_id => 'a1', version => %s, content_type => 'board_post',"
                    " space_id => 'open', tier_visibility => 'T0', title => '', body => 'granite granite')",
                    (int(time.time() * 1000) % 10**9 + _,))
    _write(gk, random.Random(11), "b", 400)  # thousands of pending postings, no analyze since
    assert _counts(raw)[0] > 2000
    plans = _plans(raw, stmt, ("t3", "granite quarry ledge"))
    plans += _plans(raw, "select groundkit.retier_object('b1', 2, 'T1')", ())
    scans = [p for p in plans if _reads_pending_whole(p)]
    assert not scans, scans


def _reads_pending_whole(plan: str) -> bool:
    """Whether a plan reads pending_postings without a key condition: a sequential scan, or an
    index scan with no Index Cond (what a planner that may not scan sequentially picks to
    hash the whole table, seen at 1M chunks: 92 ms a search with 8,192 chunks pending)."""
    lines = plan.splitlines()
    for i, line in enumerate(lines):
        if " on pending_postings" not in line or "Scan" not in line:
            continue
        if "Seq Scan" in line:
            return True
        details = []
        for nxt in lines[i + 1:]:
            if "->" in nxt or not nxt.startswith(" "):
                break
            details.append(nxt)
        if not any(c in d for d in details for c in ("Index Cond", "Recheck Cond", "TID Cond")):
            return True
    return False


def test_a_writer_replaces_chunks_whose_pending_postings_a_concurrent_put_space_moves(
        community: Groundkit, dsn: str, raw: Raw) -> None:
    """put_space moves a space's pending postings to new buckets (it updates them) while a
    writer replaces an object of that space. The writer waits (put_object takes the space's
    row for share before it reads anything), then replaces the chunks whose pending postings
    moved: nothing of the old chunks is left, and the state is the one a rebuild makes."""
    gk = community
    raw.execute("select groundkit.put_space('moving', 'T0', false)")
    put = ("select groundkit.put_object(object_id => 'm1', version => %s, content_type => 'board_post',"
           " space_id => 'moving', tier_visibility => 'T0', title => '', body => %s)")
    raw.execute(put, (1, "granite basalt quarry ledge"))
    assert raw.execute("select count(*) as n from groundkit.pending_postings pp join groundkit.chunks c"
                       " using (chunk_id) where c.object_id = 'm1'").fetchone() == (4,)
    mover = psycopg.connect(dsn)
    try:
        mover.execute("select groundkit.put_space('moving', 'T2', false)")  # not committed yet
        waits_for_commit(mover, dsn, put, "the writer did not wait for put_space", (2, "slate"))
    finally:
        mover.close()
    assert structure_problems(raw) == []  # among them: a posting without its chunk
    checksum = gk.state_checksum()
    gk.rebuild()
    assert gk.state_checksum() == checksum
