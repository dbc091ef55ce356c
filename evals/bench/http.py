"""Load on the HTTP retrieval API: many concurrent clients over loopback, every answer checked.

    python -m evals.bench http                         # 50 clients for 30 s on 20,000 chunks
    python -m evals.bench http --dsn URL --chunks 100000 --clients 50 --seconds 30
    python -m evals.bench http --baseline 4ed9805      # this server against revision 4ed9805's

In one run: a fresh database (a throwaway embedded PostgreSQL 18, or --dsn's server) with the
synthetic community corpus (evals/bench/corpus.py) loaded through the bulk path; a token per
benchmark reader (r100, r50, r5); `groundkit serve http` started as its own process on loopback
(--pool-size connections); then

- the overhead of the surface: the same (reader, query) pairs, one at a time, through
  groundkit.search on one connection and through POST /v1/search, in alternating order
  (p50 and p95 of each, and their ratio);
- the load: --clients concurrent clients (asyncio, httpx) for --seconds, each cycling through
  the readers and the benchmark's queries: requests/s, p50/p95/p99 latency, errors, and leaks.

With ``--baseline REV``, a second server runs revision REV's groundkit (a git worktree of it
on PYTHONPATH, the same interpreter and packages) on the same database, and the load runs in
alternating rounds (``--rounds`` per server, --seconds split between them), so both face the
same machine at the same time: requests/s and latency per server, and their ratio.

Every answer is checked against the reader's visible set, computed in Python from the
database's own tables (members, spaces, grants, objects) by the permission rules of the README,
not by the SQL predicate under test: a hit outside it, or at another version, is a leak. The
run fails (exit 1) on any error or leak.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.rows import dict_row

from evals.bench.common import READERS, bench_queries, log, pct, populate_authority, scratch_db, server
from evals.bench.corpus import Corpus, Obj
from evals.bench.ingest import bulk_load
from groundkit import Groundkit, tokens

Visible = dict[str, dict[str, int]]  # reader -> object_id -> current version


def visible_sets(dsn: str, readers: Sequence[str]) -> Visible:
    """Each reader's visible objects (at their current version), by the README's five rules."""
    with psycopg.connect(dsn, row_factory=dict_row) as conn:
        ranks = {r["name"]: r["rank"] for r in conn.execute("select name, rank from groundkit.tiers")}
        members = {r["member_sub"]: r for r in conn.execute("select * from groundkit.members")}
        spaces = {r["space_id"]: r for r in conn.execute("select * from groundkit.spaces")}
        grants = {(r["space_id"], r["member_sub"]) for r in conn.execute("select * from groundkit.space_grants")}
        objects = conn.execute("select object_id, version, space_id, tier_visibility, owner_sub, owner_only"
                               " from groundkit.objects where state = 'live'").fetchall()
    out: Visible = {}
    for reader in readers:
        m = members.get(reader)
        seen: dict[str, int] = {}
        if m is not None and m["status"] == "active":
            rank = ranks[m["tier"]]
            for o in objects:
                s = spaces[o["space_id"]]
                if (rank >= ranks[o["tier_visibility"]] and rank >= ranks[s["min_tier"]]
                        and (not s["private"] or (o["space_id"], reader) in grants)
                        and (not o["owner_only"] or o["owner_sub"] == reader)):
                    seen[o["object_id"]] = o["version"]
        out[reader] = seen
    return out


@dataclass
class Tally:
    latencies_ms: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    leaks: list[str] = field(default_factory=list)
    hits: int = 0

    def judge(self, reader: str, status: int, body: Any, visible: Visible) -> None:
        if status != 200:
            self.errors.append(f"HTTP {status}: {str(body)[:200]}")
            return
        for hit in body["hits"]:
            self.hits += 1
            version = visible[reader].get(hit["object_id"])
            if version != hit["object_version"]:
                self.leaks.append(f"{reader} got {hit['object_id']} v{hit['object_version']} (visible: {version})")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(dsn: str, port: int, pool_size: int, options: Sequence[str] = (),
                 source: str | None = None) -> subprocess.Popen[bytes]:
    """``groundkit serve http`` as its own process on loopback (``options``: more of its options),
    once /healthz answers. The bench's scratch database is never gated (it measures the server,
    not a deployment), so the server starts with ``--allow-ungated``."""
    import httpx

    cmd = [sys.executable, "-c", "from groundkit.cli import app; app(prog_name='groundkit')",
           "serve", "http", "--port", str(port), "--pool-size", str(pool_size), "--allow-ungated", *options,
           "--dsn", dsn]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if source is not None:  # another revision's groundkit, ahead of the installed one
        env["PYTHONPATH"] = source
    proc = subprocess.Popen(cmd, env=env)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError("groundkit serve http did not become healthy")


def overhead(dsn: str, url: str, tokens_by_reader: dict[str, str], pairs: Sequence[tuple[str, str]], k: int,
             visible: Visible, tally: Tally) -> tuple[list[float], list[float]]:
    """ms per pair through groundkit.search directly and through POST /v1/search, alternating."""
    import httpx

    direct: list[float] = []
    http: list[float] = []
    with Groundkit.connect(dsn) as gk, httpx.Client(base_url=url, timeout=30) as client:
        for i, (reader, query) in enumerate(pairs):
            def via_sql(reader: str = reader, query: str = query) -> None:
                gk.search(reader, query, k=k)

            def via_http(reader: str = reader, query: str = query) -> None:
                r = client.post("/v1/search", json={"query": query, "k": k},
                                headers={"Authorization": f"Bearer {tokens_by_reader[reader]}"})
                tally.judge(reader, r.status_code, r.json(), visible)

            for name, fn in ((("sql", via_sql), ("http", via_http)) if i % 2 == 0
                             else (("http", via_http), ("sql", via_sql))):
                t0 = time.perf_counter()
                fn()
                (direct if name == "sql" else http).append(1000 * (time.perf_counter() - t0))
    return direct, http


async def load(url: str, tokens_by_reader: dict[str, str], queries: Sequence[str], k: int, clients: int,
               seconds: float, visible: Visible, tally: Tally) -> float:
    """--clients concurrent clients until the deadline; returns the elapsed seconds."""
    import httpx

    readers = list(tokens_by_reader)
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=30, limits=limits) as client:
        t0 = time.perf_counter()
        deadline = t0 + seconds

        async def one_client(n: int) -> None:
            rng = random.Random(n)
            i = n
            while time.perf_counter() < deadline:
                reader = readers[i % len(readers)]
                i += 1
                started = time.perf_counter()
                try:
                    r = await client.post("/v1/search", json={"query": rng.choice(queries), "k": k},
                                          headers={"Authorization": f"Bearer {tokens_by_reader[reader]}"})
                    body = r.json()
                except (httpx.HTTPError, ValueError) as exc:
                    tally.errors.append(repr(exc))
                    continue
                tally.latencies_ms.append(1000 * (time.perf_counter() - started))
                tally.judge(reader, r.status_code, body, visible)

        await asyncio.gather(*(one_client(n) for n in range(clients)))
        return time.perf_counter() - t0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m evals.bench http", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsn", help="a server to create the scratch database on (default: a throwaway embedded one)")
    ap.add_argument("--chunks", type=int, default=20_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--pool-size", type=int, default=10)
    ap.add_argument("--pairs", type=int, default=200, help="(reader, query) pairs of the overhead comparison")
    ap.add_argument("--baseline", help="a git revision whose server to compare with, in the same run")
    ap.add_argument("--rounds", type=int, default=3, help="alternating load rounds per server with --baseline")
    args = ap.parse_args(argv)
    if args.baseline:
        return compare(args)

    with server(args.dsn) as server_dsn, scratch_db(server_dsn, "http") as dsn:
        corpus = Corpus(seed=args.seed)
        with psycopg.connect(dsn, autocommit=True) as conn:
            populate_authority(conn, corpus)
        sample: list[Obj] = []
        bulk_load(dsn, corpus, args.chunks, 2000, 2, sample)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("vacuum analyze")
            conn.execute("select groundkit.analyze_postings()")
        queries = bench_queries(args.chunks, args.queries, args.seed)
        visible = visible_sets(dsn, list(READERS))
        with Groundkit.connect(dsn) as gk:
            tokens_by_reader = {r: tokens.create_token(gk, r) for r in READERS}
        port = free_port()
        proc = start_server(dsn, port, args.pool_size)
        url = f"http://127.0.0.1:{port}"
        try:
            tally = Tally()
            rng = random.Random(args.seed)
            pairs = [(rng.choice(list(READERS)), rng.choice(queries)) for _ in range(args.pairs)]
            log(f"overhead: {len(pairs)} pairs, one at a time")
            direct, http = overhead(dsn, url, tokens_by_reader, pairs, args.k, visible, tally)
            log(f"load: {args.clients} clients for {args.seconds:.0f} s")
            elapsed = asyncio.run(load(url, tokens_by_reader, queries, args.k, args.clients, args.seconds,
                                       visible, tally))
        finally:
            proc.terminate()
            proc.wait(timeout=30)

    lat = tally.latencies_ms
    shares = ", ".join(f"{r} {len(v):,}" for r, v in visible.items())
    print(f"### HTTP API under load: {args.chunks:,} chunks, pool of {args.pool_size}, loopback\n")
    print(f"visible objects by reader: {shares}\n")
    print("| one request at a time | p50 ms | p95 ms |\n|---|---|---|")
    print(f"| groundkit.search (SQL, one connection) | {pct(direct, 50):.1f} | {pct(direct, 95):.1f} |")
    print(f"| POST /v1/search (HTTP) | {pct(http, 50):.1f} | {pct(http, 95):.1f} |")
    print(f"| HTTP / SQL | {pct(http, 50) / pct(direct, 50):.2f}x | {pct(http, 95) / pct(direct, 95):.2f}x |\n")
    print(f"| clients | seconds | requests | requests/s | p50 ms | p95 ms | p99 ms | hits checked | errors | leaks |\n"
          f"|---|---|---|---|---|---|---|---|---|---|\n"
          f"| {args.clients} | {elapsed:.1f} | {len(lat):,} | {len(lat) / elapsed:,.0f} | {pct(lat, 50):.1f} "
          f"| {pct(lat, 95):.1f} | {pct(lat, 99):.1f} | {tally.hits:,} | {len(tally.errors)} | {len(tally.leaks)} |")
    for line in (tally.errors + tally.leaks)[:10]:
        print(f"- {line}")
    return 1 if tally.errors or tally.leaks or not lat else 0


@contextmanager
def revision_source(rev: str) -> Iterator[str]:
    """A detached git worktree of ``rev`` (removed on exit): its directory, for PYTHONPATH."""
    root = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                          check=True).stdout.strip()
    path = tempfile.mkdtemp(prefix=f"gk-bench-{rev[:12]}-")
    subprocess.run(["git", "-C", root, "worktree", "add", "--detach", "--force", path, rev], check=True,
                   capture_output=True)
    try:
        yield path
    finally:
        subprocess.run(["git", "-C", root, "worktree", "remove", "--force", path], capture_output=True)


def compare(args: argparse.Namespace) -> int:
    """This revision's server against ``--baseline``'s, alternating rounds of the same load."""
    with server(args.dsn) as server_dsn, scratch_db(server_dsn, "http") as dsn, \
            revision_source(args.baseline) as source:
        corpus = Corpus(seed=args.seed)
        with psycopg.connect(dsn, autocommit=True) as conn:
            populate_authority(conn, corpus)
        bulk_load(dsn, corpus, args.chunks, 2000, 2, [])
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("vacuum analyze")
            conn.execute("select groundkit.analyze_postings()")
        queries = bench_queries(args.chunks, args.queries, args.seed)
        visible = visible_sets(dsn, list(READERS))
        with Groundkit.connect(dsn) as gk:
            tokens_by_reader = {r: tokens.create_token(gk, r) for r in READERS}
        arms = {f"baseline {args.baseline}": source, "this revision": None}
        tallies = {name: Tally() for name in arms}
        elapsed = dict.fromkeys(arms, 0.0)
        seconds = args.seconds / (2 * args.rounds)
        for r in range(args.rounds):
            for name in (arms if r % 2 == 0 else reversed(list(arms))):
                port = free_port()
                proc = start_server(dsn, port, args.pool_size, source=arms[name])
                try:
                    log(f"round {r + 1}: {name}, {args.clients} clients for {seconds:.0f} s; "
                        f"load average {os.getloadavg()[0]:.2f}")
                    elapsed[name] += asyncio.run(load(f"http://127.0.0.1:{port}", tokens_by_reader, queries, args.k,
                                                      args.clients, seconds, visible, tallies[name]))
                finally:
                    proc.terminate()
                    proc.wait(timeout=30)
    load_avg = os.getloadavg()
    print(f"### HTTP API, two revisions under the same load: {args.chunks:,} chunks, pool of {args.pool_size}, "
          f"{args.clients} clients, {args.rounds} alternating rounds each, loopback; load average "
          f"{load_avg[0]:.2f} {load_avg[1]:.2f} {load_avg[2]:.2f} at the end\n")
    print("| server | requests | requests/s | p50 ms | p95 ms | p99 ms | errors | leaks |\n"
          "|---|---|---|---|---|---|---|---|")
    rates = {}
    for name, tally in tallies.items():
        lat = tally.latencies_ms
        rates[name] = (len(lat) / elapsed[name] if elapsed[name] else 0.0, pct(lat, 95) if lat else 0.0)
        print(f"| {name} | {len(lat):,} | {rates[name][0]:,.0f} | {pct(lat, 50):.1f} | {pct(lat, 95):.1f} "
              f"| {pct(lat, 99):.1f} | {len(tally.errors)} | {len(tally.leaks)} |")
    (base_rps, base_p95), (rps, p95) = rates.values()
    print(f"\nthis revision / baseline: requests/s {rps / base_rps:.2f}x, p95 {p95 / base_p95:.2f}x")
    bad = [line for t in tallies.values() for line in t.errors + t.leaks]
    for line in bad[:10]:
        print(f"- {line}")
    return 1 if bad or not all(t.latencies_ms for t in tallies.values()) else 0
