"""The console tests' world and server: members of every tier, an object only T3 may see, an
object whose title and body are an injection attempt, recorded runs, metered calls and stored
quality results, a configuration the gate ledger certifies, and the real console served on
loopback.

Import the fixtures into a test module (``from tests.console_world import console, world``)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import httpx
import psycopg
import pytest
from psycopg.rows import dict_row

from groundkit import Groundkit, deployment, tokens
from groundkit.console import ConsoleReads, create_app
from groundkit.gate.runner import SECTIONS
from groundkit.health import Thresholds
from groundkit.metering import meter
from groundkit.prices import parse_price_table
from groundkit.quality.harness import QualityRow
from groundkit.quality.results import store_collection_results, store_label_results
from groundkit.quality.samples import RankScore
from groundkit.serve.background import serving

# An injection attempt in every free-text field a page shows: a script, an attribute breakout
# with an image whose onerror would run, and a forged highlight.
SCRIPT = '<script>window.__gk_xss = 1; alert("xss")</script>'
BREAKOUT = '"><img src=x onerror="window.__gk_xss = 2">'
FORGED = "<mark>forged</mark>"
PAYLOAD = f"{SCRIPT} {BREAKOUT} {FORGED}"
QUERY = "kiln firing schedule"
T3_ONLY = "t3-kiln"
XSS_OBJECT = "xss-kiln"

PRICES = parse_price_table("""
[models."m-1"]
input_per_1k = 0.003
output_per_1k = 0.015
currency = "USD"
""")


@dataclass(frozen=True)
class World:
    gk: Groundkit
    dsn: str
    certified: int  # the gate ledger's row that certifies the database's configuration
    console_token: str
    member_token: str
    run_ids: tuple[str, str, str]  # the same query twice (a post entered between), then an injection


def certify(dsn: str) -> int:
    """A certified gate ledger row for the database's configuration (as tests/governance_helpers
    writes one), its operator, command and reason holding the injection attempt."""
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        return deployment.record(conn, {
            "operator": f"ci {BREAKOUT}", "kind": "gate", "command": f"groundkit eval gate {SCRIPT}",
            "verdict": "certified", "config": deployment.serving_configuration(conn), "sections_run": list(SECTIONS),
            "passed": True, "checks": 1, "failed": 0, "reason": f"test fixture {FORGED}"})


def build_world(gk: Groundkit, dsn: str) -> World:
    for sub, tier in (("t0", "T0"), ("t1", "T1"), ("t3", "T3")):
        gk.put_member(sub, tier)
    gk.put_space("open", "T0")
    gk.put_object("open-kiln", 1, "board_post", "open", "T0", "Kiln firing basics",
                  "A kiln firing schedule for beginners: bisque, then glaze.")
    gk.put_object(T3_ONLY, 1, "course_section", "open", "T3", "Kiln secrets for masters",
                  "The advanced kiln firing schedule our masters use, for T3 members only.")
    gk.put_object(XSS_OBJECT, 1, "board_post", "open", "T0", PAYLOAD,
                  f"kiln firing schedule notes {PAYLOAD} and more kiln firing")
    runs = []
    for query in (QUERY, QUERY, f"kiln {SCRIPT}"):
        with gk.run(flow="tutor", reader="t3", model="m-1", prompt_version="tutor@1") as run:
            run.search(query, k=5)
            run.record_llm("m-1", 1200, 300)
        runs.append(str(run.id))
        if len(runs) == 1:  # between the first two runs of one query: a new post enters the second
            gk.put_object("new-kiln", 1, "board_post", "open", "T0", "Kiln firing schedule, revised",
                          "A kiln firing schedule, revised: kiln firing schedule kiln firing schedule.")
    meter(gk, flow="tutor", model="m-1", kind="llm", tokens_in=1000, tokens_out=100, reader="t3", prices=PRICES)
    meter(gk, flow="home", model=f"m-{SCRIPT}", kind="embedding", tokens_in=50, tokens_out=0, prices=PRICES)
    for ndcg in (0.61, 0.69):
        store_collection_results(gk, [
            QualityRow.model_validate({"dataset": f"scifact {SCRIPT}", "arm": arm, "ndcg@10": ndcg + bump,
                                       "recall@10": 0.8, "recall@100": 0.9, "mrr@10": 0.7, "queries": 300,
                                       "ms_per_query": 7.5})
            for arm, bump in (("bm25", 0.0), ("hybrid", 0.03))])
        store_label_results(gk, f"labels {BREAKOUT}.jsonl", [
            RankScore(tier_rank=rank, reader=f"groundkit-eval:rank-{rank}", queries=40, ndcg_10=ndcg - rank / 100,
                      recall_10=0.5, recall_100=0.8, mrr_10=0.6) for rank in (0, 3)])
    return World(gk, dsn, certify(dsn), tokens.create_console_token(gk, "ops"), tokens.create_token(gk, "t3"),
                 (runs[0], runs[1], runs[2]))


@pytest.fixture
def world(gk: Groundkit, dsn: str) -> World:
    return build_world(gk, dsn)


@pytest.fixture
def console(dsn: str, world: World) -> Iterator[str]:
    """The console on loopback, over the test's database; yields its base URL."""
    reads = ConsoleReads(dsn, thresholds=Thresholds.from_settings(), pool_size=2, pool_timeout=5.0)
    with serving(create_app(reads)) as url:
        yield url


CSRF = re.compile(r'name="csrf" value="([0-9a-f]+)"')


def csrf_of(html: str) -> str:
    found = CSRF.search(html)
    assert found, "no CSRF field in the page"
    return found[1]


def log_in(client: httpx.Client, base: str, token: str) -> httpx.Response:
    """Log in the way the login form does: read the form, post it back with the token."""
    form = client.get(f"{base}/login")
    assert form.status_code == 200, form.text
    return client.post(f"{base}/login", data={"csrf": csrf_of(form.text), "next": "", "token": token})


def days_ago(n: int) -> datetime:
    return datetime.now(UTC) - timedelta(days=n)
