-- Permission-correct BM25 search: the planner and the public function. Replaceable.
--
-- groundkit.search calls groundkit._search_pruned, the planner: it resolves the reader, the BM25
-- statistics of the reader's scopes and the query terms' weights, scores the pending part, and
-- picks one of three exact strategies by their expected speed (docs/bm25.md, "Three
-- strategies"):
--   the scan            (sql/061_search_scan.sql)       short lists, two or more terms;
--   the pruned rounds   (sql/062_search_rounds.sql)     one term;
--   the threshold rounds (sql/064_search_threshold.sql)  two or more terms over long lists.
-- The exhaustive aggregate (sql/060_search.sql) answers instead when the stored impacts were
-- computed with other BM25 parameters than groundkit.config's. Every strategy returns the
-- postings' top k; the planner merges it with the pending part's.
-- Any strategy's answer is exact; the choice is speed only.
--
-- strategy (tests and benchmarks) forces one: 'scan', 'rounds', 'threshold' ('shares', 'merge',
-- 'pieces': the threshold rounds forcing one way to read every round). Without it, start_depth 0
-- forces the scan and a positive start_depth the pruned rounds, starting that deep; with the
-- threshold rounds it is how deep the first lower bound reads (0: none).
create or replace function groundkit._search_pruned(
    reader_sub text,
    query text,
    k integer default 10,
    content_types text[] default null,
    space_ids text[] default null,
    start_depth integer default null,
    strategy text default null)
returns table (chunk_id bigint, score double precision)
language plpgsql stable
rows 10
set search_path = pg_catalog, pg_temp
set plan_cache_mode = auto
as $$
#variable_conflict use_column
declare
    v_member text;
    v_rank integer;
    v_n double precision;
    v_total double precision;
    v_avgdl double precision;
    v_k1 double precision;
    v_b double precision;
    ip groundkit.bm25_impact;
    terms text[];
    ws double precision[];
    dfs double precision[];
    buckets bigint[];
    rho double precision;
    v_strategy text;
    st record;
    v_filter tsquery;
    -- the pending part's top k (null when it holds none of the terms), in the final order
    pend_ids bigint[];
    pend_scores double precision[];
    pend_obj text[];
    pend_seq integer[];
    has_pend boolean;
    -- the strategy's top k, in the final order
    r_ids bigint[];
    r_scores double precision[];
    r_obj text[];
    r_seq integer[];
begin
    perform groundkit._search_check(_search_pruned.query, _search_pruned.k, _search_pruned.content_types);
    if _search_pruned.strategy is not null
       and _search_pruned.strategy not in ('scan', 'threshold', 'shares', 'merge', 'pieces', 'rounds') then
        raise exception 'strategy must be scan, threshold, shares, merge, pieces or rounds (got %)', quote_literal(_search_pruned.strategy)
            using errcode = 'GK005';
    end if;
    -- fail closed: no reader row, no results
    select r.member_sub, r.rank into v_member, v_rank from groundkit._reader(_search_pruned.reader_sub) r;
    if v_member is null then
        return;
    end if;

    select c.bm25_k1, c.bm25_b into v_k1, v_b from groundkit.config c;
    select * into ip from groundkit.bm25_impact;
    if ip.k1 is distinct from v_k1 or ip.b is distinct from v_b then
        return query select * from groundkit._search_exhaustive(
            _search_pruned.reader_sub, _search_pruned.query, _search_pruned.k,
            _search_pruned.content_types, _search_pruned.space_ids);
        return;
    end if;

    -- The reader's buckets: the lists search reads (groundkit._reader_buckets).
    buckets := groundkit._reader_buckets(v_rank, v_member);
    select coalesce(sum(s.n_chunks), 0), coalesce(sum(s.total_len), 0) into v_n, v_total
      from groundkit.scope_stats s where s.scope <= v_rank;
    v_avgdl := case when v_n > 0 and v_total > 0 then v_total / v_n else 1 end;
    -- The query's terms, weights and document frequencies for this reader, and its filter
    -- (phrases, exclusions): groundkit._search_terms, docs/bm25/analysis.md.
    st := groundkit._search_terms(_search_pruned.query, v_rank, v_member, _search_pruned.space_ids, buckets, v_n);
    terms := st.terms;
    ws := st.ws;
    dfs := st.dfs;
    has_pend := st.pend;
    v_filter := st.filter;
    if terms is null then
        return;
    end if;
    -- The impacts were computed with avgdl_ref; a reader whose average length is larger gets
    -- larger tf-parts, bounded through rho (groundkit._imp_ub, _imp_cut; docs/bm25.md, "The
    -- impact reference"). While a recompute in steps is under way, some postings are still at
    -- an older reference, down to avgdl_ref_min: the bound only widens as rho falls, so the
    -- smallest one bounds them all ("Recomputing the impacts in steps").
    rho := least(1.0, least(ip.avgdl_ref, coalesce(ip.avgdl_ref_min, ip.avgdl_ref)) / v_avgdl);

    -- The pending part (chunks written one at a time, not merged yet; docs/bm25.md, "The
    -- pending part"): scored whole, as the scan scores postings, its top k kept aside and
    -- merged with the postings' top k at the end. The strategies below read postings only.
    if has_pend then
        select array_agg(z.chunk_id order by z.score desc, z.object_id, z.chunk_seq),
               array_agg(z.score order by z.score desc, z.object_id, z.chunk_seq),
               array_agg(z.object_id order by z.score desc, z.object_id, z.chunk_seq),
               array_agg(z.chunk_seq order by z.score desc, z.object_id, z.chunk_seq)
          into pend_ids, pend_scores, pend_obj, pend_seq
          from groundkit._pending_top(terms, ws, buckets, v_k1, v_b, v_avgdl, v_rank, v_member,
                                      _search_pruned.content_types, _search_pruned.space_ids,
                                      _search_pruned.k, v_filter) z;
        if groundkit._debug_allowed() then
            raise debug 'groundkit pruned: % pending chunks in the top k of the pending part', cardinality(pend_ids);
        end if;
    end if;

    -- Which strategy (speed only: all three are exact). One term: the pruned rounds (k postings
    -- deep is usually enough, however long the list). Several terms: the scan when the reader's
    -- lists are short (groundkit._scan_max), where one aggregate over them costs less than any
    -- bookkeeping; otherwise the threshold rounds.
    v_strategy := coalesce(
        case when _search_pruned.strategy in ('shares', 'merge', 'pieces') then 'threshold' else _search_pruned.strategy end,
        case when _search_pruned.start_depth = 0 then 'scan'
             when _search_pruned.start_depth > 0 then 'rounds' end,
        case when cardinality(terms) = 1 then 'rounds'
             when (select sum(d) from unnest(dfs) as d) <= groundkit._scan_max(cardinality(terms))
                  then 'scan'
             else 'threshold' end);
    -- The chosen strategy's top k, in its order (object_id, chunk_seq break ties), then merged
    -- with the pending part's.
    if v_strategy = 'scan' then
        if groundkit._debug_allowed() then
            raise debug 'groundkit pruned: scan of % postings', (select sum(d) from unnest(dfs) as d);
        end if;
        select array_agg(s.chunk_id order by s.score desc, s.object_id, s.chunk_seq),
               array_agg(s.score order by s.score desc, s.object_id, s.chunk_seq),
               array_agg(s.object_id order by s.score desc, s.object_id, s.chunk_seq),
               array_agg(s.chunk_seq order by s.score desc, s.object_id, s.chunk_seq)
          into r_ids, r_scores, r_obj, r_seq
          from groundkit._search_scan(terms, ws, buckets, v_k1, v_b, v_avgdl, v_rank, v_member,
                                      _search_pruned.content_types, _search_pruned.space_ids,
                                      _search_pruned.k, v_filter) s;
    elsif v_strategy = 'rounds' then
        select array_agg(s.chunk_id order by s.score desc, s.object_id, s.chunk_seq),
               array_agg(s.score order by s.score desc, s.object_id, s.chunk_seq),
               array_agg(s.object_id order by s.score desc, s.object_id, s.chunk_seq),
               array_agg(s.chunk_seq order by s.score desc, s.object_id, s.chunk_seq)
          into r_ids, r_scores, r_obj, r_seq
          from groundkit._search_rounds(terms, ws, buckets, v_k1, v_b, v_avgdl, rho, v_rank, v_member,
                                        _search_pruned.content_types, _search_pruned.space_ids,
                                        _search_pruned.k, _search_pruned.start_depth, v_filter) s;
    else
        select array_agg(s.chunk_id order by s.score desc, s.object_id, s.chunk_seq),
               array_agg(s.score order by s.score desc, s.object_id, s.chunk_seq),
               array_agg(s.object_id order by s.score desc, s.object_id, s.chunk_seq),
               array_agg(s.chunk_seq order by s.score desc, s.object_id, s.chunk_seq)
          into r_ids, r_scores, r_obj, r_seq
          from groundkit._search_threshold(_search_pruned.reader_sub, terms, ws, dfs, buckets, v_k1, v_b,
                                           v_avgdl, v_n, rho, v_rank, v_member,
                                           _search_pruned.content_types, _search_pruned.space_ids,
                                           _search_pruned.k, _search_pruned.start_depth,
                                           _search_pruned.strategy, v_filter) s;
    end if;
    if pend_ids is null then
        return query select u.id, u.score from unnest(r_ids, r_scores) as u(id, score);
        return;
    end if;
    return query
    select z.id, z.score
      from (select u.id, u.score, u.object_id, u.chunk_seq
              from unnest(r_ids, r_scores, r_obj, r_seq) as u(id, score, object_id, chunk_seq)
            union all
            select p.id, p.score, p.object_id, p.chunk_seq
              from unnest(pend_ids, pend_scores, pend_obj, pend_seq) as p(id, score, object_id, chunk_seq)) z
     order by z.score desc, z.object_id, z.chunk_seq
     limit _search_pruned.k;
end
$$;

-- The public search: the planner's top k with each hit's citation (where the chunk lies in its
-- object, its headings, its thread, its chunker) and its snippet (sql/066_snippet.sql), between
-- snippet_start and snippet_end. docs/sql-api.md, "Citations". Its rows are groundkit.search_hit
-- (revision 0032), the type every search function returns; bm25_rank and dense_rank are null here.
create or replace function groundkit.search(
    reader_sub text,
    query text,
    k integer default 10,
    content_types text[] default null,
    space_ids text[] default null,
    snippet_start text default '<mark>',
    snippet_end text default '</mark>')
returns setof groundkit.search_hit
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
declare
    q tsquery;
begin
    perform groundkit._reader_allowed(search.reader_sub);  -- GK010 for a bound login's other readers
    perform groundkit._snippet_check(search.snippet_start, search.snippet_end);
    -- once a search, not once a hit
    q := groundkit._query_tsquery(search.query);
    return query
    select c.object_id, c.object_version, c.chunk_seq, o.content_type, o.space_id, o.title,
           c.content, r.score, c.start_ms, c.end_ms, c.char_start, c.char_end, c.heading_path,
           t.thread_id, t.thread_title, c.chunker,
           groundkit._snippet(c.content,
                              case when c.language is null then q
                                   else groundkit._query_tsquery(search.query, c.language) end,
                              search.snippet_start, search.snippet_end, c.language),
           null::integer, null::integer  -- bm25_rank, dense_rank: hybrid's
      from groundkit._search_pruned(search.reader_sub, search.query, search.k,
                                    search.content_types, search.space_ids) r
      join groundkit.chunks c on c.chunk_id = r.chunk_id
      join groundkit.objects o on o.object_id = c.object_id
     cross join lateral groundkit._thread_of(o.content_type, o.object_id, o.title, o.metadata) t
     order by r.score desc, c.object_id, c.chunk_seq;
end
$$;
