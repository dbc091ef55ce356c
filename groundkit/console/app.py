"""``groundkit serve console``: the operator console, a Starlette app of server-rendered pages.

Pages are Jinja2 templates with autoescaping on; every value from the database is text in them.
Charts are drawn by uPlot (vendored under ``static/``, MIT) from the numbers table each chart
stands above, so every page reads whole without JavaScript. No inline script or style: the
Content-Security-Policy allows scripts and styles from the console's own ``/static`` alone.
Handlers await :class:`~groundkit.console.reads.ConsoleReads`, the one seam to the database.
"""

from __future__ import annotations

import logging
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from starlette.applications import Starlette
from starlette.datastructures import MutableHeaders
from starlette.requests import ClientDisconnect, Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from groundkit.console import queries
from groundkit.console.auth import LOGIN_COOKIE, SESSION_COOKIE, Session, Sessions, check_same_site
from groundkit.console.reads import ConsoleReads
from groundkit.console.render import Renderer
from groundkit.errors import (
    ConsoleFormRefused,
    DatabaseBusy,
    DatabaseUnavailable,
    GroundkitError,
    InvalidArgument,
    MigrationError,
    UnknownRun,
)
from groundkit.explain import VisibilityExplanation
from groundkit.models import MAX_QUERY_CHARS
from groundkit.serve.inputs import parse_params
from groundkit.tokens import token_hash

log = logging.getLogger("groundkit.console")

MAX_FORM = 8 * 1024
MAX_K = 50
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'none'; "
       "font-src 'none'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
SECURITY_HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "cross-origin-opener-policy": "same-origin",
    "cross-origin-resource-policy": "same-origin",
    "permissions-policy": "camera=(), microphone=(), geolocation=(), interest-cohort=()",
}
SINCE = {"1d": timedelta(days=1), "7d": timedelta(days=7), "30d": timedelta(days=30), "90d": timedelta(days=90),
         "365d": timedelta(days=365), "all": None}
Since = Literal["1d", "7d", "30d", "90d", "365d", "all"]


class _Params(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ViewParams(_Params):
    member: str = Field(default="", max_length=256)
    q: str = Field(default="", max_length=MAX_QUERY_CHARS)
    k: int = Field(default=10, ge=1, le=MAX_K)
    object: str = Field(default="", max_length=256)


class SpendParams(_Params):
    since: Since = "30d"


class RunsParams(_Params):
    flow: str = Field(default="", max_length=64)
    reader: str = Field(default="", max_length=256)
    since: Since = "all"


class DiffParams(_Params):
    a: str = Field(default="", max_length=64)
    b: str = Field(default="", max_length=64)


class LoginForm(_Params):
    token: str = Field(default="", max_length=200)
    csrf: str = Field(default="", max_length=128)
    next: str = Field(default="", max_length=2000)


class LogoutForm(_Params):
    csrf: str = Field(default="", max_length=128)


class SecurityHeaders:
    """Adds the security headers to every response (static files and errors too); pages are
    never cached (they hold what members may see). Also puts the console's path prefix into each
    request's scope."""

    def __init__(self, app: ASGIApp, root_path: str) -> None:
        self.app = app
        self.root_path = root_path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.root_path:
            # the prefix a proxy serves the console under: in ``path`` too (as ASGI has it), whether
            # the proxy stripped it or not; Starlette routes on what follows it
            path = scope["path"]
            if path != self.root_path and not path.startswith(self.root_path + "/"):
                path = self.root_path + path
            scope = {**scope, "root_path": self.root_path, "path": path}
        static = scope["path"].startswith(f"{self.root_path}/static/")

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers[name] = value
                headers["cache-control"] = "public, max-age=3600" if static else "no-store"
            await send(message)

        await self.app(scope, receive, send_with_headers)


def _local_path(target: str) -> str | None:
    """``target`` if it is a path on this site (never another origin: no open redirect)."""
    if target.startswith("/") and not target.startswith(("//", "/\\")) and "\r" not in target and "\n" not in target:
        return target
    return None


async def _form(request: Request, model: type[_Params]) -> Any:
    """An ``application/x-www-form-urlencoded`` body of at most :data:`MAX_FORM` bytes, strictly:
    no name twice, no unknown name."""
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM:
            raise InvalidArgument(f"the form is larger than {MAX_FORM} bytes")
    kind = request.headers.get("content-type", "").split(";")[0].strip()
    if body and kind != "application/x-www-form-urlencoded":
        raise InvalidArgument("the form must be sent as application/x-www-form-urlencoded")
    try:
        items = urllib.parse.parse_qsl(body.decode("utf-8"), keep_blank_values=True, strict_parsing=bool(body),
                                       max_num_fields=16)
    except (UnicodeDecodeError, ValueError):
        raise InvalidArgument("the form is not a URL-encoded form in UTF-8") from None
    return parse_params(model, items)


Handler = Callable[[Request, Session], Awaitable[Response]]


class Console:
    """The console's routes over one :class:`ConsoleReads`."""

    def __init__(self, reads: ConsoleReads, *, sessions: Sessions | None = None, secure_cookies: bool = False,
                 root_path: str = "") -> None:
        self.reads = reads
        self.sessions = sessions or Sessions()
        self.secure = secure_cookies
        self.base = root_path.rstrip("/")
        self.render = Renderer(self.base)

    # -- plumbing -------------------------------------------------------------------------

    def _cookie(self, response: Response, name: str, value: str, max_age: int | None) -> None:
        response.set_cookie(name, value, max_age=max_age, path=self.base or "/", secure=self.secure, httponly=True,
                            samesite="strict")

    def _redirect(self, path: str) -> Response:
        return RedirectResponse(self.base + path, status_code=303)

    def _page(self, request: Request, template: str, session: Session | None, status: int = 200,
              **context: Any) -> Response:
        csrf = self.sessions.csrf(session.id, "session") if session is not None else ""
        html = self.render.page(template, path=request.url.path, operator=session.operator if session else None,
                                csrf=csrf, **context)
        return HTMLResponse(html, status_code=status)

    def _error(self, request: Request, session: Session | None, status: int, code: str, message: str) -> Response:
        return self._page(request, "error.html", session, status=status, code=code, message=message)

    async def _session(self, request: Request) -> Session | None:
        """The request's live session whose token still opens the console."""
        session = self.sessions.get(request.cookies.get(SESSION_COOKIE))
        if session is None:
            return None
        if await self.reads.operator(session.token_digest) is None:
            log.info("ended a console session of %s: its token no longer opens the console", session.operator)
            self.sessions.end(session.id)
            return None
        return session

    def page(self, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        """``handler`` behind the login, its errors rendered as pages."""

        async def endpoint(request: Request) -> Response:
            session: Session | None = None
            try:
                session = await self._session(request)
                if session is None:
                    target = request.url.path[len(self.base):] + (f"?{request.url.query}" if request.url.query else "")
                    return self._redirect("/login?" + urllib.parse.urlencode({"next": target}))
                return await handler(request, session)
            except Exception as exc:
                return self._failure(request, session, exc)

        return endpoint

    def _failure(self, request: Request, session: Session | None, exc: BaseException) -> Response:
        if isinstance(exc, ClientDisconnect):
            return Response(status_code=400)
        if isinstance(exc, ConsoleFormRefused):
            return self._error(request, session, 403, "GK030", exc.message)
        if isinstance(exc, UnknownRun):
            return self._error(request, session, 404, "GK012", exc.message)
        if isinstance(exc, DatabaseBusy):
            return self._error(request, session, 503, "GK019", "the database is busy or did not answer in time; "
                                                               "nothing was changed, try again")
        if isinstance(exc, DatabaseUnavailable | MigrationError):
            return self._error(request, session, 503, "unavailable", "the database is unavailable or not migrated")
        if isinstance(exc, GroundkitError) and exc.sqlstate and exc.sqlstate.startswith("GK"):
            return self._error(request, session, 400, exc.sqlstate, exc.message)
        log.exception("unexpected error in %s", request.url.path)
        return self._error(request, session, 500, "internal", "internal error (the server's log has it)")

    # -- logging in and out ---------------------------------------------------------------

    async def login_page(self, request: Request) -> Response:
        try:
            if await self._session(request) is not None:
                return self._redirect("/view")
        except (DatabaseUnavailable, DatabaseBusy, MigrationError) as exc:
            return self._failure(request, None, exc)
        return self._login_form(request, "", request.query_params.get("next", ""), 200)

    def _login_form(self, request: Request, message: str, target: str, status: int) -> Response:
        import secrets

        pre = secrets.token_urlsafe(24)
        response = self._page(request, "login.html", None, status=status, message=message,
                              login_csrf=self.sessions.csrf(pre, "login"), next=_local_path(target) or "")
        self._cookie(response, LOGIN_COOKIE, pre, max_age=1800)
        return response

    async def login(self, request: Request) -> Response:
        try:
            check_same_site(request.headers.get("sec-fetch-site"))
            form: LoginForm = await _form(request, LoginForm)
            self.sessions.check_csrf(request.cookies.get(LOGIN_COOKIE), "login", form.csrf)
            token = form.token.strip()
            operator, member_token = await self.reads.login(token) if token else (None, False)
        except Exception as exc:
            return self._failure(request, None, exc)
        if operator is None:
            why = ("that is a member's token: the console takes an operator token (groundkit tokens create "
                   "--console NAME)" if member_token else
                   "not a console token that is valid now (unknown, revoked or expired)")
            log.info("refused a console login: %s", "a member's token" if member_token else "no valid console token")
            return self._login_form(request, why, form.next, 401)
        session = self.sessions.start(operator, token_hash(token))
        log.info("operator %s logged in to the console", operator)
        response = self._redirect(_local_path(form.next) or "/view")
        self._cookie(response, SESSION_COOKIE, session.id, max_age=None)
        response.delete_cookie(LOGIN_COOKIE, path=self.base or "/")
        return response

    async def logout(self, request: Request, session: Session) -> Response:
        check_same_site(request.headers.get("sec-fetch-site"))
        form: LogoutForm = await _form(request, LogoutForm)
        self.sessions.check_csrf(session.id, "session", form.csrf)
        self.sessions.end(session.id)
        log.info("operator %s logged out of the console", session.operator)
        response = self._redirect("/login")
        response.delete_cookie(SESSION_COOKIE, path=self.base or "/")
        return response

    # -- pages ----------------------------------------------------------------------------

    async def home(self, request: Request, session: Session) -> Response:
        return self._redirect("/view")

    async def view(self, request: Request, session: Session) -> Response:
        params: ViewParams = parse_params(ViewParams, request.query_params.multi_items())
        member, query, object_id = params.member.strip(), params.q.strip(), params.object.strip()
        members = await self.reads.members()
        view: queries.MemberView | None = None
        explained: VisibilityExplanation | queries.Unreadable | None = None
        if member and query:
            log.info("operator %s viewed search results as member %s", session.operator, member)
            view = await self.reads.view_as_member(member, query, params.k)
        if member and object_id:
            log.info("operator %s asked why member %s may or may not see %s", session.operator, member, object_id)
            explained = await self.reads.explain(member, object_id, query or None)
        return self._page(request, "view.html", session, params=params, members=members, view=view,
                          explained=explained)

    async def health(self, request: Request, session: Session) -> Response:
        parse_params(_Params, request.query_params.multi_items())
        page, ledger = await self.reads.health()
        return self._page(request, "health.html", session, page=page, report=page.report, ledger=ledger,
                          thresholds=self.reads.thresholds)

    async def spend(self, request: Request, session: Session) -> Response:
        params: SpendParams = parse_params(SpendParams, request.query_params.multi_items())
        span = SINCE[params.since]
        page = await self.reads.spend(None if span is None else datetime.now(UTC) - span)
        return self._page(request, "spend.html", session, params=params, page=page, choices=tuple(SINCE))

    async def quality(self, request: Request, session: Session) -> Response:
        parse_params(_Params, request.query_params.multi_items())
        page = await self.reads.quality()
        return self._page(request, "quality.html", session, page=page)

    async def runs(self, request: Request, session: Session) -> Response:
        params: RunsParams = parse_params(RunsParams, request.query_params.multi_items())
        span = SINCE[params.since]
        rows = await self.reads.runs(params.flow.strip() or None, params.reader.strip() or None,
                                     None if span is None else datetime.now(UTC) - span)
        return self._page(request, "runs.html", session, params=params, rows=rows, choices=tuple(SINCE),
                          shown=queries.RUNS_SHOWN)

    async def run(self, request: Request, session: Session) -> Response:
        parse_params(_Params, request.query_params.multi_items())
        replay = await self.reads.replay(request.path_params["run_id"])
        searches: dict[int, list[Any]] = {}
        for hit in replay.hits:
            searches.setdefault(hit.search_no, []).append(hit)
        return self._page(request, "run.html", session, replay=replay, run=replay.run, searches=searches)

    async def diff(self, request: Request, session: Session) -> Response:
        params: DiffParams = parse_params(DiffParams, request.query_params.multi_items())
        if not params.a or not params.b:
            raise InvalidArgument("pick two runs to compare: a (the earlier) and b (the later)")
        result = await self.reads.diff(params.a.strip(), params.b.strip())
        return self._page(request, "diff.html", session, diff=result)

    async def verify(self, request: Request, session: Session) -> Response:
        parse_params(_Params, request.query_params.multi_items())
        log.info("operator %s verified the audit chain", session.operator)
        check = await self.reads.verify_chain()
        return self._page(request, "verify.html", session, check=check)


def create_app(reads: ConsoleReads, *, secure_cookies: bool = False, root_path: str = "",
               sessions: Sessions | None = None) -> ASGIApp:
    """The console as an ASGI app. ``secure_cookies``: mark its cookies ``Secure`` (behind TLS);
    ``root_path``: the path prefix a proxy serves it under (and strips)."""
    console = Console(reads, sessions=sessions, secure_cookies=secure_cookies, root_path=root_path)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        reads.open()
        try:
            yield
        finally:
            reads.close()

    page = console.page
    app = Starlette(routes=[
        Route("/", page(console.home), methods=["GET"]),
        Route("/login", console.login_page, methods=["GET"]),
        Route("/login", console.login, methods=["POST"]),
        Route("/logout", page(console.logout), methods=["POST"]),
        Route("/view", page(console.view), methods=["GET"]),
        Route("/health", page(console.health), methods=["GET"]),
        Route("/spend", page(console.spend), methods=["GET"]),
        Route("/quality", page(console.quality), methods=["GET"]),
        Route("/runs", page(console.runs), methods=["GET"]),
        Route("/runs/diff", page(console.diff), methods=["GET"]),
        Route("/runs/verify", page(console.verify), methods=["GET"]),
        Route("/runs/{run_id}", page(console.run), methods=["GET"]),
        Mount("/static", StaticFiles(packages=[("groundkit.console", "static")]), name="static"),
    ], lifespan=lifespan)
    return SecurityHeaders(app, console.base)
