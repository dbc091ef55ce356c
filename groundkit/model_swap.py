"""Swapping the embedding model without downtime (docs/embedding-worker.md, "Swapping models").

:func:`add_model` registers a model; :func:`start_reindex` marks it being built, so the worker
embeds it beside the active one while search keeps serving the active one; :func:`shadow_compare`
runs the same queries on both; :func:`cutover` makes it active in one transaction (refused while
its lag is not zero, unless forced) and, run with the old model, rolls back.

:func:`cutover` here is the bare switch: the configuration it makes is uncertified until a gate run
certifies it. ``groundkit cutover`` (:func:`groundkit.deployment.gated_cutover`) gates the switch
first (docs/governance.md).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from psycopg.types.json import Jsonb
from pydantic import BaseModel, ConfigDict, ValidationError

from groundkit import embedding
from groundkit.errors import InvalidArgument
from groundkit.models import SearchHit, SearchMode
from groundkit.session import Session, no_nul

__all__ = ["QueryComparison", "ShadowQuery", "ShadowReport", "add_model", "cutover",
           "read_queries", "sampled_queries", "shadow_compare", "start_reindex", "stop_reindex"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def add_model(s: Session, *, name: str, provider: str, dimension: int | None = None, distance: str = "cosine",
              recipe: str = "titled", options: dict[str, Any] | None = None) -> Any:
    """Register an embedding model (``groundkit.add_embedding_model``), inactive. ``dimension``
    may be left out for the ``local`` provider (its model's is known) and must be given for the
    others. Bad input is :class:`InvalidArgument` (GK005) before anything is written."""
    from groundkit.embedders import EmbeddingModel
    from groundkit.embedders.local import DIMENSION

    embedding.require_dense(s)
    if provider == "local" and dimension not in (None, DIMENSION):
        raise InvalidArgument(f"the local model's vectors have {DIMENSION} dimensions (got {dimension!r}); "
                              "leave --dimension out")
    if dimension is None:
        if provider != "local":
            raise InvalidArgument(f"the {provider!r} provider needs the model's dimension (--dimension)")
        dimension = DIMENSION
    try:
        model = EmbeddingModel.model_validate({"name": name, "provider": provider, "dimension": dimension,
                                               "distance": distance, "recipe": recipe, "options": options or {}})
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'value'}: {e['msg']}" for e in exc.errors())
        raise InvalidArgument(f"embedding model: {problems}") from None
    no_nul(name=model.name, recipe=model.recipe)
    return s._scalar(
        "select groundkit.add_embedding_model(name => %(name)s, provider => %(provider)s,"
        " dimension => %(dimension)s, distance => %(distance)s, recipe => %(recipe)s, options => %(options)s)",
        {**model.model_dump(exclude={"options"}), "options": Jsonb(model.options)})


def start_reindex(s: Session, name: str) -> None:
    """Mark ``name`` being built: the worker (and ``groundkit embed``) embeds it beside the
    active model; search keeps serving the active one until :func:`cutover`."""
    embedding.require_dense(s)
    no_nul(model=name)
    s._fetch("select groundkit.start_reindex(model => %(model)s, building => true)", {"model": name})


def stop_reindex(s: Session, name: str) -> None:
    """No longer keep ``name`` embedded (unless it is the active model)."""
    embedding.require_dense(s)
    no_nul(model=name)
    s._fetch("select groundkit.start_reindex(model => %(model)s, building => false)", {"model": name})


def cutover(s: Session, name: str, *, force: bool = False) -> str | None:
    """Make ``name`` the active model in one transaction (``groundkit.cutover``); refused with
    :class:`~groundkit.errors.CutoverRefused` (GK016) while its lag is not zero, unless
    ``force``. The model replaced is then kept embedded (being built), so that a cutover back
    to it, the rollback, is not refused for lag; :func:`stop_reindex` lets it go. Returns the
    model replaced (``None``: none was active)."""
    embedding.require_dense(s)
    no_nul(model=name)
    previous = s._scalar("select groundkit.cutover_model(model => %(model)s, force => %(force)s) as previous",
                         {"model": name, "force": force})
    return None if previous is None else str(previous)


# -- shadow comparison -----------------------------------------------------------------------


class ShadowQuery(_Frozen):
    """A query to compare on, with the labeller's grades per object when it was judged."""

    query: str
    judged: dict[str, int] | None = None


class QueryComparison(_Frozen):
    query: str
    overlap: float  # |top-k of both| / k
    ndcg_active: float | None
    ndcg_candidate: float | None


class ShadowReport(_Frozen):
    active: str
    candidate: str
    mode: str
    k: int
    queries: int
    overlap_at_k: float
    judged: int
    ndcg_active: float | None
    ndcg_candidate: float | None
    per_query: tuple[QueryComparison, ...]

    @property
    def ndcg_delta(self) -> float | None:
        if self.ndcg_active is None or self.ndcg_candidate is None:
            return None
        return self.ndcg_candidate - self.ndcg_active


def read_queries(path: Path) -> list[ShadowQuery]:
    """Queries from a file: one plain query per line, or JSON lines with a ``query`` (a
    labelled file from ``groundkit eval export-samples``: candidates with a ``relevance`` grade
    make the query judged)."""
    queries = []
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            text = line.strip()
            if not text:
                continue
            if not text.startswith("{"):
                queries.append(ShadowQuery(query=text))
                continue
            try:
                record = json.loads(text)
                query = record["query"]
                if not isinstance(query, str):
                    raise TypeError("query is not a string")
            except (ValueError, KeyError, TypeError) as exc:
                raise InvalidArgument(f"{path}:{n}: not a query line ({exc})") from None
            grades = {str(c["object_id"]): int(c["relevance"]) for c in record.get("candidates") or ()
                      if isinstance(c, dict) and c.get("relevance") is not None and "object_id" in c}
            queries.append(ShadowQuery(query=query, judged=grades or None))
    if not queries:
        raise InvalidArgument(f"{path} holds no queries")
    return queries


def sampled_queries(s: Session, n: int) -> list[ShadowQuery]:
    """The ``n`` latest distinct sampled queries (``groundkit.search_samples``)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InvalidArgument(f"--sampled takes a positive count (got {n!r})")
    rows = s._fetch("select query from (select distinct on (query) query, sampled_at from groundkit.search_samples"
                    " order by query, sampled_at desc) q order by sampled_at desc limit %(n)s", {"n": n})
    if not rows:
        raise InvalidArgument("no sampled queries: set a sample rate (groundkit config set-sample-rate) "
                              "or give --queries FILE")
    return [ShadowQuery(query=r["query"]) for r in rows]


def _ndcg(hits: Sequence[SearchHit], grades: dict[str, int], k: int) -> float:
    """nDCG@k over objects (each object once, at its best chunk), the gains as graded."""
    seen: list[str] = []
    for h in hits:
        if h.object_id not in seen:
            seen.append(h.object_id)
    dcg = sum(max(grades.get(o, 0), 0) / math.log2(i + 2) for i, o in enumerate(seen[:k]))
    ideal = sorted((g for g in grades.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def shadow_compare(gk: Any, candidate: str, queries: Sequence[ShadowQuery], reader: str, *,
                   k: int = 10, mode: SearchMode = "dense") -> ShadowReport:
    """Run ``queries`` as ``reader`` on the active model and on ``candidate``: the mean overlap
    of their top ``k`` chunks and, over the judged queries, nDCG@k of each. The candidate's
    searches run in a transaction that makes it active and is rolled back: no one else ever sees
    it active, and they run exactly as they will after a cutover."""
    if mode not in ("dense", "hybrid"):
        raise InvalidArgument(f"shadow-compare compares dense or hybrid search (got {mode!r})")
    active = embedding.active_model(gk)
    embedding.get_model(gk, candidate)
    if candidate == active.name:
        raise InvalidArgument(f"{candidate!r} is the active model already: nothing to compare")
    before = [gk.search(reader, q.query, k=k, mode=mode) for q in queries]
    with gk.conn.transaction(force_rollback=True):
        cutover(gk, candidate, force=True)
        after = [gk.search(reader, q.query, k=k, mode=mode) for q in queries]
    rows = []
    for q, old, new in zip(queries, before, after, strict=True):
        shared = {(h.object_id, h.chunk_seq) for h in old} & {(h.object_id, h.chunk_seq) for h in new}
        rows.append(QueryComparison(
            query=q.query, overlap=len(shared) / k,
            ndcg_active=None if q.judged is None else _ndcg(old, q.judged, k),
            ndcg_candidate=None if q.judged is None else _ndcg(new, q.judged, k)))
    judged = [r for r in rows if r.ndcg_active is not None and r.ndcg_candidate is not None]
    return ShadowReport(
        active=active.name, candidate=candidate, mode=mode, k=k, queries=len(rows),
        overlap_at_k=sum(r.overlap for r in rows) / len(rows), judged=len(judged),
        ndcg_active=sum(r.ndcg_active or 0.0 for r in judged) / len(judged) if judged else None,
        ndcg_candidate=sum(r.ndcg_candidate or 0.0 for r in judged) / len(judged) if judged else None,
        per_query=tuple(rows))
