-- Live authority: members, spaces and grants. Replaceable.

create or replace function groundkit._check_id(kind text, value text) returns void
language plpgsql immutable
set search_path = pg_catalog, pg_temp
as $$
begin
    if value is null or length(value) = 0 or length(value) > 256 then
        raise exception '% must be between 1 and 256 characters', kind using errcode = 'GK005';
    end if;
end
$$;

-- A new member's or space's id: no controls (newline, tab, ESC), line separators or bidi
-- controls, the set sql/050_write.sql refuses in an object id (groundkit.models.UNSAFE_ID_CHARS).
-- Ids reach terminals, logs, reports and the console. Checked where a row is created only: a
-- member or space written before this check can still be updated, suspended or made private.
create or replace function groundkit._check_new_id(kind text, value text) returns void
language plpgsql immutable
set search_path = pg_catalog, pg_temp
as $$
declare
    unsafe text := substring(value from '[\u0001-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]');
begin
    if unsafe is not null then
        raise exception '% must not contain control, line separator or bidi control characters '
                        '(found U+% at character %)',
            kind, upper(lpad(to_hex(ascii(unsafe)), 4, '0')), strpos(value, unsafe)
            using errcode = 'GK005';
    end if;
end
$$;

create or replace function groundkit._tier_rank(tier text) returns integer
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
declare
    r integer;
begin
    select t.rank into r from groundkit.tiers t where t.name = tier;
    if r is null then
        raise exception 'unknown tier %', coalesce(quote_literal(tier), 'NULL') using errcode = 'GK002',
            hint = 'Known tiers are listed in groundkit.tiers.';
    end if;
    return r;
end
$$;

create or replace function groundkit.put_member(member_sub text, tier text, status text default 'active')
returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    perform groundkit._check_id('member_sub', put_member.member_sub);
    if not exists (select 1 from groundkit.members m where m.member_sub = put_member.member_sub) then
        perform groundkit._check_new_id('member_sub', put_member.member_sub);
    end if;
    perform groundkit._tier_rank(put_member.tier);
    if put_member.status is null or put_member.status not in ('active', 'pending', 'suspended', 'revoked') then
        raise exception 'unknown member status %; expected active, pending, suspended or revoked',
            coalesce(quote_literal(put_member.status), 'NULL') using errcode = 'GK005';
    end if;
    insert into groundkit.members as m (member_sub, tier, status)
    values (put_member.member_sub, put_member.tier, put_member.status)
    on conflict on constraint members_pkey do update
        set tier = excluded.tier, status = excluded.status, updated_at = now();
end
$$;

-- Chunks of one space whose statistics scope differs from what the space's live policy says.
create or replace function groundkit._space_scope_changes(p_space_id text)
returns table (chunk_id bigint, old_scope integer, new_scope integer, doc_len integer)
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select c.chunk_id, c.stat_scope,
           case when s.private or o.owner_only then null else greatest(ot.rank, st.rank) end,
           c.doc_len
      from groundkit.chunks c
      join groundkit.objects o on o.object_id = c.object_id
      join groundkit.spaces s on s.space_id = o.space_id
      join groundkit.tiers st on st.name = s.min_tier
      join groundkit.tiers ot on ot.name = o.tier_visibility
     where o.space_id = p_space_id and o.state = 'live'
       and c.stat_scope is distinct from
           case when s.private or o.owner_only then null else greatest(ot.rank, st.rank) end
$$;

-- Move a space's chunks between statistics scopes after its policy (or a tier's rank) changed;
-- returns how many chunks moved. The work is the space's own: the chunks that move are found once
-- (through the space's live objects and their chunks by object id) and every statement below reads
-- them from those arrays; most of what remains is rewriting their postings, which carry the
-- bucket (docs/bm25/design.md, "Postings").
create or replace function groundkit._restat_space(p_space_id text) returns bigint
language plpgsql
set search_path = pg_catalog, pg_temp
-- its plans probe the pending part by key: a plan made while that table was nearly empty would
-- scan it whole for every posting (docs/bm25.md, "The pending part")
set enable_seqscan = off
as $$
declare
    my_shard smallint := (pg_backend_pid() % 8)::smallint;
    ids bigint[];
    old_scopes integer[];
    new_scopes integer[];
    lens integer[];
    new_keys bigint[];
begin
    -- No merge may move these chunks' postings meanwhile: term_stats counts the chunks' terms in
    -- postings, not those still pending (docs/bm25.md, "The pending part").
    perform groundkit._lock_pending_shared();
    select array_agg(x.chunk_id order by x.chunk_id), array_agg(x.old_scope order by x.chunk_id),
           array_agg(x.new_scope order by x.chunk_id), array_agg(x.doc_len order by x.chunk_id),
           -- Owner-only chunks never change scope, so a NULL new scope means a private space.
           array_agg(groundkit._vis_key(false, null, x.new_scope is null, p_space_id, x.new_scope)
                     order by x.chunk_id)
      into ids, old_scopes, new_scopes, lens, new_keys
      from groundkit._space_scope_changes(p_space_id) x;
    if ids is null then
        return 0;
    end if;

    -- Each chunk's lexemes once: -1 in its old scope, +1 in its new one.
    insert into groundkit.term_stats as t (term, scope, shard, df)
    select u.lexeme, d.scope, my_shard, sum(d.delta)
      from unnest(ids, old_scopes, new_scopes) x(chunk_id, old_scope, new_scope)
      join groundkit.chunks c on c.chunk_id = x.chunk_id
     cross join lateral unnest(c.tsv) u
     cross join lateral (values (x.old_scope, -1), (x.new_scope, 1)) d(scope, delta)
     where d.scope is not null
       -- a chunk's postings are its lexemes; those still pending are not counted in term_stats
       and not exists (select 1 from groundkit.pending_postings pp
                        where pp.term = u.lexeme and pp.chunk_id = c.chunk_id)
     group by u.lexeme, d.scope
    having sum(d.delta) <> 0
     order by u.lexeme, d.scope
    on conflict (term, scope, shard) do update set df = t.df + excluded.df;

    insert into groundkit.scope_stats as t (scope, shard, n_chunks, total_len)
    select d.scope, my_shard, sum(d.delta), sum(d.delta * d.doc_len)
      from (select x.old_scope as scope, -1 as delta, x.doc_len
              from unnest(old_scopes, lens) x(old_scope, doc_len) where x.old_scope is not null
            union all
            select x.new_scope, 1, x.doc_len
              from unnest(new_scopes, lens) x(new_scope, doc_len) where x.new_scope is not null) d
     group by d.scope
     order by d.scope
    on conflict (scope, shard) do update
        set n_chunks = t.n_chunks + excluded.n_chunks, total_len = t.total_len + excluded.total_len;

    -- The chunks' postings move to their new visibility bucket (docs/bm25.md): most of the work,
    -- one row per posting, each a new entry in both of postings' indexes. In key order, so that
    -- the probes and the new entries walk the indexes' pages once rather than at random.
    update groundkit.postings p
       set vis_key = z.new_key
      from (select u.lexeme, x.chunk_id, x.new_key
              from unnest(ids, new_keys) x(chunk_id, new_key)
              join groundkit.chunks c on c.chunk_id = x.chunk_id
             cross join lateral unnest(c.tsv) u
             order by u.lexeme, x.chunk_id) z
     where p.term = z.lexeme and p.chunk_id = z.chunk_id;
    update groundkit.pending_postings p
       set vis_key = x.new_key, stat_scope = x.new_scope
      from unnest(ids, new_keys, new_scopes) x(chunk_id, new_key, new_scope)
      join groundkit.chunks c on c.chunk_id = x.chunk_id
     cross join lateral unnest(c.tsv) u
     where p.term = u.lexeme and p.chunk_id = x.chunk_id;

    update groundkit.chunks c set stat_scope = x.new_scope
      from unnest(ids, new_scopes) x(chunk_id, new_scope)
     where c.chunk_id = x.chunk_id;
    -- Their entries in the dense index move to the same bucket (docs/dense.md, "Buckets"): after
    -- the chunks' rows, whose locks an embedding store filing them holds until it commits.
    -- Pending, so that this statement makes no HNSW inserts (a space of 30,000 chunks made
    -- public took 165 s with them, under load): the worker merges them (dense_merge_pending).
    update groundkit.dense_entries e set vis_key = x.new_key, pending = true
      from unnest(ids, new_keys) x(chunk_id, new_key)
     where e.chunk_id = x.chunk_id and e.vis_key <> x.new_key;
    return cardinality(ids);
end
$$;

create or replace function groundkit.put_space(space_id text, min_tier text default 'T0', private boolean default false)
returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    prev groundkit.spaces;
begin
    perform groundkit._check_id('space_id', put_space.space_id);
    perform groundkit._tier_rank(put_space.min_tier);
    if put_space.private is null then
        raise exception 'private must be true or false' using errcode = 'GK005';
    end if;
    -- Serialises with writers of objects in this space (they take FOR SHARE on the row).
    select * into prev from groundkit.spaces s where s.space_id = put_space.space_id for update;
    if prev.space_id is null then
        perform groundkit._check_new_id('space_id', put_space.space_id);
    end if;
    insert into groundkit.spaces as s (space_id, min_tier, private)
    values (put_space.space_id, put_space.min_tier, put_space.private)
    on conflict on constraint spaces_pkey do update
        set min_tier = excluded.min_tier, private = excluded.private, updated_at = now();
    if prev.space_id is not null
       and (prev.min_tier is distinct from put_space.min_tier or prev.private is distinct from put_space.private) then
        perform groundkit._restat_space(put_space.space_id);
    end if;
end
$$;

create or replace function groundkit.grant_space(space_id text, member_sub text) returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    perform groundkit._check_id('member_sub', grant_space.member_sub);
    if not exists (select 1 from groundkit.spaces s where s.space_id = grant_space.space_id) then
        raise exception 'unknown space %', coalesce(quote_literal(grant_space.space_id), 'NULL')
            using errcode = 'GK003';
    end if;
    insert into groundkit.space_grants (space_id, member_sub)
    values (grant_space.space_id, grant_space.member_sub)
    on conflict do nothing;
end
$$;

create or replace function groundkit.revoke_space(space_id text, member_sub text) returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    if not exists (select 1 from groundkit.spaces s where s.space_id = revoke_space.space_id) then
        raise exception 'unknown space %', coalesce(quote_literal(revoke_space.space_id), 'NULL')
            using errcode = 'GK003';
    end if;
    delete from groundkit.space_grants g
     where g.space_id = revoke_space.space_id and g.member_sub = revoke_space.member_sub;
end
$$;

-- The opt-in binding of logins to members (docs/sql-operations.md, "Binding a login to a member"):
-- a login with a row in groundkit.login_members searches as that member only. session_user is
-- the login that authenticated (search runs as the owner, so current_user would be the owner),
-- and no role below superuser can change it. An unmapped login may pass any reader_sub, as
-- before: the app then vouches for it. True, or GK010.
create or replace function groundkit._reader_allowed(p_reader_sub text) returns boolean
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
declare
    bound text;
begin
    select m.member_sub into bound from groundkit.login_members m where m.login = session_user::text;
    if found and p_reader_sub is distinct from bound then
        raise exception 'login % may only search as its own member', quote_ident(session_user::text)
            using errcode = 'GK010',
                  hint = 'groundkit.login_members binds this login to one reader_sub.';
    end if;
    return true;
end
$$;
