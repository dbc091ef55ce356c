"""Least privilege: the privilege grid, and non-superuser logins trying both doors."""

from __future__ import annotations

import io

import psycopg
import pytest
from psycopg.rows import dict_row

import groundkit
from groundkit.gate import roles
from groundkit.gate.tap import Tap


def test_privilege_grid_matches_expected_file(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        assert roles.privilege_grid(conn) == roles.expected_grid()


def test_migrate_again_keeps_the_grid(dsn: str) -> None:
    """`create or replace function` resets SECURITY DEFINER; 090_roles.sql re-applies it."""
    groundkit.migrate(dsn, gate=False)
    groundkit.migrate(dsn, gate=False)
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        assert roles.privilege_grid(conn) == roles.expected_grid()


def test_logins_as_reader_and_writer(server_dsn: str, dsn: str) -> None:
    out = io.StringIO()
    tap = Tap(out)
    roles._run(server_dsn, dsn, tap)
    assert tap.failed == [], out.getvalue()
    assert len(tap.results) == 18


def test_reader_cannot_read_chunks_directly_but_can_search(server_dsn: str, dsn: str) -> None:
    roles._world(dsn)
    with roles.login_roles(server_dsn, dsn) as who, psycopg.connect(who.reader, autocommit=True) as conn:
        assert conn.execute("select current_user, usesuper from pg_user where usename = current_user"
                            ).fetchone()[1] is False  # type: ignore[index]
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("select content from groundkit.chunks")
        rows = conn.execute("select object_id from groundkit.search(reader_sub => 'alice', query => 'kiln')").fetchall()
        assert [r[0] for r in rows] == ["p1"]
