"""Term bits (docs/bm25.md, "Term bits"): which chunks hold a long list's term, one bit per chunk
id up to ``w_max``. Search skips the lookups of the chunks whose bit is clear, so the bits must
never miss a chunk up to ``w_max``: not when they are made, not after later writes, not when a
writer is in flight while they are made."""

from __future__ import annotations

import random
import re
import threading
import time
from typing import Any

import psycopg
import pytest

from groundkit import Groundkit
from tests.conftest import waits_for_commit

Raw = psycopg.Connection[tuple[Any, ...]]


def _bits_match_postings(raw: Raw) -> int:
    """Every term's bits are exactly the chunks up to w_max that have a posting of it, merged or
    pending (a chunk deleted since may keep its bit). Returns how many terms have bits."""
    rows = raw.execute("select term, w_max, words from groundkit.term_bits").fetchall()
    for term, w_max, words in rows:
        assert len(words) == (w_max >> 6) + 1
        bits = {64 * i + b for i, word in enumerate(words) for b in range(64) if (word >> b) & 1}
        # (in either part: a pending chunk is merged later, with the bit it has now)
        held = {cid for (cid,) in raw.execute(
            "select chunk_id from groundkit.postings where term = %s and chunk_id <= %s"
            " union all select chunk_id from groundkit.pending_postings where term = %s and chunk_id <= %s",
            (term, w_max, term, w_max))}
        assert held <= bits, f"{term}: chunks {sorted(held - bits)} hold it, their bits are clear"
        assert all(b <= w_max for b in bits)
        live = {cid for (cid,) in raw.execute("select chunk_id from groundkit.chunks")}
        assert (bits - held).isdisjoint(live), f"{term}: live chunks without it have their bits set"
    return len(rows)


def _exact(raw: Raw, reader: str, query: str, k: int = 10, looked_up: list[tuple[int, int]] | None = None,
           ) -> list[tuple[int, float]]:
    """The threshold rounds' answer, checked against the exhaustive path, as (chunk, score).
    ``looked_up`` collects, per probe step that used term bits, (candidates looked up, all)."""
    want = raw.execute("select chunk_id, score from groundkit._search_exhaustive(%s, %s, %s)",
                       (reader, query, k)).fetchall()
    msgs: list[str] = []

    def keep(d: psycopg.errors.Diagnostic) -> None:
        msgs.append(d.message_primary or "")

    raw.add_notice_handler(keep)
    try:
        raw.execute("set client_min_messages = debug")
        got = raw.execute("select chunk_id, score from groundkit._search_pruned(%s, %s, %s, strategy => 'threshold')",
                          (reader, query, k)).fetchall()
    finally:
        raw.execute("set client_min_messages = notice")
        raw.remove_notice_handler(keep)
    if looked_up is not None:
        for m in msgs:
            found = re.fullmatch(
                r"groundkit pruned: threshold term bits of \S+ leave (\d+) of (\d+) candidates to look up", m)
            if found:
                looked_up.append((int(found.group(1)), int(found.group(2))))
    assert [round(s, 9) for _c, s in got] == [round(s, 9) for _c, s in want], f"{reader} {query!r}"
    return [(int(c), float(s)) for c, s in got]


def _corpus(gk: Groundkit) -> None:
    # 'stone' is common (probed) but in fewer than half the chunks (else no bits are used);
    # 'granite' and 'basalt' rare (read); the best chunks hold both
    for i in range(200):
        gk.put_object(f"other{i}", 1, "board_post", "open", "T0", "", "other filler words " * (1 + i % 2))
    for i in range(120):
        gk.put_object(f"common{i}", 1, "board_post", "open", "T0", "", "stone filler words " * (1 + i % 3))
    for i in range(25):
        gk.put_object(f"both{i}", 1, "board_post", "open", "T3" if i % 4 == 0 else "T0", "",
                      "granite stone " * (1 + i % 3) + "pad " * (i % 5))
    for i in range(25):
        gk.put_object(f"rare{i}", 1, "board_post", "open", "T0", "", "granite basalt " + "pad " * (i % 7))


def test_term_bits_are_the_postings_and_search_stays_exact(community: Groundkit, raw: Raw) -> None:
    gk = community
    _corpus(gk)
    gk.analyze_postings(min_postings=1)
    assert _bits_match_postings(raw) > 0
    w_max = raw.execute("select max(w_max) from groundkit.term_bits").fetchone()
    top = raw.execute("select max(chunk_id) from groundkit.chunks").fetchone()
    assert w_max is not None and top is not None and w_max[0] == top[0]
    steps: list[tuple[int, int]] = []
    queries = ("granite stone", "stone granite basalt")
    before = {q: _exact(raw, r, q, looked_up=steps) for r in ("t0", "t3") for q in queries}
    assert all(before.values())
    # the bits were used, and spared lookups: some candidates do not hold 'stone'
    assert steps and sum(a for a, _n in steps) < sum(n for _a, n in steps), steps
    # later writes: a chunk whose bits are set is deleted, new chunks lie above w_max, and one of
    # them holds 'stone' and 'granite' more often than any before it
    gk.delete_object("both1", 2)
    gk.put_object("both2", 2, "board_post", "open", "T0", "", "granite")
    gk.put_object("late", 1, "board_post", "open", "T0", "", "granite stone " * 6)
    late = raw.execute("select chunk_id from groundkit.chunks where object_id = 'late'").fetchone()
    assert late is not None and late[0] > w_max[0]
    for reader in ("t0", "t3"):
        for query in queries:
            best = _exact(raw, reader, query)
            if query == "granite stone":
                assert best[0][0] == late[0]
    assert _bits_match_postings(raw) > 0


def test_term_bits_wait_for_a_writer_in_flight(community: Groundkit, dsn: str, raw: Raw) -> None:
    """A writer holds a chunk id but has not committed; another writer commits a higher one. The
    bits reach that higher id, so they must not be made until the first writer is done, and
    then hold its chunk."""
    gk = community
    _corpus(gk)
    slow = psycopg.connect(dsn)
    try:
        slow.execute("select groundkit.put_object(object_id => 'slow', version => 1, content_type => 'board_post',"
                     " space_id => 'open', tier_visibility => 'T0', title => '',"
                     " body => 'granite stone granite stone granite stone granite')")
        # (another scope and other terms: no statistics row the slow writer holds)
        gk.put_object("fast", 1, "board_post", "members", "T1", "", "basalt")
        waits_for_commit(slow, dsn, "select groundkit.analyze_postings(min_postings => 1)",
                         "the term bits were made while a writer of a chunk below w_max was in flight", wait=1.0)
    finally:
        slow.close()
    slow_id = raw.execute("select chunk_id from groundkit.chunks where object_id = 'slow'").fetchone()
    fast_id = raw.execute("select chunk_id from groundkit.chunks where object_id = 'fast'").fetchone()
    assert slow_id is not None and fast_id is not None and slow_id[0] < fast_id[0]
    assert raw.execute("select min(w_max) from groundkit.term_bits").fetchone() == (fast_id[0],)
    _bits_match_postings(raw)
    assert _exact(raw, "t0", "granite stone")[0][0] == slow_id[0]


def test_term_bits_need_read_committed(community: Groundkit, dsn: str) -> None:
    """Under REPEATABLE READ the snapshot would not move past the writers it waited for."""
    gk = community
    _corpus(gk)
    with psycopg.connect(dsn) as conn:
        conn.execute("set transaction isolation level repeatable read")
        with pytest.raises(psycopg.Error) as err:
            conn.execute("select groundkit.analyze_postings(min_postings => 1)")
        assert err.value.sqlstate == "GK005" and "READ COMMITTED" in str(err.value)


def test_rebuild_and_set_tier_rank_keep_the_bits_right(community: Groundkit, raw: Raw) -> None:
    gk = community
    _corpus(gk)
    gk.analyze_postings(min_postings=1)
    gk.set_tier_rank("T3", 7)
    assert _bits_match_postings(raw) > 0  # set_tier_rank moves buckets, not terms: the bits stay
    _exact(raw, "t3", "granite stone")
    gk.rebuild()  # new chunk ids: the bits are made again, for them
    assert raw.execute("select count(*) from groundkit.term_bits").fetchone() == (0,)  # 4,096 postings: none
    gk.conn.execute("update groundkit.config set sketch_min_postings = 1")
    gk.rebuild()
    assert _bits_match_postings(raw) > 0
    _exact(raw, "t0", "granite stone")


def test_term_bits_wait_is_bounded_by_lock_timeout(community: Groundkit, dsn: str, raw: Raw) -> None:
    """The wait for writers in flight is a lock's wait: lock_timeout ends it with 55P03, and the
    bits made before stay as they were."""
    gk = community
    _corpus(gk)
    gk.analyze_postings(min_postings=1)
    before = raw.execute("select term, w_max from groundkit.term_bits order by 1").fetchall()
    slow = psycopg.connect(dsn)
    try:
        slow.execute("select groundkit.put_object(object_id => 'slow', version => 1, content_type => 'board_post',"
                     " space_id => 'open', tier_visibility => 'T0', title => '', body => 'granite stone')")
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("set lock_timeout = '300ms'")
            with pytest.raises(psycopg.errors.LockNotAvailable, match="lock_timeout"):
                conn.execute("select groundkit.analyze_postings(min_postings => 1)")
        slow.commit()
    finally:
        slow.close()
    assert raw.execute("select term, w_max from groundkit.term_bits order by 1").fetchall() == before
    _bits_match_postings(raw)
    _exact(raw, "t0", "granite stone")


def test_term_bits_wait_ends_a_deadlock(community: Groundkit, dsn: str, raw: Raw) -> None:
    """A writer in flight calls analyze_postings() itself while another analyze waits for it: the
    writer queues behind the other's sketch lock, the other polls for the writer. The waiting
    analyze ends that as a lock wait would (40P01), and the writer's own analyze then runs."""
    gk = community
    _corpus(gk)
    writer = psycopg.connect(dsn)
    try:
        writer.execute("select groundkit.put_object(object_id => 'slow', version => 1, content_type => 'board_post',"
                       " space_id => 'open', tier_visibility => 'T0', title => '', body => 'granite stone granite')")
        outcome: dict[str, Any] = {}

        def analyze() -> None:
            with psycopg.connect(dsn, autocommit=True) as conn:
                try:
                    conn.execute("select groundkit.analyze_postings(min_postings => 1)")
                    outcome["other"] = "done"
                except psycopg.errors.DeadlockDetected:
                    outcome["other"] = "deadlock"

        t = threading.Thread(target=analyze)
        t.start()
        time.sleep(1.0)
        assert t.is_alive()
        writer.execute("set local lock_timeout = '20s'")
        writer.execute("select groundkit.analyze_postings(min_postings => 1)")
        writer.commit()
        t.join(30)
        assert not t.is_alive() and outcome == {"other": "deadlock"}
    finally:
        writer.close()
    slow = raw.execute("select chunk_id from groundkit.chunks where object_id = 'slow'").fetchone()
    assert slow is not None
    assert raw.execute("select min(w_max) from groundkit.term_bits").fetchone() == slow
    _bits_match_postings(raw)
    assert _exact(raw, "t0", "granite stone")


def test_a_joined_read_probes_by_bits_when_that_is_cheaper(community: Groundkit, raw: Raw) -> None:
    """The choice of probed terms counts the first probed term of a joined read at 0.3 + 10 df /
    w_max us a candidate when its bits are used (a bit test, and a lookup only where the bit is
    set), not 5 us (docs/bm25.md, "Probes by bits in the choice of probed terms"). In this world
    'stone' holds 560 postings at the first round's cut and 'basalt' 96: with the bits, the first
    round reads 'basalt' and looks 'stone' up by its bits; without them, probing 'stone' costs
    more than reading both, the round would read half of all the postings, and the search goes
    straight to the final round over both lists. The answers are exact either way."""
    from groundkit.models import ContentObject

    gk = community
    rng = random.Random(5)
    bodies = ["filler words " * rng.randint(1, 4) for _ in range(2300)]
    bodies += ["stone " * rng.randint(1, 3) + "filler " * rng.randint(0, 8) for _ in range(500)]
    bodies += ["basalt " * rng.randint(1, 3) + "filler " * rng.randint(0, 8) for _ in range(100)]
    bodies += ["stone " * rng.randint(1, 3) + "basalt " * rng.randint(1, 2) + "filler " * rng.randint(0, 8)
               for _ in range(60)]
    objs = [ContentObject(object_id=f"o{i}", version=1, content_type="board_post", space_id="open",
                          tier_visibility="T0", title="", body=body) for i, body in enumerate(bodies)]
    rng.shuffle(objs)
    gk.put_objects(objs)
    gk.analyze_postings(min_postings=1)

    def first_round(bits: bool) -> list[str]:
        msgs: list[str] = []

        def keep(d: psycopg.errors.Diagnostic) -> None:
            msgs.append(d.message_primary or "")

        raw.add_notice_handler(keep)
        try:
            with raw.transaction(force_rollback=True):
                if not bits:
                    raw.execute("delete from groundkit.term_bits")
                raw.execute("set local client_min_messages = debug")
                _exact(raw, "t0", "stone basalt")
        finally:
            raw.remove_notice_handler(keep)
        rounds = [m for m in msgs if m.startswith("groundkit pruned: threshold guess")]
        return msgs[:msgs.index(rounds[0]) + 1]

    with_bits = first_round(bits=True)
    assert "groundkit pruned: threshold joins 1 ranges" in with_bits
    assert any(m.startswith("groundkit pruned: threshold term bits of stone leave") for m in with_bits)
    assert "(final f)" in with_bits[-1] and "probed {t,f}" in with_bits[-1], with_bits
    without = first_round(bits=False)
    assert "(final t)" in without[-1] and "probed {f,f}" in without[-1], without
