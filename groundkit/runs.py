"""Runs: what an AI flow read, pinned so that it can be replayed (docs/runs.md).

``with gk.run(flow=..., reader=...) as run:`` is one transaction on the client's connection.
Each :meth:`Run.search` is one statement (``groundkit.run_search``) that searches and records
the hits (a later one inside a savepoint, so that a failed search leaves the run usable); leaving the block
writes the header (``groundkit.record_run``) and commits. A run that raises is recorded with its
error class, and then the exception goes on; a client killed mid-run leaves nothing (the server
rolls the transaction back).

:meth:`Run.complete` calls an LLM through the outbound gate (:mod:`groundkit.llm`,
docs/outbound.md) and pins in the header what was asked and answered by digest, never by text;
:meth:`Run.record_llm` records a call the app made elsewhere, which the meter cannot vouch for.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Sequence
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from decimal import Decimal
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

import psycopg
from psycopg.types.json import Jsonb

from groundkit import telemetry
from groundkit.errors import InvalidArgument, OutboundRefused, from_psycopg
from groundkit.models import (
    Replay,
    ReplayHit,
    RunDiffRow,
    RunHeader,
    RunSummary,
    SearchHit,
)
from groundkit.session import AsyncSession, Session, no_nul
from groundkit.steps import Op, rows, scalar

if TYPE_CHECKING:
    from groundkit.context import AssembledContext
    from groundkit.llm import ChatClient, Completion, LlmProvider, Message

_SEARCH = ("select * from groundkit.run_search(%(run_id)s, %(search_no)s, %(flow)s, %(reader)s, %(query)s, %(k)s,"
           " %(content_types)s::text[], %(space_ids)s::text[], %(snippet_start)s, %(snippet_end)s)")
_RECORD = ("select groundkit.record_run(%(run_id)s, %(flow)s, %(reader)s, %(model)s, %(prompt_version)s,"
           " %(started_at)s, %(llm_calls)s, %(context)s, %(error_class)s)")

__all__ = ["AsyncRun", "Run", "diff_runs", "list_runs", "parse_run_id", "replay"]


def parse_run_id(run_id: uuid.UUID | str) -> uuid.UUID:
    """``run_id`` as a UUID; anything else is :class:`InvalidArgument` (GK005)."""
    if isinstance(run_id, uuid.UUID):
        return run_id
    try:
        return uuid.UUID(str(run_id))
    except ValueError:
        raise InvalidArgument(f"run id must be a UUID (got {str(run_id)[:80]!r})") from None


def _count(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgument(f"{name} must be a non-negative integer (got {value!r})")
    return value


def _error_class(exc_type: type[BaseException]) -> str:
    module = exc_type.__module__
    return exc_type.__qualname__ if module == "builtins" else f"{module}.{exc_type.__qualname__}"


class _RunBase:
    """What a run is, whichever driver runs it: its arguments checked, its header, each
    search's parameters and hits, what it sends through the outbound gate. :class:`Run` and
    :class:`AsyncRun` add only the I/O (the same statements, in the same pipelines)."""

    def __init__(self, session: Any, *, flow: str, reader: str, model: str | None = None,
                 prompt_version: str | None = None, run_id: uuid.UUID | str | None = None) -> None:
        for name, value in (("flow", flow), ("reader", reader)):
            if not isinstance(value, str) or not value:
                raise InvalidArgument(f"{name} must be a non-empty string")
        for name, opt in (("model", model), ("prompt_version", prompt_version)):
            if opt is not None and not isinstance(opt, str):
                raise InvalidArgument(f"{name} must be a string")
        no_nul(flow=flow, reader=reader, model=model, prompt_version=prompt_version)
        self.id = uuid.uuid4() if run_id is None else parse_run_id(run_id)
        self.flow = flow
        self.reader = reader
        self.model = model
        self.prompt_version = prompt_version
        self._session = session
        self._searches = 0
        self._llm_calls: list[dict[str, Any]] = []
        self._context: list[dict[str, Any]] = []
        # what the run read, to recognise member content in the messages it sends (complete)
        self._retrieved: dict[str, set[str]] = {}
        self._assembled: list[AssembledContext] = []
        self._started_at = datetime.now(UTC)
        self._entered = False
        self._in_tx = False  # the run's transaction is open
        self._begin = self._commit = ""
        self._rollback: tuple[str, ...] = ()
        self._span: AbstractContextManager[Any] = contextlib.nullcontext()
        self._span_current: Any = None

    # -- the transaction -------------------------------------------------------------------
    # A run's statements go out in pipelines (psycopg's pipeline mode): BEGIN with the first
    # search, each later search between a savepoint and its release, the header with COMMIT. A
    # run around one search then costs two round trips, not six. On a connection already in a
    # transaction the run is a savepoint of it instead.

    def _enter(self) -> None:
        if self._entered:
            raise InvalidArgument("a run is entered once")
        conn = self._session.conn
        outer = not (conn.autocommit and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE)
        self._begin = "savepoint gk_run" if outer else "begin"
        self._commit = "release savepoint gk_run" if outer else "commit"
        self._rollback = ("rollback to savepoint gk_run", "release savepoint gk_run") if outer else ("rollback",)
        self._entered = True
        # the run's span (groundkit.telemetry; a no-op without OpenTelemetry): flow tags the
        # spans opened inside it
        self._span = telemetry.span("run", flow=self.flow, model=self.model, prompt_version=self.prompt_version)
        self._span_current = self._span.__enter__()

    def _header(self, exc_type: type[BaseException] | None) -> dict[str, Any]:
        return {"run_id": self.id, "flow": self.flow, "reader": self.reader, "model": self.model,
                "prompt_version": self.prompt_version, "started_at": self._started_at,
                "llm_calls": Jsonb(self._llm_calls), "context": Jsonb(self._context),
                "error_class": None if exc_type is None else _error_class(exc_type)}

    def _check_open(self) -> None:
        if not self._entered:
            raise InvalidArgument("use the run as a context manager: `with gk.run(...) as run:`")

    def _aborted(self) -> bool:
        """Whether there is nothing to roll back (the connection is idle)."""
        return bool(self._session.conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE)

    # -- what a run does, without I/O ---------------------------------------------------------

    def _search_params(self, query: str, k: int, content_types: Sequence[str] | None,
                       space_ids: Sequence[str] | None, snippet_start: str, snippet_end: str) -> dict[str, Any]:
        self._check_open()
        from groundkit.ops import check_k, check_query

        check_k(k)
        check_query(query)
        for name, seq in (("content_types", content_types), ("space_ids", space_ids)):
            if isinstance(seq, str):
                raise InvalidArgument(f"{name} must be a list of strings, not a string")
        no_nul(query=query, content_types=list(content_types or ()), space_ids=list(space_ids or ()),
               snippet_start=snippet_start, snippet_end=snippet_end)
        self._searches += 1
        return {"run_id": self.id, "search_no": self._searches, "flow": self.flow, "reader": self.reader,
                "query": query, "k": k,
                "content_types": None if content_types is None else list(content_types),
                "space_ids": None if space_ids is None else list(space_ids),
                "snippet_start": snippet_start, "snippet_end": snippet_end}

    def _hits(self, rows: list[dict[str, Any]]) -> list[SearchHit]:
        self._in_tx = True
        hits = [SearchHit.model_validate(r) for r in rows]
        for hit in hits:
            self._retrieved.setdefault(hit.object_id, set()).add(hit.content)
        telemetry.add_hits(len(hits), mode="bm25", flow=self.flow)
        return hits

    def context(self, hits: Sequence[SearchHit], budget_tokens: int, **options: Any) -> AssembledContext:
        """:func:`groundkit.context.assemble_context` of ``hits``; the run records its citation ids."""
        self._check_open()
        from groundkit.context import assemble_context

        assembled = assemble_context(hits, budget_tokens, **options)
        self._context.extend(c.model_dump(mode="json") for c in assembled.citations)
        self._assembled.append(assembled)
        return assembled

    def _complete_steps(self, messages: Sequence[Message | dict[str, Any]], *, model: str, provider: LlmProvider,
                        prompt_version: str | None, objects: Sequence[str] | None, temperature: float | None,
                        max_tokens: int | None) -> Op[Completion]:
        """The checks of :meth:`Run.complete`, then (the run's transaction begun by the caller)
        the call as an operation."""
        self._check_open()
        from groundkit.llm import Completion, Message, messages_digest, text_digest
        from groundkit.outbound import gate

        if not isinstance(model, str) or not model:
            raise InvalidArgument("model must be a non-empty string")
        if prompt_version is not None and not isinstance(prompt_version, str):
            raise InvalidArgument("prompt_version must be a string")
        if isinstance(messages, str | bytes) or not messages:
            raise InvalidArgument("messages must be a non-empty list of {role, content}")
        try:
            msgs = [m if isinstance(m, Message) else Message.model_validate(m) for m in messages]
        except (ValueError, TypeError) as exc:
            raise InvalidArgument(f"messages must be {{role: system|user|assistant, content: text}} ({exc})") from None
        no_nul(model=model, prompt_version=prompt_version, messages=[m.content for m in msgs],
               objects=list(objects or ()))
        object_ids = [*(objects or ()), *self._objects_in("\n".join(m.content for m in msgs))]
        client = _chat_client(provider, model)

        def transmit(outgoing: list[str]) -> gate.Answer[tuple[str, list[Message]]]:
            sent_msgs = [Message(role=m.role, content=t) for m, t in zip(msgs, outgoing, strict=True)]
            text, tokens_in, tokens_out = client.chat(sent_msgs, temperature=temperature, max_tokens=max_tokens)
            return gate.Answer((text, sent_msgs), tokens_in, tokens_out)

        pinned = {"model": model, "source": "gate", "provider": provider.protocol,
                  "prompt_version": prompt_version if prompt_version is not None else self.prompt_version}

        def steps() -> Op[Completion]:
            try:
                sent = yield from gate.send_steps(
                    "complete", gate.Destination(provider.protocol, provider.url, model), [m.content for m in msgs],
                    transmit, provenance=gate.Provenance(queries=len(msgs), object_ids=tuple(object_ids)),
                    policy=gate.DATABASE, record=True, flow=self.flow, reader=self.reader, run_id=str(self.id))
            except OutboundRefused as exc:
                self._llm_calls.append({**pinned, "tokens_in": 0, "tokens_out": 0, "cost": None,
                                        "decision": "refused", "rule": exc.rule,
                                        "policy_version": exc.policy_version})
                raise
            text, sent_msgs = sent.result
            digest, answer_digest = messages_digest(sent_msgs), text_digest(text)
            self._llm_calls.append({
                **pinned, "tokens_in": sent.tokens_in, "tokens_out": sent.tokens_out,
                "cost": None if sent.cost is None else format(sent.cost, "f"), "decision": "sent",
                "class": sent.decision.provider_class, "policy_version": sent.decision.policy_version,
                "messages_sha256": digest, "answer_sha256": answer_digest, "scrubbed": sent.scrubbed})
            return Completion(text=text, model=model, tokens_in=sent.tokens_in, tokens_out=sent.tokens_out,
                              messages_sha256=digest, answer_sha256=answer_digest,
                              policy_version=sent.decision.policy_version,
                              provider_class=sent.decision.provider_class, scrubbed=sent.scrubbed)

        return steps()

    def _objects_in(self, text: str) -> list[str]:
        """Objects whose text this run read and that appear in ``text``: every citation of an
        assembled context found whole in it, and every retrieved hit whose chunk is in it."""
        found: dict[str, None] = {}
        for assembled in self._assembled:
            if assembled.text and assembled.text in text:
                found.update((c.object_id, None) for c in assembled.citations)
        for object_id, contents in self._retrieved.items():
            if object_id not in found and any(c and c in text for c in contents):
                found[object_id] = None
        return list(found)

    def _record_llm_steps(self, model: str, tokens_in: int, tokens_out: int, cost: Decimal | float | None,
                          meter: bool) -> tuple[Op[None], bool]:
        """The checks of :meth:`Run.record_llm`, then the recording as an operation (and
        whether the run's transaction must be begun first: when it meters)."""
        self._check_open()
        if not isinstance(model, str) or not model:
            raise InvalidArgument("model must be a non-empty string")
        no_nul(model=model)
        _count("tokens_in", tokens_in)
        _count("tokens_out", tokens_out)
        if cost is not None and (isinstance(cost, bool) or not isinstance(cost, int | float | Decimal) or cost < 0):
            raise InvalidArgument(f"cost must be a non-negative number (got {cost!r})")

        def steps() -> Op[None]:
            priced = cost
            if meter:
                from groundkit.metering import meter_steps

                call = yield from meter_steps(flow=self.flow, model=model, kind="llm", tokens_in=tokens_in,
                                              tokens_out=tokens_out, run_id=self.id, reader=self.reader)
                priced = call.cost if cost is None else cost
            self._llm_calls.append({"model": model, "tokens_in": tokens_in, "tokens_out": tokens_out,
                                    "cost": None if priced is None else format(Decimal(str(priced)), "f")})

        return steps(), meter


class Run(_RunBase):
    """One run: use as a context manager (:meth:`groundkit.Groundkit.run`)."""

    _session: Session

    def __enter__(self) -> Run:
        self._enter()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> Literal[False]:
        try:
            self._finish(exc_type, exc)
        except BaseException as failed:
            self._span.__exit__(type(failed), failed, failed.__traceback__)
            raise
        self._span.__exit__(exc_type, exc, tb)
        return False

    def _finish(self, exc_type: type[BaseException] | None, exc: BaseException | None) -> None:
        """Write the header and commit; on failure roll the whole run back."""
        try:
            self._pipeline([] if self._in_tx else [self._begin], _RECORD, self._header(exc_type), [self._commit])
        except BaseException as failed:
            self._abort()  # the whole run rolls back: nothing recorded
            if exc is None:
                raise (from_psycopg(failed) if isinstance(failed, psycopg.Error) else failed) from None
            return  # the body's exception goes on; nothing was recorded
        finally:
            self._in_tx = False

    def _pipeline(self, before: list[str], query: str, params: dict[str, Any],
                  after: list[str]) -> list[dict[str, Any]]:
        """``before``, ``query`` and ``after`` in one round trip; ``query``'s rows."""
        conn = self._session.conn
        if not psycopg.Pipeline.is_supported():  # (libpq < 14) one statement at a time
            for stmt in before:
                conn.execute(stmt)
            cur = conn.execute(query, params)
            rows = cur.fetchall() if cur.description else []
            for stmt in after:
                conn.execute(stmt)
            return rows
        with conn.pipeline():
            for stmt in before:
                conn.execute(stmt)
            cur = conn.cursor()
            cur.execute(query, params)
            for stmt in after:
                conn.execute(stmt)
        return cur.fetchall() if cur.description else []

    def _ensure_begun(self) -> None:
        if not self._in_tx:
            with self._session._errors():
                self._session.conn.execute(self._begin)
            self._in_tx = True

    def _abort(self) -> None:
        """Roll the run's transaction (or savepoint) back, if it is open."""
        if self._aborted():
            return
        with contextlib.suppress(psycopg.Error):
            for stmt in self._rollback:
                self._session.conn.execute(stmt)
        self._in_tx = False

    def search(self, query: str, k: int = 10, content_types: Sequence[str] | None = None,
               space_ids: Sequence[str] | None = None, snippet_start: str = "<mark>",
               snippet_end: str = "</mark>") -> list[SearchHit]:
        """:meth:`groundkit.Groundkit.search` as the run's reader, recorded in the same statement."""
        params = self._search_params(query, k, content_types, space_ids, snippet_start, snippet_end)
        first = not self._in_tx
        try:
            if first:
                rows = self._pipeline([self._begin], _SEARCH, params, [])
            else:
                rows = self._pipeline(["savepoint gk_run_search"], _SEARCH, params, ["release savepoint gk_run_search"])
        except psycopg.Error as exc:
            if first:
                self._abort()  # nothing of the run was in it yet
            else:
                with contextlib.suppress(psycopg.Error):
                    self._session.conn.execute("rollback to savepoint gk_run_search")
                    self._session.conn.execute("release savepoint gk_run_search")
            raise from_psycopg(exc) from exc
        return self._hits(rows)

    def complete(self, messages: Sequence[Message | dict[str, Any]], *, model: str, provider: LlmProvider,
                 prompt_version: str | None = None, objects: Sequence[str] | None = None,
                 temperature: float | None = None, max_tokens: int | None = None) -> Completion:
        """Ask ``model`` at ``provider`` (:class:`groundkit.llm.LlmProvider`) to complete
        ``messages``, through the outbound gate. The objects whose chunks the messages carry are
        the contexts this run assembled and the hits it retrieved that appear in them, plus
        ``objects`` (ids the app names: chunk text it put in another way). Refused by the
        policy: :class:`~groundkit.errors.OutboundRefused` (GK023) naming the rule, nothing sent,
        the refusal pinned in the run. Pinned when sent: the prompt version (``prompt_version``,
        else the run's), the SHA-256 of the messages as sent (after scrubbing) and of the answer,
        tokens and cost (metered under the run's flow), the policy version and the provider class."""
        op = self._complete_steps(messages, model=model, provider=provider, prompt_version=prompt_version,
                                     objects=objects, temperature=temperature, max_tokens=max_tokens)
        self._ensure_begun()  # the decision and the metered call are recorded in the run's transaction
        return self._session._run(op)

    def record_llm(self, model: str, tokens_in: int, tokens_out: int, *, cost: Decimal | float | None = None,
                   meter: bool = True) -> None:
        """Record an LLM call the app made: in the run's header and, unless ``meter`` is false, in
        the calls ledger through :func:`groundkit.metering.meter` (priced from the configured price
        table; ``cost`` overrides the price for the header). Negative tokens: InvalidArgument."""
        op, begin = self._record_llm_steps(model, tokens_in, tokens_out, cost, meter)
        if begin:
            self._ensure_begun()  # the call is recorded in the run's transaction
        self._session._run(op)


class AsyncRun(_RunBase):
    """:class:`Run` for :class:`groundkit.AsyncGroundkit`: ``async with gk.run(...) as run:``,
    the same statements in the same pipelines, awaited."""

    _session: AsyncSession

    async def __aenter__(self) -> AsyncRun:
        self._enter()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> Literal[False]:
        try:
            await self._finish(exc_type, exc)
        except BaseException as failed:
            self._span.__exit__(type(failed), failed, failed.__traceback__)
            raise
        self._span.__exit__(exc_type, exc, tb)
        return False

    async def _finish(self, exc_type: type[BaseException] | None, exc: BaseException | None) -> None:
        try:
            await self._pipeline([] if self._in_tx else [self._begin], _RECORD, self._header(exc_type),
                                 [self._commit])
        except BaseException as failed:
            await self._abort()
            if exc is None:
                raise (from_psycopg(failed) if isinstance(failed, psycopg.Error) else failed) from None
            return
        finally:
            self._in_tx = False

    async def _pipeline(self, before: list[str], query: str, params: dict[str, Any],
                        after: list[str]) -> list[dict[str, Any]]:
        conn = self._session.conn
        if not psycopg.AsyncPipeline.is_supported():
            for stmt in before:
                await conn.execute(stmt)
            cur = await conn.execute(query, params)
            rows = await cur.fetchall() if cur.description else []
            for stmt in after:
                await conn.execute(stmt)
            return rows
        async with conn.pipeline():
            for stmt in before:
                await conn.execute(stmt)
            acur = conn.cursor()
            await acur.execute(query, params)
            for stmt in after:
                await conn.execute(stmt)
        return await acur.fetchall() if acur.description else []

    async def _ensure_begun(self) -> None:
        if not self._in_tx:
            try:
                await self._session.conn.execute(self._begin)
            except psycopg.Error as exc:
                raise from_psycopg(exc) from exc
            self._in_tx = True

    async def _abort(self) -> None:
        if self._aborted():
            return
        with contextlib.suppress(psycopg.Error):
            for stmt in self._rollback:
                await self._session.conn.execute(stmt)
        self._in_tx = False

    async def search(self, query: str, k: int = 10, content_types: Sequence[str] | None = None,
                     space_ids: Sequence[str] | None = None, snippet_start: str = "<mark>",
                     snippet_end: str = "</mark>") -> list[SearchHit]:
        """:meth:`Run.search`."""
        params = self._search_params(query, k, content_types, space_ids, snippet_start, snippet_end)
        first = not self._in_tx
        try:
            if first:
                rows = await self._pipeline([self._begin], _SEARCH, params, [])
            else:
                rows = await self._pipeline(["savepoint gk_run_search"], _SEARCH, params,
                                            ["release savepoint gk_run_search"])
        except psycopg.Error as exc:
            if first:
                await self._abort()
            else:
                with contextlib.suppress(psycopg.Error):
                    await self._session.conn.execute("rollback to savepoint gk_run_search")
                    await self._session.conn.execute("release savepoint gk_run_search")
            raise from_psycopg(exc) from exc
        return self._hits(rows)

    async def complete(self, messages: Sequence[Message | dict[str, Any]], *, model: str, provider: LlmProvider,
                       prompt_version: str | None = None, objects: Sequence[str] | None = None,
                       temperature: float | None = None, max_tokens: int | None = None) -> Completion:
        """:meth:`Run.complete` (the provider's HTTP call in a worker thread)."""
        op = self._complete_steps(messages, model=model, provider=provider, prompt_version=prompt_version,
                                     objects=objects, temperature=temperature, max_tokens=max_tokens)
        await self._ensure_begun()
        return await self._session._run(op)

    async def record_llm(self, model: str, tokens_in: int, tokens_out: int, *, cost: Decimal | float | None = None,
                         meter: bool = True) -> None:
        """:meth:`Run.record_llm`."""
        op, begin = self._record_llm_steps(model, tokens_in, tokens_out, cost, meter)
        if begin:
            await self._ensure_begun()
        await self._session._run(op)


_CHAT_CLIENTS: dict[tuple[str, str], ChatClient] = {}
_CHAT_LOCK = threading.Lock()


def _chat_client(provider: LlmProvider, model: str) -> ChatClient:
    """One transport per process, provider and model (an httpx client keeps its connections)."""
    from groundkit.llm import ChatClient, LlmProvider

    if not isinstance(provider, LlmProvider):
        raise InvalidArgument("provider must be a groundkit.llm.LlmProvider")
    key = (provider.model_dump_json(), model)
    with _CHAT_LOCK:
        client = _CHAT_CLIENTS.get(key)
        if client is None:
            client = _CHAT_CLIENTS[key] = ChatClient(provider, model)
    return client


# -- reading runs ------------------------------------------------------------------------


def replay(session: Session, run_id: uuid.UUID | str, reader: str | None = None) -> Replay:
    """The chunks run ``run_id`` saw, rebuilt from the log (``groundkit.replay_run``)."""
    return session._run(replay_steps(run_id, reader))


def replay_steps(run_id: uuid.UUID | str, reader: str | None = None) -> Op[Replay]:
    rid = parse_run_id(run_id)
    if reader is not None:
        no_nul(reader=reader)
    params = {"run_id": rid, "reader": reader}
    header = yield from rows("select * from groundkit.run_header(%(run_id)s, %(reader)s)", params)
    found = yield from rows("select * from groundkit.replay_run(%(run_id)s, %(reader)s)", params)
    return Replay(run=_header(header[0]), hits=tuple(ReplayHit.model_validate(r) for r in found))


_HEADER_FIELDS = frozenset(RunHeader.model_fields)


def _header(row: dict[str, Any]) -> RunHeader:
    data = {k: v for k, v in row.items() if k in _HEADER_FIELDS}
    data["run_id"] = str(row["run_id"])
    data["snapshot"] = None if row["snapshot"] is None else str(row["snapshot"])
    data["cost"] = None if row["cost"] is None else float(row["cost"])
    return RunHeader.model_validate(data)


def list_runs(session: Session, *, flow: str | None = None, reader: str | None = None,
              since: datetime | None = None, limit: int = 1000) -> list[RunSummary]:
    """Runs, newest first (``groundkit.list_runs``: the auditor's and the owner's)."""
    return session._run(list_runs_steps(flow=flow, reader=reader, since=since, limit=limit))


def list_runs_steps(*, flow: str | None = None, reader: str | None = None, since: datetime | None = None,
                    limit: int = 1000) -> Op[list[RunSummary]]:
    no_nul(flow=flow, reader=reader)
    found = yield from rows("select * from groundkit.list_runs(%(flow)s, %(reader)s, %(since)s, %(limit)s)",
                            {"flow": flow, "reader": reader, "since": since, "limit": _count("limit", limit)})
    return [RunSummary.model_validate({**r, "run_id": str(r["run_id"]),
                                       "cost": None if r["cost"] is None else float(r["cost"])}) for r in found]


def diff_runs(session: Session, run_a: uuid.UUID | str, run_b: uuid.UUID | str,
              reader: str | None = None) -> list[RunDiffRow]:
    """Hits that entered, left or moved from ``run_a`` to ``run_b``, search by search."""
    return session._run(diff_runs_steps(run_a, run_b, reader))


def diff_runs_steps(run_a: uuid.UUID | str, run_b: uuid.UUID | str, reader: str | None = None) -> Op[list[RunDiffRow]]:
    found = yield from rows("select * from groundkit.diff_runs(%(a)s, %(b)s, %(reader)s)",
                            {"a": parse_run_id(run_a), "b": parse_run_id(run_b), "reader": reader})
    return [RunDiffRow.model_validate(r) for r in found]


def prune_runs(session: Session, before: datetime) -> int:
    """Delete runs recorded before ``before`` (the owner's alone); leaves a tombstone row."""
    return session._run(prune_runs_steps(before))


def prune_runs_steps(before: datetime) -> Op[int]:
    if not isinstance(before, datetime):
        raise InvalidArgument("before must be a datetime")
    return int((yield from scalar("select groundkit.prune_runs(%(before)s)", {"before": before})))
