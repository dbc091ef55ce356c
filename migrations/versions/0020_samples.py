"""The production-traffic sampler: a fraction of searches recorded for labelling.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-03

- ``config.sample_rate``: the fraction of searches the Python client records (0, the default:
  none). Set with ``groundkit.set_sample_rate(rate)`` / ``groundkit config set-sample-rate``.
- ``search_samples`` and ``search_sample_hits``: a sampled search's query, mode, k, the
  reader's tier rank (never the reader) and time, and its hits in order (object, version, chunk,
  score, the chunk's offsets and chunker: enough to find the text in the log, none of it copied,
  so a redaction leaves no text here).
- ``sample_engagement``: clicks and dwell times on a sample's hits, the engagement proxy.
(docs/telemetry.md, "The sampler")
"""

from __future__ import annotations

from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
alter table groundkit.config
    add column sample_rate double precision not null default 0
        check (sample_rate >= 0 and sample_rate <= 1);

create table groundkit.search_samples (
    sample_id uuid primary key default gen_random_uuid(),
    sampled_at timestamptz not null default now(),
    query text not null,
    mode text not null,
    k integer not null,
    tier_rank integer        -- the reader's, in the search's snapshot; null: no active reader
);
create index search_samples_at_idx on groundkit.search_samples (sampled_at);

create table groundkit.search_sample_hits (
    sample_id uuid not null references groundkit.search_samples on delete cascade,
    position integer not null,          -- 1: the first hit
    object_id text not null,
    object_version bigint not null,
    chunk_seq integer not null,
    score double precision not null,
    char_start integer,                 -- the chunk in the body at that version (chunks.char_start)
    char_end integer,
    chunker text,
    primary key (sample_id, position)
);

create table groundkit.sample_engagement (
    sample_id uuid not null references groundkit.search_samples on delete cascade,
    object_id text not null,
    kind text not null check (kind in ('click', 'dwell_ms')),
    value double precision,
    at timestamptz not null default now(),
    check ((kind = 'click' and value is null) or (kind = 'dwell_ms' and value >= 0))
);
create index sample_engagement_sample_idx on groundkit.sample_engagement (sample_id);
"""
    )


def downgrade() -> None:
    raise NotImplementedError("groundkit revisions are forward-only; restore from a backup instead")
