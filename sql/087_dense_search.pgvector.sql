-- Dense and hybrid search. Replaceable; applied by migrate only where pgvector is installed (the
-- signatures name its `vector` type); elsewhere 087_dense_search.stubs.sql raises GK008.
-- docs/dense.md.

-- The stubs, if a migrate without pgvector left them: an untyped literal would resolve to them.
drop function if exists groundkit.search_dense(text, text, integer, text[], text[], boolean);
drop function if exists groundkit.search_hybrid(text, text, text, integer, text[], text[], text, integer,
                                                double precision, double precision, integer, boolean, text, text);
-- (and the first signature of search_hybrid, whose weights were real)
drop function if exists groundkit.search_hybrid(text, text, vector, integer, text[], text[], text, integer, real,
                                                real, integer, boolean, text, text);

-- The signatures below name `vector` as migrate's search_path finds it; pgvector may live in any
-- schema. (The bodies name its operators through groundkit._vector_schema().)
-- (restored at the end of this file)
select pg_catalog.set_config('groundkit.migrate_search_path', pg_catalog.current_setting('search_path'), true);
select pg_catalog.set_config('search_path',
                             pg_catalog.quote_ident(groundkit._vector_schema()) || ', pg_catalog, pg_temp', true);

-- (the signatures before the query's filter, revision 0030: docs/bm25/analysis.md)
drop function if exists groundkit._search_dense_ids(text, vector, integer, text[], text[], boolean);
drop function if exists groundkit.search_dense(text, vector, integer, text[], text[], boolean);

-- How many chunks a reader's visible set may hold for the exact scan to answer without the
-- index (docs/dense.md, "Exact or index": the cross-over measured by `python -m evals.bench dense`).
-- A session may set groundkit.dense_exact_max (the benchmark does, to measure each scan at every
-- visible fraction): it changes which exact-complete path answers, never the answer's rows.
create or replace function groundkit._dense_exact_max()
returns bigint
language sql stable
as $$
    select coalesce(nullif(pg_catalog.current_setting('groundkit.dense_exact_max', true), '')::bigint, 2000)
$$;

-- The active model, if query_embedding fits it: GK015 when no model is active, GK005 for an
-- embedding of another dimension. Called before any plan could skip the leg (an empty join).
create or replace function groundkit._dense_check(query_embedding vector)
returns groundkit.embedding_models
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
declare
    m groundkit.embedding_models;
begin
    perform groundkit._require_pgvector();
    m := groundkit._dense_model(null);
    if query_embedding is null then
        raise exception 'query_embedding must not be NULL' using errcode = 'GK005';
    end if;
    if cardinality(query_embedding::real[]) <> m.dimension then
        raise exception 'query_embedding has dimension %, the active model % has dimension %',
            cardinality(query_embedding::real[]), quote_literal(m.name), m.dimension using errcode = 'GK005';
    end if;
    return m;
end
$$;

-- The dense leg: the reader's top k current chunks by the active model's distance to the query
-- embedding, each with its score, ties broken by object id and chunk seq. Scores are search's:
-- never negative, higher nearer. Cosine: (1 + cosine similarity) / 2 = 1 - distance / 2, in
-- [0, 1]; l2: 1 / (1 + distance), in (0, 1]; inner product: its logistic sigmoid, in (0, 1).
-- Each is monotone in the distance, so the order is the distance's. Exact whenever the reader's
-- visible set is small or `exact` asks; otherwise a scan of the dense index's entries in the
-- reader's buckets alone (docs/dense.md, "Buckets"): an iterative HNSW scan (pgvector 0.8) of
-- each bucket whose index is built, every entry of the others, merged; finished by the exact
-- scan when they yield fewer than k visible rows. The permission predicate (_visible_space,
-- _visible_object, as BM25's) is inside each query, and so is the query's filter (p_filter: its
-- phrases and exclusions, groundkit._query_filter; null: none), checked with it: k rows whenever
-- k visible chunks match.
create or replace function groundkit._search_dense_ids(
    reader_sub text,
    query_embedding vector,
    k integer,
    content_types text[],
    space_ids text[],
    exact boolean,
    p_filter tsquery default null)
returns table (chunk_id bigint, score double precision)
language plpgsql volatile
set search_path = pg_catalog, pg_temp
-- the index scan's settings, restored when the function returns (set_config below too)
set hnsw.iterative_scan = 'relaxed_order'
set hnsw.ef_search = 100
set hnsw.max_scan_tuples = 20000
-- Its statements' generic plans (cached from a session's sixth call) cannot see which buckets
-- or which model they read, and read dense_entries whole to learn that a bucket is empty (77 ms
-- at 30,000 entries); custom plans cost a fraction of a millisecond to make here.
set plan_cache_mode = force_custom_plan
as $$
#variable_conflict use_column
declare
    vs text := groundkit._require_pgvector();
    m groundkit.embedding_models;
    v_member text;
    v_rank integer;
    col text;
    op text;
    vec text;
    dist text;
    score_expr text;
    visible bigint;
    use_index boolean;
    large bigint[];
    buckets bigint[];
    indexed bigint[];
    light bigint[];
    heavy text;
    whole bigint[];
    branch text;
    parts text[];
    ids bigint[];
    scores double precision[];
begin
    perform groundkit._check_page(k, content_types);
    m := groundkit._dense_check(query_embedding);
    -- fail closed: no reader row, no results
    select r.member_sub, r.rank into v_member, v_rank from groundkit._reader(_search_dense_ids.reader_sub) r;
    if v_member is null then
        return;
    end if;
    col := groundkit._recipe_column(m.recipe);
    op := case m.distance when 'cosine' then '<=>' when 'l2' then '<->' else '<#>' end;
    vec := format('%I.vector(%s)', vs, m.dimension);
    -- the expression of the buckets' HNSW indexes (groundkit.dense.build_hnsw_indexes), to the letter
    dist := format('(e.embedding::%s) operator(%I.%s) $1', vec, vs, op);
    -- (z.d is the distance; <#> is the negative inner product, and exp's argument is capped so
    -- that a huge distance gives 0, not an overflow error)
    score_expr := case m.distance
        when 'cosine' then 'greatest(0, 1 - z.d / 2)'
        when 'l2' then '1 / (1 + z.d)'
        else '1 / (1 + exp(least(z.d, 700)))' end;

    use_index := not coalesce(exact, false);
    if use_index then
        -- The reader's visible set, as its buckets count it: the shared chunks of the scopes up
        -- to its rank (scope_stats, kept with every write; private spaces and owner-only notes
        -- are not counted there, and are taken to be few). A filter may narrow a large set: then
        -- it is counted, up to the cross-over.
        select coalesce(sum(s.n), 0),
               coalesce(array_agg(s.scope::bigint) filter (where s.n >= groundkit._hnsw_min_entries()), '{}')
          into visible, large
          from (select s.scope, sum(s.n_chunks) as n
                  from groundkit.scope_stats s where s.scope <= v_rank group by s.scope) s;
        if (content_types is not null or space_ids is not null) and visible > groundkit._dense_exact_max() then
            select count(*) into visible
              from (select 1
                      from groundkit._visible_space(v_rank, v_member) sp
                      join groundkit.tiers ot on ot.rank <= v_rank
                      join groundkit.objects o on o.space_id = sp.space_id and o.tier_visibility = ot.name
                     cross join lateral groundkit._visible_object(o.object_id, v_rank, v_member,
                                                                  content_types, space_ids) v
                      join groundkit.chunks c on c.object_id = v.object_id and c.object_version = v.version
                     where space_ids is null or sp.space_id = any (space_ids)
                     limit groundkit._dense_exact_max() + 1) x;
        end if;
        use_index := visible > groundkit._dense_exact_max();
    end if;

    if use_index then
        -- Only the reader's buckets are read, so the work depends on what the reader may see,
        -- never on invisible chunks near the query. A bucket whose HNSW index is built gets a
        -- scan of its own (the predicate `vis_key = <bucket>` is the partial index's, so the
        -- planner can use it); the others are read whole, together (each is small: its index
        -- is due at _hnsw_min_entries()).
        buckets := groundkit._reader_buckets(v_rank, v_member);
        select coalesce(array_agg(b.bucket order by b.bucket) filter (where b.valid), '{}'),
               coalesce(array_agg(b.bucket order by b.bucket) filter (where not b.valid), '{}')
          into indexed, whole
          from (select u.bucket, coalesce(x.indisvalid, false) as valid
                  from unnest(buckets) as u(bucket)
                  left join pg_catalog.pg_class c
                    on c.relname = groundkit._hnsw_index_name(m.name, u.bucket)
                   and c.relnamespace = 'groundkit'::regnamespace
                  left join pg_catalog.pg_index x on x.indexrelid = c.oid) b;
        -- A large shared bucket whose index is not built yet (a new model, or just after the
        -- upgrade to revision 0028, until the worker builds it) would be read whole: the exact
        -- scan answers meanwhile.
        use_index := large <@ indexed;
    end if;

    if use_index then
        perform set_config('hnsw.ef_search', greatest(100, 2 * k)::text, true);
        -- One branch per bucket with a valid index (relaxed order: its rows come nearly sorted),
        -- one reading the other buckets whole, one reading the indexed buckets' pending entries;
        -- each keeps its k nearest, the permission predicate is joined to every row they keep,
        -- and the rows are sorted exactly.
        --
        -- A shared bucket of a rank up to the reader's holds only chunks the reader may see (its
        -- rank is their scope: tier and minimum tier within the reader's rank, not private, not
        -- owner-only, current), so without a filter its branch is the index scan alone (1 ms of
        -- planning and execution against 7 for three such buckets, measured under load). The
        -- others (a private space's bucket holds all its tiers; the reader's own notes; any
        -- bucket under a content_types or space_ids filter or a query's phrases and exclusions)
        -- join the predicate inside the scan, so an iterative scan goes on until k visible rows
        -- came (or max_scan_tuples). Should the predicate drop a row the branches kept, fewer
        -- than k come, and the exact scan answers.
        light := case when content_types is null and space_ids is null and p_filter is null
                      then array(select u.b from unnest(indexed) as u(b)
                                  where u.b in (select t.rank from groundkit.tiers t where t.rank <= v_rank))
                      else '{}' end;
        branch := '(select e.chunk_id, ' || dist || ' as d
                      from groundkit.dense_entries e<join>
                     where e.model = ' || quote_literal(m.name) || ' and <bucket>
                     order by ' || dist || '
                     limit $6)';
        heavy := replace(branch, '<join>',
                         ' cross join lateral groundkit._visible_chunk(e.chunk_id, $2, $3, $4, $5, $9) v');
        parts := array(select replace(replace(branch, '<join>', ''), '<bucket>',
                                      'e.vis_key = ' || quote_literal(u.b::text) || '::bigint and not e.pending')
                         from unnest(light) as u(b))
                 || array(select replace(heavy, '<bucket>',
                                         'e.vis_key = ' || quote_literal(u.b::text) || '::bigint and not e.pending')
                            from unnest(indexed) as u(b) where u.b <> all (light));
        -- (most readers' own-notes bucket is empty, and most of the time nothing is pending: no
        -- branch to plan for them)
        if exists (select 1 from groundkit.dense_entries e where e.model = m.name and e.vis_key = any (whole)) then
            parts := parts || replace(heavy, '<bucket>', 'e.vis_key = any ($7)');
        end if;
        -- entries writers filed or moved into an indexed bucket, not merged into its index yet
        if exists (select 1 from groundkit.dense_entries e
                    where e.model = m.name and e.vis_key = any (indexed) and e.pending) then
            parts := parts || replace(heavy, '<bucket>', 'e.vis_key = any ($8) and e.pending');
        end if;
        if cardinality(parts) > 0 then
            execute format(
                'select array_agg(z.chunk_id order by z.d, z.object_id, z.chunk_seq),
                        array_agg(%s order by z.d, z.object_id, z.chunk_seq)
                   from (select y.chunk_id, v.object_id, v.chunk_seq, y.d
                           from (%s) y
                          cross join lateral groundkit._visible_chunk(y.chunk_id, $2, $3, $4, $5, $9) v
                          order by y.d, v.object_id, v.chunk_seq
                          limit $6) z',
                score_expr, array_to_string(parts, ' union all '))
               into ids, scores
              using query_embedding, v_rank, v_member, content_types, space_ids, k, whole, indexed, p_filter;
        end if;
        if groundkit._debug_allowed() then
            raise debug 'groundkit dense: index scan, % of % rows', coalesce(cardinality(ids), 0), k;
            raise debug 'groundkit dense buckets: % by HNSW, % read whole', cardinality(indexed), cardinality(whole);
        end if;
        if coalesce(cardinality(ids), 0) >= k then
            return query select u.id, u.score from unnest(ids, scores) as u(id, score);
            return;
        end if;
    end if;
    if groundkit._debug_allowed() then
        raise debug 'groundkit dense: exact scan';
    end if;

    -- The exact scan over the reader's visible set: every visible embedded chunk's distance. The
    -- objects are reached by space and tier (objects_space_tier_idx), so a reader who sees one
    -- tier of a large space reads that tier's objects only; _visible_object decides each one.
    return query execute format(
        'select z.chunk_id, %s
           from (select c.chunk_id, c.object_id, c.chunk_seq, %s as d
                   from groundkit._visible_space($2, $3) sp
                   join groundkit.tiers ot on ot.rank <= $2
                   join groundkit.objects o on o.space_id = sp.space_id and o.tier_visibility = ot.name
                  cross join lateral groundkit._visible_object(o.object_id, $2, $3, $4, $5) v
                   join groundkit.chunks c on c.object_id = v.object_id and c.object_version = v.version
                   join groundkit.embeddings e on e.model = %L and e.content_hash = c.%I
                  where ($5 is null or sp.space_id = any ($5))
                    and ($7 is null or c.tsv @@ $7)
                  order by 4, c.object_id, c.chunk_seq
                  limit $6) z
          order by z.d, z.object_id, z.chunk_seq',
        score_expr, dist, m.name, col)
        using query_embedding, v_rank, v_member, content_types, space_ids, k, p_filter;
end
$$;

-- The public dense search: the dense leg's top k with search's columns (sql/069_search.sql). With
-- the query's text (query), only chunks that match its phrases and exclusions
-- (docs/bm25/analysis.md, "Query syntax"); its words do not rank here.
-- The snippet is the chunk's first words, as search's for a chunk without a match: there are no
-- query terms to mark, and the tsquery below holds one lexeme no text has (a control character,
-- which the parser never keeps; an empty tsquery would raise a NOTICE per hit).
create or replace function groundkit.search_dense(
    reader_sub text,
    query_embedding vector,
    k integer default 10,
    content_types text[] default null,
    space_ids text[] default null,
    exact boolean default false,
    query text default null)
returns setof groundkit.search_hit
language plpgsql volatile
set search_path = pg_catalog, pg_temp
as $$
declare
    ids bigint[];
    scores double precision[];
begin
    perform groundkit._reader_allowed(search_dense.reader_sub);  -- GK010 for a bound login's other readers
    if search_dense.query is not null then
        perform groundkit._search_check(search_dense.query, search_dense.k, search_dense.content_types);
    end if;
    select array_agg(r.chunk_id order by r.n), array_agg(r.score order by r.n) into ids, scores
      from groundkit._search_dense_ids(search_dense.reader_sub, search_dense.query_embedding, search_dense.k,
                                       search_dense.content_types, search_dense.space_ids,
                                       search_dense.exact,
                                       groundkit._query_filter(search_dense.reader_sub, search_dense.query,
                                                               search_dense.space_ids))
           with ordinality as r(chunk_id, score, n);
    return query
    select c.object_id, c.object_version, c.chunk_seq, o.content_type, o.space_id, o.title,
           c.content, r.score, c.start_ms, c.end_ms, c.char_start, c.char_end, c.heading_path,
           t.thread_id, t.thread_title, c.chunker,
           groundkit._snippet(c.content, E'''\x05'''::tsquery, '<mark>', '</mark>'),
           null::integer, null::integer  -- bm25_rank, dense_rank: hybrid's
      from unnest(ids, scores) with ordinality as r(chunk_id, score, n)
      join groundkit.chunks c on c.chunk_id = r.chunk_id
      join groundkit.objects o on o.object_id = c.object_id
     cross join lateral groundkit._thread_of(o.content_type, o.object_id, o.title, o.metadata) t
     order by r.n;
end
$$;

-- Hybrid search: BM25's top `depth` (groundkit._search_pruned, exact) and the dense leg's top
-- `depth`, fused in SQL, the top k with search's columns and each leg's rank (null when the
-- chunk is not in that leg's top depth). fusion 'rrf': sum over the legs of weight / (rrf_k +
-- rank); 'score': sum of weight * the leg's score scaled to [0, 1] over its own top depth
-- (min-max; a leg whose scores are all equal scales to 1; a chunk not in a leg's top depth gets
-- 0 from it). match_gate: a chunk only the dense leg found must match a query term. Both legs
-- apply the permission predicate inside, and the query's phrases and exclusions
-- (docs/bm25/analysis.md) with it.
-- The defaults (rrf, rrf_k 20, equal weights, depth 100, no gate) are the quality eval's choice
-- on SciFact and NFCorpus (docs/journal/2026-12-04-fusion.md, python -m evals.bench fusion).
create or replace function groundkit.search_hybrid(
    reader_sub text,
    query text,
    query_embedding vector,
    k integer default 10,
    content_types text[] default null,
    space_ids text[] default null,
    fusion text default 'rrf',
    rrf_k integer default 20,
    bm25_weight double precision default 1,
    dense_weight double precision default 1,
    depth integer default 100,
    match_gate boolean default false,
    snippet_start text default '<mark>',
    snippet_end text default '</mark>')
returns setof groundkit.search_hit
language plpgsql volatile
set search_path = pg_catalog, pg_temp
as $$
declare
    q tsquery;
    d integer;
begin
    perform groundkit._reader_allowed(search_hybrid.reader_sub);
    perform groundkit._snippet_check(search_hybrid.snippet_start, search_hybrid.snippet_end);
    perform groundkit._search_check(search_hybrid.query, search_hybrid.k, search_hybrid.content_types);
    perform groundkit._dense_check(search_hybrid.query_embedding);
    if fusion is null or fusion not in ('rrf', 'score') then
        raise exception 'fusion must be rrf or score (got %)', coalesce(quote_literal(fusion), 'NULL')
            using errcode = 'GK005';
    end if;
    if rrf_k is null or rrf_k < 0 or rrf_k > 100000 then
        raise exception 'rrf_k must be between 0 and 100000 (got %)', coalesce(rrf_k::text, 'NULL')
            using errcode = 'GK005';
    end if;
    if bm25_weight is null or dense_weight is null or bm25_weight < 0 or dense_weight < 0
       or bm25_weight = 'NaN'::double precision or dense_weight = 'NaN'::double precision
       or bm25_weight = 'Infinity'::double precision or dense_weight = 'Infinity'::double precision then
        raise exception 'bm25_weight and dense_weight must be finite and >= 0' using errcode = 'GK005';
    end if;
    if depth is null or depth < 1 or depth > 200 then
        raise exception 'depth must be between 1 and 200 (got %)', coalesce(depth::text, 'NULL')
            using errcode = 'GK005';
    end if;
    d := greatest(depth, k);
    q := groundkit._query_tsquery(search_hybrid.query);
    return query
    with b as (
        select r.chunk_id, r.score, r.n::integer as rank
          from groundkit._search_pruned(search_hybrid.reader_sub, search_hybrid.query, d,
                                        search_hybrid.content_types, search_hybrid.space_ids)
               with ordinality as r(chunk_id, score, n)
    ), v as (
        select r.chunk_id, r.score, r.n::integer as rank
          from groundkit._search_dense_ids(search_hybrid.reader_sub, search_hybrid.query_embedding, d,
                                           search_hybrid.content_types, search_hybrid.space_ids, false,
                                           groundkit._query_filter(search_hybrid.reader_sub, search_hybrid.query,
                                                                   search_hybrid.space_ids))
               with ordinality as r(chunk_id, score, n)
    ), f as (
        select coalesce(b.chunk_id, v.chunk_id) as chunk_id, b.rank as br, v.rank as vr,
               case when search_hybrid.fusion = 'rrf' then
                        coalesce(search_hybrid.bm25_weight / (search_hybrid.rrf_k + b.rank)::double precision, 0)
                        + coalesce(search_hybrid.dense_weight / (search_hybrid.rrf_k + v.rank)::double precision, 0)
                    else
                        -- a chunk missing from a leg gets nothing from it (the inner coalesce is
                        -- for a leg whose scores are all equal, never for a missing score)
                        case when b.chunk_id is null then 0
                             else search_hybrid.bm25_weight * coalesce((b.score - bs.lo) / nullif(bs.hi - bs.lo, 0), 1)
                        end
                        + case when v.chunk_id is null then 0
                               else search_hybrid.dense_weight
                                    * coalesce((v.score - vs.lo) / nullif(vs.hi - vs.lo, 0), 1)
                          end
               end as fused
          from b full join v on v.chunk_id = b.chunk_id
         cross join (select min(x.score) as lo, max(x.score) as hi from b x) bs
         cross join (select min(x.score) as lo, max(x.score) as hi from v x) vs
    )
    select c.object_id, c.object_version, c.chunk_seq, o.content_type, o.space_id, o.title,
           c.content, f.fused, c.start_ms, c.end_ms, c.char_start, c.char_end, c.heading_path,
           t.thread_id, t.thread_title, c.chunker,
           groundkit._snippet(c.content,
                              case when c.language is null then q
                                   else groundkit._query_tsquery(search_hybrid.query, c.language) end,
                              search_hybrid.snippet_start, search_hybrid.snippet_end, c.language),
           f.br, f.vr
      from f
      join groundkit.chunks c on c.chunk_id = f.chunk_id
      join groundkit.objects o on o.object_id = c.object_id
     cross join lateral groundkit._thread_of(o.content_type, o.object_id, o.title, o.metadata) t
     where not search_hybrid.match_gate or f.br is not null or coalesce(c.tsv @@ q, false)
     order by f.fused desc, c.object_id, c.chunk_seq
     limit search_hybrid.k;
end
$$;

select pg_catalog.set_config('search_path', pg_catalog.current_setting('groundkit.migrate_search_path'), true);
