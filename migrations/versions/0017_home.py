"""Home v1: engagement counters and the indexes the home feed reads.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-03

- ``engagement_daily``: one row per object and UTC day, counting what members did with the
  object (``groundkit.record_engagement``): views, clicks, reactions, milliseconds of dwell, and
  their score. No per-member trail is kept: the member only decides whether the event may count
  (the same permission predicate as search).
- ``engagement_window``: each object's score over the window of "top" (the days from
  ``engagement_window_since.since`` on), kept by ``record_engagement``, which also moves the
  window when the day (or ``config.home_top_days``) changes. "Top" walks it by score, best
  first, so its cost does not grow with the number of objects engaged with.
- ``config.home_top_days``: the window of "top", in whole UTC days (today included).
- Three partial indexes on the live objects by ``log_seq`` (the log position of their current
  version): "latest" walks them newest first, globally, per space, or per content type and space.
"""

from __future__ import annotations

from alembic import op

revision = "0017"
down_revision = "0016"
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
    score bigint not null default 0 check (score >= 0),
    primary key (object_id, day)
);
-- the window's rows, read in one index-only scan when "top" sums them itself
create index engagement_daily_day_idx on groundkit.engagement_daily (day, object_id) include (score);

create table groundkit.engagement_window (
    object_id text primary key,
    score bigint not null check (score >= 0)
);
create index engagement_window_score_idx on groundkit.engagement_window (score desc, object_id);

create table groundkit.engagement_window_since (
    id boolean primary key default true check (id),
    since date not null
);
insert into groundkit.engagement_window_since (since) values ((now() at time zone 'UTC')::date - 6);
-- the lock of engagement writers and of the window's move (sql/080_home.sql)
alter table groundkit.locks drop constraint locks_name_check,
    add constraint locks_name_check check (name in ('pending', 'redact', 'reindex', 'tier_rank', 'engagement'));
insert into groundkit.locks (name) values ('engagement');

-- Rows updated by every event: vacuum after a small share changed.
alter table groundkit.engagement_daily set (autovacuum_vacuum_scale_factor = 0.02,
                                            autovacuum_vacuum_insert_scale_factor = 0.02);
alter table groundkit.engagement_window set (autovacuum_vacuum_scale_factor = 0.02);

alter table groundkit.config
    add column home_top_days integer not null default 7 check (home_top_days between 1 and 366);

create index objects_live_seq_idx on groundkit.objects (log_seq) where state = 'live';
create index objects_live_space_seq_idx on groundkit.objects (space_id, log_seq) where state = 'live';
create index objects_live_type_seq_idx on groundkit.objects (content_type, space_id, log_seq) where state = 'live';
"""
    )


def downgrade() -> None:
    raise NotImplementedError("groundkit revisions are forward-only; restore from a backup instead")
