"""How much of a search is reading postings, and what a round told the answer's k-th score costs.

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
debug message, counts every R's postings, and times, fastest of --repeat runs each:

- reading the cheapest R's postings in one statement (index-only scans of the impact index;
  nothing summed, nothing completed, no predicate): a floor for the reading alone;
- the round a perfect guess would run with that R, in one function call (pg_temp.gk_complete):
  R's ranges summed chunk by chunk (joined by chunk id for two terms), the chunks that can reach
  theta kept, then the other terms looked up for them largest maximum first, as the threshold
  rounds do, dropping a chunk once it cannot reach theta; and the same with every term read
  down to its cut and nothing looked up. The lesser of the two is "the floor": what one round
  costs when theta is known, with no first statement (maxima, x_lb), no range counts, no plan
  choice and no failed rounds. It is not a bound on every plan: a search that reads more
  ranges at a higher level can beat it (docs/bm25.md, "The floor of a round told θ");
- tantivy over the same corpus (in process, no permissions; --no-tantivy skips it), for the
  ratios.

Printed per reader: p50 / p95 / mean of each arm, the search over the floor, what the floor
reads, keeps and looks up, and each arm's p50 over tantivy's. --per-query writes every query's
figures as JSON lines.
"""

from __future__ import annotations

import argparse
import itertools
import json
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
from bench_search import READERS, kept_database_args, log, p50_p95_mean, pct, tantivy_index, tantivy_time
from corpus import Corpus

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


# The floor's completion, as a function of the session (pg_temp): sum the read terms' ranges chunk by
# chunk, keep the chunks whose known part plus the probed terms' maxima reaches theta, then look the
# probed terms up for them, largest maximum first, dropping a chunk as soon as it cannot reach theta
# (the threshold rounds' own probing, sql/060_search.sql, arrays unnested in select lists as there,
# without their rounds, counts or plan choices; with the term bits, docs/bm25.md "Term bits", where
# the search uses them). Returns how many chunks reach theta, how many were kept before the
# lookups, and how many lookups were made.
COMPLETE_FN = """
create or replace function pg_temp.gk_complete(
    terms text[], ws float8[], cuts float8[], rd boolean[], maxcs float8[], dfs float8[],
    buckets bigint[], k1 float8, b float8, avgdl float8, theta float8, probe boolean)
returns bigint[] language plpgsql as $fn$
declare
    c_ids bigint[]; c_known float8[]; c_dl integer[];
    p_max float8 := (select coalesce(sum(x.mc), 0) from unnest(maxcs, rd) as x(mc, r) where not x.r);
    rest float8;
    j integer;
    n_cand bigint;
    n_probes bigint := 0;
    two integer[];
    bm bigint[];
    bw bigint;
    n_looked bigint;
begin
    if (select count(*) from unnest(rd) as x(r) where x.r) = 1 then
        -- (one range: a chunk once, nothing to group)
        j := (select x.i from unnest(rd) with ordinality as x(r, i) where x.r);
        select coalesce(array_agg(c.chunk_id) filter (where c.known + p_max >= theta), '{}'),
               coalesce(array_agg(c.known) filter (where c.known + p_max >= theta), '{}'),
               coalesce(array_agg(c.dl) filter (where c.known + p_max >= theta), '{}')
          into c_ids, c_known, c_dl
          from (select p.chunk_id, ws[j] * p.tf / (p.tf + k1 * (1 - b + b * p.doc_len / avgdl)) as known,
                       p.doc_len as dl
                  from groundkit.postings p
                 where p.term = terms[j] and p.vis_key = any (buckets) and p.imp >= cuts[j]) c;
    elsif (select count(*) from unnest(rd) as x(r) where x.r) = 2 then
        -- (two ranges: joined by chunk id, as the threshold rounds read them; a full join, a chunk may be
        -- in one range only)
        select array_agg(x.i order by x.i) into two from unnest(rd) with ordinality as x(r, i) where x.r;
        select coalesce(array_agg(z.id) filter (where z.known + p_max >= theta), '{}'),
               coalesce(array_agg(z.known) filter (where z.known + p_max >= theta), '{}'),
               coalesce(array_agg(z.dl) filter (where z.known + p_max >= theta), '{}')
          into c_ids, c_known, c_dl
          from (select coalesce(a.chunk_id, c.chunk_id) as id, coalesce(a.doc_len, c.doc_len) as dl,
                       coalesce(ws[two[1]] * a.tf / (a.tf + k1 * (1 - b + b * a.doc_len / avgdl)), 0)
                       + coalesce(ws[two[2]] * c.tf / (c.tf + k1 * (1 - b + b * c.doc_len / avgdl)), 0) as known
                  from (select p.chunk_id, p.tf, p.doc_len from groundkit.postings p
                         where p.term = terms[two[1]] and p.vis_key = any (buckets) and p.imp >= cuts[two[1]]) a
                  full join (select p.chunk_id, p.tf, p.doc_len from groundkit.postings p
                              where p.term = terms[two[2]] and p.vis_key = any (buckets)
                                and p.imp >= cuts[two[2]]) c
                    on a.chunk_id = c.chunk_id
                offset 0) z;
    else
        with q as (select x.term, x.w, x.cut from unnest(terms, ws, cuts, rd) as x(term, w, cut, r) where x.r),
        cand as (
            select p.chunk_id, sum(q.w * p.tf / (p.tf + k1 * (1 - b + b * p.doc_len / avgdl))) as known,
                   max(p.doc_len) as dl
              from q join groundkit.postings p on p.term = q.term and p.vis_key = any (buckets) and p.imp >= q.cut
             group by p.chunk_id)
        select coalesce(array_agg(c.chunk_id) filter (where c.known + p_max >= theta), '{}'),
               coalesce(array_agg(c.known) filter (where c.known + p_max >= theta), '{}'),
               coalesce(array_agg(c.dl) filter (where c.known + p_max >= theta), '{}')
          into c_ids, c_known, c_dl
          from cand c;
    end if;
    n_cand := cardinality(c_ids);
    rest := p_max;
    for j in select x.i from unnest(maxcs, rd) with ordinality as x(mc, r, i) where not x.r
              order by x.mc desc, x.i loop
        exit when cardinality(c_ids) = 0 or not probe;
        rest := rest - maxcs[j];
        -- (term bits, as the search uses them: only the chunks holding the term are looked up)
        bm := null;
        select b.words, b.w_max into bm, bw from groundkit._probe_bits(terms[j], dfs[j]) b;
        if bm is not null then
            select coalesce(array_agg(z.id) filter (where z.known + rest >= theta), '{}'),
                   coalesce(array_agg(z.known) filter (where z.known + rest >= theta), '{}'),
                   coalesce(array_agg(z.dl) filter (where z.known + rest >= theta), '{}'),
                   count(*) filter (where not z.absent)
              into c_ids, c_known, c_dl, n_looked
              from (select v.id, v.dl, y.absent,
                           v.known + case when y.absent then 0
                                          else coalesce((select ws[j] * pp.tf
                                                                / (pp.tf + k1 * (1 - b + b * v.dl / avgdl))
                                                           from groundkit.postings pp
                                                          where pp.term = terms[j] and pp.chunk_id = v.id), 0)
                                     end as known
                      from (select unnest(c_ids) as id, unnest(c_known) as known, unnest(c_dl) as dl) v
                     cross join lateral (
                           select v.id <= bw and (bm[(v.id >> 6) + 1] >> (v.id & 63)::integer) & 1 = 0 as absent) y
                    offset 0) z;
            n_probes := n_probes + n_looked;
            continue;
        end if;
        n_probes := n_probes + cardinality(c_ids);
        if cardinality(c_ids)::float8 * 200 >= dfs[j] then
            select coalesce(array_agg(z.id), '{}'), coalesce(array_agg(z.known), '{}'), coalesce(array_agg(z.dl), '{}')
              into c_ids, c_known, c_dl
              from (select g.id, max(g.dl) as dl,
                           max(g.known) + coalesce(ws[j] * max(g.tf)
                                                   / (max(g.tf) + k1 * (1 - b + b * max(g.dl) / avgdl)), 0) as known
                      from (select unnest(c_ids) as id, unnest(c_known) as known, unnest(c_dl) as dl,
                                   null::integer as tf
                            union all
                            select p1.chunk_id, null, null, p1.tf from groundkit._postings_of(terms[j], c_ids) p1) g
                     group by g.id) z
             where z.known + rest >= theta;
        else
            select coalesce(array_agg(z.id), '{}'), coalesce(array_agg(z.known), '{}'), coalesce(array_agg(z.dl), '{}')
              into c_ids, c_known, c_dl
              from (select u.id, u.dl,
                           u.known + coalesce(ws[j] * pp.tf / (pp.tf + k1 * (1 - b + b * u.dl / avgdl)), 0) as known
                      from (select unnest(c_ids) as id, unnest(c_known) as known, unnest(c_dl) as dl order by 1) u
                      left join lateral (select p1.tf from groundkit.postings p1
                                          where p1.term = terms[j] and p1.chunk_id = u.id) pp on true) z
             where z.known + rest >= theta;
        end if;
    end loop;
    return array[cardinality(c_ids), n_cand, n_probes];
end
$fn$
"""

COMPLETE_SQL = """
select pg_temp.gk_complete(%(terms)s, %(ws)s, %(cuts)s, %(rd)s, %(maxcs)s, %(dfs)s, %(buckets)s,
                           %(k1)s, %(b)s, %(avgdl)s, %(theta)s, %(probe)s)
"""

DF_SQL = """
select coalesce(sum(ts.df), 0) from groundkit.term_stats ts, groundkit._reader(%s) r
 where ts.term = %s and ts.scope <= r.rank
"""

AVGDL_SQL = """
select c.bm25_k1, c.bm25_b,
       (select case when sum(s.n_chunks) > 0 and sum(s.total_len) > 0
                    then sum(s.total_len)::float8 / sum(s.n_chunks) else 1 end
          from groundkit.scope_stats s where s.scope <= r.rank)
  from groundkit.config c, groundkit._reader(%s) r
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
    k1, b, avgdl = conn.execute(AVGDL_SQL, (reader,)).fetchone()  # type: ignore[misc]
    dfs = [float(conn.execute(DF_SQL, (reader, t)).fetchone()[0]) for t in terms]  # type: ignore[index]
    params = {"terms": terms, "ws": ws, "cuts": cuts, "rd": [i in best for i in range(nt)], "maxcs": maxcs,
              "dfs": dfs, "buckets": buckets, "k1": k1, "b": b, "avgdl": avgdl, "theta": theta, "probe": False}
    sum_ms, _ = fastest(conn, COMPLETE_SQL, params, repeat)
    complete_ms, out = fastest(conn, COMPLETE_SQL, {**params, "probe": True}, repeat)
    reached, cands, probes = out[0][0]
    # the other extreme: every term read down to its cut, nothing looked up
    all_ms, out_all = fastest(conn, COMPLETE_SQL, {**params, "rd": [True] * nt}, repeat)
    for n in (reached, out_all[0][0][0]):
        if n < k:
            raise SystemExit(f"{reader} {query!r}: the floor's completion found {n} chunks reaching theta, "
                             f"fewer than k = {k}")
    return {"search_ms": search_ms, "read_ms": read_ms, "sum_ms": sum_ms, "complete_ms": complete_ms,
            "all_ms": all_ms, "floor_ms": min(complete_ms, all_ms), "postings": float(sum(sizes[i] for i in best)),
            "candidates": float(cands), "probes": float(probes)}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    kept_database_args(ap)
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per arm and query; the fastest counts")
    ap.add_argument("--warm-up", type=int, default=30)
    ap.add_argument("--no-tantivy", action="store_true", help="skip building tantivy's index and timing it")
    ap.add_argument("--per-query", type=Path, help="also write one JSON line per reader and query here")
    args = ap.parse_args(argv)

    dsn = make_conninfo(args.dsn, dbname=f"gk_bench_{args.chunks}")
    groundkit.migrate(dsn)
    queries = bench_queries(args.chunks, args.queries, args.seed)
    out = sys.stdout
    per_query = args.per_query.open("w") if args.per_query else None
    with psycopg.connect(dsn, autocommit=True) as conn:
        mid = [q for q in queries
               if 2 <= len(conn.execute("select * from groundkit.query_terms(%s)", (q,)).fetchall()) <= 6]
        tv: dict[str, float] = {}
        if not args.no_tantivy:
            index, _ = tantivy_index(Corpus(seed=args.seed), args.chunks)
            for q in mid[: args.warm_up]:
                tantivy_time(index, q, args.k)
            tv = {q: 1000 * tantivy_time(index, q, args.k, args.repeat) for q in mid}
            del index
        conn.execute(COMPLETE_FN)
        for q in queries[: args.warm_up]:
            conn.execute("select * from groundkit.search('r100', %s, %s)", (q, args.k)).fetchall()
        res: dict[str, list[dict[str, Any]]] = {}
        for reader in READERS:
            rs = res[reader] = []
            for i, q in enumerate(mid):
                r = floor(conn, reader, q, args.k, args.repeat)
                if r is not None:
                    rs.append({"query": q, **r})
                    if per_query:
                        per_query.write(json.dumps({"reader": reader, **rs[-1], "tantivy_ms": tv.get(q)}) + "\n")
                log(f"  {reader}: {i + 1}/{len(mid)}")
    out.write(f"\n{len(mid)} queries of 2-6 terms, k = {args.k}, database gk_bench_{args.chunks}, fastest of "
              f"{args.repeat} runs each; queries with fewer than k matches are left out. p50 / p95 / mean ms:\n\n"
              "| reader | queries | search | reading the fewest postings | reading and summing them "
              "| that, completed by lookups | every range read and summed, no lookups | floor: the lesser of the two "
              "| search / floor (p50, mean) |\n|---|---|---|---|---|---|---|---|---|\n")
    for reader, rs in res.items():
        s, f = [r["search_ms"] for r in rs], [r["floor_ms"] for r in rs]
        out.write(f"| {reader} | {len(rs)} | {p50_p95_mean(s, 1)} | {p50_p95_mean([r['read_ms'] for r in rs], 2)} "
                  f"| {p50_p95_mean([r['sum_ms'] for r in rs], 2)} | {p50_p95_mean([r['complete_ms'] for r in rs], 2)} "
                  f"| {p50_p95_mean([r['all_ms'] for r in rs], 2)} | {p50_p95_mean(f, 2)} "
                  f"| {pct(s, 50) / pct(f, 50):.2f}x, {statistics.mean(s) / statistics.mean(f):.2f}x |\n")
    out.write("\nWhat the floor reads and completes, p50 / p95 (lookups: the probes made, after term bits spared "
              "the rest; us per lookup: completing less summing, bit tests included, over the lookups; median "
              "of the queries that made at least 100):\n\n"
              "| reader | postings read | candidates | lookups | us per lookup |\n|---|---|---|---|---|\n")
    for reader, rs in res.items():
        per = [1000 * (r["complete_ms"] - r["sum_ms"]) / r["probes"] for r in rs if r["probes"] >= 100]
        n, c, p = ([r[x] for r in rs] for x in ("postings", "candidates", "probes"))
        out.write(f"| {reader} | {pct(n, 50):,.0f} / {pct(n, 95):,.0f} | {pct(c, 50):,.0f} / {pct(c, 95):,.0f} "
                  f"| {pct(p, 50):,.0f} / {pct(p, 95):,.0f} "
                  f"| {statistics.median(per) if per else float('nan'):.2f} |\n")
    if tv:
        out.write("\ntantivy (in process, no permissions; the same queries, fastest of the same runs), and each "
                  "arm's p50 over tantivy's p50 (the queries each reader kept):\n\n"
                  "| reader | tantivy p50 / p95 / mean ms | search / tantivy | floor / tantivy |\n|---|---|---|---|\n")
        for reader, rs in res.items():
            t = [tv[r["query"]] for r in rs]
            out.write(f"| {reader} | {p50_p95_mean(t, 2)} | {pct([r['search_ms'] for r in rs], 50) / pct(t, 50):.1f}x "
                      f"| {pct([r['floor_ms'] for r in rs], 50) / pct(t, 50):.1f}x |\n")
    if per_query:
        per_query.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
