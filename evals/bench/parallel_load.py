"""Search under load, with and without parallel workers (docs/bm25.md, "Merged reads in parallel").

    python evals/bench/bench_search.py --dsn URL --chunks 1000000 --keep     # builds gk_bench_1000000
    python evals/bench/parallel_load.py --dsn URL --chunks 1000000 --clients 1,2,4

A long merged read runs in two processes when the session allows two parallel workers
(``max_parallel_workers_per_gather``). That lowers one query's latency; whether it helps or
hurts when several sessions search at once on the same cores is what this measures. On one
kept benchmark database (the queries bench_search.py ran there), C client connections run
every query of the list once each (each client in its own shuffled order), first with
``max_parallel_workers_per_gather`` 0 and then 2, or the other way round, alternating over
``--rounds``. Printed per client count and setting: queries per second over the round's wall
time, and the p50 / p95 / mean latency of the queries, with the ratios of 2 workers against 0
from the same run.
"""

from __future__ import annotations

import argparse
import functools
import random
import statistics
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import psycopg
from psycopg.conninfo import make_conninfo

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ab_search import bench_queries
from bench_search import kept_database_args, log, pct, run_at_once

SETTINGS = (0, 2)
SEARCH = "select object_id, chunk_seq from groundkit.search(%s, %s, %s)"


def one_round(dsn: str, queries: Sequence[str], reader: str, k: int, clients: int, workers: int,
              seed: int) -> tuple[float, list[float]]:
    """(wall seconds, every query's latency in ms) for clients connections searching at once."""
    conns = [psycopg.connect(dsn, autocommit=True) for _ in range(clients)]
    lat: list[float] = []
    lock = threading.Lock()

    def client(conn: psycopg.Connection[tuple[object, ...]], order: list[str]) -> None:
        mine: list[float] = []
        for q in order:
            t0 = time.perf_counter()
            conn.execute(SEARCH, (reader, q, k)).fetchall()
            mine.append(1000 * (time.perf_counter() - t0))
        with lock:
            lat.extend(mine)

    try:
        jobs = []
        for i, conn in enumerate(conns):
            conn.execute("select set_config('max_parallel_workers_per_gather', %s, false)", (str(workers),))
            order = list(queries)
            random.Random(seed * 1000 + i).shuffle(order)
            jobs.append(functools.partial(client, conn, order))
        wall = run_at_once(jobs)
    finally:
        for conn in conns:
            conn.close()
    return wall, lat


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    kept_database_args(ap, chunks=1_000_000)
    ap.add_argument("--reader", default="r100", help="r100, r50 or r5 (bench_search.py's readers)")
    ap.add_argument("--clients", default="1,2,4", help="comma-separated numbers of concurrent connections")
    ap.add_argument("--rounds", type=int, default=2, help="rounds per setting, alternating which goes first")
    args = ap.parse_args(argv)

    dsn = make_conninfo(args.dsn, dbname=f"gk_bench_{args.chunks}")
    queries = bench_queries(args.chunks, args.queries, args.seed)
    with psycopg.connect(dsn, autocommit=True) as conn:  # warm the cache once, as the rounds will find it
        for q in queries:
            conn.execute(SEARCH, (args.reader, q, args.k)).fetchall()
    out = sys.stdout
    out.write(f"\n{len(queries)} queries, reader {args.reader}, k = {args.k}, database gk_bench_{args.chunks}, "
              f"{args.rounds} round(s) per setting\n\n")
    out.write("| clients | max_parallel_workers_per_gather | queries/s | p50 / p95 / mean ms "
              "| 2 against 0: queries/s, p50, p95 |\n|---|---|---|---|---|\n")
    for clients in (int(c) for c in args.clients.split(",")):
        walls: dict[int, float] = dict.fromkeys(SETTINGS, 0.0)
        lats: dict[int, list[float]] = {w: [] for w in SETTINGS}
        for r in range(args.rounds):
            for workers in (SETTINGS if r % 2 == 0 else SETTINGS[::-1]):
                wall, lat = one_round(dsn, queries, args.reader, args.k, clients, workers, args.seed + r)
                walls[workers] += wall
                lats[workers].extend(lat)
                log(f"  {clients} client(s), {workers} workers, round {r + 1}: {len(lat) / wall:.1f} queries/s")
        qps = {w: len(lats[w]) / walls[w] for w in SETTINGS}
        for w in SETTINGS:
            ratio = ""
            if w == 2:
                ratio = (f"{qps[2] / qps[0]:.2f}x, {pct(lats[0], 50) / pct(lats[2], 50):.2f}x, "
                         f"{pct(lats[0], 95) / pct(lats[2], 95):.2f}x")
            out.write(f"| {clients} | {w} | {qps[w]:.1f} | {pct(lats[w], 50):.1f} / {pct(lats[w], 95):.1f} / "
                      f"{statistics.mean(lats[w]):.1f} | {ratio} |\n")
        out.flush()
    out.write("\n(Latency ratios: 0 workers over 2, so above 1x means faster with workers; queries/s: 2 over 0.)\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
