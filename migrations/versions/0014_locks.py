"""Locks no other role can take, logins bound to members, and no planner statistics of text.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-03

- ``locks``: one row per lock groundkit's writers, merges and recomputes used to take as advisory
  locks. Advisory keys were public formulas and ``pg_advisory_lock`` is PUBLIC's, so any role that
  could connect could hold them and stall every redaction, merge or bulk write. A row lock needs
  UPDATE on the row's table, which only groundkit_owner has (the write functions are SECURITY
  DEFINER). The row ``reindex`` also names the session recomputing the impacts in steps and the
  random key of its session-level advisory lock (sql/042_impacts.sql says why); the row
  ``tier_rank`` names the transaction set_tier_rank() runs in (the token tiers_guard checks).
- ``object_locks``: one row per object id ever written, the row its writers lock (a row of
  ``objects`` cannot serve: an object's first write has none yet).
- ``login_members``: the opt-in binding of a login to the one member it searches as (GK010).
- No planner statistics for columns of text no plan needs: ANALYZE copied samples of them into
  ``pg_statistic``, where a redaction could not reach them. The statistics already gathered go
  too (``pg_clear_attribute_stats`` on PostgreSQL 18, a delete as superuser before that; else a
  warning: run ANALYZE on those tables once by hand, which then leaves them out).
"""

from __future__ import annotations

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
create table groundkit.locks (
    name text primary key check (name in ('pending', 'redact', 'reindex', 'tier_rank')),
    holder_pid integer,      -- reindex: the backend recomputing the impacts in steps
    holder_key bigint,       -- reindex: the key of that backend's session-level advisory lock
    holder_xact xid8         -- tier_rank: the transaction in which set_tier_rank() moves a rank
);
insert into groundkit.locks (name) values ('pending'), ('redact'), ('reindex'), ('tier_rank');

-- (their replacements are in sql/010_guards.sql and sql/042_impacts.sql)
drop function if exists groundkit._pending_lock_key();
drop function if exists groundkit._reindex_lock_key();

create table groundkit.object_locks (
    object_id text primary key
);

create table groundkit.login_members (
    login text primary key,           -- a role name, as session_user gives it
    member_sub text not null
);

-- Text no plan filters, joins or sorts on: no statistics, so none of it is copied into
-- pg_statistic. (postings.term, pending_postings.term and term_stats.term keep theirs: plans
-- and index_status() read them; redact_object analyzes them again when they name its terms.)
alter table groundkit.content_log alter column title set statistics 0,
                                  alter column body set statistics 0,
                                  alter column segments set statistics 0;
alter table groundkit.chunks alter column content set statistics 0,
                             alter column tsv set statistics 0;
alter table groundkit.objects alter column title set statistics 0;

do $clear$
declare
    col record;
begin
    for col in select * from (values ('content_log', 'title'), ('content_log', 'body'),
                                     ('content_log', 'segments'), ('chunks', 'content'),
                                     ('chunks', 'tsv'), ('objects', 'title')) v(rel, att)
    loop
        if current_setting('server_version_num')::integer >= 180000 then
            execute 'select pg_catalog.pg_clear_attribute_stats(''groundkit'', $1, $2, false)'
              using col.rel, col.att;
        elsif (select r.rolsuper from pg_catalog.pg_roles r where r.rolname = current_user) then
            delete from pg_catalog.pg_statistic s
             where s.starelid = format('groundkit.%I', col.rel)::regclass
               and s.staattnum = (select a.attnum from pg_catalog.pg_attribute a
                                   where a.attrelid = format('groundkit.%I', col.rel)::regclass
                                     and a.attname = col.att);
        else
            raise warning 'groundkit: cannot clear the planner statistics of groundkit.%.%', col.rel, col.att
                using hint = 'Needs PostgreSQL 18 or a superuser (ANALYZE keeps statistics already gathered).';
        end if;
    end loop;
end
$clear$;
"""
    )


def downgrade() -> None:
    raise NotImplementedError("groundkit revisions are forward-only; restore from a backup instead")
