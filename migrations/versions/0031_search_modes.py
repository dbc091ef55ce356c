"""Search modes per content type: what `auto` searches each content type with (issue 52).

Revision ID: 0031
Revises: 0030
Create Date: 2026-12-05

- ``config.search_modes``: ``{"<content type>": {"mode": "bm25" | "dense" | "hybrid", "fusion",
  "rrf_k", "bm25_weight", "dense_weight", "depth"}, ...}`` (every key but ``mode`` optional), set
  with ``groundkit.set_search_mode`` (the owner's) and read by ``groundkit.auto_search_settings``
  (sql/085_search_modes.sql, docs/dense.md "Search modes per content type").
"""

from __future__ import annotations

from alembic import op

revision = "0031"
down_revision = "0030"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
alter table groundkit.config
    add column search_modes jsonb not null default '{}'::jsonb
        check (jsonb_typeof(search_modes) = 'object');
"""
    )


def downgrade() -> None:
    raise NotImplementedError("groundkit revisions are forward-only; restore from a backup instead")
