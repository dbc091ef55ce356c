-- THE permission predicate, object by object. Replaceable.
--
-- The object, if the reader (of tier rank p_rank, as groundkit._reader resolved it) may see it
-- now, else no row: live, its tier and its space's minimum tier within the reader's rank, a
-- private space only with a grant, an owner-only object only for its owner. Search applies it per
-- chunk through groundkit._visible_chunk (sql/060_search.sql), which joins this; the home feed
-- (sql/080_home.sql) and record_engagement apply it per object. One predicate for all of them.
--
-- Deliberately without `set search_path`, as _visible_chunk: a SQL function with a SET clause is
-- never inlined, and inlined (twice, into _visible_chunk and into its callers) is what keeps it a
-- plain join in the caller's plan. Every relation is schema-qualified, it is called only from
-- functions that pin search_path = pg_catalog, pg_temp, and nobody else may execute it
-- (sql/090_roles.sql revokes PUBLIC).
-- The spaces whose objects the reader may see, policy permitting: the space-level half of the
-- predicate, joined by _visible_object (inlined, it is the same join as written there). The home
-- feed also reads it to walk only those spaces.
create or replace function groundkit._visible_space(p_rank integer, p_member text)
returns table (space_id text)
language sql stable
as $$
    select sp.space_id
      from groundkit.spaces sp
      join groundkit.tiers st on st.name = sp.min_tier
     where p_rank >= st.rank
       and (not sp.private
            or exists (select 1 from groundkit.space_grants g
                        where g.space_id = sp.space_id and g.member_sub = p_member))
$$;

create or replace function groundkit._visible_object(
    p_object_id text, p_rank integer, p_member text, p_content_types text[], p_space_ids text[])
returns table (object_id text, version bigint, content_type text, space_id text, title text,
               metadata jsonb, log_seq bigint)
language sql stable
as $$
    select o.object_id, o.version, o.content_type, o.space_id, o.title, o.metadata, o.log_seq
      from groundkit.objects o
      join groundkit.tiers ot on ot.name = o.tier_visibility
      join groundkit._visible_space(p_rank, p_member) sp on sp.space_id = o.space_id
     where o.object_id = p_object_id and o.state = 'live'
       and p_rank >= ot.rank
       and (not o.owner_only or o.owner_sub = p_member)
       and (p_content_types is null or o.content_type = any (p_content_types))
       and (p_space_ids is null or o.space_id = any (p_space_ids))
$$;

