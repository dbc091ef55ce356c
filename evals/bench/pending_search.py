"""Search with the pending part full, in a session whose plans were made while it was empty.

    python evals/bench/bench_search.py --dsn URL --chunks 1000000 --keep    # builds gk_bench_1000000
    python evals/bench/pending_search.py --dsn URL --chunks 1000000 --pending-chunks 8192

On the kept benchmark database, in one session: ``merge_pending()`` (the part empty), the broad
reader's 2-6-term queries (best of three each; the plans the session caches are made now), then
--pending-chunks chunks written through ``put_object`` with merges out of reach, and the same
queries again. Prints the geomean of full / empty and the queries that moved most. At the end
the part is merged again and ``config.pending_merge_chunks`` set back to what it was; the
objects written stay in the database.

Revision 0006 measured with it what a plan made while the part was nearly empty costs once the
part has grown (a sequential scan of it per query term), and that the functions reading the part
no longer make such plans (docs/bm25.md, "The pending part"). ``--analyze-empty`` makes the
planner sure the part is empty: plans that then read it whole through its index (to hash it)
were the second form of the trap.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ab_search import bench_queries
from bench_search import kept_database_args
from corpus import PUT_OBJECT_SQL, Corpus


def best_ms(conn: psycopg.Connection[Any], query: str, k: int) -> float:
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        conn.execute("select count(*) from groundkit.search('r100', %s, %s)", (query, k)).fetchall()
        best = min(best, time.perf_counter() - t0)
    return 1000 * best


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    kept_database_args(ap, chunks=1_000_000, queries=100)
    ap.add_argument("--pending-chunks", type=int, default=8192)
    ap.add_argument("--show", type=int, default=8, help="how many of the queries that moved most to print")
    ap.add_argument("--analyze-empty", action="store_true",
                    help="vacuum analyze the pending part once it is empty, before the plans are made: the"
                         " planner then believes it empty (how autovacuum may leave it after a merge)")
    args = ap.parse_args(argv)

    queries = [q for q in bench_queries(args.chunks, args.queries, args.seed) if 2 <= len(q.split()) <= 6]
    with psycopg.connect(make_conninfo(args.dsn, dbname=f"gk_bench_{args.chunks}"), autocommit=True) as conn:
        row = conn.execute("select pending_merge_chunks from groundkit.config").fetchone()
        assert row is not None
        every = int(row[0])
        conn.execute("select groundkit.merge_pending()")
        if args.analyze_empty:
            conn.execute("vacuum analyze groundkit.pending_postings")
        empty = {q: best_ms(conn, q, args.k) for q in queries}
        conn.execute("update groundkit.config set pending_merge_chunks = 2000000000")
        try:
            objs = Corpus(seed=args.seed + 4242).objects(10 ** 9)
            tag = f"ps{int(time.time())}-"
            n = 0
            while n < args.pending_chunks:
                o = next(objs)
                conn.execute(PUT_OBJECT_SQL, dict(o.as_json(), object_id=tag + o.object_id))
                n += len(o.paragraphs)
            full = {q: best_ms(conn, q, args.k) for q in queries}
        finally:
            conn.execute("update groundkit.config set pending_merge_chunks = %s", (every,))
            conn.execute("select groundkit.merge_pending()")
    ratios = sorted(((full[q] / empty[q], q) for q in queries), reverse=True)
    print(f"{len(queries)} r100 2-6-term queries, {n:,} chunks pending against none (plans made with none): "
          f"geomean {statistics.geometric_mean([r for r, _q in ratios]):.3f}, mean "
          f"{statistics.fmean(full.values()):.2f} against {statistics.fmean(empty.values()):.2f} ms")
    for r, q in ratios[: args.show]:
        print(f"  {r:6.2f}  {empty[q]:7.2f} -> {full[q]:7.2f} ms  {q}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
