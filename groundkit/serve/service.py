"""What both servers do per request, over one bounded connection pool: map a bearer token to a
member, then read as that member. Every read is one call of the SQL API, so the permission
predicate runs at each call and a downgrade counts from the next one. Nothing about members is
cached here.

The requests run on the event loop with :class:`~groundkit.AsyncGroundkit` over a
``psycopg_pool.AsyncConnectionPool``: no thread per request. With replicas, reads go through
the permission fence (:class:`~groundkit.replicas.FencedPool`, sync), in a worker thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import psycopg
from psycopg.rows import dict_row

from groundkit import dsn as groundkit_dsn
from groundkit import tokens
from groundkit.aio import AsyncGroundkit
from groundkit.client import Groundkit
from groundkit.errors import (
    ConfigError,
    DatabaseBusy,
    DatabaseUnavailable,
    GroundkitError,
    MigrationError,
    NoFreshServer,
    Unauthenticated,
    UnknownObject,
    from_psycopg,
)
from groundkit.pool_log import scrub_pool_log
from groundkit.replicas import DEFAULT_MAX_LAG, FencedPool
from groundkit.schema import head_revision
from groundkit.serve.models import (
    CitationInput,
    CitationResult,
    ErrorBody,
    GateHealth,
    Health,
    HomeInput,
    HomeResult,
    SearchInput,
    SearchResult,
)

_R = TypeVar("_R")

POOL_SIZE = 10
POOL_TIMEOUT = 5.0  # seconds a request waits for a connection before it gets a 503
# Set on every pooled connection, so that a request never waits on the database longer than
# these: a lock held elsewhere (rebuild's ACCESS EXCLUSIVE on chunks) ends in lock_timeout, the
# same wait as for a free connection; a statement that runs away ends in statement_timeout.
# Either is a 503 with GK019. 0 turns one off.
STATEMENT_TIMEOUT = 30.0
LOCK_TIMEOUT = 5.0

_PgConn = psycopg.Connection[dict[str, Any]]
_AsyncPgConn = psycopg.AsyncConnection[dict[str, Any]]


class Busy(DatabaseBusy):
    """No pooled connection came free in time (HTTP 503, GK019)."""


def _milliseconds(seconds: float, name: str) -> str:
    if not (isinstance(seconds, int | float) and 0 <= seconds <= 86_400):
        raise ConfigError(f"{name} must be a number of seconds from 0 (none) to 86400")
    return f"{max(1, round(seconds * 1000)) if seconds > 0 else 0}ms"


def session_timeouts(statement_timeout: float, lock_timeout: float) -> Callable[[_PgConn], None]:
    """The pool's ``configure`` callback: sets both timeouts on each new connection, for its
    session (the pool's connections are autocommit, and groundkit never sets them itself)."""
    values = (_milliseconds(statement_timeout, "statement_timeout"), _milliseconds(lock_timeout, "lock_timeout"))

    def configure(conn: _PgConn) -> None:
        conn.execute(_TIMEOUTS, values)

    return configure


_TIMEOUTS = ("select pg_catalog.set_config('statement_timeout', %s, false),"
             "       pg_catalog.set_config('lock_timeout', %s, false)")


def async_session_timeouts(statement_timeout: float,
                           lock_timeout: float) -> Callable[[_AsyncPgConn], Awaitable[None]]:
    """:func:`session_timeouts` for the async pool."""
    values = (_milliseconds(statement_timeout, "statement_timeout"), _milliseconds(lock_timeout, "lock_timeout"))

    async def configure(conn: _AsyncPgConn) -> None:
        await conn.execute(_TIMEOUTS, values)

    return configure


class ReadService:
    """A psycopg_pool of at most ``pool_size`` connections to ``dsn``; a request that waits
    longer than ``pool_timeout`` seconds for one raises :class:`Busy`. Every connection has
    ``statement_timeout`` and ``lock_timeout`` (seconds, 0 for none) set; a statement that hits
    one raises :class:`~groundkit.errors.DatabaseBusy` (GK019, HTTP 503)."""

    def __init__(self, dsn: str, *, pool_size: int = POOL_SIZE, pool_timeout: float = POOL_TIMEOUT,
                 statement_timeout: float = STATEMENT_TIMEOUT, lock_timeout: float = LOCK_TIMEOUT,
                 replicas: Sequence[str] = (), max_lag: float = DEFAULT_MAX_LAG) -> None:
        """With ``replicas``, reads (search, home, citations) go through the permission fence to a
        fresh replica, else to ``dsn`` (docs/replicas.md); tokens and health stay on ``dsn``."""
        from psycopg_pool import AsyncConnectionPool

        # A DSN libpq cannot read is a ConfigError now, not a pool that retries it forever and
        # logs libpq's message, which quotes the DSN (password included).
        groundkit_dsn.parse(dsn)
        scrub_pool_log(dsn)
        self.pool: AsyncConnectionPool[_AsyncPgConn] = AsyncConnectionPool(
            dsn, min_size=1, max_size=pool_size, timeout=pool_timeout, open=False, name="groundkit-serve",
            kwargs={"autocommit": True, "row_factory": dict_row},
            configure=async_session_timeouts(statement_timeout, lock_timeout),
            connection_class=psycopg.AsyncConnection[dict[str, Any]],
        )
        self._expected = head_revision()
        # the gate's verdict the server started on (groundkit/cli/serve.py), shown in /healthz
        self.gate: GateHealth | None = None
        # (the fence's pools are sync: opened here, not waited for, so the server starts while
        # the database is down)
        self.fenced = (FencedPool(dsn, replicas, max_lag=max_lag, pool_size=pool_size, pool_timeout=pool_timeout,
                                  open_wait=False, configure=session_timeouts(statement_timeout, lock_timeout))
                       if replicas else None)

    async def open(self) -> None:
        # not waiting: the server starts (and /healthz answers 503) while the database is down
        await self.pool.open(wait=False)

    async def close(self) -> None:
        if self.fenced is not None:
            await asyncio.to_thread(self.fenced.close)
        await self.pool.close()

    async def _read(self, fn: Callable[[Groundkit], _R], afn: Callable[[AsyncGroundkit], Awaitable[_R]]) -> _R:
        """``fn`` behind the fence (in a worker thread) when there are replicas, else ``afn`` on
        the async pool."""
        if self.fenced is not None:
            return await asyncio.to_thread(self.fenced.read, fn)
        async with self.groundkit() as gk:
            return await afn(gk)

    @asynccontextmanager
    async def groundkit(self) -> AsyncIterator[AsyncGroundkit]:
        from psycopg_pool import PoolTimeout

        try:
            async with self.pool.connection() as conn:
                yield AsyncGroundkit(conn)
        except PoolTimeout:
            raise Busy("no database connection came free in time; try again") from None
        except psycopg.Error as exc:  # (raised by the pool's own checks, outside a Groundkit call)
            raise from_psycopg(exc) from None

    async def member_for_token(self, token: str | None) -> str:
        """The member a bearer token stands for; Unauthenticated when there is none."""
        if token:
            async with self.groundkit() as gk:
                member = await gk._run(tokens.token_member_steps(token))
            if member is not None:
                return member
        raise Unauthenticated("a valid bearer token is required (groundkit tokens create MEMBER)")

    async def search(self, member: str, request: SearchInput) -> SearchResult:
        r = request
        hits = await self._read(
            lambda gk: gk.search(member, r.query, k=r.k, content_types=r.content_types, space_ids=r.space_ids,
                                 mode=r.mode),
            lambda agk: agk.search(member, r.query, k=r.k, content_types=r.content_types, space_ids=r.space_ids,
                                   mode=r.mode))
        return SearchResult(hits=tuple(hits))

    async def home(self, member: str, request: HomeInput) -> HomeResult:
        items = await self._read(lambda gk: gk.home(member, request.mode, k=request.k),
                                 lambda agk: agk.home(member, request.mode, k=request.k))
        return HomeResult(items=tuple(items))

    async def fetch_citation(self, member: str, request: CitationInput) -> CitationResult:
        """The cited chunk in its context; an object the member may not see now is UnknownObject
        (404), exactly as one that does not exist."""
        where = (member, request.object_id, request.version, request.chunk_seq)
        citation = await self._read(lambda gk: gk.fetch_citation(*where), lambda agk: agk.fetch_citation(*where))
        if citation is None:
            raise UnknownObject("no such citation: the object, version or chunk does not exist or is not "
                                "visible to you")
        return CitationResult(citation=citation)

    async def health(self) -> Health:
        try:
            async with self.groundkit() as gk:
                revision = await gk._scalar("select groundkit.schema_revision()", {})
        except GroundkitError:
            return Health(database="unavailable", expected_revision=self._expected, gate=self.gate)
        return Health(database="ok", revision=revision, expected_revision=self._expected, gate=self.gate)


def _busy_reason(exc: DatabaseBusy) -> str:
    return {"57014": "a statement timeout", "55P03": "a lock timeout"}.get(exc.sqlstate or "",
                                                                          "no connection came free")


def error_body(exc: BaseException) -> tuple[int, ErrorBody]:
    """The HTTP status and JSON body for an error. A database that is down, busy or not migrated
    is a 503 with a fixed message (its own message may name hosts); anything unexpected a 500."""
    if isinstance(exc, Unauthenticated):
        return 401, ErrorBody(code="GK014", message=exc.message)
    if isinstance(exc, UnknownObject):
        return 404, ErrorBody(code="GK009", message=exc.message)
    if isinstance(exc, NoFreshServer):
        return 503, ErrorBody(code="GK018", message=exc.message)
    if isinstance(exc, DatabaseBusy):
        return 503, ErrorBody(code="GK019", message="the database is busy or did not answer in time "
                              f"({_busy_reason(exc)}); nothing was changed, try again")
    if isinstance(exc, DatabaseUnavailable | MigrationError):
        return 503, ErrorBody(code="unavailable", message="the database is unavailable or not migrated")
    if isinstance(exc, GroundkitError) and exc.sqlstate and exc.sqlstate.startswith("GK"):
        return 400, ErrorBody(code=exc.sqlstate, message=exc.message)
    return 500, ErrorBody(code="internal", message="internal error")
