"""Read replicas: the authority position the permission fence compares, and the router's counts
(docs/replicas.md).

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-03

- ``authority_position``: 16 counters, one per backend-pid shard. Every transaction that changes
  live authority or visibility adds one to its shard's counter (the triggers in
  sql/089_replicas.sql). A standby that has replayed counters at least as high as the primary's,
  shard by shard, has replayed every such change the primary's snapshot had committed.
- ``replica_routes``: per day, replica and route, how many reads the routers sent where (their
  counts, flushed by ``groundkit.note_routes``); ``groundkit status`` reads it.
"""

from __future__ import annotations

from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
create table groundkit.authority_position (
    shard smallint primary key check (shard between 0 and 15),
    n bigint not null default 0 check (n >= 0)
);
insert into groundkit.authority_position (shard) select generate_series(0, 15);

create table groundkit.replica_routes (
    day date not null,
    replica text not null,
    route text not null check (route in ('replica', 'fence', 'lag', 'unreachable')),
    n bigint not null check (n >= 0),
    primary key (day, replica, route)
);
"""
    )


def downgrade() -> None:
    op.execute("drop table groundkit.replica_routes; drop table groundkit.authority_position;")
