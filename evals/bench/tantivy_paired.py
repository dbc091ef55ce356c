"""groundkit.search against tantivy, query by query, in the same minutes.

    python evals/bench/bench_search.py --dsn URL --chunks 1000000 --keep     # builds gk_bench_1000000
    python evals/bench/tantivy_paired.py --dsn URL --chunks 1000000 --rounds 3

bench_search.py times tantivy minutes after groundkit.search (after the ts_rank_cd arm and the
index build), and this machine's speed moves by up to 2x within an hour: tantivy's median for the
same queries on the same corpus has measured 2.2 ms in some runs and 3.3-3.9 ms in others, which
moves the "within 5x of tantivy" ratio as much as any change to groundkit. Here the two engines
take turns: tantivy's index of the same corpus is built first (in process, no permissions, the
en_stem analyzer, as in bench_search.py), then in every round each query runs once through
tantivy and once through groundkit.search for each reader, in alternating order, every round in a
new shuffled query order. So both engines see the same machine at the same moment. An untimed
round comes first (--warm-up-rounds): the index build takes memory that held the database's
pages, and without it the first round measures groundkit with a cold cache (2x slower).

Printed per reader and round, and over all rounds (for 2-6-term queries, as the target has it):
groundkit's and tantivy's p50, the ratio of those p50s (the target's measure), and the median
and geometric mean of the per-query ratios (groundkit's time over tantivy's for the same query
in the same turn). --per-query writes every timing as JSON lines.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import psycopg
from psycopg.conninfo import make_conninfo

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ab_search import bench_queries
from bench_search import READERS, in_turns, kept_database_args, tantivy_index, turns_summary
from corpus import Corpus


def row(label: str, gk: Sequence[float], tv: Sequence[float]) -> str:
    s = turns_summary(gk, tv)
    return (f"| {label} | {s['groundkit_p50_ms']:.2f} | {s['tantivy_p50_ms']:.2f} | {s['p50_ratio']:.2f}x "
            f"| {s['median_ratio']:.2f}x | {s['geomean_ratio']:.2f}x |\n")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    kept_database_args(ap, chunks=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warm-up-rounds", type=int, default=1,
                    help="untimed rounds first (building tantivy's index takes memory the database's pages held)")
    ap.add_argument("--per-query", type=Path, help="write every timing here (JSON lines)")
    args = ap.parse_args(argv)

    dsn = make_conninfo(args.dsn, dbname=f"gk_bench_{args.chunks}")
    queries = bench_queries(args.chunks, args.queries, args.seed)
    index, _ = tantivy_index(Corpus(seed=args.seed), args.chunks)
    with (psycopg.connect(dsn, autocommit=True) as conn,
          args.per_query.open("w") if args.per_query else contextlib.nullcontext() as per_query):
        nterms = {q: len(conn.execute("select * from groundkit.query_terms(%s)", (q,)).fetchall()) for q in queries}
        mid = [q for q in queries if 2 <= nterms[q] <= 6]

        def write(rnd: int, reader: str, q: str, g: float, t: float) -> None:
            if per_query:
                per_query.write(json.dumps({"round": rnd, "reader": reader, "query": q,
                                            "groundkit_ms": g, "tantivy_ms": t}) + "\n")

        turns = in_turns(conn, index, mid, args.k, args.rounds, args.warm_up_rounds, args.seed, write)

    out = sys.stdout
    out.write(f"\n{len(mid)} queries of 2-6 terms (of {len(queries)}), k = {args.k}, database "
              f"gk_bench_{args.chunks}; each query through both engines in turn, {args.rounds} rounds\n\n")
    out.write("| reader, round | groundkit p50 ms | tantivy p50 ms | p50 / p50 | median of per-query ratios "
              "| geomean of per-query ratios |\n|---|---|---|---|---|---|\n")
    for reader in READERS:
        gk, tv = turns[reader]
        for rnd in range(args.rounds):
            out.write(row(f"{reader}, {rnd + 1}", gk[rnd], tv[rnd]))
        out.write(row(f"{reader}, all", [x for r in gk for x in r], [x for r in tv for x in r]))
    return 0

if __name__ == "__main__":
    raise SystemExit(main())
