"""The operator console: its login tokens, and the stored results of ``groundkit eval quality``.

Revision ID: 0029
Revises: 0028
Create Date: 2026-12-06

- ``console_tokens``: operator tokens for ``groundkit serve console`` (``groundkit tokens create
  --console NAME``). Kept apart from ``api_tokens`` on purpose: a member's token can never open the
  console, and an operator's token never reads as a member through ``serve http`` or ``serve mcp``
  (``token_member`` reads ``api_tokens`` alone). Only a SHA-256 of each token is stored, as for
  member tokens. Made and revoked by the owner alone (sql/081_console.sql).
- ``quality_results``: one row per arm (a collection) or per tier rank (a labelled samples file)
  of each ``groundkit eval quality`` run, so the console can show the latest results and the
  labelled scores over time. ``eval_id`` groups the rows of one run.
"""

from __future__ import annotations

from alembic import op

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
create table groundkit.console_tokens (
    token_id bigint generated always as identity primary key,
    operator text not null,                 -- who the token is for (a name, not a member)
    token_hash bytea not null unique check (length(token_hash) = 32),  -- sha256; the token is never stored
    created_at timestamptz not null default now(),
    expires_at timestamptz,                 -- null: never
    revoked_at timestamptz
);
create index console_tokens_operator on groundkit.console_tokens (operator);

create table groundkit.quality_results (
    result_id bigint generated always as identity primary key,
    eval_id uuid not null,                  -- one `groundkit eval quality` run
    recorded_at timestamptz not null default now(),
    source text not null check (source in ('collection', 'labels')),
    collection text not null check (collection <> ''),   -- the collection's name, or the labels file's
    arm text not null check (arm <> ''),    -- the arm; 'search' for labelled samples
    tier_rank integer,                      -- labelled samples: the rank scored
    reader text,                            -- labelled samples: the member who searched
    queries integer not null check (queries >= 0),
    ndcg_10 double precision not null check (ndcg_10 between 0 and 1),
    recall_10 double precision not null check (recall_10 between 0 and 1),
    recall_100 double precision not null check (recall_100 between 0 and 1),
    mrr_10 double precision not null check (mrr_10 between 0 and 1),
    ms_per_query double precision check (ms_per_query >= 0),
    groundkit_version text not null,
    check ((source = 'labels') = (tier_rank is not null))
);
create index quality_results_latest on groundkit.quality_results (source, collection, arm, recorded_at desc);
"""
    )


def downgrade() -> None:
    raise NotImplementedError("groundkit revisions are forward-only; restore from a backup instead")
