"""The operator console as a person uses it: Debian's Chromium, driven by Playwright, against the
real console on loopback.

Chromium is ``/usr/bin/chromium`` (``apt-get install chromium``; .ci/run installs it), or the
binary ``GK_CHROMIUM`` names. Without it these tests fail, loudly: they are the proof of the
console's pages. ``GK_SKIP_BROWSER_TESTS=1`` skips them instead on a machine without a browser,
except under CI (``CI`` set), where a missing browser always fails. Each run saves a screenshot
of every page, at a desktop's width with JavaScript and at a phone's width without, under
``build/console-screenshots`` (or ``GK_CONSOLE_SCREENSHOTS``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import pytest

from groundkit.console import ConsoleReads, create_app
from groundkit.health import Thresholds
from groundkit.serve.background import serving
from tests.console_world import BREAKOUT, FORGED, PAYLOAD, QUERY, SCRIPT, T3_ONLY, XSS_OBJECT, World, console, world

__all__ = ["console", "world"]  # (fixtures)

CHROMIUM = os.environ.get("GK_CHROMIUM", "/usr/bin/chromium")
# As the machine notes say: no sandbox (root in a container), no GPU, and nothing that calls home
# (the closed network refuses it, many connections at a time).
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run", "--disable-quic"]
SHOTS = Path(os.environ.get("GK_CONSOLE_SCREENSHOTS", Path(__file__).resolve().parent.parent / "build"
                            / "console-screenshots"))
DESKTOP = {"width": 1100, "height": 900}
PHONE = {"width": 390, "height": 844}  # about 80 columns of text: a phone held upright
PAGES = {"view": "/view?member=t3&q=kiln+firing+schedule&k=10&object=t3-kiln", "health": "/health",
         "spend": "/spend?since=30d", "quality": "/quality", "runs": "/runs"}


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        if os.environ.get("GK_SKIP_BROWSER_TESTS") == "1" and not os.environ.get("CI"):
            pytest.skip(f"no Chromium at {CHROMIUM} and GK_SKIP_BROWSER_TESTS=1")
        pytest.fail(f"the console's browser tests need Chromium at {CHROMIUM}: apt-get install chromium, "
                    "or set GK_CHROMIUM to its binary (GK_SKIP_BROWSER_TESTS=1 skips them)",
                    pytrace=False)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        # (Playwright starts the browser with a fresh, empty profile directory of its own, and --headless)
        chromium = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        try:
            yield chromium
        finally:
            chromium.close()


class Visit:
    """One browser context: a person at one screen size, with or without JavaScript."""

    def __init__(self, browser: Any, base: str, *, javascript: bool = True, viewport: dict[str, int] = DESKTOP):
        self.base = base
        self.context = browser.new_context(viewport=viewport, java_script_enabled=javascript)
        self.page = self.context.new_page()
        self.errors: list[str] = []  # console errors: a CSP refusal shows up here
        self.dialogs: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("dialog", self._dialog)

    def _dialog(self, dialog: Any) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def go(self, path: str) -> Any:
        return self.page.goto(self.base + path)

    def log_in(self, token: str) -> None:
        self.go("/login")
        self.page.fill("#token", token)
        self.page.click("section.login button[type=submit]")

    def view(self, member: str, query: str = QUERY, obj: str = "") -> None:
        self.go("/view")
        self.page.fill("#member", member)
        self.page.fill("#q", query)
        self.page.fill("#object", obj)
        self.page.click("form.query button")
        self.page.wait_for_selector("#mode-bm25")

    def bm25_ids(self) -> set[str]:
        return set(self.page.locator("#mode-bm25 li.hit").evaluate_all(
            "items => items.map(li => li.dataset.objectId)"))

    def shoot(self, name: str) -> None:
        SHOTS.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def visit(browser: Any, console: str, world: World) -> Iterator[Visit]:
    person = Visit(browser, console)
    person.log_in(world.console_token)
    person.page.wait_for_url(f"{console}/view")
    yield person
    person.close()


def test_log_in_and_view_the_same_query_as_t0_and_as_t3(visit: Visit) -> None:
    visit.view("t3")
    assert T3_ONLY in visit.bm25_ids()
    assert visit.page.locator(f"#mode-bm25 li.hit[data-object-id='{T3_ONLY}'] .title").inner_text() == \
        "Kiln secrets for masters"
    visit.view("t0")
    assert T3_ONLY not in visit.bm25_ids() and {"open-kiln", XSS_OBJECT} <= visit.bm25_ids()
    assert visit.page.locator("#mode-bm25 mark").count() > 0  # the matches highlighted
    assert visit.errors == []  # no CSP refusal, no script error


def test_a_downgrade_shows_on_reload(visit: Visit, world: World) -> None:
    visit.view("t3")
    assert T3_ONLY in visit.bm25_ids()
    world.gk.put_member("t3", "T1")
    visit.page.reload()
    assert T3_ONLY not in visit.bm25_ids() and "open-kiln" in visit.bm25_ids()
    assert "T1" in visit.page.locator("section.member").inner_text()


def test_a_member_token_is_refused(browser: Any, console: str, world: World) -> None:
    person = Visit(browser, console)
    try:
        person.log_in(world.member_token)
        person.page.wait_for_selector("[role=alert]")
        assert person.page.url.startswith(f"{console}/login")
        assert "member's token" in person.page.locator("[role=alert]").inner_text()
        person.go("/health")
        assert person.page.url.startswith(f"{console}/login?next=")
    finally:
        person.close()


def test_a_form_without_its_csrf_token_is_refused(browser: Any, console: str, world: World) -> None:
    person = Visit(browser, console)
    try:
        person.go("/login")
        person.page.locator("input[name=csrf]").evaluate("input => input.remove()")
        person.page.fill("#token", world.console_token)
        with person.page.expect_navigation() as sent:
            person.page.click("section.login button[type=submit]")
        assert sent.value.status == 403 and "GK030" in person.page.content()
        person.go("/view")
        assert person.page.url.startswith(f"{console}/login")  # not logged in
        person.log_in(world.console_token)
        person.page.wait_for_url(f"{console}/view")
        person.page.locator("form.logout input[name=csrf]").evaluate("input => input.remove()")
        with person.page.expect_navigation() as sent:
            person.page.click("form.logout button")
        assert sent.value.status == 403 and "GK030" in person.page.content()
        person.go("/view")
        assert person.page.url == f"{console}/view"  # still logged in: the logout was refused
    finally:
        person.close()


def test_explain_names_the_tier_clause(visit: Visit, world: World) -> None:
    visit.view("t0", obj=T3_ONLY)
    panel = visit.page.locator("#explain")
    assert "cannot see" in panel.inner_text()
    assert visit.page.locator("#explain strong.decides").inner_text() == "object tier"
    assert visit.page.locator("#explain tr.decides td").first.inner_text() == "object tier"
    visit.page.locator("#mode-bm25 li.hit[data-object-id='open-kiln'] a.why").click()  # from a hit, for t0
    visit.page.wait_for_selector("#explain")
    assert visit.page.locator("#explain strong.decides").inner_text() == "predicate"
    assert "can see" in visit.page.locator("#explain h2").inner_text()


def test_every_page_at_a_phone_width_without_javascript(browser: Any, console: str, world: World) -> None:
    """Readable without JavaScript (the numbers tables stand in for the charts) and usable at a
    phone's width: nothing wider than the screen but tables, which scroll in their own box."""
    person = Visit(browser, console, javascript=False, viewport=PHONE)
    a, b, _ = world.run_ids
    more = {"run": f"/runs/{a}", "diff": f"/runs/diff?a={a}&b={b}", "verify": "/runs/verify"}
    try:
        person.go("/login")
        person.shoot("phone-login")
        person.log_in(world.console_token)
        person.page.wait_for_url(f"{console}/view")
        for name, path in {**PAGES, **more}.items():
            person.go(path)
            assert person.page.locator("h1").first.is_visible(), name
            assert person.page.locator("canvas").count() == 0  # no script ran
            widths = person.page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
            assert widths[0] <= widths[1], f"{name} is {widths[0]} px wide on a {widths[1]} px screen"
            person.shoot(f"phone-{name}")
        person.go(PAGES["spend"])
        assert person.page.locator("#cost-per-day table.chart-data").is_visible()  # the chart's numbers, open
        person.go(PAGES["view"])
        assert T3_ONLY in person.bm25_ids()
    finally:
        person.close()


def test_charts_are_drawn_under_the_csp_and_every_page_is_shot(visit: Visit, dsn: str, world: World) -> None:
    for name, path in PAGES.items():
        visit.go(path)
        visit.page.wait_for_load_state("load")
        if name in ("spend", "quality"):
            visit.page.wait_for_selector("figure.chart canvas")
            assert visit.page.locator("figure.chart details.numbers[open]").count() == 0  # the chart replaced them
        visit.shoot(f"desktop-{name}")
    a, b, _ = world.run_ids
    for name, path in (("run", f"/runs/{a}"), ("diff", f"/runs/diff?a={a}&b={b}"), ("verify", "/runs/verify")):
        visit.go(path)
        visit.shoot(f"desktop-{name}")
    assert visit.errors == [], visit.errors  # uPlot and console.js run under script-src 'self'


def test_injected_markup_renders_as_text_on_every_page(visit: Visit, world: World) -> None:
    paths = [PAGES["view"].replace("object=t3-kiln", f"object={XSS_OBJECT}"), "/health", "/spend?since=30d",
             "/quality", "/runs", f"/runs/{world.run_ids[2]}",
             f"/runs/diff?a={world.run_ids[0]}&b={world.run_ids[2]}", f"/runs/{world.run_ids[0]}", "/runs/verify",
             "/runs/" + quote(BREAKOUT), "/login?" + urlencode({"next": f"/{BREAKOUT}{SCRIPT}"})]
    for path in paths:
        visit.go(path)
        visit.page.wait_for_load_state("load")
        assert visit.page.evaluate("window.__gk_xss === undefined"), path
        assert visit.page.locator("img").count() == 0, path
        assert visit.page.locator("mark", has_text="forged").count() == 0, path
        assert visit.page.locator("script:not([src])").count() == 0, path
    visit.go("/health")
    assert visit.page.locator("#gate").inner_text().count(BREAKOUT) == 2  # the ledger's operator, as text
    visit.go(paths[0])
    title = visit.page.locator(f"#mode-bm25 li.hit[data-object-id='{XSS_OBJECT}'] .title")
    assert title.inner_text() == PAYLOAD  # shown as the text it is
    snippet = visit.page.locator(f"#mode-bm25 li.hit[data-object-id='{XSS_OBJECT}'] .snippet").inner_text()
    assert "<script>" in snippet and FORGED[:12] in snippet  # the body's markup, as text
    assert visit.dialogs == []


def test_the_console_behind_a_path_prefix(browser: Any, dsn: str, world: World) -> None:
    """--root-path: every link, form and asset under the prefix the proxy strips."""
    from starlette.types import Receive, Scope, Send

    inner = create_app(ConsoleReads(dsn, thresholds=Thresholds.from_settings(), pool_size=2),
                       root_path="/console")

    async def stripping_proxy(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            if not scope["path"].startswith("/console/"):
                await send({"type": "http.response.start", "status": 404, "headers": []})
                await send({"type": "http.response.body", "body": b""})
                return
            scope = {**scope, "path": scope["path"][len("/console"):]}
        await inner(scope, receive, send)

    with serving(stripping_proxy) as url:
        person = Visit(browser, url + "/console")
        try:
            person.log_in(world.console_token)
            person.page.wait_for_url(f"{url}/console/view")
            person.view("t3")
            assert T3_ONLY in person.bm25_ids()
            person.go("/spend")
            person.page.wait_for_selector("figure.chart canvas")  # the assets came from /console/static
            assert person.errors == []
        finally:
            person.close()
