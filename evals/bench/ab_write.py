"""Paired A/B write throughput: groundkit's write functions now vs as they were at a git revision.

    python evals/bench/bench_search.py --dsn URL --chunks 1000000 --keep     # builds gk_bench_1000000
    python evals/bench/ab_write.py --dsn URL --chunks 1000000 --baseline-rev af08bc2
    python evals/bench/ab_write.py --dsn URL --chunks 1000000 --baseline-rev af08bc2 --single 200

On one kept benchmark database this writes fresh objects (the benchmark corpus with another seed,
new ids) in blocks A B B A, A B B A, ...: before each write the baseline's or the working tree's
replaceable write files (sql/040_index.sql, sql/055_bulk.sql) are installed, so the two arms
alternate on the same database under the same load. A CHECKPOINT precedes every write, so each
starts with clean pages and pays the full-page WAL images a steady load pays after checkpoints
(without it, whichever arm happens to follow a checkpoint pays them). One write is one put_objects call of
--batch objects, or with --single N, N put_object calls (one transaction each). It prints each
arm's chunks/s and the ratio. The objects written stay in the database; the working tree's
functions are installed at the end.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo
from psycopg.types.json import Jsonb

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus import PUT_OBJECT_SQL, Corpus, Obj
from sqlsource import repo_file

FILES = ["sql/040_index.sql", "sql/055_bulk.sql"]


def write(conn: psycopg.Connection[Any], objs: list[Obj], single: bool) -> tuple[float, int]:
    tag = f"abw-{uuid.uuid4().hex[:8]}-"
    t0 = time.perf_counter()
    if single:
        for o in objs:
            conn.execute(PUT_OBJECT_SQL, dict(o.as_json(), object_id=tag + o.object_id))
    else:
        conn.execute("select count(*) from groundkit.put_objects(%s)",
                     (Jsonb([dict(o.as_json(), object_id=tag + o.object_id) for o in objs]),))
    dt = time.perf_counter() - t0
    row = conn.execute("select count(*) from groundkit.chunks where object_id like %s", (tag + "%",)).fetchone()
    assert row is not None
    return dt, int(row[0])


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsn", required=True, help="the server bench_search.py --keep built its database on")
    ap.add_argument("--chunks", type=int, default=1_000_000, help="which gk_bench_<chunks> database")
    ap.add_argument("--baseline-rev", required=True)
    ap.add_argument("--blocks", type=int, default=4, help="A B B A blocks")
    ap.add_argument("--batch", type=int, default=1000, help="objects per put_objects call")
    ap.add_argument("--single", type=int, default=0, help="put_object calls per write instead")
    ap.add_argument("--seed", type=int, default=4711)
    args = ap.parse_args(argv)

    baseline = "\n".join(repo_file(f, args.baseline_rev) for f in FILES)
    current = "\n".join(repo_file(f) for f in FILES)
    per_write = args.single or args.batch
    n_writes = 4 * args.blocks
    objs: list[Obj] = []
    for o in Corpus(seed=args.seed).objects(10 ** 9):
        objs.append(o)
        if len(objs) >= per_write * n_writes:
            break
    order = "ABBA" * args.blocks
    totals = {"A": [0.0, 0], "B": [0.0, 0]}
    dsn = make_conninfo(args.dsn, dbname=f"gk_bench_{args.chunks}")
    with psycopg.connect(dsn, autocommit=True) as conn:
        try:
            for i, arm in enumerate(order):
                conn.execute(baseline if arm == "A" else current)
                conn.execute("checkpoint")
                dt, chunks = write(conn, objs[i * per_write:(i + 1) * per_write], bool(args.single))
                totals[arm][0] += dt
                totals[arm][1] += chunks
                print(f"  {arm} ({'baseline' if arm == 'A' else 'now'}): {chunks} chunks in {dt:.2f} s, "
                      f"{chunks / dt:,.0f} chunks/s", file=sys.stderr, flush=True)
        finally:
            conn.execute(current)
    rate = {arm: totals[arm][1] / totals[arm][0] for arm in totals}
    what = f"put_object x {args.single} per write" if args.single else f"put_objects of {args.batch} objects"
    print(f"{what}, {n_writes} writes (A B B A x {args.blocks}), database gk_bench_{args.chunks}, "
          f"baseline {args.baseline_rev}")
    print(f"baseline {rate['A']:,.0f} chunks/s ({int(totals['A'][1]):,} chunks); now {rate['B']:,.0f} chunks/s "
          f"({int(totals['B'][1]):,} chunks); now / baseline {rate['B'] / rate['A']:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
