"""Drop the functions that the replaceable SQL no longer defines: signatures that existed only
while the search was being developed, and the sub-paths the search split removed.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03

The replaceable SQL (``sql/*.sql``) holds only what it defines; a function it stops defining is
dropped once, here, so that ``groundkit migrate`` of an older database leaves no stale overload
behind.

Released revisions never change (migrations/frozen.txt holds their hashes).
"""

from __future__ import annotations

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

# every signature dropped here, one literal statement each
DROPS: tuple[str, ...] = ()


def upgrade() -> None:
    for statement in DROPS:
        op.execute(statement)


def downgrade() -> None:
    raise NotImplementedError("groundkit revisions are forward-only")
