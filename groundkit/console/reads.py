"""The console's one seam to the database: async methods the pages await.

Today each runs a blocking call of :mod:`groundkit.console.queries` (the sync
:class:`~groundkit.Groundkit`) in a worker thread, at most ``pool_size`` at once
(``anyio.to_thread`` with a capacity limiter as large as the connection pool), so a slow query
never blocks the event loop and never queues more threads than there are connections. When
groundkit has an async client, this class is the one place that changes: each method awaits it
instead, and the pages stay as they are.

The pool's connections are read-only (``default_transaction_read_only``) with the servers'
statement and lock timeouts: the console changes nothing in the database, so a search made from
View as member is not sampled and not metered, and no page can write by mistake.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any, TypeVar

import anyio
import anyio.to_thread
import psycopg
from psycopg.rows import dict_row

from groundkit import dsn as groundkit_dsn
from groundkit import tokens
from groundkit.audit import ChainReport
from groundkit.client import Groundkit
from groundkit.console import queries
from groundkit.errors import DatabaseBusy, GroundkitError, from_psycopg
from groundkit.explain import VisibilityExplanation
from groundkit.health import HealthReport, Thresholds
from groundkit.metering import CostBy, CostRow
from groundkit.models import Replay, RunSummary
from groundkit.pool_log import scrub_pool_log
from groundkit.serve.service import LOCK_TIMEOUT, POOL_TIMEOUT, STATEMENT_TIMEOUT, session_timeouts

_R = TypeVar("_R")
_PgConn = psycopg.Connection[dict[str, Any]]

POOL_SIZE = 4
Ledger = queries.GateLedger | queries.Unreadable


def _read_only(statement_timeout: float, lock_timeout: float) -> Callable[[_PgConn], None]:
    timeouts = session_timeouts(statement_timeout, lock_timeout)

    def configure(conn: _PgConn) -> None:
        timeouts(conn)
        conn.execute("select pg_catalog.set_config('default_transaction_read_only', 'on', false)")

    return configure


class ConsoleReads:
    """What the console's pages read, over a pool of at most ``pool_size`` read-only connections
    to ``dsn``. ``thresholds`` are ``groundkit status --check``'s; ``replicas`` the read replicas'
    DSNs whose lag Health shows (as ``status --replica``)."""

    def __init__(self, dsn: str, *, thresholds: Thresholds, replicas: Sequence[str] = (),
                 pool_size: int = POOL_SIZE, pool_timeout: float = POOL_TIMEOUT,
                 statement_timeout: float = STATEMENT_TIMEOUT, lock_timeout: float = LOCK_TIMEOUT) -> None:
        from psycopg_pool import ConnectionPool

        groundkit_dsn.parse(dsn)  # a DSN libpq cannot read fails now, not in the pool's log
        scrub_pool_log(dsn)
        self.thresholds = thresholds
        self.replicas = tuple(replicas)
        self.pool: ConnectionPool[_PgConn] = ConnectionPool(
            dsn, min_size=1, max_size=pool_size, timeout=pool_timeout, open=False, name="groundkit-console",
            kwargs={"autocommit": True, "row_factory": dict_row},
            configure=_read_only(statement_timeout, lock_timeout), connection_class=psycopg.Connection[dict[str, Any]],
        )
        self._limiter = anyio.CapacityLimiter(pool_size)

    def open(self) -> None:
        self.pool.open(wait=False)  # the console starts (and says the database is down) without it

    def close(self) -> None:
        self.pool.close()

    @contextmanager
    def _groundkit(self) -> Iterator[Groundkit]:
        from psycopg_pool import PoolTimeout

        try:
            with self.pool.connection() as conn:
                yield Groundkit(conn)
        except PoolTimeout:
            raise DatabaseBusy("no database connection came free in time; try again") from None
        except psycopg.Error as exc:  # (the pool's own checks, outside a Groundkit call)
            raise from_psycopg(exc) from None

    def _run(self, fn: Callable[[Groundkit], _R]) -> _R:
        with self._groundkit() as gk:
            return fn(gk)

    async def _call(self, fn: Callable[[Groundkit], _R]) -> _R:
        return await anyio.to_thread.run_sync(functools.partial(self._run, fn), limiter=self._limiter)

    # -- the pages' reads ---------------------------------------------------------------------

    async def operator(self, token_digest: bytes) -> str | None:
        """The operator of a console token's SHA-256; None when it no longer opens the console."""
        return await self._call(lambda gk: tokens.console_operator_by_hash(gk, token_digest))

    async def login(self, token: str) -> tuple[str | None, bool]:
        """The operator a typed token stands for, and whether it is a member's token instead."""

        def read(gk: Groundkit) -> tuple[str | None, bool]:
            operator = tokens.console_operator(gk, token)
            if operator is not None:
                return operator, False
            try:
                return None, tokens.token_member(gk, token) is not None
            except GroundkitError:  # a role that may not map member tokens: just "not a console token"
                return None, False

        return await self._call(read)

    async def members(self) -> tuple[queries.MemberRow, ...] | queries.Unreadable:
        return await self._call(lambda gk: queries.attempt(lambda: queries.members(gk)))

    async def view_as_member(self, member: str, query: str, k: int) -> queries.MemberView:
        return await self._call(lambda gk: queries.view_as_member(gk, member, query, k))

    async def explain(self, member: str, object_id: str,
                      query: str | None) -> VisibilityExplanation | queries.Unreadable:
        return await self._call(lambda gk: queries.attempt(lambda: queries.explain(gk, member, object_id, query)))

    async def health(self) -> tuple[queries.HealthPage, Ledger]:
        """Status's report, the embedding backlog over time and the gate ledger, side by side on
        connections of their own."""
        report: list[HealthReport | queries.Unreadable] = []
        backlog: list[queries.Series[int] | queries.Unreadable] = []
        ledger: list[Ledger] = []

        async def read_report() -> None:
            report.append(await self._call(lambda gk: queries.status(gk, self.thresholds, self.replicas)))

        async def read_backlog() -> None:
            backlog.append(await self._call(lambda gk: queries.attempt(lambda: queries.backlog_series(gk))))

        async def read_ledger() -> None:
            ledger.append(await self._call(lambda gk: queries.attempt(lambda: queries.gate_ledger(gk))))

        async with anyio.create_task_group() as group:
            for read in (read_report, read_backlog, read_ledger):
                group.start_soon(read)
        return queries.HealthPage(report[0], backlog[0]), ledger[0]

    async def spend(self, since: datetime | None) -> queries.SpendPage | queries.Unreadable:
        """The three aggregations over the calls ledger at once, each on a connection of its own:
        the page waits for the slowest, not for their sum."""
        found: dict[str, tuple[CostRow, ...] | queries.Unreadable] = {}

        async def one(by: CostBy) -> None:
            found[by] = await self._call(lambda gk: queries.attempt(lambda: queries.costs(gk, since, by)))

        async with anyio.create_task_group() as group:
            for by in queries.SPEND_BY:
                group.start_soon(one, by)
        parts = [found[by] for by in queries.SPEND_BY]
        unreadable = next((p for p in parts if isinstance(p, queries.Unreadable)), None)
        if unreadable is not None:
            return unreadable
        flows, models, days = (p for p in parts if not isinstance(p, queries.Unreadable))
        return queries.SpendPage(since, flows, models, days)

    async def quality(self) -> queries.QualityPage | queries.Unreadable:
        return await self._call(lambda gk: queries.attempt(lambda: queries.quality(gk)))

    async def runs(self, flow: str | None, reader: str | None,
                   since: datetime | None) -> tuple[RunSummary, ...] | queries.Unreadable:
        return await self._call(lambda gk: queries.attempt(lambda: queries.runs(gk, flow, reader, since)))

    async def replay(self, run_id: str) -> Replay:
        return await self._call(lambda gk: queries.replay(gk, run_id))

    async def diff(self, run_a: str, run_b: str) -> queries.RunDiff:
        return await self._call(lambda gk: queries.diff(gk, run_a, run_b))

    async def verify_chain(self) -> ChainReport | queries.Unreadable:
        return await self._call(lambda gk: queries.attempt(lambda: queries.verify_chain(gk)))

    async def revision(self) -> str | None:
        """The database's schema revision (the footer), None when it cannot be read."""
        def read(gk: Groundkit) -> str | None:
            value = gk._scalar("select groundkit.schema_revision()", {})
            return None if value is None else str(value)

        return await self._call(read)
