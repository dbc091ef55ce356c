"""The Python API: typed calls over groundkit's SQL functions.

Every call goes to the database; nothing about members, spaces or objects is cached in the
process, so what another connection commits counts from the next call.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any
from uuid import UUID

from psycopg import sql
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from groundkit import embedding, runs, telemetry
from groundkit.admin import Admin
from groundkit.config import Settings
from groundkit.dsn import connect as dsn_connect
from groundkit.errors import GroundkitError, InvalidArgument, SampleRefused, UnknownContentType
from groundkit.maintenance import REINDEX_DRIFT, REINDEX_STEP_POSTINGS
from groundkit.models import (
    CONTENT_TYPES,
    DEFAULT_SEARCH_MODE,
    MAX_K,
    MAX_MARKER_CHARS,
    MAX_QUERY_CHARS,
    SEARCH_MODES,
    Citation,
    ContentObject,
    EngagementKind,
    HomeItem,
    HomeMode,
    Member,
    Replay,
    RunDiffRow,
    RunSummary,
    SearchHit,
    SearchMode,
    Segment,
    Space,
    StoredObject,
    WriteResult,
    WriteStatus,
)
from groundkit.session import Connection
from groundkit.session import no_nul as _no_nul
from groundkit.session import validated as _validated

if TYPE_CHECKING:
    from groundkit.embedders import Embedder

__all__ = ["REINDEX_DRIFT", "REINDEX_STEP_POSTINGS", "Connection", "Groundkit", "connect", "resolve_dsn"]


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


def _check_markers(snippet_start: object, snippet_end: object) -> None:
    """The snippet markers' checks, as groundkit._snippet_check makes them (GK005)."""
    for name, marker in (("snippet_start", snippet_start), ("snippet_end", snippet_end)):
        if not isinstance(marker, str):
            raise InvalidArgument(f"{name} must be a string")
        if len(marker) > MAX_MARKER_CHARS:
            raise InvalidArgument(f"{name} is at most {MAX_MARKER_CHARS} characters")
        if any(ch in marker for ch in "\x01\x02\x03\x04"):
            raise InvalidArgument(f"{name} must not contain the control characters 1-4")


class Groundkit(Admin):
    """groundkit over one psycopg connection: members, spaces, content and search here, the
    index's administration and maintenance from :class:`~groundkit.admin.Admin`.

    With an autocommit connection (what :meth:`connect` opens) every call is its own
    transaction. Pass a connection in a transaction to make calls part of your own.
    """

    #: the sample id of the last :meth:`search` if the sampler recorded it, else ``None``
    #: (``groundkit.config.sample_rate``; docs/telemetry.md)
    last_sample_id: UUID | None = None

    def __init__(self, conn: Connection, *, flow: str | None = None) -> None:
        super().__init__(conn)
        if flow is not None and (not isinstance(flow, str) or not flow):
            raise InvalidArgument("flow must be a non-empty string")
        #: the flow query embeddings are metered to (docs/costs.md); None: not metered
        self.flow = flow
        self._embedders: dict[str, Embedder] = {}  # by model (its JSON), for this object's life

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
        m = _validated(Member, {"member_sub": member_sub, "tier": tier, "status": status})
        _no_nul(member_sub=m.member_sub, tier=m.tier)
        self._fetch(
            "select groundkit.put_member(member_sub => %(member_sub)s, tier => %(tier)s, status => %(status)s)",
            m.model_dump(),
        )

    def put_space(self, space_id: str, min_tier: str = "T0", private: bool = False) -> None:
        s = _validated(Space, {"space_id": space_id, "min_tier": min_tier, "private": private})
        _no_nul(space_id=s.space_id, min_tier=s.min_tier)
        self._fetch(
            "select groundkit.put_space(space_id => %(space_id)s, min_tier => %(min_tier)s,"
            " private => %(private)s)",
            s.model_dump(),
        )

    def grant_space(self, space_id: str, member_sub: str) -> None:
        _no_nul(space_id=space_id, member_sub=member_sub)
        self._fetch(
            "select groundkit.grant_space(space_id => %(space_id)s, member_sub => %(member_sub)s)",
            {"space_id": space_id, "member_sub": member_sub},
        )

    def revoke_space(self, space_id: str, member_sub: str) -> None:
        _no_nul(space_id=space_id, member_sub=member_sub)
        self._fetch(
            "select groundkit.revoke_space(space_id => %(space_id)s, member_sub => %(member_sub)s)",
            {"space_id": space_id, "member_sub": member_sub},
        )

    # -- the content log -----------------------------------------------------------------

    def put(self, obj: ContentObject) -> WriteResult:
        """Write one version of an object (see :meth:`put_object`)."""
        _no_nul(
            object_id=obj.object_id, space_id=obj.space_id, tier_visibility=obj.tier_visibility,
            title=obj.title, body=obj.body, owner_sub=obj.owner_sub,
            segments=[s.text for s in obj.segments or ()],
        )
        params = obj.model_dump(exclude={"segments", "metadata"})
        params["segments"] = (
            Jsonb([s.model_dump() for s in obj.segments]) if obj.segments is not None else None
        )
        try:
            json.dumps(obj.metadata)
        except (TypeError, ValueError) as exc:
            raise InvalidArgument(f"metadata must be JSON: {exc}") from None
        params["metadata"] = Jsonb(obj.metadata)
        with telemetry.span("ingest.put_object", content_type=obj.content_type) as current:
            status = self._put_one(params)
            telemetry.set_attributes(current, status=status)
        return WriteResult(object_id=obj.object_id, version=obj.version, status=WriteStatus(status))

    def _put_one(self, params: dict[str, Any]) -> str:
        return str(self._scalar(
            "select groundkit.put_object(object_id => %(object_id)s, version => %(version)s,"
            " content_type => %(content_type)s, space_id => %(space_id)s,"
            " tier_visibility => %(tier_visibility)s, title => %(title)s, body => %(body)s,"
            " owner_sub => %(owner_sub)s, owner_only => %(owner_only)s,"
            " segments => %(segments)s, metadata => %(metadata)s)",
            params,
        ))

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
        obj = _validated(
            ContentObject,
            {
                "object_id": object_id, "version": version, "content_type": content_type,
                "space_id": space_id, "tier_visibility": tier_visibility, "title": title,
                "body": body, "owner_sub": owner_sub, "owner_only": owner_only,
                "segments": None if segments is None else tuple(segments),
                "metadata": {} if metadata is None else metadata,
            }
        )
        return self.put(obj)

    def put_objects(self, objects: Sequence[ContentObject]) -> list[WriteResult]:
        """Write many objects in one statement (``groundkit.put_objects``): the same checks,
        statuses and invariants as :meth:`put`, set-based. Fails whole on the first bad element.
        Each object takes a row lock until the transaction ends (no slot of the server's shared
        lock table, so the number of objects per transaction is not bounded by it)."""
        payload = []
        for obj in objects:
            if not isinstance(obj, ContentObject):
                raise InvalidArgument("put_objects takes ContentObject instances")
            _no_nul(
                object_id=obj.object_id, space_id=obj.space_id, tier_visibility=obj.tier_visibility,
                title=obj.title, body=obj.body, owner_sub=obj.owner_sub,
                segments=[s.text for s in obj.segments or ()],
            )
            payload.append(obj.model_dump(mode="json"))
        if not payload:
            return []
        with telemetry.span("ingest.put_objects", objects=len(payload)):
            rows = self._fetch("select * from groundkit.put_objects(objects => %(objects)s)",
                               {"objects": Jsonb(payload)})
        return [WriteResult(object_id=r["object_id"], version=r["version"], status=WriteStatus(r["status"]))
                for r in rows]

    def _versioned(self, fn: str, object_id: str, version: int, **extra: str) -> WriteResult:
        _no_nul(object_id=object_id, **extra)
        if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= 2**63 - 1:
            raise InvalidArgument(f"version must be a positive integer (got {version!r})")
        query = sql.SQL("select {}.{}({})").format(
            sql.Identifier("groundkit"),
            sql.Identifier(fn),
            sql.SQL(", ").join(
                sql.SQL("{} => {}").format(sql.Identifier(name), sql.Placeholder(name))
                for name in ("object_id", "version", *extra)
            ),
        )
        status = self._scalar(query, {"object_id": object_id, "version": version, **extra})
        return WriteResult(object_id=object_id, version=version, status=WriteStatus(status))

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
        mode = DEFAULT_SEARCH_MODE if mode is None else mode
        if mode not in SEARCH_MODES:
            raise InvalidArgument(f"mode must be one of {', '.join(SEARCH_MODES)} (got {mode!r})")
        if not isinstance(exact, bool):
            raise InvalidArgument(f"exact must be a boolean (got {exact!r})")
        _check_k(k)
        if not isinstance(query, str):
            raise InvalidArgument("query must be a string")
        if len(query) > MAX_QUERY_CHARS:
            raise InvalidArgument(f"query is {len(query)} characters long; the limit is {MAX_QUERY_CHARS}")
        _check_filters(content_types, space_ids)
        _check_markers(snippet_start, snippet_end)
        _no_nul(reader_sub=reader_sub, query=query, content_types=list(content_types or ()),
                space_ids=list(space_ids or ()), snippet_start=snippet_start, snippet_end=snippet_end)
        params: dict[str, Any] = {
            "reader_sub": reader_sub, "query": query, "k": k,
            "content_types": None if content_types is None else list(content_types),
            "space_ids": None if space_ids is None else list(space_ids),
            "snippet_start": snippet_start, "snippet_end": snippet_end,
        }
        knobs: dict[str, object] = {"fusion": fusion, "rrf_k": rrf_k, "bm25_weight": bm25_weight,
                                    "dense_weight": dense_weight, "depth": depth, "match_gate": match_gate}
        if mode != "hybrid" and any(v is not None for v in knobs.values()):
            raise InvalidArgument("fusion, rrf_k, bm25_weight, dense_weight, depth and match_gate go with "
                                  "mode='hybrid'")
        if exact and mode != "dense":
            raise InvalidArgument("exact goes with mode='dense'")
        self.last_sample_id = None
        if mode == "auto":
            mode, knobs = self._auto_mode(params["content_types"])
        with telemetry.span("search", mode=mode, k=k, query=query, reader=reader_sub) as current:
            leg: sql.Composable
            if mode == "bm25":
                leg = _BM25
            else:
                params["query_embedding"] = self._query_embedding(query)
                params["exact"] = exact
                leg = _DENSE if mode == "dense" else _hybrid_call(knobs, params)
            # the sampler's draw and the reader's tier rank in the search's own statement and
            # snapshot (sql/077_samples.sql says why the search cannot record itself)
            rows = self._fetch(
                sql.SQL("select m.sample as _sample, m.tier_rank as _tier_rank, h.*"
                        "  from groundkit.search_sampling(%(reader_sub)s) m"
                        "  left join lateral {} h on true"
                        " order by h.score desc, h.object_id, h.chunk_seq").format(leg),
                params,
            )
            sample, tier_rank = rows[0].pop("_sample"), rows[0].pop("_tier_rank")
            for row in rows[1:]:
                del row["_sample"], row["_tier_rank"]
            hits = [SearchHit.model_validate(r) for r in rows if r["object_id"] is not None]
            telemetry.set_attributes(current, hits=len(hits), reader_tier_rank=tier_rank)
            self.last_sample_id = self._record_sample(reader_sub, query, mode, k, hits) if sample else None
        telemetry.add_hits(len(hits), mode=mode)
        return hits

    def _auto_mode(self, content_types: list[str] | None) -> tuple[SearchMode, dict[str, object]]:
        """What mode ``auto`` runs over ``content_types``, and hybrid's settings
        (``groundkit.auto_search_settings``: the content types' own, docs/dense.md)."""
        row = self._fetch("select * from groundkit.auto_search_settings(%(ct)s)", {"ct": content_types})[0]
        mode: SearchMode = "hybrid" if row["mode"] == "hybrid" else "dense" if row["mode"] == "dense" else "bm25"
        knobs = {name: row[name] for name in ("fusion", "rrf_k", "bm25_weight", "dense_weight", "depth")}
        return mode, knobs

    def _query_embedding(self, query: str) -> str:
        """The query embedded by the active model, as pgvector text. The model is read on every
        call (a cutover counts from the next search); its embedder is made once per model."""
        from groundkit.embedders import embedder_for

        model = embedding.active_model(self)
        key = model.model_dump_json()
        embedder = self._embedders.get(key)
        if embedder is None:
            # the outbound policy is read from this database on every call; the decision is
            # recorded (and the call metered) where a flow is set
            embedder = embedder_for(model, meter_to=self if self.flow is not None else None, flow=self.flow,
                                    policy_from=self)
            self._embedders[key] = embedder
        return embedding.vector_literal(embedder.embed_query(query))

    def _record_sample(self, reader_sub: str, query: str, mode: str, k: int,
                       hits: Sequence[SearchHit]) -> UUID | None:
        """Record a drawn search (``groundkit.record_sample``) in a savepoint of the caller's
        transaction, or its own. Nothing (``None``, and the search still answers) in a read-only
        transaction or on a standby, past the sampler's bound per reader, or when a hit changed
        between the search and this statement (GK027: the server records only chunks the reader
        may see now)."""
        payload = [{"object_id": h.object_id, "object_version": h.object_version, "chunk_seq": h.chunk_seq,
                    "score": h.score} for h in hits]
        try:
            with self._errors(), self.conn.transaction(), self.conn.cursor() as cur:
                cur.execute("select groundkit.record_sample(%(reader)s, %(query)s, %(mode)s, %(k)s, %(hits)s) as id",
                            {"reader": reader_sub, "query": query, "mode": mode, "k": k, "hits": Jsonb(payload)})
                row = cur.fetchone()
        except SampleRefused:
            return None
        except GroundkitError as exc:
            if exc.sqlstate == "25006":  # read_only_sql_transaction
                return None
            raise
        return None if row is None or row["id"] is None else UUID(str(row["id"]))

    def record_sample_engagement(self, sample_id: UUID | str, object_id: str, kind: str,
                                 value: float | None = None) -> None:
        """Record an engagement with a hit of a sampled search (:attr:`last_sample_id`): a
        ``click`` (no value) or a ``dwell_ms`` (milliseconds). An object that is not among that
        sample's hits, an unknown sample or kind, or a value that does not fit the kind raise
        :class:`InvalidArgument` (GK005) and record nothing."""
        try:
            sid = sample_id if isinstance(sample_id, UUID) else UUID(str(sample_id))
        except ValueError:
            raise InvalidArgument(f"sample_id must be a UUID (got {sample_id!r})") from None
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise InvalidArgument(f"value must be a number (got {value!r})")
        _no_nul(object_id=object_id, kind=kind)
        self._fetch("select groundkit.record_sample_engagement(%(sid)s, %(object_id)s, %(kind)s, %(value)s)",
                    {"sid": sid, "object_id": object_id, "kind": kind,
                     "value": None if value is None else float(value)})

    def set_sample_limit(self, per_reader: int, per: timedelta) -> None:
        """Record at most ``per_reader`` samples per reader in each window of length ``per`` (1
        second to 31 days; default 100 an hour); searches past it are not sampled. The schema
        owner's call."""
        if isinstance(per_reader, bool) or not isinstance(per_reader, int) or per_reader < 1:
            raise InvalidArgument(f"per_reader must be a positive integer (got {per_reader!r})")
        if not isinstance(per, timedelta):
            raise InvalidArgument(f"per must be a timedelta (got {per!r})")
        self._fetch("select groundkit.set_sample_limit(%(n)s, %(per)s)", {"n": per_reader, "per": per})

    def set_sample_rate(self, rate: float) -> float:
        """Record this fraction of searches (``config.sample_rate``, 0 to 1; 0, the default,
        records none). The schema owner's call."""
        if isinstance(rate, bool) or not isinstance(rate, int | float):
            raise InvalidArgument(f"sample_rate must be a number between 0 and 1 (got {rate!r})")
        return float(self._scalar("select groundkit.set_sample_rate(%(rate)s)", {"rate": float(rate)}))

    def stored_objects(self, object_ids: Sequence[str]) -> dict[str, StoredObject]:
        """The current row of each of ``object_ids`` that exists, by id (reads
        ``groundkit.objects``: the schema's owner, or a role granted select on it)."""
        rows = self._fetch(
            "select object_id, version, state, space_id, metadata -> 'source' as source"
            " from groundkit.objects where object_id = any(%(ids)s::text[])",
            {"ids": list(object_ids)},
        )
        return {r["object_id"]: StoredObject.model_validate(r) for r in rows}

    def sourced_objects(self, space_id: str, base: str) -> dict[str, StoredObject]:
        """The live objects of ``space_id`` that ``groundkit ingest`` loaded from files under the
        directory ``base`` (``metadata.source.base``), by id."""
        _no_nul(space_id=space_id, base=base)
        rows = self._fetch(
            "select object_id, version, state, space_id, metadata -> 'source' as source"
            " from groundkit.objects where space_id = %(space_id)s and state = 'live'"
            " and metadata -> 'source' ->> 'base' = %(base)s",
            {"space_id": space_id, "base": base},
        )
        return {r["object_id"]: StoredObject.model_validate(r) for r in rows}

    def chunk_count(self, object_ids: Sequence[str]) -> int:
        """How many chunks the current versions of ``object_ids`` have."""
        return int(self._scalar("select count(*) from groundkit.chunks where object_id = any(%(ids)s::text[])",
                                {"ids": list(object_ids)}))

    def fetch_citation(self, reader_sub: str, object_id: str, version: int, chunk_seq: int) -> Citation | None:
        """The chunk a hit cited, with its context, if ``reader_sub`` may see it right now; else
        ``None``, exactly as for an object, version or chunk that does not exist (only an
        object's current version has chunks)."""
        for name, value in (("version", version), ("chunk_seq", chunk_seq)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise InvalidArgument(f"{name} must be an integer (got {value!r})")
        if not isinstance(reader_sub, str) or not isinstance(object_id, str):
            raise InvalidArgument("reader_sub and object_id must be strings")
        _no_nul(reader_sub=reader_sub, object_id=object_id)
        if not (0 <= chunk_seq < 2**31 and 0 <= version < 2**63):
            return None  # no such chunk, as the database would say
        rows = self._fetch(
            "select * from groundkit.fetch_citation(%(reader_sub)s, %(object_id)s, %(version)s, %(chunk_seq)s)",
            {"reader_sub": reader_sub, "object_id": object_id, "version": version, "chunk_seq": chunk_seq},
        )
        if not rows:
            return None
        return Citation.model_validate(
            {**rows[0], "object_id": object_id, "object_version": version, "chunk_seq": chunk_seq})

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
        if mode not in ("latest", "top"):
            raise InvalidArgument(f"unknown home mode {mode!r}; expected latest or top")
        _check_k(k)
        _check_filters(content_types, space_ids)
        _no_nul(reader_sub=reader_sub, content_types=list(content_types or ()), space_ids=list(space_ids or ()))
        rows = self._fetch(
            "select * from groundkit.home(reader_sub => %(reader_sub)s, mode => %(mode)s, k => %(k)s,"
            " space_ids => %(space_ids)s::text[], content_types => %(content_types)s::text[])",
            {
                "reader_sub": reader_sub, "mode": mode, "k": k,
                "content_types": None if content_types is None else list(content_types),
                "space_ids": None if space_ids is None else list(space_ids),
            },
        )
        return [HomeItem.model_validate(r) for r in rows]

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
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise InvalidArgument(f"value must be an integer (got {value!r})")
        if at is not None and (not isinstance(at, datetime) or at.tzinfo is None):
            raise InvalidArgument("at must be a timezone-aware datetime")
        _no_nul(object_id=object_id, member_sub=member_sub, kind=kind)
        self._fetch(
            "select groundkit.record_engagement(object_id => %(object_id)s, member_sub => %(member_sub)s,"
            " kind => %(kind)s, at => coalesce(%(at)s::timestamptz, now()), value => %(value)s::bigint)",
            {"object_id": object_id, "member_sub": member_sub, "kind": kind, "at": at, "value": value},
        )

    # -- the log and the derived state -----------------------------------------------------

    def snapshot_marker(self) -> int:
        return int(self._scalar("select groundkit.snapshot_marker()", {}))

    def state_checksum(self) -> str:
        return str(self._scalar("select groundkit.state_checksum()", {}))


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

_FILTERS = ("content_types => %(content_types)s::text[], space_ids => %(space_ids)s::text[]")
_BM25 = sql.SQL("groundkit.search(reader_sub => %(reader_sub)s, query => %(query)s, k => %(k)s, " + _FILTERS
                + ", snippet_start => %(snippet_start)s, snippet_end => %(snippet_end)s)")
# (the embedding goes as text of unknown type: the function's signature makes it a vector, in
# whichever schema pgvector lives)
_DENSE = sql.SQL("groundkit.search_dense(reader_sub => %(reader_sub)s, query_embedding => %(query_embedding)s,"
                 " k => %(k)s, " + _FILTERS + ", exact => %(exact)s)")


def _hybrid_call(knobs: Mapping[str, object], params: dict[str, Any]) -> sql.Composable:
    """``groundkit.search_hybrid(...)`` with the fusion knobs that were given; the others keep
    the SQL function's defaults (one place for them)."""
    given = {name: value for name, value in knobs.items() if value is not None}
    params.update(given)
    extra = [sql.SQL("{} => {}").format(sql.Identifier(name), sql.Placeholder(name)) for name in given]
    return sql.SQL("groundkit.search_hybrid(reader_sub => %(reader_sub)s, query => %(query)s,"
                   " query_embedding => %(query_embedding)s, k => %(k)s, " + _FILTERS
                   + ", snippet_start => %(snippet_start)s, snippet_end => %(snippet_end)s{})"
                   ).format(sql.SQL("").join(sql.SQL(", ") + e for e in extra))


def _check_k(k: object) -> None:
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
        raise InvalidArgument(f"k must be between 1 and {MAX_K} (got {k!r})")


def _check_filters(content_types: Sequence[str] | None, space_ids: Sequence[str] | None) -> None:
    for name, seq in (("content_types", content_types), ("space_ids", space_ids)):
        if isinstance(seq, str):
            raise InvalidArgument(f"{name} must be a list of strings, not a string")
    if content_types is not None:
        unknown = [c for c in content_types if c not in CONTENT_TYPES]
        if unknown:
            raise UnknownContentType(f"unknown content_type {unknown[0]!r} in content_types")
