"""The client's operations, written once (:mod:`groundkit.steps`): :class:`groundkit.Groundkit`
and :class:`groundkit.AsyncGroundkit` each run these with their own driver, so every argument
check, every statement and every mapping of rows to models exists in one place.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any
from uuid import UUID

from psycopg import sql
from psycopg.types.json import Jsonb

from groundkit import telemetry
from groundkit.errors import GroundkitError, InvalidArgument, SampleRefused, UnknownContentType
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
    SearchHit,
    SearchMode,
    Segment,
    Space,
    StoredObject,
    WriteResult,
    WriteStatus,
)
from groundkit.session import no_nul, validated
from groundkit.steps import Op, Query, rows, scalar

if TYPE_CHECKING:
    from groundkit.embedders import EmbeddingModel, QueryEmbedder

#: how a client finds the embedder of a model (its own cache: a client embeds with one per model)
EmbedderOf = Callable[["EmbeddingModel"], "QueryEmbedder"]

__all__ = [
    "check_filters", "check_k", "check_markers", "check_query", "chunk_count", "fetch_citation", "grant_space",
    "home", "languages", "put", "put_member", "put_object", "put_objects", "put_space", "record_engagement",
    "record_sample_engagement", "revoke_space", "search", "set_sample_limit", "set_sample_rate",
    "set_space_language", "snapshot_marker",
    "sourced_objects", "state_checksum", "stored_objects", "versioned", "with_query_notice",
]


# -- argument checks (also the runs') ----------------------------------------------------------

def check_k(k: object) -> None:
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
        raise InvalidArgument(f"k must be between 1 and {MAX_K} (got {k!r})")


def check_query(query: object) -> None:
    if not isinstance(query, str):
        raise InvalidArgument("query must be a string")
    if len(query) > MAX_QUERY_CHARS:
        raise InvalidArgument(f"query is {len(query)} characters long; the limit is {MAX_QUERY_CHARS}")


def check_filters(content_types: Sequence[str] | None, space_ids: Sequence[str] | None) -> None:
    for name, seq in (("content_types", content_types), ("space_ids", space_ids)):
        if isinstance(seq, str):
            raise InvalidArgument(f"{name} must be a list of strings, not a string")
    if content_types is not None:
        unknown = [c for c in content_types if c not in CONTENT_TYPES]
        if unknown:
            raise UnknownContentType(f"unknown content_type {unknown[0]!r} in content_types")


def check_markers(snippet_start: object, snippet_end: object) -> None:
    """The snippet markers' checks, as groundkit._snippet_check makes them (GK005)."""
    for name, marker in (("snippet_start", snippet_start), ("snippet_end", snippet_end)):
        if not isinstance(marker, str):
            raise InvalidArgument(f"{name} must be a string")
        if len(marker) > MAX_MARKER_CHARS:
            raise InvalidArgument(f"{name} is at most {MAX_MARKER_CHARS} characters")
        if any(ch in marker for ch in "\x01\x02\x03\x04"):
            raise InvalidArgument(f"{name} must not contain the control characters 1-4")


def search_params(reader_sub: str, query: str, k: int, content_types: Sequence[str] | None,
                  space_ids: Sequence[str] | None, snippet_start: str, snippet_end: str) -> dict[str, Any]:
    """A search's arguments checked (a client's and a run's search alike), as statement parameters."""
    check_k(k)
    check_query(query)
    check_filters(content_types, space_ids)
    check_markers(snippet_start, snippet_end)
    no_nul(reader_sub=reader_sub, query=query, content_types=list(content_types or ()),
           space_ids=list(space_ids or ()), snippet_start=snippet_start, snippet_end=snippet_end)
    return {"reader_sub": reader_sub, "query": query, "k": k,
            "content_types": None if content_types is None else list(content_types),
            "space_ids": None if space_ids is None else list(space_ids),
            "snippet_start": snippet_start, "snippet_end": snippet_end}


# -- live authority ----------------------------------------------------------------------------

def put_member(member_sub: str, tier: str, status: str) -> Op[None]:
    m = validated(Member, {"member_sub": member_sub, "tier": tier, "status": status})
    no_nul(member_sub=m.member_sub, tier=m.tier)
    yield Query("select groundkit.put_member(member_sub => %(member_sub)s, tier => %(tier)s,"
                " status => %(status)s)", m.model_dump())


def put_space(space_id: str, min_tier: str, private: bool) -> Op[None]:
    s = validated(Space, {"space_id": space_id, "min_tier": min_tier, "private": private})
    no_nul(space_id=s.space_id, min_tier=s.min_tier)
    yield Query("select groundkit.put_space(space_id => %(space_id)s, min_tier => %(min_tier)s,"
                " private => %(private)s)", s.model_dump())


def grant_space(space_id: str, member_sub: str) -> Op[None]:
    no_nul(space_id=space_id, member_sub=member_sub)
    yield Query("select groundkit.grant_space(space_id => %(space_id)s, member_sub => %(member_sub)s)",
                {"space_id": space_id, "member_sub": member_sub})


def revoke_space(space_id: str, member_sub: str) -> Op[None]:
    no_nul(space_id=space_id, member_sub=member_sub)
    yield Query("select groundkit.revoke_space(space_id => %(space_id)s, member_sub => %(member_sub)s)",
                {"space_id": space_id, "member_sub": member_sub})


def set_space_language(space_id: str, language: str | None) -> Op[int]:
    """:meth:`groundkit.Groundkit.set_space_language`: how many objects were analyzed again."""
    if language is not None and not isinstance(language, str):
        raise InvalidArgument("language must be a string or None")
    no_nul(space_id=space_id, language=language or "")
    n = yield from scalar("select groundkit.set_space_language(space_id => %(space_id)s, language => %(language)s)"
                          " as n", {"space_id": space_id, "language": language})
    return int(n)


def languages() -> Op[tuple[str, ...]]:
    """The languages a space or an object may name: PostgreSQL's Snowball configurations."""
    found = yield from rows("select language from groundkit.languages()")
    return tuple(r["language"] for r in found)


# -- the content log ---------------------------------------------------------------------------

_PUT_OBJECT = ("select groundkit.put_object(object_id => %(object_id)s, version => %(version)s,"
               " content_type => %(content_type)s, space_id => %(space_id)s,"
               " tier_visibility => %(tier_visibility)s, title => %(title)s, body => %(body)s,"
               " owner_sub => %(owner_sub)s, owner_only => %(owner_only)s,"
               " segments => %(segments)s, metadata => %(metadata)s)")


def _no_nul_object(obj: ContentObject) -> None:
    no_nul(object_id=obj.object_id, space_id=obj.space_id, tier_visibility=obj.tier_visibility,
           title=obj.title, body=obj.body, owner_sub=obj.owner_sub, segments=[s.text for s in obj.segments or ()])


def put(obj: ContentObject) -> Op[WriteResult]:
    """Write one version of an object."""
    _no_nul_object(obj)
    params = obj.model_dump(exclude={"segments", "metadata"})
    params["segments"] = Jsonb([s.model_dump() for s in obj.segments]) if obj.segments is not None else None
    try:
        json.dumps(obj.metadata)
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(f"metadata must be JSON: {exc}") from None
    params["metadata"] = Jsonb(obj.metadata)
    with telemetry.span("ingest.put_object", content_type=obj.content_type) as current:
        status = str((yield from scalar(_PUT_OBJECT, params)))
        telemetry.set_attributes(current, status=status)
    return WriteResult(object_id=obj.object_id, version=obj.version, status=WriteStatus(status))


def put_object(object_id: str, version: int, content_type: str, space_id: str, tier_visibility: str, title: str,
               body: str, owner_sub: str | None = None, owner_only: bool = False,
               segments: Sequence[Segment | dict[str, Any]] | None = None,
               metadata: dict[str, Any] | None = None) -> Op[WriteResult]:
    obj = validated(ContentObject, {
        "object_id": object_id, "version": version, "content_type": content_type, "space_id": space_id,
        "tier_visibility": tier_visibility, "title": title, "body": body, "owner_sub": owner_sub,
        "owner_only": owner_only, "segments": None if segments is None else tuple(segments),
        "metadata": {} if metadata is None else metadata})
    return (yield from put(obj))


def put_objects(objects: Sequence[ContentObject]) -> Op[list[WriteResult]]:
    payload = []
    for obj in objects:
        if not isinstance(obj, ContentObject):
            raise InvalidArgument("put_objects takes ContentObject instances")
        _no_nul_object(obj)
        payload.append(obj.model_dump(mode="json"))
    if not payload:
        return []
    with telemetry.span("ingest.put_objects", objects=len(payload)):
        found = yield from rows("select * from groundkit.put_objects(objects => %(objects)s)",
                                {"objects": Jsonb(payload)})
    return [WriteResult(object_id=r["object_id"], version=r["version"], status=WriteStatus(r["status"]))
            for r in found]


def versioned(fn: str, object_id: str, version: int, **extra: str) -> Op[WriteResult]:
    """``groundkit.<fn>(object_id, version, **extra)``: retier, delete, redact."""
    no_nul(object_id=object_id, **extra)
    if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= 2**63 - 1:
        raise InvalidArgument(f"version must be a positive integer (got {version!r})")
    query = sql.SQL("select {}.{}({})").format(
        sql.Identifier("groundkit"), sql.Identifier(fn),
        sql.SQL(", ").join(sql.SQL("{} => {}").format(sql.Identifier(name), sql.Placeholder(name))
                           for name in ("object_id", "version", *extra)))
    status = yield from scalar(query, {"object_id": object_id, "version": version, **extra})
    return WriteResult(object_id=object_id, version=version, status=WriteStatus(status))


_STORED = "select object_id, version, state, space_id, metadata -> 'source' as source from groundkit.objects"


def stored_objects(object_ids: Sequence[str]) -> Op[dict[str, StoredObject]]:
    found = yield from rows(_STORED + " where object_id = any(%(ids)s::text[])", {"ids": list(object_ids)})
    return {r["object_id"]: StoredObject.model_validate(r) for r in found}


def sourced_objects(space_id: str, base: str) -> Op[dict[str, StoredObject]]:
    no_nul(space_id=space_id, base=base)
    found = yield from rows(_STORED + " where space_id = %(space_id)s and state = 'live'"
                            " and metadata -> 'source' ->> 'base' = %(base)s", {"space_id": space_id, "base": base})
    return {r["object_id"]: StoredObject.model_validate(r) for r in found}


def chunk_count(object_ids: Sequence[str]) -> Op[int]:
    return int((yield from scalar("select count(*) from groundkit.chunks where object_id = any(%(ids)s::text[])",
                                  {"ids": list(object_ids)})))


# -- reading -----------------------------------------------------------------------------------

_FILTERS = "content_types => %(content_types)s::text[], space_ids => %(space_ids)s::text[]"
_BM25 = sql.SQL("groundkit.search(reader_sub => %(reader_sub)s, query => %(query)s, k => %(k)s, " + _FILTERS
                + ", snippet_start => %(snippet_start)s, snippet_end => %(snippet_end)s)")
# (the embedding goes as text of unknown type: the function's signature makes it a vector, in
# whichever schema pgvector lives)
_DENSE = sql.SQL("groundkit.search_dense(reader_sub => %(reader_sub)s, query_embedding => %(query_embedding)s,"
                 " k => %(k)s, " + _FILTERS + ", exact => %(exact)s, query => %(query)s)")


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


def embedding_text(query: str) -> Op[str]:
    """The text a dense leg embeds of a query: its words and phrases, without quotes, ``OR`` and
    its exclusions (which the leg applies as a filter, not as meaning). A query without any of
    those characters is its own (no round trip)."""
    if '"' not in query and "-" not in query and "OR" not in query:
        return query
    text = yield from scalar("select groundkit.query_text(%(query)s) as t", {"query": query})
    return str(text)


def query_embedding(query: str, embedder_of: EmbedderOf, flow: str | None) -> Op[str]:
    """The query embedded by the active model, as pgvector text. The model is read on every
    call (a cutover counts from the next search); the outbound policy is read from the database
    on every call, and the decision recorded (the call metered) where a flow is set."""
    from groundkit.embedding import active_model_steps, vector_literal

    model = yield from active_model_steps()
    vector = yield from embedder_of(model).query_steps(query, record=flow is not None, flow=flow)
    return vector_literal(vector)


def search(reader_sub: str, query: str, k: int, content_types: Sequence[str] | None,
           space_ids: Sequence[str] | None, snippet_start: str, snippet_end: str, *, mode: SearchMode | None,
           exact: bool, knobs: Mapping[str, Any], embedder_of: EmbedderOf,
           flow: str | None) -> Op[tuple[list[SearchHit], UUID | None]]:
    """The hits and the sample id (None: not sampled) of :meth:`groundkit.Groundkit.search`."""
    mode = DEFAULT_SEARCH_MODE if mode is None else mode
    if mode not in SEARCH_MODES:
        raise InvalidArgument(f"mode must be one of {', '.join(SEARCH_MODES)} (got {mode!r})")
    if not isinstance(exact, bool):
        raise InvalidArgument(f"exact must be a boolean (got {exact!r})")
    params = search_params(reader_sub, query, k, content_types, space_ids, snippet_start, snippet_end)
    if mode != "hybrid" and any(v is not None for v in knobs.values()):
        raise InvalidArgument("fusion, rrf_k, bm25_weight, dense_weight, depth and match_gate go with "
                              "mode='hybrid'")
    if exact and mode != "dense":
        raise InvalidArgument("exact goes with mode='dense'")
    if mode == "auto":
        mode, knobs = yield from auto_mode(params["content_types"])
    with telemetry.span("search", mode=mode, k=k, query=query, reader=reader_sub) as current:
        leg: sql.Composable
        if mode == "bm25":
            leg = _BM25
        else:
            text = yield from embedding_text(query)
            params["query_embedding"] = yield from query_embedding(text, embedder_of, flow)
            params["exact"] = exact
            leg = _DENSE if mode == "dense" else _hybrid_call(knobs, params)
        # the sampler's draw and the reader's tier rank in the search's own statement and
        # snapshot (sql/077_samples.sql says why the search cannot record itself)
        found = yield from rows(
            sql.SQL("select m.sample as _sample, m.tier_rank as _tier_rank, h.*"
                    "  from groundkit.search_sampling(%(reader_sub)s) m"
                    "  left join lateral {} h on true"
                    " order by h.score desc, h.object_id, h.chunk_seq").format(leg),
            params)
        sample, tier_rank = found[0].pop("_sample"), found[0].pop("_tier_rank")
        for row in found[1:]:
            del row["_sample"], row["_tier_rank"]
        hits = [SearchHit.model_validate(r) for r in found if r["object_id"] is not None]
        telemetry.set_attributes(current, hits=len(hits), reader_tier_rank=tier_rank)
        sample_id = (yield from record_sample(reader_sub, query, mode, k, hits)) if sample else None
    telemetry.add_hits(len(hits), mode=mode)
    return hits, sample_id


def auto_mode(content_types: list[str] | None) -> Op[tuple[SearchMode, dict[str, object]]]:
    """What mode ``auto`` runs over ``content_types``, and hybrid's settings
    (``groundkit.auto_search_settings``: the content types' own, docs/dense.md)."""
    row = (yield from rows("select * from groundkit.auto_search_settings(%(ct)s)", {"ct": content_types}))[0]
    mode: SearchMode = "hybrid" if row["mode"] == "hybrid" else "dense" if row["mode"] == "dense" else "bm25"
    knobs: dict[str, object] = {name: row[name] for name in ("fusion", "rrf_k", "bm25_weight", "dense_weight",
                                                             "depth")}
    return mode, knobs


def with_query_notice(hits: list[SearchHit], notices: Sequence[str]) -> tuple[list[SearchHit], str | None]:
    """The hits with what search said about how it read the query (its NOTICE, caught by the
    driver's :func:`groundkit.session.query_notices`) on each, and that notice (or ``None``)."""
    notice = notices[0] if notices else None
    if notice is None:
        return hits, None
    return [h.model_copy(update={"query_notice": notice}) for h in hits], notice


def record_sample(reader_sub: str, query: str, mode: str, k: int, hits: Sequence[SearchHit]) -> Op[UUID | None]:
    """Record a drawn search (``groundkit.record_sample``) in a savepoint of the caller's
    transaction, or its own. Nothing (``None``, and the search still answers) in a read-only
    transaction or on a standby, past the sampler's bound per reader, or when a hit changed
    between the search and this statement (GK027: the server records only chunks the reader
    may see now)."""
    payload = [{"object_id": h.object_id, "object_version": h.object_version, "chunk_seq": h.chunk_seq,
                "score": h.score} for h in hits]
    try:
        found = yield Query("select groundkit.record_sample(%(reader)s, %(query)s, %(mode)s, %(k)s, %(hits)s) as id",
                            {"reader": reader_sub, "query": query, "mode": mode, "k": k, "hits": Jsonb(payload)},
                            savepoint=True)
    except SampleRefused:
        return None
    except GroundkitError as exc:
        if exc.sqlstate == "25006":  # read_only_sql_transaction
            return None
        raise
    row = found[0] if found else None
    return None if row is None or row["id"] is None else UUID(str(row["id"]))


def record_sample_engagement(sample_id: UUID | str, object_id: str, kind: str, value: float | None) -> Op[None]:
    try:
        sid = sample_id if isinstance(sample_id, UUID) else UUID(str(sample_id))
    except ValueError:
        raise InvalidArgument(f"sample_id must be a UUID (got {sample_id!r})") from None
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
        raise InvalidArgument(f"value must be a number (got {value!r})")
    no_nul(object_id=object_id, kind=kind)
    yield Query("select groundkit.record_sample_engagement(%(sid)s, %(object_id)s, %(kind)s, %(value)s)",
                {"sid": sid, "object_id": object_id, "kind": kind, "value": None if value is None else float(value)})


def set_sample_limit(per_reader: int, per: timedelta) -> Op[None]:
    if isinstance(per_reader, bool) or not isinstance(per_reader, int) or per_reader < 1:
        raise InvalidArgument(f"per_reader must be a positive integer (got {per_reader!r})")
    if not isinstance(per, timedelta):
        raise InvalidArgument(f"per must be a timedelta (got {per!r})")
    yield Query("select groundkit.set_sample_limit(%(n)s, %(per)s)", {"n": per_reader, "per": per})


def set_sample_rate(rate: float) -> Op[float]:
    if isinstance(rate, bool) or not isinstance(rate, int | float):
        raise InvalidArgument(f"sample_rate must be a number between 0 and 1 (got {rate!r})")
    return float((yield from scalar("select groundkit.set_sample_rate(%(rate)s)", {"rate": float(rate)})))


def fetch_citation(reader_sub: str, object_id: str, version: int, chunk_seq: int) -> Op[Citation | None]:
    for name, value in (("version", version), ("chunk_seq", chunk_seq)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidArgument(f"{name} must be an integer (got {value!r})")
    if not isinstance(reader_sub, str) or not isinstance(object_id, str):
        raise InvalidArgument("reader_sub and object_id must be strings")
    no_nul(reader_sub=reader_sub, object_id=object_id)
    if not (0 <= chunk_seq < 2**31 and 0 <= version < 2**63):
        return None  # no such chunk, as the database would say
    found = yield from rows(
        "select * from groundkit.fetch_citation(%(reader_sub)s, %(object_id)s, %(version)s, %(chunk_seq)s)",
        {"reader_sub": reader_sub, "object_id": object_id, "version": version, "chunk_seq": chunk_seq})
    if not found:
        return None
    return Citation.model_validate({**found[0], "object_id": object_id, "object_version": version,
                                    "chunk_seq": chunk_seq})


def home(reader_sub: str, mode: HomeMode, k: int, space_ids: Sequence[str] | None,
         content_types: Sequence[str] | None) -> Op[list[HomeItem]]:
    if mode not in ("latest", "top"):
        raise InvalidArgument(f"unknown home mode {mode!r}; expected latest or top")
    check_k(k)
    check_filters(content_types, space_ids)
    no_nul(reader_sub=reader_sub, content_types=list(content_types or ()), space_ids=list(space_ids or ()))
    found = yield from rows(
        "select * from groundkit.home(reader_sub => %(reader_sub)s, mode => %(mode)s, k => %(k)s,"
        " space_ids => %(space_ids)s::text[], content_types => %(content_types)s::text[])",
        {"reader_sub": reader_sub, "mode": mode, "k": k,
         "content_types": None if content_types is None else list(content_types),
         "space_ids": None if space_ids is None else list(space_ids)})
    return [HomeItem.model_validate(r) for r in found]


def record_engagement(object_id: str, member_sub: str, kind: EngagementKind, at: datetime | None,
                      value: int | None) -> Op[None]:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise InvalidArgument(f"value must be an integer (got {value!r})")
    if at is not None and (not isinstance(at, datetime) or at.tzinfo is None):
        raise InvalidArgument("at must be a timezone-aware datetime")
    no_nul(object_id=object_id, member_sub=member_sub, kind=kind)
    yield Query("select groundkit.record_engagement(object_id => %(object_id)s, member_sub => %(member_sub)s,"
                " kind => %(kind)s, at => coalesce(%(at)s::timestamptz, now()), value => %(value)s::bigint)",
                {"object_id": object_id, "member_sub": member_sub, "kind": kind, "at": at, "value": value})


def snapshot_marker() -> Op[int]:
    return int((yield from scalar("select groundkit.snapshot_marker()")))


def state_checksum() -> Op[str]:
    return str((yield from scalar("select groundkit.state_checksum()")))
