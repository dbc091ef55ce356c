"""What a one-object put_object costs without its postings, and without its term statistics too.

    python evals/bench/bench_search.py --dsn URL --chunks 1000000 --keep    # builds gk_bench_1000000
    python evals/bench/single_floor.py --dsn URL --chunks 1000000 --objects 300 --rounds 3

Issue 3 asks for 1,000 chunks/s through put_object, one object per transaction, at 1M chunks on
two cores. This script copies a kept benchmark database (``create database ... template ...
strategy file_copy``; the copy is dropped at the end, the kept database is not touched) and, in
the copy, installs three versions of ``groundkit._materialize_many`` in turn:

- ``full``: as sql/040_index.sql has it;
- ``no postings``: without the statement part that inserts the postings (the chunks are still
  chunked, tokenized and inserted);
- ``no postings, no term stats``: also without the term statistics upsert.

Each round times --objects fresh put_object calls (autocommit: one transaction each) with every
version, in alternating order. The differences are what the postings and the term statistics
cost a one-object write; the last version is what the rest costs (argument checks, log row,
object row, chunking, tokenizing, chunk rows, scope statistics, commit). Its chunks/s is a
ceiling for any design that writes the log row and the chunks in the write's transaction and
makes postings and statistics free.

It measures the write-through path (``config.pending_merge_chunks = 0`` in the copy), the
layout before revision 0006; evals/bench/pending_writes.py measures the pending part.

The copy starts with none of its pages in shared_buffers, and the first rounds pay for reading
them. ``--warmup N`` makes N untimed put_object calls first, so that the rounds measure the
steady state between checkpoints (evals/bench/write_phases.py shows how long that takes).
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_search import copy_of
from corpus import PUT_OBJECT_SQL, Corpus
from sqlsource import function_source, require_once

ROOT = Path(__file__).resolve().parents[2]
POSTINGS_START = "    insert into groundkit.postings (term, chunk_id, tf, doc_len, vis_key, imp)"
TERM_STATS_START = "    -- The net change to the statistics"
SCOPE_STATS_START = "    insert into groundkit.scope_stats"


def variants() -> dict[str, str]:
    """The CREATE FUNCTION text of _materialize_many: as it is, and with parts cut out."""
    full = function_source((ROOT / "sql" / "040_index.sql").read_text(encoding="utf-8"), "_materialize_many")
    require_once(full, (POSTINGS_START, TERM_STATS_START, SCOPE_STATS_START), "sql/040_index.sql")
    # The data-modifying CTEs still run when the final statement reads them. Only our own SQL
    # file's text is cut and joined here; nothing from outside reaches it.
    no_post = (full[:full.index(POSTINGS_START)]  # noqa: S608
               + "    select count(*) into n_chunks_written from new_chunks;\n\n"
               + full[full.index(TERM_STATS_START):])
    no_post = no_post.replace("\nbegin\n", "\n    n_chunks_written bigint;\nbegin\n", 1)
    no_stats = no_post[:no_post.index(TERM_STATS_START)] + no_post[no_post.index(SCOPE_STATS_START):]
    return {"full": full, "no postings": no_post, "no postings, no term stats": no_stats}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsn", required=True, help="the server bench_search.py --keep built its database on")
    ap.add_argument("--chunks", type=int, default=1_000_000, help="which gk_bench_<chunks> database")
    ap.add_argument("--objects", type=int, default=300, help="put_object calls per version and round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=0,
                    help="put_object calls (full version) before the rounds, untimed: the copy starts with none of "
                         "its pages in shared_buffers (evals/bench/write_phases.py)")
    args = ap.parse_args(argv)

    kept = f"gk_bench_{args.chunks}"
    funcs = variants()
    ms: dict[str, list[float]] = {v: [] for v in funcs}
    chunks_per_object: list[float] = []
    with copy_of(args.dsn, kept, "single_floor") as copy_dsn, psycopg.connect(copy_dsn, autocommit=True) as conn:
        # the write-through path: every put_object writes its postings and term statistics itself
        conn.execute("update groundkit.config set pending_merge_chunks = 0")
        if args.warmup:
            t0 = time.perf_counter()
            for o in list(Corpus(seed=6999).objects(4 * args.warmup))[: args.warmup]:
                conn.execute(PUT_OBJECT_SQL, dict(o.as_json(), object_id="warmup-" + o.object_id))
            print(f"  warm-up: {args.warmup} put_object calls in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
        for r in range(args.rounds):
            order = list(funcs) if r % 2 == 0 else list(funcs)[::-1]
            for i, name in enumerate(order):
                conn.execute(funcs[name])  # our own SQL file, cut at fixed markers
                objs = list(Corpus(seed=7000 + 10 * r + i).objects(4 * args.objects))[: args.objects]
                tag = f"floor-{r}-{i}-"
                t0 = time.perf_counter()
                for o in objs:
                    conn.execute(PUT_OBJECT_SQL, dict(o.as_json(), object_id=tag + o.object_id))
                dt = time.perf_counter() - t0
                ms[name].append(1000 * dt / len(objs))
                chunks_per_object.append(sum(len(o.paragraphs) for o in objs) / len(objs))
                print(f"  round {r + 1}/{args.rounds} {name}: {ms[name][-1]:.2f} ms per object", file=sys.stderr)
    cpo = statistics.fmean(chunks_per_object)
    mean: dict[str, Any] = {v: statistics.fmean(x) for v, x in ms.items()}
    full = mean["full"]
    print(f"\n{kept}, {args.rounds} rounds x {args.objects} put_object calls per version, "
          f"{cpo:.2f} chunks per object, after {args.warmup} warm-up calls\n")
    print("| _materialize_many | ms per object (mean of rounds) | chunks/s | share of full |\n|---|---|---|---|")
    for v, m in mean.items():
        print(f"| {v} | {m:.2f} | {1000 * cpo / m:,.0f} | {m / full:.0%} |")
    post = mean["full"] - mean["no postings"]
    stats = mean["no postings"] - mean["no postings, no term stats"]
    print(f"\npostings {post:.2f} ms, term statistics {stats:.2f} ms, the rest "
          f"{mean['no postings, no term stats']:.2f} ms per object")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
