"""Scratch databases for the demo, the evals, the gate and the benchmarks: created on the target
server, so they never touch the user's data, and never another run's.

A run that loads something to measure takes databases of its own (:class:`ScratchDatabases`):
named ``groundkit_scratch_<purpose>[_<part>]_<token>``, the token 16 random hex digits, held for
the run's life by a session-level advisory lock on the token, taken on a connection to the server
*before* the first of them is created. A run that is killed loses its session, and with it the
lock: a scratch database whose token no session holds belongs to a run that is gone. Each new run
drops those (without FORCE: one somebody is still connected to stays), and its own on exit (with
FORCE: they are its own). Two runs on one server never share a database, so neither can end the
other's connections.

The demo keeps its database for the user to explore (:func:`fresh_database`): a fixed name,
replaced by the next demo, which refuses (GK028) while a session is connected to it rather than
end that session.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable
from types import TracebackType
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from groundkit.dsn import connect, scrub
from groundkit.errors import DatabaseUnavailable, InvalidArgument, ScratchDatabaseInUse

SCRATCH_PREFIX = "groundkit_scratch_"
_PART = re.compile(r"[a-z0-9]+(_[a-z0-9]+)*")
_SCRATCH = re.compile(r"groundkit_scratch_[a-z0-9_]+_(?P<token>[0-9a-f]{16})")
_MAX_NAME = 63  # PostgreSQL's identifier length
_OBJECT_IN_USE = "55006"
_UNDEFINED_DATABASE = "3D000"

Notify = Callable[[str], None]


def _key(token: str) -> int:
    """The advisory lock key of a token: its 64 bits as a signed bigint."""
    return int.from_bytes(bytes.fromhex(token), "big", signed=True)


def _held(conn: psycopg.Connection[Any], token: str) -> bool:
    """Whether some session holds the token's lock. pg_locks shows every database's locks; a
    bigint advisory key shows as its high half in classid and its low half in objid."""
    key = _key(token) & 0xFFFF_FFFF_FFFF_FFFF
    row = conn.execute(
        "select exists (select 1 from pg_locks l where l.locktype = 'advisory' and l.granted"
        " and l.objsubid = 1 and l.classid = %s::oid and l.objid = %s::oid)",
        (key >> 32, key & 0xFFFF_FFFF)).fetchone()
    return bool(row and row[0])


def remove_stale(conn: psycopg.Connection[Any], notify: Notify | None = None) -> list[str]:
    """Drop the scratch databases of runs that are gone (their token's lock is free), without
    FORCE; the names dropped. One a session is still connected to, or this role may not drop, is
    left (and ``notify`` told why). ``conn``: autocommit, on the same server."""
    names = [str(r[0]) for r in conn.execute(
        "select datname from pg_database where starts_with(datname, %s) order by datname", (SCRATCH_PREFIX,))]
    dropped = []
    for name in names:
        found = _SCRATCH.fullmatch(name)
        if found is None or _held(conn, found["token"]):
            continue
        try:
            conn.execute(sql.SQL("drop database if exists {}").format(sql.Identifier(name)))
        except psycopg.Error as exc:
            if exc.sqlstate != _UNDEFINED_DATABASE and notify is not None:
                why = "a session is connected to it" if exc.sqlstate == _OBJECT_IN_USE else exc.diag.message_primary
                notify(f"left the scratch database {name} of a run that is gone: {why}")
            continue
        dropped.append(name)
        if notify is not None:
            notify(f"dropped the scratch database {name}: the run that made it is gone")
    return dropped


class ScratchDatabases:
    """The scratch databases of one run on one server (see the module's docstring).

    ``with ScratchDatabases(server_dsn, "eval_quality") as scratch: dsn = scratch.create()``.
    ``notify`` hears about stale databases dropped or left."""

    def __init__(self, server_dsn: str, purpose: str, notify: Notify | None = None) -> None:
        if not _PART.fullmatch(purpose):
            raise InvalidArgument(f"a scratch purpose is lowercase letters, digits and '_' (got {purpose!r})")
        self.server_dsn = server_dsn
        self.purpose = purpose
        self.token = secrets.token_hex(8)
        self._notify = notify
        self._admin: psycopg.Connection[Any] | None = None
        self._created: list[str] = []

    def __enter__(self) -> ScratchDatabases:
        self._admin = connect(self.server_dsn, autocommit=True)  # ConfigError / DatabaseUnavailable, no password
        try:
            self._admin.execute("select pg_advisory_lock(%s)", (_key(self.token),))
            remove_stale(self._admin, self._notify)
        except psycopg.Error as exc:
            problem = scrub(self.server_dsn, str(exc).strip())
        else:
            return self
        self.close()
        raise DatabaseUnavailable(f"could not prepare scratch databases on that server: {problem}")

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def name(self, part: str = "") -> str:
        """The name of this run's database ``part`` ('' for its only one)."""
        if part and not _PART.fullmatch(part):
            raise InvalidArgument(f"a scratch database part is lowercase letters, digits and '_' (got {part!r})")
        name = "_".join(p for p in (SCRATCH_PREFIX + self.purpose, part, self.token) if p)
        if len(name) > _MAX_NAME:
            raise InvalidArgument(f"scratch database name {name!r} is longer than {_MAX_NAME} characters")
        return name

    def dsn_for(self, name: str) -> str:
        return make_conninfo(self.server_dsn, dbname=name)

    def create(self, part: str = "", template: str | None = None) -> str:
        """Create this run's database ``part`` (empty, or a file copy of ``template``); its DSN."""
        if self._admin is None:
            raise RuntimeError("ScratchDatabases is used outside its with block")
        name = self.name(part)
        stmt = (sql.SQL("create database {}").format(sql.Identifier(name)) if template is None else
                sql.SQL("create database {} template {} strategy file_copy").format(
                    sql.Identifier(name), sql.Identifier(template)))
        try:
            self._admin.execute(stmt)
        except psycopg.Error as exc:
            problem = scrub(self.server_dsn, str(exc).strip())
        else:
            self._created.append(name)
            return self.dsn_for(name)
        raise DatabaseUnavailable(f"could not create the scratch database {name!r} on that server "
                                  f"(it needs CREATEDB): {problem}")

    def drop(self, name: str) -> None:
        """Drop one of this run's databases, ending any session on it (it is this run's own)."""
        if name not in self._created or self._admin is None:
            return
        try:
            self._admin.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name)))
        except psycopg.Error:
            return  # best effort: left for the next run to drop, once this one is gone
        self._created.remove(name)

    def close(self) -> None:
        """Drop this run's databases, then end the session that holds its lock."""
        if self._admin is None:
            return
        for name in list(reversed(self._created)):
            self.drop(name)
        admin, self._admin = self._admin, None
        admin.close()


def fresh_database(server_dsn: str, name: str) -> str:
    """Create database ``name`` on the server of ``server_dsn`` afresh (dropping a previous one,
    never while a session is connected to it: :class:`ScratchDatabaseInUse`); return its DSN."""
    if not name.startswith("groundkit_") or name.startswith(SCRATCH_PREFIX):
        raise InvalidArgument(f"a kept scratch database's name starts with 'groundkit_' (got {name!r})")
    ident = sql.Identifier(name)
    conn = connect(server_dsn, autocommit=True)  # ConfigError / DatabaseUnavailable, no password
    in_use = False
    try:
        with conn:
            try:
                conn.execute(sql.SQL("drop database if exists {}").format(ident))
            except psycopg.Error as exc:
                if exc.sqlstate != _OBJECT_IN_USE:
                    raise
                in_use = True
            else:
                conn.execute(sql.SQL("create database {}").format(ident))
    except psycopg.Error as exc:
        problem = scrub(server_dsn, str(exc).strip())
    else:
        if not in_use:
            return make_conninfo(server_dsn, dbname=name)
        raise ScratchDatabaseInUse(
            f"the database {name!r} is in use: another session is connected to it (another run of this "
            "command, or a client exploring it); close it and run again")
    # Raised outside the handler, so that neither __cause__ nor __context__ holds psycopg's
    # error (whose pgconn carries the password).
    raise DatabaseUnavailable(f"could not create the scratch database {name!r} on that server: {problem}")



def drop_database(server_dsn: str, name: str) -> None:
    """Drop database ``name`` if it exists, never while a session is connected to it
    (:class:`ScratchDatabaseInUse` then): for a command's own kept databases of fixed names."""
    conn = connect(server_dsn, autocommit=True)  # ConfigError / DatabaseUnavailable, no password
    problem = ""
    try:
        with conn:
            conn.execute(sql.SQL("drop database if exists {}").format(sql.Identifier(name)))
    except psycopg.Error as exc:
        if exc.sqlstate != _OBJECT_IN_USE:
            problem = scrub(server_dsn, str(exc).strip())
        else:
            problem = "in use"
    if problem == "in use":
        raise ScratchDatabaseInUse(f"the database {name!r} is in use: another session is connected to it "
                                   "(another run using it, or a client); close it and run again")
    if problem:
        raise DatabaseUnavailable(f"could not drop the database {name!r} on that server: {problem}")
