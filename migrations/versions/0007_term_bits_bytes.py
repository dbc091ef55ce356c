"""Term bits as bytes too: one byte per eight chunk ids, for a test of one bit per posting
(docs/bm25.md, "Partner bits in merged reads").

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02

A merged read of whole lists drops, as it reads them, the postings of a term that cannot reach
the round's level alone and whose chunk holds none of the other terms read: the test is one bit
of each other term per posting read, and a subscript of ``words`` (``bigint[]``) costs about 0.05
µs where ``get_bit`` on ``bytea`` costs about 0.015. ``bits`` holds the same bits as ``words``:
chunk id ``c`` is ``get_bit(bits, c)``. It is null until ``analyze_postings()`` makes the bits
again; search then reads as before.
"""

from __future__ import annotations

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
alter table groundkit.term_bits
    add column bits bytea check (bits is null or length(bits) = 8 * ((w_max >> 6) + 1));
-- read whole by every merged read that uses it: stored uncompressed, as words is
alter table groundkit.term_bits alter column bits set storage external;
"""
    )


def downgrade() -> None:
    raise NotImplementedError("groundkit revisions are forward-only; restore from a backup instead")
