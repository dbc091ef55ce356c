"""When the postings were last analyzed: the chunk ids the term bits cover (docs/bm25.md,
"Analyze after growth").

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02

Writes do not refresh the sketches and term bits that ``analyze_postings()`` makes; search stays
exact without them but plans and looks up worse as the chunks past them grow (at 1M chunks, a
tenth more unanalyzed made the broad reader's p95 1.20x slower). One row says up to which chunk
id the last analyze saw, and how many chunks there were, so that ``postings_growth()`` can tell
a merger when to analyze again. No row: never analyzed.
"""

from __future__ import annotations

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
create table groundkit.postings_analyzed (
    one boolean primary key default true check (one),
    through_chunk_id bigint not null check (through_chunk_id >= 0),
    chunks bigint not null check (chunks >= 0),
    analyzed_at timestamptz not null
);
"""
    )


def downgrade() -> None:
    raise NotImplementedError("groundkit revisions are forward-only; restore from a backup instead")
