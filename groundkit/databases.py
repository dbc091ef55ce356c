"""Scratch databases for the demo and the evals: created afresh on the target server, so they
never touch the user's data."""

from __future__ import annotations

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from groundkit.dsn import connect, scrub
from groundkit.errors import DatabaseUnavailable, InvalidArgument


def fresh_database(server_dsn: str, name: str) -> str:
    """Drop (if present) and create database ``name`` on the server of ``server_dsn``; return its DSN."""
    if not name.startswith("groundkit_"):
        raise InvalidArgument(f"scratch database names start with 'groundkit_' (got {name!r})")
    ident = sql.Identifier(name)
    conn = connect(server_dsn, autocommit=True)  # ConfigError / DatabaseUnavailable, no password
    try:
        with conn:
            conn.execute(sql.SQL("drop database if exists {} with (force)").format(ident))
            conn.execute(sql.SQL("create database {}").format(ident))
    except psycopg.Error as exc:
        problem = scrub(server_dsn, str(exc).strip())
    else:
        return make_conninfo(server_dsn, dbname=name)
    # Raised outside the handler, so that neither __cause__ nor __context__ holds psycopg's
    # error (whose pgconn carries the password).
    raise DatabaseUnavailable(f"could not create the scratch database {name!r} on that server: {problem}")


def drop_database(server_dsn: str, name: str) -> None:
    with connect(server_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name)))
