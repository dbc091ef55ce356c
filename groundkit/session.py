"""The plumbing every groundkit call shares: one psycopg connection, database errors mapped to
:class:`~groundkit.errors.GroundkitError`, argument checks, the progress of long calls, and the
two drivers of groundkit's operations (:mod:`groundkit.steps`): :class:`Session` on a
``psycopg.Connection``, :class:`AsyncSession` on a ``psycopg.AsyncConnection``."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import psycopg
from psycopg import sql
from pydantic import BaseModel, ValidationError

from groundkit.errors import GroundkitError, InvalidArgument, UnknownContentType, from_psycopg
from groundkit.steps import Op, Query, Step, Transmit, drive

Connection = psycopg.Connection[dict[str, Any]]
AsyncConnection = psycopg.AsyncConnection[dict[str, Any]]
Progress = Callable[[int, int], None]

_M = TypeVar("_M", bound=BaseModel)
_T = TypeVar("_T")

# 'groundkit.<function>: <done> of <total> <things>', each admin call's own (a rebuild's sketching
# reports its lists too, and those are not the rebuild's progress)
_PROGRESS = re.compile(
    r"groundkit\.(rebuild|set_tier_rank|analyze_postings): (\d+) of (\d+) (?:objects|spaces|lists|terms)")


#: the start of the NOTICE search raises when it kept a long query's most informative terms
#: (groundkit._search_terms, sql/060_search.sql; docs/bm25/analysis.md, "Long questions")
QUERY_NOTICE = "groundkit: the query has "


@contextmanager
def query_notices(conn: Connection | AsyncConnection) -> Iterator[list[str]]:
    """What search says, while the block runs, about how it read a query (its NOTICEs that start
    with :data:`QUERY_NOTICE`), in a list filled as they come; for either driver's connection."""
    notices: list[str] = []

    def on_notice(diag: psycopg.errors.Diagnostic) -> None:
        message = diag.message_primary or ""
        if message.startswith(QUERY_NOTICE):
            notices.append(message)

    conn.add_notice_handler(on_notice)
    try:
        yield notices
    finally:
        conn.remove_notice_handler(on_notice)


def validated(model: type[_M], data: dict[str, Any]) -> _M:
    """``model`` built from call arguments. A bad argument raises :class:`InvalidArgument`
    (:class:`UnknownContentType` for an unknown content type), the same class the database
    raises for the same mistake, never a bare pydantic error."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'value'}: {e['msg']}" for e in errors)
        if any(e["loc"][:1] == ("content_type",) for e in errors):
            raise UnknownContentType(
                f"unknown content_type {data.get('content_type')!r} ({problems})"
            ) from None
        raise InvalidArgument(problems) from None


def no_nul(**values: object) -> None:
    """Refuse text Postgres cannot store: NUL characters, lone surrogates."""
    for name, value in values.items():
        texts = value if isinstance(value, list | tuple) else [value]
        for text in texts:
            if isinstance(text, str):
                if "\x00" in text:
                    raise InvalidArgument(f"{name} must not contain NUL characters")
                try:
                    text.encode("utf-8")
                except UnicodeEncodeError:
                    raise InvalidArgument(f"{name} is not valid Unicode text") from None


class Session:
    """One psycopg connection and the helpers every call goes through."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def _outside_transaction(self) -> bool:
        """Whether each statement commits on its own: an autocommit connection outside a
        ``with conn.transaction()`` block (VACUUM and work in steps need that)."""
        return self.conn.autocommit and self.conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE

    @contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except GroundkitError:
            raise
        except psycopg.Error as exc:
            raise from_psycopg(exc) from exc

    def _run(self, op: Op[_T]) -> _T:
        """Run one of groundkit's operations (:mod:`groundkit.steps`) on this connection."""
        return drive(op, self._step)

    def _step(self, step: Step) -> Any:
        if isinstance(step, Transmit):
            return step.call()
        if not step.savepoint:
            return self._fetch(step.statement, dict(step.params))
        with self._errors(), self.conn.transaction():
            return self._fetch(step.statement, dict(step.params))

    def _fetch(self, query: str | sql.Composable, params: dict[str, Any]) -> list[dict[str, Any]]:
        with self._errors(), self.conn.cursor() as cur:
            cur.execute(query, params)  # type: ignore[arg-type]
            return cur.fetchall() if cur.description else []

    def _scalar(self, query: str | sql.Composable, params: dict[str, Any]) -> Any:
        rows = self._fetch(query, params)
        return next(iter(rows[0].values()))

    def _with_progress(self, fn: str, query: str, params: dict[str, Any], progress: Progress | None) -> int:
        """Run a long admin call; the DEBUG progress messages of groundkit.``fn`` reach
        ``progress`` as they come."""
        if progress is None:
            return int(self._scalar(query, params))
        report = progress

        def on_notice(diag: psycopg.errors.Diagnostic) -> None:
            found = _PROGRESS.fullmatch(diag.message_primary or "")
            if found and found[1] == fn:
                report(int(found[2]), int(found[3]))

        self.conn.add_notice_handler(on_notice)
        try:
            with self._errors(), self.conn.transaction():
                # transaction-local, and put back: the caller's session keeps its own level
                level = self._scalar("select current_setting('client_min_messages') as level", {})
                self._fetch("select set_config('client_min_messages', 'debug1', true)", {})
                n = int(self._scalar(query, params))
                self._fetch("select set_config('client_min_messages', %(level)s, true)", {"level": level})
                return n
        finally:
            self.conn.remove_notice_handler(on_notice)


class AsyncSession:
    """The async driver: one ``psycopg.AsyncConnection`` (dict rows), errors mapped as
    :class:`Session` maps them. Statements are awaited on the event loop; a provider call (an
    embedding, a completion: blocking by nature) runs in a worker thread with the caller's
    context."""

    def __init__(self, conn: AsyncConnection) -> None:
        self.conn = conn

    def _outside_transaction(self) -> bool:
        return self.conn.autocommit and self.conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE

    async def _run(self, op: Op[_T]) -> _T:
        """Run one of groundkit's operations (:mod:`groundkit.steps`) on this connection: the
        async twin of :func:`groundkit.steps.drive`."""
        try:
            step = next(op)
            while True:
                try:
                    result = await self._step(step)
                except GroundkitError as exc:
                    step = op.throw(exc)
                else:
                    step = op.send(result)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        finally:
            op.close()

    async def _step(self, step: Step) -> Any:
        if isinstance(step, Transmit):
            return await asyncio.to_thread(step.call)  # (which copies the context)
        try:
            if not step.savepoint:
                return await self._execute(step)
            async with self.conn.transaction():
                return await self._execute(step)
        except GroundkitError:
            raise
        except psycopg.Error as exc:
            raise from_psycopg(exc) from exc

    async def _execute(self, step: Query) -> list[dict[str, Any]]:
        async with self.conn.cursor() as cur:
            await cur.execute(step.statement, dict(step.params))  # type: ignore[arg-type]
            return await cur.fetchall() if cur.description else []

    async def _fetch(self, query: str | sql.Composable, params: dict[str, Any]) -> list[dict[str, Any]]:
        return await self._step(Query(query, params))  # type: ignore[no-any-return]

    async def _scalar(self, query: str | sql.Composable, params: dict[str, Any]) -> Any:
        rows = await self._fetch(query, params)
        return next(iter(rows[0].values()))
