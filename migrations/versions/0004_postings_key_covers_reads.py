"""The postings' primary key covers whole-list reads in chunk-id order (docs/bm25.md, "Merged reads").

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30

A threshold round whose every read term must be read whole (a low level over several long
lists) summed its postings chunk by chunk in a hash table of hundreds of thousands of chunks.
Read instead from the primary key, one index-only scan per term in chunk-id order, the lists
merge and sum in order, with no hash table. For that the key carries what such a read needs
besides ``tf``: the chunk's length, its visibility bucket and the impact. No new index: the
same entries, wider (at 1M chunks about 1.1 GB -> 1.6 GB).

Upgrading rebuilds the key under the table's exclusive lock: searches and writes wait until it
is done (38 s for 26 M postings on the 2-core benchmark machine).
"""

from __future__ import annotations

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
alter table groundkit.postings
    drop constraint postings_pkey,
    add constraint postings_pkey primary key (term, chunk_id) include (tf, doc_len, vis_key, imp);
"""
    )


def downgrade() -> None:
    raise NotImplementedError("groundkit revisions are forward-only; restore from a backup instead")
