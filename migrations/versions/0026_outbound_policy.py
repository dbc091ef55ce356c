"""The outbound gate: the policy of what may leave the database, and the ledger of what did
(docs/outbound.md).

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-06

- ``outbound_policies``: the outbound policy, one row per version (append-only by trigger,
  sql/083_outbound.sql): which provider classes (``local``, ``private``, ``cloud``) may receive
  which spaces, tiers and content types, which origins the operator marks ``private``, and what
  the redaction boundary scrubs. Version 1 is the default: the in-process provider may take
  anything; nothing goes to a private or cloud endpoint until the owner allows it.
  ``policy_hash`` is the SHA-256 of the policy's canonical JSON (``jsonb`` text).
- ``outbound_calls``: one row per decision of the gate that had somewhere to record it: what
  kind of call, to which provider class and origin, under which policy version, sent or
  refused (and the rule), how many texts, what the scrubber removed (counts, never text).
- ``members.display_name``: the names the scrubber removes when the policy says so.
- ``flows``: the built-in flow ``indexing`` (the embedding job's calls are metered under it);
  ``calls.kind`` takes ``rerank`` too.
- ``embedding_lag`` gains a ``withheld`` column (chunks the policy keeps from the model's
  provider), so its old signature is dropped here and sql/086_dense.sql creates the new one.
"""

from __future__ import annotations

from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
create table groundkit.outbound_policies (
    version bigint primary key check (version >= 1),
    policy jsonb not null check (jsonb_typeof(policy) = 'object'),
    policy_hash text not null check (policy_hash ~ '^[0-9a-f]{64}$'),
    set_at timestamptz not null default pg_catalog.now(),
    set_by text not null default session_user,
    reason text not null check (reason <> '')
);
insert into groundkit.outbound_policies (version, policy, policy_hash, reason)
select 1, p, pg_catalog.encode(pg_catalog.sha256(pg_catalog.convert_to(p::text, 'UTF8')), 'hex'),
       'the default: the in-process provider takes anything; nothing goes to private or cloud endpoints'
  from (select ('{"private_origins": [], "phone_regions": ["US"], "classes": {'
                '"local": {"allow": {"spaces": null, "content_types": null, "max_tier": null,'
                ' "private_spaces": true, "owner_only": true, "queries": true}, "scrub": []},'
                ' "private": {"allow": null, "scrub": []},'
                ' "cloud": {"allow": null, "scrub": ["email", "phone", "url_credentials", "secrets"]}}}')::jsonb
                as p) d;

create table groundkit.outbound_calls (
    id bigint generated always as identity primary key,
    at timestamptz not null default pg_catalog.now(),
    kind text not null check (kind in ('embed_documents', 'embed_query', 'rerank', 'complete')),
    provider text not null,
    origin text,                      -- scheme://host:port (no user info, path or query); null in-process
    class text not null check (class in ('local', 'private', 'cloud')),
    model text,
    policy_version bigint,            -- null: a fixed policy the caller gave, not the database's
    decision text not null check (decision in ('sent', 'refused')),
    rule text,                        -- the rule that refused, null when sent
    texts integer not null check (texts >= 0),
    refused integer not null default 0 check (refused >= 0),
    scrubbed jsonb not null default '{}' check (jsonb_typeof(scrubbed) = 'object'),
    flow text,
    reader text,
    run_id uuid,
    call_id bigint,                   -- the metered call (groundkit.calls), if metered
    tokens_in bigint check (tokens_in >= 0),
    tokens_out bigint check (tokens_out >= 0),
    check ((decision = 'refused') = (rule is not null))
);
create index outbound_calls_at on groundkit.outbound_calls (at);
alter table groundkit.outbound_calls set (autovacuum_vacuum_insert_scale_factor = 0.02);

alter table groundkit.members add column display_name text
    check (display_name is null or pg_catalog.length(display_name) between 1 and 200);

insert into groundkit.flows (flow, builtin) values ('indexing', true) on conflict (flow) do nothing;
alter table groundkit.calls drop constraint calls_kind_check;
alter table groundkit.calls add constraint calls_kind_check check (kind in ('llm', 'embedding', 'rerank'));

drop function if exists groundkit.embedding_lag(text);
"""
    )


def downgrade() -> None:
    raise NotImplementedError("groundkit revisions are forward-only; restore from a backup instead")
