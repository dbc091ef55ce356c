-- Permission-correct BM25 search. Replaceable.
--
-- One statement reads the reader's live tier and status, the spaces' live policy, the grants,
-- the BM25 statistics of the reader's scopes and the postings, so every part of the answer
-- comes from one snapshot. Visibility is a join predicate inside the ranking query; nothing
-- is filtered after top-k, so k rows come back whenever k visible chunks match.

-- The analyzed terms of a query and how often each occurs in it. Plain text only: tsquery
-- syntax has no meaning here and cannot raise.
create or replace function groundkit.query_terms(query text)
returns table (term text, qtf integer)
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select u.lexeme, coalesce(array_length(u.positions, 1), 1)
      from unnest(to_tsvector('groundkit.english'::regconfig, coalesce(query, ''))) u
$$;

-- The reader, as the live authority says right now: exactly one row in
-- groundkit.reader_authority, active, with a tier groundkit.tiers knows. Anything else (no row,
-- two rows whatever they say, another status, an unknown tier) is no row at all: fail closed.
create or replace function groundkit._reader(p_reader_sub text)
returns table (member_sub text, rank integer)
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select a.member_sub, t.rank
      from (select x.member_sub, x.tier, x.status, count(*) over () as n
              from groundkit.reader_authority x
             where x.member_sub = p_reader_sub) a
      join groundkit.tiers t on t.name = a.tier
     where a.n = 1 and a.status = 'active'
$$;

-- The permission predicate per chunk: the chunk, if the reader (of tier rank p_rank, as
-- groundkit._reader resolved it) may see its object now (groundkit._visible_object,
-- sql/059_visible.sql, the one predicate), else no row. Every search path joins it laterally per
-- candidate chunk, inside its own ranking query.
--
-- Deliberately without `set search_path`: a SQL function with a SET clause is never inlined,
-- and inlined is what keeps this a plain join in the caller's plan (index lookups per chunk,
-- no function call per row). Every relation below is schema-qualified, it is called only from
-- functions that pin search_path = pg_catalog, pg_temp (the inlined body is planned under the
-- caller's setting), and nobody else may execute it (sql/090_roles.sql revokes PUBLIC).
create or replace function groundkit._visible_chunk(
    p_chunk_id bigint, p_rank integer, p_member text, p_content_types text[], p_space_ids text[])
returns table (object_id text, chunk_seq integer, doc_len integer)
language sql stable
as $$
    select ch.object_id, ch.chunk_seq, ch.doc_len
      from groundkit.chunks ch
      join groundkit._visible_object(ch.object_id, p_rank, p_member, p_content_types, p_space_ids) o
        on o.version = ch.object_version
     where ch.chunk_id = p_chunk_id
$$;

-- Whether search may say how it ran (raise debug): only to a session whose login is a member of
-- the role running the search, the owner (groundkit.search is SECURITY DEFINER). The rounds'
-- figures (depths, candidates, bounds, range sizes) come from the reader's buckets, which can
-- hold chunks the predicate then hides, so a reader's login is told nothing; a reader cannot
-- change its login or its memberships. Inlined (no SET clause, no relation): one test where a
-- line would be raised.
create or replace function groundkit._debug_allowed()
returns boolean
language sql stable
as $$
    select pg_catalog.pg_has_role(session_user, current_user, 'member')
$$;

-- The checks of a page's size and content types, shared by search and home.
create or replace function groundkit._check_page(k integer, content_types text[])
returns void
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
declare
    bad text;
begin
    if k is null or k < 1 or k > 200 then
        raise exception 'k must be between 1 and 200 (got %)', coalesce(k::text, 'NULL')
            using errcode = 'GK005';
    end if;
    if content_types is not null then
        select x into bad from unnest(content_types) x
         where x is null or not exists (select 1 from groundkit.content_types t where t.name = x)
         limit 1;
        if found then
            raise exception 'unknown content_type % in content_types', coalesce(quote_literal(bad), 'NULL')
                using errcode = 'GK004';
        end if;
    end if;
end
$$;

-- The argument checks every search path shares.
create or replace function groundkit._search_check(query text, k integer, content_types text[])
returns void
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
begin
    if query is null then
        raise exception 'query must not be NULL' using errcode = 'GK005';
    end if;
    if length(query) > 4096 then
        raise exception 'query is % characters long; the limit is 4096', length(query)
            using errcode = 'GK005';
    end if;
    if (select count(*) from groundkit.query_terms(query)) > groundkit._max_terms() then
        raise exception 'query has % distinct terms; the limit is %',
            (select count(*) from groundkit.query_terms(query)), groundkit._max_terms()
            using errcode = 'GK005';
    end if;
    perform groundkit._check_page(k, content_types);
end
$$;

-- Exhaustive BM25: one aggregate over every posting of the query terms, the permission
-- predicate inside the join. The reference the pruned path is tested against
-- (tests/test_search_exact.py), and the path taken when the stored impacts were computed
-- with other BM25 parameters than groundkit.config's.
create or replace function groundkit._search_exhaustive(
    reader_sub text,
    query text,
    k integer default 10,
    content_types text[] default null,
    space_ids text[] default null)
returns table (chunk_id bigint, score double precision)
language plpgsql stable
set search_path = pg_catalog, pg_temp
-- (the pending part by key, whatever its size when this was planned: "_pending_dfs" below)
set enable_seqscan = off
as $$
#variable_conflict use_column
begin
    perform groundkit._search_check(_search_exhaustive.query, _search_exhaustive.k, _search_exhaustive.content_types);
    return query
    with reader as (
        select r.member_sub, r.rank from groundkit._reader(_search_exhaustive.reader_sub) r
    ),
    cfg as (
        select c.bm25_k1 as k1, c.bm25_b as b from groundkit.config c
    ),
    corpus as (
        select coalesce(sum(s.n_chunks), 0)::double precision as n,
               coalesce(sum(s.total_len), 0)::double precision as total_len
          from groundkit.scope_stats s, reader r
         where s.scope <= r.rank
    ),
    qterms as (
        select q.term, q.qtf,
               (coalesce((select sum(ts.df) from groundkit.term_stats ts, reader r
                           where ts.term = q.term and ts.scope <= r.rank), 0)
                + (select count(*) from groundkit.pending_postings pp, reader r
                    where pp.term = q.term and pp.stat_scope <= r.rank))::double precision as df
          from groundkit.query_terms(_search_exhaustive.query) q
    ),
    weights as (
        select q.term,
               q.qtf * groundkit._idf(cp.n, q.df) as w,
               case when cp.n > 0 and cp.total_len > 0 then cp.total_len / cp.n else 1 end as avgdl
          from qterms q, corpus cp
    ),
    scored as (
        select p.chunk_id,
               sum(groundkit._score_part(w.w, p.tf, c.doc_len, cfg.k1, cfg.b, w.avgdl)) as score
          from weights w
          join (select p.term, p.chunk_id, p.tf from groundkit.postings p
                union all
                select p.term, p.chunk_id, p.tf from groundkit.pending_postings p) p on p.term = w.term
          cross join reader r
          cross join cfg
          cross join lateral groundkit._visible_chunk(p.chunk_id, r.rank, r.member_sub,
                                                      _search_exhaustive.content_types,
                                                      _search_exhaustive.space_ids) c
         group by p.chunk_id
    )
    select sc.chunk_id, sc.score
      from scored sc
      join groundkit.chunks c on c.chunk_id = sc.chunk_id
     order by sc.score desc, c.object_id, c.chunk_seq
     limit _search_exhaustive.k;
end
$$;

-- The pending part (docs/bm25.md, "The pending part"). Its table grows from empty to tens of
-- thousands of rows between merges, and a plan cached while it was nearly empty scanned it
-- whole for every term: these functions never scan it sequentially, whatever its size was when
-- they were planned.
--
-- Each term's pending postings in the reader's buckets (p_buckets): how many count in the
-- statistics of a reader of rank p_rank, and whether there are any. Only the reader's buckets:
-- whether the pending part is scored, and how long that takes, must not depend on what the
-- reader may not see (a word only invisible pending content held was scored and timed apart
-- from an absent word). Every posting counted in the statistics is in a bucket of the reader
-- (a shared chunk's bucket is its scope's rank). One call a search (a call with a SET clause
-- costs tens of µs).
create or replace function groundkit._pending_dfs(p_terms text[], p_rank integer, p_buckets bigint[])
returns table (term text, df bigint, present boolean)
language sql stable
set search_path = pg_catalog, pg_temp
set enable_seqscan = off
-- One plan per session: custom plans (the generic one, with its unknown number of terms, looks
-- dearer) were made at every call, 35 against 12 µs a call; the plan probes the key either way.
set plan_cache_mode = force_generic_plan
as $$
    -- One probe of the key per term, whatever the plan thinks the table holds: a plan cached
    -- while the part was empty hashed all of it once it had grown (92 ms at 210,000 postings).
    select t.term, x.df, x.n > 0
      from unnest(p_terms) as t(term)
     cross join lateral (select count(*) filter (where pp.stat_scope <= p_rank) as df, count(*) as n
                           from groundkit.pending_postings pp
                          where pp.term = t.term and pp.vis_key = any (p_buckets)) x
$$;

-- The pending chunks' top k for a reader: every pending chunk holding a query term in the
-- reader's buckets scored whole (as the scan scores postings, with the same formula), the live
-- predicate checked best-first until k pass, then the visible ones at or above that score, in
-- the final order.
create or replace function groundkit._pending_top(
    p_terms text[], p_ws double precision[], p_buckets bigint[], p_k1 double precision,
    p_b double precision, p_avgdl double precision, p_rank integer, p_member text,
    p_content_types text[], p_space_ids text[], p_k integer)
returns table (chunk_id bigint, score double precision, object_id text, chunk_seq integer)
language sql stable
set search_path = pg_catalog, pg_temp
set enable_seqscan = off
as $$
    with scored as materialized (
        select pp.chunk_id,
               sum(groundkit._score_part(q.w, pp.tf, pp.doc_len, p_k1, p_b, p_avgdl)) as score
          from unnest(p_terms, p_ws) as q(term, w)
         -- offset 0: a subquery per term, read by its key (never the whole part hashed)
         cross join lateral (select p.chunk_id, p.tf, p.doc_len from groundkit.pending_postings p
                              where p.term = q.term and p.vis_key = any (p_buckets) offset 0) pp
         group by pp.chunk_id
    ),
    top as (
        select s.score
          from (select sc.chunk_id, sc.score from scored sc order by sc.score desc offset 0) s
         where exists (select 1 from groundkit._visible_chunk(s.chunk_id, p_rank, p_member,
                                                              p_content_types, p_space_ids))
         limit p_k
    ),
    -- materialized: once the session caches this function's plan (from its sixth call), an
    -- inlined theta ran again for every pending chunk (23 ms against 0.7 ms with 552 pending)
    theta as materialized (
        select case when count(*) < p_k then '-infinity'::double precision else min(t.score) end as t
          from top t
    )
    select s.chunk_id, s.score, v.object_id, v.chunk_seq
      from scored s
     cross join theta
     cross join lateral groundkit._visible_chunk(s.chunk_id, p_rank, p_member, p_content_types, p_space_ids) v
     where s.score >= theta.t
     order by s.score desc, v.object_id, v.chunk_seq
     limit p_k
$$;

-- A reader's tf-part from a posting's stored impact (docs/bm25.md, "The impact reference").
-- Impacts are stored at the reference length r (bm25_impact.avgdl_ref); a reader scores with its
-- own average length A. Where A <= r the reader's tf-part is at most the stored impact s. Where
-- A > r, with rho = r / A < 1, a posting of stored impact s = tf / (tf + K) has the tf-part
-- tf / (tf + k1 (1 - b) (1 - rho) + rho K), which grows with tf towards s / (rho + (1 - rho) s):
-- the bound _imp_ub gives (rho = 1 gives s). It replaced s / rho, which is 1 + (1 - rho) s / rho
-- times larger (at s = 0.5 and rho = 0.8, 1.125 times). _imp_cut(t, rho) is the least stored impact whose bound
-- reaches t: _imp_ub(s, rho) >= t exactly when s >= _imp_cut(t, rho) (infinity when no
-- impact's does). Both keep 1e-6 for float4 rounding, as the factor before them did. One
-- expression each with no SET clause, so that they are inlined; their callers pin search_path
-- and PUBLIC may not execute them (as _impact).
create or replace function groundkit._imp_ub(s double precision, rho double precision)
returns double precision
language sql immutable parallel safe
as $$
    select s / (rho + (1 - rho) * s) * (1 + 1e-6)
$$;

create or replace function groundkit._imp_cut(t double precision, rho double precision)
returns double precision
language sql immutable parallel safe
as $$
    select case when (1 - rho) * t < 1 + 1e-6
                then rho * t / ((1 + 1e-6) - (1 - rho) * t)
                else 'infinity'::double precision end
$$;
