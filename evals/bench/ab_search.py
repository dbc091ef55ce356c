"""Paired A/B latency: groundkit._search_pruned now vs as it was at a git revision.

    python evals/bench/bench_search.py --dsn URL --chunks 100000 --keep     # builds gk_bench_100000
    python evals/bench/ab_search.py --dsn URL --chunks 100000 --baseline-rev df1bfcf

On one kept benchmark database (same corpus, same queries as bench_search.py regenerates them),
this migrates the working tree's SQL, installs ``_search_pruned`` as written in
sql/060_search.sql at the baseline revision under the name ``groundkit._search_pruned_ab``,
and runs every query through both back to back, alternating which goes first, so that load on
the machine hits both alike. It prints p50/p95/mean per reader, the ratio of the means, and how
many queries returned different scores (the two must agree: both are exact). The baseline
function is dropped at the end. ``--repeat N`` keeps each query's fastest of N runs per arm;
``--per-query FILE`` writes every query's latencies, for a look at which queries moved.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_search import READERS, kept_database_args, log, pct, sample_for_queries
from corpus import Corpus, Obj
from sqlsource import function_source, repo_file

import groundkit

AB_NAME = "_search_pruned_ab"


def baseline_function(rev: str, helpers: Sequence[str] = ()) -> str:
    """The CREATE FUNCTION text of _search_pruned at ``rev``, renamed to AB_NAME. With helpers
    (names of other functions of sql/060_search.sql), their text at ``rev`` too, each renamed
    with an ``_ab`` suffix, and every call of them in the baseline's text renamed alike: for a
    change that alters what a helper returns, the baseline then runs its own helpers."""
    text = repo_file("sql/060_search.sql", rev)
    sources = [function_source(text, "_search_pruned").replace("_search_pruned", AB_NAME)]
    sources += [function_source(text, h) for h in helpers]
    if not helpers:
        return sources[0]
    calls = re.compile(r"groundkit\.(" + "|".join(re.escape(h) for h in helpers) + r")\b")
    return "\n".join(calls.sub(lambda m: f"groundkit.{m.group(1)}_ab", src) for src in sources)


def bench_queries(n_chunks: int, n_queries: int, seed: int) -> list[str]:
    """The queries bench_search.py ran on the database it built for n_chunks."""
    sample: list[Obj] = []
    fed = 0
    for obj in Corpus(seed=seed).objects(n_chunks):
        sample_for_queries(obj, sample)
        fed += len(obj.paragraphs)
        if fed >= n_chunks:
            break
    return Corpus(seed=seed).queries(n_queries, sample)


def scores_of(conn: psycopg.Connection[Any], stmt: str | sql.SQL | sql.Composed,
              k: int) -> Callable[[str, str], list[float]]:
    """An arm for paired_table: stmt's scores (its last column) for (reader, query, k) on conn."""
    def run(reader: str, query: str) -> list[float]:
        return [float(r[-1]) for r in conn.execute(stmt, (reader, query, k)).fetchall()]
    return run


def paired_table(out: IO[str], arms: dict[str, Callable[[str, str], list[float]]], queries: Sequence[str],
                 repeat: int, per_query: IO[str] | None) -> None:
    """Time two arms (name -> search returning the scores of one reader's query) on every query
    for every reader, back to back, alternating which goes first, each query's fastest of
    ``repeat`` runs per arm, and write a table row per reader: p50 / p95 / mean of each, the
    ratio of the means and of the p95s (first arm over second), and how many queries returned
    different scores. With ``per_query``, every query's latencies as JSON lines."""
    first, second = arms
    out.write(f"| reader | {first} p50 / p95 / mean ms | {second} p50 / p95 / mean ms | {first} / {second} (mean) "
              "| p95 ratio | queries with different scores |\n|---|---|---|---|---|---|\n")
    for reader in READERS:
        lat: dict[str, list[float]] = {a: [] for a in arms}
        res: dict[str, list[list[float]]] = {a: [] for a in arms}
        for i, q in enumerate(queries):
            best = {a: float("inf") for a in arms}
            for rep in range(repeat):
                order = list(arms) if (i + rep) % 2 == 0 else list(arms)[::-1]
                for a in order:
                    t0 = time.perf_counter()
                    got = arms[a](reader, q)
                    best[a] = min(best[a], 1000 * (time.perf_counter() - t0))
                    if rep == 0:
                        res[a].append(got)
            for a in arms:
                lat[a].append(best[a])
            if per_query:
                per_query.write(json.dumps({"reader": reader, "query": q, **best}) + "\n")
            log(f"  {reader}: {i + 1}/{len(queries)}")
        differ = sum(
            1 for x, y in zip(res[first], res[second], strict=True)
            if len(x) != len(y) or any(abs(u - v) > 1e-9 * max(1.0, abs(u)) for u, v in zip(x, y, strict=True))
        )
        b, n = lat[first], lat[second]
        out.write(f"| {reader} | {pct(b, 50):.1f} / {pct(b, 95):.1f} / {statistics.mean(b):.1f} "
                  f"| {pct(n, 50):.1f} / {pct(n, 95):.1f} / {statistics.mean(n):.1f} "
                  f"| {statistics.mean(b) / statistics.mean(n):.2f}x | {pct(b, 95) / pct(n, 95):.2f}x "
                  f"| {differ} |\n")
        out.flush()


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    kept_database_args(ap, queries=150)
    ap.add_argument("--warm-up", type=int, default=30)
    ap.add_argument("--baseline-rev", required=True, help="git revision whose _search_pruned is the baseline")
    ap.add_argument("--repeat", type=int, default=1,
                    help="run each query this many times per arm (alternating) and keep the fastest")
    ap.add_argument("--per-query", type=Path, help="also write every query's latencies here (JSON lines)")
    ap.add_argument("--helpers", default="",
                    help="comma-separated functions of sql/060_search.sql the baseline runs as they were at its"
                         " revision (installed with an _ab suffix)")
    ap.add_argument("--database", help="another database of the same corpus, say a copy impact_ref.py kept "
                                       "(default: gk_bench_CHUNKS)")
    args = ap.parse_args(argv)
    helpers = [h for h in args.helpers.split(",") if h]
    database = args.database or f"gk_bench_{args.chunks}"

    dsn = make_conninfo(args.dsn, dbname=database)
    groundkit.migrate(dsn)
    queries = bench_queries(args.chunks, args.queries, args.seed)
    arms: dict[str, sql.Composed | sql.SQL] = {
        "baseline": sql.SQL("select chunk_id, score from groundkit.{}(%s, %s, %s)").format(sql.Identifier(AB_NAME)),
        "now": sql.SQL("select chunk_id, score from groundkit._search_pruned(%s, %s, %s)"),
    }
    out = sys.stdout
    with (psycopg.connect(dsn, autocommit=True) as conn,
          args.per_query.open("w") if args.per_query else contextlib.nullcontext() as per_query):
        conn.execute(baseline_function(args.baseline_rev, helpers))  # our own SQL file at that revision
        try:
            for q in queries[: args.warm_up]:
                for stmt in arms.values():
                    conn.execute(stmt, ("r100", q, args.k)).fetchall()
            out.write(f"\n{len(queries)} queries, k = {args.k}, database {database}, "
                      f"baseline {args.baseline_rev}\n\n")
            scores = {a: scores_of(conn, stmt, args.k) for a, stmt in arms.items()}
            paired_table(out, scores, queries, args.repeat, per_query)
        finally:
            for name in [AB_NAME] + [f"{h}_ab" for h in helpers]:
                conn.execute(sql.SQL("drop function if exists groundkit.{}").format(sql.Identifier(name)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
