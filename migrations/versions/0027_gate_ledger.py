"""Governance: the gate ledger, the installed version, and the audit chain (docs/governance.md).

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-05

- ``deployment``: one row, the groundkit version that last migrated this database (written by
  every migrate; ``groundkit.deployment_configuration()`` reads it).
- ``gate_ledger``: one row per gate verdict on a configuration (``groundkit eval gate``,
  ``groundkit migrate``, ``groundkit cutover``, a reused certificate, a bypass): what was
  certified (the configuration and its hash), the sections run and skipped, the result, the TAP
  digest, when and by whom. Owner-only; append-only by trigger (sql/089_governance.sql).
- ``audit_chain``: the hash chain over run headers, run searches and gate-ledger rows, one entry
  per row in commit order (seq 0 is the genesis). Each entry holds the sha256 of its row's
  canonical encoding and the hash linking it to the entry before. Owner-only; append-only.
- ``runs.pruned_seqs``: a prune tombstone's chain entries whose rows it deleted, so a pruned
  range is accounted for in the chain rather than a silent gap.

The chained tables' canonical encoding is ``jsonb_strip_nulls(to_jsonb(row))``: a column added
later to ``runs``, ``run_searches`` or ``gate_ledger`` must be nullable and null in existing rows
(no default that rewrites them), or every existing row's hash changes.
"""

from __future__ import annotations

from alembic import op

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
create table groundkit.deployment (
    id integer primary key default 1 check (id = 1),
    groundkit_version text not null,
    migrated_at timestamptz not null default now(),
    migrated_by text not null default session_user
);

create table groundkit.gate_ledger (
    id bigint generated always as identity primary key,
    recorded_at timestamptz not null default now(),
    recorded_by text not null default session_user,   -- the database login
    operator text,                                    -- who ran the command, as the client says (user@host)
    kind text not null check (kind in ('gate', 'migrate', 'cutover', 'policy')),
    command text not null,                            -- what ran, e.g. 'groundkit cutover --model m'
    verdict text not null check (verdict in ('certified', 'failed', 'bypassed', 'uncovered')),
    config jsonb not null check (jsonb_typeof(config) = 'object'),
    config_hash text not null check (config_hash ~ '^[0-9a-f]{64}$'),
    fixture_digest text,                              -- the gate's golden set, grid and privilege grid
    dense_model text,                                 -- the dense section's model; null: the test double
    sections_run text[] not null default '{}',
    sections_skipped text[] not null default '{}',
    passed boolean,                                   -- the checks' result; null when nothing ran
    checks integer,
    failed integer,
    failures text[],
    tap_digest text,                                  -- sha256 of the TAP output
    duration_ms bigint,
    basis_id bigint references groundkit.gate_ledger (id),  -- the certificate this one builds on or reuses
    bundle_digest text,                               -- a reused signed gate bundle's sha256
    reason text                                       -- a bypass's reason; why a row does not certify
);
create index gate_ledger_config_idx on groundkit.gate_ledger (config_hash, id);

create table groundkit.audit_chain (
    seq bigint primary key check (seq >= 0),
    kind text not null check (kind in ('genesis', 'run', 'search', 'prune', 'gate')),
    run_id uuid,                                      -- run, search, prune
    search_no integer,                                -- search
    ledger_id bigint,                                 -- gate
    row_hash bytea not null check (length(row_hash) = 32),
    prev_hash bytea not null check (length(prev_hash) = 32),
    hash bytea not null check (length(hash) = 32),
    chained_at timestamptz not null default now(),
    check (case kind when 'genesis' then seq = 0
                     when 'search' then run_id is not null and search_no is not null
                     when 'gate' then ledger_id is not null
                     else run_id is not null end)
);
create index audit_chain_run_idx on groundkit.audit_chain (run_id) where run_id is not null;
create index audit_chain_ledger_idx on groundkit.audit_chain (ledger_id) where ledger_id is not null;

alter table groundkit.runs add column pruned_seqs int8multirange;
"""
    )


def downgrade() -> None:
    raise NotImplementedError("groundkit revisions are forward-only; restore from a backup instead")
