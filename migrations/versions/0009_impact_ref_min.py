"""The smallest reference length stored impacts may still have, while a recompute is under way
(docs/bm25.md, "Recomputing the impacts in steps").

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02

``reindex_impacts()`` rewrites every posting in one statement under a SHARE lock on the postings:
at 1M chunks merges, bulk writes and replacements of merged chunks waited 7-8 minutes for it.
Search stays exact over postings stored at different reference lengths if it bounds them with
the smallest of those lengths (the bound ``_imp_ub(s, rho)`` only widens as rho falls). So the
recompute can run in steps, each its own short transaction: the first sets the new reference and
records here the smallest one any posting may still have; the steps rewrite the postings a range
of terms at a time; the last clears it. NULL: every posting is at ``avgdl_ref``.
"""

from __future__ import annotations

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
alter table groundkit.bm25_impact
    add column avgdl_ref_min double precision check (avgdl_ref_min > 0 and avgdl_ref_min <= avgdl_ref);
"""
    )


def downgrade() -> None:
    raise NotImplementedError("groundkit revisions are forward-only; restore from a backup instead")
