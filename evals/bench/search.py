"""BM25 speed benchmark: groundkit.search vs ts_rank_cd vs tantivy, and ingest throughput.

    python -m evals.bench search --chunks 10000 100000 1000000
    python -m evals.bench search --dsn URL --chunks 1000000 --keep    # keeps gk_bench_1000000

For each size, in one run: a fresh database on a throwaway embedded PostgreSQL 18 (or --dsn),
the synthetic community corpus of evals/bench/corpus.py loaded through the bulk path
(groundkit.put_objects), then

- search latency p50/p95 of groundkit.search for readers who see ~100 %, ~50 % and ~5 %, in
  --passes passes over the same queries, each query timed once per pass: the first pass is the
  main table (after a checkpoint and a 50-query warm-up, with what the load left in the buffer
  cache), the last one is reported as warm, with the blocks each pass read into shared_buffers;
- the same queries through ts_rank_cd (GIN index on chunks.tsv, OR of the query lexemes) with
  the same permission predicate inside the query;
- tantivy in process over the same chunks, no permissions (engine-speed reference), timed twice:
  alone after the other arms, which is the table's column (machine drift over those minutes moves
  that ratio), and then in turns with groundkit.search (--turns rounds after one untimed round:
  each 2-6-term query once through each engine, in alternating order, both seeing the same
  machine at the same moment);
- optionally the exhaustive BM25 path (--exhaustive) to show what pruning saves;
- ingest (evals/bench/ingest.py): chunks/s through the bulk path, through put_object one object per transaction, and
  with 1, 2 and 4 concurrent put_object writers (with how often they waited on a lock); the
  put_object figures include the merges of the pending part, the writers' own and one
  merge_pending() at the end for what they left (docs/bm25.md, "The pending part");
- retier_object, delete_object and redact_object, one object per transaction (20 each, on
  objects put_object wrote): mean and max ms;
- the machine's CPU steal during the load, each pass and tantivy's timings (Linux /proc/stat):
  this machine is a shared virtual one, and its speed moves between runs;
- before and after each reader's pass, how much two busy backends get done at once relative to
  one alone (2.0: both CPUs free). The broad reader's slowest queries read in two processes
  (docs/bm25.md, "Merged reads in parallel") and tantivy in one, so a second CPU taken by
  another tenant of the host slows groundkit's tail and not tantivy's; CPU steal does not always
  show that.

Ratios are printed next to absolute times. Progress lines go to stderr with known totals.
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import psycopg

from evals.bench.common import (
    READERS,
    Progress,
    drop_db,
    log,
    pct,
    populate_authority,
    server,
    setup_db,
    timed,
)
from evals.bench.corpus import Corpus, Obj
from evals.bench.ingest import add_write_args, bulk_load, report_load, writes_on_top

# The same reader resolution and permission predicate as groundkit.search, by calling them.
VISIBLE_SQL = """
    exists (select 1 from reader r
             cross join lateral groundkit._visible_chunk(c.chunk_id, r.rank, r.member_sub, null, null) v)
"""
READER_CTE = """
    reader as (select r.member_sub, r.rank from groundkit._reader(%(reader)s) r)
"""
# Constant fragments only; every value is a bound parameter.
TS_RANK_CD_SQL = (
    "with " + READER_CTE + """,
    q as (select string_agg(quote_literal(term), ' | ')::tsquery as q from groundkit.query_terms(%(query)s))
    select c.chunk_id, ts_rank_cd(c.tsv, q.q) as score
      from q, groundkit.chunks c
     where c.tsv @@ q.q and """ + VISIBLE_SQL + """
     order by score desc, c.object_id, c.chunk_seq
     limit %(k)s"""  # noqa: S608
)
VISIBLE_COUNT_SQL = "with " + READER_CTE + " select count(*) from groundkit.chunks c where " + VISIBLE_SQL  # noqa: S608


def cpu_times() -> tuple[int, int] | None:
    """(all, steal) CPU time of the machine so far, in clock ticks, from /proc/stat (Linux; None
    elsewhere). Steal is time the hypervisor gave this machine's virtual CPUs to someone else: a
    slow stretch that steal explains shows here."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    # user nice system idle iowait irq softirq steal [guest guest_nice, already counted in user]
    return sum(fields[:8]), fields[7] if len(fields) > 7 else 0


def steal_share(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    if before is None or after is None or after[0] <= before[0]:
        return None
    return (after[1] - before[1]) / (after[0] - before[0])


SCALING_SQL = "select sum(sqrt(i::float8) * ln(i::float8 + 1)) from generate_series(1, 1000000) i"


def two_backend_scaling(dsn: str) -> float:
    """What two busy backends get done at once relative to one alone: about 2.0 when both CPUs are
    free, less when something else takes part of one. A fixed CPU-bound statement without I/O
    (about 0.2 s), timed alone and then in two sessions at once; 2 x alone / wall time."""
    conns = [psycopg.connect(dsn, autocommit=True) for _ in range(2)]
    try:
        for c in conns:
            c.execute("set max_parallel_workers_per_gather = 0")
            c.execute(SCALING_SQL)
        t0 = time.perf_counter()
        conns[0].execute(SCALING_SQL)
        alone = time.perf_counter() - t0
        return 2 * alone / run_at_once([functools.partial(c.execute, SCALING_SQL) for c in conns])
    finally:
        for c in conns:
            c.close()


def run_at_once(jobs: Sequence[Callable[[], object]]) -> float:
    """Run every job in a thread of its own, all released at once; the wall seconds from release
    until the last is done. The first job's exception, if any, is raised (the others are still
    waited for)."""
    start = threading.Barrier(len(jobs) + 1)
    errors: list[BaseException] = []

    def run(job: Callable[[], object]) -> None:
        try:
            start.wait()
            job()
        except BaseException as exc:  # raised below, in the caller's thread
            errors.append(exc)
            start.abort()

    threads = [threading.Thread(target=run, args=(job,)) for job in jobs]
    for t in threads:
        t.start()
    try:
        start.wait()
    except threading.BrokenBarrierError:
        pass  # a job failed before the release; its error is raised below
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return wall


def groundkit_blocks(conn: psycopg.Connection[Any]) -> tuple[float, float]:
    """groundkit's blocks read into shared_buffers so far (from the OS or the disk: what a cold cache
    costs) and found there, this database. Flushes this backend's counts and clears the statistics
    snapshot first, so that other cumulative statistics read next on conn are fresh too."""
    conn.execute("select pg_stat_force_next_flush()")  # this backend's pending counts, at commit
    conn.execute("select pg_stat_clear_snapshot()")
    row = conn.execute(
        "select coalesce(sum(coalesce(heap_blks_read, 0) + coalesce(idx_blks_read, 0)"
        "                    + coalesce(toast_blks_read, 0) + coalesce(tidx_blks_read, 0)), 0),"
        "       coalesce(sum(coalesce(heap_blks_hit, 0) + coalesce(idx_blks_hit, 0)"
        "                    + coalesce(toast_blks_hit, 0) + coalesce(tidx_blks_hit, 0)), 0)"
        "  from pg_statio_all_tables where schemaname = 'groundkit'").fetchone()
    assert row is not None
    return float(row[0]), float(row[1])


def run_queries(conn: psycopg.Connection[Any], query_sql: str, reader: str, queries: Sequence[str], k: int,
                label: str) -> list[float]:
    prog = Progress(label, len(queries))
    out = []
    for i, q in enumerate(queries):
        t0 = time.perf_counter()
        conn.execute(query_sql, {"reader": reader, "query": q, "k": k}).fetchall()
        out.append(time.perf_counter() - t0)
        prog.update(i + 1)
    return out


def tantivy_index(corpus: Corpus, n_chunks: int) -> tuple[Any, float]:
    """tantivy's index of the corpus's first n_chunks chunks (en_stem), and how long it took to build."""
    import tantivy

    builder = tantivy.SchemaBuilder()
    builder.add_text_field("body", stored=False, tokenizer_name="en_stem")
    schema = builder.build()
    index = tantivy.Index(schema)
    writer = index.writer(heap_size=1_000_000_000, num_threads=2)
    prog = Progress("tantivy index (chunks)", n_chunks)
    t0 = time.perf_counter()
    done = 0
    for obj in corpus.objects(n_chunks):
        for p in obj.paragraphs:
            writer.add_document(tantivy.Document(body=obj.title + "\n" + p))
        done += len(obj.paragraphs)
        if done % 20_000 < len(obj.paragraphs):
            prog.update(done)
    writer.commit()
    writer.wait_merging_threads()
    build_s = time.perf_counter() - t0
    index.reload()
    return index, build_s


def tantivy_time(index: Any, query: str, k: int, repeat: int = 1) -> float:
    """Seconds to parse query and take its top k from index (the fastest of repeat runs)."""
    searcher = index.searcher()
    best = float("inf")
    for _ in range(repeat):
        t1 = time.perf_counter()
        parsed = index.parse_query(query, ["body"])
        searcher.search(parsed, k).hits  # noqa: B018 - the work being timed
        best = min(best, time.perf_counter() - t1)
    return best


def tantivy_bench(corpus: Corpus, n_chunks: int, queries: Sequence[str], k: int) -> tuple[dict[str, Any], Any]:
    """tantivy's times for queries, alone, and its index (for the rounds in turns)."""
    index, build_s = tantivy_index(corpus, n_chunks)
    lat = [tantivy_time(index, q, k) for q in queries]
    return {"build_s": build_s, "chunks_per_s": n_chunks / build_s, "lat": lat}, index


SEARCH_IDS_SQL = "select object_id, chunk_seq from groundkit.search(%s, %s, %s)"
Turns = dict[str, tuple[list[list[float]], list[list[float]]]]
"""Per reader: groundkit's and tantivy's times (ms), one list per round, in the same query order."""


def search_ms(conn: psycopg.Connection[Any], reader: str, query: str, k: int) -> float:
    t0 = time.perf_counter()
    conn.execute(SEARCH_IDS_SQL, (reader, query, k)).fetchall()
    return 1000 * (time.perf_counter() - t0)


def in_turns(conn: psycopg.Connection[Any], index: Any, queries: Sequence[str], k: int, rounds: int,
             warm_up_rounds: int = 1, seed: int = 7,
             on_timing: Callable[[int, str, str, float, float], None] | None = None) -> Turns:
    """groundkit.search and tantivy in turns: in every round each query runs once through tantivy and
    once through groundkit.search for each reader, in alternating order, the queries shuffled anew
    each round, so both engines see the same machine at the same moment. ``warm_up_rounds``
    untimed rounds come first: building tantivy's index takes memory that held the database's
    pages. ``on_timing(round, reader, query, groundkit_ms, tantivy_ms)`` sees every timing."""
    for _ in range(warm_up_rounds):
        for reader in READERS:
            for q in queries:
                search_ms(conn, reader, q, k)
                tantivy_time(index, q, k)
    rng = random.Random(seed)
    out: Turns = {r: ([], []) for r in READERS}
    for rnd in range(rounds):
        order = list(queries)
        rng.shuffle(order)
        for reader in READERS:
            g_round: list[float] = []
            t_round: list[float] = []
            for i, q in enumerate(order):
                if (i + rnd) % 2 == 0:
                    g = search_ms(conn, reader, q, k)
                    t = 1000 * tantivy_time(index, q, k)
                else:
                    t = 1000 * tantivy_time(index, q, k)
                    g = search_ms(conn, reader, q, k)
                g_round.append(g)
                t_round.append(t)
                if on_timing is not None:
                    on_timing(rnd + 1, reader, q, g, t)
            out[reader][0].append(g_round)
            out[reader][1].append(t_round)
            log(f"  in turns, round {rnd + 1}/{rounds} {reader}: groundkit p50 {pct(g_round, 50):.2f} ms, "
                f"tantivy p50 {pct(t_round, 50):.2f} ms")
    return out


def turns_summary(gk: Sequence[float], tv: Sequence[float]) -> dict[str, float]:
    """p50s of both engines' times (ms) in turns, the ratio of those p50s (the target's measure),
    and the median and geometric mean of the per-query ratios."""
    ratios = [g / t for g, t in zip(gk, tv, strict=True)]
    return {"groundkit_p50_ms": pct(gk, 50), "tantivy_p50_ms": pct(tv, 50),
            "p50_ratio": pct(gk, 50) / pct(tv, 50), "median_ratio": pct(ratios, 50),
            "geomean_ratio": statistics.geometric_mean(ratios), "n": len(ratios)}


def summarize(lat: Sequence[float], mask: Sequence[bool] | None = None) -> dict[str, float]:
    xs = [x for x, m in zip(lat, mask, strict=True) if m] if mask is not None else list(lat)
    return {"p50_ms": 1000 * pct(xs, 50), "p95_ms": 1000 * pct(xs, 95),
            "mean_ms": 1000 * statistics.fmean(xs) if xs else float("nan"), "n": len(xs)}


def bench_size(server_dsn: str, n_chunks: int, args: argparse.Namespace) -> dict[str, Any]:
    name = f"gk_bench_{n_chunks}"
    log(f"== {n_chunks:,} chunks: database {name}")
    dsn = setup_db(server_dsn, name)
    corpus = Corpus(seed=args.seed)
    res: dict[str, Any] = {"chunks": n_chunks}
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            populate_authority(conn, corpus)
            sample: list[Obj] = []
            cpu0 = cpu_times()
            res["bulk"] = bulk_load(dsn, corpus, n_chunks, args.batch_chunks, args.loaders, sample)
            res["bulk"]["steal_share"] = steal_share(cpu0, cpu_times())
            log(f"  bulk: {res['bulk']['bulk_chunks_per_s']:,.0f} chunks/s")
            res["vacuum_s"], _ = timed(lambda: conn.execute("vacuum analyze"))
            # the postings lists' sketches, of the whole corpus (reindex_impacts made them after the
            # first 20,000 chunks); planning statistics, as vacuum analyze is the planner's
            res["sketch_s"], _ = timed(lambda: conn.execute("select groundkit.analyze_postings()"))
            # The load's writes reach the disk now, not while the first pass is timed: a checkpoint
            # writes the dirty buffers and syncs every file written (the kernel's dirty pages
            # too). Without it the first pass shared the two cores with gigabytes of writeback.
            res["checkpoint_s"], _ = timed(lambda: conn.execute("checkpoint"))
            res["postings"] = conn.execute("select count(*) from groundkit.postings").fetchone()[0]  # type: ignore[index]
            res["db_mb"] = float(conn.execute("select pg_database_size(current_database()) / 1e6").fetchone()[0])  # type: ignore[index]
            res["visible"] = {}
            total = conn.execute("select count(*) from groundkit.chunks").fetchone()[0]  # type: ignore[index]
            for r in READERS:
                vis = conn.execute(VISIBLE_COUNT_SQL, {"reader": r}).fetchone()[0]  # type: ignore[index]
                res["visible"][r] = vis / total

            queries = Corpus(seed=args.seed).queries(args.queries, sample)
            nterms = [len(conn.execute("select * from groundkit.query_terms(%s)", (q,)).fetchall()) for q in queries]
            mid = [2 <= n <= 6 for n in nterms]
            slow_n = min(args.slow_queries, len(queries))
            search_sql = "select * from groundkit.search(%(reader)s, %(query)s, %(k)s)"
            exh_sql = "select * from groundkit._search_exhaustive(%(reader)s, %(query)s, %(k)s)"
            # warm the caches once over a sample
            run_queries(conn, search_sql, "r100", queries[: min(50, len(queries))], args.k, "warm-up")

            res["search"] = {}
            res["passes"] = []
            for pas in range(1, args.passes + 1):
                this = {}
                for r in READERS:
                    scaling = two_backend_scaling(dsn)
                    before = groundkit_blocks(conn)[0]
                    cpu0 = cpu_times()
                    gk = run_queries(conn, search_sql, r, queries, args.k, f"groundkit.search {r} (pass {pas})")
                    this[r] = {"all": summarize(gk), "2-6": summarize(gk, mid), "lat": gk,
                               "blocks_read_per_query": (groundkit_blocks(conn)[0] - before) / len(queries),
                               "steal_share": steal_share(cpu0, cpu_times()),
                               "two_backends": [scaling, two_backend_scaling(dsn)]}
                res["passes"].append(this)
            # the first pass, as every run before --passes reported it; the last one: warm
            res["search"] = res["passes"][0]

            gin = "create index chunks_tsv_gin on groundkit.chunks using gin (tsv)"
            res["gin_s"], _ = timed(lambda: conn.execute(gin))
            conn.execute("analyze groundkit.chunks")
            res["ts_rank_cd"] = {}
            for r in READERS:
                lat = run_queries(conn, TS_RANK_CD_SQL, r, queries[:slow_n], args.k, f"ts_rank_cd {r}")
                res["ts_rank_cd"][r] = {"all": summarize(lat), "2-6": summarize(lat, mid[:slow_n]), "lat": lat}
            if args.exhaustive:
                res["exhaustive"] = {}
                for r in READERS:
                    lat = run_queries(conn, exh_sql, r, queries[:slow_n], args.k, f"exhaustive {r}")
                    res["exhaustive"][r] = {"all": summarize(lat), "2-6": summarize(lat, mid[:slow_n]), "lat": lat}
            conn.execute("drop index groundkit.chunks_tsv_gin")

        res.update(writes_on_top(dsn, args))

        if not args.no_tantivy:
            cpu0 = cpu_times()
            t, index = tantivy_bench(Corpus(seed=args.seed), n_chunks, queries, args.k)
            res["tantivy"] = {"build_s": t["build_s"], "chunks_per_s": t["chunks_per_s"],
                              "steal_share": steal_share(cpu0, cpu_times()), "all": summarize(t["lat"]),
                              "2-6": summarize(t["lat"], mid), "lat": t["lat"]}
            if args.turns > 0:
                scaling = two_backend_scaling(dsn)
                cpu0 = cpu_times()
                with psycopg.connect(dsn, autocommit=True) as conn:
                    turns = in_turns(conn, index, [q for q, m in zip(queries, mid, strict=True) if m], args.k,
                                     args.turns, seed=args.seed)
                res["turns"] = {r: {"rounds": [turns_summary(g, t) for g, t in zip(*turns[r], strict=True)],
                                    "all": turns_summary([x for g in turns[r][0] for x in g],
                                                         [x for t in turns[r][1] for x in t])}
                                for r in READERS}
                res["turns_steal_share"] = steal_share(cpu0, cpu_times())
                res["turns_two_backends"] = [scaling, two_backend_scaling(dsn)]
            del index
        res["mid_mask"] = mid
    finally:
        if not args.keep:
            drop_db(server_dsn, name)
    return res


def ratio_same_queries(slow: Sequence[float], fast: Sequence[float], mask: Sequence[bool]) -> tuple[float, float]:
    """(p50 ratio, mean ratio) of slow/fast over the queries both ran, restricted to mask."""
    n = min(len(slow), len(fast))
    s = [slow[i] for i in range(n) if mask[i]]
    f = [fast[i] for i in range(n) if mask[i]]
    if not s:
        return float("nan"), float("nan")
    return pct(s, 50) / pct(f, 50), statistics.fmean(s) / statistics.fmean(f)


def share(x: float | None) -> str:
    """A steal share as a percentage ('-' where /proc/stat was not there to read)."""
    return "-" if x is None else f"{100 * x:.1f}%"


def report(results: list[dict[str, Any]]) -> None:
    out = sys.stdout
    for r in results:
        n = r["chunks"]
        mid = r["mid_mask"]
        out.write(f"\n### {n:,} chunks ({r['postings']:,} postings, database {r['db_mb']:,.0f} MB)\n\n")
        out.write("| reader (sees) | groundkit p50 / p95 ms (all) | groundkit p50 / p95 ms (2-6 terms) "
                  "| ts_rank_cd p50 / p95 ms (2-6) | ts_rank_cd / groundkit (p50, mean; same queries) "
                  + ("| exhaustive p50 / p95 ms (2-6) " if "exhaustive" in r else "")
                  + "| groundkit / tantivy p50 (2-6) |\n")
        out.write("|---|---|---|---|---|" + ("---|" if "exhaustive" in r else "") + "---|\n")
        for reader, vis in r["visible"].items():
            g = r["search"][reader]
            t = r["ts_rank_cd"][reader]
            rp50, rmean = ratio_same_queries(t["lat"], g["lat"], mid)
            line = (f"| {reader} ({100 * vis:.0f}%) | {g['all']['p50_ms']:.1f} / {g['all']['p95_ms']:.1f} "
                    f"| {g['2-6']['p50_ms']:.1f} / {g['2-6']['p95_ms']:.1f} "
                    f"| {t['2-6']['p50_ms']:.1f} / {t['2-6']['p95_ms']:.1f} | {rp50:.1f}x, {rmean:.1f}x ")
            if "exhaustive" in r:
                e = r["exhaustive"][reader]
                line += f"| {e['2-6']['p50_ms']:.1f} / {e['2-6']['p95_ms']:.1f} "
            if "tantivy" in r:
                line += f"| {g['2-6']['p50_ms'] / r['tantivy']['2-6']['p50_ms']:.1f}x |\n"
            else:
                line += "| - |\n"
            out.write(line)
        if len(r.get("passes", [])) > 1:
            last = r["passes"][-1]
            out.write(f"\ngroundkit.search, warm: pass {len(r['passes'])} of {len(r['passes'])} over the same "
                      "queries (each query timed once per pass; the table above is pass 1)\n\n")
            out.write("| reader | p50 / p95 ms (all) | p50 / p95 / mean ms (2-6 terms) "
                      "| blocks read per query, pass 1 / last | groundkit / tantivy p50 (2-6) |\n"
                      "|---|---|---|---|---|\n")
            for reader in r["visible"]:
                g = last[reader]
                tv_ratio = (f"{g['2-6']['p50_ms'] / r['tantivy']['2-6']['p50_ms']:.1f}x" if "tantivy" in r else "-")
                out.write(f"| {reader} | {g['all']['p50_ms']:.1f} / {g['all']['p95_ms']:.1f} "
                          f"| {g['2-6']['p50_ms']:.1f} / {g['2-6']['p95_ms']:.1f} / {g['2-6']['mean_ms']:.1f} "
                          f"| {r['passes'][0][reader]['blocks_read_per_query']:,.0f} / "
                          f"{g['blocks_read_per_query']:,.0f} | {tv_ratio} |\n")
        if "tantivy" in r:
            tv = r["tantivy"]
            out.write(f"\ntantivy (no permissions, en_stem): p50 / p95 {tv['all']['p50_ms']:.2f} / "
                      f"{tv['all']['p95_ms']:.2f} ms all, {tv['2-6']['p50_ms']:.2f} / {tv['2-6']['p95_ms']:.2f} ms "
                      f"2-6 terms; index build {tv['chunks_per_s']:,.0f} chunks/s (timed minutes after groundkit's "
                      "passes)\n")
        if "turns" in r:
            rounds = len(next(iter(r["turns"].values()))["rounds"])
            out.write(f"\ngroundkit.search and tantivy in turns (2-6 terms, {rounds} rounds after one untimed, "
                      "each query through both engines in alternating order; the target's measure is the "
                      "ratio of the p50s)\n\n| reader | groundkit p50 ms | tantivy p50 ms | p50 / p50 "
                      "| per round | median / geomean of per-query ratios |\n|---|---|---|---|---|---|\n")
            for reader, v in r["turns"].items():
                a = v["all"]
                per_round = ", ".join(f"{x['p50_ratio']:.2f}x" for x in v["rounds"])
                out.write(f"| {reader} | {a['groundkit_p50_ms']:.2f} | {a['tantivy_p50_ms']:.2f} "
                          f"| {a['p50_ratio']:.2f}x | {per_round} "
                          f"| {a['median_ratio']:.2f}x / {a['geomean_ratio']:.2f}x |\n")
        steals = [f"pass {i} " + " / ".join(share(p[reader].get("steal_share")) for reader in r["visible"])
                  for i, p in enumerate(r.get("passes", []), 1)]
        out.write("\nCPU steal (/proc/stat: time the hypervisor gave this machine's CPUs to others), r100 / r50 / "
                  "r5: " + ", ".join(steals)
                  + f"; bulk load {share(r['bulk'].get('steal_share'))}"
                  + (f"; tantivy alone {share(r['tantivy'].get('steal_share'))}" if "tantivy" in r else "")
                  + (f"; in turns {share(r.get('turns_steal_share'))}" if "turns" in r else "") + "\n")
        if any("two_backends" in p[reader] for p in r.get("passes", []) for reader in r["visible"]):
            out.write("\nTwo busy backends at once / one alone (2.0: both CPUs free), before-after each pass, "
                      "r100 / r50 / r5: " + ", ".join(
                          f"pass {i} " + " / ".join("-".join(f"{x:.2f}" for x in p[reader].get("two_backends", []))
                                                    for reader in r["visible"])
                          for i, p in enumerate(r["passes"], 1))
                      + (f"; in turns {'-'.join(f'{x:.2f}' for x in r['turns_two_backends'])}"
                         if "turns_two_backends" in r else "") + "\n")
        out.write(f"\nafter the load: vacuum analyze {r['vacuum_s']:.0f} s, analyze_postings {r['sketch_s']:.0f} s, "
                  f"checkpoint {r.get('checkpoint_s', float('nan')):.0f} s, GIN for ts_rank_cd {r['gin_s']:.0f} s, "
                  f"reindex_impacts after the first tenth {r['bulk']['reindex_s']:.1f} s\n")
        out.flush()
        report_load(r)
    out.flush()


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m evals.bench search", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chunks", type=int, nargs="+", default=[10_000])
    ap.add_argument("--dsn", help="a server to create benchmark databases on (default: throwaway embedded)")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--slow-queries", type=int, default=60, help="queries run through ts_rank_cd/exhaustive")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--seed", type=int, default=7)
    add_write_args(ap)
    ap.add_argument("--passes", type=int, default=3,
                    help="passes of groundkit.search over the queries: the first is the table's figures "
                         "(a cold cache after the load), the last is reported as warm")
    ap.add_argument("--exhaustive", action="store_true", help="also time the exhaustive BM25 path")
    ap.add_argument("--no-tantivy", action="store_true")
    ap.add_argument("--turns", type=int, default=2,
                    help="rounds of groundkit.search and tantivy in turns, after tantivy alone (0: none)")
    ap.add_argument("--keep", action="store_true",
                    help="keep the benchmark databases gk_bench_<chunks> (with --dsn) for ab and profile")
    ap.add_argument("--json", type=Path, help="write all measurements here")
    args = ap.parse_args(argv)
    results = []
    with server(args.dsn) as server_dsn:
        for n in args.chunks:
            results.append(bench_size(server_dsn, n, args))
            report([results[-1]])
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
