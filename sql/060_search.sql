-- Permission-correct BM25 search. Replaceable.
--
-- One statement reads the reader's live tier and status, the spaces' live policy, the grants,
-- the BM25 statistics of the reader's scopes and the postings, so every part of the answer
-- comes from one snapshot. Visibility is a join predicate inside the ranking query; nothing
-- is filtered after top-k, so k rows come back whenever k visible chunks match.

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
-- sql/059_visible.sql, the one predicate) and it matches the query's filter (p_filter: its
-- phrases and exclusions, groundkit._parse_query; null: none), else no row. Every search path
-- joins it laterally per candidate chunk, inside its own ranking query, so a filter is checked
-- best-first with the permission (docs/bm25/analysis.md, "Query syntax").
--
-- Deliberately without `set search_path`: a SQL function with a SET clause is never inlined,
-- and inlined is what keeps this a plain join in the caller's plan (index lookups per chunk,
-- no function call per row). Every relation below is schema-qualified, it is called only from
-- functions that pin search_path = pg_catalog, pg_temp (the inlined body is planned under the
-- caller's setting), and nobody else may execute it (sql/090_roles.sql revokes PUBLIC).
create or replace function groundkit._visible_chunk(
    p_chunk_id bigint, p_rank integer, p_member text, p_content_types text[], p_space_ids text[],
    p_filter tsquery default null)
returns table (object_id text, chunk_seq integer, doc_len integer)
language sql stable
as $$
    select ch.object_id, ch.chunk_seq, ch.doc_len
      from groundkit.chunks ch
      join groundkit._visible_object(ch.object_id, p_rank, p_member, p_content_types, p_space_ids) o
        on o.version = ch.object_version
     where ch.chunk_id = p_chunk_id
       and (p_filter is null or ch.tsv @@ p_filter)
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
    -- (no limit on its terms: past groundkit._max_terms() a language's most informative are
    -- kept, groundkit._search_terms)
    if length(query) > groundkit._max_query_chars() then
        raise exception 'query is % characters long; the limit is %', length(query), groundkit._max_query_chars()
            using errcode = 'GK005';
    end if;
    perform groundkit._check_page(k, content_types);
end
$$;

-- The languages other than English that a space names or an object in a space names, anywhere
-- in the database (empty where none does: the common case, two index probes). Inlined (no SET
-- clause), as _reader_buckets.
create or replace function groundkit._languages_in_use()
returns text[]
language sql stable
as $$
    select coalesce(array_agg(x.language order by x.language), '{}')
      from (select s.language from groundkit.spaces s where s.language is not null
            union
            select l.language from groundkit.space_languages l where l.language <> 'english') x
$$;

-- The languages a reader's query is analyzed in: those of the spaces it searches (the spaces it
-- may see, narrowed by space_ids): each space's own and those its objects name
-- (groundkit.space_languages). English alone where no space or object names a language.
create or replace function groundkit._search_languages(p_rank integer, p_member text, p_space_ids text[])
returns text[]
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select coalesce(array_agg(x.language order by x.language <> 'english', x.language), array['english'])
      from (select coalesce(s.language, 'english') as language
              from groundkit._visible_space(p_rank, p_member) v
              join groundkit.spaces s on s.space_id = v.space_id
             where p_space_ids is null or s.space_id = any (p_space_ids)
            union
            select l.language
              from groundkit._visible_space(p_rank, p_member) v
              join groundkit.space_languages l on l.space_id = v.space_id
             where p_space_ids is null or v.space_id = any (p_space_ids)) x
$$;

-- A reader's visibility buckets (postings.vis_key, dense_entries.vis_key; docs/bm25/design.md,
-- "Postings"): the lists BM25 reads and the index entries dense search reads. Shared content of
-- ranks up to the reader's; the private spaces granted to the reader whose policy lets the
-- reader's tier in (a member moved to a lower tier keeps their grants, and the lists of a space
-- they may no longer see were read, and timed, as theirs); the reader's own notes. Only chooses
-- what is read; the live predicate still decides every row. Inlined where it is called (no
-- SET clause: a call of its own cost the planner tens of µs); every name is qualified, its
-- callers pin search_path, and PUBLIC may not execute it.
create or replace function groundkit._reader_buckets(p_rank integer, p_member text)
returns bigint[]
language sql stable
as $$
    select array(
        select t.rank::bigint from groundkit.tiers t where t.rank <= p_rank
        union
        select groundkit._vis_key(false, null, true, g.space_id, null)
          from groundkit.space_grants g join groundkit.spaces s on s.space_id = g.space_id
          join groundkit.tiers st on st.name = s.min_tier
         where g.member_sub = p_member and s.private and st.rank <= p_rank
        union
        select groundkit._vis_key(true, p_member, false, null, null))
$$;

-- A query's terms as search scores them, for a reader (docs/bm25/analysis.md): the query read
-- (groundkit._parse_query) in the languages of the spaces it searches, each term's document
-- frequency over the reader's scopes (term_stats and the pending part's chunks, which term_stats
-- counts once they are merged), whether any pending chunk in the reader's buckets holds it, and
-- its weight: qtf times its IDF, whose N is the number of chunks of the term's language the
-- reader may see (p_n, all of them, less the other languages' counts for English; a language's
-- count is its marker term's document frequency, groundkit._chunk_tsv). Past
-- groundkit._max_terms() terms in a language, the most informative are kept: the highest IDF
-- (the lowest document frequency, ties by the term) among the terms the reader's statistics
-- know, then terms they do not (document frequency 0: no shared content the reader may see
-- holds them, only private or owner-only content can, and a pasted paragraph's typos are
-- such terms). Only the reader's statistics decide which, and a NOTICE says so. Terms in
-- order; filter: the phrases and exclusions (null: none).
create or replace function groundkit._search_terms(
    p_query text, p_rank integer, p_member text, p_space_ids text[], p_buckets bigint[], p_n double precision,
    out terms text[], out ws double precision[], out dfs double precision[], out pend boolean,
    out filter tsquery)
language plpgsql stable
set search_path = pg_catalog, pg_temp
-- Generic plans: with custom ones (what auto kept choosing, the arrays' lengths unknown) every
-- call planned its statements again, 0.2-0.4 ms a search.
set plan_cache_mode = force_generic_plan
as $$
declare
    others text[] := groundkit._languages_in_use();
    langs text[];
    pq record;
    dropped text;
begin
    langs := case when cardinality(others) = 0 then array['english']
                  else groundkit._search_languages(p_rank, p_member, p_space_ids) end;
    if groundkit._query_has_syntax(p_query) then
        pq := groundkit._parse_query(p_query, langs);
        filter := pq.filter;
    elsif cardinality(others) = 0 then
        -- (a bag of words in English, the common case: analyzed here, inlined)
        select coalesce(array_agg(u.lexeme order by u.lexeme), '{}') as terms,
               coalesce(array_agg(coalesce(array_length(u.positions, 1), 1) order by u.lexeme), '{}') as qtfs
          into pq
          from unnest(groundkit._analyze(null, p_query)) u;
    else
        select coalesce(array_agg(x.term order by x.term), '{}') as terms,
               coalesce(array_agg(x.qtf order by x.term), '{}') as qtfs
          into pq
          from groundkit._bag_terms(p_query, langs) x;
    end if;
    if cardinality(pq.terms) = 0 then
        return;
    end if;
    if cardinality(others) = 0 and cardinality(pq.terms) <= groundkit._max_terms() then
        -- English alone, within the bound: each term's weight from its scoped document
        -- frequency and N, as before there were languages (one statement of the planner's)
        select array_agg(q.term order by q.term), array_agg(q.qtf * groundkit._idf(p_n, q.df) order by q.term),
               array_agg(q.df order by q.term), coalesce(bool_or(q.pend), false)
          into terms, ws, dfs, pend
          from (select q.term, q.qtf,
                       (coalesce((select sum(ts.df) from groundkit.term_stats ts
                                   where ts.term = q.term and ts.scope <= p_rank), 0)
                        + pd.df)::double precision as df,
                       pd.present as pend
                  from unnest(pq.terms, pq.qtfs) as q(term, qtf)
                  join groundkit._pending_dfs(pq.terms, p_rank, p_buckets) pd on pd.term = q.term) q;
        return;
    end if;
    with qt as materialized (
        select u.term, u.qtf from unnest(pq.terms, pq.qtfs) as u(term, qtf)
        union all
        -- the other languages' markers, whose document frequencies are their chunk counts
        select m.language || '|', 0 from unnest(others) as m(language)
    ),
    d as materialized (
        select q.term, q.qtf, groundkit._term_language(q.term) as language,
               (coalesce((select sum(ts.df) from groundkit.term_stats ts
                           where ts.term = q.term and ts.scope <= p_rank), 0)
                + pd.df)::double precision as df,
               pd.present as pend
          from qt q
          join groundkit._pending_dfs((select array_agg(x.term) from qt x), p_rank, p_buckets) pd
            on pd.term = q.term
    ),
    n as (
        select m.language, m.n
          from (select groundkit._term_language(d.term) as language, d.df as n from d where d.qtf = 0) m
        union all
        select 'english', p_n - coalesce((select sum(d.df) from d where d.qtf = 0), 0)
    ),
    ranked as (
        select d.*, row_number() over (partition by d.language order by d.df = 0, d.df, d.term) as r,
               count(*) over (partition by d.language) as total
          from d where d.qtf > 0
    )
    select array_agg(x.term order by x.term) filter (where x.r <= groundkit._max_terms()),
           array_agg(x.qtf * groundkit._idf(greatest(coalesce(n.n, 0), 0), x.df) order by x.term)
               filter (where x.r <= groundkit._max_terms()),
           array_agg(x.df order by x.term) filter (where x.r <= groundkit._max_terms()),
           coalesce(bool_or(x.pend) filter (where x.r <= groundkit._max_terms()), false),
           string_agg(distinct format('%s distinct terms in %s', x.total, x.language), ', ')
               filter (where x.total > groundkit._max_terms())
      into terms, ws, dfs, pend, dropped
      from ranked x
      left join n on n.language = x.language;
    if dropped is not null then
        raise notice 'groundkit: the query has %; search kept the % of each language with the highest IDF',
            dropped, groundkit._max_terms()
            using hint = 'docs/bm25/analysis.md, "Long questions"';
    end if;
end
$$;

-- A query's filter for a reader (its phrases and exclusions in the languages of the spaces it
-- searches, groundkit._parse_query), or null: none, or no such reader (who gets no rows anyway).
-- The dense leg's (sql/087_dense_search.pgvector.sql), whose words do not rank.
create or replace function groundkit._query_filter(p_reader_sub text, p_query text, p_space_ids text[])
returns tsquery
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
declare
    v_member text;
    v_rank integer;
begin
    if p_query is null or not groundkit._query_has_syntax(p_query) then
        return null;
    end if;
    select r.member_sub, r.rank into v_member, v_rank from groundkit._reader(p_reader_sub) r;
    if v_member is null then
        return null;
    end if;
    return (groundkit._parse_query(p_query,
                                   case when cardinality(groundkit._languages_in_use()) = 0 then array['english']
                                        else groundkit._search_languages(v_rank, v_member, p_space_ids) end)).filter;
end
$$;

-- Exhaustive BM25: one aggregate over every posting of the query terms, the permission
-- predicate (and the query's filter) inside the join. The reference the pruned path is tested
-- against (tests/test_search_exact.py), and the path taken when the stored impacts were computed
-- with other BM25 parameters than groundkit.config's. The terms and weights are search's
-- (groundkit._search_terms).
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
declare
    v_member text;
    v_rank integer;
    v_n double precision;
    v_total double precision;
    st record;
begin
    perform groundkit._search_check(_search_exhaustive.query, _search_exhaustive.k, _search_exhaustive.content_types);
    select r.member_sub, r.rank into v_member, v_rank from groundkit._reader(_search_exhaustive.reader_sub) r;
    if v_member is null then
        return;
    end if;
    select coalesce(sum(s.n_chunks), 0), coalesce(sum(s.total_len), 0) into v_n, v_total
      from groundkit.scope_stats s where s.scope <= v_rank;
    st := groundkit._search_terms(_search_exhaustive.query, v_rank, v_member, _search_exhaustive.space_ids,
                                  groundkit._reader_buckets(v_rank, v_member), v_n);
    return query
    with cfg as (
        select c.bm25_k1 as k1, c.bm25_b as b from groundkit.config c
    ),
    weights as (
        select u.term, u.w, case when v_n > 0 and v_total > 0 then v_total / v_n else 1 end as avgdl
          from unnest(st.terms, st.ws) as u(term, w)
    ),
    scored as (
        select p.chunk_id,
               sum(groundkit._score_part(w.w, p.tf, c.doc_len, cfg.k1, cfg.b, w.avgdl)) as score
          from weights w
          join (select p.term, p.chunk_id, p.tf from groundkit.postings p
                union all
                select p.term, p.chunk_id, p.tf from groundkit.pending_postings p) p on p.term = w.term
          cross join cfg
          cross join lateral groundkit._visible_chunk(p.chunk_id, v_rank, v_member,
                                                      _search_exhaustive.content_types,
                                                      _search_exhaustive.space_ids, st.filter) c
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
-- predicate and the query's filter checked best-first until k pass, then the visible ones at or above that score, in
-- the final order.
create or replace function groundkit._pending_top(
    p_terms text[], p_ws double precision[], p_buckets bigint[], p_k1 double precision,
    p_b double precision, p_avgdl double precision, p_rank integer, p_member text,
    p_content_types text[], p_space_ids text[], p_k integer, p_filter tsquery default null)
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
                                                              p_content_types, p_space_ids, p_filter))
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
     cross join lateral groundkit._visible_chunk(s.chunk_id, p_rank, p_member, p_content_types, p_space_ids,
                                                 p_filter) v
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
