"""Chunk citations: every chunk says which chunker made it, with which sizes, where it lies in its
object's body, under which headings, and what header text was indexed with it (docs/chunking.md).

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-03

- ``chunks.chunker``: the chunker's name (``text``, ``segments``, ``markdown``, ``thread``);
  ``chunks.chunker_version`` stays the versioned id of its output (``gk-markdown-1``).
- ``chunks.chunk_chars`` / ``chunk_overlap``: the sizes it was made with, so that ``groundkit
  status`` can tell chunks made with other sizes than the configuration's.
- ``chunks.char_start`` / ``char_end``: the chunk's place in the object's body, 0-based character
  offsets, ``[char_start, char_end)`` (a board post: in the post's own text; a transcript with
  segments: in its segments' texts joined by one space).
- ``chunks.heading_path``: the headings above a section or document chunk (the title first).
- ``chunks.search_prefix``: text indexed with the chunk but not displayed (a board post's thread
  header; a section's headings above it).
- ``config.chunk_sizes``: sizes per content type, ``{"transcript": {"chars": 1000, "overlap":
  150}}``; a type not named uses ``chunk_chars`` and ``chunk_overlap``.

``groundkit._chunks_of`` with its old arguments goes (the replaceable SQL defines the new one).

Chunks written before this revision keep nulls in the new columns (adding nullable columns
rewrites nothing, at a million chunks too): ``groundkit status`` counts them as made by another
chunker version, and ``groundkit rebuild`` re-chunks them.
"""

from __future__ import annotations

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
alter table groundkit.chunks
    add column chunker text,
    add column chunk_chars integer,
    add column chunk_overlap integer,
    add column char_start integer,
    add column char_end integer,
    add column heading_path text[],
    add column search_prefix text;

alter table groundkit.config
    add column chunk_sizes jsonb not null default '{}'::jsonb;

-- _chunks_of takes the title, metadata and space (for headings and thread headers) and returns
-- the new columns: the replaceable SQL defines it with its new arguments
drop function if exists groundkit._chunks_of(text, text, jsonb, integer, integer);
"""
    )


def downgrade() -> None:
    raise NotImplementedError("groundkit revisions are forward-only; restore from a backup instead")
