"""How long the operator console takes to render each page, at 100k chunks.

    python -m evals.bench console                         # 100,000 chunks on a throwaway server
    python -m evals.bench console --dsn URL --chunks 100000 --runs 30

In one run: a fresh database (a throwaway embedded PostgreSQL 18, or --dsn's server) with the
synthetic community corpus loaded through the bulk path; then what the pages show, made up at a
deployment's scale: ``--calls`` metered calls over 90 days in 4 flows and 6 models, ``--agent-runs``
recorded runs of one search each, ``--evals`` stored ``eval quality`` runs (3 arms) and labelled
runs (4 tier ranks), and an embedding model that has embedded half the chunks over the last 7
days (its lag over time is reconstructed from those). ``groundkit serve console`` runs as its
own process on loopback; one client logs in and requests each page ``--runs`` times after a
warm-up, one request at a time.

For each page: p50 / p95 / max ms at the client (request to the last byte: the database's reads
plus rendering), and, on one connection in this process, the same reads the page makes (the
functions of groundkit.console.queries, p50): the rest is HTTP, the thread hand-off and the
template.

``--screenshots DIR`` also saves a screenshot of each page in Chromium (Playwright, as the tests
drive it; ``GK_CHROMIUM`` or /usr/bin/chromium), as small palette PNGs: docs/console.md's come
from ``python -m evals.bench console --screenshots docs/console`` (100,000 chunks).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from evals.bench.common import READERS, bench_queries, log, pct, populate_authority, scratch_db, server
from evals.bench.corpus import Corpus, Obj
from evals.bench.http import free_port
from evals.bench.ingest import bulk_load
from groundkit import Groundkit, tokens
from groundkit.console import queries
from groundkit.health import Thresholds

FLOWS = ("home", "tutor", "authoring", "conversational")
MODELS = ("m-small", "m-large", "m-embed", "m-mini", "m-unpriced", "m-old")

SEED_SQL = """
insert into groundkit.calls (flow, reader, model, kind, tokens_in, tokens_out, cost, currency, at)
select (%(flows)s::text[])[1 + g %% 4], 'r' || (g %% 100), (%(models)s::text[])[1 + g %% 6],
       case when g %% 6 = 2 then 'embedding' else 'llm' end, 200 + g %% 3000, g %% 700,
       case when g %% 6 = 4 then null else (g %% 1000) / 100000.0 end,
       case when g %% 6 = 4 then null else 'USD' end,
       now() - (g::double precision / %(calls)s) * interval '90 days'
  from generate_series(1, %(calls)s) g
"""
EMBED_SQL = """
insert into groundkit.embeddings (model, content_hash, embedding, created_at)
select 'bench-model', c.embed_hash_text, array_fill(0.1::real, array[8]),
       now() - random() * interval '7 days'
  from groundkit.chunks c where c.chunk_id % 2 = 0 and c.embed_hash_text is not null
on conflict do nothing
"""


def seed(dsn: str, args: argparse.Namespace, queries_: Sequence[str]) -> dict[str, str]:
    """What the pages show, at scale; the ids the page list needs."""
    from groundkit.quality.harness import QualityRow
    from groundkit.quality.results import store_collection_results, store_label_results
    from groundkit.quality.samples import RankScore

    with Groundkit.connect(dsn) as gk:
        t0 = time.perf_counter()
        gk.conn.execute(SEED_SQL, {"flows": list(FLOWS), "models": list(MODELS), "calls": args.calls})
        log(f"{args.calls:,} metered calls in {time.perf_counter() - t0:.0f} s")
        run_ids: list[str] = []
        t0 = time.perf_counter()
        for n in range(args.agent_runs):
            with gk.run(flow=FLOWS[n % 4], reader=list(READERS)[n % 3], model="m-small") as run:
                run.search(queries_[n % len(queries_)], k=10)
            run_ids.append(str(run.id))
        log(f"{args.agent_runs:,} recorded runs in {time.perf_counter() - t0:.0f} s")
        for e in range(args.evals):
            store_collection_results(gk, [QualityRow.model_validate({
                "dataset": collection, "arm": arm, "ndcg@10": 0.6 + e / 1000, "recall@10": 0.8, "recall@100": 0.9,
                "mrr@10": 0.7, "queries": 300, "ms_per_query": 7.0}) for collection in ("scifact", "nfcorpus")
                for arm in ("bm25", "dense", "hybrid")])
            store_label_results(gk, "labels.jsonl", [RankScore(
                tier_rank=rank, reader=f"groundkit-eval:rank-{rank}", queries=50, ndcg_10=0.5 + e / 1000,
                recall_10=0.5, recall_100=0.8, mrr_10=0.6) for rank in range(4)])
        gk._fetch("select groundkit.add_embedding_model('bench-model', 'openai', 8, 'cosine', 'text',"
                  " '{\"url\": \"http://127.0.0.1:9/v1\", \"model\": \"m\"}'::jsonb)", {})
        t0 = time.perf_counter()
        gk.conn.execute(EMBED_SQL)
        gk.conn.execute("analyze groundkit.embeddings")
        log(f"embedded half the chunks (made up, over 7 days) in {time.perf_counter() - t0:.0f} s")
        token = tokens.create_console_token(gk, "bench")
    return {"token": token, "run_a": run_ids[0], "run_b": run_ids[len(run_ids) // 2]}


def start_console(dsn: str, port: int) -> Any:
    import os
    import subprocess

    import httpx

    cmd = [sys.executable, "-c", "from groundkit.cli import app; app(prog_name='groundkit')",
           "serve", "console", "--port", str(port), "--dsn", dsn]
    proc = subprocess.Popen(cmd, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/login", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError("groundkit serve console did not start")


def log_in(client: Any, url: str, token: str) -> None:
    import re

    form = client.get(f"{url}/login").text
    csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', form)
    assert csrf is not None
    r = client.post(f"{url}/login", data={"csrf": csrf[1], "next": "", "token": token})
    if r.status_code != 303:
        raise RuntimeError(f"log in: {r.status_code}")


def time_page(client: Any, url: str, runs: int) -> list[float]:
    client.get(url)  # warm-up
    ms = []
    for _ in range(runs):
        t0 = time.perf_counter()
        r = client.get(url)
        ms.append(1000 * (time.perf_counter() - t0))
        if r.status_code != 200:
            raise RuntimeError(f"{url}: {r.status_code} {r.text[:300]}")
    return ms


def time_reads(gk: Groundkit, read: Callable[[Groundkit], object], runs: int) -> list[float]:
    read(gk)
    ms = []
    for _ in range(runs):
        t0 = time.perf_counter()
        read(gk)
        ms.append(1000 * (time.perf_counter() - t0))
    return ms


def pages(ids: dict[str, str], query: str, object_id: str) -> list[tuple[str, str, Callable[[Groundkit], object]]]:
    """(label, path, the page's reads on one connection)."""
    thresholds = Thresholds.from_settings()
    q = query.replace(" ", "+")
    since30 = datetime.now(UTC) - timedelta(days=30)

    def view(member: str) -> Callable[[Groundkit], object]:
        return lambda gk: (queries.members(gk), queries.view_as_member(gk, member, query, 10))

    return [
        ("view as r100 (sees ~98 %)", f"/view?member=r100&q={q}&k=10&object=", view("r100")),
        ("view as r5 (sees ~5 %)", f"/view?member=r5&q={q}&k=10&object=", view("r5")),
        ("view + explain", f"/view?member=r5&q={q}&k=10&object={object_id}",
         lambda gk: (view("r5")(gk), queries.explain(gk, "r5", object_id, query))),
        ("health", "/health", lambda gk: (queries.health(gk, thresholds, ()), queries.gate_ledger(gk))),
        ("spend, 30 days", "/spend?since=30d", lambda gk: queries.spend(gk, since30)),
        ("spend, all time", "/spend?since=all", lambda gk: queries.spend(gk, None)),
        ("quality", "/quality", queries.quality),
        ("runs (the newest 200)", "/runs", lambda gk: queries.runs(gk, None, None, None)),
        ("one run", f"/runs/{ids['run_a']}", lambda gk: queries.replay(gk, ids["run_a"])),
        ("diff of two runs", f"/runs/diff?a={ids['run_a']}&b={ids['run_b']}",
         lambda gk: queries.diff(gk, ids["run_a"], ids["run_b"])),
        ("verify the audit chain", "/runs/verify", queries.verify_chain),
    ]


def health_parts(gk: Groundkit) -> list[tuple[str, Callable[[Groundkit], object]]]:
    """Each read the Health page makes, apart (what the page waits for is the slowest of its three
    concurrent reads: status's report, the backlog, the gate ledger)."""
    from groundkit import deployment, embedding, replicas

    return [
        ("index_status", lambda gk: gk.index_status()), ("due", lambda gk: gk.due()),
        ("workers", lambda gk: gk.workers()), ("outdated_chunks", lambda gk: gk.outdated_chunks()),
        ("embedding.lag", lambda gk: embedding.lag(gk)),
        ("replication_status", lambda gk: replicas.replication_status(gk, ())),
        ("deployment.serving_status", lambda gk: deployment.serving_status(gk)),
        ("embedding_backlog, 7 days hourly", lambda gk: queries.backlog_series(gk)),
        ("gate ledger rows", lambda gk: queries.gate_ledger(gk)),
    ]


SHOTS = {"view": "/view?member=r100&q={q}&k=5&object={obj}",
         "explain": "/view?member=r5&q={q}&k=5&object={obj}#explain", "health": "/health", "spend": "/spend?since=90d",
         "quality": "/quality", "runs": "/runs", "run": "/runs/{run}", "diff": "/runs/diff?a={run}&b={run_b}"}


def screenshots(url: str, token: str, directory: str, values: dict[str, str]) -> None:
    """Each page in Chromium at a laptop's width, its first screenful, saved as a palette PNG."""
    import io
    import os
    from pathlib import Path

    from PIL import Image
    from playwright.sync_api import sync_playwright

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    flags = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", "--no-first-run", "--disable-quic"]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=os.environ.get("GK_CHROMIUM", "/usr/bin/chromium"),
                                    headless=True, args=flags)
        page = browser.new_context(viewport={"width": 1000, "height": 760}).new_page()
        page.goto(f"{url}/login")
        page.fill("#token", token)
        page.click("section.login button[type=submit]")
        page.wait_for_url(f"{url}/view")
        for name, path in SHOTS.items():
            page.goto(url + path.format(**values))
            page.wait_for_load_state("load")
            png = page.screenshot(full_page=False)
            image = Image.open(io.BytesIO(png)).convert("RGB").quantize(colors=64, method=Image.Quantize.MEDIANCUT)
            image.save(out / f"{name}.png", optimize=True)
            log(f"screenshot {out / name}.png")
        browser.close()


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m evals.bench console", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsn", help="a server to create the scratch database on (default: a throwaway embedded one)")
    ap.add_argument("--chunks", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--runs", type=int, default=30, help="requests per page, after one warm-up")
    ap.add_argument("--calls", type=int, default=1_000_000, help="metered calls over 90 days")
    ap.add_argument("--agent-runs", type=int, default=2_000, help="recorded runs")
    ap.add_argument("--evals", type=int, default=100, help="stored eval quality runs (and as many labelled runs)")
    ap.add_argument("--screenshots", help="also save a screenshot of each page into this directory")
    args = ap.parse_args(argv)
    import httpx

    with server(args.dsn) as server_dsn, scratch_db(server_dsn, "console") as dsn:
        corpus = Corpus(seed=args.seed)
        with psycopg.connect(dsn, autocommit=True) as conn:
            populate_authority(conn, corpus)
        sample: list[Obj] = []
        bulk_load(dsn, corpus, args.chunks, 2000, 2, sample)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("vacuum analyze")
            conn.execute("select groundkit.analyze_postings()")
        query = bench_queries(args.chunks, 20, args.seed)[3]
        ids = seed(dsn, args, bench_queries(args.chunks, 200, args.seed))
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("vacuum analyze")
        port = free_port()
        proc = start_console(dsn, port)
        url = f"http://127.0.0.1:{port}"
        rows = []
        try:
            with httpx.Client(timeout=120) as client, Groundkit.connect(dsn) as gk:
                gk.conn.execute("set default_transaction_read_only = on")
                log_in(client, url, ids["token"])
                for label, path, read in pages(ids, query, sample[0].object_id):
                    log(f"page: {label}")
                    page_ms = time_page(client, url + path, args.runs)
                    read_ms = time_reads(gk, read, args.runs)
                    rows.append((label, page_ms, read_ms))
                log("Health's parts")
                parts = [(name, time_reads(gk, read, max(5, args.runs // 3))) for name, read in health_parts(gk)]
            if args.screenshots:
                screenshots(url, ids["token"], args.screenshots,
                            {"q": query.replace(" ", "+"), "obj": sample[0].object_id, "run": ids["run_a"],
                             "run_b": ids["run_b"]})
        finally:
            proc.terminate()
            proc.wait(timeout=30)

    print(f"### The console's pages: {args.chunks:,} chunks, {args.calls:,} metered calls, {args.agent_runs:,} runs, "
          f"{args.evals} + {args.evals} stored evals; {args.runs} requests per page, one at a time, loopback\n")
    print(f"query: {query!r}\n")
    print("| page | p50 ms | p95 ms | max ms | the page's reads alone, p50 ms |\n|---|---|---|---|---|")
    for label, page_ms, read_ms in rows:
        print(f"| {label} | {pct(page_ms, 50):.1f} | {pct(page_ms, 95):.1f} | {max(page_ms):.1f} "
              f"| {statistics.median(read_ms):.1f} |")
    print("\nHealth's reads apart, on one connection:\n\n| read | p50 ms |\n|---|---|")
    for name, ms in parts:
        print(f"| {name} | {statistics.median(ms):.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
