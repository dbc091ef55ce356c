"""The overhead of a run around a search: ``gk.run(...)`` with one ``run.search`` against the bare
``gk.search``, at k = 10.

    python -m evals.bench runs --chunks 100000                        # builds its own database
    python -m evals.bench runs --dsn URL --kept gk_bench_100000       # a migrated copy of a kept one

The database: a new one of ``--chunks`` chunks of the benchmark's corpus, loaded as ``search``
loads it, or a file copy of a kept benchmark database, migrated (the kept one is not touched).
Two arms, per reader, every query back to back, alternating which goes first, the fastest of
``--repeat`` runs each, both through the Python client on one autocommit connection:

- ``search``: ``gk.search(reader, query, k, mode="bm25")``, one statement;
- ``run``: ``with gk.run(flow="home", reader=reader) as run: run.search(query, k)``: BEGIN, a
  savepoint, ``groundkit.run_search`` (the search and its record in one statement), the
  savepoint's release, ``groundkit.record_run`` and COMMIT.

The table gives both arms' ms per query and the run's overhead (run minus search) by median and
mean, and the overhead of a third arm, the same run on a connection with synchronous_commit off:
the run's commit is the one write of the three and waits for its WAL flush, whose time is the
disk's (on a shared host it moves with the neighbours' writes). The issue's target: at most 1 ms
over the bare search at k = 10.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import psycopg

import groundkit
from evals.bench.common import READERS, bench_queries, copy_of, log, pct, populate_authority, scratch_db, server, timed
from evals.bench.corpus import Corpus, Obj
from evals.bench.ingest import bulk_load
from groundkit import Groundkit


@contextmanager
def database(server_dsn: str, args: argparse.Namespace) -> Iterator[tuple[str, list[str]]]:
    """The database to measure on, and the queries to run there."""
    if args.kept:
        with copy_of(server_dsn, args.kept, "bh_runs") as dsn:
            seconds, _ = timed(lambda: groundkit.migrate(dsn, gate=False))
            log(f"migrated the copy in {seconds:.0f} s")
            yield dsn, bench_queries(args.chunks, args.queries, args.seed)
        return
    corpus = Corpus(seed=args.seed)
    with scratch_db(server_dsn, "bh_runs") as dsn:
        sample: list[Obj] = []
        with psycopg.connect(dsn, autocommit=True) as conn:
            populate_authority(conn, corpus)
            bulk_load(dsn, corpus, args.chunks, 2000, 2, sample)
            seconds, _ = timed(lambda: (conn.execute("vacuum analyze"),
                                        conn.execute("select groundkit.analyze_postings()"),
                                        conn.execute("checkpoint")))
            log(f"vacuum, analyze, checkpoint: {seconds:.0f} s")
        yield dsn, Corpus(seed=args.seed).queries(args.queries, sample)


def _bare(gk: Groundkit, reader: str, query: str, k: int) -> float:
    t0 = time.perf_counter()
    gk.search(reader, query, k=k, mode="bm25")  # run.search's ranking (the default, auto, asks which first)
    return time.perf_counter() - t0


def _in_run(gk: Groundkit, reader: str, query: str, k: int) -> float:
    t0 = time.perf_counter()
    with gk.run(flow="home", reader=reader) as run:
        run.search(query, k=k)
    return time.perf_counter() - t0


def measure(dsn: str, queries: Sequence[str], k: int, repeat: int) -> list[str]:
    lines: list[str] = []
    with Groundkit.connect(dsn) as gk, Groundkit.connect(dsn) as lazy:
        lazy.conn.execute("set synchronous_commit = off")
        settings = {r["name"]: r["setting"] for r in gk.conn.execute(
            "select name, setting from pg_settings where name in ('synchronous_commit', 'fsync')").fetchall()}
        for q in queries:  # one untimed pass: the pages in the cache, the plans made
            _bare(gk, "r100", q, k)
            _in_run(gk, "r100", q, k)
            _in_run(lazy, "r100", q, k)
        lines += [f"run around a search, {len(queries)} queries, k = {k}, fastest of {repeat} (ms per query; "
                  f"server synchronous_commit={settings.get('synchronous_commit')}, "
                  f"fsync={settings.get('fsync')})", "",
                  "| reader | search p50 / mean | run p50 / mean | overhead p50 / mean "
                  "| overhead, commit not flushed, p50 / mean |",
                  "|---|---:|---:|---:|---:|"]
        arms = (lambda r, q: _bare(gk, r, q, k), lambda r, q: _in_run(gk, r, q, k),
                lambda r, q: _in_run(lazy, r, q, k))
        for reader in READERS:
            ms: list[list[float]] = [[], [], []]
            for i, q in enumerate(queries):
                best = [float("inf")] * 3
                for j in range(repeat):
                    order = (0, 1, 2) if (i + j) % 2 == 0 else (2, 1, 0)
                    for a in order:
                        best[a] = min(best[a], arms[a](reader, q))
                for a in range(3):
                    ms[a].append(best[a] * 1000)
            over = [r - b for r, b in zip(ms[1], ms[0], strict=True)]
            lazy_over = [r - b for r, b in zip(ms[2], ms[0], strict=True)]
            lines.append(f"| {reader} | {pct(ms[0], 50):.2f} / {statistics.mean(ms[0]):.2f} | "
                         f"{pct(ms[1], 50):.2f} / {statistics.mean(ms[1]):.2f} | "
                         f"{pct(over, 50):.2f} / {statistics.mean(over):.2f} | "
                         f"{pct(lazy_over, 50):.2f} / {statistics.mean(lazy_over):.2f} |")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m evals.bench runs", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsn", help="a server to work on (default: a throwaway embedded one)")
    ap.add_argument("--kept", help="a kept benchmark database to copy and migrate (e.g. gk_bench_100000), with --dsn")
    ap.add_argument("--chunks", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=150)
    ap.add_argument("--repeat", type=int, default=3, help="runs of each query per arm; the fastest counts")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args(argv)
    if args.kept and not args.dsn:
        ap.error("--kept needs --dsn")
    with server(args.dsn) as server_dsn, database(server_dsn, args) as (dsn, queries):
        for line in measure(dsn, queries, args.k, args.repeat):
            print(line)
    sys.stdout.flush()
    return 0
