-- What the MCP and HTTP servers (groundkit serve) call besides search: API tokens (revision
-- 0018) and the schema revision for /healthz. Replaceable.
-- Python makes the token and passes only its sha256 here, so the token never reaches the server,
-- its logs or pg_stat_statements.

create or replace function groundkit.create_token(member_sub text, token_hash bytea,
                                                  expires_at timestamptz default null)
returns bigint
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    id bigint;
begin
    perform groundkit._check_id('member_sub', create_token.member_sub);
    if create_token.token_hash is null or length(create_token.token_hash) <> 32 then
        raise exception 'token_hash must be a sha256 (32 bytes)' using errcode = 'GK005';
    end if;
    if create_token.expires_at is not null and create_token.expires_at <= now() then
        raise exception 'expires_at must be in the future' using errcode = 'GK005';
    end if;
    insert into groundkit.api_tokens (member_sub, token_hash, expires_at)
    values (create_token.member_sub, create_token.token_hash, create_token.expires_at)
    returning token_id into id;
    return id;
end
$$;

-- Revokes every live token of the member; returns how many.
create or replace function groundkit.revoke_tokens(member_sub text) returns bigint
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    n bigint;
begin
    update groundkit.api_tokens t set revoked_at = now()
     where t.member_sub = revoke_tokens.member_sub and t.revoked_at is null;
    get diagnostics n = row_count;
    return n;
end
$$;

-- The member a token (by its sha256) stands for, or NULL: unknown, revoked or expired. It says
-- nothing about what the member may see: every read still asks reader_authority, so a suspended
-- member's valid token sees nothing.
create or replace function groundkit.token_member(token_hash bytea) returns text
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select t.member_sub from groundkit.api_tokens t
     where t.token_hash = token_member.token_hash and t.revoked_at is null
       and (t.expires_at is null or t.expires_at > now())
$$;

-- The applied Alembic revision, for health checks by a role that may read no table.
create or replace function groundkit.schema_revision() returns text
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select string_agg(v.version_num, ',' order by v.version_num) from groundkit.alembic_version v
$$;
