"""Term bits (docs/bm25.md, "Term bits"): which chunks hold a long list's term, one bit per chunk
id up to ``w_max``. Search skips the lookups of the chunks whose bit is clear, so the bits must
never miss a chunk up to ``w_max``: not when they are made, not after later writes, not when a
writer is in flight while they are made."""

from __future__ import annotations

import math
import random
import re
import threading
import time
from typing import Any

import psycopg
import pytest
from psycopg import sql

from groundkit import Groundkit
from tests.conftest import waits_for_commit

Raw = psycopg.Connection[tuple[Any, ...]]


def _bits_match_postings(raw: Raw) -> int:
    """Every term's bits are exactly the chunks up to w_max that have a posting of it, merged or
    pending (a chunk deleted since may keep its bit). Returns how many terms have bits."""
    rows = raw.execute("select term, w_max, words, bits from groundkit.term_bits").fetchall()
    for term, w_max, words, as_bytes in rows:
        assert len(words) == (w_max >> 6) + 1
        bits = {64 * i + b for i, word in enumerate(words) for b in range(64) if (word >> b) & 1}
        # the same bits byte by byte: chunk c is get_bit(bits, c), bit c % 8 of byte c / 8
        assert len(as_bytes) == 8 * len(words)
        assert {8 * i + b for i, byte in enumerate(as_bytes) for b in range(8) if (byte >> b) & 1} == bits
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
           messages: list[str] | None = None) -> list[tuple[int, float]]:
    """The threshold rounds' answer, checked against the exhaustive path, as (chunk, score).
    ``looked_up`` collects, per probe step that used term bits, (candidates looked up, all);
    ``messages`` every DEBUG line of the search."""
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
    if messages is not None:
        messages.extend(msgs)
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


def _load(gk: Groundkit, bodies: list[str]) -> None:
    """One T0 board post in the open space per body, in batches of 5,000."""
    from groundkit.models import ContentObject

    objs = [ContentObject(object_id=f"o{i}", version=1, content_type="board_post", space_id="open",
                          tier_visibility="T0", title="", body=body) for i, body in enumerate(bodies)]
    for start in range(0, len(objs), 5000):
        gk.put_objects(objs[start:start + 5000])


def test_term_bits_are_the_postings_and_search_stays_exact(community: Groundkit, raw: Raw) -> None:
    gk = community
    _corpus(gk)
    gk.analyze_postings(min_postings=1, reindex_at=None)  # (the world was made for impacts at 64)
    assert _bits_match_postings(raw) > 0
    w_max = raw.execute("select max(w_max) from groundkit.term_bits").fetchone()
    top = raw.execute("select max(chunk_id) from groundkit.chunks").fetchone()
    assert w_max is not None and top is not None and w_max[0] == top[0]
    steps: list[tuple[int, int]] = []
    # ('basalt stone': its candidates from basalt's range seldom hold 'stone', so the probe of
    # 'stone' by its bits spares lookups in every round, whichever rounds the search runs)
    queries = ("granite stone", "stone granite basalt", "basalt stone")
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


def test_merged_reads_test_partner_bits_and_stay_exact(community: Groundkit, raw: Raw) -> None:
    """A merged read drops, as it reads them, the postings of a term that cannot reach the round's
    level alone and whose chunk holds no other term read, by the other terms' bits, and keeps the
    chunks above w_max (docs/bm25.md, "Partner bits in merged reads"); only when every read term
    has bits. 'merge' and 'pieces' test them whatever the sizes; every answer equals the
    exhaustive path's, in one process and in parallel workers (which receive the bits from the
    leader). And in every final round, each tested term's maximum plus the probed terms' is below
    the level, read off the debug lines: past k = 54 the answers to 'granite stone' hold chunks of
    'granite' alone, which a test of 'granite' would drop (a round that then finds fewer than k
    goes on to a lower level or the scan, so the answers alone would not always show it)."""
    from groundkit.models import ContentObject

    gk = community
    _corpus(gk)
    # bits for 'stone' (145 postings) and 'granite' (50), not for 'basalt' (25)
    gk.analyze_postings(min_postings=40)
    assert {t for (t,) in raw.execute("select term from groundkit.term_bits")} >= {"stone", "granit"}
    assert raw.execute("select count(*) from groundkit.term_bits where term = 'basalt'").fetchone() == (0,)
    # after the bits: chunks above w_max that hold both, a word without bits, a chunk with bits gone
    gk.put_objects([ContentObject(object_id=f"late{i}", version=1, content_type="board_post", space_id="open",
                                  tier_visibility="T0", title="",
                                  body="granite stone " * (1 + i % 4) + "obsidian " * (i % 2))
                    for i in range(30)])
    gk.merge_pending()
    gk.delete_object("both2", 2)
    # some of them past the last byte of every term's bits, where get_bit fails: the merged
    # read's test of w_max must come first
    past = raw.execute("select count(*) from groundkit.chunks c where c.object_id like 'late%%'"
                       " and c.chunk_id >= (select max(8 * length(tb.bits)) from groundkit.term_bits tb)").fetchone()
    assert past is not None and past[0] > 0
    msgs: list[str] = []

    def keep(d: psycopg.errors.Diagnostic) -> None:
        msgs.append(d.message_primary or "")

    raw.add_notice_handler(keep)
    try:
        for workers in (0, 2):
            raw.execute(f"set max_parallel_workers_per_gather = {workers}")
            for strategy in ("merge", "pieces"):
                for reader in ("t0", "t3"):
                    for query in ("granite stone", "stone granite basalt", "stone obsidian granite"):
                        for k in (1, 5, 10, 40, 70, 100):
                            want = raw.execute("select chunk_id, score from groundkit._search_exhaustive(%s, %s, %s)",
                                               (reader, query, k)).fetchall()
                            raw.execute("set client_min_messages = debug")
                            got = raw.execute(
                                "select chunk_id, score from groundkit._search_pruned(%s, %s, %s, strategy => %s)",
                                (reader, query, k, strategy)).fetchall()
                            raw.execute("reset client_min_messages")
                            assert [round(s, 9) for _c, s in got] == [round(s, 9) for _c, s in want], \
                                (strategy, workers, reader, query, k)
    finally:
        raw.remove_notice_handler(keep)
        raw.execute("reset max_parallel_workers_per_gather")
    tested = [re.fullmatch(r"groundkit pruned: threshold merged read tests partner bits for \{(.*)\}", m) for m in msgs]
    found = {t.group(1) for t in tested if t}
    # 'granite stone' only: with 'basalt' or 'obsidian' read, a read term has no bits
    assert found and found <= {"granit", "stone", "stone,granit", "granit,stone"}, found
    # and only terms that cannot reach the level alone: in a final round (level = its guess), a
    # tested term's maximum plus the probed terms' maxima is below the guess
    checked = 0
    terms: list[str] = []
    maxima: list[float] = []
    pending: list[str] = []
    for m in msgs:
        head = re.match(r"groundkit pruned: threshold terms \{(.*?)\} weights \{.*?\} maxima \{(.*?)\}", m)
        if head:
            terms, maxima = head.group(1).split(","), [float(x) for x in head.group(2).split(",")]
        t = re.fullmatch(r"groundkit pruned: threshold merged read tests partner bits for \{(.*)\}", m)
        if t:
            pending = t.group(1).split(",")
        g = re.match(r"groundkit pruned: threshold guess (\S+) \(final (t|f)\) .* probed \{(.*?)\}", m)
        if g and pending:
            if g.group(2) == "t":
                p_max = sum(mx for mx, pr in zip(maxima, g.group(3).split(","), strict=True) if pr == "t")
                for term in pending:
                    assert maxima[terms.index(term)] + p_max < float(g.group(1)), (m, term)
                    checked += 1
            pending = []
    assert checked > 0


def test_a_merged_read_with_partner_bits_keeps_what_it_would_keep(community: Groundkit, raw: Raw) -> None:
    """groundkit._merged_read with partner bits (docs/bm25.md, "Partner bits in merged reads")
    returns the same chunks and sums as without them, in one piece or several, in one process or
    in parallel workers: the chunks that hold both 'granite' and 'stone', below w_max (by each
    other's bit) and above it (written after the bits). At weight 1 no term reaches the level 1.2
    alone, so both may be tested. A read term without bits ('basalt') counts as present in every
    chunk: a chunk of 'granite' and 'basalt' alone is kept."""
    from groundkit.models import ContentObject

    gk = community
    _corpus(gk)
    gk.analyze_postings(min_postings=40)  # bits for 'stone' and 'granite', not 'basalt'
    gk.put_objects([ContentObject(object_id=f"late{i}", version=1, content_type="board_post", space_id="open",
                                  tier_visibility="T0", title="", body="granite stone " * (1 + i % 3))
                    for i in range(20)])
    gk.merge_pending()
    w_max = raw.execute("select min(w_max) from groundkit.term_bits").fetchone()
    assert w_max is not None
    holders = {t: {c for (c,) in raw.execute("select chunk_id from groundkit.postings where term = %s", (t,))}
               for t in ("stone", "granit", "basalt")}

    def merged(fn: str, terms: list[str], splits: list[int], tested: list[bool] | None) -> dict[int, tuple[float, int]]:
        n = len(terms)
        row = raw.execute(
            sql.SQL("select r.ids, r.known, r.dls from {}(%s, %s,"
                    " (select array_agg(distinct vis_key) from groundkit.postings), 0.9, 0.4, 20.0, 0, 1.2,"
                    " %s, %s, %s::bigint[], %s, %s) r").format(sql.Identifier("groundkit", fn)),
            (terms, [1.0] * n, [0.0] * n, list(range(1, n + 1)), splits, tested, w_max[0])).fetchone()
        assert row is not None
        return {i: (k, d) for i, k, d in zip(*row, strict=True)}

    both = ["stone", "granit"]
    want = merged("_merged_read", both, [], None)
    assert want.keys() == holders["stone"] & holders["granit"]
    assert min(want) <= w_max[0] < max(want)  # kept below w_max and above it
    three = ["stone", "granit", "basalt"]
    want3 = merged("_merged_read", three, [], None)
    assert want3.keys() & (holders["granit"] & holders["basalt"]) - holders["stone"]
    lo, hi = min(want), max(want)
    raw.execute("set max_parallel_workers_per_gather = 2")
    try:
        for fn in ("_merged_read", "_merged_read_parallel"):
            for splits in ([], [(lo + hi) // 2], [lo + (hi - lo) * i // 4 for i in (1, 2, 3)]):
                for terms, expect in ((both, want), (three, want3)):
                    got = merged(fn, terms, splits, [True, True] + [False] * (len(terms) - 2))
                    assert got.keys() == expect.keys(), (fn, splits, terms)
                    assert all(math.isclose(got[c][0], expect[c][0], rel_tol=1e-12) and got[c][1] == expect[c][1]
                               for c in got), (fn, splits, terms)
    finally:
        raw.execute("reset max_parallel_workers_per_gather")


def test_merged_reads_without_bytes_read_as_before(community: Groundkit, raw: Raw) -> None:
    """After an upgrade to revision 0007 the bits as bytes are null until analyze_postings() runs:
    merged reads then test nothing and answer as before; the next analyze makes them."""
    gk = community
    _corpus(gk)
    gk.analyze_postings(min_postings=40)
    raw.execute("update groundkit.term_bits set bits = null")  # as revision 0007 leaves them
    msgs: list[str] = []

    def keep(d: psycopg.errors.Diagnostic) -> None:
        msgs.append(d.message_primary or "")

    def search(query: str, k: int) -> None:
        want = raw.execute("select chunk_id, score from groundkit._search_exhaustive('t0', %s, %s)",
                           (query, k)).fetchall()
        raw.execute("set client_min_messages = debug")
        got = raw.execute("select chunk_id, score from groundkit._search_pruned('t0', %s, %s, strategy => 'merge')",
                          (query, k)).fetchall()
        raw.execute("reset client_min_messages")
        assert [round(s, 9) for _c, s in got] == [round(s, 9) for _c, s in want], (query, k)

    raw.add_notice_handler(keep)
    try:
        for k in (1, 5, 10, 40, 70):
            search("granite stone", k)
        assert any(m.startswith("groundkit pruned: threshold merges") for m in msgs)
        assert not any("partner bits" in m for m in msgs), msgs
        gk.analyze_postings(min_postings=40)
        assert raw.execute("select count(*) from groundkit.term_bits where bits is null").fetchone() == (0,)
        msgs.clear()
        for k in (1, 5, 10, 40, 70):
            search("granite stone", k)
        assert any("partner bits" in m for m in msgs), msgs
    finally:
        raw.remove_notice_handler(keep)


def test_a_final_round_over_ranges_estimates_its_candidates(community: Groundkit, raw: Raw) -> None:
    """A final round over ranges cut above 0, not only over whole lists, estimates the chunks it
    would look up for a probe set that reads 10,000 postings or more (docs/bm25.md, "Candidates
    of a final round over ranges"). In this world of 50,000 chunks 'amber' (40 %) and 'basalt'
    (14 %) sit in long chunks, so their maxima are low, and 'cobalt' (8 %) is at its best in short
    ones: the final round, at x_lb, reads cobalt above a cut and basalt whole. Estimated, the
    chunks that can reach the level with those two are about 3,300 of the 10,925 postings read,
    so amber is looked up (by its bits) rather than read. Counting every posting read as a
    candidate, as before, the round read all three lists (probed {f,f,f}). Answers equal the
    exhaustive path's either way."""
    gk = community
    rng = random.Random(11)
    bodies = []
    for _ in range(50_000):
        words = ["filler"] * rng.randint(0, 20)
        for word, share in (("amber", 0.4), ("basalt", 0.14)):
            if rng.random() < share:
                words += [word] + ["filler"] * 30
        if rng.random() < 0.08:
            words += ["cobalt"] * rng.randint(1, 3) + ["filler"] * (30 if rng.random() < 0.9 else 0)
        rng.shuffle(words)
        bodies.append(" ".join(words) or "empty")
    _load(gk, bodies)
    gk.analyze_postings(min_postings=1000, reindex_at=None)  # sketches of all three lists (impacts at 64)
    for k in (10, 30, 100):
        msgs: list[str] = []
        _exact(raw, "t0", "amber basalt cobalt", k, messages=msgs)
        final = [m for m in msgs if m.startswith("groundkit pruned: threshold guess") and "(final t)" in m]
        assert len(final) == 1, msgs
        # cobalt (the largest maximum: last) is read above a cut, basalt whole
        cuts = [float(c) for c in final[0].split(" cuts {")[1].split("}")[0].split(",")]
        assert cuts[1] <= 0 < cuts[2], final
        assert "probed {t,f,f}" in final[0], msgs
        estimated = [m for m in msgs if m.startswith("groundkit pruned: threshold final round estimated at")]
        assert len(estimated) == 1, msgs
        assert 1000 < int(estimated[0].split(" at ")[1].split(" ")[0]) < 10_000, estimated
        assert any(m.startswith("groundkit pruned: threshold term bits of amber leave") for m in msgs), msgs


def test_x_lb_from_a_short_list(community: Groundkit, raw: Raw) -> None:
    """x_lb from a short list (docs/bm25.md, "x_lb from a short list"): when a query of three
    terms or more commits to its final round in place of a round that would read 50,000 postings
    or more, the chunks of its shortest list (at most 10,000 postings) are ranked by their own
    part plus the maximum of the heaviest other term with bits where that term's bit is set, and
    the best are scored exactly.
    In this world of 100,000 chunks the best answers to 'amber basalt cobalt fife fife gneiss'
    hold 'gneiss' (1 %) and 'fife' (8 %), which the lists' tops do not find: the final round then
    runs at a level well above the tops' bound, and the answers equal the exhaustive path's. Chunks
    written after the bits (ids past their last byte) that hold both are among the best, so the
    ranking's test of ids past the bits is exercised too."""
    from groundkit.models import ContentObject

    gk = community
    rng = random.Random(11)
    bodies = []
    for _ in range(100_000):
        words = ["filler"] * rng.randint(0, 20)
        for word, share in (("amber", 0.3), ("basalt", 0.25), ("cobalt", 0.2)):
            if rng.random() < share:
                words += [word] * rng.randint(1, 2)
        short = rng.random() < 0.01
        if rng.random() < (0.5 if short else 0.08):
            words += ["fife"] * rng.randint(1, 3)
        if short:
            words += ["gneiss"] * rng.randint(1, 2) + ["filler"] * rng.randint(5, 30)
        rng.shuffle(words)
        bodies.append(" ".join(words) or "empty")
    _load(gk, bodies)
    gk.analyze_postings(min_postings=1000, reindex_at=None)  # (the world was made for impacts at 64)
    # after the bits: a few short chunks that hold both, above w_max and past the bits' last word
    # (get_bit fails there), after 70 others
    gk.put_objects([ContentObject(object_id=f"pad{i}", version=1, content_type="board_post", space_id="open",
                                  tier_visibility="T0", title="", body="filler words") for i in range(70)])
    gk.put_objects([ContentObject(object_id=f"late{i}", version=1, content_type="board_post", space_id="open",
                                  tier_visibility="T0", title="", body="gneiss fife fife amber " + "filler " * i)
                    for i in range(3)])
    w_max = raw.execute("select w_max from groundkit.term_bits where term = 'fife'").fetchone()
    late = {c for (c,) in raw.execute("select chunk_id from groundkit.chunks where object_id like 'late%'")}
    n_bits = raw.execute("select 8 * length(bits) from groundkit.term_bits where term = 'fife'").fetchone()
    assert w_max is not None and n_bits is not None and min(late) > w_max[0] and min(late) >= n_bits[0]
    for k in (10, 30, 100):
        msgs: list[str] = []
        got = _exact(raw, "t0", "amber basalt cobalt fife fife gneiss", k, messages=msgs)
        assert late & {c for c, _s in got}
        bound = [m for m in msgs if m.startswith("groundkit pruned: threshold x_lb") and "from the short list" in m]
        assert len(bound) == 1, msgs
        found = re.fullmatch(r"groundkit pruned: threshold x_lb (\S+) from the short list of gneiss \(by the bits"
                             r" of fife\), (\S+) from the lists' tops", bound[0])
        assert found, bound
        from_short, from_tops = float(found.group(1)), float(found.group(2))
        assert from_short > 1.2 * from_tops, bound
        assert from_short <= got[-1][1] + 1e-9  # a lower bound on the k-th score
        final = [m for m in msgs if m.startswith("groundkit pruned: threshold guess") and "(final t)" in m]
        assert len(final) == 1 and final[0].startswith(f"groundkit pruned: threshold guess {found.group(1)} "), msgs
