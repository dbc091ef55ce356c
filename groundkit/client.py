"""The Python API: typed calls over groundkit's SQL functions.

Every call goes to the database; nothing about members, spaces or objects is cached in the
process, so what another connection commits counts from the next call.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import psycopg
from psycopg import sql
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from pydantic import BaseModel, ValidationError

from groundkit.config import Settings
from groundkit.errors import (
    DatabaseUnavailable,
    GroundkitError,
    InvalidArgument,
    UnknownContentType,
    from_psycopg,
    scrub,
)
from groundkit.models import (
    CONTENT_TYPES,
    MAX_K,
    MAX_QUERY_CHARS,
    ContentObject,
    IndexStatus,
    Member,
    SearchHit,
    Segment,
    Space,
    WriteResult,
    WriteStatus,
)

Connection = psycopg.Connection[dict[str, Any]]

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
    ``__cause__`` or ``__context__``."""
    target = resolve_dsn(dsn)
    try:
        conn: Connection = psycopg.connect(target, autocommit=autocommit, row_factory=dict_row)
    except psycopg.Error as exc:
        message = scrub(str(exc).strip())
    else:
        return conn
    # Raised outside the handler: psycopg's error keeps the failed connection, password
    # included, in ``exc.pgconn``, and ``from None`` would still leave it in ``__context__``.
    raise DatabaseUnavailable(f"cannot connect to PostgreSQL: {message}")


_M = TypeVar("_M", bound=BaseModel)

# analyze_postings() recomputes the impacts once impact_drift() reaches this: at 1M chunks, with
# search's bound from the stored impact, a drift of 2 cost the broad reader 1.21x by mean and one
# of 1.25 (either way) 1.07x, while the rewrite takes 7-12 minutes of work (in steps)
# (docs/bm25.md, "The impact reference").
REINDEX_DRIFT = 1.5
# Postings per step of reindex_impacts() in steps: at 1M chunks a writer to the postings waited
# 1.3-2.0 s at the p99 (about one step) in two runs, against the 8 min 48 s of the rewrite in one
# transaction (docs/bm25.md, "Recomputing the impacts in steps").
REINDEX_STEP_POSTINGS = 100_000
# 'groundkit.<function>: <done> of <total> <things>', each admin call's own (a rebuild's sketching
# reports its lists too, and those are not the rebuild's progress)
_PROGRESS = re.compile(
    r"groundkit\.(rebuild|set_tier_rank|analyze_postings): (\d+) of (\d+) (?:objects|spaces|lists|terms)")


def _validated(model: type[_M], data: dict[str, Any]) -> _M:
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


def _no_nul(**values: object) -> None:
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


class Groundkit:
    """groundkit over one psycopg connection.

    With an autocommit connection (what :meth:`connect` opens) every call is its own
    transaction. Pass a connection in a transaction to make calls part of your own.
    """

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    @classmethod
    def connect(cls, dsn: str | None = None) -> Groundkit:
        return cls(connect(dsn))

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Groundkit:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing ------------------------------------------------------------------------

    @contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except GroundkitError:
            raise
        except psycopg.Error as exc:
            raise from_psycopg(exc) from exc

    def _fetch(self, query: str | sql.Composable, params: dict[str, Any]) -> list[dict[str, Any]]:
        with self._errors(), self.conn.cursor() as cur:
            cur.execute(query, params)  # type: ignore[arg-type]
            return cur.fetchall() if cur.description else []

    def _scalar(self, query: str | sql.Composable, params: dict[str, Any]) -> Any:
        rows = self._fetch(query, params)
        return next(iter(rows[0].values()))

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
        status = self._scalar(
            "select groundkit.put_object(object_id => %(object_id)s, version => %(version)s,"
            " content_type => %(content_type)s, space_id => %(space_id)s,"
            " tier_visibility => %(tier_visibility)s, title => %(title)s, body => %(body)s,"
            " owner_sub => %(owner_sub)s, owner_only => %(owner_only)s,"
            " segments => %(segments)s, metadata => %(metadata)s)",
            params,
        )
        return WriteResult(object_id=obj.object_id, version=obj.version, status=WriteStatus(status))

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
        Each object takes one advisory lock until the transaction ends: on a default server one
        transaction can write some thousands of objects, not tens of thousands (docs/sql-api.md)."""
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
        rows = self._fetch("select * from groundkit.put_objects(objects => %(objects)s)", {"objects": Jsonb(payload)})
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
    ) -> list[SearchHit]:
        """The top ``k`` chunks ``reader_sub`` may see right now, ranked by BM25."""
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
            raise InvalidArgument(f"k must be between 1 and {MAX_K} (got {k!r})")
        if not isinstance(query, str):
            raise InvalidArgument("query must be a string")
        if len(query) > MAX_QUERY_CHARS:
            raise InvalidArgument(f"query is {len(query)} characters long; the limit is {MAX_QUERY_CHARS}")
        for name, seq in (("content_types", content_types), ("space_ids", space_ids)):
            if isinstance(seq, str):
                raise InvalidArgument(f"{name} must be a list of strings, not a string")
        if content_types is not None:
            unknown = [c for c in content_types if c not in CONTENT_TYPES]
            if unknown:
                raise UnknownContentType(f"unknown content_type {unknown[0]!r} in content_types")
        _no_nul(reader_sub=reader_sub, query=query, content_types=list(content_types or ()),
                space_ids=list(space_ids or ()))
        rows = self._fetch(
            "select * from groundkit.search(reader_sub => %(reader_sub)s, query => %(query)s,"
            " k => %(k)s, content_types => %(content_types)s::text[], space_ids => %(space_ids)s::text[])",
            {
                "reader_sub": reader_sub, "query": query, "k": k,
                "content_types": None if content_types is None else list(content_types),
                "space_ids": None if space_ids is None else list(space_ids),
            },
        )
        return [SearchHit.model_validate(r) for r in rows]

    # -- the log and the derived state -----------------------------------------------------

    def snapshot_marker(self) -> int:
        return int(self._scalar("select groundkit.snapshot_marker()", {}))

    def state_checksum(self) -> str:
        return str(self._scalar("select groundkit.state_checksum()", {}))

    def rebuild(self, progress: Callable[[int, int], None] | None = None) -> int:
        """Recompute every derived view from the log in one statement (readers and writers wait
        for it); returns the number of objects. ``progress(done, total)`` is called after each
        batch of a thousand objects, from the server's DEBUG messages, while the statement runs."""
        return self._with_progress("rebuild", "select groundkit.rebuild()", {}, progress)

    def analyze_postings(self, min_postings: int | None = None,
                         progress: Callable[[int, int], None] | None = None,
                         reindex_at: float | None = REINDEX_DRIFT) -> int:
        """Sketch every postings list of shared content at least ``min_postings`` long (default:
        ``groundkit.config.sketch_min_postings``, 4,096), replacing the sketches, so that search
        plans its threshold rounds without counting long ranges, then make the term bits of those
        lists' terms (docs/bm25.md, "Term bits"), so that search looks up only the candidates that
        hold a common term; returns the number of lists sketched. It first runs
        :meth:`reindex_impacts` if :meth:`impact_drift` has reached ``reindex_at`` or a
        recompute was left unfinished (``None``: never; 0 or less: always), so that the stored
        impacts fit the chunks' average length again; then it merges the pending part
        (:meth:`merge_pending`; its own transaction on an autocommit connection), so that the
        sketches see every list whole. Like ANALYZE: run after large loads; searches and
        writers go on, and it waits for the writes in flight when its
        term bits begin. Under an isolation level other than READ COMMITTED it raises
        :class:`InvalidArgument`. ``progress(done, total)`` is called after each list, then after
        each term."""
        if reindex_at is not None and math.isnan(reindex_at):
            raise InvalidArgument("reindex_at must be a number or None (got NaN)")
        # (reindex first: the pending part holds no impacts, and merged after it gets the new
        # reference rather than being merged and then rewritten)
        if reindex_at is not None:
            if reindex_at <= 0 or self.index_status().reindex_due(reindex_at):
                self.reindex_impacts()
        self.merge_pending()
        return self._with_progress("analyze_postings",
                                   "select groundkit.analyze_postings(min_postings => %(min_postings)s)",
                                   {"min_postings": min_postings}, progress)

    def merge_pending(self) -> int:
        """Move the pending part, the postings of chunks written one object at a time
        (``put_object``, ``retier_object``) and not merged yet, into the postings and their
        document frequencies into the term statistics, in one transaction; returns the number of
        postings moved (docs/bm25.md, "The pending part"). Writers merge it themselves every
        ``groundkit.config.pending_merge_chunks`` chunks; call this to empty it sooner, say
        after a burst of writes. Search answers are the same before and after. Waits for a merge
        in progress; writers that replace or move chunks wait for it meanwhile."""
        return int(self._scalar("select groundkit.merge_pending()", {}))

    def postings_growth(self) -> float:
        """How far the chunks have grown since the last :meth:`analyze_postings` (or
        :meth:`rebuild`): chunk ids issued since, over the chunks there were then (at least
        ``groundkit.config.sketch_min_postings``); every chunk id if it never ran. Writes do not
        refresh the sketches and term bits; search stays exact without them, and slows as this
        grows (docs/bm25.md, "Analyze after growth")."""
        return float(self._scalar("select groundkit.postings_growth()", {}))

    def impact_drift(self) -> float:
        """How far the postings' stored impacts are from the ones search bounds best with: the
        larger of avgdl / avgdl_ref and avgdl_ref / avgdl, where avgdl is the largest average chunk
        length any reader rank's statistics give and avgdl_ref the length the impacts were
        computed at (1.0 without shared chunks; infinite while ``groundkit.config``'s k1 or b
        differ from the impacts', which makes search exhaustive). Search stays exact at any
        drift and slows as it grows: at 1M chunks, a reference at half the average length made
        the broad reader 1.21x slower by mean (docs/bm25.md, "The impact reference")."""
        return float(self._scalar("select groundkit.impact_drift()", {}))

    def reindex_impacts(self, avgdl_ref: float | None = None,
                        progress: Callable[[int, int], None] | None = None,
                        *, step_postings: int = REINDEX_STEP_POSTINGS) -> int:
        """Recompute the postings' stored impacts with ``groundkit.config``'s k1 and b at the
        reference length ``avgdl_ref`` (default: the largest average chunk length any reader rank's
        statistics give), then sketch the lists again; returns the number of postings rewritten.

        On an autocommit connection, with k1 and b unchanged since the impacts were computed, it
        works in steps, each its own transaction over ``step_postings`` postings in the order of
        their key (docs/bm25.md, "Recomputing the impacts in steps"): writers to the postings
        (merges, bulk writes, replacements of merged chunks) wait for one step at a time, and
        searches stay exact throughout, bounding every impact with the smaller of the two
        references until the last step (at 1M chunks: 398-702 s in 270 steps, the vacuum
        included; a writer's longest call 3.5-7.1 s, the longest ones its own inline merges).
        ``progress(done, total)`` is called after each step, in postings (the total is the
        planner's estimate). If it is interrupted, the next call (or :meth:`analyze_postings`)
        resumes where the steps stopped, unless it is given another ``avgdl_ref``; search stays
        exact meanwhile. Otherwise (a changed k1 or b, or a transaction of the caller's) it is one
        statement that rewrites every posting while all those writers wait (528 s at 1M chunks,
        and 52 s of vacuum); it is refused while another session recomputes in steps.

        On an autocommit connection it then runs ``VACUUM (ANALYZE)`` on the postings: until
        their pages are vacuumed, searches set hint bits on every page they read and cannot read
        the postings' indexes alone (the eval collections' searches took 1.8-3.4x as long right
        after). Elsewhere, run it yourself. :meth:`analyze_postings` runs this once
        :meth:`impact_drift` reaches its ``reindex_at``."""
        if step_postings < 1:
            raise InvalidArgument(f"step_postings must be a positive integer (got {step_postings})")
        in_steps = self.conn.autocommit and bool(self._scalar(
            "select c.bm25_k1 = i.k1 and c.bm25_b = i.b from groundkit.config c cross join groundkit.bm25_impact i",
            {}))
        if in_steps:
            n = self._reindex_in_steps(avgdl_ref, progress, step_postings)
        else:
            n = int(self._scalar("select groundkit.reindex_impacts(avgdl_ref => %(ref)s)", {"ref": avgdl_ref}))
        if self.conn.autocommit:  # (VACUUM cannot run inside a transaction block)
            with self._errors():
                self.conn.execute("vacuum (analyze) groundkit.postings")
        return n

    def _reindex_in_steps(self, avgdl_ref: float | None, progress: Callable[[int, int], None] | None,
                          step_postings: int) -> int:
        try:
            self._scalar("select groundkit._reindex_begin(avgdl_ref => %(ref)s)", {"ref": avgdl_ref})
            total = int(self._scalar(
                "select greatest(c.reltuples, 0)::bigint from pg_catalog.pg_class c"
                " where c.oid = 'groundkit.postings'::regclass", {}))
            # A recompute left unfinished resumes where its steps stopped: what they did counts
            # as done (one read of the key up to there, only when resuming).
            done = int(self._scalar(
                "select coalesce((select count(*) from groundkit.postings p"
                "                  where i.reindex_term is not null"
                "                    and (p.term, p.chunk_id) <= (i.reindex_term, i.reindex_chunk)), 0)"
                "  from groundkit.bm25_impact i", {}))
            rewritten = 0
            while True:
                row = self._fetch("select * from groundkit._reindex_step(%(rows)s)", {"rows": step_postings})[0]
                if row["last_term"] is None:
                    break
                done += int(row["postings"])
                rewritten += int(row["rewritten"])
                if progress is not None:
                    progress(done, max(total, done))
            self._scalar("select groundkit._reindex_end()", {})
        except BaseException:
            # Interrupted: the postings done so far stay done, search stays exact with the
            # smaller reference, and the next recompute (any session) resumes where the steps
            # stopped. This session lets go of the recompute's lock if it still can.
            if not self.conn.closed and not self.conn.broken:
                try:
                    self.conn.execute("select pg_advisory_unlock(groundkit._reindex_lock_key())"
                                      " where groundkit._reindex_lock_held()")
                except psycopg.Error:
                    pass
            raise
        return rewritten

    def index_status(self) -> IndexStatus:
        """The search index's state: chunks, pending postings, when the postings were last
        analyzed and how far the chunks have grown since, how many lists have sketches and terms
        bits, and the impacts' parameters against the configured ones (:class:`IndexStatus`)."""
        rows = self._fetch("select * from groundkit.index_status()", {})
        return _validated(IndexStatus, rows[0])

    def set_tier_rank(self, tier: str, rank: int, progress: Callable[[int, int], None] | None = None) -> int:
        """Change a tier's rank and move the chunks whose statistics scope and postings bucket
        carry it, in one transaction; returns the number of chunks moved. Searches go on;
        writers wait. ``progress(done, total)`` is called after each space whose content it
        checked."""
        _no_nul(tier=tier)
        return self._with_progress("set_tier_rank",
                                   "select groundkit.set_tier_rank(tier => %(tier)s, rank => %(rank)s)",
                                   {"tier": tier, "rank": rank}, progress)

    def _with_progress(self, fn: str, query: str, params: dict[str, Any],
                       progress: Callable[[int, int], None] | None) -> int:
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
