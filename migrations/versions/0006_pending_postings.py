"""Pending postings: one-object writes defer their postings and term statistics to a small part
merged in bulk (docs/bm25.md, "The pending part").

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01

A one-object write spent about two thirds of its time inserting its postings, one row at a
time into a table of tens of millions of rows whose two indexes put every row on a random page,
and upserting one statistics counter per term. ``put_object`` and ``retier_object`` now write
a new chunk's postings into ``pending_postings``, a table that stays small (its index pages
stay in memory), and leave ``term_stats`` alone for them. ``groundkit.merge_pending()`` moves
the pending part into ``postings`` and ``term_stats`` in one transaction, in index order; a
writer runs it when one of its new chunk ids is a multiple of ``config.pending_merge_chunks``
(0: every write goes straight to ``postings``, as before). Search reads both parts, and the
document frequencies it scores with count the pending part too, so answers do not change when
a merge runs.
"""

from __future__ import annotations

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
-- The postings of chunks written one object at a time and not merged yet. A chunk's postings are
-- all here or all in groundkit.postings. stat_scope is the chunk's statistics scope (term_stats
-- does not count these rows yet); vis_key its bucket, as in postings.
create table groundkit.pending_postings (
    term text not null,
    chunk_id bigint not null,
    tf integer not null check (tf > 0),
    doc_len integer not null,
    vis_key bigint not null,
    stat_scope integer,
    primary key (term, chunk_id) include (tf, doc_len, vis_key, stat_scope)
);

-- A writer merges the pending part when one of its new chunk ids is a multiple of this (0: no
-- pending part, writes go to postings directly).
alter table groundkit.config
    add column pending_merge_chunks integer not null default 2048 check (pending_merge_chunks >= 0);
"""
    )


def downgrade() -> None:
    raise NotImplementedError("groundkit revisions are forward-only; restore from a backup instead")
