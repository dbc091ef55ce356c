"""Maintenance that runs itself: the worker's heartbeat, autovacuum settings for the hot tables,
and the analyze revision 0007 asked operators to run, left to the first maintenance pass.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-03

- ``worker_heartbeat``: one row per ``groundkit worker`` process, written after every pass, so
  that ``groundkit status`` shows when maintenance last ran, what it did and its last error.
- Autovacuum, per table, where the server's defaults (vacuum after 20% of a table changed, analyze
  after 10%) fit groundkit's tables badly; each setting says why below.
- Revision 0007 added ``term_bits.bits``, null until ``analyze_postings()`` makes it again, and
  asked for a manual analyze. That analyze is not run here: the analyze functions are replaceable
  SQL, applied after the revisions, and at a million chunks it takes minutes while ``migrate``
  holds its lock in one transaction. Instead, a database that still has bits to make is marked
  never analyzed (its ``postings_analyzed`` row goes), which is what ``groundkit status`` and
  ``Groundkit.maintain()`` read: the first maintenance pass (``groundkit worker``, or
  ``groundkit analyze``) makes them. Search stays exact meanwhile, as it was.
"""

from __future__ import annotations

from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
create table groundkit.worker_heartbeat (
    worker_id text primary key,       -- host:pid
    host text not null,
    pid integer not null,
    started_at timestamptz not null,
    beat_at timestamptz not null,     -- the last time the worker wrote this row
    last_run_at timestamptz,          -- the end of its last pass
    last_result jsonb,                -- what that pass did (MaintenanceReport)
    last_error text,                  -- the last pass's error, if it failed
    stopped_at timestamptz            -- set when the worker stopped cleanly
);

-- The postings (about 100 per chunk) grow by every merge and are read by index-only scans,
-- which visit the table for every page vacuum has not marked all-visible: vacuum after 1% new
-- rows, not 20% (20M postings at 1M chunks). The term histogram feeds the planner and status.
alter table groundkit.postings set (autovacuum_vacuum_insert_scale_factor = 0.01,
                                    autovacuum_vacuum_scale_factor = 0.02,
                                    autovacuum_analyze_scale_factor = 0.02);
-- Emptied by every merge and refilled by every one-object write, so its size swings between
-- none and some hundred thousand rows: vacuum and analyze after a fixed number of rows changed,
-- not a share of whatever it holds at the moment (every search reads it). Its empty pages are
-- kept: they refill, and giving them back takes a lock every search and writer would queue
-- behind.
alter table groundkit.pending_postings set (autovacuum_vacuum_scale_factor = 0,
                                            autovacuum_vacuum_threshold = 20000,
                                            autovacuum_analyze_scale_factor = 0,
                                            autovacuum_analyze_threshold = 20000,
                                            vacuum_truncate = false);
-- Counters updated in place by writers and merges: dead rows accumulate fast.
alter table groundkit.term_stats set (autovacuum_vacuum_scale_factor = 0.02);
-- One row per chunk, read by every search's hits; insert-mostly (replacements delete).
alter table groundkit.chunks set (autovacuum_vacuum_insert_scale_factor = 0.02,
                                  autovacuum_vacuum_scale_factor = 0.05);
-- One row per object, updated by every new version.
alter table groundkit.objects set (autovacuum_vacuum_scale_factor = 0.05);

-- term bits without their bytes (revision 0007): the first maintenance pass analyzes
delete from groundkit.postings_analyzed
 where exists (select 1 from groundkit.term_bits t where t.bits is null);
"""
    )


def downgrade() -> None:
    raise NotImplementedError("groundkit revisions are forward-only; restore from a backup instead")
