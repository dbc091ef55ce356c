"""Sketches of long postings lists: range sizes without counting them (docs/bm25.md, "Sketches").

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30

The threshold rounds plan each round from how many postings of every list sit at or above a
cut. Counting them cost about a quarter of a median broad-reader query at 1M chunks. A sketch
of a (term, bucket) list holds the impacts found at ranks 256 * 2^(i/4) (and the last rank) of
the list in impact order, so a range's size is read off it to within one step (2^(1/4), 19 %).
Sketches are planner statistics: ``groundkit.analyze_postings()`` makes them for the lists of
at least ``config.sketch_min_postings`` postings (``rebuild``, ``reindex_impacts`` and
``set_tier_rank`` call it), writes do not update them, search scales them by the list's live
document frequency, and a stale or wrong sketch changes how a round is planned, never its
answer.
"""

from __future__ import annotations

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
-- A long postings list of shared content (vis_key = the tier rank it needs), as it was when
-- groundkit.analyze_postings() last ran: n postings; imps[i] the impact at rank ranks[i] in
-- impact order (1-based; analyze_postings takes least(floor(256 * 2^((i - 1) / 4)), n), so the
-- last rank is n).
create table groundkit.postings_sketch (
    term text not null,
    vis_key bigint not null,
    n bigint not null check (n > 0),
    ranks bigint[] not null,
    imps real[] not null check (cardinality(imps) > 0 and cardinality(imps) = cardinality(ranks)),
    primary key (term, vis_key)
);

-- Lists of at least this many postings are sketched (groundkit.analyze_postings()).
alter table groundkit.config
    add column sketch_min_postings integer not null default 4096 check (sketch_min_postings >= 1);
"""
    )


def downgrade() -> None:
    raise NotImplementedError("groundkit revisions are forward-only; restore from a backup instead")
