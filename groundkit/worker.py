"""The maintenance worker: :func:`groundkit.maintenance.maintain` in a loop on a connection of
its own (:func:`run_worker`), outliving database restarts, with a heartbeat row for ``groundkit
status``. Apart from :mod:`groundkit.maintenance` (the policy, which the client's
``maintain()`` calls) because the worker opens its own :class:`~groundkit.Groundkit`, and the
client imports the policy: one direction, no cycle."""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, TypeVar

from psycopg.types.json import Jsonb

from groundkit.client import Groundkit
from groundkit.errors import DatabaseUnavailable, GroundkitError
from groundkit.maintenance import (
    ANALYZE_GROWTH,
    HEARTBEAT_KEEP,
    RECONNECT_MAX_S,
    REINDEX_DRIFT,
    WORKER_EVERY_S,
    StepProgress,
    maintain,
)
from groundkit.models import MaintenanceReport

if TYPE_CHECKING:
    from groundkit.admin import Admin

R = TypeVar("R")


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
