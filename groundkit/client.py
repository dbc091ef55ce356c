"""The Python API: typed calls over groundkit's SQL functions.

Every call goes to the database; nothing about members, spaces or objects is cached in the
process, so what another connection commits counts from the next call.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any
from uuid import UUID

from psycopg.rows import dict_row

from groundkit import ops, runs
from groundkit.admin import Admin
from groundkit.config import Settings
from groundkit.dsn import connect as dsn_connect
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
from groundkit.session import Connection, query_notices

if TYPE_CHECKING:
    from groundkit.embedders import EmbeddingModel, QueryEmbedder

__all__ = ["Connection", "Groundkit", "connect", "resolve_dsn"]


def resolve_dsn(dsn: str | None = None, settings: Settings | None = None) -> str:
    """``dsn`` if given, else ``GROUNDKIT_DSN``, else the embedded server (started if needed)."""
    if dsn:
        return dsn
    settings = settings or Settings.from_env()
    if settings.dsn:
        return settings.dsn
    from groundkit import embedded

    return embedded.ensure_server(settings)


def connect(dsn: str | None = None, *, autocommit: bool = True) -> Connection:
    """Open a psycopg connection. Connection errors never carry the password, not even in
    ``__cause__`` or ``__context__`` (:func:`groundkit.dsn.connect`)."""
    conn: Connection = dsn_connect(resolve_dsn(dsn), autocommit=autocommit, row_factory=dict_row)
    return conn


class Groundkit(Admin):
    """groundkit over one psycopg connection: members, spaces, content and search here, the
    index's administration and maintenance from :class:`~groundkit.admin.Admin`.

    With an autocommit connection (what :meth:`connect` opens) every call is its own
    transaction. Pass a connection in a transaction to make calls part of your own.
    """

    #: the sample id of the last :meth:`search` if the sampler recorded it, else ``None``
    #: (``groundkit.config.sample_rate``; docs/telemetry.md)
    last_sample_id: UUID | None = None
    #: what the last :meth:`search` said about how it read its query (``SearchHit.query_notice``,
    #: also when it found nothing), else ``None``
    last_query_notice: str | None = None

    def __init__(self, conn: Connection, *, flow: str | None = None) -> None:
        super().__init__(conn)
        if flow is not None and (not isinstance(flow, str) or not flow):
            raise InvalidArgument("flow must be a non-empty string")
        #: the flow query embeddings are metered to (docs/costs.md); None: not metered
        self.flow = flow
        self._embedders: dict[str, QueryEmbedder] = {}  # by model (its JSON), for this object's life

    @classmethod
    def connect(cls, dsn: str | None = None, *, flow: str | None = None) -> Groundkit:
        return cls(connect(dsn), flow=flow)

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Groundkit:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- live authority ------------------------------------------------------------------

    def put_member(self, member_sub: str, tier: str, status: str = "active") -> None:
        self._run(ops.put_member(member_sub, tier, status))

    def set_space_language(self, space_id: str, language: str | None) -> int:
        """Name the language a space's objects are analyzed in (``None`` or ``'english'``:
        English, the default), and analyze again, in this call's transaction, every live object
        of the space whose language changes with it (an object naming its own in
        ``metadata.language`` keeps it). Returns how many objects were analyzed again.
        :class:`~groundkit.errors.UnknownLanguage` (GK026) for a language groundkit has no
        configuration for (:meth:`languages`); docs/bm25/analysis.md, "Languages"."""
        return self._run(ops.set_space_language(space_id, language))

    def languages(self) -> tuple[str, ...]:
        """The languages a space or an object may name: PostgreSQL's Snowball configurations."""
        return self._run(ops.languages())

    def put_space(self, space_id: str, min_tier: str = "T0", private: bool = False) -> None:
        self._run(ops.put_space(space_id, min_tier, private))

    def grant_space(self, space_id: str, member_sub: str) -> None:
        self._run(ops.grant_space(space_id, member_sub))

    def revoke_space(self, space_id: str, member_sub: str) -> None:
        self._run(ops.revoke_space(space_id, member_sub))

    # -- the content log -----------------------------------------------------------------

    def put(self, obj: ContentObject) -> WriteResult:
        """Write one version of an object (see :meth:`put_object`)."""
        return self._run(ops.put(obj))

    def put_object(
        self,
        object_id: str,
        version: int,
        content_type: str,
        space_id: str,
        tier_visibility: str,
        title: str,
        body: str,
        owner_sub: str | None = None,
        owner_only: bool = False,
        segments: Sequence[Segment | dict[str, Any]] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> WriteResult:
        """Append a version of an object to the log and update the derived views."""
        return self._run(ops.put_object(object_id, version, content_type, space_id, tier_visibility, title, body,
                                        owner_sub, owner_only, segments, metadata))

    def put_objects(self, objects: Sequence[ContentObject]) -> list[WriteResult]:
        """Write many objects in one statement (``groundkit.put_objects``): the same checks,
        statuses and invariants as :meth:`put`, set-based. Fails whole on the first bad element.
        Each object takes a row lock until the transaction ends (no slot of the server's shared
        lock table, so the number of objects per transaction is not bounded by it)."""
        return self._run(ops.put_objects(objects))

    def _versioned(self, fn: str, object_id: str, version: int, **extra: str) -> WriteResult:
        return self._run(ops.versioned(fn, object_id, version, **extra))

    def retier_object(self, object_id: str, version: int, tier_visibility: str) -> WriteResult:
        """A new version of the object with a new tier stamp."""
        return self._versioned("retier_object", object_id, version, tier_visibility=tier_visibility)

    def delete_object(self, object_id: str, version: int) -> WriteResult:
        """Tombstone the object. Terminal: no later write can bring it back."""
        return self._versioned("delete_object", object_id, version)

    def redact_object(self, object_id: str, version: int) -> WriteResult:
        """Tombstone the object and scrub its text from the log and every derived row."""
        return self._versioned("redact_object", object_id, version)

    # -- reading -------------------------------------------------------------------------

    def search(
        self,
        reader_sub: str,
        query: str,
        k: int = 10,
        content_types: Sequence[str] | None = None,
        space_ids: Sequence[str] | None = None,
        snippet_start: str = "<mark>",
        snippet_end: str = "</mark>",
        *,
        mode: SearchMode | None = None,
        exact: bool = False,
        fusion: str | None = None,
        rrf_k: int | None = None,
        bm25_weight: float | None = None,
        dense_weight: float | None = None,
        depth: int | None = None,
        match_gate: bool | None = None,
    ) -> list[SearchHit]:
        """The top ``k`` chunks ``reader_sub`` may see right now, each with its citation and a
        snippet: HTML-escaped text around the matches, which stand between ``snippet_start`` and
        ``snippet_end``.

        ``mode`` (default :data:`~groundkit.models.DEFAULT_SEARCH_MODE`, ``auto``): ``auto`` runs
        the mode and hybrid settings the searched content types share
        (:meth:`~groundkit.admin.Admin.set_search_mode`), else ``hybrid`` when the database has
        pgvector and an active embedding model whose provider the outbound policy lets queries go
        to, else ``bm25`` (read on every call,
        ``groundkit.auto_search_settings(content_types)``); ``bm25`` ranks by BM25;
        ``dense`` embeds the query with the active embedding model and ranks the chunks embedded
        by it by similarity (``exact``: an exact scan, never the HNSW index); ``hybrid`` fuses
        both legs in SQL, with ``fusion``, ``rrf_k``, ``bm25_weight``, ``dense_weight``,
        ``depth`` and ``match_gate`` as ``groundkit.search_hybrid`` takes them (``None``: its
        default). Dense and hybrid raise :class:`~groundkit.errors.PgvectorMissing` without
        pgvector and :class:`~groundkit.errors.UnknownModel` without an active model. Every mode
        checks the reader's permission inside the query."""
        knobs = {"fusion": fusion, "rrf_k": rrf_k, "bm25_weight": bm25_weight, "dense_weight": dense_weight,
                 "depth": depth, "match_gate": match_gate}
        self.last_sample_id = self.last_query_notice = None
        with query_notices(self.conn) as notices:
            found, self.last_sample_id = self._run(ops.search(
                reader_sub, query, k, content_types, space_ids, snippet_start, snippet_end, mode=mode, exact=exact,
                knobs=knobs, embedder_of=self._embedder, flow=self.flow))
        hits, self.last_query_notice = ops.with_query_notice(found, notices)
        return hits

    def _embedder(self, model: EmbeddingModel) -> QueryEmbedder:
        """The query embedder of ``model``, made once per model for this object's life."""
        from groundkit.embedders import query_embedder

        key = model.model_dump_json()
        embedder = self._embedders.get(key)
        if embedder is None:
            embedder = self._embedders[key] = query_embedder(model)
        return embedder

    def _record_sample(self, reader_sub: str, query: str, mode: str, k: int,
                       hits: Sequence[SearchHit]) -> UUID | None:
        """Record a drawn search (:func:`groundkit.ops.record_sample`)."""
        return self._run(ops.record_sample(reader_sub, query, mode, k, hits))

    def record_sample_engagement(self, sample_id: UUID | str, object_id: str, kind: str,
                                 value: float | None = None) -> None:
        """Record an engagement with a hit of a sampled search (:attr:`last_sample_id`): a
        ``click`` (no value) or a ``dwell_ms`` (milliseconds). An object that is not among that
        sample's hits, an unknown sample or kind, or a value that does not fit the kind raise
        :class:`InvalidArgument` (GK005) and record nothing."""
        self._run(ops.record_sample_engagement(sample_id, object_id, kind, value))

    def set_sample_limit(self, per_reader: int, per: timedelta) -> None:
        """Record at most ``per_reader`` samples per reader in each window of length ``per`` (1
        second to 31 days; default 100 an hour); searches past it are not sampled. The schema
        owner's call."""
        self._run(ops.set_sample_limit(per_reader, per))

    def set_sample_rate(self, rate: float) -> float:
        """Record this fraction of searches (``config.sample_rate``, 0 to 1; 0, the default,
        records none). The schema owner's call."""
        return self._run(ops.set_sample_rate(rate))

    def stored_objects(self, object_ids: Sequence[str]) -> dict[str, StoredObject]:
        """The current row of each of ``object_ids`` that exists, by id (reads
        ``groundkit.objects``: the schema's owner, or a role granted select on it)."""
        return self._run(ops.stored_objects(object_ids))

    def sourced_objects(self, space_id: str, base: str) -> dict[str, StoredObject]:
        """The live objects of ``space_id`` that ``groundkit ingest`` loaded from files under the
        directory ``base`` (``metadata.source.base``), by id."""
        return self._run(ops.sourced_objects(space_id, base))

    def chunk_count(self, object_ids: Sequence[str]) -> int:
        """How many chunks the current versions of ``object_ids`` have."""
        return self._run(ops.chunk_count(object_ids))

    def fetch_citation(self, reader_sub: str, object_id: str, version: int, chunk_seq: int) -> Citation | None:
        """The chunk a hit cited, with its context, if ``reader_sub`` may see it right now; else
        ``None``, exactly as for an object, version or chunk that does not exist (only an
        object's current version has chunks)."""
        return self._run(ops.fetch_citation(reader_sub, object_id, version, chunk_seq))

    def home(
        self,
        reader_sub: str,
        mode: HomeMode = "latest",
        k: int = 20,
        space_ids: Sequence[str] | None = None,
        content_types: Sequence[str] | None = None,
    ) -> list[HomeItem]:
        """``reader_sub``'s home feed (``groundkit.home``): the newest objects they may see right
        now (``latest``) or the most engaged with over the last ``config.home_top_days`` days,
        ties by recency (``top``). One row per object, its current version."""
        return self._run(ops.home(reader_sub, mode, k, space_ids, content_types))

    def record_engagement(
        self,
        object_id: str,
        member_sub: str,
        kind: EngagementKind,
        at: datetime | None = None,
        value: int | None = None,
    ) -> None:
        """Count one engagement event (``groundkit.record_engagement``): ``view``, ``click``,
        ``reaction``, or ``dwell_ms`` with ``value`` milliseconds. An object ``member_sub`` may not
        see right now raises :class:`~groundkit.errors.UnknownObject`, exactly as a missing one,
        and counts nothing."""
        self._run(ops.record_engagement(object_id, member_sub, kind, at, value))

    # -- the log and the derived state -----------------------------------------------------

    def snapshot_marker(self) -> int:
        return self._run(ops.snapshot_marker())

    def state_checksum(self) -> str:
        return self._run(ops.state_checksum())


    # -- runs (docs/runs.md) ------------------------------------------------------------------

    def run(self, flow: str, reader: str, model: str | None = None, prompt_version: str | None = None,
            run_id: uuid.UUID | str | None = None) -> runs.Run:
        """A run: ``with gk.run(flow="tutor", reader="alice") as run: run.search(...)``. Every
        search it makes is recorded with its hits, pinned, in one transaction (docs/runs.md)."""
        return runs.Run(self, flow=flow, reader=reader, model=model, prompt_version=prompt_version,
                        run_id=run_id)

    def replay(self, run_id: uuid.UUID | str, reader: str | None = None) -> Replay:
        """The chunk texts and citations run ``run_id`` saw, rebuilt from the log at the pinned
        versions, and what became of each object since. ``reader``: the reader you act as (your
        own runs); a groundkit_auditor (or the owner) may replay anyone's."""
        return runs.replay(self, run_id, reader)

    def runs(self, flow: str | None = None, reader: str | None = None, since: datetime | None = None,
             limit: int = 1000) -> list[RunSummary]:
        return runs.list_runs(self, flow=flow, reader=reader, since=since, limit=limit)

    def diff_runs(self, run_a: uuid.UUID | str, run_b: uuid.UUID | str, reader: str | None = None) -> list[RunDiffRow]:
        return runs.diff_runs(self, run_a, run_b, reader)

    def prune_runs(self, before: datetime) -> int:
        return runs.prune_runs(self, before)
