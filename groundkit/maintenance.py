"""Maintenance policy: what keeps search fast, when it is due, and the worker that runs it.

Search is exact whatever state the index is in; these keep it fast:

- merge the pending part (writers also merge it inline every ``config.pending_merge_chunks``);
- analyze the postings (sketches and term bits) once the chunks have grown by a tenth;
- recompute the postings' impacts once their reference length drifts from the chunks'
  average, after k1 or b changed, or to finish a recompute that was interrupted;
- vacuum what those rewrote.

:func:`maintain` does one pass of whatever is due; :func:`groundkit.worker.run_worker` runs
passes in a loop on its own connection, outliving database restarts, with a heartbeat row for
``groundkit status``.
The CLI (``groundkit worker``, ``status``, ``ingest``, ``merge``) only calls these. The rules of
what is due live in SQL (``groundkit.maintenance_due()``), so a pg_cron schedule follows them too.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Protocol

from groundkit.errors import InvalidArgument
from groundkit.models import Due, IndexStatus, MaintenanceReport, MaintenanceStep, StepName


class Maintainable(Protocol):
    """What a maintenance pass calls: :class:`groundkit.admin.Admin`'s methods (a protocol, so
    that this policy module, which the admin imports, imports neither it nor the client)."""

    def _fetch(self, query: str, params: dict[str, Any]) -> list[dict[str, Any]]: ...
    def _outside_transaction(self) -> bool: ...
    def _vacuum(self, table: str) -> None: ...
    def reindex_impacts(self, avgdl_ref: float | None = None, progress: Callable[[int, int], None] | None = None,
                        *, step_postings: int = ...) -> int: ...
    def merge_pending(self) -> int: ...
    def analyze_postings(self, min_postings: int | None = None, progress: Callable[[int, int], None] | None = None,
                         reindex_at: float | None = ...) -> int: ...
    def index_status(self) -> IndexStatus: ...

# Analyze once the chunk ids issued since the last analyze reach this share of the chunks there
# were then (postings_growth()): at 1M chunks a tenth more unanalyzed made the broad reader's p95
# 1.20x slower. (The default of groundkit.maintenance_due() too.)
ANALYZE_GROWTH = 0.1
# Recompute the impacts once impact_drift() reaches this: at 1M chunks a drift of 2 cost the
# broad reader 1.21x by mean and one of 1.25 1.07x, while the rewrite takes minutes of work (in
# steps). (The default of groundkit.maintenance_due() too.)
REINDEX_DRIFT = 1.5
# Postings per step of a recompute in steps: at 1M chunks a writer to the postings waited about
# one step (1-2 s) at the p99, against minutes for the rewrite in one transaction.
REINDEX_STEP_POSTINGS = 100_000
# After this many objects, an ingest that wrote at least half the database's chunks recomputes
# the impacts if their reference length is off, so that the rest of the load is written at the
# right one rather than rewritten by the next analyze.
EARLY_REINDEX_OBJECTS = 1000
# The worker's pause between passes, by default.
WORKER_EVERY_S = 60.0
# The longest the worker waits before it connects again after losing the database.
RECONNECT_MAX_S = 60.0
# Heartbeat rows of workers not heard from for this long are deleted by the next worker.
HEARTBEAT_KEEP = "7 days"

# progress(step, done, total), step being a MaintenanceStep name
StepProgress = Callable[[str, int, int], None]


def due(gk: Maintainable, *, analyze_growth: float = ANALYZE_GROWTH,
        reindex_at: float = REINDEX_DRIFT) -> tuple[Due, ...]:
    """What a maintenance pass does now, and why; ``reindex_at`` or ``analyze_growth`` 0 (or
    less): that job is never due."""
    for name, value in (("analyze_growth", analyze_growth), ("reindex_at", reindex_at)):
        if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
            raise InvalidArgument(f"{name} must be a number (got {value!r})")
    rows = gk._fetch("select job, reason from groundkit.maintenance_due("
                     "analyze_growth => %(growth)s, reindex_at => %(drift)s)",
                     {"growth": analyze_growth, "drift": reindex_at})
    return tuple(Due.model_validate(r) for r in rows)


def maintain(gk: Maintainable, *, analyze_growth: float = ANALYZE_GROWTH, reindex_at: float = REINDEX_DRIFT,
             progress: StepProgress | None = None) -> MaintenanceReport:
    """One pass of whatever is due, in this order: recompute the impacts (resuming one that was
    interrupted; in steps on an autocommit connection), merge the pending part, analyze the
    postings after growth, then vacuum what the pass emptied or replaced. Returns each step it
    ran, why, what it counted and how long it took. On a connection in a transaction every step
    runs in it and nothing is vacuumed (VACUUM cannot run in a transaction)."""
    started_at = datetime.now(UTC)
    t0 = time.perf_counter()
    todo = due(gk, analyze_growth=analyze_growth, reindex_at=reindex_at)
    steps: list[MaintenanceStep] = []
    vacuum = gk._outside_transaction()

    def run(name: StepName, reason: str, work: Callable[[], int]) -> int:
        t = time.perf_counter()
        count = work()
        steps.append(MaintenanceStep(name=name, reason=reason, count=count, seconds=round(time.perf_counter() - t, 3)))
        return count

    def report(step: str) -> Callable[[int, int], None] | None:
        if progress is None:
            return None
        tell = progress
        return lambda done, total: tell(step, done, total)

    reindex = [d.reason for d in todo if d.job == "reindex"]
    if reindex:
        # (first: the pending part is merged at the new reference rather than rewritten after;
        # reindex_impacts() vacuums the postings itself outside a transaction, in this step)
        run("reindex", "; ".join(reindex), lambda: gk.reindex_impacts(progress=report("reindex")))
    merged = run("merge", "every pass", gk.merge_pending)
    analyze = [d.reason for d in todo if d.job == "analyze"]
    if analyze:
        run("analyze", "; ".join(analyze),
            lambda: gk.analyze_postings(progress=report("analyze"), reindex_at=None))
    tables = []
    if merged:
        tables.append("groundkit.pending_postings")  # emptied by the merge; every search reads it
    if analyze:
        tables += ["groundkit.postings_sketch", "groundkit.term_bits"]  # replaced whole
    if tables and vacuum:
        def vacuum_all() -> int:
            for table in tables:
                gk._vacuum(table)
            return len(tables)

        run("vacuum", ", ".join(tables), vacuum_all)
    return MaintenanceReport(started_at=started_at, seconds=round(time.perf_counter() - t0, 3), steps=tuple(steps))


def early_reindex(gk: Maintainable, chunks_before: int, *, reindex_at: float = REINDEX_DRIFT) -> IndexStatus | None:
    """For a large load, once it has written :data:`EARLY_REINDEX_OBJECTS` objects: the index's
    status if the load has at least doubled the chunks there were before it (``chunks_before``)
    and the impacts' reference length is off by ``reindex_at`` (0: never), in which case
    recompute them now (:meth:`~groundkit.Groundkit.reindex_impacts`) so that the rest of the
    load is written at the right one; ``None`` otherwise. (The pending part keeps tf and lengths
    only: a later merge computes its impacts at the new reference, so it is not merged first.)"""
    if reindex_at <= 0:
        return None
    st = gk.index_status()
    return st if st.chunks >= 2 * chunks_before and st.impact_drift >= reindex_at else None
