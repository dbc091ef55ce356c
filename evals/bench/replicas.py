"""Searches on one server against a primary and a streaming standby behind the permission fence,
at a steady rate of permission changes; and what the fence costs a write.

    python -m evals.bench replicas --chunks 20000 --seconds 30 --clients 4 --changes-per-second 3

A throwaway primary and standby (groundkit.replica_pair: the embedded PostgreSQL's binaries, Unix
sockets, one machine), the benchmark corpus loaded on the primary as ``search`` loads it. Two
arms, one after the other, each ``--seconds`` long with ``--clients`` threads searching back to
back (the benchmark's queries, readers in turn) while one writer makes ``--changes-per-second``
permission changes (a member's tier, toggled):

- ``one server``: :func:`groundkit.connect_pool` with no replicas: every search on the primary;
- ``primary + standby``: the same with the standby: each search reads the primary's authority
  position first, then runs on the standby if it has replayed it (and lags less than
  ``--max-lag``), else on the primary.

A third arm repeats the second with the standby applying each commit ``--apply-delay-ms`` late
(recovery_min_apply_delay), as a standby far away or busy would: the fence's share of reads then
shows. The table gives searches per second, p50 / p95 ms, and where the second arm's searches ran: on
the standby, or on the primary because of the fence (a change not yet replayed), the lag or an
unreachable standby. Then the fence's cost alone: the position read's round trip, and
``put_member`` / ``retier_object`` with the authority triggers enabled against disabled, paired
(alternating, the same number of each, median ms).

Both servers share this machine's cores: a standby here adds no CPU, so the first figures measure
the fence's overhead and routing share, not the capacity a standby on its own machine would add.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence

import psycopg

import groundkit
from evals.bench.common import READERS, log, pct, populate_authority, timed
from evals.bench.corpus import Corpus, Obj
from evals.bench.ingest import bulk_load
from groundkit import Groundkit, replica_pair
from groundkit.replicas import FencedPool, connect_pool

CHURN = [f"churn-{i}" for i in range(20)]
TRIGGERS = {"members": "members_authority", "objects": "objects_authority"}


def load(pair: replica_pair.ReplicaPair, chunks: int, n_queries: int, seed: int) -> list[str]:
    groundkit.migrate(pair.primary_dsn, gate=False)
    corpus = Corpus(seed=seed)
    sample: list[Obj] = []
    with psycopg.connect(pair.primary_dsn, autocommit=True) as conn:
        populate_authority(conn, corpus)
        for sub in CHURN:
            conn.execute("select groundkit.put_member(%s, 'T1')", (sub,))
        bulk_load(pair.primary_dsn, corpus, chunks, 2000, 2, sample)
        conn.execute("vacuum analyze")
        conn.execute("select groundkit.analyze_postings()")
        conn.execute("checkpoint")
    pair.wait_replayed(timeout=600)
    return Corpus(seed=seed).queries(n_queries, sample)


def arm(pool: FencedPool, primary_dsn: str, queries: Sequence[str], clients: int, seconds: float,
        changes_per_second: float) -> tuple[int, list[float]]:
    """Searches done and their latencies (ms) over ``seconds``, with the permission writer running."""
    stop = threading.Event()
    latencies: list[list[float]] = [[] for _ in range(clients)]
    readers = list(READERS)

    def client(i: int) -> None:
        for n in itertools.count(i):
            if stop.is_set():
                return
            t0 = time.perf_counter()
            pool.search(readers[n % len(readers)], queries[n % len(queries)], k=10)
            latencies[i].append((time.perf_counter() - t0) * 1000)

    def writer() -> None:
        with Groundkit.connect(primary_dsn) as gk:
            for n in itertools.count():
                if stop.wait(1 / changes_per_second):
                    return
                gk.put_member(CHURN[n % len(CHURN)], "T2" if n // len(CHURN) % 2 == 0 else "T1")

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    if changes_per_second > 0:
        threads.append(threading.Thread(target=writer))
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    flat = [x for xs in latencies for x in xs]
    return len(flat), flat


def paired_writes(dsn: str, rounds: int) -> list[str]:
    """put_member and retier_object with the authority triggers on and off, alternating."""
    lines = []
    with Groundkit.connect(dsn) as gk:
        gk.put_space("bench-fence", "T0")
        for i in range(rounds):
            gk.put_object(f"fence-{i}", 1, "board_post", "bench-fence", "T0", "t", "a post to re-tier")
        version = itertools.count(2)
        cases: dict[str, Callable[[int], object]] = {
            "put_member (a tier change)": lambda i: gk.put_member(f"fence-m{i % 50}", ("T1", "T2")[i % 2]),
            "retier_object": lambda i: gk.retier_object(f"fence-{i % rounds}", next(version), ("T1", "T2")[i % 2]),
        }
        for what, write in cases.items():
            table = "members" if what.startswith("put_member") else "objects"
            times: dict[bool, list[float]] = {True: [], False: []}
            for i in range(2 * rounds):
                on = i % 4 in (0, 3)  # on, off, off, on: neither side always first
                gk.conn.execute(psycopg.sql.SQL("alter table groundkit.{} {} trigger {}").format(
                    psycopg.sql.Identifier(table), psycopg.sql.SQL("enable" if on else "disable"),
                    psycopg.sql.Identifier(TRIGGERS[table])))
                t0 = time.perf_counter()
                write(i)
                times[on].append((time.perf_counter() - t0) * 1000)
            for table_name, trigger in TRIGGERS.items():
                gk.conn.execute(psycopg.sql.SQL("alter table groundkit.{} enable trigger {}").format(
                    psycopg.sql.Identifier(table_name), psycopg.sql.Identifier(trigger)))
            on_ms, off_ms = statistics.median(times[True]), statistics.median(times[False])
            lines.append(f"| {what} | {off_ms:.2f} | {on_ms:.2f} | {on_ms - off_ms:+.2f} ({len(times[True])} each) |")
    return lines


def position_read_ms(dsn: str, n: int) -> float:
    with psycopg.connect(dsn, autocommit=True) as conn:
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            conn.execute("select * from groundkit.replica_state()").fetchone()
            times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m evals.bench replicas", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chunks", type=int, default=20_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=30.0, help="length of each arm")
    ap.add_argument("--changes-per-second", type=float, default=3.0, help="permission changes during each arm")
    ap.add_argument("--max-lag", type=float, default=5.0)
    ap.add_argument("--apply-delay-ms", type=int, default=100,
                    help="the third arm's recovery_min_apply_delay on the standby")
    ap.add_argument("--write-rounds", type=int, default=200, help="writes per side of the paired write overhead")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args(argv)
    with replica_pair.ReplicaPair() as pair:
        seconds, queries = timed(lambda: load(pair, args.chunks, args.queries, args.seed))
        log(f"loaded {args.chunks:,} chunks and replayed them on the standby in {seconds:.0f} s")
        lines = [f"{args.chunks:,} chunks, {args.clients} clients, {args.seconds:g} s per arm, "
                 f"{args.changes_per_second:g} permission changes per second, max_lag {args.max_lag:g} s "
                 "(primary and standby on the same cores)", "",
                 "| arm | searches | per second | p50 / p95 ms | on the standby | primary: fence | primary: lag "
                 "| primary: unreachable |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
        arms: tuple[tuple[str, list[str], int], ...] = (
                ("one server", [], 0), ("primary + standby, fenced", [pair.standby_dsn], 0),
                (f"the same, the standby applying commits {args.apply_delay_ms} ms late", [pair.standby_dsn],
                 args.apply_delay_ms))
        for name, replicas, delay in arms:
            if delay:
                pair.set_apply_delay(delay)
            with connect_pool(pair.primary_dsn, replicas, max_lag=args.max_lag, pool_size=args.clients + 1) as pool:
                for q in queries[:20]:  # warm the caches and plans
                    pool.search("r100", q)
                before = dict(pool.routed)
                done, ms = arm(pool, pair.primary_dsn, queries, args.clients, args.seconds, args.changes_per_second)
                routes = {route: sum(n - before.get(key, 0) for key, n in pool.routed.items() if key[1] == route)
                          for route in ("replica", "fence", "lag", "unreachable")}
            shares = [f"{n:,} ({n / done:.1%})" if replicas else "-" for n in routes.values()]
            lines.append(f"| {name} | {done:,} | {done / args.seconds:.1f} | {pct(ms, 50):.1f} / {pct(ms, 95):.1f} | "
                         + " | ".join(shares) + " |")
        lines += ["", f"the fence's read of the primary's position: {position_read_ms(pair.primary_dsn, 500):.3f} ms "
                  "median round trip (Unix socket)", "",
                  "| write | triggers off, median ms | on | difference |", "|---|---:|---:|---:|"]
        lines += paired_writes(pair.primary_dsn, args.write_rounds)
    for line in lines:
        print(line)
    sys.stdout.flush()
    return 0
