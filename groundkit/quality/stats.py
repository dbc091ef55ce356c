"""The paired significance test behind every "better by" groundkit's quality tools print.

Student's paired t-test, two-sided, over per-query values of one metric (``scipy.stats.ttest_rel``,
the default test of ranx's ``compare`` too). Smucker, Allan and Carterette (CIKM 2007) found it in
close agreement with the randomization and bootstrap tests on TREC runs; it is deterministic,
which a test a command prints beside a proposal should be.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Sequence

__all__ = ["paired_test"]


def paired_test(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """Mean of ``a - b`` and the two-sided p-value that it is 0. ``a`` and ``b`` hold the same
    queries in the same order. Fewer than two pairs, or every pair equal: p 1.0; every
    difference the same nonzero value (no spread: the t statistic is infinite): p 0.0."""
    if len(a) != len(b):
        raise ValueError(f"paired values differ in length ({len(a)} and {len(b)})")
    if not a:
        return 0.0, 1.0
    differences = [x - y for x, y in zip(a, b, strict=True)]
    diff = sum(differences) / len(differences)
    if len(a) < 2 or all(d == 0 for d in differences):
        return diff, 1.0
    if all(d == differences[0] for d in differences):
        return diff, 0.0
    try:
        stats = importlib.import_module("scipy.stats")
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("the paired test needs scipy: pip install 'groundkit[eval]'") from exc
    p = float(stats.ttest_rel(list(a), list(b)).pvalue)
    return diff, 1.0 if math.isnan(p) else p
