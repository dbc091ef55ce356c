"""What the audit chain costs a run (docs/governance.md, "What the chain costs").

    python -m evals.bench chain --chunks 20000

Two copies of one database of ``--chunks`` chunks, identical but for the chain: in ``off`` the
chain's deferred triggers (``*_audit_chain``) are disabled, in ``on`` they run as shipped. Both on
one server, measured in the same run:

- one client: ``with gk.run(flow="home", reader=...) as run: run.search(query, k=10)`` (two round
  trips, as docs/runs.md measures), every query back to back on ``on`` and ``off``, alternating
  which goes first, the fastest of ``--repeat`` runs each; the chain's overhead per run by median
  and mean (a run around one search writes two entries: its search and its header). Twice: with
  synchronous_commit off on both connections (the chain's own work, without the disk's flush time,
  which moves with the neighbours' writes on a shared host), then as shipped;
- server side: ``--batch`` runs (a header and one search of ten hits) written by one statement
  with the chain's triggers fired at its end, on and off: the chain's own work per run, without
  the round trips, the search and the disk, whose noise on a busy host hides a millisecond;
- ``--clients`` concurrent clients doing such runs for ``--seconds`` on each copy in turn: runs per
  second and the latency percentiles, with and without the chain. The chain links entries in
  commit order, taking the genesis entry's row lock at commit: committing runs take turns there
  (the lock is held from the link to the commit's end, its WAL flush included).

Afterwards ``audit verify`` recomputes the ``on`` copy's chain, its time per entry printed too.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import psycopg
from psycopg import sql

from evals.bench.common import READERS, log, pct, populate_authority, scratch_db, server, timed
from evals.bench.corpus import Corpus, Obj
from evals.bench.ingest import bulk_load
from groundkit import Groundkit, audit

CHAINED = ("runs", "run_searches", "gate_ledger")


@contextmanager
def databases(server_dsn: str, args: argparse.Namespace) -> Iterator[tuple[str, str, list[str]]]:
    """Two copies of one loaded database, the chain on and off, and the queries."""
    corpus = Corpus(seed=args.seed)
    with scratch_db(server_dsn, "bh_chain") as dsn:
        sample: list[Obj] = []
        with psycopg.connect(dsn, autocommit=True) as conn:
            populate_authority(conn, corpus)
            bulk_load(dsn, corpus, args.chunks, 2000, 2, sample)
            conn.execute("vacuum analyze")
            conn.execute("select groundkit.analyze_postings()")
        queries = Corpus(seed=args.seed).queries(args.queries, sample)
        name = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
        with _copy(server_dsn, str(name), "on") as on, _copy(server_dsn, str(name), "off") as off:
            with psycopg.connect(off, autocommit=True) as conn:
                for table in CHAINED:
                    conn.execute(sql.SQL("alter table groundkit.{} disable trigger {}").format(
                        sql.Identifier(table), sql.Identifier(f"{table}_audit_chain")))
            with psycopg.connect(server_dsn, autocommit=True) as conn:
                conn.execute("checkpoint")
            yield on, off, queries


@contextmanager
def _copy(server_dsn: str, source: str, label: str) -> Iterator[str]:
    name = f"{source}_{label}"
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("create database {} template {} strategy file_copy").format(
            sql.Identifier(name), sql.Identifier(source)))
    try:
        yield psycopg.conninfo.make_conninfo(server_dsn, dbname=name)
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name)))


def _run(gk: Groundkit, reader: str, query: str, k: int) -> float:
    t0 = time.perf_counter()
    with gk.run(flow="home", reader=reader) as run:
        run.search(query, k=k)
    return time.perf_counter() - t0


def one_client(on: str, off: str, queries: Sequence[str], k: int, repeat: int, *, flushed: bool) -> list[str]:
    how = "each commit waits for its WAL flush" if flushed else "synchronous_commit off: the flush not waited for"
    lines = [f"a run around one search, one client, {len(queries)} queries, k = {k}, fastest of {repeat} "
             f"(ms per run; {how})", "",
             "| reader | chain off p50 / mean | chain on p50 / mean | chain's overhead p50 / mean |",
             "|---|---:|---:|---:|"]
    with Groundkit.connect(on) as g_on, Groundkit.connect(off) as g_off:
        if not flushed:
            for gk in (g_on, g_off):
                gk.conn.execute("set synchronous_commit = off")
        for q in queries:  # one untimed pass: pages cached, plans made
            _run(g_on, "r100", q, k)
            _run(g_off, "r100", q, k)
        for reader in READERS:
            ms: list[list[float]] = [[], []]
            for i, q in enumerate(queries):
                best = [float("inf")] * 2
                for j in range(repeat):
                    arms = ((1, g_on), (0, g_off)) if (i + j) % 2 == 0 else ((0, g_off), (1, g_on))
                    for a, gk in arms:
                        best[a] = min(best[a], _run(gk, reader, q, k))
                for a in range(2):
                    ms[a].append(best[a] * 1000)
            over = [b - a for a, b in zip(ms[0], ms[1], strict=True)]
            lines.append(f"| {reader} | {pct(ms[0], 50):.3f} / {statistics.mean(ms[0]):.3f} | "
                         f"{pct(ms[1], 50):.3f} / {statistics.mean(ms[1]):.3f} | "
                         f"{pct(over, 50):.3f} / {statistics.mean(over):.3f} |")
    return lines


_BATCH = """
with r as (
    insert into groundkit.runs (run_id, flow, reader_sub, reader_tier, reader_status, model, prompt_version,
                                started_at, log_marker, snapshot)
    select gen_random_uuid(), 'home', 'r100', 'T3', 'active', 'm-1', 'p@1', now(), 0, pg_current_snapshot()
      from generate_series(1, %(n)s)
    returning run_id)
insert into groundkit.run_searches (run_id, search_no, reader_sub, reader_tier, reader_status, reader_rank, query,
                                    mode, params, log_marker, snapshot, hits)
select r.run_id, 1, 'r100', 'T3', 'active', 3, 'a query of a few words', 'bm25',
       '{"k": 10, "space_ids": null, "content_types": null}', 0, pg_current_snapshot(), %(hits)s::jsonb
  from r
"""


def server_side(on: str, off: str, n: int, repeat: int) -> list[str]:
    """The chain's own work per run, without round trips or the search: ``n`` runs (a header and
    one search with ten hits as run_search records them) inserted by one statement, the chain's
    triggers fired at its end (constraints immediate), on and off, alternating; rolled back."""
    best = {on: float("inf"), off: float("inf")}
    with psycopg.connect(on) as c:
        row = c.execute("select hits::text from groundkit.run_searches where jsonb_array_length(hits) = 10"
                        " limit 1").fetchone()
    hits = row[0] if row else "[]"
    conns = {dsn: psycopg.connect(dsn) for dsn in (on, off)}
    try:
        for i in range(repeat):
            for dsn in ((on, off) if i % 2 == 0 else (off, on)):
                conn = conns[dsn]
                conn.execute("set constraints all immediate")
                t0 = time.perf_counter()
                conn.execute(_BATCH, {"n": n, "hits": hits})
                best[dsn] = min(best[dsn], time.perf_counter() - t0)
                conn.rollback()
    finally:
        for conn in conns.values():
            conn.close()
    per_on, per_off = best[on] / n * 1e6, best[off] / n * 1e6
    return ["", f"server side, {n:,} runs (a header and one search of 10 hits each) in one statement, the chain's "
                f"triggers fired at its end, fastest of {repeat}: {per_off:.0f} us per run without the chain, "
                f"{per_on:.0f} us with it: the chain's work is {per_on - per_off:.0f} us per run "
                f"({(per_on - per_off) / 2:.0f} us per entry)"]


def clients(dsn: str, queries: Sequence[str], k: int, n: int, seconds: float) -> tuple[float, list[float]]:
    """Runs per second and each run's ms, ``n`` clients for ``seconds``."""
    times: list[float] = []
    readers = list(READERS)
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def work(i: int) -> None:
        mine: list[float] = []
        with Groundkit.connect(dsn) as gk:
            j = i
            while time.monotonic() < stop:
                mine.append(_run(gk, readers[j % len(readers)], queries[j % len(queries)], k) * 1000)
                j += n
        with lock:
            times.extend(mine)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return len(times) / (time.monotonic() - t0), times


def concurrent(on: str, off: str, queries: Sequence[str], k: int, counts: Sequence[int], seconds: float) -> list[str]:
    lines = ["", f"concurrent clients, {seconds:g} s each, chain off then on, alternating per client count", "",
             "| clients | off: runs/s, p50 / p95 ms | on: runs/s, p50 / p95 ms | on / off runs/s |",
             "|---:|---:|---:|---:|"]
    for n in counts:
        rate_off, t_off = clients(off, queries, k, n, seconds)
        rate_on, t_on = clients(on, queries, k, n, seconds)
        lines.append(f"| {n} | {rate_off:.0f}, {pct(t_off, 50):.2f} / {pct(t_off, 95):.2f} | "
                     f"{rate_on:.0f}, {pct(t_on, 50):.2f} / {pct(t_on, 95):.2f} | {rate_on / rate_off:.2f} |")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m evals.bench chain", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsn", help="a server to work on (default: a throwaway embedded one)")
    ap.add_argument("--chunks", type=int, default=20_000)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3, help="runs of each query per arm; the fastest counts")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--clients", type=int, nargs="*", default=[1, 4, 8])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--batch", type=int, default=2000, help="runs per statement in the server-side measurement")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args(argv)
    with server(args.dsn) as server_dsn, databases(server_dsn, args) as (on, off, queries):
        lines = one_client(on, off, queries, args.k, args.repeat, flushed=False)
        lines += ["", *one_client(on, off, queries, args.k, args.repeat, flushed=True)]
        lines += server_side(on, off, args.batch, max(args.repeat, 3))
        if args.clients:
            lines += concurrent(on, off, queries, args.k, args.clients, args.seconds)
        with Groundkit.connect(on) as gk:
            seconds, report = timed(lambda: audit.verify_chain(gk))
        lines += ["", f"audit verify on the chain-on copy: {report.entries:,} entries in {seconds:.2f} s "
                      f"({seconds / max(report.entries, 1) * 1e6:.0f} us per entry), "
                      f"{'verified' if report.ok else 'BROKEN'}"]
        with psycopg.connect(on) as conn:
            settings: dict[str, str] = {str(r[0]): str(r[1]) for r in conn.execute(
                "select name, setting from pg_settings where name in ('synchronous_commit', 'fsync')").fetchall()}
        lines.append(f"(server synchronous_commit={settings.get('synchronous_commit')}, fsync={settings.get('fsync')})")
        log("")
        for line in lines:
            print(line)
    sys.stdout.flush()
    return 0
