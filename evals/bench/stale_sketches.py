"""What sketches and term bits made before a large write cost search, until `analyze` runs.

    python evals/bench/bench_search.py --dsn URL --chunks 1000000 --keep    # builds gk_bench_1000000
    python evals/bench/stale_sketches.py --dsn URL --chunks 1000000 --new-chunks 100000

Writes do not refresh the postings' sketches (range sizes for planning) nor the term bits (one
bit per chunk, for lookups and merged reads): `groundkit analyze` makes them anew. Search stays
exact either way (chunks past the bits' last byte count as holding every term; a list without a
sketch is counted), so what stale ones cost is time. This measures it on copies of a kept
benchmark database:

- ``gk_stale_a``: a copy with --new-chunks more chunks written through the bulk path (other
  objects over the same vocabulary), and no analyze after them;
- ``gk_stale_b``: a copy of ``gk_stale_a`` with `analyze_postings()` run;

then runs the benchmark's queries for each reader on both, back to back, alternating which goes
first, each query's fastest of --repeat runs per copy, and prints p50 / p95 / mean per reader,
the ratio of the means and of the p95s (stale over analyzed), and how many queries returned
different scores (none may: the data is the same). The copies are dropped at the end unless
--keep; --reuse times the copies an earlier run kept.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg.types.json import Jsonb

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ab_search import bench_queries, paired_table, scores_of
from bench_search import kept_database_args, log
from corpus import Corpus

import groundkit

COPIES = ("gk_stale_a", "gk_stale_b")


def copy_database(admin: psycopg.Connection[tuple[object, ...]], source: str, target: str) -> None:
    """CREATE DATABASE target from source, copying its files (no WAL for every block)."""
    admin.execute(sql.SQL("drop database if exists {}").format(sql.Identifier(target)))
    t0 = time.perf_counter()
    admin.execute(sql.SQL("create database {} template {} strategy file_copy").format(
        sql.Identifier(target), sql.Identifier(source)))
    log(f"copied {source} to {target} in {time.perf_counter() - t0:.0f} s")


def require_copies(server: str, names: Sequence[str]) -> None:
    """Stop unless every database of ``names`` exists (for --reuse: a run with --keep made them)."""
    with psycopg.connect(server, autocommit=True) as admin:
        have = {r[0] for r in admin.execute("select datname from pg_database").fetchall()}
    if not set(names) <= have:
        raise SystemExit(f"--reuse: {', '.join(names)} do not exist (run with --keep first)")


def drop_copies(server: str, names: Sequence[str]) -> None:
    with psycopg.connect(server, autocommit=True) as admin:
        for name in names:
            admin.execute(sql.SQL("drop database if exists {}").format(sql.Identifier(name)))


def time_copies(out: IO[str], dsns: dict[str, str], queries: Sequence[str], args: argparse.Namespace,
                header: Callable[[dict[str, psycopg.Connection[tuple[Any, ...]]]], str]) -> None:
    """Every query through groundkit.search on each copy (arm name -> DSN, first arm over second),
    after --warm-up queries on each, then paired_table's rows (fastest of --repeat, alternating;
    --per-query, --k as given). ``header`` writes the line above the table from the open
    connections."""
    stmt = "select object_id, chunk_seq, score from groundkit.search(%s, %s, %s)"
    with contextlib.ExitStack() as stack:
        conns = {arm: stack.enter_context(psycopg.connect(dsn, autocommit=True)) for arm, dsn in dsns.items()}
        per_query = stack.enter_context(args.per_query.open("w")) if args.per_query else None
        for q in queries[: args.warm_up]:
            for conn in conns.values():
                conn.execute(stmt, ("r100", q, args.k)).fetchall()
        out.write(f"\n{len(queries)} queries, k = {args.k}; {header(conns)}; fastest of {args.repeat} per copy\n\n")
        paired_table(out, {arm: scores_of(conn, stmt, args.k) for arm, conn in conns.items()},
                     queries, args.repeat, per_query)


def write_more(dsn: str, n_chunks: int, seed: int, batch_chunks: int = 4000) -> int:
    """n_chunks more chunks through put_objects, one batch per transaction: other objects
    (seed 991, ids prefixed so that none replaces a loaded one) over the loaded corpus's
    vocabulary (``seed``'s: a corpus's words come from its seed), so that the queries match them
    as they match the loaded ones."""
    corpus = Corpus(seed=991)
    corpus.vocab = Corpus(seed=seed).vocab
    written = 0
    batch: list[dict[str, object]] = []
    in_batch = 0
    t0 = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        for obj in corpus.objects(n_chunks):
            batch.append(dict(obj.as_json(), object_id="stale-" + obj.object_id))
            in_batch += len(obj.paragraphs)
            if in_batch >= batch_chunks or written + in_batch >= n_chunks:
                conn.execute("select count(*) from groundkit.put_objects(%s)", (Jsonb(batch),))
                written += in_batch
                batch, in_batch = [], 0
                log(f"  written {written:,} of {n_chunks:,} chunks")
                if written >= n_chunks:
                    break
    log(f"wrote {written:,} chunks in {time.perf_counter() - t0:.0f} s")
    return written


def build(server: str, source: str, dsn: dict[str, str], new_chunks: int, seed: int) -> None:
    """The two copies: the first with new_chunks more chunks, the second that one analyzed."""
    with psycopg.connect(server, autocommit=True) as admin:
        copy_database(admin, source, COPIES[0])
        groundkit.migrate(dsn[COPIES[0]])
        write_more(dsn[COPIES[0]], new_chunks, seed)
        admin.execute("checkpoint")
        copy_database(admin, COPIES[0], COPIES[1])
    t0 = time.perf_counter()
    with groundkit.Groundkit.connect(dsn[COPIES[1]]) as gk:
        lists = gk.analyze_postings()
    log(f"analyze_postings() on {COPIES[1]}: {time.perf_counter() - t0:.0f} s, {lists} lists")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    kept_database_args(ap, chunks=1_000_000)
    ap.add_argument("--new-chunks", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--warm-up", type=int, default=30)
    ap.add_argument("--keep", action="store_true", help="keep the two copies")
    ap.add_argument("--reuse", action="store_true", help="time the copies a run with --keep left")
    ap.add_argument("--per-query", type=Path, help="also write every query's latencies here (JSON lines)")
    args = ap.parse_args(argv)

    source = f"gk_bench_{args.chunks}"
    dsn = {name: make_conninfo(args.dsn, dbname=name) for name in COPIES}
    if args.reuse:
        require_copies(args.dsn, COPIES)
    else:
        build(args.dsn, source, dsn, args.new_chunks, args.seed)
    queries = bench_queries(args.chunks, args.queries, args.seed)

    def header(conns: dict[str, psycopg.Connection[tuple[Any, ...]]]) -> str:
        counts = conns["stale"].execute("select count(*), count(*) filter (where object_id like 'stale-%')"
                                        " from groundkit.chunks").fetchone()
        assert counts is not None
        total, added = counts
        return f"{source} + {added:,} chunks ({total:,} in all)"

    try:
        time_copies(sys.stdout, {"stale": dsn[COPIES[0]], "analyzed": dsn[COPIES[1]]}, queries, args, header)
    finally:
        if not args.keep:
            drop_copies(args.dsn, COPIES)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
