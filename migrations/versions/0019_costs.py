"""Cost per flow: the flows a run or a metered call may name, and the ledger of metered calls.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-03

- ``flows``: the four built-in flows (home, tutor, authoring, conversational) and the ones an
  owner adds (``groundkit.add_flow``). ``groundkit.record_call`` refuses any other, and so can the
  run recorder.
- ``calls``: one row per metered LLM or embedding call, written only by ``groundkit.record_call``
  (docs/costs.md). ``cost`` is null when the model had no price: unpriced, never 0. Append-only
  by trigger (sql/080_costs.sql).
- ``calls_at``: ``groundkit costs --since`` reads a time range and aggregates it; the index
  covers the columns it sums, so the range is read by an index-only scan.
"""

from __future__ import annotations

from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
create table groundkit.flows (
    flow text primary key check (flow ~ '^[a-z][a-z0-9_-]{0,62}$'),
    builtin boolean not null default false,
    added_at timestamptz not null default pg_catalog.now()
);
insert into groundkit.flows (flow, builtin)
values ('home', true), ('tutor', true), ('authoring', true), ('conversational', true);

create table groundkit.calls (
    call_id bigint generated always as identity primary key,
    run_id uuid,                      -- the run the call belongs to, if any
    flow text not null references groundkit.flows (flow),
    reader text,                      -- the member the call was made for (member_sub), if any
    model text not null check (model <> ''),
    kind text not null check (kind in ('llm', 'embedding')),
    tokens_in bigint not null check (tokens_in >= 0),
    tokens_out bigint not null check (tokens_out >= 0),
    cost numeric check (cost >= 0),   -- null: the model had no price
    currency text check (currency ~ '^[A-Z]{3}$'),
    at timestamptz not null default pg_catalog.now(),
    check ((cost is null) = (currency is null))
);
create index calls_at on groundkit.calls (at)
    include (flow, model, reader, kind, tokens_in, tokens_out, cost, currency);
create index calls_run on groundkit.calls (run_id) where run_id is not null;
-- insert-only: vacuum often enough that the index-only scans of `groundkit costs` stay index-only
alter table groundkit.calls set (autovacuum_vacuum_insert_scale_factor = 0.02);
"""
    )


def downgrade() -> None:
    raise NotImplementedError("groundkit revisions are forward-only; restore from a backup instead")
