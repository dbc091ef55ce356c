-- The outbound gate's SQL half (docs/outbound.md). Replaceable.
--
-- The policy is data: one row of groundkit.outbound_policies per version, append-only, the
-- newest in force. Python's gate (groundkit.outbound.gate.send) asks these functions before
-- every provider call that carries text: which class the provider's endpoint is in (local,
-- private, cloud), whether the texts' provenance may go there, what to scrub; and records the
-- decision in groundkit.outbound_calls. The embedding job's claim and the lag use the same
-- predicate (groundkit._outbound_refusal), so what the gate refuses the job never claims.

-- The policy and the call ledger are append-only: no update, delete or truncate, whoever asks.
create or replace function groundkit._outbound_guard() returns trigger
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    raise exception 'groundkit.% is append-only: % rejected', tg_table_name, tg_op
        using errcode = 'GK006', hint = 'A new policy is a new version: groundkit.set_outbound_policy.';
end
$$;

create or replace trigger outbound_policies_append_only
    before update or delete on groundkit.outbound_policies
    for each row execute function groundkit._outbound_guard();
create or replace trigger outbound_policies_no_truncate
    before truncate on groundkit.outbound_policies
    for each statement execute function groundkit._outbound_guard();
create or replace trigger outbound_calls_append_only
    before update or delete on groundkit.outbound_calls
    for each row execute function groundkit._outbound_guard();
create or replace trigger outbound_calls_no_truncate
    before truncate on groundkit.outbound_calls
    for each statement execute function groundkit._outbound_guard();

-- The policy in force: the newest version.
create or replace function groundkit.outbound_policy()
returns table (version bigint, policy jsonb, policy_hash text, set_at timestamptz, set_by text, reason text)
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select p.version, p.policy, p.policy_hash, p.set_at, p.set_by, p.reason
      from groundkit.outbound_policies p
     order by p.version desc
     limit 1
$$;

-- The SHA-256 (hex) of the policy in force: what a gate certificate names (docs/outbound.md).
-- Two versions with the same content have the same hash.
create or replace function groundkit.outbound_policy_hash()
returns text
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select p.policy_hash from groundkit.outbound_policies p order by p.version desc limit 1
$$;

-- Every version, newest first.
create or replace function groundkit.outbound_policy_history()
returns table (version bigint, policy jsonb, policy_hash text, set_at timestamptz, set_by text, reason text)
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select p.version, p.policy, p.policy_hash, p.set_at, p.set_by, p.reason
      from groundkit.outbound_policies p
     order by p.version desc
$$;

-- GK025 unless p is a policy document of exactly the shape groundkit.outbound.policy writes
-- (every key present, no other key): the SQL predicates below read it without guessing.
create or replace function groundkit._check_outbound_policy(p jsonb)
returns void
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
declare
    cls text;
    c jsonb;
    a jsonb;
    bad text;
begin
    if p is null or jsonb_typeof(p) <> 'object'
       or (select array_agg(k order by k) from jsonb_object_keys(p) k)
          is distinct from array['classes', 'phone_regions', 'private_origins'] then
        bad := 'a policy is an object with the keys classes, phone_regions and private_origins';
    elsif jsonb_typeof(p -> 'private_origins') <> 'array'
          or exists (select 1 from jsonb_array_elements(p -> 'private_origins') e
                      where jsonb_typeof(e) <> 'string'
                         or (e #>> '{}') !~ '^https?://([a-z0-9.-]+|\[[0-9a-f:.]+\]):[0-9]{1,5}$') then
        bad := 'private_origins must be origins of the form scheme://host:port (lower case, http or https)';
    elsif jsonb_typeof(p -> 'phone_regions') <> 'array'
          or exists (select 1 from jsonb_array_elements(p -> 'phone_regions') e
                      where jsonb_typeof(e) <> 'string' or (e #>> '{}') !~ '^[A-Z]{2}$') then
        bad := 'phone_regions must be two-letter region codes (US, GB, ...)';
    elsif jsonb_typeof(p -> 'classes') <> 'object'
          or (select array_agg(k order by k) from jsonb_object_keys(p -> 'classes') k)
             is distinct from array['cloud', 'local', 'private'] then
        bad := 'classes must name local, private and cloud, and nothing else';
    end if;
    if bad is null then
        foreach cls in array array['local', 'private', 'cloud'] loop
            c := p -> 'classes' -> cls;
            a := c -> 'allow';
            if jsonb_typeof(c) <> 'object'
               or (select array_agg(k order by k) from jsonb_object_keys(c) k) is distinct from array['allow', 'scrub'] then
                bad := format('class %s must have the keys allow and scrub', cls);
            elsif jsonb_typeof(c -> 'scrub') <> 'array'
                  or exists (select 1 from jsonb_array_elements(c -> 'scrub') e
                              where (e #>> '{}') is null
                                 or (e #>> '{}') not in ('email', 'phone', 'url_credentials', 'secrets', 'member_names')) then
                bad := format('class %s: scrub lists email, phone, url_credentials, secrets, member_names', cls);
            elsif jsonb_typeof(a) = 'null' then
                null;  -- closed
            elsif jsonb_typeof(a) <> 'object'
                  or (select array_agg(k order by k) from jsonb_object_keys(a) k)
                     is distinct from array['content_types', 'max_tier', 'owner_only', 'private_spaces', 'queries', 'spaces'] then
                bad := format('class %s: allow is null or an object with spaces, content_types, max_tier, '
                              'private_spaces, owner_only and queries', cls);
            elsif jsonb_typeof(a -> 'spaces') not in ('null', 'array')
                  or jsonb_typeof(a -> 'content_types') not in ('null', 'array')
                  or exists (select 1 from jsonb_array_elements(coalesce(nullif(a -> 'spaces', 'null'), '[]')
                                                                || coalesce(nullif(a -> 'content_types', 'null'), '[]')) e
                              where jsonb_typeof(e) <> 'string') then
                bad := format('class %s: spaces and content_types are null (any) or lists of names', cls);
            elsif jsonb_typeof(a -> 'max_tier') not in ('null', 'string') then
                bad := format('class %s: max_tier is null (any) or a tier name', cls);
            elsif jsonb_typeof(a -> 'max_tier') = 'string'
                  and not exists (select 1 from groundkit.tiers t where t.name = a ->> 'max_tier') then
                bad := format('class %s: unknown tier %s', cls, quote_literal(a ->> 'max_tier'));
            elsif jsonb_typeof(a -> 'private_spaces') <> 'boolean' or jsonb_typeof(a -> 'owner_only') <> 'boolean'
                  or jsonb_typeof(a -> 'queries') <> 'boolean' then
                bad := format('class %s: private_spaces, owner_only and queries are booleans', cls);
            end if;
            exit when bad is not null;
        end loop;
    end if;
    if bad is not null then
        raise exception 'invalid outbound policy: %', bad using errcode = 'GK025';
    end if;
end
$$;

-- A new version of the policy, in force from the next call (the owner's alone). The same
-- content as the policy in force adds no version. Returns the version in force afterwards.
create or replace function groundkit.set_outbound_policy(policy jsonb, reason text)
returns table (version bigint, policy_hash text, changed boolean)
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    cur groundkit.outbound_policies;
    h text;
begin
    perform groundkit._check_outbound_policy(set_outbound_policy.policy);
    if set_outbound_policy.reason is null or btrim(set_outbound_policy.reason) = '' then
        raise exception 'a policy change needs a reason' using errcode = 'GK025';
    end if;
    -- one writer at a time: versions are consecutive, and readers see old or new, never a gap
    lock table groundkit.outbound_policies in share row exclusive mode;
    select * into cur from groundkit.outbound_policies p order by p.version desc limit 1;
    h := encode(sha256(convert_to(set_outbound_policy.policy::text, 'UTF8')), 'hex');
    if found and cur.policy_hash = h then
        return query select cur.version, cur.policy_hash, false;
        return;
    end if;
    insert into groundkit.outbound_policies (version, policy, policy_hash, reason)
    values (coalesce(cur.version, 0) + 1, set_outbound_policy.policy, h, set_outbound_policy.reason);
    return query select coalesce(cur.version, 0) + 1, h, true;
end
$$;

-- The origin (scheme://host:port, lower case, the default port filled in) of an http(s) URL, or
-- null when it is not one this strict reading understands: user info with more than one '@', a
-- backslash, a host of other characters. Null is never private (fail closed: cloud). The gate
-- checks that the origin it sends to is the one classified (groundkit.outbound.gate).
create or replace function groundkit._origin(url text)
returns text
language plpgsql immutable
set search_path = pg_catalog, pg_temp
as $$
declare
    m text[];
    port text;
begin
    if url is null or url ~ '[\\\s]' then
        return null;
    end if;
    m := regexp_match(url, '^([A-Za-z][A-Za-z0-9+.-]*)://(?:[^@/?#]*@)?([A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(?::([0-9]{1,5}))?(?:[/?#]|$)');
    if m is null or lower(m[1]) not in ('http', 'https') then
        return null;
    end if;
    port := coalesce(m[3], case lower(m[1]) when 'https' then '443' else '80' end);
    return lower(m[1]) || '://' || lower(m[2]) || ':' || (port::integer)::text;
end
$$;

-- The provider class of an endpoint under the policy in force: 'local' for the in-process
-- provider, 'private' for an origin the operator marked, 'cloud' for anything else.
create or replace function groundkit.outbound_class(provider text, url text)
returns text
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select case
        when outbound_class.provider = 'local' then 'local'
        when groundkit._origin(outbound_class.url) is not null
             and (p.policy -> 'private_origins') ? groundkit._origin(outbound_class.url) then 'private'
        else 'cloud' end
      from groundkit.outbound_policy() p
$$;

-- A class's allowance under the policy in force: open (allow is not null), the allow object,
-- the rank of its max_tier (null: any), whether it is unrestricted (any space, type and tier,
-- private spaces and owner-only notes too), and its scrub list.
create or replace function groundkit._outbound_rule(p_class text)
returns table (class text, version bigint, policy_hash text, open boolean, allow jsonb, max_rank integer,
               unrestricted boolean, scrub text[], phone_regions text[])
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select p_class, p.version, p.policy_hash,
           jsonb_typeof(a) = 'object',
           a,
           (select t.rank from groundkit.tiers t where t.name = a ->> 'max_tier'),
           jsonb_typeof(a) = 'object' and jsonb_typeof(a -> 'spaces') = 'null'
               and jsonb_typeof(a -> 'content_types') = 'null' and jsonb_typeof(a -> 'max_tier') = 'null'
               and (a -> 'private_spaces') = 'true' and (a -> 'owner_only') = 'true',
           array(select jsonb_array_elements_text(p.policy -> 'classes' -> p_class -> 'scrub')),
           array(select jsonb_array_elements_text(p.policy -> 'phone_regions'))
      from groundkit.outbound_policy() p
     cross join lateral (select p.policy -> 'classes' -> p_class -> 'allow' as a) x
$$;

-- THE outbound predicate, for one object's attributes: null when the class's allowance lets its
-- text go, else the name of the rule that refuses it. Inlined (no SET clause); called only from
-- functions that pin search_path.
create or replace function groundkit._outbound_refusal(
    p_class text, p_allow jsonb, p_max_rank integer,
    p_private boolean, p_owner_only boolean, p_space text, p_type text, p_rank integer)
returns text
language sql immutable
as $$
    select case
        when pg_catalog.jsonb_typeof(p_allow) is distinct from 'object' then p_class || '.closed'
        when p_private and (p_allow -> 'private_spaces') <> 'true'::jsonb then p_class || '.private_spaces'
        when p_owner_only and (p_allow -> 'owner_only') <> 'true'::jsonb then p_class || '.owner_only'
        when pg_catalog.jsonb_typeof(p_allow -> 'spaces') = 'array' and not ((p_allow -> 'spaces') ? p_space)
            then p_class || '.spaces'
        when pg_catalog.jsonb_typeof(p_allow -> 'content_types') = 'array'
             and not ((p_allow -> 'content_types') ? p_type) then p_class || '.content_types'
        when pg_catalog.jsonb_typeof(p_allow -> 'max_tier') = 'string'
             and (p_rank is null or p_max_rank is null or p_rank > p_max_rank) then p_class || '.max_tier'
    end
$$;

-- The refusal for one object (by id): its live row's space, privacy, owner-only flag, content
-- type and effective tier (the higher of its own and its space's minimum); '<class>.unknown' for
-- an object that is not live.
create or replace function groundkit._outbound_object_refusal(
    p_class text, p_allow jsonb, p_max_rank integer, p_object_id text)
returns text
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select coalesce(
        (select coalesce(groundkit._outbound_refusal(p_class, p_allow, p_max_rank, s.private, o.owner_only,
                                                     o.space_id, o.content_type, greatest(ot.rank, st.rank)), '')
           from groundkit.objects o
           join groundkit.spaces s on s.space_id = o.space_id
           join groundkit.tiers st on st.name = s.min_tier
           join groundkit.tiers ot on ot.name = o.tier_visibility
          where o.object_id = p_object_id and o.state = 'live'),
        p_class || '.unknown')
$$;

-- Whether a model's provider may receive reader queries under the policy in force (search's
-- auto mode embeds a query only where it may: sql/086_dense.sql).
create or replace function groundkit._outbound_queries_allowed(p_provider text, p_url text)
returns boolean
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select r.open and (r.allow -> 'queries') = 'true'::jsonb
      from groundkit._outbound_rule(groundkit.outbound_class(p_provider, p_url)) r
$$;

-- The decision for one call of the gate, for what a reader's session may ask: the provider's
-- class, the policy version, and the first rule that refuses (null: the call may go) with how
-- many of its texts are refused. Texts are counted by provenance:
--   p_queries       the reader's or the app's own words (a search query, a prompt): the class's
--                   allowance must say queries;
--   p_unattributed  document texts of unknown provenance: only an unrestricted allowance takes them;
--   p_object_ids    objects whose chunks the call carries (an LLM's context, rerank documents):
--                   each must be visible to p_reader_sub (an object it cannot see is refused as
--                   '<class>.unknown', the same as one that does not exist: no side channel) and
--                   allowed by the predicate.
-- Also returns the scrub list and phone regions of the class, for the redaction boundary.
create or replace function groundkit.outbound_decide(
    provider text, url text, kind text, reader_sub text default null,
    object_ids text[] default null, queries integer default 0, unattributed integer default 0)
returns table (policy_version bigint, policy_hash text, class text, origin text, rule text, refused integer,
               scrub text[], phone_regions text[])
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    r record;
    cls text := groundkit.outbound_class(outbound_decide.provider, outbound_decide.url);
    v_rule text;
    n integer := 0;
    rk integer;
    obj text;
    why text;
begin
    if outbound_decide.kind is null
       or outbound_decide.kind not in ('embed_documents', 'embed_query', 'rerank', 'complete') then
        raise exception 'kind must be embed_documents, embed_query, rerank or complete' using errcode = 'GK005';
    end if;
    if coalesce(outbound_decide.queries, -1) < 0 or coalesce(outbound_decide.unattributed, -1) < 0 then
        raise exception 'queries and unattributed are counts (>= 0)' using errcode = 'GK005';
    end if;
    if cardinality(outbound_decide.object_ids) > 0 then
        if outbound_decide.reader_sub is null then
            raise exception 'object ids are decided for a reader: reader_sub must be given' using errcode = 'GK005';
        end if;
        perform groundkit._reader_allowed(outbound_decide.reader_sub);  -- GK010 for a bound login's others
        select x.rank into rk from groundkit._reader(outbound_decide.reader_sub) x;
    end if;
    select * into r from groundkit._outbound_rule(cls);
    if not r.open then
        v_rule := cls || '.closed';
        n := outbound_decide.queries + outbound_decide.unattributed + coalesce(cardinality(outbound_decide.object_ids), 0);
    else
        if outbound_decide.queries > 0 and (r.allow -> 'queries') <> 'true'::jsonb then
            v_rule := cls || '.queries';
            n := n + outbound_decide.queries;
        end if;
        if outbound_decide.unattributed > 0 and not r.unrestricted then
            v_rule := coalesce(v_rule, cls || '.unattributed');
            n := n + outbound_decide.unattributed;
        end if;
        foreach obj in array coalesce(outbound_decide.object_ids, '{}') loop
            if rk is null or not exists (select 1 from groundkit._visible_object(obj, rk, outbound_decide.reader_sub,
                                                                                 null, null)) then
                why := cls || '.unknown';
            else
                why := groundkit._outbound_object_refusal(cls, r.allow, r.max_rank, obj);
                why := nullif(why, '');
            end if;
            if why is not null then
                v_rule := coalesce(v_rule, why);
                n := n + 1;
            end if;
        end loop;
    end if;
    return query select r.version, r.policy_hash, cls, groundkit._origin(outbound_decide.url), v_rule, n,
                        r.scrub, r.phone_regions;
end
$$;

-- The decision for a batch of the embedding job (the writer's and the owner's: a hash is a
-- fingerprint of a text, and a reader must not learn where a guessed text lives). The class
-- comes from the model's own provider and URL.
create or replace function groundkit.outbound_decide_embedding(model text, hashes bytea[])
returns table (policy_version bigint, policy_hash text, class text, origin text, rule text, refused integer,
               scrub text[], phone_regions text[])
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    m groundkit.embedding_models;
    cls text;
    r record;
    v_rule text;
    n integer := 0;
begin
    m := groundkit._dense_model(outbound_decide_embedding.model);
    if outbound_decide_embedding.model is null then
        raise exception 'model must not be NULL' using errcode = 'GK005';
    end if;
    cls := groundkit.outbound_class(m.provider, m.options ->> 'url');
    select * into r from groundkit._outbound_rule(cls);
    if not r.open then
        v_rule := cls || '.closed';
        n := coalesce(cardinality(outbound_decide_embedding.hashes), 0);
    elsif not r.unrestricted then
        -- one statement for the batch: per hash, whether any current chunk with it may go
        execute format('
            with u as (select distinct x.h from unnest($1::bytea[]) x(h)),
            hc as materialized (  -- the chunks by the hash index first, whatever the statistics say
                select u.h, c.object_id from u join groundkit.chunks c on c.%I = u.h),
            v as (
                select hc.h,
                       bool_or(groundkit._outbound_refusal($2, $3, $4, s.private, o.owner_only, o.space_id,
                                                           o.content_type, greatest(ot.rank, st.rank)) is null) as ok,
                       min(groundkit._outbound_refusal($2, $3, $4, s.private, o.owner_only, o.space_id,
                                                       o.content_type, greatest(ot.rank, st.rank))) as why
                  from hc
                  join groundkit.objects o on o.object_id = hc.object_id and o.state = ''live''
                  join groundkit.spaces s on s.space_id = o.space_id
                  join groundkit.tiers st on st.name = s.min_tier
                  join groundkit.tiers ot on ot.name = o.tier_visibility
                 group by hc.h)
            select count(*) filter (where v.ok is not true),
                   min(coalesce(v.why, $2 || ''.unknown'')) filter (where v.ok is not true)
              from u left join v on v.h = u.h', groundkit._recipe_column(m.recipe))
           into n, v_rule using outbound_decide_embedding.hashes, cls, r.allow, r.max_rank;
    end if;
    return query select r.version, r.policy_hash, cls, groundkit._origin(m.options ->> 'url'), v_rule, n,
                        r.scrub, r.phone_regions;
end
$$;

-- Record one decision of the gate (and, for a call that was sent with a flow, meter it through
-- groundkit.record_call in the same statement). d is a JSON object: kind, provider, origin,
-- class, model, policy_version, decision, rule, texts, refused, scrubbed, flow, reader, run_id,
-- tokens_in, tokens_out, cost, currency, meter. Returns the metered call's id, or null.
create or replace function groundkit.record_outbound(d jsonb)
returns bigint
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    v_call bigint;
    v_reader text := d ->> 'reader';
begin
    if d is null or jsonb_typeof(d) <> 'object' then
        raise exception 'record_outbound takes a JSON object' using errcode = 'GK005';
    end if;
    if v_reader is not null then
        perform groundkit._reader_allowed(v_reader);
    end if;
    if (d ->> 'decision') = 'sent' and coalesce((d ->> 'meter')::boolean, false) and (d ->> 'flow') is not null then
        v_call := groundkit.record_call(d ->> 'flow', coalesce(d ->> 'model', d ->> 'provider'),
                                        case d ->> 'kind' when 'complete' then 'llm' when 'rerank' then 'rerank'
                                                          else 'embedding' end,
                                        coalesce((d ->> 'tokens_in')::bigint, 0), coalesce((d ->> 'tokens_out')::bigint, 0),
                                        (d ->> 'cost')::numeric, d ->> 'currency',
                                        (d ->> 'run_id')::uuid, v_reader);
    elsif (d ->> 'flow') is not null then
        perform groundkit._check_flow(d ->> 'flow');
    end if;
    insert into groundkit.outbound_calls (kind, provider, origin, class, model, policy_version, decision, rule,
                                          texts, refused, scrubbed, flow, reader, run_id, call_id,
                                          tokens_in, tokens_out)
    values (d ->> 'kind', d ->> 'provider', d ->> 'origin', d ->> 'class', d ->> 'model',
            (d ->> 'policy_version')::bigint, d ->> 'decision', d ->> 'rule',
            coalesce((d ->> 'texts')::integer, 0), coalesce((d ->> 'refused')::integer, 0),
            coalesce(d -> 'scrubbed', '{}'), d ->> 'flow', v_reader, (d ->> 'run_id')::uuid, v_call,
            (d ->> 'tokens_in')::bigint, (d ->> 'tokens_out')::bigint);
    -- (no exception block: it would cost a subtransaction per call; the table's checks refuse
    -- what the gate never sends: an unknown kind, class or decision, a negative count)
    return v_call;
end
$$;

-- The decisions since p_since, grouped: what `groundkit status` and `groundkit outbound
-- decisions` show (the owner's and the auditor's).
create or replace function groundkit.outbound_summary(p_since timestamptz default null)
returns table (class text, kind text, decision text, rule text, calls bigint, texts bigint, refused bigint,
               scrubbed bigint, last_at timestamptz)
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select c.class, c.kind, c.decision, c.rule, count(*), sum(c.texts), sum(c.refused),
           coalesce(sum((select sum(v::bigint) from jsonb_each_text(c.scrubbed) e(k, v))), 0),
           max(c.at)
      from groundkit.outbound_calls c
     where c.at >= coalesce(p_since, '-infinity'::timestamptz)
     group by 1, 2, 3, 4
     order by 1, 2, 3, 4 nulls first
$$;

-- A member's display name, which the scrubber removes where the policy says member_names
-- (the writer's, like put_member). Null clears it. GK009-like errors: an unknown member is GK005.
create or replace function groundkit.put_member_name(member_sub text, display_name text)
returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    if put_member_name.display_name is not null
       and (btrim(put_member_name.display_name) = '' or length(put_member_name.display_name) > 200) then
        raise exception 'display_name must be 1-200 characters or null' using errcode = 'GK005';
    end if;
    update groundkit.members m set display_name = nullif(btrim(put_member_name.display_name), '')
     where m.member_sub = put_member_name.member_sub;
    if not found then
        raise exception 'unknown member %', coalesce(quote_literal(put_member_name.member_sub), 'NULL')
            using errcode = 'GK005';
    end if;
end
$$;

-- The names the scrubber removes (the writer's and the owner's: a reader login must not list
-- the membership), with a stamp that changes whenever they do; given the stamp a client holds,
-- names is null when nothing changed, so a client fetches the list only then.
create or replace function groundkit.outbound_member_names(known_stamp text default null)
returns table (stamp text, names text[])
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select x.stamp, case when x.stamp is distinct from known_stamp then x.names end
      from (select md5(coalesce(string_agg(m.display_name, E'\n' order by m.display_name), '')) as stamp,
                   coalesce(array_agg(m.display_name order by m.display_name), '{}') as names
              from groundkit.members m
             where m.display_name is not null) x
$$;

-- What the policy withholds from each registered model's provider, for status: chunks whose text
-- lacks the model's embedding and may not go to its class.
create or replace function groundkit.outbound_withheld()
returns table (model text, class text, withheld bigint)
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
begin
    return query
    select m.name, groundkit.outbound_class(m.provider, m.options ->> 'url'), l.withheld
      from groundkit.embedding_models m
     cross join lateral groundkit.embedding_lag(m.name) l
     order by m.name;
end
$$;
