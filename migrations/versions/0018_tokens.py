"""API tokens: the bearer tokens the MCP and HTTP servers map to a member.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-03

Only a SHA-256 of each token is stored (a token is 32 random bytes, so a fast hash is enough: there
is nothing to guess). ``groundkit tokens create`` prints the token once; it cannot be read back.
A token names a member; what the member sees is still decided by ``reader_authority`` at every call,
so a suspended or revoked member's token sees nothing without touching this table.
"""

from __future__ import annotations

from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
create table groundkit.api_tokens (
    token_id bigint generated always as identity primary key,
    member_sub text not null,
    token_hash bytea not null unique,       -- sha256 of the token; the token itself is never stored
    created_at timestamptz not null default now(),
    expires_at timestamptz,                 -- null: never
    revoked_at timestamptz
);
create index api_tokens_member on groundkit.api_tokens (member_sub);
"""
    )


def downgrade() -> None:
    raise NotImplementedError("groundkit revisions are forward-only; restore from a backup instead")
