"""Long questions: what a query of many distinct terms costs search (docs/bm25/analysis.md).

    python -m evals.bench longquery --dsn URL --chunks 1000000 [--sizes 8 64 300 5000] [--runs 15]

On the kept benchmark database gk_bench_<chunks> (`search --keep`), for each size a query of that
many distinct words of the corpus's vocabulary (common and rare alike: every sixth word by
frequency rank, the shortest first, closer ranks when 5,000 would not fit in the query's
32,768 characters; shuffled), searched as each
benchmark reader. Past 64 terms search keeps the 64 of the highest IDF the reader's statistics
give, so the postings it reads are bounded; what grows with the query is its analysis and the
document frequencies of all its terms. The sizes run in turns, ``--runs`` times each after one
untimed round, each query once per turn; per reader and size: the median ms of groundkit.search,
of the term step alone (groundkit._search_terms: parse, analyze, document frequencies, the
bound), the query's characters, and the ratio of the search's median to the 64-term query's.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

from evals.bench.common import READERS, log
from evals.bench.corpus import Corpus

SEARCH_SQL = "select object_id, chunk_seq, score from groundkit.search(%s, %s, 10)"
TERMS_SQL = """
select cardinality((groundkit._search_terms(%(q)s, r.rank, r.member_sub, null,
                                            groundkit._reader_buckets(r.rank, r.member_sub),
                                            (select coalesce(sum(s.n_chunks), 0) from groundkit.scope_stats s
                                              where s.scope <= r.rank))).terms)
  from groundkit._reader(%(r)s) r
"""


def long_query(vocab: list[str], size: int, seed: int, max_chars: int = 32_768) -> str:
    """``size`` distinct words across the frequency ranks (every sixth by rank, or closer when
    that many would not fit in ``max_chars``), shortest first, in a shuffled order."""
    for step in (6, 5, 4, 3, 2, 1):
        words = sorted(vocab[::step], key=lambda w: (len(w), w))[:size]
        if len(words) == size and sum(len(w) + 1 for w in words) - 1 <= max_chars:
            break
    random.Random(seed).shuffle(words)
    return " ".join(words)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m evals.bench longquery", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsn", required=True, help="the server `search --keep` built its database on")
    ap.add_argument("--chunks", type=int, default=100_000, help="which gk_bench_<chunks> database")
    ap.add_argument("--sizes", type=int, nargs="+", default=[8, 64, 300, 5000])
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args(argv)
    vocab = Corpus(seed=args.seed).vocab
    queries = {n: long_query(vocab, n, args.seed + n) for n in args.sizes}
    dsn = make_conninfo(args.dsn, dbname=f"gk_bench_{args.chunks}")
    rows: list[tuple[str, int, int, float, float]] = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        notices: list[str] = []
        conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
        for reader in READERS:
            search: dict[int, list[float]] = {n: [] for n in args.sizes}
            terms: dict[int, list[float]] = {n: [] for n in args.sizes}
            kept: dict[int, int] = {}
            for i in range(args.runs + 1):
                order = list(args.sizes) if i % 2 == 0 else list(reversed(args.sizes))
                for n in order:
                    t0 = time.perf_counter()
                    conn.execute(SEARCH_SQL, (reader, queries[n])).fetchall()
                    t1 = time.perf_counter()
                    row: Any = conn.execute(TERMS_SQL, {"q": queries[n], "r": reader}).fetchone()
                    t2 = time.perf_counter()
                    kept[n] = int(row[0] or 0)
                    if i > 0:
                        search[n].append((t1 - t0) * 1000)
                        terms[n].append((t2 - t1) * 1000)
                log(f"  {reader}: turn {i} of {args.runs}")
            for n in args.sizes:
                rows.append((reader, n, kept[n], statistics.median(search[n]), statistics.median(terms[n])))
    base = {r: s for r, n, _, s, _ in rows if n == 64}
    print(f"gk_bench_{args.chunks}: median of {args.runs} runs each, the sizes in turns")
    print("| reader | distinct words | characters | terms kept | search ms | term step ms | search / 64 words |")
    print("|---|---|---|---|---|---|---|")
    for reader, n, k, s, t in rows:
        ratio = f"{s / base[reader]:.2f}x" if reader in base else "-"
        print(f"| {reader} | {n:,} | {len(queries[n]):,} | {k} | {s:.1f} | {t:.1f} | {ratio} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
