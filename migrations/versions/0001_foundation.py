"""Foundation: tiers, live authority, the append-only content log and its derived views.

Revision ID: 0001
Revises:
Create Date: 2026-11-29

Released revisions never change. Functions, triggers and views that can be
replaced live in ``sql/`` and are re-applied after every upgrade (see env.py).
"""

from __future__ import annotations

from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
create table groundkit.tiers (
    name text primary key check (name ~ '^[A-Za-z0-9_.-]{1,64}$'),
    rank integer not null unique check (rank >= 0)
);
insert into groundkit.tiers (name, rank) values ('T0', 0), ('T1', 1), ('T2', 2), ('T3', 3);

-- The analyzer every chunk and query goes through (docs/bm25.md).
create text search configuration groundkit.english (copy = pg_catalog.english);

create table groundkit.content_types (
    name text primary key
);
insert into groundkit.content_types (name) values
    ('course_section'), ('board_post'), ('transcript'), ('event'), ('member_note'), ('document');

-- One row of tunables. bm25_k1 / bm25_b apply from the next query; chunk sizes apply to
-- objects written afterwards (groundkit.rebuild() re-chunks everything).
create table groundkit.config (
    id boolean primary key default true check (id),
    bm25_k1 double precision not null default 0.9 check (bm25_k1 > 0 and bm25_k1 <= 10),
    bm25_b double precision not null default 0.4 check (bm25_b >= 0 and bm25_b <= 1),
    chunk_chars integer not null default 1500 check (chunk_chars between 200 and 1000000),
    chunk_overlap integer not null default 200 check (chunk_overlap >= 0),
    check (chunk_overlap * 2 < chunk_chars)
);
insert into groundkit.config default values;

-- Live authority -------------------------------------------------------------------------
create table groundkit.members (
    member_sub text primary key,
    tier text not null references groundkit.tiers (name) on update cascade,
    status text not null check (status in ('active', 'pending', 'suspended', 'revoked')),
    updated_at timestamptz not null default now()
);

create table groundkit.spaces (
    space_id text primary key,
    min_tier text not null references groundkit.tiers (name) on update cascade,
    private boolean not null default false,
    updated_at timestamptz not null default now()
);

create table groundkit.space_grants (
    space_id text not null references groundkit.spaces (space_id) on delete cascade,
    member_sub text not null,
    granted_at timestamptz not null default now(),
    primary key (space_id, member_sub)
);

-- The one view search reads the reader's tier and status through. Created here, once:
-- an app may `create or replace` it over its own membership table (docs/sql-api.md), and
-- re-applying groundkit's replaceable SQL never overwrites it.
create view groundkit.reader_authority as
    select m.member_sub, m.tier, m.status from groundkit.members m;

-- The append-only content log: the source of truth --------------------------------------
create table groundkit.content_log (
    seq bigint generated always as identity primary key,
    object_id text not null,
    version bigint not null,
    op text not null check (op in ('put', 'retier', 'delete', 'redact')),
    content_type text,
    space_id text,
    tier_visibility text,
    title text,
    body text,
    owner_sub text,
    owner_only boolean,
    segments jsonb,
    metadata jsonb,
    content_hash text,
    scrubbed boolean not null default false,
    xact_id xid8 not null default pg_current_xact_id(),
    logged_at timestamptz not null default now()
);
create index content_log_object_idx on groundkit.content_log (object_id, seq);

-- Derived views (rebuildable from the log) ----------------------------------------------
create table groundkit.objects (
    object_id text primary key,
    version bigint not null,
    state text not null check (state in ('live', 'deleted', 'redacted')),
    content_type text,
    space_id text,
    tier_visibility text,
    title text,
    owner_sub text,
    owner_only boolean not null default false,
    metadata jsonb,
    content_hash text,
    log_seq bigint not null,
    unique (object_id, version),
    check (state <> 'live' or (content_type is not null and space_id is not null
                               and tier_visibility is not null and content_hash is not null))
);
create index objects_space_idx on groundkit.objects (space_id);

create table groundkit.chunks (
    chunk_id bigint generated always as identity primary key,
    object_id text not null,
    object_version bigint not null,
    chunk_seq integer not null,
    content text not null,
    tsv tsvector not null,
    doc_len integer not null,
    stat_scope integer,
    start_ms bigint,
    end_ms bigint,
    chunker_version text not null,
    unique (object_id, chunk_seq),
    -- A chunk always belongs to its object's current version: checked at commit.
    foreign key (object_id, object_version) references groundkit.objects (object_id, version)
        deferrable initially deferred
);

create table groundkit.postings (
    term text not null,
    chunk_id bigint not null references groundkit.chunks (chunk_id) on delete cascade,
    tf integer not null check (tf > 0),
    primary key (term, chunk_id)
);
create index postings_chunk_idx on groundkit.postings (chunk_id);

-- BM25 statistics by visibility scope (the tier rank that shared content needs). Content in
-- private spaces and owner-only content is left out. Counters are sharded so that concurrent
-- writers do not queue on one hot row; readers sum the shards.
create table groundkit.term_stats (
    term text not null,
    scope integer not null,
    shard smallint not null,
    df bigint not null,
    primary key (term, scope, shard)
);

create table groundkit.scope_stats (
    scope integer not null,
    shard smallint not null,
    n_chunks bigint not null,
    total_len bigint not null,
    primary key (scope, shard)
);
"""
    )


def downgrade() -> None:
    raise NotImplementedError("groundkit revisions are forward-only; restore from a backup instead")
