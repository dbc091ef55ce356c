"""What a chunk costs to ingest at the least, measured piece by piece on a kept benchmark database.

    python evals/bench/bench_search.py --dsn URL --chunks 1000000 --keep    # builds gk_bench_1000000
    python evals/bench/ingest_floor.py --dsn URL --chunks 1000000 --objects 2000

Issue 3 asks for 10,000 chunks/s in bulk and 1,000 chunks/s one object per transaction, at
1M chunks on two cores. This script measures, set-based over --objects fresh objects of the
benchmark corpus (another seed), the pieces every write of a chunk must pay in this design, each
as one statement with nothing else in it, and turns them into upper bounds on throughput:

- chunk + tokenize: groundkit._chunks_of and to_tsvector('groundkit.english'), results counted,
  nothing stored (CPU only);
- posting rows, heap only: the chunks' postings, in index order (term, chunk_id), inserted into a
  logged table with no index (the least any layout with one row per posting pays);
- posting rows, this schema: the same rows inserted into groundkit.postings itself, with its two
  indexes at their current size;
- statistics: the batch's term_stats deltas as one ordered upsert (as put_objects does), and
  the same rows appended to an empty copy of term_stats (the least a layout that sums counts
  per batch at query time would pay);
- log, object and chunk rows: what every layout stores besides postings (the log row with its
  body, the current object, the chunk with its text and tsvector), inserted into empty copies of
  groundkit.content_log, objects and chunks with their indexes and no triggers or foreign keys;
- packed postings: the batch's postings as one row per term (arrays of chunk ids, tfs, lengths,
  buckets and impacts, ordered by chunk id) in a table with one index, the least a layout with
  far fewer index entries than postings would pay (it is not built: docs/bm25.md, "The floor of
  a bulk write, any layout").

Every write runs inside a transaction that is rolled back: nothing is stored (the indexes keep
dead entries until the next vacuum). The bounds assume both cores work in parallel with no other
cost at all, so the real ceiling is lower: they are ceilings, not predictions. The copies start
empty, so their rows cost less than in the real tables at 1M: that too errs towards a higher
ceiling.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus import Corpus

CORES = 2
LABELS = {
    "tok": "chunk + tokenize (CPU only)",
    "heap": "posting rows, heap only (no index)",
    "idx": "posting rows into groundkit.postings (2 indexes)",
    "rows": "log, object and chunk rows (empty copies, their indexes)",
    "packed": "posting rows packed per term and batch (1 index)",
    "stats": "statistics upsert (one per batch)",
    "appended": "statistics appended (empty copy, no upsert)",
}


def timed(conn: psycopg.Connection[Any], query: str) -> float:
    t0 = time.perf_counter()
    conn.execute(query)
    return time.perf_counter() - t0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsn", required=True, help="the server bench_search.py --keep built its database on")
    ap.add_argument("--chunks", type=int, default=1_000_000, help="which gk_bench_<chunks> database")
    ap.add_argument("--objects", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=3, help="runs of each piece; the fastest counts")
    args = ap.parse_args(argv)

    objs = list(Corpus(seed=2024).objects(4 * args.objects))[: args.objects]
    dsn = make_conninfo(args.dsn, dbname=f"gk_bench_{args.chunks}")
    with psycopg.connect(dsn) as conn:
        conn.execute("""create temp table floor_in (ord integer primary key, object_id text, content_type text,
                        space_id text, tier text, owner_sub text, owner_only boolean, title text,
                        body text) on commit preserve rows""")
        with conn.cursor() as cur, cur.copy("copy floor_in from stdin") as cp:
            for i, o in enumerate(objs):
                cp.write_row((i, f"floor-{o.object_id}", o.content_type, o.space_id, o.tier, o.owner_sub,
                              o.owner_only, o.title, o.body))
        # A view, so that every count through it chunks and tokenizes again.
        conn.execute("""
            create temp view floor_tsv as
            select v.tsv
              from floor_in f cross join groundkit.config cfg
             cross join lateral groundkit._chunks_of(f.content_type, f.body, null, cfg.chunk_chars,
                                                     cfg.chunk_overlap) ch
             cross join lateral (select to_tsvector('groundkit.english'::regconfig,
                                                    f.title || E'\\n' || ch.content) as tsv offset 0) v""")
        tokenize = "select count(*), sum(length(t.tsv)) from floor_tsv t"
        row = conn.execute(tokenize).fetchone()
        assert row is not None
        n_chunks, n_postings = int(row[0]), int(row[1])
        # The rows to insert, computed once (chunk ids negative: no clash with real ones).
        conn.execute("""
            create temp table floor_ch on commit preserve rows as
            select row_number() over (order by f.ord, ch.chunk_seq) as cid, f.ord, ch.chunk_seq, ch.content,
                   ch.chunker_version, v.tsv,
                   (select coalesce(sum(coalesce(array_length(u.positions, 1), 1)), 0)
                      from unnest(v.tsv) u)::integer as doc_len
              from floor_in f cross join groundkit.config cfg
             cross join lateral groundkit._chunks_of(f.content_type, f.body, null, cfg.chunk_chars,
                                                     cfg.chunk_overlap) ch
             cross join lateral (select to_tsvector('groundkit.english'::regconfig,
                                                    f.title || E'\\n' || ch.content) as tsv offset 0) v""")
        conn.execute("""
            create temp table floor_post on commit preserve rows as
            select u.lexeme as term, -x.cid as chunk_id, coalesce(array_length(u.positions, 1), 1) as tf,
                   x.doc_len, (x.cid % 4)::bigint as vis_key, 0.5::real as imp, (x.cid % 4)::integer as scope
              from floor_ch x
             cross join lateral unnest(x.tsv) u""")
        conn.execute("alter table floor_in add column content_hash text")
        conn.execute("update floor_in set content_hash = md5(body)")
        conn.commit()

        def best(query: str, setup: str | None = None) -> float:
            times = []
            for _ in range(args.repeat):
                if setup:
                    conn.execute(setup)
                times.append(timed(conn, query))
                conn.rollback()
            return min(times)

        pieces = {
            "tok": best(tokenize),
            "heap": best(
                "insert into public.gk_floor_heap (term, chunk_id, tf, doc_len, vis_key, imp)"
                " select term, chunk_id, tf, doc_len, vis_key, imp from floor_post order by term, chunk_id",
                setup="create table public.gk_floor_heap (like groundkit.postings)"),
            "idx": best(
                "insert into groundkit.postings (term, chunk_id, tf, doc_len, vis_key, imp)"
                " select term, chunk_id, tf, doc_len, vis_key, imp from floor_post order by term, chunk_id"),
            "rows": best(
                """with l as (
                       insert into public.gk_floor_log (object_id, version, op, content_type, space_id,
                                                        tier_visibility, title, body, owner_sub, owner_only,
                                                        content_hash)
                       select f.object_id, 1, 'put', f.content_type, f.space_id, f.tier, f.title, f.body,
                              f.owner_sub, f.owner_only, f.content_hash
                         from floor_in f order by f.ord
                       returning seq, object_id),
                   o as (
                       insert into public.gk_floor_obj (object_id, version, state, content_type, space_id,
                                                        tier_visibility, title, owner_sub, owner_only,
                                                        content_hash, log_seq)
                       select f.object_id, 1, 'live', f.content_type, f.space_id, f.tier, f.title,
                              f.owner_sub, f.owner_only, f.content_hash, l.seq
                         from floor_in f join l on l.object_id = f.object_id order by f.object_id)
                   insert into public.gk_floor_chunks (object_id, object_version, chunk_seq, content, tsv,
                                                       doc_len, stat_scope, chunker_version)
                   select f.object_id, 1, c.chunk_seq, c.content, c.tsv, c.doc_len, 0, c.chunker_version
                     from floor_ch c join floor_in f on f.ord = c.ord order by c.cid""",
                setup="""create table public.gk_floor_log (like groundkit.content_log including all);
                         create table public.gk_floor_obj (like groundkit.objects including all);
                         create table public.gk_floor_chunks (like groundkit.chunks including all)"""),
            "packed": best(
                """insert into public.gk_floor_packed (term, batch, chunk_ids, tfs, doc_lens, vis_keys, imps)
                   select term, 1, array_agg(chunk_id order by chunk_id), array_agg(tf order by chunk_id),
                          array_agg(doc_len order by chunk_id), array_agg(vis_key order by chunk_id),
                          array_agg(imp order by chunk_id)
                     from floor_post group by term order by term""",
                setup="""create table public.gk_floor_packed (term text, batch integer, chunk_ids bigint[],
                         tfs integer[], doc_lens integer[], vis_keys bigint[], imps real[],
                         primary key (term, batch))"""),
            "stats": best(
                """insert into groundkit.term_stats as t (term, scope, shard, df)
                   select p.term, p.scope, 0, count(*) from floor_post p group by 1, 2 order by 1, 2
                   on conflict (term, scope, shard) do update set df = t.df + excluded.df"""),
            "appended": best(
                """insert into public.gk_floor_stats (term, scope, shard, df)
                   select p.term, p.scope, 0, count(*) from floor_post p group by 1, 2 order by 1, 2""",
                setup="create table public.gk_floor_stats (like groundkit.term_stats including all)"),
        }
        n_packed = conn.execute("select count(distinct term) from floor_post").fetchone()
        assert n_packed is not None
        size = conn.execute("select pg_size_pretty(pg_total_relation_size('groundkit.postings')),"
                            " (select reltuples::bigint from pg_class where oid = 'groundkit.postings'::regclass)"
                            ).fetchone()
        assert size is not None
    us = {k: 1e6 * v / n_chunks for k, v in pieces.items()}
    print(f"gk_bench_{args.chunks}: groundkit.postings {size[0]}, ~{size[1]:,} rows; {args.objects} objects, "
          f"{n_chunks} chunks, {n_postings} postings ({n_postings / n_chunks:.1f} per chunk); fastest of "
          f"{args.repeat}; packed: {n_packed[0]} rows\n")
    print("| piece | µs per chunk | µs per posting |\n|---|---|---|")
    for k, v in us.items():
        print(f"| {LABELS[k]} | {v:.0f} | {v * n_chunks / n_postings:.2f} |")
    tok, heap, idx, rows, packed, stats, appended = (us[k] for k in LABELS)
    print("\nCeilings (chunks/s; every other cost taken as zero):")
    print(f"- bulk, {CORES} cores in parallel, tokenizing only: {CORES * 1e6 / tok:,.0f}")
    print(f"- bulk, {CORES} cores, tokenize + one heap row per posting: {CORES * 1e6 / (tok + heap):,.0f}")
    print(f"- bulk, {CORES} cores, tokenize + this schema's posting rows + statistics: "
          f"{CORES * 1e6 / (tok + idx + stats):,.0f}")
    print(f"- one connection, tokenize + this schema's posting rows + statistics: {1e6 / (tok + idx + stats):,.0f}")
    print(f"- bulk, {CORES} cores, tokenize + log, object and chunk rows + this schema's posting rows + statistics: "
          f"{CORES * 1e6 / (tok + rows + idx + stats):,.0f}")
    print(f"- bulk, {CORES} cores, tokenize + log, object and chunk rows + packed postings + statistics: "
          f"{CORES * 1e6 / (tok + rows + packed + stats):,.0f}")
    print(f"- bulk, {CORES} cores, tokenize + log, object and chunk rows + packed postings + statistics appended: "
          f"{CORES * 1e6 / (tok + rows + packed + appended):,.0f}")
    print(f"- bulk, {CORES} cores, tokenize + log, object and chunk rows + one heap row per posting (no index) "
          f"+ statistics appended: {CORES * 1e6 / (tok + rows + heap + appended):,.0f}")
    print(f"- bulk, {CORES} cores, tokenize + log, object and chunk rows (no postings, no statistics): "
          f"{CORES * 1e6 / (tok + rows):,.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
