"""Issue 53: a search hit's columns are said once, by the composite type ``groundkit.search_hit``
that every search function returns (revision 0032), and the revision leaves no stale overload."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

import groundkit
from groundkit import SearchHit
from tests.conftest import upgrade_revisions_only

SEARCH_FUNCTIONS = ("run_search", "search", "search_dense", "search_hybrid")
HIT_COLUMNS = ("object_id text, object_version bigint, chunk_seq integer, content_type text, space_id text,"
               " title text, content text, score double precision, start_ms bigint, end_ms bigint,"
               " char_start integer, char_end integer, heading_path text[], thread_id text, thread_title text,"
               " chunker text, snippet text")


def search_result_types(conn: psycopg.Connection[Any]) -> dict[str, list[tuple[str, bool]]]:
    """Each search function's overloads: (result type, returns a set), by name."""
    found: dict[str, list[tuple[str, bool]]] = {}
    for name, rettype, retset in conn.execute(
            "select p.proname::text, p.prorettype::regtype::text, p.proretset"
            "  from pg_catalog.pg_proc p where p.pronamespace = 'groundkit'::regnamespace"
            "   and p.proname = any(%s) order by 1, p.oid::regprocedure::text", (list(SEARCH_FUNCTIONS),)):
        found.setdefault(name, []).append((rettype, retset))
    return found


def assert_every_search_returns_search_hit(conn: psycopg.Connection[Any]) -> None:
    """One overload of each search function, each `returns setof groundkit.search_hit`; and no
    function of the schema spells a hit's columns out in its own `returns table` (a search added
    later without the type fails here)."""
    assert search_result_types(conn) == {name: [("groundkit.search_hit", True)] for name in SEARCH_FUNCTIONS}
    spelled = conn.execute(
        "select p.oid::regprocedure::text from pg_catalog.pg_proc p"
        " where p.pronamespace = 'groundkit'::regnamespace and p.proargnames @> array['snippet', 'score']"
        "   and p.proargmodes::text[] && array['t', 'o']").fetchall()
    assert spelled == []


def test_every_search_function_returns_the_search_hit_type(dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        assert conn.execute("select groundkit.pgvector_available()").fetchone() == (True,)
        assert_every_search_returns_search_hit(conn)
        columns = conn.execute(
            "select a.attname::text from pg_catalog.pg_attribute a"
            " where a.attrelid = 'groundkit.search_hit'::regclass and a.attnum > 0 and not a.attisdropped"
            " order by a.attnum").fetchall()
    # the Python model's fields, but the query notice (a NOTICE in SQL, not a column)
    assert sorted(c for (c,) in columns) == sorted(f for f in SearchHit.model_fields if f != "query_notice")
    assert [c for (c,) in columns][-3:] == ["snippet", "bm25_rank", "dense_rank"]


def test_search_hit_type_belongs_to_the_owner_role(dsn: str) -> None:
    """Like every table and function of the schema (sql/090_roles.sql), where the role exists."""
    with psycopg.connect(dsn) as conn:
        if conn.execute("select 1 from pg_roles where rolname = 'groundkit_owner'").fetchone() is None:
            pytest.fail("the test server's migrate creates groundkit_owner")
        owner = conn.execute("select pg_get_userbyid(typowner) from pg_type"
                             " where oid = 'groundkit.search_hit'::regtype").fetchone()
    assert owner == ("groundkit_owner",)


def test_revision_0032_replaces_the_returns_table_signatures(empty_dsn: str) -> None:
    """A database migrated by the release before 0032: the four searches each `returns table (...)`
    (the dense ones naming `vector`, here in a schema of its own), and a stub left from a migrate
    before pgvector. `create or replace` cannot change a result type, so 0032 drops them, once;
    the replaceable SQL creates today's, and nothing stale is left."""
    upgrade_revisions_only(empty_dsn, "0031")
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        conn.execute("create schema ext")
        conn.execute("create extension vector schema ext")
        seventeen = f"returns table ({HIT_COLUMNS}) language plpgsql as 'begin end'"
        old = [
            "groundkit.search(reader_sub text, query text, k integer default 10, content_types text[] default null,"
            " space_ids text[] default null, snippet_start text default '<mark>',"
            " snippet_end text default '</mark>')",
            "groundkit.run_search(run_id uuid, search_no integer, flow text, reader_sub text, query text,"
            " k integer default 10, content_types text[] default null, space_ids text[] default null,"
            " snippet_start text default '<mark>', snippet_end text default '</mark>')",
            "groundkit.search_dense(reader_sub text, query_embedding ext.vector, k integer default 10,"
            " content_types text[] default null, space_ids text[] default null, exact boolean default false,"
            " query text default null)",
            "groundkit.search_dense(reader_sub text, query_embedding text, k integer default 10,"
            " content_types text[] default null, space_ids text[] default null, exact boolean default false,"
            " query text default null)",
        ]
        for signature in old:
            conn.execute(f"create function {signature} {seventeen}")
        conn.execute(
            "create function groundkit.search_hybrid(reader_sub text, query text, query_embedding ext.vector,"
            " k integer default 10, content_types text[] default null, space_ids text[] default null,"
            " fusion text default 'rrf', rrf_k integer default 20, bm25_weight double precision default 1,"
            " dense_weight double precision default 1, depth integer default 100, match_gate boolean default false,"
            " snippet_start text default '<mark>', snippet_end text default '</mark>')"
            f" returns table ({HIT_COLUMNS}, bm25_rank integer, dense_rank integer)"
            " language plpgsql as 'begin end'")
        assert {name: len(types) for name, types in search_result_types(conn).items()} == {
            "run_search": 1, "search": 1, "search_dense": 2, "search_hybrid": 1}
    groundkit.migrate(empty_dsn, gate=False)
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        assert_every_search_returns_search_hit(conn)
        assert conn.execute("select groundkit._vector_schema()").fetchone() == ("ext",)
        assert conn.execute("select * from groundkit.search('x', 'y')").fetchall() == []
    groundkit.migrate(empty_dsn, gate=False)  # and again: nothing left to drop, nothing dropped by mistake
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        assert_every_search_returns_search_hit(conn)
