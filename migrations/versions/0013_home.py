"""Home v1: engagement counters and the indexes the home feed reads.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-03

- ``engagement_daily``: one row per object and UTC day, counting what members did with the
  object (``groundkit.record_engagement``): views, clicks, reactions and milliseconds of dwell.
  No per-member trail is kept: the member only decides whether the event may count (the same
  permission predicate as search). "Top this week" sums the rows of the last
  ``config.home_top_days`` days; its index holds every count, so that sum is an index-only scan of
  the window.
- ``config.home_top_days``: the window of "top", in whole UTC days (today included).
- Two partial indexes on the live objects by ``log_seq`` (the log position of their current
  version): "latest" walks them newest first, globally or per space.
"""

from __future__ import annotations

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
create table groundkit.engagement_daily (
    object_id text not null,
    day date not null,
    views bigint not null default 0 check (views >= 0),
    clicks bigint not null default 0 check (clicks >= 0),
    reactions bigint not null default 0 check (reactions >= 0),
    dwell_ms bigint not null default 0 check (dwell_ms >= 0),
    primary key (object_id, day)
);
create index engagement_daily_day_idx on groundkit.engagement_daily (day, object_id)
    include (views, clicks, reactions, dwell_ms);
-- Today's rows are updated by every event: vacuum them often, so the window stays index-only.
alter table groundkit.engagement_daily set (autovacuum_vacuum_scale_factor = 0.02,
                                            autovacuum_vacuum_insert_scale_factor = 0.02);

alter table groundkit.config
    add column home_top_days integer not null default 7 check (home_top_days between 1 and 366);

create index objects_live_seq_idx on groundkit.objects (log_seq) where state = 'live';
create index objects_live_space_seq_idx on groundkit.objects (space_id, log_seq) where state = 'live';
"""
    )


def downgrade() -> None:
    raise NotImplementedError("groundkit revisions are forward-only; restore from a backup instead")
