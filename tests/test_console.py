"""The operator console over real HTTP (uvicorn on loopback, httpx): who may open it, CSRF, the
security headers, what each page reads, and that nothing on a page is markup from the database.
tests/test_console_browser.py drives the same console in Chromium."""

from __future__ import annotations

import logging
import re

import httpx
import psycopg
import pytest
from markupsafe import escape
from psycopg import sql
from typer.testing import CliRunner

from groundkit import Groundkit, deployment, tokens
from groundkit.cli import app
from groundkit.console import ConsoleReads, create_app
from groundkit.console.app import CSP
from groundkit.console.queries import snippet_parts
from groundkit.health import Thresholds, health_report
from groundkit.quality.results import latest_results
from groundkit.serve.background import serving
from tests.console_world import (
    BREAKOUT,
    FORGED,
    PAYLOAD,
    QUERY,
    SCRIPT,
    T3_ONLY,
    XSS_OBJECT,
    World,
    console,
    csrf_of,
    log_in,
    world,
)
from tests.dense_fakes import trust_private

__all__ = ["console", "world"]  # (fixtures)

PAGES = ("/view", "/health", "/spend", "/quality", "/runs", "/runs/verify")


def _client() -> httpx.Client:
    return httpx.Client(timeout=30, follow_redirects=False)


def _logged_in(console: str, world: World) -> httpx.Client:
    client = _client()
    r = log_in(client, console, world.console_token)
    assert r.status_code == 303 and r.headers["location"] == "/view", r.text
    return client


def _view(client: httpx.Client, console: str, member: str, query: str = QUERY, obj: str = "") -> str:
    r = client.get(f"{console}/view", params={"member": member, "q": query, "k": 10, "object": obj})
    assert r.status_code == 200, r.text
    return r.text


def _bm25_ids(page: str) -> set[str]:
    section = page.split('id="mode-bm25"', 1)[1].split("</section>", 1)[0]
    return set(re.findall(r'data-object-id="([^"]+)"', section))


# -- who may open it ------------------------------------------------------------------------


def test_console_token_logs_in_and_every_page_needs_the_login(console: str, world: World) -> None:
    anonymous = _client()
    for page in (*PAGES, "/", "/runs/" + world.run_ids[0]):
        r = anonymous.get(console + page)
        assert r.status_code == 303 and r.headers["location"].startswith("/login?next="), page
    client = _logged_in(console, world)
    for page in PAGES:
        r = client.get(console + page)
        assert r.status_code == 200, (page, r.text)
        assert "ops" in r.text and 'action="/logout"' in r.text


def test_a_member_token_is_refused(console: str, world: World) -> None:
    client = _client()
    r = log_in(client, console, world.member_token)
    assert r.status_code == 401 and "member&#39;s token" in r.text
    assert "gk_console" not in client.cookies
    assert client.get(f"{console}/view").status_code == 303
    for token in ("", "gk_unknown", "not a token"):
        assert log_in(_client(), console, token).status_code == 401


def test_a_form_without_its_csrf_token_is_refused(console: str, world: World) -> None:
    client = _client()
    client.get(f"{console}/login")
    for data in ({"token": world.console_token}, {"token": world.console_token, "csrf": "0" * 64}):
        r = client.post(f"{console}/login", data=data)
        assert r.status_code == 403 and "GK030" in r.text
    assert client.get(f"{console}/view").status_code == 303  # not logged in
    # another session's CSRF token does not do either
    other = _client()
    other_csrf = csrf_of(other.get(f"{console}/login").text)
    assert client.post(f"{console}/login", data={"token": world.console_token, "csrf": other_csrf}).status_code == 403

    client = _logged_in(console, world)
    r = client.post(f"{console}/logout", data={})
    assert r.status_code == 403 and "GK030" in r.text
    assert client.get(f"{console}/view").status_code == 200  # still logged in
    r = client.post(f"{console}/logout", data={"csrf": csrf_of(client.get(f"{console}/view").text)})
    assert r.status_code == 303 and r.headers["location"] == "/login"
    assert client.get(f"{console}/view").status_code == 303


def test_a_form_from_another_site_is_refused(console: str, world: World) -> None:
    client = _client()
    csrf = csrf_of(client.get(f"{console}/login").text)
    r = client.post(f"{console}/login", data={"token": world.console_token, "csrf": csrf},
                    headers={"Sec-Fetch-Site": "cross-site"})
    assert r.status_code == 403 and "another site" in r.text


def test_a_revoked_console_token_ends_its_session(console: str, world: World) -> None:
    client = _logged_in(console, world)
    assert client.get(f"{console}/health").status_code == 200
    assert tokens.revoke_console_tokens(world.gk, "ops") == 1
    r = client.get(f"{console}/health")
    assert r.status_code == 303 and r.headers["location"].startswith("/login")
    assert log_in(_client(), console, world.console_token).status_code == 401


def test_a_console_token_reads_as_no_member(world: World) -> None:
    """The two kinds of token never stand in for each other."""
    assert tokens.token_member(world.gk, world.console_token) is None
    assert tokens.console_operator(world.gk, world.member_token) is None
    assert tokens.console_operator(world.gk, world.console_token) == "ops"


def test_security_headers_on_every_response(console: str, world: World) -> None:
    client = _logged_in(console, world)
    for path in (*PAGES, "/login", "/static/console.js", "/static/uPlot.iife.min.js", "/nowhere"):
        r = client.get(console + path)
        assert r.headers["content-security-policy"] == CSP, path
        assert r.headers["x-content-type-options"] == "nosniff"
        assert r.headers["x-frame-options"] == "DENY"
        assert r.headers["referrer-policy"] == "no-referrer"
    assert "script-src 'self';" in CSP and "unsafe-inline" not in CSP and "unsafe-eval" not in CSP
    page = client.get(f"{console}/health")
    assert page.headers["cache-control"] == "no-store"
    assert "<script>" not in page.text and " style=" not in page.text  # no inline script or style at all
    cookie = next(c for c in client.cookies.jar if c.name == "gk_console")
    assert cookie.has_nonstandard_attr("HttpOnly")


def test_unknown_or_repeated_parameters_are_refused(console: str, world: World) -> None:
    client = _logged_in(console, world)
    for path in ("/view?member=t0&reader=t3", "/view?member=t0&member=t3", "/view?k=5.0", "/health?x=1"):
        r = client.get(console + path)
        assert r.status_code == 400 and "GK005" in r.text, path


# -- View as member --------------------------------------------------------------------------


def test_view_as_member_shows_what_each_member_sees(console: str, world: World) -> None:
    client = _logged_in(console, world)
    t3, t0 = _view(client, console, "t3"), _view(client, console, "t0")
    assert T3_ONLY in _bm25_ids(t3) and T3_ONLY not in _bm25_ids(t0)
    assert {"open-kiln", XSS_OBJECT} <= _bm25_ids(t0)
    world.gk.put_member("t3", "T0")  # a downgrade counts from the next page
    assert T3_ONLY not in _bm25_ids(_view(client, console, "t3"))
    world.gk.put_member("t3", "T3", "suspended")
    assert _bm25_ids(_view(client, console, "t3")) == set()


def test_view_as_member_records_no_sample(console: str, world: World, dsn: str) -> None:
    """The console's connections are read-only: a search made from it is not sampled."""
    world.gk.set_sample_rate(1.0)
    client = _logged_in(console, world)
    assert T3_ONLY in _bm25_ids(_view(client, console, "t3"))
    assert world.gk._scalar("select count(*) as n from groundkit.search_samples", {}) == 0
    world.gk.search("t3", QUERY)  # (the app's own search is sampled)
    assert world.gk._scalar("select count(*) as n from groundkit.search_samples", {}) == 1


def test_snippet_markers_cannot_be_forged() -> None:
    start, end = "\ue000abc\ue001", "\ue002abc\ue003"
    parts = snippet_parts(f"a &lt;mark&gt;x&lt;/mark&gt; {start}kiln{end} &amp;lt; b", start, end)
    assert [(p.text, p.match) for p in parts] == [("a <mark>x</mark> ", False), ("kiln", True), (" &lt; b", False)]


def test_explain_names_the_tier_clause(console: str, world: World) -> None:
    """The panel is groundkit explain's answer: every clause, the one that decides, and with the
    query, which terms each chunk holds and where it ranks for the member."""
    client = _logged_in(console, world)
    hidden = _view(client, console, "t0", obj=T3_ONLY)
    assert "cannot see" in hidden and re.search(r'class="decides">object tier<', hidden)
    assert "stamped T3 (rank 3); the reader&#39;s rank is 0" in hidden
    assert "none of its chunks can rank" in hidden
    visible = _view(client, console, "t3", obj=T3_ONLY)
    assert "can see" in visible and "cannot see" not in visible
    assert re.search(r'class="decides">predicate<', visible)
    assert re.search(r"Its best chunk ranks <strong>\d+</strong> in t3's bm25 search", visible)
    assert "<code>kiln</code>" in visible  # the query's analysed terms
    unknown = _view(client, console, "t3", obj="no-such-object")
    assert re.search(r'class="decides">object<', unknown)


# -- Health, Spend, Quality, Runs ------------------------------------------------------------


def test_health_shows_the_alerts_of_status_check(dsn: str, world: World) -> None:
    """The console judges health with status --check's own code: the same alerts, the same
    thresholds, here an active embedding model's lag over a count of 0."""
    trust_private(world.gk, "http://127.0.0.1:9/v1")  # (else the outbound policy withholds the chunks: no lag)
    world.gk._fetch("select groundkit.add_embedding_model('lagging', 'openai', 8, 'cosine', 'text',"
                    " '{\"url\": \"http://127.0.0.1:9/v1\", \"model\": \"m\"}'::jsonb)", {})
    world.gk._fetch("select groundkit.cutover('lagging', true)", {})
    thresholds = Thresholds.from_settings(embed_lag_alert_chunks=0)
    expected = health_report(world.gk, thresholds).alerts
    assert expected and "chunks unembedded, more than 0" in expected[0]
    assert "not certified" in expected[-1]  # the cutover changed the configuration serving readers
    check = CliRunner().invoke(app, ["status", "--check", "--embed-lag-alert-chunks", "0", "--dsn", dsn])
    assert check.exit_code == 1
    reads = ConsoleReads(dsn, thresholds=thresholds, pool_size=2)
    with serving(create_app(reads)) as url:
        client = _logged_in(url, world)
        page = client.get(f"{url}/health").text
        for alert in expected:
            assert str(escape(alert)) in page
        assert "status --check exits 1" in page and "lagging" in page and "not certified</span>" in page
        assert 'id="backlog"' in page  # the lag over time, a chart's numbers
        # View as member: hybrid is auto now; a mode whose provider fails says so, the others answer
        view = _view(client, url, "t3")
        assert T3_ONLY in _bm25_ids(view) and 'id="mode-dense"' in view


def test_health_shows_which_configuration_the_gate_ledger_certifies(console: str, world: World) -> None:
    """The gate ledger: which configuration serves readers, the row (when, by whom, which run)
    that certifies it, and the newest rows."""
    client = _logged_in(console, world)
    page = client.get(f"{console}/health").text
    assert "No alerts (status --check exits 0)" in page
    assert "No worker has run" in page
    gate = page.split('id="gate"', 1)[1].split("</section>", 1)[0]
    status = deployment.serving_status(world.gk)
    assert status is not None and status.certified
    assert f"certified by ledger row\n     <strong>{world.certified}</strong> (gate, " in gate
    assert status.config_hash[:16] in gate and str(escape(f"by ci {BREAKOUT}")) in gate
    assert f"<code>{status.config['schema_revision']}</code>" in gate


def test_spend_page_has_cost_per_flow_model_and_day(console: str, world: World) -> None:
    client = _logged_in(console, world)
    page = client.get(f"{console}/spend", params={"since": "7d"}).text
    assert 'id="cost-per-day"' in page and 'id="calls-per-day"' in page
    flows = page.split('aria-label="Per flow"', 1)[1].split("</section>", 1)[0]
    assert ">tutor<" in flows and "0.0045 USD" in flows  # 1000 in, 100 out at m-1's price
    models = page.split('aria-label="Per model"', 1)[1].split("</section>", 1)[0]
    assert ">m-1<" in models and str(escape(f"m-{SCRIPT}")) in models
    assert client.get(f"{console}/spend", params={"since": "3d"}).status_code == 400


def test_quality_page_shows_latest_results_and_label_history(console: str, world: World) -> None:
    client = _logged_in(console, world)
    page = client.get(f"{console}/quality").text
    latest = page.split('aria-label="latest results"', 1)[1].split("</section>", 1)[0]
    assert ">hybrid<" in latest and ">0.720<" in latest and ">0.690<" in latest  # the latest run's, not the first's
    assert 'id="history-1"' in page and 'id="labels-1"' in page and ">rank 3<" in page


def test_eval_quality_stores_its_results(dsn: str, tmp_path: object) -> None:
    from pathlib import Path

    from tests.test_eval_quality import _write_beir

    dataset = _write_beir(Path(str(tmp_path)) / "tiny")
    done = CliRunner().invoke(app, ["eval", "quality", "--dataset", str(dataset), "--arm", "bm25", "--arm",
                                    "fts5", "--dsn", dsn])
    assert done.exit_code == 0, done.output
    assert "results stored as eval" in done.stderr
    with Groundkit.connect(dsn) as gk:
        rows = latest_results(gk)
    assert [(r.collection, r.arm) for r in rows] == [("tiny", "bm25"), ("tiny", "fts5")]
    assert rows[0].ndcg_10 == 1.0 and rows[0].queries == 3 and rows[0].ms_per_query is not None
    kept = CliRunner().invoke(app, ["eval", "quality", "--dataset", str(dataset), "--arm", "bm25", "--no-store",
                                    "--dsn", dsn])
    assert kept.exit_code == 0 and "stored" not in kept.stderr


def test_runs_list_open_diff_and_verify(console: str, world: World) -> None:
    client = _logged_in(console, world)
    listing = client.get(f"{console}/runs").text
    a, b, _ = world.run_ids
    assert f'href="/runs/{a}"' in listing and f'href="/runs/{b}"' in listing
    assert client.get(f"{console}/runs", params={"flow": "home"}).text.count('name="a"') == 0
    opened = client.get(f"{console}/runs/{a}").text
    assert "Search 1" in opened and T3_ONLY in opened and "now: current" in opened
    world.gk.delete_object(T3_ONLY, 2)
    assert "now: deleted" in client.get(f"{console}/runs/{a}").text
    diff = client.get(f"{console}/runs/diff", params={"a": a, "b": b}).text
    assert ">entered<" in diff and ">new-kiln<" in diff
    assert client.get(f"{console}/runs/diff", params={"a": a}).status_code == 400
    assert client.get(f"{console}/runs/00000000-0000-0000-0000-000000000000").status_code == 404
    assert client.get(f"{console}/runs/not-a-uuid").status_code == 400
    verify = client.get(f"{console}/runs/verify").text
    assert ">intact<" in verify and "entries" in verify
    with psycopg.connect(world.dsn, autocommit=True) as conn:  # the owner, every trigger off: a forged hit
        conn.execute("set session_replication_role = replica")
        conn.execute("update groundkit.run_searches set hits = jsonb_set(hits, '{0,object_version}', '7')"
                     " where run_id = %s and search_no = 1", (b,))
    verify = client.get(f"{console}/runs/verify").text
    assert ">broken<" in verify and f"(search:{b}/1): the row was changed after it was chained" in verify


def test_nothing_from_the_database_is_markup_on_any_page(console: str, world: World) -> None:
    client = _logged_in(console, world)
    pages = [_view(client, console, "t3", obj=XSS_OBJECT)]
    pages += [client.get(console + p).text for p in ("/health", "/spend", "/quality", "/runs",
                                                     f"/runs/{world.run_ids[2]}")]
    pages.append(client.get(f"{console}/runs/diff", params={"a": world.run_ids[0], "b": world.run_ids[2]}).text)
    pages.append(_client().get(f"{console}/login", params={"next": f"/{BREAKOUT}{SCRIPT}"}).text)
    pages.append(client.get(f"{console}/runs/{BREAKOUT}").text)
    for page in pages:
        assert SCRIPT not in page and BREAKOUT not in page and FORGED not in page
        assert "<img" not in page and "<script>" not in page
    view = pages[0]
    assert str(escape(PAYLOAD)) in view  # the title, as text
    assert view.count("<mark>") >= 1 and "<mark>forged" not in view
    assert str(escape(SCRIPT)) in pages[5] and str(escape(f"m-{SCRIPT}")) in pages[2]
    assert str(escape("scifact " + SCRIPT)) in pages[3] and str(escape(BREAKOUT)) in pages[3]
    assert str(escape(f"groundkit eval gate {SCRIPT}")) in pages[1] and str(escape(FORGED)) in pages[1]
    assert str(escape(f"/{BREAKOUT}{SCRIPT}")) in pages[7]


def test_console_logs_who_viewed_as_whom(console: str, world: World, caplog: pytest.LogCaptureFixture) -> None:
    client = _logged_in(console, world)
    with caplog.at_level(logging.INFO, logger="groundkit.console"):
        _view(client, console, "t3")
    assert "operator ops viewed search results as member t3" in caplog.text
    assert QUERY not in caplog.text  # the query itself is not logged


def test_tokens_cli_makes_and_revokes_console_tokens(dsn: str) -> None:
    made = CliRunner().invoke(app, ["tokens", "create", "--console", "alice-ops", "--expires", "1d", "--dsn", dsn])
    assert made.exit_code == 0, made.output
    token = made.stdout.strip().splitlines()[-1]
    with Groundkit.connect(dsn) as gk:
        assert tokens.console_operator(gk, token) == "alice-ops" and tokens.token_member(gk, token) is None
    gone = CliRunner().invoke(app, ["tokens", "revoke", "--console", "alice-ops", "--dsn", dsn])
    assert gone.exit_code == 0 and "revoked 1 console token(s) of operator alice-ops" in gone.stdout


def test_console_as_an_auditor_and_reader_login(server_dsn: str, dsn: str, world: World) -> None:
    """A login granted groundkit_auditor and groundkit_reader alone: every page answers; what the
    role may not read says so; View as member still searches as the member."""
    from groundkit.gate.roles import login_roles

    with login_roles(server_dsn, dsn) as logins, psycopg.connect(server_dsn, autocommit=True) as admin:
        auditor = str(psycopg.conninfo.conninfo_to_dict(logins.auditor)["user"])
        admin.execute(sql.SQL("grant groundkit_reader to {}").format(sql.Identifier(auditor)))
        reads = ConsoleReads(logins.auditor, thresholds=Thresholds.from_settings(), pool_size=2)
        with serving(create_app(reads)) as url:
            client = _logged_in(url, world)
            for page in PAGES:
                r = client.get(url + page)
                assert r.status_code == 200, (page, r.text)
            assert T3_ONLY in _bm25_ids(_view(client, url, "t3"))
            assert "may not read this" in client.get(f"{url}/health").text
            assert ">tutor<" in client.get(f"{url}/spend").text
            assert world.run_ids[0] in client.get(f"{url}/runs").text
            assert re.search(r'class="decides">object tier<', _view(client, url, "t0", obj=T3_ONLY))
            assert "certified</span>" in client.get(f"{url}/health").text
            assert ">intact<" in client.get(f"{url}/runs/verify").text
