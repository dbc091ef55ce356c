"""Two databases of the same corpus, differing in one thing, paired: search and one-object writes.

    python evals/bench/bench_search.py --dsn URL --chunks 1000000 --keep    # builds gk_bench_1000000
    python evals/bench/two_databases.py --dsn URL --databases gk_a gk_b [--search] [--writes ROUNDS]

Made for the question "would declaring the term columns ``collate "C"`` make groundkit faster?"
(docs/bm25.md, "The term columns' collation, not changed"). The copies were made by hand, as::

    create database gk_a template gk_bench_1000000 strategy file_copy;   -- then groundkit migrate
    -- in gk_b (a copy made the same way), for each of pending_postings, term_stats, term_bits,
    -- postings_sketch and postings:
    alter table groundkit.postings alter column term type text collate "C";
    -- and in gk_a, for a fair start, the same indexes rebuilt without the change:
    reindex table groundkit.postings; reindex table groundkit.term_stats;

``--search``: the benchmark's queries for each reader, each run on both databases back to back
(alternating which goes first), the fastest of two runs each (``ab_search.paired_table``), after an
untimed pass of 30 queries on each. ``--writes N``: N rounds; in each, the same 600 new objects go
through ``put_object`` one per transaction into each database in turn (alternating which goes
first), then ``merge_pending()`` is timed on its own (writers do not merge inline meanwhile:
``pending_merge_chunks`` is set out of reach, and back to 2,048 at the end). The objects written
stay in both databases.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ab_search import bench_queries, paired_table
from corpus import PUT_OBJECT_SQL, Corpus

SEARCH_SQL = "select object_id, chunk_seq, score from groundkit.search(%s, %s, %s)"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsn", required=True, help="the server both databases are on")
    ap.add_argument("--databases", nargs=2, required=True, metavar=("A", "B"))
    ap.add_argument("--chunks", type=int, default=1_000_000, help="the kept database both were copied from")
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--search", action="store_true")
    ap.add_argument("--writes", type=int, default=0, metavar="ROUNDS")
    ap.add_argument("--write-seed", type=int, default=777, help="the corpus seed of the objects written")
    args = ap.parse_args(argv)
    a, b = args.databases
    conns = {name: psycopg.connect(make_conninfo(args.dsn, dbname=name), autocommit=True) for name in (a, b)}
    try:
        if args.search:
            queries = bench_queries(args.chunks, args.queries, args.seed)

            def arm(conn: psycopg.Connection[Any]) -> Callable[[str, str], list[float]]:
                return lambda r, q: [float(x[-1]) for x in conn.execute(SEARCH_SQL, (r, q, 10)).fetchall()]

            for conn in conns.values():
                for q in queries[:30]:
                    conn.execute(SEARCH_SQL, ("r100", q, 10)).fetchall()
            paired_table(sys.stdout, {a: arm(conns[a]), b: arm(conns[b])}, queries, 2, None)
        if args.writes:
            per_round = 600
            objs = list(Corpus(seed=args.write_seed).objects(8 * per_round * args.writes))
            for conn in conns.values():
                conn.execute("update groundkit.config set pending_merge_chunks = 1000000000")
            done: dict[str, list[tuple[int, float, float]]] = {a: [], b: []}
            try:
                for r in range(args.writes):
                    batch = objs[r * per_round:(r + 1) * per_round]
                    for name in ((a, b) if r % 2 == 0 else (b, a)):
                        conn, tag, chunks = conns[name], f"two-{uuid.uuid4().hex[:6]}-", 0
                        t0 = time.perf_counter()
                        for o in batch:
                            conn.execute(PUT_OBJECT_SQL, dict(o.as_json(), object_id=tag + o.object_id))
                            chunks += len(o.paragraphs)
                        wrote = time.perf_counter() - t0
                        t1 = time.perf_counter()
                        conn.execute("select groundkit.merge_pending()")
                        merged = time.perf_counter() - t1
                        done[name].append((chunks, wrote, merged))
                        print(f"round {r} {name}: {chunks} chunks, writes {chunks / wrote:,.0f} chunks/s, "
                              f"merge {1000 * merged:.0f} ms", flush=True)
            finally:
                for conn in conns.values():
                    conn.execute("update groundkit.config set pending_merge_chunks = 2048")
            for name, rounds in done.items():
                chunks = sum(x[0] for x in rounds)
                wrote = sum(x[1] for x in rounds)
                merged = sum(x[2] for x in rounds)
                print(f"{name}: writes {chunks / wrote:,.0f} chunks/s, merges {1000 * merged / chunks:.3f} ms per "
                      f"chunk, both {chunks / (wrote + merged):,.0f} chunks/s")
    finally:
        for conn in conns.values():
            conn.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
