"""Issue 2, concurrency: two connections racing versions of one object, and a downgrade committed
while another connection searches."""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg.rows import dict_row

from groundkit import Groundkit, WriteStatus

TOP = 40


def client(dsn: str) -> Groundkit:
    return Groundkit(psycopg.connect(dsn, autocommit=True, row_factory=dict_row))


def body(version: int) -> str:
    return f"glaze test tile number {version}"


def run_threads(*targets: Callable[[], None]) -> None:
    errors: list[BaseException] = []

    def wrap(target: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                target()
            except BaseException as exc:  # reported in the main thread
                errors.append(exc)
        return run

    threads = [threading.Thread(target=wrap(t)) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
        assert not t.is_alive(), "a writer is stuck"
    if errors:
        raise errors[0]


def test_two_connections_racing_versions_of_one_object(community: Groundkit, dsn: str) -> None:
    rnd = random.Random(20261129)
    versions = list(range(1, TOP + 1))
    # each connection writes its own shuffled set; they overlap, so some writes are retries
    sets = [rnd.sample(versions, 30), rnd.sample(versions, 30)]
    sets[0] += [v for v in versions if v not in sets[0] and v not in sets[1]]
    results: list[list[tuple[int, WriteStatus]]] = [[], []]
    barrier = threading.Barrier(2)

    def writer(i: int) -> Callable[[], None]:
        def run() -> None:
            with client(dsn) as gk:
                barrier.wait()
                for v in sets[i]:
                    r = gk.put_object("tile", v, "board_post", "open", "T0", "Test tile", body(v))
                    results[i].append((v, r.status))
        return run

    run_threads(writer(0), writer(1))

    gk = community
    statuses = [s for r in results for _, s in r]
    assert set(statuses) <= {WriteStatus.APPLIED, WriteStatus.DUPLICATE, WriteStatus.STALE}
    applied = sorted(v for r in results for v, s in r if s is WriteStatus.APPLIED)
    assert len(applied) == len(set(applied))  # no version applied twice
    assert TOP in applied
    log = gk.conn.execute(
        "select version from groundkit.content_log where object_id = 'tile' order by seq"
    ).fetchall()
    logged = [row["version"] for row in log]
    assert all(a < b for a, b in itertools.pairwise(logged)), "applied versions not increasing"
    assert sorted(logged) == applied
    row = gk.conn.execute("select version, state from groundkit.objects where object_id = 'tile'").fetchone()
    assert row == {"version": TOP, "state": "live"}
    hits = gk.search("t0", "tile")
    assert [(h.object_version, h.content) for h in hits] == [(TOP, body(TOP))]
    # the derived state is consistent: the statistics equal a rebuild's
    stats = gk.conn.execute(
        "select scope, sum(n_chunks) as n, sum(total_len) as len from groundkit.scope_stats group by scope"
        " having sum(n_chunks) <> 0"
    ).fetchall()
    assert [(s["scope"], s["n"]) for s in stats] == [(0, 1)]
    checksum = gk.state_checksum()
    gk.rebuild()
    assert gk.state_checksum() == checksum


def test_two_connections_racing_writes_and_a_delete(community: Groundkit, dsn: str) -> None:
    """A delete racing puts: whatever the interleaving, nothing is applied after it."""
    rnd = random.Random(7)
    barrier = threading.Barrier(2)
    statuses: list[WriteStatus] = []

    def putter() -> None:
        with client(dsn) as gk:
            barrier.wait()
            for v in rnd.sample(range(1, TOP + 1), TOP):
                statuses.append(gk.put_object("tile", v, "board_post", "open", "T0", "Tile", body(v)).status)

    def deleter() -> None:
        with client(dsn) as gk:
            barrier.wait()
            time.sleep(0.01)  # let some puts land first; correctness does not depend on it
            assert gk.delete_object("tile", 5).status is WriteStatus.APPLIED

    run_threads(putter, deleter)
    gk = community
    # once a put has found the tombstone, every later put does too
    first = statuses.index(WriteStatus.TOMBSTONED) if WriteStatus.TOMBSTONED in statuses else len(statuses)
    assert all(s is WriteStatus.TOMBSTONED for s in statuses[first:])
    assert all(s is not WriteStatus.TOMBSTONED for s in statuses[:first])
    ops = [r["op"] for r in gk.conn.execute(
        "select op from groundkit.content_log where object_id = 'tile' order by seq").fetchall()]
    assert ops.count("delete") == 1 and ops[-1] == "delete"
    assert gk.search("t3", "tile") == []
    assert gk.put_object("tile", TOP + 1, "board_post", "open", "T0", "Tile", "x").status is WriteStatus.TOMBSTONED
    checksum = gk.state_checksum()
    gk.rebuild()
    assert gk.state_checksum() == checksum


def _search_loop(dsn: str, query: str, oid: str, committed: threading.Event, after: int,
                 out: list[tuple[int, bool]], ready: threading.Event) -> Callable[[], None]:
    """Search as t2 in a loop, recording (start time, whether ``oid`` was returned), until
    ``after`` searches have started after ``committed`` was set."""

    def run() -> None:
        with client(dsn) as gk:
            since = 0
            while since < after:
                seen_commit = committed.is_set()
                started = time.monotonic_ns()
                found = any(h.object_id == oid for h in gk.search("t2", query))
                out.append((started, found))
                ready.set()
                if seen_commit:
                    since += 1

    return run


def test_downgrade_committed_while_another_connection_searches(community: Groundkit, dsn: str) -> None:
    gk = community
    gk.put_object("secret", 1, "course_section", "open", "T2", "Advanced firing", "reduction firing")
    gk.put_object("public", 1, "board_post", "open", "T0", "Firing", "firing basics")
    committed = threading.Event()
    ready = threading.Event()
    searches: list[tuple[int, bool]] = []
    commit_done: list[int] = []

    def downgrade() -> None:
        with client(dsn) as admin:
            assert ready.wait(30)
            time.sleep(0.05)  # the searcher is mid-loop; correctness does not depend on it
            admin.put_member("t2", "T1")  # autocommit: committed when the call returns
            commit_done.append(time.monotonic_ns())
            committed.set()

    run_threads(_search_loop(dsn, "reduction firing", "secret", committed, 30, searches, ready), downgrade)
    (done,) = commit_done
    before = [found for started, found in searches if started < done]
    after = [found for started, found in searches if started > done]
    assert before and before[0] is True  # the object was visible before the downgrade
    assert len(after) >= 30
    assert not any(after), "a search started after the downgrade committed returned the T2 object"


def test_delete_and_privacy_committed_while_another_connection_searches(
    community: Groundkit, dsn: str
) -> None:
    gk = community
    gk.put_object("gone", 1, "board_post", "open", "T0", "Kiln wash", "kiln wash recipe")
    gk.put_space("studio", "T0")
    gk.put_object("hidden", 1, "board_post", "studio", "T0", "Kiln shelf", "kiln shelf layout")
    for change, oid in ((lambda a: a.delete_object("gone", 2), "gone"),
                        (lambda a: a.put_space("studio", "T0", private=True), "hidden")):
        committed = threading.Event()
        ready = threading.Event()
        searches: list[tuple[int, bool]] = []
        commit_done: list[int] = []

        def writer(change: Callable[[Groundkit], Any] = change, committed: threading.Event = committed,
                   ready: threading.Event = ready, commit_done: list[int] = commit_done) -> None:
            with client(dsn) as admin:
                assert ready.wait(30)
                change(admin)
                commit_done.append(time.monotonic_ns())
                committed.set()

        run_threads(_search_loop(dsn, "kiln", oid, committed, 20, searches, ready), writer)
        (done,) = commit_done
        assert searches[0][1] is True
        assert not any(found for started, found in searches if started > done), oid
