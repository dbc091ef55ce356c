"""The sampler's bound: samples per reader per window (issue 50, item 3).

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-04

- ``config.sample_limit`` (100) and ``config.sample_window`` (1 hour): ``record_sample``
  records at most ``sample_limit`` samples per reader in each window (windows aligned to the
  epoch, so none starts at a sample's time); past the bound it records nothing and returns NULL.
  Set with ``groundkit.set_sample_limit(per_reader, per)``.
- ``sample_quota``: per reader, the current window and how many samples it took there. It never
  names a sample or a query; a row whose window has passed is reset by the reader's next sample
  and deleted by the next sample of anyone.
(docs/telemetry.md, "Bounds")
"""

from __future__ import annotations

from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
alter table groundkit.config
    add column sample_limit integer not null default 100 check (sample_limit >= 1),
    add column sample_window interval not null default interval '1 hour'
        check (sample_window >= interval '1 second' and sample_window <= interval '31 days'
               and extract(month from sample_window) = 0 and extract(year from sample_window) = 0);

create table groundkit.sample_quota (
    reader_sub text primary key,
    window_start timestamptz not null,
    taken integer not null check (taken >= 1)
);
create index sample_quota_window_idx on groundkit.sample_quota (window_start);
"""
    )


def downgrade() -> None:
    raise NotImplementedError("groundkit revisions are forward-only; restore from a backup instead")
