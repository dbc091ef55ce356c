"""Where a search's time goes, statement by statement.

    python evals/bench/bench_search.py --dsn URL --chunks 1000000 --keep     # builds gk_bench_1000000
    python evals/bench/profile_search.py --dsn URL --chunks 1000000 --reader r100 --min-ms 6 --max-ms 30

On a kept benchmark database (same corpus and queries as bench_search.py), every query of
--min-terms to --max-terms analysed terms runs once to warm up, then once more with
auto_explain logging the duration of every statement it runs, nested ones included
(``log_nested_statements``), without per-node instrumentation (``log_analyze`` off), so the
durations are what the statements cost in an ordinary run. Queries whose whole search took
between --min-ms and --max-ms (the middle queries, by default all) are summed: per statement
of groundkit's SQL, keyed by its first words, how often it ran, its total time and its share
of those searches' total. Shares of nested statements include the statements they run
(``_merged_read`` includes its EXECUTE), so they can add up to more than 100 %; what the
table leaves out is PL/pgSQL's own work between statements and planning (custom plans are
planned at every call: see docs/bm25.md, "Generic plans for the pruned rounds").
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path

import psycopg
from psycopg.conninfo import make_conninfo

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ab_search import bench_queries
from bench_search import READERS, kept_database_args, log

import groundkit

DURATION = re.compile(r"duration: ([0-9.]+) ms")
TOP = "select * from groundkit.search("


def query_text(message: str) -> str | None:
    """The statement an auto_explain message is about: the lines after "Query Text:" up to the
    plan (its first node has a cost) or the parameters."""
    lines = message.split("\n")
    for i, line in enumerate(lines):
        if line.startswith("Query Text: "):
            text = [line[len("Query Text: "):]]
            for more in lines[i + 1:]:
                if "  (cost=" in more or more.startswith("Query Parameters:"):
                    break
                text.append(more)
            return "\n".join(text).strip()
    return None


def statement_key(text: str, words: int) -> str:
    """A statement's first words, whitespace folded: its name in the table."""
    return " ".join(text.split()[:words]) or "(empty)"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    kept_database_args(ap)
    ap.add_argument("--reader", choices=sorted(READERS), default="r100")
    ap.add_argument("--min-terms", type=int, default=2)
    ap.add_argument("--max-terms", type=int, default=6)
    ap.add_argument("--min-ms", type=float, default=0.0, help="only searches that took at least this long")
    ap.add_argument("--max-ms", type=float, default=float("inf"), help="only searches that took at most this long")
    ap.add_argument("--words", type=int, default=12, help="how many first words name a statement")
    ap.add_argument("--top", type=int, default=25, help="how many statements to print")
    args = ap.parse_args(argv)
    dsn = make_conninfo(args.dsn, dbname=f"gk_bench_{args.chunks}")
    groundkit.migrate(dsn)
    queries = bench_queries(args.chunks, args.queries, args.seed)
    total: defaultdict[str, float] = defaultdict(float)
    calls: Counter[str] = Counter()
    searched = 0.0
    kept = 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        chosen = [q for q in queries
                  if args.min_terms <= len(conn.execute("select * from groundkit.query_terms(%s)", (q,)).fetchall())
                  <= args.max_terms]
        log(f"{len(chosen)} of {len(queries)} queries have {args.min_terms}-{args.max_terms} terms; warming up")
        for q in chosen:
            conn.execute("select * from groundkit.search(%s, %s, %s)", (args.reader, q, args.k)).fetchall()
        messages: list[str] = []
        conn.add_notice_handler(lambda d: messages.append(d.message_primary or ""))
        conn.execute("load 'auto_explain'")
        for setting in ("auto_explain.log_min_duration = 0", "auto_explain.log_nested_statements = on",
                        "auto_explain.log_analyze = off", "auto_explain.log_level = notice"):
            conn.execute("set " + setting)
        for i, q in enumerate(chosen, 1):
            messages.clear()
            conn.execute("select * from groundkit.search(%s, %s, %s)", (args.reader, q, args.k)).fetchall()
            this: defaultdict[str, float] = defaultdict(float)
            this_calls: Counter[str] = Counter()
            whole = None
            for m in messages:
                d, text = DURATION.search(m), query_text(m)
                if d is None or text is None:
                    continue
                if text.startswith(TOP):
                    whole = float(d.group(1))
                    continue
                if "groundkit._search_pruned(" in text:
                    continue  # groundkit.search's own body, which calls the search function
                key = statement_key(text, args.words)
                this[key] += float(d.group(1))
                this_calls[key] += 1
            if whole is not None and args.min_ms <= whole <= args.max_ms:
                kept += 1
                searched += whole
                for key, ms in this.items():
                    total[key] += ms
                calls.update(this_calls)
            if i % 20 == 0 or i == len(chosen):
                log(f"profiled {i}/{len(chosen)}")
        conn.execute("set auto_explain.log_min_duration = -1")
    if not kept:
        print(f"no search of {args.reader} took between {args.min_ms} and {args.max_ms} ms")
        return 1
    print(f"\n{kept} searches of {args.reader} ({args.min_terms}-{args.max_terms} terms, "
          f"{args.min_ms:g}-{args.max_ms:g} ms): {searched:.1f} ms in all, {searched / kept:.2f} ms each\n")
    print("| statement (first words) | calls | ms | share of the searches |")
    print("|---|---|---|---|")
    for key, ms in sorted(total.items(), key=lambda kv: -kv[1])[:args.top]:
        print(f"| `{key.replace('|', '/')}` | {calls[key]} | {ms:.1f} | {100 * ms / searched:.1f} % |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
