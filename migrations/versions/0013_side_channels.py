"""Drop the pending part's counts by rank alone: search now counts only the reader's buckets.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-03

``groundkit._pending_dfs`` took the reader's rank and counted every pending posting of a term,
visible or not, to decide whether to score the pending part; it now takes the reader's buckets
too (sql/060_search.sql). The replaceable SQL defines the new signature; the old one is dropped
here, once, so that ``groundkit migrate`` of an older database leaves no stale overload behind.
"""

from __future__ import annotations

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("drop function if exists groundkit._pending_dfs(text[], integer)")


def downgrade() -> None:
    raise NotImplementedError("groundkit revisions are forward-only")
