"""Runs: what an AI flow read, pinned, so that it can be replayed (docs/runs.md).

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-03

- ``runs``: one row per run event (its header: flow, reader, model and prompt versions, tokens,
  cost, context citations, error class), and the tombstones ``prune_runs`` leaves.
- ``run_searches``: one row per search of a run, written in the statement that searched
  (``groundkit.run_search``): the query, its mode and parameters, the reader's tier and status as
  that statement's snapshot saw them, the log's marker, ``pg_current_snapshot()``, and every
  hit's object, version, chunk, chunker version, sizes, score and content digest. Its header must
  exist when the transaction commits (a deferred foreign key): a run is recorded whole or not.
- Both append-only by trigger (sql/010_guards.sql); ``prune_runs`` is the one way out, through
  the ``runs_prune`` token in ``groundkit.locks``.
"""

from __future__ import annotations

from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
create table groundkit.runs (
    run_id uuid primary key,
    kind text not null default 'run' check (kind in ('run', 'pruned')),
    flow text,                        -- a groundkit.flows name (record_run checks it)
    reader_sub text,
    reader_tier text,                 -- as resolved when the run was recorded
    reader_status text,
    model text,
    prompt_version text,
    started_at timestamptz,
    recorded_at timestamptz not null default now(),
    log_marker bigint,                -- max content_log seq when the run was recorded
    snapshot pg_snapshot,             -- pg_current_snapshot() then
    tokens_in bigint not null default 0 check (tokens_in >= 0),
    tokens_out bigint not null default 0 check (tokens_out >= 0),
    cost numeric,                     -- null when a call had no price
    unpriced integer not null default 0,
    llm_calls jsonb not null default '[]',
    context jsonb not null default '[]',  -- citation ids the run's context assembled
    error_class text,                 -- the exception a run raised, if it raised
    pruned_runs bigint,               -- kind 'pruned': how many runs, searches, before when
    pruned_searches bigint,
    pruned_before timestamptz,
    check (kind = 'pruned' or (flow is not null and reader_sub is not null))
);
create index runs_recorded_idx on groundkit.runs (recorded_at);
create index runs_reader_idx on groundkit.runs (reader_sub, recorded_at);

create table groundkit.run_searches (
    run_id uuid not null references groundkit.runs (run_id) deferrable initially deferred,
    search_no integer not null check (search_no >= 1),
    reader_sub text not null,
    reader_tier text,
    reader_status text,
    reader_rank integer,
    query text not null,
    mode text not null,               -- 'bm25' today; dense and hybrid slot in here
    params jsonb not null,            -- k, content_types, space_ids
    log_marker bigint not null,
    snapshot pg_snapshot not null,
    searched_at timestamptz not null default clock_timestamp(),
    hits jsonb not null,              -- [{object_id, object_version, chunk_seq, chunker, ...}] in rank order
    primary key (run_id, search_no)
);

alter table groundkit.locks drop constraint locks_name_check;
alter table groundkit.locks add constraint locks_name_check
    check (name in ('pending', 'redact', 'reindex', 'tier_rank', 'engagement', 'runs_prune'));
insert into groundkit.locks (name) values ('runs_prune');
"""
    )


def downgrade() -> None:
    raise NotImplementedError("groundkit revisions are forward-only; restore from a backup instead")
