"""``groundkit serve``: the MCP server, the HTTP retrieval API and the operator console (optional
extras)."""

from __future__ import annotations

import logging
from enum import StrEnum
from typing import Annotated

import typer

from groundkit import deployment
from groundkit import dsn as groundkit_dsn
from groundkit.cli._common import (
    DsnOption,
    EmbedLagAlertChunksOption,
    EmbedLagAlertSOption,
    FenceAlertOption,
    ReplayLagAlertOption,
    err,
    handle_errors,
)
from groundkit.client import Groundkit, resolve_dsn
from groundkit.errors import ConfigError, DatabaseUnavailable, InvalidArgument, MigrationError, Uncertified
from groundkit.health import FENCE_ALERT, REPLAY_LAG_ALERT_S, Thresholds
from groundkit.replicas import DEFAULT_MAX_LAG
from groundkit.serve.limits import BODY_TIMEOUT, HEADER_TIMEOUT, MAX_CONNECTIONS, ServerLimits
from groundkit.serve.models import GateHealth
from groundkit.serve.service import LOCK_TIMEOUT, POOL_SIZE, POOL_TIMEOUT, STATEMENT_TIMEOUT, ReadService

CONSOLE_POOL = 4  # the console's pages are read by a few operators, a page's reads one after another

app = typer.Typer(help="Serve retrieval to agents (MCP) and apps (HTTP), as authenticated members; and the operator "
                       "console.",
                  no_args_is_help=True, rich_markup_mode="markdown")

HostOption = Annotated[str, typer.Option(help="Interface to listen on.")]
PoolSizeOption = Annotated[int, typer.Option(min=1, max=1000, help="Most database connections at once.")]
PoolTimeoutOption = Annotated[float, typer.Option(
    min=0.01, help="Seconds a request waits for a free connection before it gets a 503 (GK019).")]
ReplicaOption = Annotated[list[str] | None, typer.Option(
    "--replica", help="A streaming replica's DSN (repeat for more): reads go to one that has replayed every "
                      "permission change and lags by at most --max-lag, else to the primary (docs/replicas.md).")]
MaxLagOption = Annotated[float, typer.Option(
    min=0.01, max=86_400, help="Seconds new content may lag on a replica (revocations never may).")]
StatementTimeoutOption = Annotated[float, typer.Option(
    min=0, max=86_400, help="Seconds a database statement may run before the request gets a 503 (GK019); 0: no "
                            "limit.")]
LockTimeoutOption = Annotated[float, typer.Option(
    min=0, max=86_400, help="Seconds a statement may wait for a lock (a rebuild holds chunks) before the request "
                            "gets a 503 (GK019); 0: no limit.")]
HeaderTimeoutOption = Annotated[float, typer.Option(
    min=0.01, max=3600, help="Seconds for a request's headers to arrive whole (from the connection opening or the "
                             "previous response); else 408 and the connection is closed.")]
BodyTimeoutOption = Annotated[float, typer.Option(
    min=0.01, max=3600, help="Seconds for a request's body to arrive whole, after its headers; else the connection "
                             "is closed.")]
MaxConnectionsOption = Annotated[int, typer.Option(
    min=1, max=1_000_000, help="Connections open at once; one more is answered 503 (GK019) and closed.")]


class Transport(StrEnum):
    stdio = "stdio"
    http = "http"


AllowUngatedOption = Annotated[bool, typer.Option(
    "--allow-ungated", help="Start even though no passing gate certifies the configuration serving readers (or it "
                            "cannot be checked): logged, and shown in /healthz. Without it the server refuses to "
                            "start (docs/governance.md).")]

log = logging.getLogger("groundkit.serve")


def gate_check(dsn: str, allow_ungated: bool) -> GateHealth:
    """The startup check: the configuration serving readers must be certified by the gate
    (``groundkit.deployment_status()``), else :class:`Uncertified` (GK021), unless
    ``allow_ungated``, which is logged and returned for /healthz. A database that cannot be asked
    is uncertified too: the server does not start on a configuration nobody checked."""
    gate: deployment.DeploymentStatus | None = None
    why: str | None = None
    try:
        with Groundkit.connect(dsn) as gk:
            gate = deployment.serving_status(gk)
    except (DatabaseUnavailable, MigrationError) as exc:
        why = f"cannot check the gate's certificate: {exc.message}"
    else:
        if gate is None:
            why = "this database has no gate ledger (groundkit migrate)"
        elif not gate.certified:
            why = gate.reason
    certified = gate is not None and gate.certified
    health = GateHealth(certified=certified, allowed_ungated=not certified and allow_ungated,
                        config_hash=gate.config_hash if gate else None, ledger_id=gate.ledger_id if gate else None,
                        reason=why)
    if certified:
        assert gate is not None
        err.print(f"gate: configuration {gate.config_hash[:16]} certified by ledger row {gate.ledger_id}",
                  highlight=False)
        return health
    if not allow_ungated:
        raise Uncertified(f"refusing to serve: {why}. Certify it (groundkit eval gate, groundkit migrate), or start "
                          "with --allow-ungated (logged, and shown in /healthz)")
    log.warning("serving UNGATED (--allow-ungated): %s", why)
    err.print(f"[bold yellow]WARNING[/] serving ungated (--allow-ungated): {why}", highlight=False)
    return health


def _extra(module: str, extra: str) -> None:
    try:
        __import__(module)
    except ImportError:
        raise ConfigError(f"`groundkit serve` needs the {extra} extra: pip install 'groundkit[{extra}]'") from None


@app.command()
@handle_errors
def mcp(
    reader: Annotated[str | None, typer.Option(
        help="The member every call reads as (stdio only; over http each request's token names it).")] = None,
    transport: Annotated[Transport, typer.Option(help="stdio for a local agent; http for streamable HTTP at "
                                                     "/mcp, with bearer tokens.")] = Transport.stdio,
    host: HostOption = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port (http).")] = 8001,
    pool_size: PoolSizeOption = POOL_SIZE,
    pool_timeout: PoolTimeoutOption = POOL_TIMEOUT,
    statement_timeout: StatementTimeoutOption = STATEMENT_TIMEOUT,
    lock_timeout: LockTimeoutOption = LOCK_TIMEOUT,
    header_timeout: HeaderTimeoutOption = HEADER_TIMEOUT,
    body_timeout: BodyTimeoutOption = BODY_TIMEOUT,
    max_connections: MaxConnectionsOption = MAX_CONNECTIONS,
    replica: ReplicaOption = None,
    max_lag: MaxLagOption = DEFAULT_MAX_LAG,
    allow_ungated: AllowUngatedOption = False,
    dsn: DsnOption = None,
) -> None:
    """Serve the MCP tools `search` and `home`, reading as the configured `--reader` (stdio) or as
    the member of each request's bearer token (http; `groundkit tokens create`)."""
    _extra("mcp", "mcp")
    from groundkit.serve import mcp as mcp_server

    if transport is Transport.stdio and not reader:
        raise InvalidArgument("--reader is required over stdio: the member every call reads as")
    if transport is Transport.http and reader:
        raise InvalidArgument("--reader is for stdio; over http each request's bearer token names the member")
    limits = ServerLimits(header_timeout=header_timeout, body_timeout=body_timeout, max_connections=max_connections)
    target = resolve_dsn(dsn)
    groundkit_dsn.parse(target)  # (a DSN libpq cannot read: ConfigError, before anything connects)
    gate = gate_check(target, allow_ungated)
    service = ReadService(target, pool_size=pool_size, pool_timeout=pool_timeout,
                          statement_timeout=statement_timeout, lock_timeout=lock_timeout,
                          replicas=tuple(replica or ()), max_lag=max_lag)
    service.gate = gate
    if transport is Transport.stdio:
        assert reader is not None
        mcp_server.run_stdio(service, reader)
    else:
        err.print(f"MCP over streamable HTTP at http://{host}:{port}/mcp", highlight=False)
        mcp_server.run_http(service, host, port, limits)


@app.command()
@handle_errors
def http(
    host: HostOption = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port.")] = 8000,
    trust_header: Annotated[str | None, typer.Option(
        help="Take the member from this header (e.g. X-Member) instead of a bearer token: only behind a proxy "
             "that authenticates every request and sets the header itself.")] = None,
    pool_size: PoolSizeOption = POOL_SIZE,
    pool_timeout: PoolTimeoutOption = POOL_TIMEOUT,
    statement_timeout: StatementTimeoutOption = STATEMENT_TIMEOUT,
    lock_timeout: LockTimeoutOption = LOCK_TIMEOUT,
    header_timeout: HeaderTimeoutOption = HEADER_TIMEOUT,
    body_timeout: BodyTimeoutOption = BODY_TIMEOUT,
    max_connections: MaxConnectionsOption = MAX_CONNECTIONS,
    replica: ReplicaOption = None,
    max_lag: MaxLagOption = DEFAULT_MAX_LAG,
    allow_ungated: AllowUngatedOption = False,
    dsn: DsnOption = None,
) -> None:
    """Serve the HTTP retrieval API (POST /v1/search, GET /v1/home, GET /healthz, GET /openapi.json),
    reading as the member of each request's bearer token."""
    _extra("uvicorn", "http")
    from groundkit.serve.http import create_app
    from groundkit.serve.transport import serve

    limits = ServerLimits(header_timeout=header_timeout, body_timeout=body_timeout, max_connections=max_connections)
    target = resolve_dsn(dsn)
    groundkit_dsn.parse(target)  # (a DSN libpq cannot read: ConfigError, before anything connects)
    gate = gate_check(target, allow_ungated)
    service = ReadService(target, pool_size=pool_size, pool_timeout=pool_timeout,
                          statement_timeout=statement_timeout, lock_timeout=lock_timeout,
                          replicas=tuple(replica or ()), max_lag=max_lag)
    service.gate = gate
    serve(create_app(service, trust_header=trust_header), host, port, limits)


@app.command()
@handle_errors
def console(
    host: HostOption = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port.")] = 8002,
    secure_cookies: Annotated[bool, typer.Option(
        "--secure-cookies", help="Mark the session cookie Secure: behind a proxy that serves the console over "
                                 "HTTPS (docs/console.md).")] = False,
    root_path: Annotated[str, typer.Option(
        help="The path prefix a proxy serves the console under and strips before passing requests on, e.g. "
             "/console.")] = "",
    pool_size: Annotated[int, typer.Option(min=1, max=100, help="Most database connections at once.")] = CONSOLE_POOL,
    pool_timeout: PoolTimeoutOption = POOL_TIMEOUT,
    statement_timeout: StatementTimeoutOption = STATEMENT_TIMEOUT,
    lock_timeout: LockTimeoutOption = LOCK_TIMEOUT,
    header_timeout: HeaderTimeoutOption = HEADER_TIMEOUT,
    body_timeout: BodyTimeoutOption = BODY_TIMEOUT,
    max_connections: MaxConnectionsOption = MAX_CONNECTIONS,
    replica: Annotated[list[str] | None, typer.Option(
        "--replica", help="A read replica's DSN (repeat for more): Health shows its lag, as `groundkit status "
                          "--replica` does.")] = None,
    embed_lag_alert_s: EmbedLagAlertSOption = None,
    embed_lag_alert_chunks: EmbedLagAlertChunksOption = None,
    replay_lag_alert_s: ReplayLagAlertOption = REPLAY_LAG_ALERT_S,
    fence_alert: FenceAlertOption = FENCE_ALERT,
    dsn: DsnOption = None,
) -> None:
    """Serve the operator console: View as member (what search returns to a member, and why), Health,
    Spend, Quality and Runs, as server-rendered pages. Operators log in with a console token
    (`groundkit tokens create --console NAME`); a member's token is refused. Its database connections
    are read-only (docs/console.md)."""
    _extra("jinja2", "console")
    _extra("uvicorn", "console")
    from groundkit.console import ConsoleReads, create_app
    from groundkit.serve.transport import serve

    if root_path and (not root_path.startswith("/") or root_path.endswith("/") or "//" in root_path):
        raise InvalidArgument("--root-path is a path prefix such as /console (a leading slash, none at the end)")
    thresholds = Thresholds.from_settings(embed_lag_alert_s=embed_lag_alert_s,
                                          embed_lag_alert_chunks=embed_lag_alert_chunks,
                                          replay_lag_alert_s=replay_lag_alert_s, fence_alert=fence_alert)
    limits = ServerLimits(header_timeout=header_timeout, body_timeout=body_timeout, max_connections=max_connections)
    reads = ConsoleReads(resolve_dsn(dsn), thresholds=thresholds, replicas=tuple(replica or ()), pool_size=pool_size,
                         pool_timeout=pool_timeout, statement_timeout=statement_timeout, lock_timeout=lock_timeout)
    if host not in ("127.0.0.1", "::1", "localhost") and not secure_cookies:
        err.print(f"note: the console listens on {host}, beyond loopback, and its session cookie is not marked "
                  "Secure: serve it behind a proxy with HTTPS and pass --secure-cookies (docs/console.md)",
                  highlight=False)
    err.print(f"groundkit console at http://{host}:{port}{root_path}/ (log in with a console token)", highlight=False)
    serve(create_app(reads, secure_cookies=secure_cookies, root_path=root_path), host, port, limits)
