"""The reference engines at their usual settings, against the numbers they are known to give
(``groundkit eval quality --reference``).

A check of the harness, not of groundkit: an engine that drifts from its known nDCG@10 and R@100
on a collection means a loader, an arm or the metrics is wrong, and then no quality table can be
trusted. The known numbers were measured on BEIR's test split (the forum and transcript collections: all
their judged queries; their SOURCE.md), with documents as title + text, and are keyed by the
collection's folder name (``beir-scifact``, ``beir-nfcorpus``, ``semeval-cqa-forum``,
``semeval-cqa-comments``, ``qmsum-transcripts``, whose windows they rank); any other collection
is reported without a verdict, as a parsing and ranking sanity check.

The arms return only documents that match at least one query term. bm25s pads its top k with
zero-score (non-matching) documents when fewer match; the known bm25s numbers include that padding,
which adds about 0.008 R@100 and 0.002 nDCG@10 on NFCorpus, by chance.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

from pydantic import BaseModel, ConfigDict

from groundkit.quality.arms import ArmResult, ArmUnavailable, bm25s_arm, fts5_arm, tantivy_arm
from groundkit.quality.datasets import Collection, load_collection
from groundkit.quality.harness import QualityRow, score

TOLERANCE: Final = 0.01

REFERENCE_ARMS: Final[Mapping[str, Callable[[Collection], ArmResult]]] = {
    "bm25s k1 0.9 b 0.4": bm25s_arm,
    "bm25s k1 1.2 b 0.75": functools.partial(bm25s_arm, k1=1.2, b=0.75),
    "tantivy": tantivy_arm,
    "fts5": fts5_arm,
}

# (arm, collection folder) -> (nDCG@10, R@100), measured with the same engines and settings.
KNOWN: Final[Mapping[tuple[str, str], tuple[float, float]]] = {
    ("bm25s k1 0.9 b 0.4", "beir-scifact"): (0.676, 0.913),
    ("bm25s k1 0.9 b 0.4", "beir-nfcorpus"): (0.320, 0.254),
    ("bm25s k1 1.2 b 0.75", "beir-scifact"): (0.679, 0.913),
    ("bm25s k1 1.2 b 0.75", "beir-nfcorpus"): (0.320, 0.255),
    ("tantivy", "beir-scifact"): (0.684, 0.925),
    ("tantivy", "beir-nfcorpus"): (0.325, 0.249),
    # the forum and transcript collections: their SOURCE.md (bm25s 0.3.16 and tantivy 0.27.0 here)
    ("bm25s k1 1.2 b 0.75", "semeval-cqa-forum"): (0.495, 0.774),
    ("tantivy", "semeval-cqa-forum"): (0.405, 0.717),
    ("bm25s k1 1.2 b 0.75", "semeval-cqa-comments"): (0.191, 0.400),
    ("tantivy", "semeval-cqa-comments"): (0.163, 0.307),
    ("bm25s k1 1.2 b 0.75", "qmsum-transcripts"): (0.242, 0.426),
    ("tantivy", "qmsum-transcripts"): (0.245, 0.428),
}

#: collections whose known nDCG@10 takes gain 2^g - 1 (their SOURCE.md), where trec_eval's
#: ``ndcg_cut`` takes the grade itself: their grades are raised so before the check scores them.
#: (The quality table keeps trec_eval's gains for every collection.)
EXPONENTIAL_GAINS: Final = frozenset({"semeval-cqa-forum", "semeval-cqa-comments", "qmsum-transcripts"})



class ReferenceRow(BaseModel):
    """One reference arm's numbers beside its known ones; ``within`` is None when none are known."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    quality: QualityRow
    known_ndcg_10: float | None
    known_recall_100: float | None
    within: bool | None

    def as_json(self) -> dict[str, Any]:
        return {**self.quality.as_json(), "known_ndcg@10": self.known_ndcg_10,
                "known_recall@100": self.known_recall_100, "within": self.within}


def run_reference(dataset: Path, tolerance: float = TOLERANCE,
                  skipped: Callable[[str, str], None] | None = None) -> list[ReferenceRow]:
    """Run every reference arm on the collection at ``dataset`` and compare with :data:`KNOWN`."""
    collection = load_collection(dataset)
    if collection.name in EXPONENTIAL_GAINS:
        collection = collection.model_copy(update={"qrels": {
            q: {d: 2 ** g - 1 if g > 0 else g for d, g in docs.items()} for q, docs in collection.qrels.items()}})
    rows = []
    for label, arm in REFERENCE_ARMS.items():
        try:
            result = arm(collection)
        except ArmUnavailable as exc:
            if skipped is None:
                raise
            skipped(label, str(exc))
            continue
        row = score(collection, result, arm=label)
        known = KNOWN.get((label, collection.name))
        if known is None:
            rows.append(ReferenceRow(quality=row, known_ndcg_10=None, known_recall_100=None, within=None))
            continue
        within = abs(row.ndcg_10 - known[0]) <= tolerance and abs(row.recall_100 - known[1]) <= tolerance
        rows.append(ReferenceRow(quality=row, known_ndcg_10=known[0], known_recall_100=known[1], within=within))
    return rows
