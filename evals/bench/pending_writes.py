"""One-object writes with and without the pending part, and what the pending part costs search.

    python evals/bench/bench_search.py --dsn URL --chunks 1000000 --keep    # builds gk_bench_1000000
    python evals/bench/pending_writes.py --dsn URL --chunks 1000000

On a throwaway copy of the kept benchmark database (``copy_of``: the kept one is not touched), in
alternating order per round:

- ``direct``: ``config.pending_merge_chunks = 0``, every put_object writes its postings and term
  statistics itself (the layout before revision 0006);
- ``pending N`` for each N of --merge-every: ``config.pending_merge_chunks = N``, the writer
  merges the pending part inline whenever its chunk ids pass a multiple of N, and the round
  ends with ``merge_pending()`` for the rest: the time includes every merge, so what is left
  pending after the round costs nothing later;
- ``merger`` (with --merger-every S): ``pending_merge_chunks`` at the first N, and a second
  connection runs ``merge_pending()`` every S seconds while the writer writes (what ``groundkit
  merge --every S`` does), the round again ending with a merge inside the time: the writer's
  throughput when merges run on the other core.

Each mode writes --round-chunks chunks per round through put_object, one object per
transaction (autocommit), fresh objects from the benchmark's corpus. Then, --search-rounds
times for each N: with ``pending_merge_chunks`` out of reach, N chunks are written (untimed),
the broad reader's 2-6-term queries run with those chunks pending, ``merge_pending()`` is timed
alone (the merge rate), and the same queries run again with the part empty: the search ratio
is what a full pending part costs a query (the corpus is the same in both runs). One untimed
pass over the queries comes first.

It also prints each mode's put_object latency (p50, p99, p99.9, max, calls over 100 ms): a
writer that merges inline pays for the merge in one call.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ab_search import bench_queries
from bench_search import copy_of, kept_database_args, log, pct
from corpus import PUT_OBJECT_SQL, Corpus

SEARCH_SQL = "select count(*) from groundkit.search(%s, %s, %s)"


def write(conn: psycopg.Connection[Any], objs: Sequence[Any], prefix: str,
          latencies: list[float] | None = None) -> int:
    """put_object each of ``objs``, one transaction each; each call's ms into ``latencies``."""
    chunks = 0
    for o in objs:
        t0 = time.perf_counter()
        conn.execute(PUT_OBJECT_SQL, dict(o.as_json(), object_id=prefix + o.object_id))
        if latencies is not None:
            latencies.append(1000 * (time.perf_counter() - t0))
        chunks += len(o.paragraphs)
    return chunks


def search_ms(conn: psycopg.Connection[Any], queries: Sequence[str], k: int) -> list[float]:
    out = []
    for q in queries:
        t0 = time.perf_counter()
        conn.execute(SEARCH_SQL, ("r100", q, k)).fetchall()
        out.append(1000 * (time.perf_counter() - t0))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    kept_database_args(ap, chunks=1_000_000, queries=100)
    ap.add_argument("--round-chunks", type=int, default=6000, help="chunks each mode writes per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--merge-every", type=int, nargs="+", default=[2048],
                    help="config.pending_merge_chunks of the pending modes")
    ap.add_argument("--merger-every", type=float, default=None,
                    help="also a mode with a merger connection merging every this many seconds")
    ap.add_argument("--warmup", type=int, default=300, help="chunks written untimed first")
    ap.add_argument("--search-rounds", type=int, default=2)
    args = ap.parse_args(argv)

    queries = [q for q in bench_queries(args.chunks, args.queries, args.seed) if 2 <= len(q.split()) <= 6]
    corpus = Corpus(seed=args.seed + 11)
    stream = corpus.objects(10 ** 9)

    def take(n_chunks: int) -> list[Any]:
        out, got = [], 0
        while got < n_chunks:
            o = next(stream)
            out.append(o)
            got += len(o.paragraphs)
        return out

    modes = ["direct"] + [f"pending {n}" for n in args.merge_every] + (["merger"] if args.merger_every else [])
    rates: dict[str, list[float]] = {m: [] for m in modes}
    latency: dict[str, list[float]] = {m: [] for m in modes}
    with copy_of(args.dsn, f"gk_bench_{args.chunks}", "pending") as dsn, \
            psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("select groundkit.merge_pending()")
        write(conn, take(args.warmup), "warm-")
        for r in range(args.rounds):
            for i, mode in enumerate(modes if r % 2 == 0 else modes[::-1]):
                objs = take(args.round_chunks)
                every = 0 if mode == "direct" else args.merge_every[0] if mode == "merger" else int(mode.split()[1])
                conn.execute("update groundkit.config set pending_merge_chunks = %s", (every,))
                stop = threading.Event()

                def merger(stop: threading.Event) -> None:
                    with psycopg.connect(dsn, autocommit=True) as m:
                        while not stop.wait(args.merger_every):
                            m.execute("select groundkit.merge_pending()")

                bg = threading.Thread(target=merger, args=(stop,)) if mode == "merger" else None
                t0 = time.perf_counter()
                if bg is not None:
                    bg.start()
                n = write(conn, objs, f"r{r}m{i}-", latency[mode])
                if bg is not None:
                    stop.set()
                    bg.join()
                if mode != "direct":
                    conn.execute("select groundkit.merge_pending()")
                dt = time.perf_counter() - t0
                rates[mode].append(n / dt)
                log(f"round {r + 1} {mode}: {n:,} chunks ({len(objs):,} objects) in {dt:.1f} s, {n / dt:,.0f} chunks/s")

        search_ms(conn, queries, args.k)  # untimed: the queries' pages into the cache
        conn.execute("update groundkit.config set pending_merge_chunks = 2000000000")
        searched: dict[int, dict[str, Any]] = {}
        for size in args.merge_every:
            sr: dict[str, Any] = {"merge": [], "ratio": [], "full": [], "empty": []}
            for r in range(args.search_rounds):
                n = write(conn, take(size), f"s{size}-{r}-")
                pend = conn.execute("select count(*) from groundkit.pending_postings").fetchone()
                full = search_ms(conn, queries, args.k)
                t0 = time.perf_counter()
                moved = conn.execute("select groundkit.merge_pending()").fetchone()
                dt = time.perf_counter() - t0
                empty = search_ms(conn, queries, args.k)
                sr["merge"].append(n / dt)
                sr["full"] += full
                sr["empty"] += empty
                sr["ratio"].append(statistics.geometric_mean([f / e for f, e in zip(full, empty, strict=True)]))
                log(f"search round {r + 1}: {n:,} chunks pending ({pend[0] if pend else 0:,} postings); merge "
                    f"{moved[0] if moved else 0:,} postings in {dt:.2f} s ({n / dt:,.0f} chunks/s); r100 2-6-term "
                    f"p50 {pct(full, 50):.2f} ms pending, {pct(empty, 50):.2f} ms merged, geomean ratio "
                    f"{sr['ratio'][-1]:.3f}")
            searched[size] = sr

    print(f"\none object per transaction at {args.chunks:,} chunks, {args.rounds} rounds of "
          f"{args.round_chunks:,} chunks per mode, alternating:")
    for mode, rs in rates.items():
        print(f"  {mode:14s} chunks/s per round: " + ", ".join(f"{x:,.0f}" for x in rs)
              + f"; mean {statistics.fmean(rs):,.0f}; / direct per round: "
              + ", ".join(f"{x / d:.2f}x" for x, d in zip(rs, rates["direct"], strict=True)))
    print("one put_object's time (ms, every round; the merge that ends a round is not a put_object):")
    for mode, ls in latency.items():
        print(f"  {mode:14s} p50 {pct(ls, 50):.1f}, p99 {pct(ls, 99):.1f}, p99.9 {pct(ls, 99.9):.1f}, "
              f"max {max(ls):.1f}; calls over 100 ms: {sum(x > 100 for x in ls)} of {len(ls):,}")
    for size, sr in searched.items():
        print(f"{size:,} chunks pending: merge_pending() " + ", ".join(f"{x:,.0f}" for x in sr["merge"])
              + f" chunks/s; r100 2-6-term queries ({len(queries)}) pending against none: p50 "
              f"{pct(sr['full'], 50):.2f} vs {pct(sr['empty'], 50):.2f} ms, mean {statistics.fmean(sr['full']):.2f} "
              f"vs {statistics.fmean(sr['empty']):.2f} ms, geomean ratio per round "
              + ", ".join(f"{x:.3f}" for x in sr["ratio"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
