"""``groundkit eval quality``: retrieval quality on a real test collection, groundkit beside the
reference engines, same queries, same metrics, one run.

The collection is loaded into a scratch database of the run's own on the target server
(``groundkit_scratch_eval_quality_<view>_<token>``, :class:`groundkit.databases.ScratchDatabases`),
one per view, dropped when the view is done; two runs on one server do not touch each other's.
Every document becomes one object of the collection's content type
(:attr:`~groundkit.quality.datasets.Collection.content_type`; ``chunk_chars`` is raised so that
a document is one chunk, as in the reference arms), visible to one active reader, and every
query goes through :meth:`groundkit.Groundkit.search` as that reader, so the permission
predicate is part of what is measured. A collection whose documents name their meeting puts
each meeting in a space of its own.

Views: a collection is measured as its documents (``documents``; a transcript collection's are
its prepared ``windows``), and a transcript collection also from its raw ``turns`` cut by
groundkit's transcript chunker (:mod:`groundkit.quality.transcripts`), whose chunks are then the
documents every arm (the reference engines too) ranks. Scopes: ``all`` searches the whole
collection; ``meeting`` searches each query's own meeting only (search's ``space_ids``; the
reference engines filter likewise), as a member searches one meeting's talk.

Arms through groundkit: ``bm25`` (``search``, mode bm25), ``dense`` and ``hybrid`` (the same
search in those modes, with all-MiniLM-L6-v2 as the active model: :mod:`groundkit.quality.dense`;
their ms include embedding the query), and ``ts_rank_cd``. Without pgvector or the ``embed``
extra, dense and hybrid are skipped with the reason, like a reference engine that is not
installed. A query search refuses (a typed error, e.g. GK005) is counted and reported with its
code and reason, scores 0, and the run goes on; only a lost database ends it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Final, cast

from psycopg import sql
from pydantic import BaseModel, ConfigDict, Field

from groundkit.client import Groundkit
from groundkit.databases import Notify, ScratchDatabases
from groundkit.errors import DatabaseUnavailable, EmbeddingProviderError, GroundkitError, PgvectorMissing
from groundkit.models import ContentObject, SearchMode
from groundkit.quality.arms import ARMS, TOP_K, ArmResult, ArmUnavailable, Refusal
from groundkit.quality.datasets import Collection, load_collection
from groundkit.quality.metrics import METRIC_KEYS, per_query

PURPOSE: Final = "eval_quality"  # the scratch databases' name: groundkit_scratch_eval_quality_<token>
READER: Final = "evaluator"
TIER: Final = "T0"
SPACE: Final = "corpus"
BATCH: Final = 500
MEETING_BATCH: Final = 10  # transcripts of hundreds of segments each, per put_objects call

#: groundkit's own arms first, then the reference engines (optional packages).
GROUNDKIT_ARMS: Final = ("bm25", "dense", "hybrid", "ts_rank_cd")
#: the arms that need the dense side (pgvector, the embed extra, the local model)
DENSE_ARMS: Final = ("dense", "hybrid")
ALL_ARMS: Final = (*GROUNDKIT_ARMS, *ARMS)
#: the reference BM25 engines groundkit's bm25 is held against (the better of them)
REFERENCE_BM25: Final = ("tantivy", "bm25s", "bm25s-k1.2")
VIEWS: Final = ("documents", "windows", "turns")
SCOPES: Final = ("all", "meeting")

Progress = Callable[[str, int, int], None]
HitId = Callable[[str, int], str]  # (object id, chunk seq) -> the document scored

# Postgres's ts_rank_cd over the very same chunk tsvectors, with the same reader resolution and
# permission predicate as groundkit.search (it calls them): the naive in-database baseline. Query
# terms come from groundkit.query_terms and are OR-ed, each quoted as a tsquery lexeme (never
# parsed as syntax).
TS_RANK_CD_SQL: Final = """
with reader as (
    select r.member_sub, r.rank from groundkit._reader(%(reader)s) r
),
q as (
    select string_agg('''' || replace(replace(t.term, '\\', '\\\\'), '''', '''''') || '''', ' | ')::tsquery as tq
      from groundkit.query_terms(%(query)s) t
)
select c.object_id, c.chunk_seq, ts_rank_cd(c.tsv, q.tq) as score
  from groundkit.chunks c
 cross join reader r
 cross join q
 cross join lateral groundkit._visible_chunk(c.chunk_id, r.rank, r.member_sub, null, %(spaces)s) v
 where q.tq is not null
   and c.tsv @@ q.tq
 order by score desc, c.object_id, c.chunk_seq
 limit %(k)s
"""


class QualityRow(BaseModel):
    """One arm's numbers on one view and scope of a collection (the ``--json`` shape, with
    ``kind`` "arm"). ``refused``: how many queries search refused (each scored 0), and why."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    dataset: str
    view: str = "documents"
    scope: str = "all"
    arm: str
    ndcg_10: float = Field(alias="ndcg@10")
    recall_10: float = Field(alias="recall@10")
    recall_100: float = Field(alias="recall@100")
    mrr_10: float = Field(alias="mrr@10")
    queries: int
    refused: int = 0
    ms_per_query: float
    refusals: tuple[dict[str, str], ...] = ()
    #: groundkit's BM25 k1 and b on the arms that rank by it (bm25, hybrid) when the run set them
    #: (``--bm25-k1``, ``--bm25-b``); None: groundkit's defaults, or an arm they do not touch
    bm25_k1_b: tuple[float, float] | None = None
    #: nDCG@10 per judged query (for the paired tests; not in the JSON)
    per_query_ndcg: Mapping[str, float] = Field(default_factory=dict, exclude=True, repr=False)

    def as_json(self) -> dict[str, Any]:
        return {"kind": "arm", **self.model_dump(by_alias=True)}


class Comparison(BaseModel):
    """``arm`` minus ``against`` in mean nDCG@10 over the same queries, with a paired two-sided
    t-test's p-value (:func:`groundkit.quality.stats.paired_test`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    dataset: str
    view: str
    scope: str
    arm: str
    against: str
    ndcg_10: float
    against_ndcg_10: float
    difference: float
    p_value: float
    queries: int

    def as_json(self) -> dict[str, Any]:
        return {"kind": "comparison", **self.model_dump()}


def views_of(collection: Collection, dataset: Path) -> tuple[str, ...]:
    """The views a collection has: its documents, and a transcript's raw turns too."""
    if collection.content_type == "transcript" and (dataset / "segments.jsonl").is_file():
        return ("windows", "turns")
    return ("documents",)


def scopes_of(collection: Collection) -> tuple[str, ...]:
    return SCOPES if collection.grouped else ("all",)


def _space_of(collection: Collection) -> Callable[[str], str]:
    """The space a document is written to: its meeting's, else the one corpus space."""
    if collection.grouped:
        return lambda doc_id: collection.doc_groups[doc_id]
    return lambda _doc_id: SPACE


def _setup(gk: Groundkit, spaces: Sequence[str]) -> None:
    gk.put_member(READER, TIER)
    for space in sorted(set(spaces)):
        gk.put_space(space, TIER)


def _analyze(gk: Groundkit, progress: Progress | None) -> None:
    # Fresh planner statistics, as autovacuum would eventually gather them: without them the
    # first queries after a bulk load plan as if the tables were empty.
    for table in ("chunks", "postings", "objects", "term_stats", "scope_stats"):
        gk.conn.execute(sql.SQL("analyze {}.{}").format(sql.Identifier("groundkit"), sql.Identifier(table)))
    # and groundkit's own, as the README says to run after a load (groundkit analyze): the
    # impacts at the documents' average length, the sketches and the term bits
    if progress is not None:
        progress("analyze", 0, 1)
    gk.analyze_postings()
    if progress is not None:
        progress("analyze", 1, 1)


def load_into_groundkit(dsn: str, collection: Collection, progress: Progress | None = None,
                        chunk_chars: int = 1_000_000, chunk_overlap: int = 0) -> None:
    """Write every document of ``collection`` through the bulk ``put_objects`` (500 per call),
    as its content type, one chunk per document unless ``chunk_chars`` says otherwise; each in
    its meeting's space when the collection names them."""
    space_of = _space_of(collection)
    with Groundkit.connect(dsn) as gk:
        gk.conn.execute("update groundkit.config set chunk_chars = %s, chunk_overlap = %s",
                        (chunk_chars, chunk_overlap))
        _setup(gk, [space_of(d.doc_id) for d in collection.docs])
        total = len(collection.docs)
        for start in range(0, total, BATCH):
            gk.put_objects([
                ContentObject(object_id=doc.doc_id, version=1, content_type=cast("Any", collection.content_type),
                              space_id=space_of(doc.doc_id), tier_visibility=TIER, title=doc.title, body=doc.text)
                for doc in collection.docs[start:start + BATCH]
            ])
            if progress is not None:
                progress("load", min(start + BATCH, total), total)
        _analyze(gk, progress)


def load_turns(dsn: str, dataset: Path, windows: Collection,
               progress: Progress | None = None) -> tuple[Collection, HitId]:
    """Write each meeting of ``dataset/segments.jsonl`` as one transcript in its own space, cut
    by the transcript chunker at the database's sizes; return the collection of its chunks (the
    windows' judgments mapped onto them) and how a hit names its chunk there."""
    from groundkit.quality.transcripts import TURN_MS, ChunkSpan, meeting_objects, read_turns, turns_collection

    meetings = read_turns(dataset / "segments.jsonl")
    with Groundkit.connect(dsn) as gk:
        _setup(gk, list(meetings))
        objects = meeting_objects(meetings, TIER, {m: m for m in meetings})
        for start in range(0, len(objects), MEETING_BATCH):
            gk.put_objects(objects[start:start + MEETING_BATCH])
            if progress is not None:
                progress("load", min(start + MEETING_BATCH, len(objects)), len(objects))
        _analyze(gk, progress)
        rows = gk.conn.execute("select object_id, chunk_seq, start_ms, end_ms, content from groundkit.chunks"
                               " order by object_id, chunk_seq").fetchall()
    spans = [ChunkSpan(r["object_id"], r["chunk_seq"], r["start_ms"] // TURN_MS, r["end_ms"] // TURN_MS,
                       r["content"]) for r in rows]
    ids = {(s.meeting, s.chunk_seq): s.doc_id for s in spans}
    return turns_collection(windows, spans), lambda object_id, chunk_seq: ids[(object_id, chunk_seq)]


def _object_id(object_id: str, _chunk_seq: int) -> str:
    return object_id


def _query_arm(arm: str, label: str, dsn: str, collection: Collection, progress: Progress | None, per_group: bool,
               run_one: Callable[[Groundkit, str, list[str] | None], dict[str, float]]) -> ArmResult:
    """Every query through ``run_one`` (its own meeting's space only, with ``per_group``). A
    query refused with a typed error is recorded and the run goes on; a lost database is not a
    query's fault and ends it."""
    run: dict[str, dict[str, float]] = {}
    refused: list[Refusal] = []
    with Groundkit.connect(dsn) as gk:
        started = time.perf_counter()
        for n, query in enumerate(collection.queries, start=1):
            spaces = [collection.query_groups[query.query_id]] if per_group else None
            try:
                run[query.query_id] = run_one(gk, query.text, spaces)
            except DatabaseUnavailable:
                raise
            except GroundkitError as exc:
                refused.append(Refusal(query.query_id, exc.sqlstate or type(exc).__name__, exc.message))
            if progress is not None and (n % 25 == 0 or n == len(collection.queries)):
                progress(label, n, len(collection.queries))
        elapsed = time.perf_counter() - started
    return ArmResult(arm, run, 0.0, elapsed, tuple(refused))


def _best(hits: Sequence[tuple[str, float]]) -> dict[str, float]:
    """A document's score: its best chunk's."""
    best: dict[str, float] = {}
    for doc_id, value in hits:
        best[doc_id] = max(best.get(doc_id, 0.0), value)
    return best


def search_arm(mode: SearchMode, dsn: str, collection: Collection, k: int = TOP_K,
               progress: Progress | None = None, *, hit_id: HitId = _object_id, per_group: bool = False,
               label: str | None = None) -> ArmResult:
    """groundkit.search in ``mode`` (the permission predicate inside) as the collection's reader;
    a document (``hit_id`` of a hit) scores its best chunk's score."""

    def one(gk: Groundkit, text: str, spaces: list[str] | None) -> dict[str, float]:
        hits = gk.search(READER, text, k=k, mode=mode, space_ids=spaces)
        return _best([(hit_id(h.object_id, h.chunk_seq), h.score) for h in hits])

    return _query_arm(mode, label or mode, dsn, collection, progress, per_group, one)


def ts_rank_cd_arm(dsn: str, collection: Collection, k: int = TOP_K, progress: Progress | None = None, *,
                   hit_id: HitId = _object_id, per_group: bool = False, label: str | None = None) -> ArmResult:
    """Postgres ts_rank_cd on the same tsvectors and predicate: the naive baseline."""

    def one(gk: Groundkit, text: str, spaces: list[str] | None) -> dict[str, float]:
        rows = gk._fetch(TS_RANK_CD_SQL, {"reader": READER, "query": text, "k": k, "spaces": spaces})
        return _best([(hit_id(r["object_id"], r["chunk_seq"]), float(r["score"])) for r in rows])

    return _query_arm("ts_rank_cd", label or "ts_rank_cd", dsn, collection, progress, per_group, one)


def _chosen(asked: Sequence[str] | None, available: tuple[str, ...], what: str, name: str) -> tuple[str, ...]:
    if not asked:
        return available
    wrong = [a for a in asked if a not in available]
    if wrong:
        from groundkit.errors import InvalidArgument

        raise InvalidArgument(f"{name} has no {what} {wrong[0]!r}; it has {', '.join(available)}")
    return tuple(dict.fromkeys(asked))


def run_quality(
    dataset: Path,
    server_dsn: str,
    arms: Sequence[str] = ALL_ARMS,
    progress: Progress | None = None,
    skipped: Callable[[str, str], None] | None = None,
    embedding_cache: Path | None = None,
    views: Sequence[str] | None = None,
    scopes: Sequence[str] | None = None,
    notify: Notify | None = None,
    bm25_k1_b: tuple[float, float] | None = None,
) -> list[QualityRow]:
    """Evaluate each arm on the collection at ``dataset``: rows by view, then arm, then scope.
    ``views`` and ``scopes`` (default: every one the collection has, :func:`views_of`,
    :func:`scopes_of`) choose among them; one it lacks is GK005. ``embedding_cache``: where the
    dense arms' document vectors are kept between runs (default: ``eval-embeddings`` under the
    data directory). ``notify`` hears about scratch databases of killed runs dropped (or left)
    on the way. ``bm25_k1_b``: groundkit's BM25 parameters in the scratch databases (default:
    groundkit's own defaults), as ``groundkit config set-bm25`` sets them."""
    source = load_collection(dataset)
    chosen_views = _chosen(views, views_of(source, dataset), "view", source.name)
    chosen_scopes = _chosen(scopes, scopes_of(source), "scope", source.name)
    rows: list[QualityRow] = []
    with ExitStack() as stack:
        scratch = _LazyScratch(server_dsn, notify, stack, bm25_k1_b)
        for view in chosen_views:
            rows.extend(_run_view(source, dataset, view, scratch, arms, chosen_scopes, progress, skipped,
                                  embedding_cache))
            scratch.drop(view)
    if bm25_k1_b is not None:  # on the arms that rank by groundkit's BM25
        rows = [r.model_copy(update={"bm25_k1_b": bm25_k1_b}) if r.arm in ("bm25", "hybrid") else r for r in rows]
    return rows


class _LazyScratch:
    """This run's scratch databases (:class:`ScratchDatabases`), one per view, migrated without
    the gate; the lock on the server is taken when the first is needed (a run of reference
    engines only needs none)."""

    def __init__(self, server_dsn: str, notify: Notify | None, stack: ExitStack,
                 bm25_k1_b: tuple[float, float] | None = None) -> None:
        self._server_dsn = server_dsn
        self._notify = notify
        self._stack = stack
        self._bm25_k1_b = bm25_k1_b
        self._scratch: ScratchDatabases | None = None

    def create(self, view: str) -> str:
        import groundkit

        if self._scratch is None:
            self._scratch = self._stack.enter_context(ScratchDatabases(self._server_dsn, PURPOSE, self._notify))
        dsn = self._scratch.create(view)
        groundkit.migrate(dsn, gate=False)
        if self._bm25_k1_b is not None:  # before the load: every impact is computed with them
            with Groundkit.connect(dsn) as gk:
                gk.set_bm25(*self._bm25_k1_b)
        return dsn

    def drop(self, view: str) -> None:
        if self._scratch is not None:
            self._scratch.drop(self._scratch.name(view))


def _run_view(source: Collection, dataset: Path, view: str, scratch: _LazyScratch, arms: Sequence[str],
              scopes: Sequence[str], progress: Progress | None, skipped: Callable[[str, str], None] | None,
              embedding_cache: Path | None) -> list[QualityRow]:
    collection: Collection = source
    hit_id: HitId = _object_id
    dsn: str | None = None
    if view == "turns":  # the chunks come from groundkit's chunker, whatever the arms
        dsn = scratch.create(view)
        collection, hit_id = load_turns(dsn, dataset, source, progress)
    dense: str | None = None  # why the dense arms cannot run, once known ("" when they can)
    rows: list[QualityRow] = []
    for arm in arms:
        if arm in GROUNDKIT_ARMS and dsn is None:
            dsn = scratch.create(view)
            load_into_groundkit(dsn, collection, progress)
        if arm in DENSE_ARMS:
            assert dsn is not None
            if dense is None:
                dense = _prepare_dense(dsn, embedding_cache, progress)
            if dense:
                if skipped is None:
                    raise ArmUnavailable(dense)
                skipped(arm, dense)
                continue
        for scope in scopes:
            per_group = scope == "meeting"
            label = arm if len(scopes) == 1 else f"{arm} ({scope})"
            if arm in GROUNDKIT_ARMS:
                assert dsn is not None
                if arm == "ts_rank_cd":
                    result = ts_rank_cd_arm(dsn, collection, progress=progress, hit_id=hit_id, per_group=per_group,
                                            label=label)
                else:
                    result = search_arm(cast("SearchMode", arm), dsn, collection, progress=progress, hit_id=hit_id,
                                        per_group=per_group, label=label)
            else:
                try:
                    result = ARMS[arm](collection, per_group=per_group)
                except ArmUnavailable as exc:
                    if skipped is None:
                        raise
                    skipped(arm, str(exc))
                    break
            rows.append(score(collection, result, view=view, scope=scope))
    return rows


def _prepare_dense(dsn: str, cache: Path | None, progress: Progress | None) -> str:
    """Set up the dense side; '' when it is ready, else why not (no pgvector, no embed extra)."""
    from groundkit.quality.dense import prepare_dense

    try:
        prepare_dense(dsn, cache, progress)
    except (PgvectorMissing, EmbeddingProviderError) as exc:
        return str(exc)
    return ""


def score(collection: Collection, result: ArmResult, arm: str | None = None, *, view: str = "documents",
          scope: str = "all") -> QualityRow:
    """The metrics of one arm's run on ``collection`` (labelled ``arm``, else the run's own name)."""
    values = per_query(collection.qrels, result.run)
    if not values:
        raise ValueError("qrels has no queries")
    means = {key: sum(v[key] for v in values.values()) / len(values) for key in METRIC_KEYS}
    n = len(collection.queries)
    return QualityRow.model_validate({
        "dataset": collection.name, "view": view, "scope": scope, "arm": arm or result.arm, **means, "queries": n,
        "refused": len(result.refused),
        "refusals": tuple({"query_id": r.query_id, "code": r.code, "reason": r.reason} for r in result.refused),
        "ms_per_query": 1000.0 * result.query_seconds / n if n else 0.0,
        "per_query_ndcg": {q: v["ndcg@10"] for q, v in values.items()},
    })


def comparisons(rows: Sequence[QualityRow]) -> list[Comparison]:
    """For each view and scope: bm25 against the better reference BM25 engine, hybrid against
    bm25 and against dense, query by query (paired), where those arms ran."""
    from groundkit.quality.stats import paired_test

    blocks: dict[tuple[str, str, str], dict[str, QualityRow]] = {}
    for row in rows:
        blocks.setdefault((row.dataset, row.view, row.scope), {})[row.arm] = row
    out: list[Comparison] = []
    for (dataset, view, scope), by_arm in blocks.items():
        pairs: list[tuple[str, str]] = []
        references = [by_arm[a] for a in REFERENCE_BM25 if a in by_arm]
        if "bm25" in by_arm and references:
            pairs.append(("bm25", max(references, key=lambda r: r.ndcg_10).arm))
        pairs.extend((a, b) for a, b in (("hybrid", "bm25"), ("hybrid", "dense")) if a in by_arm and b in by_arm)
        for a, b in pairs:
            x, y = by_arm[a], by_arm[b]
            queries = sorted(x.per_query_ndcg)
            diff, p = paired_test([x.per_query_ndcg[q] for q in queries], [y.per_query_ndcg[q] for q in queries])
            out.append(Comparison(dataset=dataset, view=view, scope=scope, arm=a, against=b, ndcg_10=x.ndcg_10,
                                  against_ndcg_10=y.ndcg_10, difference=diff, p_value=p, queries=len(queries)))
    return out
