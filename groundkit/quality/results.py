"""Stored results of ``groundkit eval quality`` (``groundkit.quality_results``, revision 0029).

:func:`store_collection_results` and :func:`store_label_results` are called by the CLI once a
run has its numbers, into the database the run was pointed at (the scratch databases it loads
collections into are dropped): one row per arm, or per tier rank for labelled samples, sharing
one ``eval_id``. The console's Quality page reads them back with :func:`latest_results` and
:func:`label_history`. A database migrated before revision 0029 has no table: storing then
returns ``None`` and says nothing is kept, rather than failing the evaluation it follows.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from groundkit.session import Session

__all__ = ["StoredQuality", "collection_history", "has_results_table", "label_history", "latest_results",
           "store_collection_results", "store_label_results"]

_INSERT = """
insert into groundkit.quality_results (eval_id, source, collection, arm, tier_rank, reader, queries, ndcg_10,
                                       recall_10, recall_100, mrr_10, ms_per_query, groundkit_version)
select %(eval_id)s, %(source)s, r.collection, r.arm, r.tier_rank, r.reader, r.queries, r.ndcg_10, r.recall_10,
       r.recall_100, r.mrr_10, r.ms_per_query, %(version)s
  from jsonb_to_recordset(%(rows)s::jsonb) as r(collection text, arm text, tier_rank integer, reader text,
                                                queries integer, ndcg_10 float8, recall_10 float8,
                                                recall_100 float8, mrr_10 float8, ms_per_query float8)
"""


class StoredQuality(BaseModel):
    """One stored row: an arm's numbers on a collection, or one tier rank's on labelled samples."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    eval_id: uuid.UUID
    recorded_at: datetime
    source: Literal["collection", "labels"]
    collection: str
    arm: str
    tier_rank: int | None
    reader: str | None
    queries: int
    ndcg_10: float
    recall_10: float
    recall_100: float
    mrr_10: float
    ms_per_query: float | None
    groundkit_version: str


def has_results_table(session: Session) -> bool:
    """Whether the database has ``groundkit.quality_results`` (revision 0029 or later)."""
    return session._scalar("select to_regclass('groundkit.quality_results') is not null as ok", {}) is True


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("groundkit")
    except PackageNotFoundError:
        return "unknown"


def _store(session: Session, source: str, rows: Sequence[dict[str, Any]]) -> uuid.UUID | None:
    if not rows or not has_results_table(session):
        return None
    import json

    eval_id = uuid.uuid4()
    session._fetch(_INSERT + " returning result_id", {"eval_id": eval_id, "source": source,
                                                       "version": _version(), "rows": json.dumps(list(rows))})
    return eval_id


def store_collection_results(session: Session, rows: Sequence[Any]) -> uuid.UUID | None:
    """Store a collection run's rows (:class:`groundkit.quality.harness.QualityRow`, one per arm);
    the run's ``eval_id``, or None when nothing was stored (no rows, or no table)."""
    return _store(session, "collection", [{
        "collection": r.dataset, "arm": r.arm, "tier_rank": None, "reader": None, "queries": r.queries,
        "ndcg_10": r.ndcg_10, "recall_10": r.recall_10, "recall_100": r.recall_100, "mrr_10": r.mrr_10,
        "ms_per_query": r.ms_per_query} for r in rows])


def store_label_results(session: Session, labels_name: str, ranks: Sequence[Any]) -> uuid.UUID | None:
    """Store a labelled-samples run's scores (:class:`groundkit.quality.samples.RankScore`, one per
    tier rank) under the labels file's name."""
    return _store(session, "labels", [{
        "collection": labels_name, "arm": "search", "tier_rank": r.tier_rank, "reader": r.reader,
        "queries": r.queries, "ndcg_10": r.ndcg_10, "recall_10": r.recall_10, "recall_100": r.recall_100,
        "mrr_10": r.mrr_10, "ms_per_query": None} for r in ranks])


# (the columns of StoredQuality, in its order)
_LATEST = """
select eval_id, recorded_at, source, collection, arm, tier_rank, reader, queries, ndcg_10, recall_10, recall_100,
       mrr_10, ms_per_query, groundkit_version
  from (select distinct on (collection, arm) * from groundkit.quality_results
         where source = 'collection' order by collection, arm, recorded_at desc, result_id desc) q
 order by collection, recorded_at desc, arm
"""
_HISTORY = """
select eval_id, recorded_at, source, collection, arm, tier_rank, reader, queries, ndcg_10, recall_10, recall_100,
       mrr_10, ms_per_query, groundkit_version
  from (select * from groundkit.quality_results where source = %(source)s
         order by recorded_at desc, result_id desc limit %(limit)s) q
 order by recorded_at, result_id
"""


def latest_results(session: Session) -> list[StoredQuality]:
    """The latest stored row of each (collection, arm): collections by name, the newest run's
    arms first."""
    return [StoredQuality.model_validate(r) for r in session._fetch(_LATEST, {})]


def collection_history(session: Session, limit: int = 2000) -> list[StoredQuality]:
    """Collection results, oldest first (the newest ``limit`` rows)."""
    return [StoredQuality.model_validate(r)
            for r in session._fetch(_HISTORY, {"source": "collection", "limit": limit})]


def label_history(session: Session, limit: int = 2000) -> list[StoredQuality]:
    """Labelled-sample scores per tier rank, oldest first (the newest ``limit`` rows)."""
    return [StoredQuality.model_validate(r) for r in session._fetch(_HISTORY, {"source": "labels", "limit": limit})]
