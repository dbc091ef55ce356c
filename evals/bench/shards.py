"""Two databases standing in for two shards of a community split by space (docs/scaling.md): the
fused answer against one database's, on a BEIR collection.

    python -m evals.bench shards --collection /work/shared/datasets/beir-scifact

The collection is loaded three times on one server: whole into one database, and split in two by
a hash of the document id into two databases (two shards, as distributing by space would make
them). Three arms, every test query as one reader, k = 100:

- ``one database``: groundkit.search on the whole collection;
- ``two shards, per-shard statistics``: each shard searched with its own BM25 statistics (N,
  avgdl, df: what each shard has), the two answers merged by score;
- ``two shards, global statistics``: the same after each shard's statistics counters also hold
  the other shard's (what a reference table of statistics would give every shard).

The table gives each arm's nDCG@10 and Recall@100 against the judgments, the mean top-10 overlap
with the one database's answer, and ms per query: for the shards, both shard searches one after
the other (the work) and the slower of the two (the latency of a parallel fan-out).
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import psycopg

import groundkit
from evals.bench.common import log, server
from groundkit import Groundkit
from groundkit.databases import ScratchDatabases
from groundkit.quality.datasets import Collection, load_collection
from groundkit.quality.harness import READER, load_into_groundkit
from groundkit.quality.metrics import evaluate

K = 100


def shard_of(doc_id: str) -> int:
    return hashlib.sha256(doc_id.encode()).digest()[0] % 2


def split(collection: Collection) -> list[Collection]:
    return [collection.model_copy(update={"docs": tuple(d for d in collection.docs if shard_of(d.doc_id) == s)})
            for s in (0, 1)]


Stats = tuple[list[tuple[object, ...]], list[tuple[object, ...]]]


def statistics_of(dsn: str) -> Stats:
    """A database's BM25 statistics counters: (term, scope, df) and (scope, n_chunks, total_len)."""
    with psycopg.connect(dsn) as src:
        terms = src.execute("select term, scope, sum(df)::bigint from groundkit.term_stats"
                            " group by term, scope").fetchall()
        scopes = src.execute("select scope, sum(n_chunks)::bigint, sum(total_len)::bigint"
                             " from groundkit.scope_stats group by scope").fetchall()
    return terms, scopes


def add_statistics(into: str, stats: Stats) -> None:
    """Add another shard's statistics counters to ``into``'s (shard 0 of its counters)."""
    terms, scopes = stats
    with psycopg.connect(into) as dst, dst.cursor() as cur:
        cur.executemany("insert into groundkit.term_stats as t (term, scope, shard, df) values (%s, %s, 0, %s)"
                        " on conflict (term, scope, shard) do update set df = t.df + excluded.df", terms)
        cur.executemany("insert into groundkit.scope_stats as t (scope, shard, n_chunks, total_len)"
                        " values (%s, 0, %s, %s) on conflict (scope, shard) do update"
                        " set n_chunks = t.n_chunks + excluded.n_chunks,"
                        " total_len = t.total_len + excluded.total_len", scopes)


def best_by_doc(hits: Sequence[object]) -> dict[str, float]:
    best: dict[str, float] = {}
    for h in hits:
        oid, score = getattr(h, "object_id"), float(getattr(h, "score"))  # noqa: B009
        best[oid] = max(best.get(oid, 0.0), score)
    return best


def top(ranking: dict[str, float], k: int) -> list[str]:
    return [d for d, _ in sorted(ranking.items(), key=lambda x: (-x[1], x[0]))[:k]]


def run_one(dsn: str, collection: Collection) -> tuple[dict[str, dict[str, float]], list[float]]:
    run, ms = {}, []
    with Groundkit.connect(dsn) as gk:
        for q in collection.queries:
            t0 = time.perf_counter()
            run[q.query_id] = best_by_doc(gk.search(READER, q.text[:4096], k=K))
            ms.append((time.perf_counter() - t0) * 1000)
    return run, ms


def fused(shard_runs: list[tuple[dict[str, dict[str, float]], list[float]]],
          collection: Collection) -> tuple[dict[str, dict[str, float]], list[float], list[float]]:
    run: dict[str, dict[str, float]] = {}
    for q in collection.queries:
        merged: dict[str, float] = {}
        for r, _ in shard_runs:
            merged.update(r[q.query_id])
        run[q.query_id] = {d: merged[d] for d in top(merged, K)}
    per_query = list(zip(*(ms for _, ms in shard_runs), strict=True))
    return run, [sum(x) for x in per_query], [max(x) for x in per_query]


def overlap(a: dict[str, dict[str, float]], b: dict[str, dict[str, float]]) -> float:
    """The mean share of ``a``'s top 10 (or fewer, for a query with fewer hits) also in ``b``'s."""
    return statistics.mean(len(set(top(a[q], 10)) & set(top(b[q], 10))) / len(top(a[q], 10)) for q in a if a[q])


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m evals.bench shards", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--collection", type=Path, default=Path("/work/shared/datasets/beir-scifact"))
    ap.add_argument("--dsn", help="a server to work on (default: a throwaway embedded one)")
    args = ap.parse_args(argv)
    collection = load_collection(args.collection)
    with server(args.dsn) as server_dsn, ScratchDatabases(server_dsn, "bench_shards", log) as scratch:
        dsns = [scratch.create(part) for part in ("one", "a", "b")]
        for dsn in dsns:
            groundkit.migrate(dsn, gate=False)
        for dsn, part in zip(dsns, [collection, *split(collection)], strict=True):
            load_into_groundkit(dsn, part)
        log(f"loaded {len(collection.docs):,} documents whole and in two shards")
        one, one_ms = run_one(dsns[0], collection)
        local, local_sum, local_max = fused([run_one(d, collection) for d in dsns[1:]], collection)
        stats = [statistics_of(d) for d in dsns[1:]]
        add_statistics(dsns[1], stats[1])
        add_statistics(dsns[2], stats[0])
        glob, glob_sum, glob_max = fused([run_one(d, collection) for d in dsns[1:]], collection)
    sizes = [sum(1 for d in collection.docs if shard_of(d.doc_id) == s) for s in (0, 1)]
    lines = [f"{collection.name}: {len(collection.docs):,} documents ({sizes[0]:,} + {sizes[1]:,} in the shards), "
             f"{len(collection.queries)} queries, k = {K}", "",
             "| arm | nDCG@10 | Recall@100 | top-10 overlap with one database | ms per query (work / latency) |",
             "|---|---:|---:|---:|---:|"]
    for name, run, work, latency in (("one database", one, one_ms, one_ms),
                                     ("two shards, per-shard statistics", local, local_sum, local_max),
                                     ("two shards, global statistics", glob, glob_sum, glob_max)):
        m = evaluate(collection.qrels, run)
        lines.append(f"| {name} | {m['ndcg@10']:.4f} | {m['recall@100']:.4f} | {overlap(one, run):.3f} | "
                     f"{statistics.median(work):.1f} / {statistics.median(latency):.1f} |")
    for line in lines:
        print(line)
    sys.stdout.flush()
    return 0

