"""``groundkit costs`` at scale: groundkit.cost_summary over a ledger of many metered calls.

    python -m evals.bench costs --dsn URL --calls 1000000

A throwaway database on the server (dropped at the end) gets ``--calls`` rows in
groundkit.calls, written by one generate_series insert: spread evenly over ``--days`` days, 4
flows, 6 models (one without a price, so its calls are unpriced), 1,000 readers and a fifth of
the calls without one. Then, after a vacuum analyze, each ``--by`` with ``--since 7d`` and with
all time runs ``--repeat`` times with the planner free (the ``calls_at`` index) and again with
index scans off (a sequential scan of the table), alternating; the table gives the median ms of
both and the ratio. The issue asks for ``groundkit costs`` to be fast at 1M calls.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from evals.bench.common import log, scratch_db, server, timed

FILL_SQL = """
insert into groundkit.calls (run_id, flow, reader, model, kind, tokens_in, tokens_out, cost, currency, at)
select null,
       (array['home', 'tutor', 'authoring', 'conversational'])[1 + i %% 4],
       case when i %% 5 = 0 then null else 'member-' || (i * 7919 %% 1000) end,
       m.model,
       case when m.model like 'emb%%' then 'embedding' else 'llm' end,
       100 + i %% 3000,
       case when m.model like 'emb%%' then 0 else i %% 700 end,
       case when m.model = 'unpriced-1' then null else round((100 + i %% 3000) * 0.000003, 9) end,
       case when m.model = 'unpriced-1' then null else 'USD' end,
       %(now)s - make_interval(secs => (i::double precision / %(calls)s) * %(days)s * 86400)
  from generate_series(1::bigint, %(calls)s) as i,
       lateral (select (array['m-1', 'm-2', 'm-3', 'emb-1', 'emb-2', 'unpriced-1'])[1 + i * 31 %% 6] as model) m
"""

SUMMARY_SQL = "select * from groundkit.cost_summary(%s, %s)"
NO_INDEX = ("enable_indexscan", "enable_indexonlyscan", "enable_bitmapscan")


def _median_ms(conn: psycopg.Connection[Any], since: datetime | None, by: str) -> tuple[float, int]:
    seconds, rows = timed(lambda: conn.execute(SUMMARY_SQL, (since, by)).fetchall())
    return seconds * 1000, len(rows)


def _set_index_scans(conn: psycopg.Connection[Any], on: bool) -> None:
    for name in NO_INDEX:
        conn.execute("select set_config(%s, %s, false)", (name, "on" if on else "off"))


def run(dsn: str, calls: int, days: int, repeat: int) -> list[str]:
    now = datetime.now(UTC)
    with psycopg.connect(dsn, autocommit=True) as conn:
        seconds, _ = timed(lambda: conn.execute(FILL_SQL, {"now": now, "calls": calls, "days": days}))
        log(f"inserted {calls:,} calls in {seconds:.1f} s")
        conn.execute("vacuum (analyze) groundkit.calls")
        lines = [f"### groundkit.cost_summary over {calls:,} calls spread over {days} days "
                 f"(median of {repeat}, ms)", "",
                 "| --by | --since | rows | calls_at index | seq scan | seq / index |",
                 "|---|---|---:|---:|---:|---:|"]
        for since_label, since in (("7d", now - timedelta(days=7)), ("all", None)):
            for by in ("flow", "model", "reader", "day"):
                free: list[float] = []
                seq: list[float] = []
                n = 0
                for i in range(repeat):
                    for index_on in ((True, False) if i % 2 == 0 else (False, True)):
                        _set_index_scans(conn, index_on)
                        ms, n = _median_ms(conn, since, by)
                        (free if index_on else seq).append(ms)
                _set_index_scans(conn, True)
                a, b = statistics.median(free), statistics.median(seq)
                lines.append(f"| {by} | {since_label} | {n:,} | {a:.1f} | {b:.1f} | {b / a:.2f}x |")
    return lines


def main(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m evals.bench costs", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsn", help="A server to make the throwaway database on (default: a throwaway server).")
    ap.add_argument("--calls", type=int, default=1_000_000)
    ap.add_argument("--days", type=int, default=90)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    with server(args.dsn) as srv, scratch_db(srv, "bh_costs") as dsn:
        for line in run(dsn, args.calls, args.days, args.repeat):
            print(line)
    sys.stdout.flush()
    return 0
