"""trec_eval-compatible ranking metrics, computed with ``ir-measures`` over ``pytrec_eval``.

All four numbers come from trec_eval's own C code (``pytrec_eval-terrier``), through ir-measures'
pytrec_eval provider:

========== ==================================================================================
key        trec_eval measure
========== ==================================================================================
ndcg@10    ``ndcg_cut.10`` (graded gains as given in the qrels, log2 discount)
recall@10  ``recall.10``
recall@100 ``recall.100``
mrr@10     ``recip_rank`` on the run cut to its top 10 (trec_eval's ``recip_rank`` has no cutoff)
========== ==================================================================================

A gain >= 1 counts as relevant for recall and MRR. Ranking follows trec_eval: score descending, ties
broken by doc id descending. The mean is taken over **every query in the qrels**: trec_eval (and
ir-measures) silently drop qrels queries that are absent from the run, which would flatter an engine
that returns nothing for hard queries, so those queries score 0 here. Run queries without
judgments are ignored.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from types import ModuleType
from typing import Final

__all__ = ["METRIC_KEYS", "evaluate", "per_query"]

METRIC_KEYS: Final[tuple[str, ...]] = ("ndcg@10", "recall@10", "recall@100", "mrr@10")

Qrels = Mapping[str, Mapping[str, int]]
Run = Mapping[str, Mapping[str, float]]


def _ir_measures() -> ModuleType:
    try:
        return importlib.import_module("ir_measures")
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "groundkit.quality.metrics needs the 'ir-measures' package: pip install 'groundkit[eval]'"
        ) from exc


def _top(ranking: Mapping[str, float], k: int) -> dict[str, float]:
    """The first ``k`` docs in trec_eval order (score descending, then doc id descending)."""
    ordered = sorted(ranking.items(), key=lambda item: (item[1], item[0]), reverse=True)
    return dict(ordered[:k])


def per_query(qrels: Qrels, run: Run) -> dict[str, dict[str, float]]:
    """Per-query values (query id -> metric key -> value) for every query in ``qrels``."""
    im = _ir_measures()
    provider = im.pytrec_eval
    judged: dict[str, dict[str, int]] = {q: dict(docs) for q, docs in qrels.items()}
    ranked: dict[str, dict[str, float]] = {
        q: {d: float(s) for d, s in docs.items()} for q, docs in run.items() if q in judged and docs
    }
    cut10 = {q: _top(docs, 10) for q, docs in ranked.items()}

    names = {
        str(im.nDCG @ 10): "ndcg@10",
        str(im.R @ 10): "recall@10",
        str(im.R @ 100): "recall@100",
        str(im.RR): "mrr@10",
    }
    values: dict[str, dict[str, float]] = {q: dict.fromkeys(METRIC_KEYS, 0.0) for q in judged}
    if ranked:
        passes = (([im.nDCG @ 10, im.R @ 10, im.R @ 100], ranked), ([im.RR], cut10))
        for measures, this_run in passes:
            for row in provider.iter_calc(measures, judged, this_run):
                values[str(row.query_id)][names[str(row.measure)]] = float(row.value)
    return values


def evaluate(qrels: Qrels, run: Run) -> dict[str, float]:
    """Mean ``ndcg@10``, ``recall@10``, ``recall@100`` and ``mrr@10`` over all queries in ``qrels``.

    ``run`` maps query id -> doc id -> score (higher is better). Queries missing from ``run``, or with
    no results, count as 0.
    """
    values = per_query(qrels, run)
    if not values:
        raise ValueError("qrels has no queries")
    return {key: sum(v[key] for v in values.values()) / len(values) for key in METRIC_KEYS}
