"""What an impact reference length far from the chunks' average length costs search.

    python evals/bench/bench_search.py --dsn URL --chunks 1000000 --keep    # builds gk_bench_1000000
    python evals/bench/impact_ref.py --dsn URL --chunks 1000000 --scale 0.5

Every posting stores its chunk's tf-part at a reference length, ``groundkit.bm25_impact.avgdl_ref``
(docs/bm25.md, "Postings"). A reader whose average chunk length is larger gets tf-parts up to
avgdl / avgdl_ref times larger, so search widens every bound by that factor; where it is smaller,
the stored impacts overstate the reader's tf-parts. Either way the bounds are looser than they
could be, and search reads more before it can stop. Answers do not change: scores are computed
from tf, the chunk's length and the reader's statistics. This measures the time on copies of a
kept benchmark database:

- ``gk_ref_a``: a copy with ``reindex_impacts()``, whose default reference is the largest
  average length any reader rank gets;
- ``gk_ref_b``: a copy with ``reindex_impacts(--scale x that reference)``: 0.5 is a corpus whose
  chunks are twice as long as the reference (a new database starts at 64 tokens; a chunk of
  1,500 characters of English prose has about 100-130), 2 one whose chunks are half as long;

then runs the benchmark's queries for each reader on both, back to back, alternating which goes
first, each query's fastest of --repeat runs per copy, and prints p50 / p95 / mean per reader,
the ratio of the means and of the p95s (scaled over current), and how many queries returned
different scores (none may). The copies are dropped at the end unless --keep; --reuse times the
copies an earlier run kept, --reuse-current keeps the first and makes the second again at
another --scale, and --build-only makes them and stops (for ab_search.py --database gk_ref_b).
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
from ab_search import bench_queries
from bench_search import kept_database_args, log
from stale_sketches import copy_database, drop_copies, require_copies, time_copies

import groundkit

COPIES = ("gk_ref_a", "gk_ref_b")


def reindex(dsn: str, ref: float | None) -> float:
    """reindex_impacts(ref) (None: its default), then VACUUM ANALYZE the postings, as a load
    does; returns the reference it set."""
    t0 = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("select groundkit.reindex_impacts(%s)", (ref,))
        conn.execute("vacuum analyze groundkit.postings")
        got = conn.execute("select avgdl_ref from groundkit.bm25_impact").fetchone()
    assert got is not None
    log(f"reindex_impacts({ref}) and vacuum: {time.perf_counter() - t0:.0f} s")
    return float(got[0])


def build(server: str, source: str, dsn: dict[str, str], scale: float, reuse_current: bool) -> None:
    with psycopg.connect(server, autocommit=True) as admin:
        if reuse_current:
            with psycopg.connect(dsn[COPIES[0]]) as conn:
                got = conn.execute("select avgdl_ref from groundkit.bm25_impact").fetchone()
            assert got is not None
            ref = float(got[0])
        else:
            copy_database(admin, source, COPIES[0])
            groundkit.migrate(dsn[COPIES[0]])
            ref = reindex(dsn[COPIES[0]], None)
            admin.execute("checkpoint")
        copy_database(admin, COPIES[0], COPIES[1])
    reindex(dsn[COPIES[1]], ref * scale)
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute("checkpoint")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    kept_database_args(ap, chunks=1_000_000)
    ap.add_argument("--scale", type=float, default=0.5, help="the second copy's reference over the first's")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--warm-up", type=int, default=30)
    ap.add_argument("--keep", action="store_true", help="keep the two copies")
    ap.add_argument("--reuse", action="store_true", help="time the copies a run with --keep left")
    ap.add_argument("--reuse-current", action="store_true",
                    help="keep the first copy a run with --keep left, and make the second again (another --scale)")
    ap.add_argument("--per-query", type=Path, help="also write every query's latencies here (JSON lines)")
    ap.add_argument("--build-only", action="store_true",
                    help="make the copies and stop (kept), say for ab_search.py --database gk_ref_b")
    args = ap.parse_args(argv)
    if args.scale <= 0:
        ap.error("--scale must be positive")

    source = f"gk_bench_{args.chunks}"
    dsn = {name: make_conninfo(args.dsn, dbname=name) for name in COPIES}
    if args.reuse or args.reuse_current:
        require_copies(args.dsn, COPIES)
    if not args.reuse:
        build(args.dsn, source, dsn, args.scale, args.reuse_current)
    if args.build_only:
        return 0
    queries = bench_queries(args.chunks, args.queries, args.seed)

    def header(conns: dict[str, psycopg.Connection[tuple[Any, ...]]]) -> str:
        refs = [c.execute("select avgdl_ref from groundkit.bm25_impact").fetchone() for c in conns.values()]
        avgdl = conns["current"].execute(
            "select sum(total_len)::float8 / sum(n_chunks) from groundkit.scope_stats").fetchone()
        assert refs[0] is not None and refs[1] is not None and avgdl is not None
        return (f"copies of {source} (average chunk length {avgdl[0]:.1f}); avgdl_ref {refs[0][0]:.1f} (scaled) "
                f"and {refs[1][0]:.1f} (current)")

    try:
        time_copies(sys.stdout, {"scaled": dsn[COPIES[1]], "current": dsn[COPIES[0]]}, queries, args, header)
    finally:
        if not args.keep:
            drop_copies(args.dsn, COPIES)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
