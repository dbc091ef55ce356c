"""What a recompute of the impacts holds up: one transaction against steps.

    python evals/bench/bench_search.py --dsn URL --chunks 1000000 --keep    # builds gk_bench_1000000
    python evals/bench/reindex_steps.py --dsn URL --chunks 1000000 [--scale 0.5] [--step-postings 100000]
    python evals/bench/reindex_steps.py --dsn URL --chunks 1000000 --steps-only

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
longest latency: what a writer to the postings waits for, and for the steps its five slowest calls:
when, whether the call merged the pending part inline, how many steps ended during it, and what
its backend waited on (``pg_stat_activity``, sampled every 0.1 s). ``--steps-only`` skips the
first arm and takes the steps to ``--scale`` times the reference instead. Progress lines go to
stderr.
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


class Writer:
    """retier_object each of ``ids`` (object id, current version) in turn until ``stop``; every
    call's (start, seconds, object id), and what its backend waited on, sampled every 0.1 s."""

    def __init__(self, dsn: str, ids: Sequence[tuple[str, int]]) -> None:
        self.dsn, self.ids = dsn, ids
        self.stop = threading.Event()
        self.calls: list[tuple[float, float, str]] = []
        self.waits: list[tuple[float, str]] = []
        self.errors: list[str] = []
        self.pid: int | None = None

    def run(self) -> None:
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                self.pid = conn.info.backend_pid
                for i, (oid, version) in enumerate(self.ids):
                    if self.stop.is_set():
                        return
                    t0 = time.perf_counter()
                    row = conn.execute("select groundkit.retier_object(%s, %s, %s)",
                                       (oid, version + 1, TIERS[i % 2])).fetchone()
                    self.calls.append((t0, time.perf_counter() - t0, oid))
                    if row is None or row[0] != "applied":
                        raise RuntimeError(f"retier_object {oid}: {row}")
        except Exception as exc:  # reported, not hidden
            self.errors.append(repr(exc))

    def watch(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.stop.is_set():
                if self.pid is not None:
                    row = conn.execute("select coalesce(wait_event_type || ':' || wait_event, 'running')"
                                       "  from pg_stat_activity where pid = %s and state = 'active'",
                                       (self.pid,)).fetchone()
                    if row is not None:
                        self.waits.append((time.perf_counter(), str(row[0])))
                time.sleep(0.1)


def arm(dsn: str, ids: Sequence[tuple[str, int]], rewrite: Callable[[], None],
        vacuum: Callable[[], None] | None, marks: list[tuple[float, str]]) -> dict[str, Any]:
    """Run ``rewrite`` (then ``vacuum``) with the writer going; ``marks``: (time, what) the rewrite
    records as it goes (steps, end), used to say what the slowest calls overlapped."""
    w = Writer(dsn, ids)
    threads = [threading.Thread(target=w.run), threading.Thread(target=w.watch)]
    for t in threads:
        t.start()
    time.sleep(2.0)  # the writer's own pace before the rewrite starts
    before = len(w.calls)
    t0 = time.perf_counter()
    marks.append((t0, "begin"))
    rewrite()
    rewrite_s = time.perf_counter() - t0
    vacuum_s = 0.0
    if vacuum is not None:
        t1 = time.perf_counter()
        marks.append((t1, "vacuum"))
        vacuum()
        vacuum_s = time.perf_counter() - t1
    marks.append((time.perf_counter(), "done"))
    w.stop.set()
    for t in threads:
        t.join()
    if w.errors:
        raise RuntimeError(f"writer failed: {w.errors[0]}")
    during = [1000 * c[1] for c in w.calls[before:]]
    if len(w.calls) >= len(ids):
        raise RuntimeError("the writer ran out of objects: raise --objects")
    slowest = []
    for start, secs, oid in sorted(w.calls[before:], key=lambda c: -c[1])[:5]:
        end = start + secs
        seen = [m for tm, m in marks if start <= tm <= end]
        waits: dict[str, int] = {}
        for tm, ev in w.waits:
            if start <= tm <= end:
                waits[ev] = waits.get(ev, 0) + 1
        slowest.append({"ms": 1000 * secs, "at_s": start - t0, "oid": oid,
                        "marks": f"{sum(1 for m in seen if m == 'step')} steps ended"
                                 + "".join(f", {m}" for m in seen if m != "step"),
                        "waits": ", ".join(f"{k} x{v}" for k, v in sorted(waits.items(), key=lambda kv: -kv[1]))})
    return {"rewrite_s": rewrite_s, "vacuum_s": vacuum_s, "calls": len(during),
            "p50": statistics.median(during) if during else float("nan"),
            "p99": pct(during, 99) if during else float("nan"),
            "max": max(during) if during else float("nan"), "slowest": slowest}


def merged_inline(dsn: str, oid: str, every: int) -> bool:
    """Whether the retier_object of ``oid`` merged the pending part inline: its new chunk ids
    passed a multiple of pending_merge_chunks (each object is retiered once per arm)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("select min(chunk_id), max(chunk_id) from groundkit.chunks where object_id = %s",
                           (oid,)).fetchone()
    return row is not None and row[0] is not None and every > 0 and row[1] // every > (row[0] - 1) // every


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    kept_database_args(ap, chunks=1_000_000)
    ap.add_argument("--scale", type=float, default=0.5, help="the one-transaction arm's reference, times the current")
    ap.add_argument("--step-postings", type=int, default=groundkit.client.REINDEX_STEP_POSTINGS)
    ap.add_argument("--objects", type=int, default=200_000, help="objects the writer may retier, per arm")
    ap.add_argument("--steps-only", action="store_true",
                    help="skip the one-transaction arm; the steps go to --scale x the current reference")
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

        arms: dict[str, dict[str, Any]] = {}
        if not args.steps_only:
            log(f"one transaction: reindex_impacts({args.scale * ref:.2f}) with the writer running")
            arms["one transaction"] = arm(dsn, ids[:args.objects], one_transaction, vacuum, [])

        marks: list[tuple[float, str]] = []
        target = args.scale * ref if args.steps_only else None

        def in_steps() -> None:
            with groundkit.Groundkit.connect(dsn) as gk:
                gk.reindex_impacts(target, progress=lambda done, total: marks.append((time.perf_counter(), "step")),
                                   step_postings=args.step_postings)

        shown = f"{target:.2f}" if target is not None else ""
        log(f"in steps: Groundkit.reindex_impacts({shown}) with the writer running")
        steps = arm(dsn, ids[args.objects:], in_steps, None, marks)
        n_steps = sum(1 for _, m in marks if m == "step")
        arms[f"in steps ({n_steps})"] = steps
        with psycopg.connect(dsn, autocommit=True) as conn:
            end = conn.execute("select avgdl_ref, avgdl_ref_min from groundkit.bm25_impact").fetchone()
            every_row = conn.execute("select pending_merge_chunks from groundkit.config").fetchone()
        assert end is not None and end[1] is None and every_row is not None
        log(f"in steps: {n_steps} steps, at {float(end[0]):.2f}")
        for slow in steps["slowest"]:
            slow["merged"] = merged_inline(dsn, slow["oid"], int(every_row[0]))

    print(f"\n{args.chunks:,} chunks; the writer: retier_object one object per transaction, one call after another")
    print("| arm | rewrite s | vacuum s | writer calls | p50 ms | p99 ms | longest ms |")
    print("|---|---|---|---|---|---|---|")
    for name, r in arms.items():
        print(f"| {name} | {r['rewrite_s']:.0f} | {r['vacuum_s']:.0f} | {r['calls']:,} | {r['p50']:.1f} | "
              f"{r['p99']:.1f} | {r['max']:.0f} |")
    print("\nthe writer's slowest calls in steps (wait events sampled every 0.1 s):")
    print("| ms | at s | merged inline | during the call | the writer's backend |\n|---|---|---|---|---|")
    for slow in steps["slowest"]:
        print(f"| {slow['ms']:.0f} | {slow['at_s']:.0f} | {'yes' if slow['merged'] else 'no'} | {slow['marks']} "
              f"| {slow['waits']} |")
    if "one transaction" in arms:
        first = arms["one transaction"]
        print(f"\nlongest writer wait, one transaction over in steps: {first['max'] / steps['max']:.1f}x; "
              f"wall time (rewrite + vacuum), in steps over one transaction: "
              f"{(steps['rewrite_s'] + steps['vacuum_s']) / (first['rewrite_s'] + first['vacuum_s']):.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
