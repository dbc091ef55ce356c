"""Run the reference BM25 arms on the shared test collections and compare with the known numbers.

The reference numbers are the ones measured on these machines (shared/README.md, test split). An arm
passes when its nDCG@10 and R@100 are within ``--tolerance`` (default 0.01) of them. Cranfield has no
reference; it is reported as a parsing and ranking sanity check.

Run from the repo root, with the eval extra installed:

    python evals/quality/reference_arms.py              # ~30 s on 2 cores
    python evals/quality/reference_arms.py --check      # exit 1 when an arm is out of tolerance

Note: the arms return only documents that match at least one query term. bm25s pads its top-k with
zero-score (non-matching) documents when fewer match; the shared bm25s numbers include that padding,
which adds about 0.008 R@100 and 0.002 nDCG@10 on NFCorpus by chance.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

from groundkit.quality.arms import ArmResult, bm25s_arm, fts5_arm, tantivy_arm
from groundkit.quality.datasets import Collection, load_collection
from groundkit.quality.metrics import METRIC_KEYS, evaluate

REPO = Path(__file__).resolve().parents[2]
DEFAULT_DATASETS = REPO.parent / "shared" / "datasets"
DATASETS: Final = ("beir-scifact", "beir-nfcorpus", "cranfield")

ARMS: Final[dict[str, Callable[[Collection], ArmResult]]] = {
    "bm25s (lucene, k1 0.9, b 0.4)": bm25s_arm,
    "bm25s (lucene, k1 1.2, b 0.75)": functools.partial(bm25s_arm, k1=1.2, b=0.75),
    "tantivy (en_stem)": tantivy_arm,
    "sqlite fts5 (porter unicode61)": fts5_arm,
}

# (arm, collection) -> (nDCG@10, R@100) from shared/README.md.
REFERENCE: Final[dict[tuple[str, str], tuple[float, float]]] = {
    ("bm25s (lucene, k1 0.9, b 0.4)", "beir-scifact"): (0.676, 0.913),
    ("bm25s (lucene, k1 0.9, b 0.4)", "beir-nfcorpus"): (0.320, 0.254),
    ("bm25s (lucene, k1 1.2, b 0.75)", "beir-scifact"): (0.679, 0.913),
    ("bm25s (lucene, k1 1.2, b 0.75)", "beir-nfcorpus"): (0.320, 0.255),
    ("tantivy (en_stem)", "beir-scifact"): (0.684, 0.925),
    ("tantivy (en_stem)", "beir-nfcorpus"): (0.325, 0.249),
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Reference BM25 arms vs the shared reference numbers.")
    parser.add_argument("--datasets-dir", type=Path, default=DEFAULT_DATASETS)
    parser.add_argument("--datasets", default=",".join(DATASETS), help="comma-separated dataset folders")
    parser.add_argument("--tolerance", type=float, default=0.01)
    parser.add_argument("--check", action="store_true", help="exit 1 if an arm is out of tolerance")
    args = parser.parse_args(argv)

    header = ["collection", "arm", *METRIC_KEYS, "ref nDCG@10 / R@100", "ok", "index s", "query s"]
    print("| " + " | ".join(header) + " |")
    print("|---|---|" + "---:|" * len(METRIC_KEYS) + "---|---|---:|---:|")
    failures = 0
    for name in (n for n in args.datasets.split(",") if n):
        collection = load_collection(args.datasets_dir / name)
        for label, arm in ARMS.items():
            result = arm(collection)
            metrics = evaluate(collection.qrels, result.run)
            reference = REFERENCE.get((label, name))
            if reference is None:
                ref_cell, ok = "", ""
            else:
                within = (
                    abs(metrics["ndcg@10"] - reference[0]) <= args.tolerance
                    and abs(metrics["recall@100"] - reference[1]) <= args.tolerance
                )
                failures += not within
                ref_cell, ok = f"{reference[0]:.3f} / {reference[1]:.3f}", "yes" if within else "NO"
            cells = [name, label, *(f"{metrics[k]:.4f}" for k in METRIC_KEYS), ref_cell, ok]
            cells += [f"{result.index_seconds:.2f}", f"{result.query_seconds:.2f}"]
            print("| " + " | ".join(cells) + " |", flush=True)
    if failures:
        print(f"\n{failures} arm(s) outside ±{args.tolerance}", file=sys.stderr)
    return 1 if failures and args.check else 0


if __name__ == "__main__":
    raise SystemExit(main())
