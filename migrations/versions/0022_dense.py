"""The dense arm: embedding models, embeddings by content hash, each chunk's hashes (docs/dense.md).

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-03

- ``embedding_models``: one row per model (provider, dimension, distance, the recipe of the text it
  embeds, provider options without secrets); at most one ``active`` (a partial unique index).
- ``embeddings``: keyed by (model, content_hash), the SHA-256 of the exact text the model's recipe
  embeds, so unchanged text (a re-tier, a move, a new version) keeps its embedding. The vector
  is a ``real[]``: the table needs no extension, so it exists on every server; pgvector casts it
  to ``vector(dimension)`` in searches and in each model's HNSW index (a partial expression
  index, built concurrently by ``groundkit.dense.build_hnsw_index``).
- ``chunks.embed_hash_text`` / ``embed_hash_titled``: the hash of each recipe's text of the
  chunk, written with the chunk (sql/040_materialize.sql), so that searches join embeddings to
  the current chunks by an index. Existing chunks are hashed here (one pass over chunks).
- ``objects_space_tier_idx``: the exact dense scan reads a reader's objects by space and tier.
"""

from __future__ import annotations

from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
create table groundkit.embedding_models (
    name text primary key check (name ~ '^[A-Za-z0-9_.:/-]{1,100}$'),
    provider text not null check (provider in ('local', 'ollama', 'openai')),
    dimension integer not null check (dimension between 1 and 2000),
    distance text not null check (distance in ('cosine', 'l2', 'inner_product')),
    recipe text not null check (recipe in ('text', 'titled')),
    options jsonb not null default '{}' check (jsonb_typeof(options) = 'object'),
    active boolean not null default false,
    created_at timestamptz not null default now(),
    activated_at timestamptz,
    hnsw_built_at timestamptz
);
create unique index embedding_models_one_active on groundkit.embedding_models (active) where active;

create table groundkit.embeddings (
    model text not null references groundkit.embedding_models (name) on delete cascade,
    content_hash bytea not null check (length(content_hash) = 32),
    embedding real[] not null,
    created_at timestamptz not null default now(),
    primary key (model, content_hash)
);
alter table groundkit.embeddings alter column embedding set storage main;

alter table groundkit.chunks add column embed_hash_text bytea, add column embed_hash_titled bytea;
update groundkit.chunks c
   set embed_hash_text = sha256(convert_to(c.content, 'UTF8')),
       embed_hash_titled = sha256(convert_to(coalesce(o.title, '') || E'\\n'
                                             || coalesce(c.search_prefix || E'\\n', '') || c.content, 'UTF8'))
  from groundkit.objects o
 where o.object_id = c.object_id;
create index chunks_embed_hash_text_idx on groundkit.chunks (embed_hash_text);
create index chunks_embed_hash_titled_idx on groundkit.chunks (embed_hash_titled);
-- the exact dense scan reaches a reader's objects by space and tier
create index objects_space_tier_idx on groundkit.objects (space_id, tier_visibility);
"""
    )


def downgrade() -> None:
    raise NotImplementedError("groundkit revisions are forward-only; restore from a backup instead")
