"""Search on a database nobody maintained, against the same database maintained.

    python -m evals.bench unmaintained --dsn URL --documents 60000

A new database (the server's default settings), ``--documents`` documents of 40-160 Zipf-like
words written through ``put_object``, one per transaction, and nothing else: no merge, no
analyze, no reindex beyond what the writers do inline. Then a file copy of it is maintained
(``Groundkit.maintain()``, one pass of the worker), and each 2-6-term query runs on both
copies back to back, alternating which goes first, for each reader; the table gives p50 / p95 /
mean of both and the ratios (un-maintained over maintained), and checks that both copies give
the same scores. The issue's target: the un-maintained database within 1.5x of the maintained
one by mean.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from evals.bench.common import (
    READERS,
    Progress,
    copy_of,
    log,
    paired_table,
    populate_authority,
    scores_of,
    scratch_db,
    server,
    timed,
)
from evals.bench.corpus import PUT_OBJECT_SQL, Corpus, Obj
from groundkit import Groundkit

SEARCH_SQL = "select object_id, chunk_seq, score from groundkit.search(%s, %s, %s)"


def _maintain(gk: Groundkit) -> list[str]:
    """One maintenance pass (``gk.maintain()``, what the worker runs); what it did."""
    return [f"{step.name} {step.count:,} ({step.reason})" for step in gk.maintain().steps]


def write_documents(dsn: str, docs: Sequence[Obj]) -> float:
    """put_object each document, one transaction each, on one connection; the seconds it took."""
    prog = Progress("put_object (documents)", len(docs))
    t0 = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        for i, d in enumerate(docs, 1):
            conn.execute(PUT_OBJECT_SQL, d.as_json())
            prog.update(i)
    return time.perf_counter() - t0


def two_to_six_term_queries(conn: psycopg.Connection[Any], corpus: Corpus, docs: Sequence[Obj], n: int) -> list[str]:
    """``n`` queries of 2-6 analysed terms, drawn from the documents' topics and vocabulary."""
    out: list[str] = []
    seed = 11
    while len(out) < n:
        for q in corpus.queries(4 * n, list(docs[::97]), seed=seed):
            terms = conn.execute("select count(*) from groundkit.query_terms(%s)", (q,)).fetchone()
            if terms is not None and 2 <= terms[0] <= 6 and len(out) < n:
                out.append(q)
        seed += 1
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m evals.bench unmaintained", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsn", help="a server to create the databases on (default: a throwaway embedded one)")
    ap.add_argument("--documents", type=int, default=60_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=2, help="runs of each query per copy; the fastest counts")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--pending-merge-chunks", type=int,
                    help="set config.pending_merge_chunks before the writes (default: the database's default)")
    ap.add_argument("--keep", action="store_true",
                    help="keep both databases (with --dsn): the un-maintained one and its maintained copy (_m)")
    args = ap.parse_args(argv)
    corpus = Corpus(seed=args.seed)
    docs = list(corpus.documents(args.documents))
    with server(args.dsn) as server_dsn, scratch_db(server_dsn, "bh_unmaint", args.keep) as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            populate_authority(conn, corpus, chunk_settings=False)
            if args.pending_merge_chunks is not None:
                conn.execute("update groundkit.config set pending_merge_chunks = %s", (args.pending_merge_chunks,))
        wrote = write_documents(dsn, docs)
        log(f"wrote {len(docs):,} documents in {wrote:.0f} s ({len(docs) / wrote:,.0f}/s)")
        name = str(conninfo_to_dict(dsn)["dbname"])
        with _maintained_copy(server_dsn, name, args.keep) as copy_dsn:
            with Groundkit.connect(copy_dsn) as gk:
                t, did = timed(lambda: _maintain(gk))
            log(f"maintained the copy in {t:.0f} s: {', '.join(did)}")
            with psycopg.connect(dsn, autocommit=True) as a, psycopg.connect(copy_dsn, autocommit=True) as b:
                queries = two_to_six_term_queries(a, corpus, docs, args.queries)
                for conn in (a, b):  # one untimed pass each: both copies' pages in the cache
                    for q in queries:
                        conn.execute(SEARCH_SQL, ("r100", q, args.k)).fetchall()
                out = sys.stdout
                out.write(f"\n{len(docs):,} documents through put_object, nothing else run, vs the same database "
                          f"maintained ({', '.join(did)}); {len(queries)} queries of 2-6 terms, k = {args.k}, "
                          f"the fastest of {args.repeat} runs\n\n")
                paired_table(out, {"un-maintained": scores_of(a, SEARCH_SQL, args.k),
                                   "maintained": scores_of(b, SEARCH_SQL, args.k)},
                             queries, args.repeat, None, tuple(READERS))
    return 0


@contextmanager
def _maintained_copy(server_dsn: str, name: str, keep: bool) -> Iterator[str]:
    """A file copy of database ``name`` to maintain: ``<name>_m``, kept, with ``keep``; else this
    run's own scratch copy, dropped on exit."""
    if not keep:
        with copy_of(server_dsn, name, "bh_unmaint_m") as dsn:
            yield dsn
        return
    copy = f"{name}_m"
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("create database {} template {} strategy file_copy").format(
            sql.Identifier(copy), sql.Identifier(name)))
    yield make_conninfo(server_dsn, dbname=copy)
