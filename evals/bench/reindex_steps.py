"""What a recompute of the impacts holds up: one transaction against steps.

    python evals/bench/bench_search.py --dsn URL --chunks 1000000 --keep    # builds gk_bench_1000000
    python evals/bench/reindex_steps.py --dsn URL --chunks 1000000 [--scale 0.5] [--step-postings 100000]

``reindex_impacts()`` rewrites every posting under a SHARE lock on the postings: writers to the
postings (merges, bulk writes, replacements of merged chunks) wait for the whole rewrite.
``Groundkit.reindex_impacts()`` on an autocommit connection now works in steps, each its own
transaction over about --step-postings postings of whole terms (docs/bm25.md, "Recomputing the
impacts in steps"). On a throwaway copy of the kept benchmark database (``copy_of``; the kept one
is not touched; the copy is migrated), whose impacts are at the chunks' length, this runs both, and
each rewrites every posting:

1. ``one transaction``: ``select groundkit.reindex_impacts(--scale x the current reference)``,
   then ``VACUUM (ANALYZE) groundkit.postings``;
2. ``in steps``: ``Groundkit.reindex_impacts()`` back to the default reference (the chunks'
   length), which runs the same vacuum.

During each, a writer on another connection replaces merged chunks, one object per transaction:
``retier_object`` of objects the benchmark loaded, which deletes their postings (so it needs ROW
EXCLUSIVE on them) and writes new ones to the pending part, one call after another. It prints each
arm's wall time (the rewrite and the vacuum apart), the writer's calls, and their p50, p99 and
longest latency: what a writer to the postings waits for. Progress lines go to stderr.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_search import copy_of, kept_database_args, log, pct

import groundkit
from groundkit.migrate import migrate

TIERS = ("T0", "T1")


def writer(dsn: str, ids: Sequence[tuple[str, int]], stop: threading.Event, lat: list[float],
           errors: list[str]) -> None:
    """retier_object each of ``ids`` (object id, current version) in turn until ``stop``."""
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            for i, (oid, version) in enumerate(ids):
                if stop.is_set():
                    return
                t0 = time.perf_counter()
                row = conn.execute("select groundkit.retier_object(%s, %s, %s)",
                                   (oid, version + 1, TIERS[i % 2])).fetchone()
                lat.append(1000 * (time.perf_counter() - t0))
                if row is None or row[0] != "applied":
                    raise RuntimeError(f"retier_object {oid}: {row}")
    except Exception as exc:  # reported, not hidden
        errors.append(repr(exc))


def arm(dsn: str, ids: Sequence[tuple[str, int]], rewrite: Callable[[], None],
        vacuum: Callable[[], None] | None) -> dict[str, Any]:
    stop = threading.Event()
    lat: list[float] = []
    errors: list[str] = []
    t = threading.Thread(target=writer, args=(dsn, ids, stop, lat, errors))
    t.start()
    time.sleep(2.0)  # the writer's own pace before the rewrite starts
    before = len(lat)
    t0 = time.perf_counter()
    rewrite()
    rewrite_s = time.perf_counter() - t0
    vacuum_s = 0.0
    if vacuum is not None:
        t1 = time.perf_counter()
        vacuum()
        vacuum_s = time.perf_counter() - t1
    stop.set()
    t.join()
    if errors:
        raise RuntimeError(f"writer failed: {errors[0]}")
    during = lat[before:]
    if len(lat) >= len(ids):
        raise RuntimeError("the writer ran out of objects: raise --objects")
    return {"rewrite_s": rewrite_s, "vacuum_s": vacuum_s, "calls": len(during),
            "p50": statistics.median(during) if during else float("nan"),
            "p99": pct(during, 99) if during else float("nan"),
            "max": max(during) if during else float("nan")}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    kept_database_args(ap, chunks=1_000_000)
    ap.add_argument("--scale", type=float, default=0.5, help="the one-transaction arm's reference, times the current")
    ap.add_argument("--step-postings", type=int, default=groundkit.client.REINDEX_STEP_POSTINGS)
    ap.add_argument("--objects", type=int, default=200_000, help="objects the writer may retier, per arm")
    args = ap.parse_args(argv)

    kept = f"gk_bench_{args.chunks}"
    with copy_of(args.dsn, kept, "steps") as dsn:
        migrate(dsn)  # (the kept database may predate revision 0009)
        with psycopg.connect(dsn, autocommit=True) as conn:
            ref_row = conn.execute("select avgdl_ref, groundkit._avgdl_max() from groundkit.bm25_impact").fetchone()
            assert ref_row is not None
            ref, avgdl = float(ref_row[0]), float(ref_row[1])
            rows = conn.execute(
                "select o.object_id, o.version from groundkit.objects o"
                " where o.state = 'live' and not o.owner_only order by md5(o.object_id) limit %s",
                (2 * args.objects,)).fetchall()
            # the writer's objects must have merged chunks: merge what a run left pending
            conn.execute("select groundkit.merge_pending()")
        ids = [(str(r[0]), int(r[1])) for r in rows]
        log(f"impacts at {ref:.2f} (the chunks average {avgdl:.2f}); {len(ids):,} objects for the writer")

        def one_transaction() -> None:
            with psycopg.connect(dsn, autocommit=True) as c:
                c.execute("select groundkit.reindex_impacts(%s)", (args.scale * ref,))

        def vacuum() -> None:
            with psycopg.connect(dsn, autocommit=True) as c:
                c.execute("vacuum (analyze) groundkit.postings")

        log(f"one transaction: reindex_impacts({args.scale * ref:.2f}) with the writer running")
        first = arm(dsn, ids[:args.objects], one_transaction, vacuum)

        steps_seen: list[int] = []

        def in_steps() -> None:
            with groundkit.Groundkit.connect(dsn) as gk:
                gk.reindex_impacts(progress=lambda done, total: steps_seen.append(done),
                                   step_postings=args.step_postings)

        log("in steps: Groundkit.reindex_impacts() back to the default reference, with the writer running")
        second = arm(dsn, ids[args.objects:], in_steps, None)
        with psycopg.connect(dsn, autocommit=True) as conn:
            end = conn.execute("select avgdl_ref, avgdl_ref_min from groundkit.bm25_impact").fetchone()
        assert end is not None and end[1] is None
        log(f"in steps: {len(steps_seen)} steps, back at {float(end[0]):.2f}")

    print(f"\n{args.chunks:,} chunks; the writer: retier_object one object per transaction, one call after another")
    print("| arm | rewrite s | vacuum s | writer calls | p50 ms | p99 ms | longest ms |")
    print("|---|---|---|---|---|---|---|")
    for name, r in (("one transaction", first), (f"in steps ({len(steps_seen)})", second)):
        print(f"| {name} | {r['rewrite_s']:.0f} | {r['vacuum_s']:.0f} | {r['calls']:,} | {r['p50']:.1f} | "
              f"{r['p99']:.1f} | {r['max']:.0f} |")
    print(f"\nlongest writer wait, one transaction over in steps: {first['max'] / second['max']:.1f}x; "
          f"wall time (rewrite + vacuum), in steps over one transaction: "
          f"{(second['rewrite_s'] + second['vacuum_s']) / (first['rewrite_s'] + first['vacuum_s']):.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
