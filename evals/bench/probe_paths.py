"""Two ways to look a probed term up for a set of candidate chunks, timed side by side.

    python evals/bench/bench_search.py --dsn URL --chunks 1000000 --keep    # builds gk_bench_1000000
    python evals/bench/probe_paths.py --dsn URL --chunks 1000000

The threshold rounds (docs/bm25.md) read the ranges of some query terms and then look the other
("probed") terms up by primary key for the chunks those ranges found. This script takes pairs
of terms from a kept benchmark database, uses the top N postings (by impact, in the r100
reader's buckets) of the first as the candidates, and probes the second for them, each way in
turn (alternating, fastest of --repeat runs), inside a PL/pgSQL function so that the candidates
are an array parameter as in the search:

- ``lookups``: one primary-key lookup per candidate (a LATERAL join), candidates in id order;
- ``= any``: one primary-key scan with ``chunk_id = any(ids)`` for all of them, joined back to
  the candidates by a group by (as ``_search_pruned`` does when the candidates are dense).

It prints, per pair, the density (postings of the probed term per candidate), the two times in
ms and per candidate, and their ratio. The candidate array's own cost (an ``unnest`` alone) is
measured too and subtracted. The functions are created in a temporary schema of the session.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

FUNCTIONS = {  # arm -> body of a pg_temp function (ids bigint[], t text) returning a count
    "base": """
        select count(*) from unnest(ids) as u(id)""",
    "lookups": """
        select count(pp.tf)
          from (select u.id from unnest(ids) as u(id) order by u.id) u
          left join lateral (select p1.tf from groundkit.postings p1
                              where p1.term = t and p1.chunk_id = u.id) pp on true""",
    "= any": """
        select count(g.tf)
          from (select g.id, max(g.tf) as tf
                  from (select u.id, null::integer as tf from unnest(ids) as u(id)
                        union all
                        select p1.chunk_id, p1.tf from groundkit.postings p1
                         where p1.term = t and p1.chunk_id = any (ids)) g
                 group by g.id) g""",
}

# (read term's candidates, probed term): chosen for a spread of densities at 1M chunks; terms
# missing from a smaller database are skipped.
DEFAULT_PAIRS = [
    ("bairi", "nestotaiba", 3000),
    ("kodapla", "foupashounan", 6000),
    ("duki", "steda", 20000),
    ("gomolosa", "daito", 5000),
    ("raifaipu", "stuplogur", 1000),
    ("zaploumo", "kodapla", 500),
    ("gashu", "steda", 100),
]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsn", required=True, help="the server bench_search.py --keep built its database on")
    ap.add_argument("--chunks", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)

    dsn = make_conninfo(args.dsn, dbname=f"gk_bench_{args.chunks}")
    with psycopg.connect(dsn, autocommit=True) as conn:
        for i, body in enumerate(FUNCTIONS.values()):
            conn.execute(f"""
                create or replace function pg_temp.probe_{i}(ids bigint[], t text) returns bigint
                language plpgsql as $f$ declare n bigint; begin {body} into n; return n; end $f$""")
        # The r100 reader's buckets, as _search_pruned computes them.
        buckets = conn.execute("""
            select array(select t.rank::bigint from groundkit.tiers t
                          where t.rank <= (select r.rank from groundkit._reader('r100') r))
                   || array(select groundkit._vis_key(false, null, true, g.space_id, null)
                              from groundkit.space_grants g join groundkit.spaces s on s.space_id = g.space_id
                             where g.member_sub = 'r100' and s.private)
                   || groundkit._vis_key(true, 'r100', false, null, null)""").fetchone()
        assert buckets is not None
        print("| read term (candidates) | probed term (postings) | postings per candidate | lookups ms (us each) "
              "| = any ms (us each) | lookups / = any |")
        print("|---|---|---|---|---|---|")
        for read, probed, n in DEFAULT_PAIRS:
            ids = [r[0] for r in conn.execute(
                "select chunk_id from groundkit.postings where term = %s and vis_key = any(%s) "
                "order by imp desc limit %s", (read, buckets[0], n))]
            df_row = conn.execute("select count(*) from groundkit.postings where term = %s", (probed,)).fetchone()
            df = int(df_row[0]) if df_row else 0
            if not ids or df == 0:
                print(f"| {read} | {probed} | skipped: not in this database | | | |", file=sys.stderr)
                continue
            best: dict[str, float] = {}
            for i in range(args.repeat):
                order = list(FUNCTIONS) if i % 2 == 0 else list(reversed(FUNCTIONS))
                for name in order:
                    fn = f"pg_temp.probe_{list(FUNCTIONS).index(name)}"
                    params: Any = (ids, probed)
                    t0 = time.perf_counter()
                    conn.execute(f"select {fn}(%s, %s)", params).fetchone()
                    ms = (time.perf_counter() - t0) * 1000
                    best[name] = min(best.get(name, ms), ms)
            lk = max(best["lookups"] - best["base"], 0.0)
            an = max(best["= any"] - best["base"], 0.0)
            per = 1000 / len(ids)
            ratio = f"{lk / an:.2f}x" if an > 0 else "n/a"
            print(f"| {read} ({len(ids)}) | {probed} ({df}) | {df / len(ids):.0f} | {lk:.1f} ({lk * per:.2f}) "
                  f"| {an:.1f} ({an * per:.2f}) | {ratio} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
