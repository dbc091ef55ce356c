"""Paired comparison of two databases, or of two revisions of groundkit's SQL on copies of one.

    python -m evals.bench search --dsn URL --chunks 1000000 --keep       # builds gk_bench_1000000
    python -m evals.bench ab --dsn URL --chunks 1000000 --revisions 91325e0 worktree
    python -m evals.bench ab --dsn URL --chunks 1000000 --databases gk_a gk_b [--writes 4]

``--revisions A B``: two file copies of the kept benchmark database gk_bench_<chunks> (which is
not touched; nobody may be connected to it while it is copied), each migrated with the working
tree's revisions and then given revision A's or B's replaceable SQL (sql/*.sql at that commit;
``worktree``: the working tree's, uncommitted changes included). The copies are dropped at the end.

``--databases A B``: two databases of the same corpus that differ in one thing, as they are.

The copy made second has more of its pages in the OS cache when the two do not fit in memory
(1M chunks on 23 GB), which favours B (``--revisions X X`` measures it): run both orders and take
the geometric mean of their ratios, and warm every query (``--warm-up``).

Then each of the benchmark's queries (the ones `search` ran on gk_bench_<chunks>) runs on both
back to back, alternating which goes first, the fastest of --repeat runs each, after an untimed
pass of --warm-up queries on each; per reader: p50 / p95 / mean of both, the ratio of the means
and of the p95s (A over B), and how many queries returned different scores (the two must agree:
search is exact). ``--writes N``: N rounds; in each, the same 600 new objects (or, with
``--write-documents``, documents of 40-160 words; with ``--write-beir DIR``, the documents of a
BEIR collection's corpus.jsonl, title and text, as real prose with its codes and accents) go through
put_object one per transaction into each database in turn (alternating which goes first), then
``merge_pending()`` is timed on its own (the writers' inline merges are held off meanwhile).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any, TextIO

import psycopg
from psycopg.conninfo import make_conninfo

import groundkit
from evals.bench.common import bench_queries, copy_of, kept_database_args, log, paired_table, pct, scores_of
from evals.bench.corpus import PUT_OBJECT_SQL, Corpus, Obj
from evals.bench.sqlsource import WORKTREE, describe, replaceable_sql
from groundkit.schema import HAS_PGVECTOR_SQL, applies

SEARCH_SQL = "select object_id, chunk_seq, score from groundkit.search(%s, %s, %s)"


# While a revision's files run, an event trigger notes every function they create or replace;
# groundkit's other functions are the working tree's alone, dropped after.
NOTE_FUNCTIONS_SQL = """
create temp table ab_made (fn oid) on commit drop;
create function pg_temp.ab_note() returns event_trigger language plpgsql as $f$
begin
    insert into pg_temp.ab_made select c.objid from pg_catalog.pg_event_trigger_ddl_commands() c
     where c.object_type = 'function';
end
$f$;
create event trigger ab_note on ddl_command_end when tag in ('CREATE FUNCTION') execute function pg_temp.ab_note();
"""
UNTOUCHED_SQL = """
    select p.oid::regprocedure::text
      from pg_catalog.pg_proc p
     where p.pronamespace = 'groundkit'::regnamespace
       and p.oid not in (select m.fn from pg_temp.ab_made m)
     order by 1
"""
DROP_UNTOUCHED_SQL = """
do $drop$
declare
    f regprocedure;
begin
    for f in select p.oid::regprocedure
               from pg_catalog.pg_proc p
              where p.pronamespace = 'groundkit'::regnamespace
                and p.oid not in (select m.fn from pg_temp.ab_made m)
    loop
        execute format('drop function if exists %s cascade', f);
    end loop;
end
$drop$
"""


@contextlib.contextmanager
def at_revision(server_dsn: str, kept: str, rev: str) -> Iterator[str]:
    """A copy of ``kept`` with revision ``rev``'s replaceable SQL installed; its DSN."""
    with copy_of(server_dsn, kept, "bh_ab") as dsn:
        groundkit.migrate(dsn, gate=False)
        with psycopg.connect(dsn) as conn:
            install_revision(conn, rev)
        yield dsn


def install_revision(conn: psycopg.Connection[Any], rev: str) -> None:
    """Revision ``rev``'s replaceable SQL (the variant for this database's pgvector) in one
    transaction, then the working tree's functions that ``rev`` does not define dropped: an
    overload only the working tree has (a new argument with a default) would make ``rev``'s calls
    ambiguous, and a function ``rev`` does not know must not run in its place. (Superuser: an
    event trigger notes which functions ``rev``'s files make.)"""
    pgvector = bool(conn.execute(HAS_PGVECTOR_SQL).fetchone()[0])  # type: ignore[index]
    conn.execute(NOTE_FUNCTIONS_SQL)
    conn.execute("set local check_function_bodies = off")  # rev's bodies may call what is dropped below
    for name, text in replaceable_sql(rev):
        if applies(name, pgvector):
            log(f"  {rev}: {name}")
            conn.execute(text.encode())  # our own SQL file at that revision
    conn.execute("drop event trigger ab_note")
    if rev != WORKTREE:
        for (fn,) in conn.execute(UNTOUCHED_SQL).fetchall():
            log(f"  {rev}: drop function {fn} (not in {rev})")
        conn.execute(DROP_UNTOUCHED_SQL)
    conn.commit()


def beir_objects(directory: Path, n: int, space_id: str) -> list[Obj]:
    """The first ``n`` documents of a BEIR collection as public ``document`` objects of ``space_id``."""
    objs: list[Obj] = []
    with (directory / "corpus.jsonl").open(encoding="utf-8") as f:
        for line in f:
            doc = json.loads(line)
            objs.append(Obj(object_id=f"beir-{doc['_id']}", content_type="document", space_id=space_id, tier="T0",
                            owner_sub=None, owner_only=False, title=doc.get("title") or "",
                            paragraphs=[doc.get("text") or ""], topic=[]))
            if len(objs) == n:
                break
    return objs


def paired_writes(conns: dict[str, psycopg.Connection[Any]], rounds: int, seed: int, documents: bool,
                  beir: Path | None = None) -> None:
    """``rounds`` rounds of 600 objects (or ``documents`` of 40-160 words, or ``beir``'s documents)
    through put_object into each database in turn, then a timed merge_pending(); the writers'
    inline merges are held off meanwhile."""
    per_round = 600
    corpus = Corpus(seed=seed)
    if beir is not None:
        space = next(sid for sid, tier, private in corpus.spaces() if tier == "T0" and not private)
        objs = beir_objects(beir, per_round * rounds, space)
    else:
        objs = list(corpus.documents(per_round * rounds) if documents else corpus.objects(8 * per_round * rounds))
    merge_every: dict[str, int] = {}
    for name, conn in conns.items():
        merge_every[name] = int(conn.execute("select pending_merge_chunks from groundkit.config").fetchone()[0])  # type: ignore[index]
        conn.execute("update groundkit.config set pending_merge_chunks = 1000000000")
    done: dict[str, list[tuple[int, float, float]]] = {name: [] for name in conns}
    try:
        for r in range(rounds):
            batch = objs[r * per_round:(r + 1) * per_round]
            for name in (list(conns) if r % 2 == 0 else list(conns)[::-1]):
                conn, tag, chunks = conns[name], f"ab-{uuid.uuid4().hex[:6]}-", 0
                t0 = time.perf_counter()
                for o in batch:
                    conn.execute(PUT_OBJECT_SQL, dict(o.as_json(), object_id=tag + o.object_id))
                    chunks += len(o.paragraphs)
                wrote = time.perf_counter() - t0
                t1 = time.perf_counter()
                conn.execute("select groundkit.merge_pending()")
                merged = time.perf_counter() - t1
                done[name].append((chunks, wrote, merged))
                log(f"round {r + 1}/{rounds} {name}: {chunks} chunks, writes {chunks / wrote:,.0f} chunks/s "
                    f"({len(batch) / wrote:,.0f} objects/s), merge {1000 * merged:.0f} ms")
    finally:
        for name, conn in conns.items():
            conn.execute("update groundkit.config set pending_merge_chunks = %s", (merge_every[name],))
    totals: dict[str, tuple[float, float]] = {}
    for name, rs in done.items():
        chunks = sum(x[0] for x in rs)
        wrote = sum(x[1] for x in rs)
        merged = sum(x[2] for x in rs)
        totals[name] = (wrote, merged)
        print(f"{name}: writes {per_round * rounds / wrote:,.0f} objects/s, {chunks / wrote:,.0f} chunks/s, "
              f"merges {1000 * merged / chunks:.3f} ms per chunk, "
              f"both {chunks / (wrote + merged):,.0f} chunks/s")
    (a, (a_wrote, a_merged)), (b, (b_wrote, b_merged)) = totals.items()
    print(f"{b} / {a}, time for the same objects: writes {b_wrote / a_wrote:.2f}x, merges {b_merged / a_merged:.2f}x, "
          f"both {(b_wrote + b_merged) / (a_wrote + a_merged):.2f}x")


def search_ratios(out: TextIO, lat: dict[str, dict[str, list[float]]], a: str, b: str) -> None:
    """The second arm's search time over the first's, per reader: the ratio of the p50s, of the
    means, and the median of the per-query ratios (each query timed on both back to back)."""
    out.write(f"\n| reader | {b} / {a}: p50 | mean | median per-query ratio |\n|---|---|---|---|\n")
    for reader, arms in lat.items():
        x, y = arms[a], arms[b]
        per_query = statistics.median(v / u for u, v in zip(x, y, strict=True) if u > 0)
        out.write(f"| {reader} | {pct(y, 50) / pct(x, 50):.2f}x | {statistics.mean(y) / statistics.mean(x):.2f}x "
                  f"| {per_query:.2f}x |\n")
    out.flush()


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m evals.bench ab", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    kept_database_args(ap, queries=150)
    which = ap.add_mutually_exclusive_group(required=True)
    which.add_argument("--revisions", nargs=2, metavar=("A", "B"),
                       help="two git revisions (or 'worktree') whose replaceable SQL the two copies run")
    which.add_argument("--databases", nargs=2, metavar=("A", "B"), help="two databases on the server, as they are")
    ap.add_argument("--warm-up", type=int, default=30)
    ap.add_argument("--repeat", type=int, default=2, help="runs of each query per arm; the fastest counts")
    ap.add_argument("--no-search", action="store_true", help="skip the paired search")
    ap.add_argument("--writes", type=int, default=0, metavar="ROUNDS", help="paired one-object write rounds")
    ap.add_argument("--write-seed", type=int, default=777, help="the corpus seed of the objects written")
    ap.add_argument("--write-documents", action="store_true",
                    help="write documents of 40-160 words (`ingest --fresh`'s) instead of the benchmark's objects")
    ap.add_argument("--write-beir", type=Path, metavar="DIR",
                    help="write the documents of this BEIR collection (corpus.jsonl) instead")
    ap.add_argument("--per-query", type=Path, help="also write every query's latencies here (JSON lines)")
    args = ap.parse_args(argv)
    kept = f"gk_bench_{args.chunks}"
    with ExitStack() as stack:
        if args.revisions:
            names = [describe(r) for r in args.revisions]
            dsns = [stack.enter_context(at_revision(args.dsn, kept, r)) for r in args.revisions]
            what = f"database {kept}, revisions {names[0]} and {names[1]}"
        else:
            names = list(args.databases)
            dsns = [make_conninfo(args.dsn, dbname=d) for d in names]
            what = f"databases {names[0]} and {names[1]}"
        if names[0] == names[1]:
            names = [f"{names[0]} (A)", f"{names[1]} (B)"]
        conns = {n: stack.enter_context(psycopg.connect(d, autocommit=True)) for n, d in zip(names, dsns, strict=True)}
        per_query = stack.enter_context(args.per_query.open("w")) if args.per_query else None
        if not args.no_search:
            queries = bench_queries(args.chunks, args.queries, args.seed)
            for conn in conns.values():
                for q in queries[:args.warm_up]:
                    conn.execute(SEARCH_SQL, ("r100", q, args.k)).fetchall()
            sys.stdout.write(f"\n{len(queries)} queries, k = {args.k}, {what}, the fastest of {args.repeat} runs\n\n")
            lat = paired_table(sys.stdout, {n: scores_of(c, SEARCH_SQL, args.k) for n, c in conns.items()},
                               queries, args.repeat, per_query)
            search_ratios(sys.stdout, lat, names[0], names[1])
        if args.writes:
            paired_writes(conns, args.writes, args.write_seed, args.write_documents, args.write_beir)
    return 0
