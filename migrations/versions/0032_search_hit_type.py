"""One composite type for a search hit: ``groundkit.search_hit`` (issue 53).

Revision ID: 0032
Revises: 0031
Create Date: 2026-12-06

``groundkit.search``, ``groundkit.run_search``, ``groundkit.search_dense`` and
``groundkit.search_hybrid`` (and the GK008 stubs of the last two, on a server without pgvector)
spelled their columns out, each in its own ``returns table (...)``. They now all return
``setof groundkit.search_hit``: the 17 columns search returned, in the same order, then
``bm25_rank`` and ``dense_rank`` (null outside hybrid), the shape of the Python model
``groundkit.models.SearchHit``. So ``select * from groundkit.search(...)`` now gives 19 columns,
the last two null (docs/sql-api.md, "Citations").

A function's return type cannot change in place, so the old signatures are dropped here, once,
and the replaceable SQL (sql/069_search.sql, sql/085_runs.sql, sql/087_dense_search.*.sql)
creates the new ones in the same transaction. They are found in the catalog by name and shape
(a set of records: ``returns table``), not spelled out, because the pgvector variants' argument
type ``vector`` lives in whichever schema the extension was installed into. A view or an
``begin atomic`` function of the app's that depends on one of them stops this migrate with
Postgres's dependency error (nothing is dropped with cascade); drop it first, recreate it after.
"""

from __future__ import annotations

from alembic import op

revision = "0032"
down_revision = "0031"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
create type groundkit.search_hit as (
    object_id text,
    object_version bigint,
    chunk_seq integer,
    content_type text,
    space_id text,
    title text,
    content text,
    score double precision,
    start_ms bigint,
    end_ms bigint,
    char_start integer,
    char_end integer,
    heading_path text[],
    thread_id text,
    thread_title text,
    chunker text,
    snippet text,
    bm25_rank integer,
    dense_rank integer);

do $drop$
declare
    fn regprocedure;
begin
    for fn in
        select p.oid::regprocedure
          from pg_catalog.pg_proc p join pg_catalog.pg_namespace n on n.oid = p.pronamespace
         where n.nspname = 'groundkit'
           and p.proname in ('run_search', 'search', 'search_dense', 'search_hybrid')
           and p.proretset and p.prorettype = 'pg_catalog.record'::pg_catalog.regtype
         order by p.proname = 'run_search' desc  -- the caller before what it calls
    loop
        execute pg_catalog.format('drop function %s', fn);
    end loop;
end
$drop$;
"""
    )


def downgrade() -> None:
    raise NotImplementedError("groundkit revisions are forward-only; restore from a backup instead")
