"""The async client: :class:`AsyncGroundkit`, over psycopg's ``AsyncConnection``.

The same methods, models, errors and telemetry as :class:`groundkit.Groundkit`, because both run
the same operations (:mod:`groundkit.ops`, :mod:`groundkit.steps`): only the driver differs.
A statement is awaited on the event loop; a provider call that a dense search's query embedding
makes (the local model's inference, or an HTTP request) runs in a worker thread, through the
same outbound gate. Administration and maintenance (rebuild, analyze, the worker) stay on the
sync client: they are operator work, not request work.

    async with await AsyncGroundkit.connect(dsn) as gk:
        hits = await gk.search("alice", "pricing")

With a pool (``psycopg_pool.AsyncConnectionPool(..., kwargs={"autocommit": True, "row_factory":
dict_row})``): ``async with pool.connection() as conn: gk = AsyncGroundkit(conn)``.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any
from uuid import UUID

from psycopg.rows import dict_row

from groundkit import ops, runs
from groundkit.client import resolve_dsn
from groundkit.dsn import connect_async
from groundkit.errors import InvalidArgument
from groundkit.models import (
    Citation,
    ContentObject,
    EngagementKind,
    HomeItem,
    HomeMode,
    Replay,
    RunDiffRow,
    RunSummary,
    SearchHit,
    SearchMode,
    Segment,
    StoredObject,
    WriteResult,
)
from groundkit.session import AsyncConnection, AsyncSession, query_notices

if TYPE_CHECKING:
    from groundkit.embedders import EmbeddingModel, QueryEmbedder

__all__ = ["AsyncGroundkit", "connect"]


async def connect(dsn: str | None = None, *, autocommit: bool = True) -> AsyncConnection:
    """An async psycopg connection with dict rows (the DSN resolved as :func:`groundkit.connect`
    resolves it; errors never carry the password)."""
    conn: AsyncConnection = await connect_async(resolve_dsn(dsn), autocommit=autocommit, row_factory=dict_row)
    return conn


class AsyncGroundkit(AsyncSession):
    """:class:`groundkit.Groundkit` for asyncio: members, spaces, content, search, citations,
    home, engagement and runs, awaited. With an autocommit connection every call is its own
    transaction; pass a connection in a transaction to make calls part of your own."""

    #: the sample id of the last :meth:`search` if the sampler recorded it, else ``None``
    last_sample_id: UUID | None = None
    #: what the last :meth:`search` said about how it read its query (``SearchHit.query_notice``,
    #: also when it found nothing), else ``None``
    last_query_notice: str | None = None

    def __init__(self, conn: AsyncConnection, *, flow: str | None = None) -> None:
        super().__init__(conn)
        if flow is not None and (not isinstance(flow, str) or not flow):
            raise InvalidArgument("flow must be a non-empty string")
        self.flow = flow
        self._embedders: dict[str, QueryEmbedder] = {}

    @classmethod
    async def connect(cls, dsn: str | None = None, *, flow: str | None = None) -> AsyncGroundkit:
        return cls(await connect(dsn), flow=flow)

    async def close(self) -> None:
        await self.conn.close()

    async def __aenter__(self) -> AsyncGroundkit:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- live authority ----------------------------------------------------------------------

    async def put_member(self, member_sub: str, tier: str, status: str = "active") -> None:
        await self._run(ops.put_member(member_sub, tier, status))

    async def set_space_language(self, space_id: str, language: str | None) -> int:
        """:meth:`groundkit.Groundkit.set_space_language`, awaited."""
        return await self._run(ops.set_space_language(space_id, language))

    async def languages(self) -> tuple[str, ...]:
        return await self._run(ops.languages())

    async def put_space(self, space_id: str, min_tier: str = "T0", private: bool = False) -> None:
        await self._run(ops.put_space(space_id, min_tier, private))

    async def grant_space(self, space_id: str, member_sub: str) -> None:
        await self._run(ops.grant_space(space_id, member_sub))

    async def revoke_space(self, space_id: str, member_sub: str) -> None:
        await self._run(ops.revoke_space(space_id, member_sub))

    # -- the content log ---------------------------------------------------------------------

    async def put(self, obj: ContentObject) -> WriteResult:
        return await self._run(ops.put(obj))

    async def put_object(self, object_id: str, version: int, content_type: str, space_id: str,
                         tier_visibility: str, title: str, body: str, owner_sub: str | None = None,
                         owner_only: bool = False, segments: Sequence[Segment | dict[str, Any]] | None = None,
                         metadata: dict[str, Any] | None = None) -> WriteResult:
        return await self._run(ops.put_object(object_id, version, content_type, space_id, tier_visibility, title,
                                              body, owner_sub, owner_only, segments, metadata))

    async def put_objects(self, objects: Sequence[ContentObject]) -> list[WriteResult]:
        return await self._run(ops.put_objects(objects))

    async def retier_object(self, object_id: str, version: int, tier_visibility: str) -> WriteResult:
        return await self._run(ops.versioned("retier_object", object_id, version, tier_visibility=tier_visibility))

    async def delete_object(self, object_id: str, version: int) -> WriteResult:
        return await self._run(ops.versioned("delete_object", object_id, version))

    async def redact_object(self, object_id: str, version: int) -> WriteResult:
        return await self._run(ops.versioned("redact_object", object_id, version))

    # -- reading -----------------------------------------------------------------------------

    async def search(self, reader_sub: str, query: str, k: int = 10, content_types: Sequence[str] | None = None,
                     space_ids: Sequence[str] | None = None, snippet_start: str = "<mark>",
                     snippet_end: str = "</mark>", *, mode: SearchMode | None = None, exact: bool = False,
                     fusion: str | None = None, rrf_k: int | None = None, bm25_weight: float | None = None,
                     dense_weight: float | None = None, depth: int | None = None,
                     match_gate: bool | None = None) -> list[SearchHit]:
        """:meth:`groundkit.Groundkit.search`, awaited."""
        knobs = {"fusion": fusion, "rrf_k": rrf_k, "bm25_weight": bm25_weight, "dense_weight": dense_weight,
                 "depth": depth, "match_gate": match_gate}
        self.last_sample_id = self.last_query_notice = None
        with query_notices(self.conn) as notices:
            found, self.last_sample_id = await self._run(ops.search(
                reader_sub, query, k, content_types, space_ids, snippet_start, snippet_end, mode=mode, exact=exact,
                knobs=knobs, embedder_of=self._embedder, flow=self.flow))
        hits, self.last_query_notice = ops.with_query_notice(found, notices)
        return hits

    def _embedder(self, model: EmbeddingModel) -> QueryEmbedder:
        from groundkit.embedders import query_embedder

        key = model.model_dump_json()
        embedder = self._embedders.get(key)
        if embedder is None:
            embedder = self._embedders[key] = query_embedder(model)
        return embedder

    async def record_sample_engagement(self, sample_id: UUID | str, object_id: str, kind: str,
                                       value: float | None = None) -> None:
        await self._run(ops.record_sample_engagement(sample_id, object_id, kind, value))

    async def set_sample_limit(self, per_reader: int, per: timedelta) -> None:
        await self._run(ops.set_sample_limit(per_reader, per))

    async def set_sample_rate(self, rate: float) -> float:
        return await self._run(ops.set_sample_rate(rate))

    async def stored_objects(self, object_ids: Sequence[str]) -> dict[str, StoredObject]:
        return await self._run(ops.stored_objects(object_ids))

    async def sourced_objects(self, space_id: str, base: str) -> dict[str, StoredObject]:
        return await self._run(ops.sourced_objects(space_id, base))

    async def chunk_count(self, object_ids: Sequence[str]) -> int:
        return await self._run(ops.chunk_count(object_ids))

    async def fetch_citation(self, reader_sub: str, object_id: str, version: int, chunk_seq: int) -> Citation | None:
        return await self._run(ops.fetch_citation(reader_sub, object_id, version, chunk_seq))

    async def home(self, reader_sub: str, mode: HomeMode = "latest", k: int = 20,
                   space_ids: Sequence[str] | None = None,
                   content_types: Sequence[str] | None = None) -> list[HomeItem]:
        return await self._run(ops.home(reader_sub, mode, k, space_ids, content_types))

    async def record_engagement(self, object_id: str, member_sub: str, kind: EngagementKind,
                                at: datetime | None = None, value: int | None = None) -> None:
        await self._run(ops.record_engagement(object_id, member_sub, kind, at, value))

    async def snapshot_marker(self) -> int:
        return await self._run(ops.snapshot_marker())

    async def state_checksum(self) -> str:
        return await self._run(ops.state_checksum())

    # -- runs (docs/runs.md) -----------------------------------------------------------------

    def run(self, flow: str, reader: str, model: str | None = None, prompt_version: str | None = None,
            run_id: uuid.UUID | str | None = None) -> runs.AsyncRun:
        """``async with gk.run(flow="tutor", reader="alice") as run: await run.search(...)``."""
        return runs.AsyncRun(self, flow=flow, reader=reader, model=model, prompt_version=prompt_version,
                             run_id=run_id)

    async def replay(self, run_id: uuid.UUID | str, reader: str | None = None) -> Replay:
        return await self._run(runs.replay_steps(run_id, reader))

    async def runs(self, flow: str | None = None, reader: str | None = None, since: datetime | None = None,
                   limit: int = 1000) -> list[RunSummary]:
        return await self._run(runs.list_runs_steps(flow=flow, reader=reader, since=since, limit=limit))

    async def diff_runs(self, run_a: uuid.UUID | str, run_b: uuid.UUID | str,
                        reader: str | None = None) -> list[RunDiffRow]:
        return await self._run(runs.diff_runs_steps(run_a, run_b, reader))

    async def prune_runs(self, before: datetime) -> int:
        return await self._run(runs.prune_runs_steps(before))
