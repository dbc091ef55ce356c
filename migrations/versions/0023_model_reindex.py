"""Model swaps: which embedding models are being built beside the active one (docs/embedding-worker.md).

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-03

- ``embedding_models.reindexing_at``: set by ``groundkit.start_reindex`` (``groundkit reindex
  --model``), null otherwise. The worker and ``groundkit embed`` keep the active model and every
  model with it set embedded; search serves only the active one. ``groundkit.cutover_model``
  clears it on the model it activates and sets it on the one it replaces, so a rollback finds
  the old model's embeddings current.
"""

from __future__ import annotations

from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("alter table groundkit.embedding_models add column reindexing_at timestamptz")


def downgrade() -> None:
    raise NotImplementedError("groundkit revisions are forward-only; restore from a backup instead")
