"""python -m evals.bench fusion: how to fuse BM25 and dense, measured on real collections.

For each collection (BEIR folder) the documents are loaded as ``groundkit eval quality`` loads
them (one chunk each), all-MiniLM-L6-v2 is made the active model (its document vectors cached
under the data directory, groundkit.quality.dense), and every query runs through groundkit's
own SQL twice, to depth 200: ``search`` in mode bm25 and ``search_dense`` (exact scan). Which
dense-only hits share a term with the query (the match gate) is asked of the same chunks'
tsvectors. The fusions are then computed here, over those two lists, for a grid of:

- RRF: ``Σ weight / (rrf_k + rank)``, rrf_k and the dense leg's weight (BM25's is 1);
- score: ``(1 - a) · bm25' + a · dense'``, each leg's scores scaled over its own list (min-max,
  or z-score), a document missing from a leg getting that leg's lowest;
- depth (how deep each leg is read) and the match gate, for both.

It prints nDCG@10 and R@100 per collection for every setting, best mean first, with BM25 and
dense alone, checks the grid's RRF against ``search_hybrid`` run with the same settings (they
must agree at one chunk per document), and tests the default against the alternatives, query by
query (a paired sign-flip test). ``--json`` writes one object per setting instead.

With ``--chunk-chars`` documents are cut into chunks; a document then ranks by its best chunk in
each leg before the grid fuses, while ``search_hybrid`` fuses chunks and a document takes its
best chunk's fused score: the check line then compares the two aggregations. The numbers and the choice
of ``search_hybrid``'s defaults: docs/journal/2026-12-04-fusion.md.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import groundkit
from evals.bench.common import log
from groundkit.client import Groundkit, resolve_dsn
from groundkit.databases import ScratchDatabases
from groundkit.quality.datasets import Collection, load_collection
from groundkit.quality.dense import prepare_dense
from groundkit.quality.harness import READER, load_into_groundkit
from groundkit.quality.metrics import evaluate, per_query

PURPOSE = "bench_fusion"
DEPTH = 200  # each leg's list, read once; the grid reads it to `depth`

Ranked = list[tuple[str, float]]  # doc id, score; best first


@dataclass(frozen=True)
class Legs:
    """One collection's two ranked lists per query, and the dense-only docs that match a term."""

    collection: Collection
    bm25: dict[str, Ranked]
    dense: dict[str, Ranked]
    lexical: dict[str, set[str]]


def _ranked(hits: Sequence[Any]) -> Ranked:
    best: dict[str, float] = {}
    for h in hits:
        best.setdefault(h.object_id, h.score)  # hits come best first: a doc's best chunk
    return list(best.items())


def legs(dsn: str, collection: Collection) -> Legs:
    bm25: dict[str, Ranked] = {}
    dense: dict[str, Ranked] = {}
    lexical: dict[str, set[str]] = {}
    with Groundkit.connect(dsn) as gk:
        for n, q in enumerate(collection.queries, start=1):
            text = q.text[:4096]
            bm25[q.query_id] = _ranked(gk.search(READER, text, k=DEPTH, mode="bm25"))
            dense[q.query_id] = _ranked(gk.search(READER, text, k=DEPTH, mode="dense", exact=True))
            rows = gk.conn.execute(
                "select distinct c.object_id from groundkit.chunks c"
                " where c.object_id = any(%(ids)s) and c.tsv @@ groundkit._query_tsquery(%(q)s)",
                {"ids": [d for d, _ in dense[q.query_id]], "q": text}).fetchall()
            lexical[q.query_id] = {r["object_id"] for r in rows}
            if n % 50 == 0:
                log(f"  {collection.name}: {n}/{len(collection.queries)} queries")
    return Legs(collection, bm25, dense, lexical)


def _scaled(scores: Sequence[float], how: str) -> np.ndarray[Any, np.dtype[np.float64]]:
    s = np.asarray(scores, dtype=float)
    if len(s) == 0:
        return s
    if how == "minmax":
        lo, hi = s.min(), s.max()
        return (s - lo) / (hi - lo) if hi > lo else np.ones_like(s)
    sd = s.std()
    return (s - s.mean()) / sd if sd > 0 else np.zeros_like(s)


def fuse(b: Ranked, d: Ranked, lexical: set[str], setting: Mapping[str, Any]) -> dict[str, float]:
    """One query's fused scores (doc -> score) under ``setting``."""
    depth = setting["depth"]
    b, d = b[:depth], d[:depth]
    if setting["gate"]:
        in_bm25 = {o for o, _ in b}
        d = [(o, s) for o, s in d if o in in_bm25 or o in lexical]
    out: dict[str, float] = {}
    if setting["fusion"] == "rrf":
        for weight, ranked in ((1.0, b), (setting["dense_weight"], d)):
            for rank, (o, _) in enumerate(ranked, start=1):
                out[o] = out.get(o, 0.0) + weight / (setting["rrf_k"] + rank)
        return out
    alpha, how = setting["alpha"], setting["scale"]
    nb = dict(zip([o for o, _ in b], _scaled([s for _, s in b], how), strict=True))
    nd = dict(zip([o for o, _ in d], _scaled([s for _, s in d], how), strict=True))
    floor_b, floor_d = min(nb.values(), default=0.0), min(nd.values(), default=0.0)
    for o in nb.keys() | nd.keys():
        out[o] = (1 - alpha) * nb.get(o, floor_b) + alpha * nd.get(o, floor_d)
    return out


# the dense leg's weight against BM25's 1 (1/4 to 4: either leg up to four times the other)
WEIGHTS = (0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 4.0)


def grid() -> Iterator[dict[str, Any]]:
    for gate, depth in itertools.product((False, True), (50, 100, 200)):
        for rrf_k, weight in itertools.product((5, 10, 20, 40, 60, 100), WEIGHTS):
            yield {"fusion": "rrf", "rrf_k": rrf_k, "dense_weight": weight, "depth": depth, "gate": gate}
        for scale, alpha in itertools.product(("minmax", "z"), (0.2, 0.3, 0.4, 0.5, 0.6, 0.7)):
            yield {"fusion": "score", "scale": scale, "alpha": alpha, "depth": depth, "gate": gate}


def measure(leg: Legs, setting: Mapping[str, Any]) -> tuple[float, float]:
    run = {q.query_id: fuse(leg.bm25.get(q.query_id, []), leg.dense.get(q.query_id, []),
                            leg.lexical.get(q.query_id, set()), setting) for q in leg.collection.queries}
    m = evaluate(leg.collection.qrels, run)
    return m["ndcg@10"], m["recall@100"]


DEFAULT = {"fusion": "rrf", "rrf_k": 20, "dense_weight": 1.0, "depth": 100, "gate": False}
# the default against: BM25 alone, dense alone, the textbook RRF, the best score fusion on SciFact
AGAINST = {
    "rrf k=60": {**DEFAULT, "rrf_k": 60},
    "score minmax a=0.4": {"fusion": "score", "scale": "minmax", "alpha": 0.4, "depth": 100, "gate": False},
    "score z a=0.5": {"fusion": "score", "scale": "z", "alpha": 0.5, "depth": 100, "gate": False},
    "rrf k=20, gate": {**DEFAULT, "gate": True},
}


def per_query_ndcg(leg: Legs, run: Mapping[str, Mapping[str, float]]) -> np.ndarray[Any, np.dtype[np.float64]]:
    """nDCG@10 per judged query, in query id order."""
    values = per_query(leg.collection.qrels, run)
    return np.array([values[q]["ndcg@10"] for q in sorted(values)])


def sign_flip(a: np.ndarray[Any, np.dtype[np.float64]], b: np.ndarray[Any, np.dtype[np.float64]],
              rounds: int = 10_000) -> tuple[float, float]:
    """Mean of a - b over the queries and its two-sided p-value by a paired sign-flip test."""
    diff = a - b
    signs = np.random.default_rng(0).choice([-1.0, 1.0], size=(rounds, len(diff)))
    p = float((np.abs((signs * diff).mean(axis=1)) >= abs(diff.mean()) - 1e-12).mean())
    return float(diff.mean()), p


def paired(leg: Legs) -> list[tuple[str, float, float]]:
    """The default's nDCG@10 minus each alternative's, per query, with the p-value."""
    def run_of(setting: Mapping[str, Any]) -> dict[str, dict[str, float]]:
        return {q.query_id: fuse(leg.bm25.get(q.query_id, []), leg.dense.get(q.query_id, []),
                                 leg.lexical.get(q.query_id, set()), setting) for q in leg.collection.queries}

    default = per_query_ndcg(leg, run_of(DEFAULT))
    others = {"bm25 alone": {q: dict(v) for q, v in leg.bm25.items()},
              "dense alone": {q: dict(v) for q, v in leg.dense.items()},
              **{name: run_of(setting) for name, setting in AGAINST.items()}}
    return [(name, *sign_flip(default, per_query_ndcg(leg, run))) for name, run in others.items()]


def sql_agrees(dsn: str, leg: Legs, setting: Mapping[str, Any]) -> tuple[float, float]:
    """nDCG@10 of ``search_hybrid`` itself with an RRF ``setting`` (k = 100, as the eval runs it),
    beside the same fusion computed here."""
    run: dict[str, dict[str, float]] = {}
    with Groundkit.connect(dsn) as gk:
        for q in leg.collection.queries:
            hits = gk.search(READER, q.text[:4096], k=100, mode="hybrid", fusion="rrf", rrf_k=setting["rrf_k"],
                             bm25_weight=1.0, dense_weight=setting["dense_weight"], depth=setting["depth"],
                             match_gate=setting["gate"])
            run[q.query_id] = dict(_ranked(hits))
    return evaluate(leg.collection.qrels, run)["ndcg@10"], measure(leg, setting)[0]


def label(setting: Mapping[str, Any]) -> str:
    gate = ", gate" if setting["gate"] else ""
    if setting["fusion"] == "rrf":
        return f"rrf k={setting['rrf_k']} w_dense={setting['dense_weight']} depth={setting['depth']}{gate}"
    return f"score {setting['scale']} a={setting['alpha']} depth={setting['depth']}{gate}"


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m evals.bench fusion", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", type=Path, action="append", required=True, help="a BEIR folder (repeatable)")
    parser.add_argument("--dsn", help="server DSN (default: $GROUNDKIT_DSN, else the embedded server)")
    parser.add_argument("--top", type=int, default=25, help="settings to print, best mean nDCG@10 first")
    parser.add_argument("--json", action="store_true", help="one JSON object per setting")
    parser.add_argument("--chunk-chars", type=int, default=1_000_000,
                        help="chunk size (default: one chunk per document, as the quality eval)")
    parser.add_argument("--chunk-overlap", type=int, default=0)
    parser.add_argument("--embedding-cache", type=Path, help="where document vectors are kept between runs "
                        "(default: eval-embeddings under the data directory)")
    args = parser.parse_args(argv)
    server = resolve_dsn(args.dsn)
    all_legs: list[Legs] = []
    for path in args.dataset:
        collection = load_collection(path)
        log(f"{collection.name}: loading and embedding")
        # a database of this run's own, dropped after its legs are read (groundkit/databases.py)
        with ScratchDatabases(server, PURPOSE, log) as scratch:
            dsn = scratch.create()
            groundkit.migrate(dsn, gate=False)
            load_into_groundkit(dsn, collection, chunk_chars=args.chunk_chars, chunk_overlap=args.chunk_overlap)
            prepare_dense(dsn, args.embedding_cache)
            leg = legs(dsn, collection)
            in_sql, here = sql_agrees(dsn, leg, DEFAULT)
        log(f"{collection.name}: search_hybrid ({label(DEFAULT)}) nDCG@10 {in_sql:.4f}, "
            f"the same fusion here {here:.4f}")
        all_legs.append(leg)
    names = [leg.collection.name for leg in all_legs]
    rows = []
    for setting in grid():
        rows.append((setting, [measure(leg, setting) for leg in all_legs]))
    rows.sort(key=lambda r: -sum(n for n, _ in r[1]))
    if args.json:
        for setting, values in rows:
            pairs = list(zip(names, values, strict=True))
            record = {**setting, **{f"{n} ndcg@10": v[0] for n, v in pairs},
                      **{f"{n} recall@100": v[1] for n, v in pairs}}
            sys.stdout.write(json.dumps(record) + "\n")
        return 0
    print("| setting | " + " | ".join(f"{n} nDCG@10 / R@100" for n in names) + " |")
    print("|---|" + "---|" * len(names))
    for leg_name, pick in (("bm25 alone", "bm25"), ("dense alone", "dense")):
        cells = []
        for leg in all_legs:
            m = evaluate(leg.collection.qrels, {q: dict(v) for q, v in getattr(leg, pick).items()})
            cells.append(f"{m['ndcg@10']:.4f} / {m['recall@100']:.3f}")
        print(f"| {leg_name} | " + " | ".join(cells) + " |")
    for setting, values in rows[:args.top]:
        print(f"| {label(setting)} | " + " | ".join(f"{n:.4f} / {r:.3f}" for n, r in values) + " |")
    print(f"\n{label(DEFAULT)} (the default) minus, nDCG@10 per query, mean and p (paired sign-flip test):\n")
    print("| against | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    tests = [paired(leg) for leg in all_legs]
    for i, (name, _, _) in enumerate(tests[0]):
        print(f"| {name} | " + " | ".join(f"{t[i][1]:+.4f} (p {t[i][2]:.3f})" for t in tests) + " |")
    print("\nPer collection: the better leg, the default, and the collection's own best RRF setting without the "
          "gate (what `groundkit config set-search-mode` can set), nDCG@10, p by the paired sign-flip test:\n")
    print("| collection | bm25 | dense | default | default - better leg | own best | own best - default |")
    print("|---|---|---|---|---|---|---|")
    for leg in all_legs:
        print(own_best(leg))
    return 0


def own_best(leg: Legs) -> str:
    """One collection's row: each leg, the default, and the best RRF setting for it alone."""
    def run_of(setting: Mapping[str, Any]) -> dict[str, dict[str, float]]:
        return {q.query_id: fuse(leg.bm25.get(q.query_id, []), leg.dense.get(q.query_id, []),
                                 leg.lexical.get(q.query_id, set()), setting) for q in leg.collection.queries}

    bm25 = per_query_ndcg(leg, {q: dict(v) for q, v in leg.bm25.items()})
    dense = per_query_ndcg(leg, {q: dict(v) for q, v in leg.dense.items()})
    default = per_query_ndcg(leg, run_of(DEFAULT))
    better = bm25 if bm25.mean() >= dense.mean() else dense
    rrf = [s for s in grid() if s["fusion"] == "rrf" and not s["gate"]]
    best = max(rrf, key=lambda s: measure(leg, s)[0])
    best_values = per_query_ndcg(leg, run_of(best))
    below, p_below = sign_flip(default, better)
    above, p_above = sign_flip(best_values, default)
    return (f"| {leg.collection.name} | {bm25.mean():.4f} | {dense.mean():.4f} | {default.mean():.4f} | "
            f"{below:+.4f} (p {p_below:.3f}) | {label(best)} {best_values.mean():.4f} | "
            f"{above:+.4f} (p {p_above:.3f}) |")
