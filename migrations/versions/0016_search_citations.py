"""Search returns citations and snippets: drop the search signature before them.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-03

``groundkit.search`` gained the arguments ``snippet_start`` and ``snippet_end`` and the columns
``char_start``, ``char_end``, ``heading_path``, ``thread_id``, ``thread_title``, ``chunker`` and
``snippet`` (docs/sql-api.md, "Citations"). The replaceable SQL defines the new one; the old
signature is dropped here, once, so that no stale overload is left behind (a call with five
arguments would otherwise be ambiguous).
"""

from __future__ import annotations

from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("drop function if exists groundkit.search(text, text, integer, text[], text[])")


def downgrade() -> None:
    raise NotImplementedError("groundkit revisions are forward-only")
