"""Term bits: which chunks hold a long list's term, one bit per chunk id (docs/bm25.md, "Term bits").

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01

The threshold rounds look the commonest terms up by primary key for the candidates that other
terms' ranges bring; most of those lookups (93 % at the benchmark's median, 1M chunks) find
nothing. A term's bits say, for every chunk id up to ``w_max``, whether the chunk holds the
term, so that search looks up only the candidates that do. ``groundkit.analyze_postings()``
makes them for the long lists; chunk ids only grow and a chunk's terms never change, so bits
made once stay right for every chunk up to ``w_max`` (a deleted chunk's bit is merely set for
nothing), and chunks written since are looked up as before.
"""

from __future__ import annotations

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
-- words[i] holds the bits of chunk ids 64 (i - 1) to 64 i - 1 (bit id % 64), for ids up to w_max.
create table groundkit.term_bits (
    term text primary key,
    w_max bigint not null check (w_max >= 0),
    words bigint[] not null check (cardinality(words) = (w_max >> 6) + 1)
);
-- read whole by every search that uses it: stored uncompressed (no decompression per search)
alter table groundkit.term_bits alter column words set storage external;
"""
    )


def downgrade() -> None:
    raise NotImplementedError("groundkit revisions are forward-only; restore from a backup instead")
