"""How much of a search is reading postings: the search against reading only what any plan must read.

    python evals/bench/bench_search.py --dsn URL --chunks 1000000 --keep     # builds gk_bench_1000000
    python evals/bench/read_floor.py --dsn URL --chunks 1000000 --queries 100 --repeat 3

The threshold rounds (docs/bm25.md) find every chunk that scores at least the answer's k-th score
theta by reading the ranges of some terms (each term's postings at or above its cut, the impact
below which no chunk of that list can reach theta) and completing the chunks found there. Whatever
the plan, the ranges it reads must together hold every chunk that reaches theta: a set R of terms
whose other terms' maxima sum below theta. So, given theta, no plan of this kind reads fewer
postings than the cheapest such R, each term read from its cut at theta.

For every 2-6-term query of the benchmark and every reader, this script takes theta from the
search's answer, the terms, weights, maxima, `mult` and the reader's lists from the search's
debug message, counts every R's postings, and times reading the cheapest R's postings in one
statement (index-only scans of the impact index; nothing summed, nothing completed, no
predicate). That is a floor for the reading alone, not for a search: it knows theta, and the
chunks it finds are not yet scored.

Printed per reader: p50 / p95 / mean of the search and of the floor (fastest of --repeat runs
each), their ratio, and the postings the floor reads (p50 / p95).
"""

from __future__ import annotations

import argparse
import itertools
import re
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ab_search import bench_queries
from bench_search import READERS, log, pct

import groundkit

PROLOGUE = re.compile(r"threshold terms \{(.*)\} weights \{(.*)\} maxima \{(.*)\} x_lb \S+ mult (\S+) "
                      r"buckets \{(.*)\}")

RANGE_SIZE_SQL = """
select count(*) from groundkit.postings p
 where p.term = %s and p.vis_key = any (%s) and p.imp >= %s
"""

READ_SQL = """
select count(*)
  from unnest(%(terms)s::text[], %(cuts)s::float8[]) as x(term, cut)
 cross join lateral (select 1 from groundkit.postings p
                      where p.term = x.term and p.vis_key = any (%(buckets)s::bigint[])
                        and p.imp >= x.cut) z
"""


def fastest(conn: psycopg.Connection[Any], stmt: str, params: Any, repeat: int) -> tuple[float, list[Any]]:
    best, rows = float("inf"), []
    for _ in range(repeat):
        t0 = time.perf_counter()
        rows = conn.execute(stmt, params).fetchall()
        best = min(best, 1000 * (time.perf_counter() - t0))
    return best, rows


def prologue(conn: psycopg.Connection[Any], reader: str, query: str, k: int) -> re.Match[str] | None:
    """The search's debug message with the terms' weights and maxima (None: no threshold rounds)."""
    msgs: list[str] = []

    def keep(d: psycopg.errors.Diagnostic) -> None:
        msgs.append(d.message_primary or "")

    conn.add_notice_handler(keep)
    try:
        conn.execute("set client_min_messages = debug")
        conn.execute("select * from groundkit._search_pruned(%s, %s, %s, strategy => 'threshold')",
                     (reader, query, k)).fetchall()
    finally:
        conn.execute("set client_min_messages = notice")
        conn.remove_notice_handler(keep)
    return next((m for m in map(PROLOGUE.search, msgs) if m), None)


def floor(conn: psycopg.Connection[Any], reader: str, query: str, k: int, repeat: int) -> dict[str, float] | None:
    g = prologue(conn, reader, query, k)
    if g is None:
        return None
    terms = g.group(1).split(",")
    ws = [float(x) for x in g.group(2).split(",")]
    maxcs = [float(x) for x in g.group(3).split(",")]
    mult = float(g.group(4))
    buckets = [int(x) for x in g.group(5).split(",")]
    search_ms, answer = fastest(conn, "select chunk_id, score from groundkit._search_pruned(%s, %s, %s)",
                                (reader, query, k), repeat)
    if len(answer) < k:
        return None  # fewer than k matching chunks: every posting is needed
    theta = min(float(r[1]) for r in answer) * (1 - 1e-9)
    tot = sum(maxcs)
    # impacts are at least 0: a cut at or below 0 is the whole list
    cuts = [max((theta - (tot - mc)) / (w * mult), -1.0) for w, mc in zip(ws, maxcs, strict=True)]
    sizes = [int(conn.execute(RANGE_SIZE_SQL, (t, buckets, c)).fetchone()[0])  # type: ignore[index]
             for t, c in zip(terms, cuts, strict=True)]
    nt = len(terms)
    best: tuple[int, ...] = tuple(range(nt))
    for size in range(1, nt + 1):
        for rset in itertools.combinations(range(nt), size):
            if sum(maxcs[i] for i in range(nt) if i not in rset) < theta \
                    and sum(sizes[i] for i in rset) < sum(sizes[i] for i in best):
                best = rset
    read_ms, _ = fastest(conn, READ_SQL, {"terms": [terms[i] for i in best], "cuts": [cuts[i] for i in best],
                                          "buckets": buckets}, repeat)
    return {"search_ms": search_ms, "read_ms": read_ms, "postings": float(sum(sizes[i] for i in best))}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsn", required=True, help="the server bench_search.py --keep built its database on")
    ap.add_argument("--chunks", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per arm and query; the fastest counts")
    ap.add_argument("--warm-up", type=int, default=30)
    args = ap.parse_args(argv)

    dsn = make_conninfo(args.dsn, dbname=f"gk_bench_{args.chunks}")
    groundkit.migrate(dsn)
    queries = bench_queries(args.chunks, args.queries, args.seed)
    out = sys.stdout
    with psycopg.connect(dsn, autocommit=True) as conn:
        mid = [q for q in queries
               if 2 <= len(conn.execute("select * from groundkit.query_terms(%s)", (q,)).fetchall()) <= 6]
        for q in queries[: args.warm_up]:
            conn.execute("select * from groundkit.search('r100', %s, %s)", (q, args.k)).fetchall()
        out.write(f"\n{len(mid)} queries of 2-6 terms, k = {args.k}, database gk_bench_{args.chunks}, fastest of "
                  f"{args.repeat} runs each\n\n"
                  "| reader | queries | search p50 / p95 / mean ms | reading the fewest postings p50 / p95 / mean ms "
                  "| search / reading (p50, mean) | postings read p50 / p95 |\n|---|---|---|---|---|---|\n")
        for reader in READERS:
            rs = []
            for i, q in enumerate(mid):
                r = floor(conn, reader, q, args.k, args.repeat)
                if r is not None:
                    rs.append(r)
                log(f"  {reader}: {i + 1}/{len(mid)}")
            s = [r["search_ms"] for r in rs]
            f = [r["read_ms"] for r in rs]
            n = [r["postings"] for r in rs]
            out.write(f"| {reader} | {len(rs)} | {pct(s, 50):.1f} / {pct(s, 95):.1f} / {statistics.mean(s):.1f} "
                      f"| {pct(f, 50):.2f} / {pct(f, 95):.2f} / {statistics.mean(f):.2f} "
                      f"| {pct(s, 50) / pct(f, 50):.1f}x, {statistics.mean(s) / statistics.mean(f):.1f}x "
                      f"| {pct(n, 50):,.0f} / {pct(n, 95):,.0f} |\n")
            out.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
