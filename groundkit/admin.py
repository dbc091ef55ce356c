"""Administration and maintenance of the search index: the methods :class:`groundkit.Groundkit`
has besides reading and writing content (rebuild, analyze, merge, the impacts, BM25's
parameters, tier ranks, status, one maintenance pass)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

from groundkit import maintenance, telemetry
from groundkit.errors import InvalidArgument
from groundkit.models import AnalysisState, Due, IndexStatus, OutdatedChunks, SearchModeSetting, WorkerHeartbeat
from groundkit.session import Progress, Session, no_nul, validated

if TYPE_CHECKING:
    from groundkit.models import MaintenanceReport


class Admin(Session):
    """The administration half of :class:`groundkit.Groundkit`."""

    # -- one pass of whatever is due -------------------------------------------------------

    def maintain(self, *, analyze_growth: float = maintenance.ANALYZE_GROWTH,
                 reindex_at: float = maintenance.REINDEX_DRIFT,
                 progress: maintenance.StepProgress | None = None) -> MaintenanceReport:
        """One pass of whatever is due (see :func:`groundkit.maintenance.maintain`): resume or
        run a recompute of the impacts, merge the pending part, analyze after growth, vacuum what
        it rewrote. Returns what it did and how long each step took."""
        with telemetry.span("maintenance.maintain"):
            return maintenance.maintain(self, analyze_growth=analyze_growth, reindex_at=reindex_at,
                                        progress=progress)

    def due(self, *, analyze_growth: float = maintenance.ANALYZE_GROWTH,
            reindex_at: float = maintenance.REINDEX_DRIFT) -> tuple[Due, ...]:
        """What a maintenance pass would do now, and why (``groundkit.maintenance_due()``)."""
        return maintenance.due(self, analyze_growth=analyze_growth, reindex_at=reindex_at)

    def workers(self, limit: int = 5) -> tuple[WorkerHeartbeat, ...]:
        """The heartbeats of the last ``limit`` workers (``groundkit worker``), latest first."""
        rows = self._fetch(
            "select worker_id, host, pid, started_at, beat_at, last_run_at, last_result, last_error, stopped_at"
            "  from groundkit.worker_heartbeat order by beat_at desc limit %(limit)s", {"limit": limit})
        return tuple(validated(WorkerHeartbeat, r) for r in rows)

    # -- the derived state -----------------------------------------------------------------

    def rebuild(self, progress: Progress | None = None) -> int:
        """Recompute every derived view from the log in one statement (readers and writers wait
        for it); returns the number of objects. ``progress(done, total)`` is called after each
        batch of a thousand objects, from the server's DEBUG messages, while the statement runs."""
        with telemetry.span("maintenance.rebuild") as current:
            n = self._with_progress("rebuild", "select groundkit.rebuild()", {}, progress)
            telemetry.set_attributes(current, objects=n)
            return n

    def analyze_postings(self, min_postings: int | None = None, progress: Progress | None = None,
                         reindex_at: float | None = maintenance.REINDEX_DRIFT) -> int:
        """Sketch every postings list of shared content at least ``min_postings`` long (default:
        ``groundkit.config.sketch_min_postings``, 4,096), replacing the sketches, so that search
        plans its threshold rounds without counting long ranges, then make the term bits of those
        lists' terms, so that search looks up only the candidates that hold a common term;
        returns the number of lists sketched. It first runs :meth:`reindex_impacts` if
        :meth:`impact_drift` has reached ``reindex_at`` or a recompute was left unfinished
        (``None``: never; 0 or less: always), then merges the pending part (its own transaction
        on an autocommit connection), so that the sketches see every list whole. Like ANALYZE:
        searches and writers go on, and it waits for the writes in flight when its term bits
        begin. Under an isolation level other than READ COMMITTED it raises
        :class:`InvalidArgument`. ``progress(done, total)`` is called after each list, then
        after each term. :meth:`maintain` calls it once the chunks have grown."""
        if reindex_at is not None and math.isnan(reindex_at):
            raise InvalidArgument("reindex_at must be a number or None (got NaN)")
        # (reindex first: the pending part holds no impacts, and merged after it gets the new
        # reference rather than being merged and then rewritten)
        if reindex_at is not None:
            if reindex_at <= 0 or self.index_status().reindex_due(reindex_at):
                self.reindex_impacts()
        self.merge_pending()
        with telemetry.span("maintenance.analyze") as current:
            n = self._with_progress("analyze_postings",
                                    "select groundkit.analyze_postings(min_postings => %(min_postings)s)",
                                    {"min_postings": min_postings}, progress)
            telemetry.set_attributes(current, lists=n)
            return n

    def merge_pending(self) -> int:
        """Move the pending part, the postings of chunks written one object at a time
        (``put_object``, ``retier_object``) and not merged yet, into the postings and their
        document frequencies into the term statistics, in one transaction; returns the number of
        postings moved. Writers merge it themselves every ``groundkit.config.pending_merge_chunks``
        chunks; :meth:`maintain` merges it on every pass. Search answers are the same before and
        after. Waits for a merge in progress; writers that replace or move chunks wait for it."""
        with telemetry.span("maintenance.merge") as current:
            n = int(self._scalar("select groundkit.merge_pending()", {}))
            telemetry.set_attributes(current, postings=n)
            return n

    def postings_growth(self) -> float:
        """How far the chunks have grown since the last :meth:`analyze_postings` (or
        :meth:`rebuild`): chunk ids issued since, over the chunks there were then (at least
        ``groundkit.config.sketch_min_postings``); every chunk id if it never ran. Search stays
        exact without a new analyze, and slows as this grows."""
        return float(self._scalar("select groundkit.postings_growth()", {}))

    def impact_drift(self) -> float:
        """How far the postings' stored impacts are from the ones search bounds best with: the
        larger of avgdl / avgdl_ref and avgdl_ref / avgdl, where avgdl is the largest average chunk
        length any reader rank's statistics give and avgdl_ref the length the impacts were
        computed at (1.0 without shared chunks; infinite while the configured k1 or b differ from
        the impacts', which makes search exhaustive). Search stays exact at any drift and slows as
        it grows."""
        return float(self._scalar("select groundkit.impact_drift()", {}))

    # -- the impacts and BM25's parameters -------------------------------------------------

    def set_bm25(self, k1: float, b: float) -> int:
        """Set BM25's ``k1`` and ``b`` (``groundkit.set_bm25``) and recompute every posting's
        stored impact with them in the same transaction; returns the number of postings
        rewritten (0 when both are unchanged). Writers to the postings wait for it; searches go
        on with the old parameters until it commits. A direct ``update groundkit.config`` of
        them is refused. On an autocommit connection it then vacuums the postings, as
        :meth:`reindex_impacts` does."""
        for name, value in (("k1", k1), ("b", b)):
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise InvalidArgument(f"{name} must be a finite number (got {value!r})")
        n = int(self._scalar("select groundkit.set_bm25(k1 => %(k1)s, b => %(b)s)",
                             {"k1": float(k1), "b": float(b)}))
        if n and self._outside_transaction():
            self._vacuum("groundkit.postings")
        return n

    def set_chunk_sizes(self, content_type: str, chars: int | None = None,
                        overlap: int | None = None) -> tuple[int, int]:
        """Set one content type's chunk sizes (``groundkit.config.chunk_sizes``); a size left
        ``None`` is the default's (``chunk_chars``, ``chunk_overlap``). Returns the sizes in force.
        Re-chunks nothing: :meth:`outdated_chunks` then lists the chunks made otherwise, and
        :meth:`rebuild` re-chunks them (docs/chunking.md)."""
        for name, value in (("chars", chars), ("overlap", overlap)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise InvalidArgument(f"{name} must be an integer (got {value!r})")
        no_nul(content_type=content_type)
        self._fetch(
            "update groundkit.config c"
            "   set chunk_sizes = case when x.entry = '{}' then c.chunk_sizes - %(ct)s"
            "                          else jsonb_set(c.chunk_sizes, array[%(ct)s], x.entry) end"
            "  from (select jsonb_strip_nulls(jsonb_build_object('chars', %(chars)s::integer,"
            "                                                    'overlap', %(overlap)s::integer)) as entry) x"
            " returning 1 as done",
            {"ct": content_type, "chars": chars, "overlap": overlap})
        rows = self._fetch("select chunk_chars, chunk_overlap from groundkit.chunk_sizes(%(ct)s)",
                           {"ct": content_type})
        return int(rows[0]["chunk_chars"]), int(rows[0]["chunk_overlap"])

    def set_search_mode(self, content_type: str, mode: str, *, fusion: str | None = None, rrf_k: int | None = None,
                        bm25_weight: float | None = None, dense_weight: float | None = None,
                        depth: int | None = None) -> SearchModeSetting | None:
        """Set what a search in mode ``auto`` runs over ``content_type``
        (``groundkit.set_search_mode``, the owner's): ``bm25``, ``dense`` or ``hybrid`` with
        ``search_hybrid``'s settings (``None``: its default); ``auto`` clears it (back to the
        built-in rule). Returns the setting now in force (``None`` after ``auto``). Searches
        from the next statement on use it; the database's other settings are unchanged.
        GK004 for an unknown content type, GK005 for a value ``search_hybrid`` would refuse.
        The setting is a component of the configuration the gate certifies
        (docs/governance.md); no gate section needs re-running for it, and
        ``groundkit config set-search-mode`` and ``groundkit eval propose --apply`` carry the
        certificate over (:func:`groundkit.deployment.carry_certificate`) once it is committed.
        Called here, the configuration is uncertified until that or a gate run records it."""
        for name, value in (("rrf_k", rrf_k), ("depth", depth)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise InvalidArgument(f"{name} must be an integer (got {value!r})")
        for name, weight in (("bm25_weight", bm25_weight), ("dense_weight", dense_weight)):
            if weight is not None and (isinstance(weight, bool) or not isinstance(weight, int | float)
                                       or not math.isfinite(weight)):
                raise InvalidArgument(f"{name} must be a finite number (got {weight!r})")
        no_nul(content_type=content_type, mode=mode, fusion=fusion or "")
        row = self._fetch(
            "select groundkit.set_search_mode(content_type => %(ct)s, mode => %(mode)s, fusion => %(fusion)s,"
            " rrf_k => %(rrf_k)s, bm25_weight => %(bw)s, dense_weight => %(dw)s, depth => %(depth)s) as entry",
            {"ct": content_type, "mode": mode, "fusion": fusion, "rrf_k": rrf_k,
             "bw": None if bm25_weight is None else float(bm25_weight),
             "dw": None if dense_weight is None else float(dense_weight), "depth": depth})[0]
        return None if row["entry"] is None else validated(SearchModeSetting, row["entry"])

    def search_modes(self) -> dict[str, SearchModeSetting]:
        """Every content type's search mode setting (``config.search_modes``; the owner's)."""
        rows = self._fetch("select key, value from groundkit.config c, jsonb_each(c.search_modes)", {})
        return {r["key"]: validated(SearchModeSetting, r["value"]) for r in rows}

    def auto_search_settings(self, content_types: list[str] | None = None) -> SearchModeSetting:
        """What a search in mode ``auto`` over ``content_types`` (``None``: all) runs now, and
        why (``source``)."""
        if content_types is not None:
            no_nul(content_types=content_types)
        row = self._fetch("select * from groundkit.auto_search_settings(%(ct)s)", {"ct": content_types})[0]
        return validated(SearchModeSetting, {k: v for k, v in row.items() if v is not None})

    def reindex_impacts(self, avgdl_ref: float | None = None, progress: Progress | None = None,
                        *, step_postings: int = maintenance.REINDEX_STEP_POSTINGS) -> int:
        """Recompute the postings' stored impacts with the configured k1 and b at the reference
        length ``avgdl_ref`` (default: the largest average chunk length any reader rank's
        statistics give), then sketch the lists again; returns the number of postings rewritten.

        On an autocommit connection, with k1 and b unchanged since the impacts were computed, it
        works in steps, each its own transaction over ``step_postings`` postings in the order of
        their key: writers to the postings wait for one step at a time, and searches stay exact
        throughout, bounding every impact with the smaller of the two references until the last
        step. ``progress(done, total)`` is called after each step, in postings (the total is the
        planner's estimate). If it is interrupted, the next call (or :meth:`maintain`) resumes
        where the steps stopped, unless it is given another ``avgdl_ref``. Otherwise (a changed
        k1 or b, or a transaction of the caller's) it is one statement that rewrites every
        posting while those writers wait; it is refused while another session recomputes in
        steps.

        On an autocommit connection it then runs ``VACUUM (ANALYZE)`` on the postings: until
        their pages are vacuumed, searches set hint bits on every page they read and cannot read
        the postings' indexes alone. Elsewhere, run it yourself."""
        if step_postings < 1:
            raise InvalidArgument(f"step_postings must be a positive integer (got {step_postings})")
        in_steps = self._outside_transaction() and bool(self._scalar(
            "select c.bm25_k1 = i.k1 and c.bm25_b = i.b from groundkit.config c cross join groundkit.bm25_impact i",
            {}))
        if in_steps:
            n = self._reindex_in_steps(avgdl_ref, progress, step_postings)
        else:
            n = int(self._scalar("select groundkit.reindex_impacts(avgdl_ref => %(ref)s)", {"ref": avgdl_ref}))
        if self._outside_transaction():  # (VACUUM cannot run inside a transaction block)
            self._vacuum("groundkit.postings")
        return n

    def _vacuum(self, table: str) -> None:
        """``VACUUM (ANALYZE)`` one of groundkit's tables (a fixed name, never user input)."""
        with self._errors():
            self.conn.execute(sql.SQL("vacuum (analyze) {}").format(sql.Identifier(*table.split("."))))

    def _reindex_in_steps(self, avgdl_ref: float | None, progress: Progress | None, step_postings: int) -> int:
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
                    self.conn.execute("select groundkit._reindex_release()")
                except psycopg.Error:
                    pass
            raise
        return rewritten

    # -- status and tiers ------------------------------------------------------------------

    def index_status(self) -> IndexStatus:
        """The search index's state: chunks, pending postings, when the postings were last
        analyzed and how far the chunks have grown since, how many lists have sketches and terms
        bits, and the impacts' parameters against the configured ones (:class:`IndexStatus`)."""
        rows = self._fetch("select * from groundkit.index_status()", {})
        return validated(IndexStatus, rows[0])

    def outdated_chunks(self) -> tuple[OutdatedChunks, ...]:
        """Chunks made by another chunker version or with other sizes than the configuration's
        for their content type (``config.chunk_sizes``), grouped; :meth:`rebuild` re-chunks
        them. Reads every chunk."""
        rows = self._fetch("select * from groundkit.outdated_chunks()", {})
        return tuple(validated(OutdatedChunks, r) for r in rows)

    def analysis_status(self) -> tuple[AnalysisState, ...]:
        """For each language the index holds, whether it was analyzed as this groundkit and this
        server analyze now (:class:`AnalysisState`); :meth:`rebuild` analyzes everything again."""
        rows = self._fetch("select * from groundkit.analysis_status()", {})
        return tuple(validated(AnalysisState, r) for r in rows)

    def set_tier_rank(self, tier: str, rank: int, progress: Progress | None = None) -> int:
        """Change a tier's rank and move the chunks whose statistics scope and postings bucket
        carry it, in one transaction; returns the number of chunks moved. Searches go on;
        writers wait. ``progress(done, total)`` is called after each space whose content it
        checked."""
        no_nul(tier=tier)
        params: dict[str, Any] = {"tier": tier, "rank": rank}
        return self._with_progress("set_tier_rank",
                                   "select groundkit.set_tier_rank(tier => %(tier)s, rank => %(rank)s)",
                                   params, progress)
