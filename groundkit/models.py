"""Frozen pydantic models at groundkit's boundaries (``extra="forbid"`` everywhere)."""

from __future__ import annotations

import re
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

ContentType = Literal["course_section", "board_post", "transcript", "event", "member_note", "document"]
MemberStatus = Literal["active", "pending", "suspended", "revoked"]
CONTENT_TYPES: tuple[str, ...] = (
    "course_section", "board_post", "transcript", "event", "member_note", "document",
)

MAX_QUERY_CHARS = 32768  # groundkit._max_query_chars(); docs/bm25/analysis.md
MAX_K = 200
MAX_MARKER_CHARS = 64  # snippet_start / snippet_end

SearchMode = Literal["auto", "bm25", "dense", "hybrid"]
SEARCH_MODES: tuple[str, ...] = ("auto", "bm25", "dense", "hybrid")
# The mode every search surface uses when none is given. ``auto`` is hybrid where the database can
# do it (pgvector and an active embedding model), else BM25: hybrid beat BM25 on both collections
# we measure (nDCG@10 SciFact 0.7238 vs 0.6908, NFCorpus 0.3556 vs 0.3241; docs/evals.md), and
# dense alone beat it on neither, so dense is never a default.
DEFAULT_SEARCH_MODE: SearchMode = "auto"


# Characters an object id may not hold (sql/050_write.sql refuses the same, GK005): C0 and C1
# controls (newline, tab, ESC), DEL, the line and paragraph separators and the bidi embedding,
# override and isolate controls. Ids reach terminals, logs and reports, where these move the
# cursor, recolour the screen or reorder what is shown.
UNSAFE_ID_CHARS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def unsafe_id_char(text: str) -> str | None:
    """The first character of ``text`` an object id may not hold, as ``U+001B``; ``None`` if none."""
    found = UNSAFE_ID_CHARS.search(text)
    return None if found is None else f"U+{ord(found.group()):04X}"


def escaped(text: str) -> str:
    """``text`` safe to print: each character of :data:`UNSAFE_ID_CHARS` as ``\\xNN`` or
    ``\\uNNNN`` (and, in such text only, ``\\`` as ``\\\\``, so the escapes are unambiguous);
    text without them is returned as it is."""
    if UNSAFE_ID_CHARS.search(text) is None:
        return text
    return "".join(_escape_char(ch) for ch in text)


def _escape_char(ch: str) -> str:
    if ch == "\\":
        return "\\\\"
    if UNSAFE_ID_CHARS.match(ch) is None:
        return ch
    return f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class WriteStatus(StrEnum):
    """What a write did. Only ``applied`` changed anything."""

    APPLIED = "applied"
    DUPLICATE = "duplicate"  # the same version with the same content, e.g. a retry
    STALE = "stale"  # a version lower than the current one
    TOMBSTONED = "tombstoned"  # the object was deleted or redacted; nothing can revive it


class WriteResult(_Frozen):
    object_id: str
    version: int
    status: WriteStatus


class Segment(_Frozen):
    """A timed piece of a transcript."""

    start_ms: int = Field(ge=0)
    end_ms: int = Field(ge=0)
    text: str

    @model_validator(mode="after")
    def _ordered(self) -> Segment:
        if self.end_ms < self.start_ms:
            raise ValueError("end_ms must not be before start_ms")
        return self


class ContentObject(_Frozen):
    """One version of a piece of content, as ``put_object`` takes it."""

    object_id: str = Field(min_length=1, max_length=256)
    version: int = Field(ge=1, le=2**63 - 1)
    content_type: ContentType
    space_id: str = Field(min_length=1, max_length=256)
    tier_visibility: str = Field(min_length=1, max_length=64)
    title: str
    body: str
    owner_sub: str | None = Field(default=None, min_length=1, max_length=256)
    owner_only: bool = False
    segments: tuple[Segment, ...] | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("object_id")
    @classmethod
    def _printable_id(cls, value: str) -> str:
        if (bad := unsafe_id_char(value)) is not None:
            raise ValueError(f"object_id must not contain control, line separator or bidi control characters "
                             f"(found {bad})")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> ContentObject:
        if self.owner_only and self.owner_sub is None:
            raise ValueError("an owner_only object needs an owner_sub")
        if self.segments is not None and self.content_type != "transcript":
            raise ValueError("segments are only accepted for content_type 'transcript'")
        if self.segments is not None and not self.segments:
            raise ValueError("segments must not be empty")
        return self


class StoredObject(_Frozen):
    """An object's current row, as ``groundkit ingest`` needs it: its version, state (``live``,
    ``deleted``, ``redacted``), space, and where a loader took it from (``metadata.source``)."""

    object_id: str
    version: int
    state: Literal["live", "deleted", "redacted"]
    space_id: str | None
    source: dict[str, Any] | None


class Member(_Frozen):
    member_sub: str = Field(min_length=1, max_length=256)
    tier: str = Field(min_length=1, max_length=64)
    status: MemberStatus = "active"


class Space(_Frozen):
    space_id: str = Field(min_length=1, max_length=256)
    min_tier: str = Field(default="T0", min_length=1, max_length=64)
    private: bool = False


class CitedChunk(_Frozen):
    """A chunk and where it lies: what a search hit and a citation share. The citation fields
    (docs/sql-api.md, "Citations") are null where the content type or the chunker has none
    (offsets and chunker: null on chunks made before revision 0015)."""

    object_id: str
    object_version: int
    chunk_seq: int
    content_type: str
    space_id: str
    title: str
    content: str
    start_ms: int | None = None
    end_ms: int | None = None
    char_start: int | None = None
    char_end: int | None = None
    heading_path: tuple[str, ...] | None = None
    thread_id: str | None = None
    thread_title: str | None = None
    chunker: str | None = None


class SearchHit(CitedChunk):
    """One visible chunk, ranked by BM25, by its embedding's similarity (dense) or by both fused
    (hybrid). ``score`` is never negative. In hybrid, ``bm25_rank`` and ``dense_rank`` are where
    each leg ranked the chunk (``None``: that leg did not return it); ``None`` in the other modes.
    Every mode keeps to the query's phrases and exclusions (docs/bm25/analysis.md)."""

    score: float = Field(ge=0.0)
    snippet: str | None = None
    bm25_rank: int | None = None
    dense_rank: int | None = None
    #: what search says about how it read the query, the same on every hit of one search: past
    #: 64 distinct terms in a language it kept the most informative (docs/bm25/analysis.md,
    #: "Long questions"); ``None`` when it read the query whole
    query_notice: str | None = None


class Citation(CitedChunk):
    """A cited chunk with its context (:meth:`groundkit.Groundkit.fetch_citation`): the chunk's
    columns as in :class:`SearchHit`, and the text around it: a transcript's window of segments,
    a board post whole, a section whole, or the chunk with its neighbours. ``context_char_*``
    are offsets into the body (a transcript's segment texts joined by one space), as
    ``char_*``; ``context_*_ms`` the window's times (transcripts)."""

    context: str
    context_char_start: int | None = None
    context_char_end: int | None = None
    context_start_ms: int | None = None
    context_end_ms: int | None = None


class OutdatedChunks(_Frozen):
    """Chunks made by another chunker version or with other sizes than their content type's in
    the configuration now (:meth:`groundkit.Groundkit.outdated_chunks`); ``groundkit rebuild``
    re-chunks them. ``chunker`` and the sizes are ``None`` on chunks written before they were
    recorded."""

    content_type: str
    chunker: str | None
    chunker_version: str
    chunk_chars: int | None
    chunk_overlap: int | None
    chunks: int


class AnalysisState(_Frozen):
    """For one language the index holds (:meth:`groundkit.Groundkit.analysis_status`): the analysis
    its chunks were made with (``built_*``, recorded by the last rebuild, or by the migrate of an
    empty database; ``built_digest`` is ``None`` before revision 0030) against the analysis
    now: this groundkit's version and this server's digest of the language's configuration on
    probe words. ``current`` false: stored lexemes and a query's may differ; ``groundkit
    rebuild`` analyzes everything again (docs/bm25/analysis.md)."""

    language: str
    built_version: str | None
    built_server_version: int | None
    built_digest: str | None
    version: str
    digest: str | None
    folds_accents: bool | None
    current: bool


HomeMode = Literal["latest", "top"]
EngagementKind = Literal["view", "click", "reaction", "dwell_ms"]


class HomeItem(_Frozen):
    """One object of a reader's home feed (``groundkit.home``): its current version, when that
    version was written, and its engagement score over the window (``top``; ``None`` for
    ``latest``, 0.0 for the newest objects that fill ``top`` when fewer have engagement)."""

    object_id: str
    version: int
    content_type: str
    space_id: str
    title: str
    metadata: dict[str, Any] | None
    updated_at: datetime
    score: float | None = None


class IndexStatus(_Frozen):
    """The search index's state (:meth:`groundkit.Groundkit.index_status`, ``groundkit status``).

    ``growth`` is :meth:`~groundkit.Groundkit.postings_growth`. ``impact_drift`` is how far the
    postings' stored impacts are from the ones search bounds best with: the larger of ``avgdl /
    avgdl_ref`` and ``avgdl_ref / avgdl`` (1.0 without shared chunks; infinite while ``k1``/``b``
    differ from ``impact_k1``/``impact_b``, when search is exhaustive). ``avgdl`` is the largest
    average chunk length any reader rank's statistics give; ``None`` without shared chunks.
    ``avgdl_ref_min`` is set while a recompute of the impacts in steps has not finished: the
    smallest reference some postings may still be at, which search bounds them all with (and
    ``impact_drift`` counts). ``reindex_pid`` is the backend running that recompute; ``None``
    with ``avgdl_ref_min`` set means it was interrupted (:attr:`reindex_unfinished`).
    ``reindex_share`` is how far that recompute got, as a share of the postings, estimated from
    the planner's histogram of their terms (``None`` without a recompute unfinished, or before
    the postings were analyzed).
    """

    chunks: int
    pending_postings: int
    analyzed_at: datetime | None
    growth: float
    sketched_lists: int
    bitted_terms: int
    k1: float
    b: float
    impact_k1: float
    impact_b: float
    avgdl_ref: float
    avgdl_ref_min: float | None
    reindex_pid: int | None
    avgdl: float | None
    impact_drift: float
    reindex_share: float | None

    @property
    def reindex_unfinished(self) -> bool:
        """Whether a recompute of the impacts in steps was left unfinished (none runs now)."""
        return self.avgdl_ref_min is not None and self.reindex_pid is None

    def reindex_due(self, reindex_at: float) -> bool:
        """Whether :meth:`~groundkit.Groundkit.analyze_postings` recomputes the impacts first:
        the drift has reached ``reindex_at``, or a recompute was left unfinished."""
        return self.impact_drift >= reindex_at or self.reindex_unfinished

    @property
    def impacts_current(self) -> bool:
        """Whether the impacts were computed with the configured ``k1`` and ``b``."""
        return (self.k1, self.b) == (self.impact_k1, self.impact_b)


class SearchModeSetting(_Frozen):
    """What a search in mode ``auto`` runs (:meth:`groundkit.admin.Admin.set_search_mode`,
    ``groundkit.auto_search_settings``): a mode and, for hybrid, ``search_hybrid``'s settings
    (``None``: its default). ``source`` (when read back for a search): ``content_type`` (the
    searched types' own setting), ``default`` (none set), ``mixed`` (the types' settings differ:
    auto's built-in rule), ``fallback`` (a dense or hybrid setting without pgvector or an
    active model: bm25)."""

    mode: Literal["bm25", "dense", "hybrid"]
    fusion: Literal["rrf", "score"] | None = None
    rrf_k: int | None = None
    bm25_weight: float | None = None
    dense_weight: float | None = None
    depth: int | None = None
    source: Literal["content_type", "default", "mixed", "fallback"] | None = None


class Due(_Frozen):
    """Something a maintenance pass does now (``groundkit.maintenance_due()``): ``job`` is
    ``reindex`` (recompute the postings' impacts) or ``analyze`` (sketches and term bits);
    ``reason`` says why, for people."""

    job: Literal["reindex", "analyze"]
    reason: str


StepName = Literal["reindex", "merge", "analyze", "vacuum", "embed", "dense", "hnsw"]


class MaintenanceStep(_Frozen):
    """One step of a maintenance pass. ``count`` is what the step reports: postings rewritten
    (``reindex``, its vacuum of the postings included), postings merged (``merge``), lists
    sketched (``analyze``), tables vacuumed (``vacuum``), chunks embedded (``embed``, its
    ``reason`` the model), dense index entries merged into their buckets' HNSW indexes
    (``dense``, the model), HNSW indexes built (``hnsw``, the model)."""

    name: StepName
    reason: str
    count: int
    seconds: float


class MaintenanceReport(_Frozen):
    """What one :meth:`groundkit.Groundkit.maintain` pass did, step by step, in order."""

    started_at: datetime
    seconds: float
    steps: tuple[MaintenanceStep, ...]

    def step(self, name: str) -> MaintenanceStep | None:
        """The step called ``name``, if the pass ran it (the first, for ``vacuum``)."""
        return next((s for s in self.steps if s.name == name), None)

    @property
    def merged(self) -> int:
        """Postings the pass merged from the pending part."""
        merge = self.step("merge")
        return merge.count if merge is not None else 0


class WorkerHeartbeat(_Frozen):
    """A ``groundkit worker``'s row in ``groundkit.worker_heartbeat``: when it started, last
    wrote, last finished a pass (and what the pass did), its last error, and when it stopped
    cleanly (``None`` while it runs, or if it was killed)."""

    worker_id: str
    host: str
    pid: int
    started_at: datetime
    beat_at: datetime
    last_run_at: datetime | None
    last_result: dict[str, Any] | None
    last_error: str | None
    stopped_at: datetime | None


# -- runs (docs/runs.md) -------------------------------------------------------------------

RunHitStatus = Literal["current", "newer version", "retiered", "deleted", "redacted"]


class RunHeader(_Frozen):
    """A recorded run's header (``groundkit.runs``): who read, in which flow, with which model
    and prompt versions, what it cost, the log's marker and the transaction snapshot when it
    was recorded, and the error class if it raised."""

    run_id: str
    flow: str
    reader_sub: str
    reader_tier: str | None
    reader_status: str | None
    model: str | None
    prompt_version: str | None
    started_at: datetime | None
    recorded_at: datetime
    log_marker: int | None
    snapshot: str | None
    tokens_in: int
    tokens_out: int
    cost: float | None
    unpriced: int
    llm_calls: tuple[dict[str, Any], ...]
    context: tuple[Any, ...]
    error_class: str | None


class ReplayHit(_Frozen):
    """One chunk a run saw, rebuilt from the log at the pinned version and chunker version.
    ``content`` is ``None`` when the object was redacted since (``redacted``), or when today's
    chunker cannot make that chunk again (``verified`` false). ``now`` says what became of the
    object since the run."""

    search_no: int
    query: str
    hit_no: int
    object_id: str
    object_version: int
    chunk_seq: int
    score: float
    content_type: str | None
    title: str | None
    content: str | None
    start_ms: int | None
    end_ms: int | None
    char_start: int | None
    char_end: int | None
    heading_path: tuple[str, ...] | None
    chunker: str | None
    chunker_version: str | None
    redacted: bool
    verified: bool
    now: RunHitStatus


class Replay(_Frozen):
    run: RunHeader
    hits: tuple[ReplayHit, ...]


class RunSummary(_Frozen):
    """One line of ``groundkit runs list``."""

    run_id: str
    flow: str
    reader_sub: str
    reader_tier: str | None
    model: str | None
    prompt_version: str | None
    recorded_at: datetime
    searches: int
    hits: int
    tokens_in: int
    tokens_out: int
    cost: float | None
    unpriced: int
    error_class: str | None


class RunDiffRow(_Frozen):
    """A hit that entered, left, moved or stayed between two runs' searches of the same number,
    and why when the log can say (``new version``, ``re-tier``, ``delete``, ``redaction``,
    ``reader tier A -> B``)."""

    search_no: int
    change: Literal["entered", "left", "moved", "same"]
    object_id: str
    chunk_seq: int
    version_a: int | None
    version_b: int | None
    rank_a: int | None
    rank_b: int | None
    why: str | None
