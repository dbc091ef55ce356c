"""One-object writes over time: how a cold buffer cache and a checkpoint's full-page images move put_object.

    python evals/bench/bench_search.py --dsn URL --chunks 1000000 --keep    # builds gk_bench_1000000
    python evals/bench/write_phases.py --dsn URL --chunks 1000000 --windows 8 --objects 300

bench_search.py times its 3,000 one-object writes once, soon after the bulk load, the vacuum and
the queries: whatever state the buffer cache and the checkpoint cycle are in then. This script
separates the two. It copies a kept benchmark database (``create database ... template ...
strategy file_copy``; the copy is dropped at the end, the kept database is not touched), so the
copy starts with none of its pages in shared_buffers, then runs two phases:

- ``cold``: a CHECKPOINT, then --windows windows of --objects put_object calls (autocommit: one
  transaction each, as in bench_search.py);
- ``warm``: another CHECKPOINT, then as many windows again, with the pages the first phase read
  still cached.

After a checkpoint, the first change to a page writes the whole page to the WAL (a full-page
image, FPI); the count per object falls as the writes touch pages already imaged. Per window it
prints chunks/s, ms per object, FPIs and WAL kB per object (pg_stat_wal, server-wide), and the
groundkit blocks per object read into shared_buffers and found there (pg_statio_all_tables,
this database). The last windows of the warm phase are the steady state between checkpoints.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_search import copy_of, groundkit_blocks
from corpus import PUT_OBJECT_SQL, Corpus, Obj


def counters(conn: psycopg.Connection[Any]) -> tuple[float, ...]:
    """WAL full-page images and bytes (server-wide), groundkit blocks read and hit (this database)."""
    read, hit = groundkit_blocks(conn)
    row = conn.execute("select wal_fpi, wal_bytes from pg_stat_wal").fetchone()
    assert row is not None
    return float(row[0]), float(row[1]), read, hit


def run_phase(conn: psycopg.Connection[Any], name: str, objs: Iterator[Obj], windows: int, per: int,
              tag: str) -> list[dict[str, float]]:
    conn.execute("checkpoint")
    out = []
    for w in range(windows):
        before = counters(conn)
        chunks = 0
        t0 = time.perf_counter()
        for _ in range(per):
            o = next(objs)
            conn.execute(PUT_OBJECT_SQL, dict(o.as_json(), object_id=tag + o.object_id))
            chunks += len(o.paragraphs)
        dt = time.perf_counter() - t0
        d = [b - a for a, b in zip(before, counters(conn), strict=True)]
        row = {"window": w, "chunks_per_s": chunks / dt, "ms_per_object": 1000 * dt / per,
               "fpi_per_object": d[0] / per, "wal_kb_per_object": d[1] / per / 1024,
               "read_per_object": d[2] / per, "hit_per_object": d[3] / per}
        out.append(row)
        print(f"  {name} window {w + 1}/{windows}: {row['chunks_per_s']:,.0f} chunks/s", file=sys.stderr)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsn", required=True, help="the server bench_search.py --keep built its database on")
    ap.add_argument("--chunks", type=int, default=1_000_000, help="which gk_bench_<chunks> database")
    ap.add_argument("--windows", type=int, default=8, help="windows per phase")
    ap.add_argument("--objects", type=int, default=300, help="put_object calls per window")
    ap.add_argument("--seed", type=int, default=8100)
    args = ap.parse_args(argv)

    kept = f"gk_bench_{args.chunks}"
    n = 2 * args.windows * args.objects
    objs = iter(list(Corpus(seed=args.seed).objects(4 * n))[:n])
    with copy_of(args.dsn, kept, "write_phases") as copy_dsn, psycopg.connect(copy_dsn, autocommit=True) as conn:
        phases = {name: run_phase(conn, name, objs, args.windows, args.objects, f"wp-{name}-")
                  for name in ("cold", "warm")}

    print(f"\n{kept}: put_object, one object per transaction, {args.windows} windows of {args.objects} "
          "objects per phase, each phase after a CHECKPOINT\n")
    print("| phase | window | chunks/s | ms per object | FPIs per object | WAL kB per object "
          "| blocks read per object | blocks hit per object |\n|---|---|---|---|---|---|---|---|")
    for name, rows in phases.items():
        for r in rows:
            print(f"| {name} | {r['window'] + 1} | {r['chunks_per_s']:,.0f} | {r['ms_per_object']:.2f} "
                  f"| {r['fpi_per_object']:.1f} | {r['wal_kb_per_object']:.0f} | {r['read_per_object']:.1f} "
                  f"| {r['hit_per_object']:.0f} |")
    last = max(1, args.windows // 4)
    cold_first = phases["cold"][0]["chunks_per_s"]
    warm_first = phases["warm"][0]["chunks_per_s"]
    steady = statistics.fmean(r["chunks_per_s"] for r in phases["warm"][-last:])
    print(f"\ncold first window {cold_first:,.0f} chunks/s; warm first window {warm_first:,.0f} "
          f"({warm_first / cold_first:.2f}x); warm, last {last} windows {steady:,.0f} "
          f"({steady / cold_first:.2f}x the cold first window)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
