"""Drop the functions that the replaceable SQL no longer defines: signatures that existed only
while the search was being developed, and the sub-paths the search split removed.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03

The replaceable SQL (``sql/*.sql``) holds only what it defines; a function it stops defining is
dropped once, here, so that ``groundkit migrate`` of an older database leaves no stale overload
behind.

Released revisions never change (migrations/frozen.txt holds their hashes).
"""

from __future__ import annotations

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

# every signature dropped here, one literal statement each
DROPS: tuple[str, ...] = (
    # the search's signature before the strategy argument (an overload would make calls ambiguous)
    "drop function if exists groundkit._search_pruned(text, text, integer, text[], text[], integer)",
    # merged reads before partner bits (eleven arguments; revisions 1716589 to 54be43c also had a
    # fourth output, n_read)
    "drop function if exists groundkit._merged_read_parallel(text[], double precision[], bigint[],"
    " double precision, double precision, double precision, double precision, double precision,"
    " double precision[], integer[], bigint[])",
    "drop function if exists groundkit._merged_read(text[], double precision[], bigint[],"
    " double precision, double precision, double precision, double precision, double precision,"
    " double precision[], integer[], bigint[])",
    # x_lb from a short list given the partner's bits (revisions 8e2a0e5 to 9aa0bb2), and
    # returning the bound and the partner (to 333b5bb)
    "drop function if exists groundkit._short_lb(text[], double precision[], integer, double precision,"
    " bytea, bigint, bigint[], integer, double precision, double precision, double precision, integer,"
    " text, text[], text[], integer)",
    "drop function if exists groundkit._short_lb(text[], double precision[], double precision[], integer,"
    " bigint[], integer, double precision, double precision, double precision, integer, text, text[],"
    " text[], integer)",
    # writers' materializing before the pending part's argument, and its one-id wrapper
    "drop function if exists groundkit._materialize_many(text[])",
    "drop function if exists groundkit._materialize_many(text[], boolean)",
    "drop function if exists groundkit._materialize(text)",
    # the recompute step's earlier argument list
    "drop function if exists groundkit._reindex_step(text, bigint, integer)",
    # index_status() with the columns before revision 0010's (outputs cannot change in place)
    "drop function if exists groundkit.index_status()",
    # _restat_space returned void before it returned how many chunks it moved (a return type
    # cannot change in place); only that older one is dropped
    "do $drop$ begin"
    " if (select p.prorettype = 'void'::regtype from pg_catalog.pg_proc p"
    " where p.oid = to_regprocedure('groundkit._restat_space(text)')) then"
    " drop function groundkit._restat_space(text); end if;"
    " end $drop$",
)


def upgrade() -> None:
    for statement in DROPS:
        op.execute(statement)


def downgrade() -> None:
    raise NotImplementedError("groundkit revisions are forward-only")
