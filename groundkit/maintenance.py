"""Maintenance policy: what keeps search fast, when it is due, and the worker that runs it.

Search is exact whatever state the index is in; these keep it fast:

- merge the pending part (writers also merge it inline every ``config.pending_merge_chunks``);
- analyze the postings (sketches and term bits) once the chunks have grown by a tenth;
- recompute the postings' impacts once their reference length drifts from the chunks'
  average, after k1 or b changed, or to finish a recompute that was interrupted;
- vacuum what those rewrote.

:func:`maintain` does one pass of whatever is due; :func:`run_worker` runs passes in a loop on
its own connection, outliving database restarts, with a heartbeat row for ``groundkit status``.
The CLI (``groundkit worker``, ``status``, ``ingest``, ``merge``) only calls these. The rules of
what is due live in SQL (``groundkit.maintenance_due()``), so a pg_cron schedule follows them too.
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, TypeVar

from psycopg.types.json import Jsonb

from groundkit.errors import DatabaseUnavailable, GroundkitError, InvalidArgument
from groundkit.models import Due, IndexStatus, MaintenanceReport, MaintenanceStep, StepName

if TYPE_CHECKING:
    from groundkit.admin import Admin
    from groundkit.client import Groundkit

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
R = TypeVar("R")


def due(gk: Admin, *, analyze_growth: float = ANALYZE_GROWTH,
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


def maintain(gk: Admin, *, analyze_growth: float = ANALYZE_GROWTH, reindex_at: float = REINDEX_DRIFT,
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


def early_reindex(gk: Admin, chunks_before: int, *, reindex_at: float = REINDEX_DRIFT) -> IndexStatus | None:
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


def reconnect_wait(every: float, lost: int) -> float:
    """Seconds to wait before connecting again after losing the database ``lost`` times in a
    row: twice as long each time, from the pass interval (a second at most), up to a minute."""
    return float(min(min(every, 1.0) * 2 ** min(lost, 20), RECONNECT_MAX_S))


def keep_running(dsn: str | None, every: float | None, one_pass: Callable[[Groundkit], R], *,
                 on_result: Callable[[R], None],
                 on_lost: Callable[[DatabaseUnavailable, float], None] | None = None,
                 on_connected: Callable[[Groundkit, bool], None] | None = None,
                 on_stop: Callable[[Groundkit], None] | None = None) -> None:
    """``one_pass`` on a connection of its own, every ``every`` seconds until interrupted
    (KeyboardInterrupt propagates, after ``on_stop(gk)``), or once if ``every`` is None (then
    ``on_stop(gk)``). When the database goes away (a restart, a failover, a terminated backend)
    it calls ``on_lost(error, wait)``, waits, and connects again (``on_connected(gk,
    again=True)``); an interrupted pass rolls back, or, for a recompute in steps, resumes on the
    next pass."""
    from groundkit.client import Groundkit

    lost = 0
    while True:
        try:
            with Groundkit.connect(dsn) as gk:
                if on_connected is not None:
                    on_connected(gk, lost > 0)
                lost = 0
                try:
                    while True:
                        on_result(one_pass(gk))
                        if every is None:
                            break
                        time.sleep(every)
                except KeyboardInterrupt:
                    if on_stop is not None and not gk.conn.closed:
                        on_stop(gk)
                    raise
                if on_stop is not None:
                    on_stop(gk)
                return
        except DatabaseUnavailable as exc:
            if every is None:
                raise
            lost += 1
            wait = reconnect_wait(every, lost)
            if on_lost is not None:
                on_lost(exc, wait)
            time.sleep(wait)


class Heartbeat:
    """A worker's row in ``groundkit.worker_heartbeat``, written after every pass."""

    def __init__(self) -> None:
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.worker_id = f"{self.host}:{self.pid}"
        self.started_at = datetime.now(UTC)

    def beat(self, gk: Admin, report: MaintenanceReport | None = None, error: str | None = None) -> None:
        """Say the worker is alive; with a pass's report or error (or both: the pass ran, its
        embedding failed), what that pass did."""
        gk._fetch(
            "insert into groundkit.worker_heartbeat as h"
            "       (worker_id, host, pid, started_at, beat_at, last_run_at, last_result, last_error)"
            " values (%(id)s, %(host)s, %(pid)s, %(started)s, now(), %(run_at)s, %(result)s, %(error)s)"
            " on conflict (worker_id) do update"
            "   set host = excluded.host, pid = excluded.pid, started_at = excluded.started_at,"
            "       beat_at = now(),"
            "       last_run_at = coalesce(excluded.last_run_at, h.last_run_at),"
            "       last_result = coalesce(excluded.last_result, h.last_result),"
            "       last_error = case when excluded.last_run_at is not null then excluded.last_error"
            "                         else coalesce(excluded.last_error, h.last_error) end,"
            "       stopped_at = null",
            {"id": self.worker_id, "host": self.host, "pid": self.pid, "started": self.started_at,
             "run_at": datetime.now(UTC) if report is not None else None,
             "result": Jsonb(report.model_dump(mode="json")) if report is not None else None,
             "error": error})

    def forget_old(self, gk: Admin) -> None:
        """Delete the rows of workers not heard from for a week."""
        gk._fetch("delete from groundkit.worker_heartbeat"
                  " where beat_at < now() - %(keep)s::interval and worker_id <> %(id)s",
                  {"keep": HEARTBEAT_KEEP, "id": self.worker_id})

    def stopped(self, gk: Admin) -> None:
        """Mark the worker stopped (best effort: the connection may be gone)."""
        with contextlib.suppress(GroundkitError):
            gk._fetch("update groundkit.worker_heartbeat set stopped_at = now(), beat_at = now()"
                      " where worker_id = %(id)s", {"id": self.worker_id})


def run_worker(dsn: str | None, *, every: float | None = WORKER_EVERY_S,
               on_pass: Callable[[MaintenanceReport | None, GroundkitError | None], None],
               on_lost: Callable[[DatabaseUnavailable, float], None] | None = None,
               on_connected: Callable[[Groundkit, bool], None] | None = None,
               progress: StepProgress | None = None,
               analyze_growth: float = ANALYZE_GROWTH, reindex_at: float = REINDEX_DRIFT,
               embed: bool = True) -> Heartbeat:
    """The maintenance worker: :func:`maintain` every ``every`` seconds (once if None) on its own
    connection, reconnecting with backoff (:func:`keep_running`), with a heartbeat row after
    every pass. With ``embed`` each pass then embeds what the active model and the models being
    reindexed lack, and builds the HNSW indexes that are due (:class:`groundkit.embedding.EmbedPass`;
    nothing without pgvector), as ``embed`` and ``hnsw`` steps of the report. A pass that fails
    with a :class:`GroundkitError` other than losing the database is reported (``on_pass(None,
    error)``) and recorded in the heartbeat, and the worker goes on (with ``every`` None it
    raises). An embedding failure (a provider down) is reported with the pass's report
    (``on_pass(report, error)``), and embedding backs off while maintenance goes on.
    Interrupted (KeyboardInterrupt, which the CLI raises on SIGTERM too), it marks its heartbeat
    stopped and re-raises."""
    from groundkit.embedding import EmbedPass

    heartbeat = Heartbeat()
    embedding = EmbedPass(every) if embed else None

    def connected(gk: Groundkit, again: bool) -> None:
        heartbeat.beat(gk)
        heartbeat.forget_old(gk)
        if on_connected is not None:
            on_connected(gk, again)

    def one_pass(gk: Groundkit) -> tuple[MaintenanceReport | None, GroundkitError | None]:
        try:
            report = maintain(gk, analyze_growth=analyze_growth, reindex_at=reindex_at, progress=progress)
        except DatabaseUnavailable:
            raise
        except GroundkitError as exc:
            if every is None:
                raise
            heartbeat.beat(gk, error=exc.message)
            return None, exc
        failed = failing = None
        if embedding is not None:
            steps, failed = embedding.run(gk, progress=progress)
            failing = embedding.failing  # (also while backing off, when this pass did not try)
            if steps:
                report = report.model_copy(update={
                    "steps": report.steps + tuple(steps),
                    "seconds": round(report.seconds + sum(st.seconds for st in steps), 3)})
        heartbeat.beat(gk, report, error=None if failing is None else f"embedding: {failing.message}")
        return report, failed

    keep_running(dsn, every, one_pass, on_result=lambda r: on_pass(*r), on_lost=on_lost,
                 on_connected=connected, on_stop=heartbeat.stopped)
    return heartbeat
