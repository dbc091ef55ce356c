-- Why a member can or cannot see an object (docs/explain.md). Replaceable.
--
-- groundkit.explain_visibility(reader_sub, object_id) lists each clause of the permission
-- predicate with its value for that pair, whether it holds, and which clause decides. The answer
-- itself, the last row ('predicate'), is computed by the functions search applies, not from the
-- clauses: groundkit._reader (sql/060_search.sql) and groundkit._visible_chunk over the object's
-- chunks (which joins groundkit._visible_object, sql/059_visible.sql), so explain cannot say
-- "visible" where search would not return the object, or the reverse. The clauses above it are
-- each evaluated on their own, with the reader's tier as reader_authority states it even when the
-- reader does not resolve (a suspended T3 member is shown as T3 for the tier clauses), so that
-- every reason against is listed; the first that does not hold decides. The gate checks that the
-- answer equals search's for every (reader, object) pair of the golden set, and that the clauses
-- agree with it (groundkit/gate/golden.py).
--
-- It is exactly the oracle a reader must never have: it says whether an object exists and what
-- its policy is. sql/090_roles.sql grants it to groundkit_auditor only; the owner may call it.

create or replace function groundkit.explain_visibility(reader_sub text, object_id text)
returns table (step integer, clause text, value text, holds boolean, decides boolean)
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    n_rows integer;
    r_status text;
    r_tier text;
    r_rank integer;
    resolved boolean;
    o_found boolean;
    o_version bigint;
    o_state text;
    o_type text;
    o_space text;
    o_tier text;
    o_rank integer;
    o_owner_only boolean;
    o_owner text;
    sp_found boolean := false;
    sp_min_tier text;
    sp_private boolean;
    sp_rank integer;
    granted boolean;
    n_chunks integer;
    visible boolean;
    clauses text[] := array['reader', 'object', 'tombstone', 'object tier', 'space min tier', 'space grant',
                            'owner only', 'current version'];
    vals text[];
    oks boolean[];
    first_false integer;
begin
    perform groundkit._check_id('reader_sub', explain_visibility.reader_sub);
    perform groundkit._check_id('object_id', explain_visibility.object_id);

    -- the reader, as reader_authority states it (for the values), and as search resolves it
    select count(*), min(a.status), min(a.tier) into n_rows, r_status, r_tier
      from groundkit.reader_authority a where a.member_sub = explain_visibility.reader_sub;
    select t.rank into r_rank from groundkit.tiers t where n_rows = 1 and t.name = r_tier;
    resolved := exists (select 1 from groundkit._reader(explain_visibility.reader_sub));

    select ob.version, ob.state, ob.content_type, ob.space_id, ob.tier_visibility, ob.owner_only, ob.owner_sub
      into o_version, o_state, o_type, o_space, o_tier, o_owner_only, o_owner
      from groundkit.objects ob where ob.object_id = explain_visibility.object_id;
    o_found := found;
    if o_found then
        select t.rank into o_rank from groundkit.tiers t where t.name = o_tier;
        select s.min_tier, s.private into sp_min_tier, sp_private
          from groundkit.spaces s where s.space_id = o_space;
        sp_found := found;
        select t.rank into sp_rank from groundkit.tiers t where t.name = sp_min_tier;
        granted := exists (select 1 from groundkit.space_grants g
                            where g.space_id = o_space and g.member_sub = explain_visibility.reader_sub);
        select count(*) into n_chunks from groundkit.chunks c
         where c.object_id = explain_visibility.object_id and c.object_version = o_version;
    end if;

    -- the answer: search's own functions, per chunk, as every search path applies them
    visible := exists (
        select 1
          from groundkit._reader(explain_visibility.reader_sub) r
         cross join groundkit.chunks c
         cross join lateral groundkit._visible_chunk(c.chunk_id, r.rank, r.member_sub, null, null) v
         where c.object_id = explain_visibility.object_id);

    vals := array[
        case when n_rows = 0 then 'no row in reader_authority'
             when n_rows > 1 then format('%s rows in reader_authority (ambiguous: fail closed)', n_rows)
             else format('status %s, tier %s%s', r_status, r_tier,
                         case when r_rank is null then ' (unknown to groundkit.tiers)'
                              else format(' (rank %s)', r_rank) end) end,
        case when not o_found then 'no such object' else format('%s, version %s', o_type, o_version) end,
        case when not o_found then null
             when o_state = 'live' then 'live'
             else format('%s (a tombstone: terminal)', o_state) end,
        case when not o_found then null
             else format('version %s is stamped %s (rank %s); the reader''s rank is %s', o_version, o_tier,
                         coalesce(o_rank::text, 'unknown'), coalesce(r_rank::text, 'unknown')) end,
        case when not o_found then null
             when not sp_found then format('space %s does not exist', o_space)
             else format('space %s needs %s (rank %s)', o_space, sp_min_tier, coalesce(sp_rank::text, 'unknown')) end,
        case when not o_found or not sp_found then null
             when not sp_private then format('space %s is not private: no grant needed', o_space)
             when granted then format('space %s is private; the reader has a grant', o_space)
             else format('space %s is private; the reader has no grant', o_space) end,
        case when not o_found then null
             when not o_owner_only then 'not owner-only'
             else format('owner-only, owner %s', coalesce(o_owner, '(none)')) end,
        case when not o_found then null
             else format('version %s is current; %s chunk(s) of it to search', o_version, n_chunks) end];
    oks := array[
        resolved,
        o_found,
        case when not o_found then null else o_state = 'live' end,
        case when not o_found or r_rank is null or o_rank is null then null else r_rank >= o_rank end,
        case when not o_found then null
             when not sp_found then false
             when r_rank is null or sp_rank is null then null
             else r_rank >= sp_rank end,
        case when not o_found or not sp_found then null else not sp_private or granted end,
        case when not o_found then null
             else not o_owner_only or coalesce(o_owner = explain_visibility.reader_sub, false) end,
        case when not o_found then null else n_chunks > 0 end];
    select min(i) into first_false from generate_subscripts(oks, 1) i where oks[i] is false;

    return query
    select i, clauses[i], vals[i], oks[i], coalesce(not visible and i = first_false, false)
      from generate_subscripts(clauses, 1) i
    union all
    select array_length(clauses, 1) + 1, 'predicate',
           case when visible then 'visible: search returns its chunks to this reader'
                else 'hidden: search returns nothing of it to this reader' end,
           visible, visible or first_false is null
     order by 1;
end
$$;

-- Which of a query's terms each current chunk of an object holds (groundkit explain --query):
-- the query analysed as search analyses it for the chunk's language (groundkit._parse_query;
-- English: groundkit.query_terms), against each chunk's indexed terms; one row with a null
-- chunk_seq when the object has no chunks. The owner's and the auditor's, like
-- explain_visibility: it reads content no reader check stands before.
create or replace function groundkit.explain_match(object_id text, query text)
returns table (chunk_seq integer, object_version bigint, terms text[], matched text[])
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select c.chunk_seq, c.object_version, q.terms,
           case when c.chunk_id is null then '{}'::text[]
                else array(select t from unnest(q.terms) t where t = any (tsvector_to_array(c.tsv)) order by t) end
      from (select) one
      left join groundkit.chunks c on c.object_id = explain_match.object_id
     cross join lateral (select coalesce(p.terms, '{}') as terms
                           from groundkit._parse_query(explain_match.query, array[coalesce(c.language, 'english')]) p) q
     order by c.chunk_seq
$$;
