"""The cost of snippets: groundkit.search with a snippet per hit against the same search without.

    python -m evals.bench snippets --chunks 100000                       # builds its own database
    python -m evals.bench snippets --dsn URL --kept gk_bench_100000      # a copy of a kept one

The database: a file copy of a kept benchmark database (``search --keep`` builds
gk_bench_<chunks>; it is not touched, and nobody may be connected to it while it is copied), or a
new one of ``--chunks`` chunks of the benchmark's corpus, loaded as ``search`` loads it. Two arms,
per reader, every query back to back, alternating which goes first, the fastest of ``--repeat``
runs each: ``snippets`` is ``groundkit.search`` as every caller runs it; ``no snippets`` is its
statement run directly without the snippet column (the same planner, joins and citation columns,
without the PL/pgSQL wrapper and its SET clause, so the ratio is, if anything, the snippet's cost
overstated). The issue's target: within 1.2x by mean at k = 10.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import psycopg

from evals.bench.common import (
    READERS,
    bench_queries,
    copy_of,
    log,
    paired_table,
    populate_authority,
    scores_of,
    scratch_db,
    server,
    timed,
)
from evals.bench.corpus import Corpus, Obj
from evals.bench.ingest import bulk_load

WITH_SNIPPETS = "select object_id, chunk_seq, snippet, score from groundkit.search(%s, %s, %s)"
# groundkit.search's statement (sql/069_search.sql) without groundkit._snippet
WITHOUT_SNIPPETS = """
    select c.object_id, c.object_version, c.chunk_seq, o.content_type, o.space_id, o.title, c.content,
           c.start_ms, c.end_ms, c.char_start, c.char_end, c.heading_path, t.thread_id, t.thread_title,
           c.chunker, r.score
      from groundkit._search_pruned(%s, %s, %s) r
      join groundkit.chunks c on c.chunk_id = r.chunk_id
      join groundkit.objects o on o.object_id = c.object_id
     cross join lateral groundkit._thread_of(o.content_type, o.object_id, o.title, o.metadata) t
     order by r.score desc, c.object_id, c.chunk_seq
"""


@contextmanager
def database(server_dsn: str, args: argparse.Namespace) -> Iterator[tuple[str, list[str]]]:
    """The database to measure on, and the queries to run there."""
    if args.kept:
        with copy_of(server_dsn, args.kept, "bh_snip") as dsn:
            yield dsn, bench_queries(args.chunks, args.queries, args.seed)
        return
    corpus = Corpus(seed=args.seed)
    with scratch_db(server_dsn, "bh_snip") as dsn:
        sample: list[Obj] = []
        with psycopg.connect(dsn, autocommit=True) as conn:
            populate_authority(conn, corpus)
            bulk_load(dsn, corpus, args.chunks, 2000, 2, sample)
            seconds, _ = timed(lambda: (conn.execute("vacuum analyze"),
                                        conn.execute("select groundkit.analyze_postings()"),
                                        conn.execute("checkpoint")))
            log(f"vacuum, analyze, checkpoint: {seconds:.0f} s")
        yield dsn, Corpus(seed=args.seed).queries(args.queries, sample)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m evals.bench snippets", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsn", help="a server to work on (default: a throwaway embedded one)")
    ap.add_argument("--kept", help="a kept benchmark database to copy (e.g. gk_bench_100000), with --dsn")
    ap.add_argument("--chunks", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=150)
    ap.add_argument("--repeat", type=int, default=3, help="runs of each query per arm; the fastest counts")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args(argv)
    if args.kept and not args.dsn:
        ap.error("--kept needs --dsn")
    with server(args.dsn) as server_dsn, database(server_dsn, args) as (dsn, queries):
        with psycopg.connect(dsn, autocommit=True) as conn:
            for q in queries:  # one untimed pass: the pages in the cache, the plans made
                conn.execute(WITH_SNIPPETS, ("r100", q, args.k)).fetchall()
            out = sys.stdout
            out.write(f"\nsnippets at {args.chunks:,} chunks: {len(queries)} queries, k = {args.k}, the fastest "
                      f"of {args.repeat} runs, both arms in turns\n\n")
            paired_table(out, {"snippets": scores_of(conn, WITH_SNIPPETS, args.k),
                               "no snippets": scores_of(conn, WITHOUT_SNIPPETS, args.k)},
                         queries, args.repeat, None, tuple(READERS))
    return 0
