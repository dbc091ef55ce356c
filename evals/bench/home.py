"""The home feed's latency (groundkit.home, latest and top) with the permission predicate.

    python -m evals.bench home --dsn URL --chunks 1000000 [--events 2000000] [--runs 200]

Works on a file copy of the kept benchmark database gk_bench_<chunks> (`search --keep` builds it;
the copy is migrated to this revision and dropped at the end). Engagement is synthetic and
deterministic: ``--events`` events over the last 14 UTC days, 70 % views, 15 % clicks, 10 %
dwell (0-5 minutes), 5 % reactions, on objects drawn log-uniformly by rank (a few objects get
most of it, a long tail a little), written as the daily rows record_engagement keeps; the kept
window score (engagement_window) is then moved from day -13 to today's window by
``_engagement_move_window``, the step the first event of a day runs (timed). record_engagement
itself is timed on ``--writes`` calls.

For each reader (r100 ~ all, r50 ~ half, r5 ~ 5 % of the corpus) and each case (no filter, one
board, one content type), ``--runs`` calls of each mode after a warm-up, timed at the client
(Unix socket): p50 / p95 / mean ms. The reference arm in the same run is the same feed without
the predicate (every live object): the ratio is what the predicate costs. Every answer is checked
against the reader's visible set computed here without groundkit._visible_object: no invisible
object, and exactly the top k.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import psycopg

import groundkit
from evals.bench.common import READERS, copy_of, log, pct, server

HOME_SQL = "select object_id, score from groundkit.home(%s, %s, %s, %s::text[], %s::text[])"

# The engagement of the benchmark: log-uniform ranks over the live objects, 14 days, four kinds.
ENGAGEMENT_SQL = """
with objs as (
    select row_number() over (order by o.object_id) - 1 as i, o.object_id
      from groundkit.objects o where o.state = 'live'
),
n as (select count(*)::double precision as n from objs),
ev as (
    select floor(exp(random() * ln(n.n)))::bigint - 1 as i,
           (now() at time zone 'UTC')::date - floor(random() * 14)::integer as day,
           random() as r, floor(random() * 300000)::bigint as dwell
      from generate_series(1, %(events)s) g, n
),
typed as (
    select ev.i, ev.day,
           case when ev.r < 0.70 then 'view' when ev.r < 0.85 then 'click'
                when ev.r < 0.95 then 'dwell_ms' else 'reaction' end as kind, ev.dwell
      from ev
)
insert into groundkit.engagement_daily (object_id, day, views, clicks, reactions, dwell_ms, score)
select o.object_id, t.day,
       count(*) filter (where t.kind = 'view'), count(*) filter (where t.kind = 'click'),
       count(*) filter (where t.kind = 'reaction'), coalesce(sum(t.dwell) filter (where t.kind = 'dwell_ms'), 0),
       sum(groundkit._event_score(t.kind, case when t.kind = 'dwell_ms' then t.dwell end))
  from typed t join objs o on o.i = t.i
 group by o.object_id, t.day
"""

# The visible set, written out without groundkit._visible_object: the check of every answer.
VISIBLE_SQL = """
with r as (select m.member_sub, t.rank from groundkit.members m join groundkit.tiers t on t.name = m.tier
            where m.member_sub = %(reader)s and m.status = 'active')
select o.object_id, o.log_seq, coalesce(w.score, 0) as score
  from groundkit.objects o
  join groundkit.spaces s on s.space_id = o.space_id
  join groundkit.tiers ot on ot.name = o.tier_visibility
  join groundkit.tiers st on st.name = s.min_tier
  cross join r
  left join (select e.object_id, sum(e.score) as score from groundkit.engagement_daily e
              where e.day >= groundkit._home_since() group by e.object_id) w on w.object_id = o.object_id
 where o.state = 'live' and r.rank >= ot.rank and r.rank >= st.rank
   and (not s.private or exists (select 1 from groundkit.space_grants g
                                  where g.space_id = s.space_id and g.member_sub = r.member_sub))
   and (not o.owner_only or o.owner_sub = r.member_sub)
   and (%(spaces)s::text[] is null or o.space_id = any (%(spaces)s::text[]))
   and (%(types)s::text[] is null or o.content_type = any (%(types)s::text[]))
"""

# The reference arms: the same feeds over every live object, no predicate.
RAW_LATEST_SQL = """
select o.object_id, null::double precision from groundkit.objects o
  join groundkit.content_log l on l.seq = o.log_seq
 where o.state = 'live' and (%(spaces)s::text[] is null or o.space_id = any (%(spaces)s::text[]))
   and (%(types)s::text[] is null or o.content_type = any (%(types)s::text[]))
 order by o.log_seq desc limit %(k)s
"""
RAW_TOP_SQL = """
select o.object_id, w.score::double precision from groundkit.engagement_window w
  join groundkit.objects o on o.object_id = w.object_id and o.state = 'live'
  join groundkit.content_log l on l.seq = o.log_seq
 where (%(spaces)s::text[] is null or o.space_id = any (%(spaces)s::text[]))
   and (%(types)s::text[] is null or o.content_type = any (%(types)s::text[]))
 order by w.score desc, o.log_seq desc limit %(k)s
"""

Case = tuple[str, list[str] | None, list[str] | None]  # (label, space_ids, content_types)


def cases(conn: psycopg.Connection[Any]) -> list[Case]:
    board = conn.execute("select o.space_id from groundkit.objects o where o.space_id like 'board-%%'"
                         " group by 1 order by count(*) desc limit 1").fetchone()
    out: list[Case] = [("all", None, None)]
    if board is not None:
        out.append((f"space {board[0]}", [str(board[0])], None))
    out.append(("type course_section", None, ["course_section"]))
    return out


def make_engagement(conn: psycopg.Connection[Any], events: int) -> dict[str, float]:
    """The synthetic engagement, and the window moved to today as record_engagement moves it."""
    conn.execute("select setseed(0.41)")
    t0 = time.perf_counter()
    conn.execute(ENGAGEMENT_SQL, {"events": events})
    load_s = time.perf_counter() - t0
    # The kept score as it stood 13 days ago's window, then moved to today's: the daily move.
    with conn.transaction():
        conn.execute("update groundkit.engagement_window_since set since = (now() at time zone 'UTC')::date - 13")
        conn.execute("insert into groundkit.engagement_window (object_id, score) select e.object_id, sum(e.score)"
                     " from groundkit.engagement_daily e group by 1 having sum(e.score) > 0")
    conn.execute("vacuum analyze groundkit.engagement_daily, groundkit.engagement_window")
    t0 = time.perf_counter()
    conn.execute("select groundkit._engagement_move_window(groundkit._home_since())")
    move_s = time.perf_counter() - t0
    conn.execute("vacuum analyze groundkit.engagement_window")
    row = conn.execute("select (select count(*) from groundkit.engagement_daily),"
                       " (select count(*) from groundkit.engagement_daily where day >= groundkit._home_since()),"
                       " (select count(*) from groundkit.engagement_window),"
                       " (select count(*) from groundkit.objects where state = 'live')").fetchone()
    assert row is not None
    return {"load_s": load_s, "move_s": move_s, "daily_rows": row[0], "window_daily_rows": row[1],
            "window_objects": row[2], "live_objects": row[3]}


def time_calls(run: Callable[[], object], runs: int) -> list[float]:
    for _ in range(min(20, runs)):
        run()
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        run()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def check(conn: psycopg.Connection[Any], reader: str, mode: str, case: Case, k: int,
          got: Sequence[tuple[Any, ...]]) -> None:
    """The answer is exactly the top k of the reader's visible set, computed independently."""
    _, spaces, types = case
    vis = conn.execute(VISIBLE_SQL, {"reader": reader, "spaces": spaces, "types": types}).fetchall()
    if mode == "latest":
        want = [r[0] for r in sorted(vis, key=lambda r: -r[1])[:k]]
    else:
        want = [r[0] for r in sorted(vis, key=lambda r: (-r[2], -r[1]))[:k]]
    ids = [r[0] for r in got]
    leaked = set(ids) - {r[0] for r in vis}
    assert not leaked, f"{reader} {mode} {case[0]}: invisible objects returned: {sorted(leaked)[:5]}"
    assert ids == want, f"{reader} {mode} {case[0]}: not the top {k} of the visible set"


def summary(ms: Sequence[float]) -> str:
    return f"{pct(ms, 50):6.2f} {pct(ms, 95):6.2f} {statistics.mean(ms):6.2f}"


def time_writes(conn: psycopg.Connection[Any], n: int) -> list[float]:
    ids = [r[0] for r in conn.execute(
        "select h.object_id from groundkit.home('r100', 'latest', 200) h").fetchall()]
    out = []
    for i in range(n):
        t0 = time.perf_counter()
        conn.execute("select groundkit.record_engagement(%s, 'r100', 'view')", (ids[i % len(ids)],))
        out.append((time.perf_counter() - t0) * 1000)
    return out


def run(dsn: str, args: argparse.Namespace) -> None:
    groundkit.migrate(dsn, gate=False)
    with psycopg.connect(dsn, autocommit=True) as conn:
        eng = make_engagement(conn, args.events)
        log(f"engagement: {eng}")
        print(f"home benchmark: {args.chunks:,} chunks, {eng['live_objects']:,} live objects; "
              f"{args.events:,} events over 14 days: {eng['daily_rows']:,} daily rows, "
              f"{eng['window_daily_rows']:,} in the 7-day window, {eng['window_objects']:,} objects scored "
              f"(loaded in {eng['load_s']:.0f} s; the daily window move took {eng['move_s'] * 1000:.0f} ms)")
        print(f"k = {args.k}, {args.runs} calls per row; ms p50 / p95 / mean; 'no predicate' is the same feed "
              "over every live object")
        print(f"{'reader':7} {'mode':7} {'case':22} {'home (predicate)':>21} {'no predicate':>21} {'p50 ratio':>9}")
        p50s: dict[str, list[float]] = {"latest": [], "top": []}
        for reader in READERS:
            for case in cases(conn):
                label, spaces, types = case
                for mode in ("latest", "top"):
                    params = (reader, mode, args.k, spaces, types)
                    check(conn, reader, mode, case, args.k, conn.execute(HOME_SQL, params).fetchall())
                    home = time_calls(lambda p=params: conn.execute(HOME_SQL, p).fetchall(), args.runs)  # type: ignore[misc]
                    raw_sql = RAW_LATEST_SQL if mode == "latest" else RAW_TOP_SQL
                    rp = {"spaces": spaces, "types": types, "k": args.k}
                    raw = time_calls(lambda p=rp, s=raw_sql: conn.execute(s, p).fetchall(), args.runs)  # type: ignore[misc]
                    p50s[mode].append(pct(home, 50))
                    print(f"{reader:7} {mode:7} {label:22} {summary(home):>21} {summary(raw):>21} "
                          f"{pct(home, 50) / pct(raw, 50):8.1f}x", flush=True)
        writes = time_writes(conn, args.writes)
        print(f"record_engagement: {args.writes} calls, ms p50 / p95 / mean {summary(writes)}")
        for mode, xs in p50s.items():
            print(f"worst p50 of {mode}: {max(xs):.2f} ms")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m evals.bench home", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsn", required=True, help="the server holding the kept gk_bench_<chunks>")
    ap.add_argument("--chunks", type=int, default=100_000, help="which gk_bench_<chunks> database")
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--writes", type=int, default=500)
    ap.add_argument("--k", type=int, default=20)
    args = ap.parse_args(argv)
    with server(args.dsn) as srv, copy_of(srv, f"gk_bench_{args.chunks}", "home") as dsn:
        run(dsn, args)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
