"""``groundkit eval quality``: retrieval quality on a real test collection, groundkit beside the
reference engines, same queries, same metrics, one run.

The collection is loaded into a scratch database of the run's own on the target server
(``groundkit_scratch_eval_quality_<token>``, :class:`groundkit.databases.ScratchDatabases`),
dropped at the end; two runs on one server do not touch each other's. Every document becomes one
``document`` object (``chunk_chars`` is raised so that a document is one chunk, as in the
reference arms), in one public space, visible to one active reader, and every query goes through
:meth:`groundkit.Groundkit.search` as that reader, so the permission predicate is part of what is
measured.

Arms through groundkit: ``bm25`` (``search``, mode bm25), ``dense`` and ``hybrid`` (the same
search in those modes, with all-MiniLM-L6-v2 as the active model: :mod:`groundkit.quality.dense`;
their ms include embedding the query), and ``ts_rank_cd``. Without pgvector or the ``embed``
extra, dense and hybrid are skipped with the reason, like a reference engine that is not
installed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Final, cast

from psycopg import sql
from pydantic import BaseModel, ConfigDict, Field

from groundkit.client import Groundkit
from groundkit.databases import Notify, ScratchDatabases
from groundkit.errors import EmbeddingProviderError, PgvectorMissing
from groundkit.models import ContentObject, SearchMode
from groundkit.quality.arms import ARMS, TOP_K, ArmResult, ArmUnavailable
from groundkit.quality.datasets import Collection, load_collection
from groundkit.quality.metrics import evaluate

PURPOSE: Final = "eval_quality"  # the scratch databases' name: groundkit_scratch_eval_quality_<token>
READER: Final = "evaluator"
SPACE: Final = "corpus"
BATCH: Final = 500

#: groundkit's own arms first, then the reference engines (optional packages).
GROUNDKIT_ARMS: Final = ("bm25", "dense", "hybrid", "ts_rank_cd")
#: the arms that need the dense side (pgvector, the embed extra, the local model)
DENSE_ARMS: Final = ("dense", "hybrid")
ALL_ARMS: Final = (*GROUNDKIT_ARMS, *ARMS)

Progress = Callable[[str, int, int], None]

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
select c.object_id, ts_rank_cd(c.tsv, q.tq) as score
  from groundkit.chunks c
 cross join reader r
 cross join q
 cross join lateral groundkit._visible_chunk(c.chunk_id, r.rank, r.member_sub, null, null) v
 where q.tq is not null
   and c.tsv @@ q.tq
 order by score desc, c.object_id, c.chunk_seq
 limit %(k)s
"""


class QualityRow(BaseModel):
    """One arm's numbers on one collection (the ``--json`` shape)."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    dataset: str
    arm: str
    ndcg_10: float = Field(alias="ndcg@10")
    recall_10: float = Field(alias="recall@10")
    recall_100: float = Field(alias="recall@100")
    mrr_10: float = Field(alias="mrr@10")
    queries: int
    ms_per_query: float

    def as_json(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True)


def load_into_groundkit(dsn: str, collection: Collection, progress: Progress | None = None,
                        chunk_chars: int = 1_000_000, chunk_overlap: int = 0) -> None:
    """Write every document of ``collection`` through the bulk ``put_objects`` (500 per call),
    one chunk per document unless ``chunk_chars`` says otherwise."""
    with Groundkit.connect(dsn) as gk:
        gk.conn.execute("update groundkit.config set chunk_chars = %s, chunk_overlap = %s",
                        (chunk_chars, chunk_overlap))
        gk.put_member(READER, "T0")
        gk.put_space(SPACE, "T0")
        total = len(collection.docs)
        for start in range(0, total, BATCH):
            gk.put_objects([
                ContentObject(object_id=doc.doc_id, version=1, content_type="document", space_id=SPACE,
                              tier_visibility="T0", title=doc.title, body=doc.text)
                for doc in collection.docs[start:start + BATCH]
            ])
            if progress is not None:
                progress("load", min(start + BATCH, total), total)
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


def _query_arm(name: str, dsn: str, collection: Collection, k: int, progress: Progress | None,
               run_one: Callable[[Groundkit, str], dict[str, float]]) -> ArmResult:
    run: dict[str, dict[str, float]] = {}
    with Groundkit.connect(dsn) as gk:
        started = time.perf_counter()
        for n, query in enumerate(collection.queries, start=1):
            run[query.query_id] = run_one(gk, query.text)
            if progress is not None and (n % 25 == 0 or n == len(collection.queries)):
                progress(name, n, len(collection.queries))
        elapsed = time.perf_counter() - started
    return ArmResult(name, run, 0.0, elapsed)


def search_arm(mode: SearchMode, dsn: str, collection: Collection, k: int = TOP_K,
               progress: Progress | None = None) -> ArmResult:
    """groundkit.search in ``mode`` (the permission predicate inside) as the collection's reader;
    a document scores its best chunk's score."""

    def one(gk: Groundkit, text: str) -> dict[str, float]:
        hits = gk.search(READER, text[:4096], k=k, mode=mode)
        best: dict[str, float] = {}
        for hit in hits:
            best[hit.object_id] = max(best.get(hit.object_id, 0.0), hit.score)
        return best

    return _query_arm(mode, dsn, collection, k, progress, one)


def ts_rank_cd_arm(dsn: str, collection: Collection, k: int = TOP_K, progress: Progress | None = None) -> ArmResult:
    """Postgres ts_rank_cd on the same tsvectors and predicate: the naive baseline."""

    def one(gk: Groundkit, text: str) -> dict[str, float]:
        rows = gk.conn.execute(TS_RANK_CD_SQL, {"reader": READER, "query": text[:4096], "k": k}).fetchall()
        best: dict[str, float] = {}
        for row in rows:
            best[row["object_id"]] = max(best.get(row["object_id"], 0.0), float(row["score"]))
        return best

    return _query_arm("ts_rank_cd", dsn, collection, k, progress, one)


def run_quality(
    dataset: Path,
    server_dsn: str,
    arms: Sequence[str] = ALL_ARMS,
    progress: Progress | None = None,
    skipped: Callable[[str, str], None] | None = None,
    embedding_cache: Path | None = None,
    notify: Notify | None = None,
) -> list[QualityRow]:
    """Evaluate each arm on the collection at ``dataset``; rows in the order of ``arms``.
    ``embedding_cache``: where the dense arms' document vectors are kept between runs (default:
    ``eval-embeddings`` under the data directory). ``notify`` hears about scratch databases of
    killed runs dropped (or left) on the way."""
    collection = load_collection(dataset)
    with ExitStack() as scratch:
        results = _run_arms(collection, server_dsn, arms, scratch, progress, skipped, embedding_cache, notify)
    return [score(collection, result) for result in results]


def _run_arms(collection: Collection, server_dsn: str, arms: Sequence[str], scratch: ExitStack,
              progress: Progress | None, skipped: Callable[[str, str], None] | None,
              embedding_cache: Path | None, notify: Notify | None) -> list[ArmResult]:
    """Each arm's run; groundkit's arms in a scratch database entered on ``scratch`` when the
    first of them comes."""
    results: list[ArmResult] = []
    dsn: str | None = None
    dense: str | None = None  # why the dense arms cannot run, once known ("" when they can)
    for arm in arms:
        if arm in GROUNDKIT_ARMS:
            if dsn is None:
                import groundkit

                dsn = scratch.enter_context(ScratchDatabases(server_dsn, PURPOSE, notify)).create()
                groundkit.migrate(dsn, gate=False)
                load_into_groundkit(dsn, collection, progress)
            if arm in DENSE_ARMS:
                if dense is None:
                    dense = _prepare_dense(dsn, embedding_cache, progress)
                if dense:
                    if skipped is None:
                        raise ArmUnavailable(dense)
                    skipped(arm, dense)
                    continue
            if arm == "ts_rank_cd":
                results.append(ts_rank_cd_arm(dsn, collection, progress=progress))
            else:
                results.append(search_arm(cast("SearchMode", arm), dsn, collection, progress=progress))
        else:
            try:
                results.append(ARMS[arm](collection))
            except ArmUnavailable as exc:
                if skipped is None:
                    raise
                skipped(arm, str(exc))
    return results


def _prepare_dense(dsn: str, cache: Path | None, progress: Progress | None) -> str:
    """Set up the dense side; '' when it is ready, else why not (no pgvector, no embed extra)."""
    from groundkit.quality.dense import prepare_dense

    try:
        prepare_dense(dsn, cache, progress)
    except (PgvectorMissing, EmbeddingProviderError) as exc:
        return str(exc)
    return ""


def score(collection: Collection, result: ArmResult, arm: str | None = None) -> QualityRow:
    """The metrics of one arm's run on ``collection`` (labelled ``arm``, else the run's own name)."""
    metrics = evaluate(collection.qrels, result.run)
    n = len(collection.queries)
    return QualityRow.model_validate({
        "dataset": collection.name, "arm": arm or result.arm, **metrics, "queries": n,
        "ms_per_query": 1000.0 * result.query_seconds / n if n else 0.0,
    })
