"""How much of a search is guessing: the pruned search against the same search told its answer.

    python evals/bench/bench_search.py --dsn URL --chunks 1000000 --keep     # builds gk_bench_1000000
    python evals/bench/oracle_search.py --dsn URL --chunks 1000000 --queries 100 --repeat 3 \
        --scales 0.8,0.9,1.1,1.25,1.5

The threshold rounds guess the final k-th score (theta), read and probe for that guess, and
guess again lower when a round fails (docs/bm25.md, "The threshold rounds"). This script
measures what the guessing costs and what is left without it. On a kept benchmark database
(same corpus and queries as bench_search.py), it installs ``_search_pruned`` and
``_search_threshold`` as sql/069_search.sql and sql/064_search_threshold.sql have them, under the
names ``groundkit._search_pruned_oracle`` and ``_search_threshold_oracle``, with two hooks
read from settings of the session:

- ``groundkit.oracle_theta``: the first guess is just below this value (or x_lb, if higher)
  instead of 0.9 of the two largest of the terms' maxima. The script sets it to the k-th score
  ``_search_pruned`` returned for the same reader and query, so the first round is the one a
  perfect guess would run. The result must not change (checked: both are exact). (With three
  terms or more, x_lb is not known yet at the first guess, so the perfect round runs without it.)
- ``groundkit.oracle_arm = 'prologue'``: return (no rows) once the reader, the terms, the
  statistics, the strategy and, for the threshold rounds, the lists' maxima (and, for two
  terms, x_lb) are known: what every query pays before its first round.

Every query runs through the three arms (search, oracle, prologue) back to back, alternating
the order, fastest of --repeat runs per arm; with ``--scales 0.9,1.1`` also through the copy
with its first guess at those multiples of the k-th score (a second table, over the queries
that ran threshold rounds). Printed per reader: p50 / p95 / mean of each arm, the p50 of each
over the queries of 2-6 terms (as bench_search.py reports them), the oracle's and the
prologue's share of the search's mean, the mean number of threshold rounds (debug messages of
an extra untimed run per arm), and how many queries' answers (in any arm with a first guess)
differ from the search's in score (must be 0). The function is dropped at the end.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ab_search import bench_queries
from bench_search import READERS, kept_database_args, log, p50_p95_mean, pct
from sqlsource import function_source, require_once

import groundkit

ROOT = Path(__file__).resolve().parents[2]
NAME = "_search_pruned_oracle"
THRESHOLD_NAME = "_search_threshold_oracle"
FIRST_GUESS = ("    guess := greatest(x_lb, groundkit._guess_first() * least(tot, t_maxcs[nt]"
               " + coalesce(t_maxcs[nt - 1], 0)));\n")
AFTER_MAXIMA = "    full_n := (select sum(x) from unnest(t_dfs) as x);\n"
BEFORE_SCAN = "    if v_strategy = 'scan' then\n"
ROUND_MESSAGE = "groundkit pruned: threshold guess"


def oracle_function() -> str:
    """The CREATE FUNCTION texts of _search_threshold with the two hooks, renamed to
    THRESHOLD_NAME, and of the planner _search_pruned calling it, with the prologue's hook,
    renamed to NAME."""
    thr = function_source((ROOT / "sql" / "064_search_threshold.sql").read_text(encoding="utf-8"),
                           "_search_threshold")
    require_once(thr, (FIRST_GUESS, AFTER_MAXIMA), "sql/064_search_threshold.sql")
    planner = function_source((ROOT / "sql" / "069_search.sql").read_text(encoding="utf-8"), "_search_pruned")
    require_once(planner, (BEFORE_SCAN, "groundkit._search_threshold("), "sql/069_search.sql")
    prologue = "if current_setting('groundkit.oracle_arm', true) = 'prologue' then return; end if;\n"
    thr = thr.replace(FIRST_GUESS, "    guess := greatest(x_lb, current_setting('groundkit.oracle_theta')"
                                   "::double precision * (1 - 1e-9));\n")
    thr = thr.replace(AFTER_MAXIMA, AFTER_MAXIMA + "    " + prologue)
    # (the threshold rounds return at their own hook, after the maxima; the others before they start)
    early = prologue.replace("= 'prologue'", "= 'prologue' and v_strategy <> 'threshold'")
    planner = planner.replace(BEFORE_SCAN, "    " + early + BEFORE_SCAN)
    planner = planner.replace("groundkit._search_threshold(", f"groundkit.{THRESHOLD_NAME}(")
    # Only our own SQL files' text is edited here; nothing from outside reaches it.
    return thr.replace("_search_threshold", THRESHOLD_NAME) + "\n" + planner.replace("_search_pruned", NAME)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    kept_database_args(ap)
    ap.add_argument("--warm-up", type=int, default=30)
    ap.add_argument("--repeat", type=int, default=3, help="runs per arm and query; the fastest is kept")
    ap.add_argument("--scales", default="",
                    help="also first guesses at these multiples of the k-th score, e.g. 0.9,1.1 (comma-separated)")
    args = ap.parse_args(argv)
    scales = [float(x) for x in args.scales.split(",") if x.strip()]
    dsn = make_conninfo(args.dsn, dbname=f"gk_bench_{args.chunks}")
    groundkit.migrate(dsn)
    queries = bench_queries(args.chunks, args.queries, args.seed)
    search = sql.SQL("select chunk_id, score from groundkit._search_pruned(%s, %s, %s)")
    oracle = sql.SQL("select chunk_id, score from groundkit.{}(%s, %s, %s)").format(sql.Identifier(NAME))
    # arm -> the multiple of theta its first guess is (None: not the copy's guess)
    arms: dict[str, float | None] = {"search": None, "oracle": 1.0, "prologue": None}
    arms.update({f"{c:g} theta": c for c in scales})
    messages: list[str] = []
    out = sys.stdout
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.add_notice_handler(lambda d: messages.append(d.message_primary or ""))
        conn.execute(oracle_function())  # our own SQL file, hooks added above

        def run(arm: str, reader: str, q: str, theta: float) -> list[Any]:
            scale = arms[arm]
            conn.execute("select set_config('groundkit.oracle_arm', %s, false),"
                         " set_config('groundkit.oracle_theta', %s, false)",
                         (arm, repr(theta * (scale if scale is not None else 1.0))))
            return conn.execute(search if arm == "search" else oracle, (reader, q, args.k)).fetchall()

        def rounds(arm: str, reader: str, q: str, theta: float) -> int:
            messages.clear()
            conn.execute("set client_min_messages = debug")
            try:
                run(arm, reader, q, theta)
            finally:
                conn.execute("set client_min_messages = notice")
            return sum(1 for m in messages if m.startswith(ROUND_MESSAGE))

        def kth(rows: list[Any]) -> float:
            return min(float(r[1]) for r in rows) if len(rows) >= args.k else float("-inf")

        try:
            for q in queries[: args.warm_up]:
                run("oracle", "r100", q, kth(run("search", "r100", q, 0.0)))
            out.write(f"\n{len(queries)} queries, k = {args.k}, database gk_bench_{args.chunks}, "
                      f"fastest of {args.repeat} per arm\n\n")
            mid = [2 <= len(conn.execute("select * from groundkit.query_terms(%s)", (q,)).fetchall()) <= 6
                   for q in queries]
            table: list[str] = []
            scaled: list[str] = []
            for reader in READERS:
                lat: dict[str, list[float]] = {a: [] for a in arms}
                n_rounds: dict[str, list[int]] = {"search": [], "oracle": []}
                differ = 0
                for i, q in enumerate(queries):
                    rows = run("search", reader, q, 0.0)
                    scores = [float(r[1]) for r in rows]
                    theta = kth(rows)
                    answers = [[float(r[1]) for r in run(a, reader, q, theta)] for a in arms if arms[a] is not None]
                    if any(len(got) != len(scores) or any(abs(u - v) > 1e-9 * max(1.0, abs(u))
                                                          for u, v in zip(scores, got, strict=True))
                           for got in answers):
                        differ += 1
                    best = {a: float("inf") for a in arms}
                    for rep in range(args.repeat):
                        order = list(arms) if (i + rep) % 2 == 0 else list(arms)[::-1]
                        for a in order:
                            t0 = time.perf_counter()
                            run(a, reader, q, theta)
                            best[a] = min(best[a], 1000 * (time.perf_counter() - t0))
                    for a in arms:
                        lat[a].append(best[a])
                    for a in n_rounds:
                        n_rounds[a].append(rounds(a, reader, q, theta))
                    log(f"  {reader}: {i + 1}/{len(queries)}")
                s, o, p = lat["search"], lat["oracle"], lat["prologue"]
                cells = [p50_p95_mean(s), p50_p95_mean(o), p50_p95_mean(p)]
                cells.append(" / ".join(f"{pct([x for x, m in zip(a, mid, strict=True) if m], 50):.1f}"
                                        for a in (s, o, p)))
                cells += [f"{statistics.mean(o) / statistics.mean(s):.2f}",
                          f"{statistics.mean(p) / statistics.mean(s):.2f}",
                          f"{statistics.mean(n_rounds['search']):.2f} / {statistics.mean(n_rounds['oracle']):.2f}",
                          str(differ)]
                table.append(f"| {reader} | " + " | ".join(cells) + " |\n")
                # the first guess off by a factor: over the queries that ran threshold rounds
                thr = [n > 0 for n in n_rounds["search"]]
                if scales and any(thr):
                    pick = [[x for x, m in zip(lat[a], thr, strict=True) if m]
                            for a in ("search", "oracle", *(f"{c:g} theta" for c in scales))]
                    scaled.append(f"| {reader} | {sum(thr)} | " + " | ".join(
                        f"{pct(xs, 50):.1f} / {statistics.mean(xs):.1f}" for xs in pick) + " |\n")
            out.write("| reader | search p50 / p95 / mean ms | oracle p50 / p95 / mean ms "
                      "| prologue p50 / p95 / mean ms | p50 2-6 terms: search / oracle / prologue "
                      "| oracle / search (mean) | prologue / search (mean) | rounds search / oracle (mean) "
                      "| queries whose answers differ |\n" + "|---" * 9 + "|\n" + "".join(table))
            if scaled:
                out.write("\nFirst guess at a multiple of the k-th score, queries that ran threshold rounds, "
                          "p50 / mean ms:\n\n| reader | queries | search | oracle (1 theta) | "
                          + " | ".join(f"{c:g} theta" for c in scales) + " |\n"
                          + "|---" * (4 + len(scales)) + "|\n" + "".join(scaled))
        finally:
            for name in (NAME, THRESHOLD_NAME):
                conn.execute(sql.SQL("drop function if exists groundkit.{}").format(sql.Identifier(name)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
