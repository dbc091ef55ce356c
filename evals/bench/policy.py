"""A space's policy change (put_space) at scale: its time, and the rows it reads and writes.

    python -m evals.bench policy [--dsn URL] [--chunks 100000] [--rounds 3] [--revisions REV worktree]

A new database of --chunks chunks of the benchmark corpus (the bulk path; a board holds about 3 %
of them, a private board 1 %) plus a space of 10 objects, ``tiny``. For each measured space
(``tiny``, ``private-0``, ``board-0``), each revision's replaceable SQL (--revisions: git
revisions or ``worktree``, default the working tree alone) and --rounds rounds (which revision
goes first alternates): ``put_space`` flips the space's ``private`` and commits, then flips it
back and commits; both directions are measured. Per space and revision: the median ms of the
call with its commit, and what one call did, from ``pg_stat_xact_user_tables`` just before the
commit: rows read from ``objects`` and ``chunks`` (sequential and index fetches) and rows written
to ``postings``, ``chunks`` and ``term_stats``. A change that must move a space's chunks to other
statistics scopes and its postings to another bucket writes one row per posting of that space;
what it reads should be the space's own rows, whatever the database's size.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

import psycopg

from evals.bench.common import log, populate_authority, scratch_db, server
from evals.bench.corpus import Corpus
from evals.bench.ingest import bulk_load
from evals.bench.sqlsource import WORKTREE, describe, replaceable_sql

SPACES = ("tiny", "private-0", "board-0")
TABLES = ("objects", "chunks", "postings", "term_stats")
COUNTS_SQL = """
    select relname, seq_tup_read + coalesce(idx_tup_fetch, 0), n_tup_ins + n_tup_upd + n_tup_del
      from pg_stat_xact_user_tables
     where schemaname = 'groundkit' and relname = any(%s)
"""


def build(dsn: str, chunks: int) -> None:
    """The benchmark corpus, ``tiny`` with its 10 objects, planning statistics and a checkpoint."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        populate_authority(conn, Corpus(seed=7))
        bulk_load(dsn, Corpus(seed=7), chunks, 2000, 2, [])
        conn.execute("select groundkit.put_space('tiny', 'T0', false)")
        for i in range(10):
            conn.execute("select groundkit.put_object(%s, 1, 'board_post', 'tiny', 'T1', %s, %s)",
                         (f"tiny-{i}", f"tiny post {i}", f"a short post number {i} about tiny things"))
        conn.execute("select groundkit.merge_pending()")
        conn.execute("vacuum analyze")
        conn.execute("select groundkit.analyze_postings()")
        conn.execute("checkpoint")


def install(dsn: str, rev: str) -> None:
    """Revision ``rev``'s replaceable SQL (every sql/*.sql file at that revision)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for _name, text in replaceable_sql(rev):
            conn.execute(text.encode())  # our own SQL file at that revision


def flip(conn: psycopg.Connection[Any], space: str, private: bool) -> tuple[float, dict[str, tuple[int, int]]]:
    """put_space(space, its min tier, private) and commit: ms, and per table (rows read, rows written)."""
    tier = conn.execute("select min_tier from groundkit.spaces where space_id = %s", (space,)).fetchone()
    conn.commit()
    # The counters also hold earlier transactions' counts until they are flushed: the difference
    # within this transaction is the call's alone.
    before = counts(conn)
    t0 = time.perf_counter()
    conn.execute("select groundkit.put_space(%s, %s, %s)", (space, tier[0] if tier else "T0", private))
    after = counts(conn)
    conn.commit()
    took = 1000 * (time.perf_counter() - t0)
    zero = (0, 0)
    return took, {t: (after.get(t, zero)[0] - before.get(t, zero)[0], after.get(t, zero)[1] - before.get(t, zero)[1])
                  for t in TABLES}


def counts(conn: psycopg.Connection[Any]) -> dict[str, tuple[int, int]]:
    return {r[0]: (int(r[1]), int(r[2])) for r in conn.execute(COUNTS_SQL, (list(TABLES),))}


def space_size(conn: psycopg.Connection[Any], space: str) -> tuple[int, int]:
    """(chunks, postings) of a space's live objects."""
    row = conn.execute(
        "select count(*), coalesce(sum(length(c.tsv)), 0) from groundkit.chunks c"
        " join groundkit.objects o on o.object_id = c.object_id where o.space_id = %s and o.state = 'live'",
        (space,)).fetchone()
    conn.commit()
    assert row is not None
    return int(row[0]), int(row[1])


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m evals.bench policy", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsn", help="a server to create the database on (default: a throwaway embedded one)")
    ap.add_argument("--chunks", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--revisions", nargs="+", default=[WORKTREE],
                    help="git revisions whose replaceable SQL to compare, or worktree (default: worktree)")
    args = ap.parse_args(argv)
    revs = list(args.revisions)
    with server(args.dsn) as server_dsn, scratch_db(server_dsn, "bh_policy") as dsn:
        t0 = time.perf_counter()
        build(dsn, args.chunks)
        log(f"built {args.chunks:,} chunks in {time.perf_counter() - t0:.0f} s")
        ms: dict[tuple[str, str], list[float]] = {}
        work: dict[tuple[str, str], dict[str, tuple[int, int]]] = {}
        with psycopg.connect(dsn) as conn:
            sizes = {s: space_size(conn, s) for s in SPACES}
            for r in range(args.rounds):
                for rev in (revs if r % 2 == 0 else revs[::-1]):
                    install(dsn, rev)
                    for space in SPACES:
                        was = bool(conn.execute("select private from groundkit.spaces where space_id = %s",
                                                (space,)).fetchone()[0])  # type: ignore[index]
                        for private in (not was, was):
                            took, counts = flip(conn, space, private)
                            ms.setdefault((space, rev), []).append(took)
                            work[(space, rev)] = counts
                            log(f"  round {r + 1}, {describe(rev)}, {space} private={private}: {took:.0f} ms")
        out = sys.stdout
        out.write(f"\nput_space flipping a space's `private` and back, on {args.chunks:,} chunks; median ms of "
                  f"{2 * args.rounds} calls with their commits; rows one call read (objects, chunks) and wrote "
                  "(postings, chunks, term_stats)\n\n")
        out.write("| space | chunks | postings | revision | ms | read objects / chunks "
                  "| written postings / chunks / term_stats |\n|---|---:|---:|---|---:|---|---|\n")
        for space in SPACES:
            n_chunks, n_postings = sizes[space]
            for rev in revs:
                w = work[(space, rev)]

                def get(table: str, i: int, w: dict[str, tuple[int, int]] = w) -> str:
                    return f"{w.get(table, (0, 0))[i]:,}"

                out.write(f"| {space} | {n_chunks:,} | {n_postings:,} | {describe(rev)} "
                          f"| {statistics.median(ms[(space, rev)]):,.0f} "
                          f"| {get('objects', 0)} / {get('chunks', 0)} "
                          f"| {get('postings', 1)} / {get('chunks', 1)} / {get('term_stats', 1)} |\n")
        if len(revs) == 2:
            a, b = revs
            out.write("\n" + ", ".join(
                f"{s}: {describe(b)} / {describe(a)} = "
                f"{statistics.median(ms[(s, b)]) / statistics.median(ms[(s, a)]):.2f}x" for s in SPACES) + "\n")
    return 0
