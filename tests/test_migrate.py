"""Issue 2, `groundkit migrate`: idempotent, safe when run concurrently, printable offline, and
listing what is applied and pending without writing anything."""

from __future__ import annotations

import subprocess
import sys
import threading
from typing import Any

import psycopg
import pytest
import sqlalchemy
from psycopg import sql

import groundkit
from groundkit import Groundkit, MigrationState
from tests.conftest import upgrade_revisions_only


def schema_fingerprint(dsn: str) -> list[tuple[Any, ...]]:
    """The groundkit schema as the catalog sees it: relations, columns, functions, triggers, rows
    of the seed tables."""
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            """
            select 'rel', c.relname, c.relkind::text, null from pg_class c
              join pg_namespace n on n.oid = c.relnamespace where n.nspname = 'groundkit'
            union all
            select 'col', c.relname || '.' || a.attname, format_type(a.atttypid, a.atttypmod), null
              from pg_attribute a join pg_class c on c.oid = a.attrelid
              join pg_namespace n on n.oid = c.relnamespace
             where n.nspname = 'groundkit' and a.attnum > 0 and not a.attisdropped
            union all
            select 'fn', p.proname, pg_get_function_identity_arguments(p.oid), md5(p.prosrc)
              from pg_proc p join pg_namespace n on n.oid = p.pronamespace where n.nspname = 'groundkit'
            union all
            select 'trg', t.tgname, t.tgrelid::regclass::text, null from pg_trigger t
              join pg_class c on c.oid = t.tgrelid join pg_namespace n on n.oid = c.relnamespace
             where n.nspname = 'groundkit' and not t.tgisinternal
            union all
            select 'tier', name, rank::text, null from groundkit.tiers
            union all
            select 'ctype', name, null, null from groundkit.content_types
            union all
            select 'cfg', bm25_k1::text, bm25_b::text, chunk_chars::text from groundkit.config
            order by 1, 2, 3
            """
        ).fetchall()


def test_migrate_is_idempotent(gk: Groundkit, dsn: str) -> None:
    gk.put_member("m", "T1")
    gk.put_space("s", "T0")
    gk.put_object("o", 1, "board_post", "s", "T0", "Title", "migrations are idempotent")
    before = schema_fingerprint(dsn)
    checksum = gk.state_checksum()
    marker = gk.snapshot_marker()
    for _ in range(2):
        state = groundkit.migrate(dsn, gate=False)
        assert isinstance(state, MigrationState)
        assert state.pending == () and state.up_to_date
        assert state.current == (state.head,)
        assert groundkit.migration_state(dsn).pending == ()
        assert schema_fingerprint(dsn) == before
    assert gk.state_checksum() == checksum
    assert gk.snapshot_marker() == marker
    assert [h.object_id for h in gk.search("m", "idempotent")] == ["o"]


def test_migrate_twice_on_an_empty_database(empty_dsn: str) -> None:
    first = groundkit.migrate(empty_dsn, gate=False)
    fingerprint = schema_fingerprint(empty_dsn)
    second = groundkit.migrate(empty_dsn, gate=False)
    assert first == second
    assert second.pending == ()
    assert schema_fingerprint(empty_dsn) == fingerprint


def test_two_concurrent_migrate_runs_on_an_empty_database(empty_dsn: str) -> None:
    results: list[MigrationState] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(2)

    def run() -> None:
        try:
            barrier.wait()
            results.append(groundkit.migrate(empty_dsn, gate=False))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert len(results) == 2
    assert all(r.pending == () for r in results)
    with psycopg.connect(empty_dsn) as conn:
        assert conn.execute("select count(*) from groundkit.tiers").fetchone() == (4,)
        assert conn.execute("select count(*) from groundkit.alembic_version").fetchone() == (1,)
    with Groundkit.connect(empty_dsn) as gk:
        gk.put_member("m", "T0")
        gk.put_space("s")
        gk.put_object("o", 1, "event", "s", "T0", "Open day", "open day")
        assert [h.object_id for h in gk.search("m", "open day")] == ["o"]


def test_two_concurrent_migrate_processes_on_an_empty_database(empty_dsn: str) -> None:
    """Two processes: only the advisory lock keeps them apart."""
    code = "import sys, groundkit; print(groundkit.migrate(sys.argv[1], gate=False).pending)"
    procs = [subprocess.Popen([sys.executable, "-c", code, empty_dsn], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err[-2000:]
        assert out.strip() == "()"
    assert groundkit.migration_state(empty_dsn).pending == ()
    with psycopg.connect(empty_dsn) as conn:
        assert conn.execute("select count(*) from groundkit.tiers").fetchone() == (4,)


def test_migration_sql_prints_the_ddl_without_connecting(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_connection(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("migration_sql() tried to connect to a database")

    monkeypatch.setattr(psycopg, "connect", no_connection)
    monkeypatch.setattr(sqlalchemy, "create_engine", no_connection)
    monkeypatch.delenv("GROUNDKIT_DSN", raising=False)
    ddl = groundkit.migration_sql()
    lowered = ddl.lower()
    assert "create table groundkit.content_log" in lowered
    assert "create or replace function groundkit.search" in lowered
    assert "create or replace trigger content_log_append_only" in lowered
    assert "pg_advisory_xact_lock" in lowered
    assert "alembic_version" in lowered


def test_migration_state_on_an_empty_database_writes_nothing(empty_dsn: str) -> None:
    state = groundkit.migration_state(empty_dsn)
    assert state.current == () and state.applied == ()
    assert state.head in state.pending
    assert not state.up_to_date
    assert state.replaceable_sql and all(name.endswith(".sql") for name in state.replaceable_sql)
    with psycopg.connect(empty_dsn) as conn:
        assert conn.execute("select count(*) from pg_namespace where nspname = 'groundkit'").fetchone() == (0,)
        assert conn.execute(
            "select count(*) from pg_class c join pg_namespace n on n.oid = c.relnamespace"
            " where n.nspname not in ('pg_catalog', 'information_schema', 'pg_toast')"
        ).fetchone() == (0,)


def test_migration_state_lists_applied_revisions(dsn: str) -> None:
    state = groundkit.migration_state(dsn)
    assert state.pending == ()
    assert state.applied[-1] == state.head
    assert state.current == (state.head,)


def test_revision_0011_drops_a_helper_whose_outputs_changed(empty_dsn: str) -> None:
    """`create or replace function` cannot change a function's outputs, and another argument list
    makes an overload: revision 0011 drops, once, the merged read of revisions 1716589 to 54be43c
    (eleven arguments and a fourth output, n_read), and the replaceable SQL creates today's."""
    upgrade_revisions_only(empty_dsn, "0010")
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        for name in ("_merged_read", "_merged_read_parallel"):
            conn.execute(sql.SQL(
                "create function {}(text[], double precision[], bigint[], double precision, double precision,"
                " double precision, double precision, double precision, double precision[], integer[], bigint[],"
                " out ids bigint[], out known double precision[], out dls integer[], out n_read bigint)"
                " language sql as 'select null::bigint[], null::double precision[], null::integer[], 0::bigint'"
            ).format(sql.Identifier("groundkit", name)))
    groundkit.migrate(empty_dsn, gate=False)
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        rows = conn.execute("select proname, proargnames from pg_proc where proname like '\\_merged\\_read%'"
                            " order by proname").fetchall()
        assert [r[0] for r in rows] == ["_merged_read", "_merged_read_parallel"]
        assert all(r[1][-3:] == ["ids", "known", "dls"] for r in rows), rows
        assert conn.execute("select * from groundkit._merged_read('{}', '{}', '{0}', 0.9, 0.4, 20.0, 0, 1.0, '{}',"
                            " '{}', '{}')").fetchone() == ([], [], [])


def test_revision_0011_drops_the_restat_that_returned_void(empty_dsn: str) -> None:
    """_restat_space returned void before it returned how many chunks it moved; a return type
    cannot change in place, so revision 0011 drops the old one (and only that one)."""
    upgrade_revisions_only(empty_dsn, "0010")
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        conn.execute("create function groundkit._restat_space(text) returns void language sql as ''")
    groundkit.migrate(empty_dsn, gate=False)
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        returns = conn.execute("select prorettype::regtype::text from pg_proc"
                               " where oid = 'groundkit._restat_space(text)'::regprocedure").fetchone()
        assert returns == ("bigint",)
    groundkit.migrate(empty_dsn, gate=False)  # and again: nothing left to drop, nothing dropped by mistake


def test_revision_0010_repairs_a_reference_that_is_not_a_number(empty_dsn: str) -> None:
    """Before revision 0010, reindex_impacts('NaN') stored NaN as the impacts' reference length
    (the check `avgdl_ref > 0` let it through: Postgres sorts NaN above every number), and every
    impact with it. 0010 forbids that; a database holding one must still migrate, with its
    impacts recomputed at a finite reference, not stop on the new check."""
    upgrade_revisions_only(empty_dsn, "0009")
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        assert conn.execute("select version_num from groundkit.alembic_version").fetchone() == ("0009",)
        conn.execute("update groundkit.bm25_impact set avgdl_ref = 'NaN'")
        conn.execute("insert into groundkit.postings (term, chunk_id, tf, doc_len, vis_key, imp)"
                     " select 'kiln', i, 1 + i % 3, 10 * i, 0, 'NaN' from generate_series(1, 20) i")
    groundkit.migrate(empty_dsn, gate=False)
    with psycopg.connect(empty_dsn) as conn:
        row = conn.execute(
            "select i.avgdl_ref, count(*) filter (where p.imp <>"
            "       (p.tf / (p.tf + i.k1 * (1 - i.b + i.b * p.doc_len / i.avgdl_ref)))::real) as wrong,"
            "       count(*) as n"
            "  from groundkit.bm25_impact i cross join groundkit.postings p group by i.avgdl_ref").fetchone()
        assert row == (64.0, 0, 20)
