"""Writes that replace pending chunks: groundkit._materialize_many now vs at a git revision.

    python evals/bench/bench_search.py --dsn URL --chunks 1000000 --keep    # builds gk_bench_1000000
    python evals/bench/pending_replace.py --dsn URL --chunks 1000000 --baseline-rev 5ff6005

On a throwaway copy of the kept benchmark database: merges out of reach, --pending-chunks chunks
written through ``put_object`` (all of them pending), then ``retier_object`` on those objects,
one per transaction, each object once, in blocks of --per-block that alternate between the two
versions of ``_materialize_many`` (installed under its own name before each block, a new
session per block). A retier replaces an object's chunks: it deletes their pending postings and
writes new ones. Prints each arm's p50, p95 and mean per call, and the ratios of the means and
of the medians per pair of blocks.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_search import copy_of, kept_database_args, log, pct
from corpus import PUT_OBJECT_SQL, Corpus
from sqlsource import function_source, repo_file

TIERS = ["T0", "T1", "T2", "T3"]


def source_at(rev: str | None) -> str:
    """``_materialize_many``'s CREATE FUNCTION text at ``rev`` (None: the working tree)."""
    return function_source(repo_file("sql/040_index.sql", rev), "_materialize_many")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    kept_database_args(ap, chunks=1_000_000, queries=0)
    ap.add_argument("--baseline-rev", required=True)
    ap.add_argument("--pending-chunks", type=int, default=8192)
    ap.add_argument("--per-block", type=int, default=150)
    ap.add_argument("--blocks", type=int, default=4, help="blocks per arm")
    args = ap.parse_args(argv)

    arms = {"baseline": source_at(args.baseline_rev), "now": source_at(None)}
    objs = Corpus(seed=args.seed + 777).objects(10 ** 9)
    ms: dict[str, list[float]] = {a: [] for a in arms}
    means: dict[str, list[float]] = {a: [] for a in arms}
    p50s: dict[str, list[float]] = {a: [] for a in arms}
    with copy_of(args.dsn, f"gk_bench_{args.chunks}", "replace") as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("select groundkit.merge_pending()")
            conn.execute("update groundkit.config set pending_merge_chunks = 2000000000")
            ids: list[tuple[str, str]] = []
            n = 0
            while n < args.pending_chunks:
                o = next(objs)
                conn.execute(PUT_OBJECT_SQL, dict(o.as_json(), object_id="rp-" + o.object_id))
                ids.append(("rp-" + o.object_id, o.tier))
                n += len(o.paragraphs)
            log(f"{n:,} chunks pending in {len(ids):,} objects")
        need = 2 * args.blocks * args.per_block
        if len(ids) < need:
            raise SystemExit(f"{len(ids)} objects written, {need} needed: raise --pending-chunks")
        todo = iter(ids)
        for b in range(args.blocks):
            for arm in (["baseline", "now"] if b % 2 == 0 else ["now", "baseline"]):
                with psycopg.connect(dsn, autocommit=True) as conn:
                    conn.execute(arms[arm])
                with psycopg.connect(dsn, autocommit=True) as conn:
                    block = []
                    for _ in range(args.per_block):
                        oid, tier = next(todo)
                        other = TIERS[(TIERS.index(tier) + 1) % len(TIERS)]
                        t0 = time.perf_counter()
                        conn.execute("select groundkit.retier_object(%s, 2, %s)", (oid, other))
                        block.append(1000 * (time.perf_counter() - t0))
                ms[arm] += block
                means[arm].append(statistics.fmean(block))
                p50s[arm].append(pct(block, 50))
                log(f"block {b + 1} {arm}: p50 {pct(block, 50):.2f} ms, mean {statistics.fmean(block):.2f} ms")
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(arms["now"])

    print(f"\nretier_object of pending objects at {args.chunks:,} chunks, {args.pending_chunks:,} chunks pending, "
          f"{args.blocks} blocks of {args.per_block} per arm, alternating:")
    for arm, xs in ms.items():
        print(f"  {arm:9s} p50 {pct(xs, 50):.2f} ms, p95 {pct(xs, 95):.2f} ms, mean {statistics.fmean(xs):.2f} ms")
    print("  now / baseline, mean per pair of blocks: "
          + ", ".join(f"{n / b:.3f}" for n, b in zip(means["now"], means["baseline"], strict=True))
          + f"; overall {statistics.fmean(ms['now']) / statistics.fmean(ms['baseline']):.3f}")
    print("  now / baseline, p50 per pair of blocks (a slow stretch moves a mean, not a median): "
          + ", ".join(f"{n / b:.3f}" for n, b in zip(p50s["now"], p50s["baseline"], strict=True))
          + f"; overall {pct(ms['now'], 50) / pct(ms['baseline'], 50):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
