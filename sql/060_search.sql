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

-- THE permission predicate, in one place: the chunk, if the reader (of tier rank p_rank, as
-- groundkit._reader resolved it) may see it now, else no row. Every search path joins it
-- laterally per candidate chunk, inside its own ranking query.
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
      join groundkit.objects o on o.object_id = ch.object_id
                              and o.version = ch.object_version and o.state = 'live'
      join groundkit.tiers ot on ot.name = o.tier_visibility
      join groundkit.spaces sp on sp.space_id = o.space_id
      join groundkit.tiers st on st.name = sp.min_tier
     where ch.chunk_id = p_chunk_id
       and p_rank >= ot.rank and p_rank >= st.rank
       and (not sp.private
            or exists (select 1 from groundkit.space_grants g
                        where g.space_id = sp.space_id and g.member_sub = p_member))
       and (not o.owner_only or o.owner_sub = p_member)
       and (p_content_types is null or o.content_type = any (p_content_types))
       and (p_space_ids is null or o.space_id = any (p_space_ids))
$$;

-- The argument checks every search path shares.
create or replace function groundkit._search_check(query text, k integer, content_types text[])
returns void
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
declare
    bad text;
begin
    if query is null then
        raise exception 'query must not be NULL' using errcode = 'GK005';
    end if;
    if length(query) > 4096 then
        raise exception 'query is % characters long; the limit is 4096', length(query)
            using errcode = 'GK005';
    end if;
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
               sum(w.w * groundkit._tf_part(p.tf, c.doc_len, cfg.k1, cfg.b, w.avgdl)) as score
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

-- How many postings of term at or above the impact cut the sketched lists among buckets hold
-- (docs/bm25.md, "Sketches"), and which lists those are: the lists whose range reaches the
-- sketch's first rank. Per list, the size lies between the two sketched ranks whose impacts
-- bracket the cut (linear in the impact between them; between 0 and the list's length whatever
-- the sketch holds), scaled by the list's live length over its length when sketched. The
-- threshold rounds count the other lists. Planning only.
create or replace function groundkit._sketched_size(p_term text, p_cut double precision, p_buckets bigint[])
returns table (n double precision, keys bigint[])
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select coalesce(sum(e.est), 0), coalesce(array_agg(s.vis_key) filter (where e.est is not null), '{}')
      from groundkit.postings_sketch s
     cross join lateral (select count(*)::integer as m from unnest(s.imps) as x where x >= p_cut) c
     cross join lateral (
           select case
                      when c.m = 0 then null  -- (least and greatest skip nulls)
                      when c.m = cardinality(s.imps) then s.n::double precision
                      else greatest(0, least(s.n, s.ranks[c.m] + (s.ranks[c.m + 1] - s.ranks[c.m])
                                                                  * (s.imps[c.m] - p_cut)
                                                     / nullif(s.imps[c.m]::double precision - s.imps[c.m + 1], 0)))
                  end
                  * coalesce((select sum(ts.df) from groundkit.term_stats ts
                               where ts.term = s.term and ts.scope = s.vis_key), 0)
                  / s.n as est) e
     where s.term = p_term and s.vis_key = any (p_buckets)
$$;

-- The term bits a threshold round's probe of term uses (docs/bm25.md, "Term bits"): its words
-- and w_max when it has bits and fewer than half the chunks hold it (p_df, the reader's
-- document frequency, below w_max / 2); else null words (w_max as stored, or no row). One
-- place for that rule, used by the probe steps, by the joined read that does the first probe,
-- and by the choice of probed terms, which counts that probe's cost by it.
-- Without `set search_path`, like groundkit._visible_chunk and for the same reason: inlined, it
-- is a plain index lookup in the caller's statement, not a function call per probe step.
create or replace function groundkit._probe_bits(p_term text, p_df double precision)
returns table (words bigint[], w_max bigint)
language sql stable
as $$
    select case when p_df < 0.5 * tb.w_max then tb.words end, tb.w_max
      from groundkit.term_bits tb
     where tb.term = p_term
$$;

-- The postings of term for the chunk ids (sorted or not), in chunk-id order: one scan of the
-- primary key, which walks the ids several to a leaf page (the threshold rounds' dense probes).
-- Its own function for the planner setting. A plan cached for any array (plpgsql and SQL
-- functions go generic after five calls) may read the whole list through the impact index and
-- test "= any" on every posting against every id, one by one: quadratic, since a parameter array
-- is never hashed (at 100,000 chunks the generic plan did that, 243 ms for 5,890 ids against a
-- list of 14,447 postings; docs/bm25.md). With sorts disabled, a plan that returns the rows in
-- chunk-id order without one is preferred: the primary key scan. (Disabled is not forbidden:
-- without that index, the impact index and a sort would still answer.)
create or replace function groundkit._postings_of(p_term text, p_ids bigint[])
returns table (chunk_id bigint, tf integer)
language sql stable
set search_path = pg_catalog, pg_temp
set enable_sort = off
as $$
    select p.chunk_id, p.tf from groundkit.postings p
     where p.term = p_term and p.chunk_id = any (p_ids)
     order by p.chunk_id
$$;

-- Earlier merged reads are dropped first: `create or replace` cannot drop an output (revisions
-- 1716589 to 54be43c had a fourth, n_read), and another argument list would make an overload
-- that makes calls ambiguous (until revision 0007 there were eleven arguments, no partner bits).
do $drop$
declare
    f regprocedure;
begin
    for f in select p.oid::regprocedure from pg_catalog.pg_proc p
              where p.pronamespace = 'groundkit'::regnamespace
                and p.proname in ('_merged_read', '_merged_read_parallel')
                and ('n_read' = any (p.proargnames) or p.pronargs <> 13)
    loop
        execute format('drop function %s', f);
    end loop;
end
$drop$;

-- A threshold round's merged read (docs/bm25.md, "How a round reads its ranges"): the ranges
-- of the terms rd names, each an index-only scan of the primary key in chunk-id order, merged
-- (Merge Append) and summed chunk by chunk (GroupAggregate). The chunks whose known part plus
-- p_max reaches p_thr, with those parts and lengths (no terms: none); the others are dropped as
-- they are summed (HAVING), so that only the kept ones reach the arrays. With split points
-- (ascending chunk ids; none or null: one piece), the chunk ids are cut into pieces (below the
-- first point, between two, from the last one up), each merged and summed on its own: a chunk
-- has all its postings in one piece, so the sums are the same, only the pieces can run in
-- parallel workers (called through groundkit._merged_read_parallel).
-- Partner bits (docs/bm25.md, "Partner bits in merged reads"): a read term i with p_filter[i]
-- true is one that cannot bring a chunk to p_thr alone (its maximum plus p_max falls short), so
-- its postings are read only for chunks that may hold another read term: a chunk id above
-- p_wmax, or whose bit is set in the term bits (groundkit.term_bits.bits) of another read term.
-- The others could not be kept, and are not summed. Null p_filter: every posting read, as before.
-- A bit that cannot be read counts as set, so a read term without bits keeps every posting of
-- the terms tested against it (the caller tests terms only when every read term has bits).
-- Each term's bits are read once per statement, by an initplan whose value parallel
-- workers receive from the leader (a parameter would be folded into the plan as a constant, and
-- copied into every worker's plan as text), concatenated with nothing so that the value is a
-- copy in memory (the column's value is stored out of line: get_bit on it would fetch it at
-- every posting).
-- (EXECUTE: one branch per term and piece; only positions are written into the text, every
-- value is a parameter.)
create or replace function groundkit._merged_read(
    p_terms text[], p_ws double precision[], p_buckets bigint[], p_k1 double precision,
    p_b double precision, p_avgdl double precision, p_max double precision, p_thr double precision,
    p_cuts double precision[], p_rd integer[], p_splits bigint[],
    p_filter boolean[] default null, p_wmax bigint default null,
    out ids bigint[], out known double precision[], out dls integer[])
language plpgsql stable
set search_path = pg_catalog, pg_temp
-- each range in chunk-id order from the primary key: with partner bits the planner would expect
-- few rows and sort the impact index's instead, a slower read of the same postings
set enable_sort = off
as $$
declare
    pieces text;
    -- per read term: its partner test (or the empty string)
    partners text[];
    -- a chunk's known part, once for the select list and the having clause (the same text: one
    -- aggregate, computed once, and the chunks kept are those whose returned part reaches p_thr)
    known_sum constant text := 'sum(p.w * groundkit._tf_part(p.tf, p.doc_len, $4, $5, $6))';
begin
    p_splits := coalesce(p_splits, '{}');
    if coalesce(cardinality(p_rd), 0) = 0 then
        ids := '{}'; known := '{}'; dls := '{}';
        return;
    end if;
    if exists (select 1 from unnest(p_splits) with ordinality as x(v, i)
                where x.v is null or x.v <= p_splits[x.i - 1]) then
        raise exception 'split points must be ascending chunk ids (got %)', p_splits using errcode = '22023';
    end if;
    partners := array(
        select case when coalesce(p_filter[r.i], false) and p_wmax is not null then
                   -- (a CASE: get_bit fails past the end of the bytes, and only a CASE fixes the
                   -- order in which the two tests run)
                   ' and (case when q.chunk_id > $11 then true else false'
                   || coalesce((select string_agg(format(
                                               ' or coalesce(get_bit((select tb.bits || ''''::bytea from groundkit.term_bits tb'
                                               ' where tb.term = ($1)[%s]), q.chunk_id), 1) = 1', u.i), '' order by u.i)
                                  from unnest(p_rd) as u(i)
                                 where u.i <> r.i), '')
                   || ' end)'
               else '' end
          from generate_series(1, cardinality(p_terms)) as r(i)
         order by r.i);
    pieces := (
        select string_agg(
                   '(select p.chunk_id, max(p.doc_len) as dl, ' || known_sum || ' as known'
                   ' from (select * from ('
                   || (select string_agg(format(
                                  '(select q.chunk_id, q.tf, q.doc_len, ($2)[%s] as w from groundkit.postings q'
                                  ' where q.term = ($1)[%s] and q.vis_key = any ($3) and q.imp >= ($9)[%s]%s%s%s'
                                  ' order by q.chunk_id)',
                                  r.i, r.i, r.i, partners[r.i],
                                  case when s.i > 1 then format(' and q.chunk_id >= ($10)[%s]', s.i - 1) end,
                                  case when s.i <= cardinality(p_splits) then format(' and q.chunk_id < ($10)[%s]', s.i) end),
                              ' union all ' order by r.i)
                         from unnest(p_rd) as r(i))
                   || ') u order by u.chunk_id) p group by p.chunk_id having ' || known_sum || ' + $7 >= $8)',
                   ' union all ' order by s.i)
          from generate_series(1, cardinality(p_splits) + 1) as s(i));
    execute 'select coalesce(array_agg(c.chunk_id), ''{}''), coalesce(array_agg(c.known), ''{}''),
                    coalesce(array_agg(c.dl), ''{}'')
               from (' || pieces || ') c'
      into ids, known, dls
      using p_terms, p_ws, p_buckets, p_k1, p_b, p_avgdl, p_max, p_thr, p_cuts, p_splits,
            p_wmax;
end
$$;

-- The same read in pieces planned for parallel workers: each piece is a whole plan of its own
-- (a non-partial child of a Parallel Append), which a process takes whole and then takes the
-- next one left, so that two or three processes share the chunk ids and only each process's
-- arrays of kept chunks are combined. The costs of starting workers are set to nothing so that
-- the planner's model (which gives a non-partial piece to one worker and counts the leader out)
-- takes that plan; the number of workers is the server's and the caller's
-- (max_parallel_workers_per_gather, max_parallel_workers): at 0, or with no worker free, the
-- leader runs every piece, in one process.
create or replace function groundkit._merged_read_parallel(
    p_terms text[], p_ws double precision[], p_buckets bigint[], p_k1 double precision,
    p_b double precision, p_avgdl double precision, p_max double precision, p_thr double precision,
    p_cuts double precision[], p_rd integer[], p_splits bigint[],
    p_filter boolean[] default null, p_wmax bigint default null,
    out ids bigint[], out known double precision[], out dls integer[])
language sql stable
set search_path = pg_catalog, pg_temp
set parallel_setup_cost = 0
set parallel_tuple_cost = 0
set min_parallel_index_scan_size = 0
as $$
    select * from groundkit._merged_read(p_terms, p_ws, p_buckets, p_k1, p_b, p_avgdl, p_max, p_thr,
                                         p_cuts, p_rd, p_splits, p_filter, p_wmax)
$$;

-- The signature before the strategy argument (an overload would make calls ambiguous).
drop function if exists groundkit._search_pruned(text, text, integer, text[], text[], integer);

-- x_lb of the threshold rounds: a lower bound on the k-th score of the reader's answer, from
-- real chunks. The best chunks by their partial sums among the top depth postings of every list
-- the reader may read (cands of them) are scored exactly, by primary-key lookups, and checked
-- against the live predicate best-first; the k-th visible score, or -infinity if fewer than k
-- are visible (or depth or cands is 0: then no list is read). docs/bm25.md, "The threshold
-- rounds", "x_lb when a round needs it". One SELECT, with no SET clause, so that it is inlined
-- into the statement that reads it: a call of its own measured about 3 % slower on two-term
-- queries. As for _visible_chunk, every relation is schema-qualified, it is called only from
-- _search_pruned, which pins search_path = pg_catalog, pg_temp, and PUBLIC may not execute it
-- (sql/090_roles.sql).
create or replace function groundkit._top_lb(
    p_terms text[], p_ws double precision[], p_buckets bigint[], p_depth integer, p_cands integer,
    p_k1 double precision, p_b double precision, p_avgdl double precision,
    p_rank integer, p_member text, p_content_types text[], p_space_ids text[], p_k integer)
returns table (lb double precision)
language sql stable
as $$
    with q as (
        select u.term, u.w from unnest(p_terms, p_ws) as u(term, w)
    ),
    p as (
        select q.term, q.w, x.chunk_id, x.tf, x.doc_len
          from q
         cross join unnest(p_buckets) as b(vk)
         cross join lateral (
               select p.chunk_id, p.tf, p.doc_len
                 from groundkit.postings p
                where p.term = q.term and p.vis_key = b.vk
                order by p.imp desc
                limit greatest(0, p_depth)) x
    ),
    cand as (
        select p.chunk_id, max(p.doc_len) as dl
          from p
         group by p.chunk_id
         order by sum(p.w * groundkit._tf_part(p.tf, p.doc_len, p_k1, p_b, p_avgdl)) desc
         limit p_cands
    ),
    scored as (
        select c.chunk_id,
               sum(q.w * groundkit._tf_part(pp.tf, c.dl, p_k1, p_b, p_avgdl)) as score
          from cand c
         cross join q
          join groundkit.postings pp on pp.term = q.term and pp.chunk_id = c.chunk_id
         group by c.chunk_id
    )
    select case when count(*) >= p_k then min(z.score) else '-infinity' end
      from (select s.score
              from (select sc.chunk_id, sc.score from scored sc order by sc.score desc offset 0) s
             where exists (select 1 from groundkit._visible_chunk(s.chunk_id, p_rank, p_member,
                                                                  p_content_types, p_space_ids))
             limit p_k) z
$$;

-- x_lb from a short list (docs/bm25.md, "x_lb from a short list"): another lower bound on the
-- k-th score, from the chunks of the query's shortest list (p_short, by index). The partner is
-- the other term of largest maximum (p_maxcs) with term bits; the short list's postings in the
-- reader's buckets are ranked by their own contribution plus the partner's maximum where its
-- bit is set (or above its w_max, where the bits do not reach); the best p_cands are scored
-- exactly and checked against the live predicate best-first, as in _top_lb. The best answers of
-- a query often hold its rarest term with one of its heaviest, and the lists' tops seldom find
-- them. Returns x_lb raised to that bound (p_x_lb, the bound so far, when no other term has
-- bits), with a DEBUG line naming both bounds; the caller decides when it is worth its cost.
-- (PL/pgSQL: the bits are read once into a variable, `|| ''` making an in-memory copy, so that
-- get_bit does not fetch and decompress the stored value again for every posting.)
-- The versions before: an SQL function given the partner's bits (revisions 8e2a0e5 to 9aa0bb2),
-- and one returning the bound and the partner, the caller raising x_lb (to 333b5bb).
drop function if exists groundkit._short_lb(
    text[], double precision[], integer, double precision, bytea, bigint, bigint[], integer,
    double precision, double precision, double precision, integer, text, text[], text[], integer);
drop function if exists groundkit._short_lb(
    text[], double precision[], double precision[], integer, bigint[], integer,
    double precision, double precision, double precision, integer, text, text[], text[], integer);
create or replace function groundkit._short_lb(
    p_terms text[], p_ws double precision[], p_maxcs double precision[], p_short integer,
    p_buckets bigint[], p_cands integer,
    p_k1 double precision, p_b double precision, p_avgdl double precision,
    p_rank integer, p_member text, p_content_types text[], p_space_ids text[], p_k integer,
    p_x_lb double precision)
returns double precision
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
declare
    partner text;
    lb double precision;
    v_mc double precision;
    v_bits bytea;
    v_wmax bigint;
begin
    select x.term, x.mc, tb.bits || ''::bytea, tb.w_max into partner, v_mc, v_bits, v_wmax
      from unnest(p_terms, p_maxcs) with ordinality as x(term, mc, i)
      join groundkit.term_bits tb on tb.term = x.term and tb.bits is not null
     where x.i <> p_short
     order by x.mc desc, x.i
     limit 1;
    if partner is null then
        return p_x_lb;
    end if;
    with q as (
        select u.term, u.w from unnest(p_terms, p_ws) as u(term, w)
    ),
    cand as (
        select p.chunk_id, p.doc_len as dl
          from groundkit.postings p
         where p.term = p_terms[p_short] and p.vis_key = any (p_buckets)
         order by p_ws[p_short] * groundkit._tf_part(p.tf, p.doc_len, p_k1, p_b, p_avgdl)
                  -- (in this order: get_bit fails past the end of the bytes)
                  + case when p.chunk_id > v_wmax then v_mc
                         when get_bit(v_bits, p.chunk_id) = 1 then v_mc
                         else 0 end desc
         limit p_cands
    ),
    scored as (
        select c.chunk_id,
               sum(q.w * groundkit._tf_part(pp.tf, c.dl, p_k1, p_b, p_avgdl)) as score
          from cand c
         cross join q
          join groundkit.postings pp on pp.term = q.term and pp.chunk_id = c.chunk_id
         group by c.chunk_id
    )
    select case when count(*) >= p_k then min(z.score) else '-infinity' end into lb
      from (select s.score
              from (select sc.chunk_id, sc.score from scored sc order by sc.score desc offset 0) s
             where exists (select 1 from groundkit._visible_chunk(s.chunk_id, p_rank, p_member,
                                                                  p_content_types, p_space_ids))
             limit p_k) z;
    raise debug 'groundkit pruned: threshold x_lb % from the short list of % (by the bits of %), % from the lists'' tops',
        lb, p_terms[p_short], partner, p_x_lb;
    return greatest(p_x_lb, lb);
end
$$;

-- The pending part (docs/bm25.md, "The pending part"). Its table grows from empty to tens of
-- thousands of rows between merges, and a plan cached while it was nearly empty scanned it
-- whole for every term: these functions never scan it sequentially, whatever its size was when
-- they were planned.
--
-- Each term's pending postings: how many count in the statistics of a reader of rank p_rank,
-- and whether there are any. One call a search (a call with a SET clause costs tens of µs).
create or replace function groundkit._pending_dfs(p_terms text[], p_rank integer)
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
                          where pp.term = t.term) x
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
               sum(q.w * groundkit._tf_part(pp.tf, pp.doc_len, p_k1, p_b, p_avgdl)) as score
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
    theta as (
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

-- Exact top-k BM25 over the reader's postings lists, by one of three exact strategies
-- (docs/bm25.md, "Three strategies"): the scan, the threshold rounds, the pruned rounds.
--
-- Threshold rounds (queries of two or more terms whose lists are long). For a guess g of the
-- final k-th score, a chunk scoring at least g that contains term t has, in t's list, an impact
-- of at least cut_t(g) (the other terms add at most their maxima). Some terms whose maxima sum
-- below g are probed (primary-key lookups) for the candidates the others' ranges give; the
-- rest are read down to their cuts. Every chunk scoring >= g is then found with its exact
-- score. Too few visible ones: the guess was too high; lower it and go again, by a new round or,
-- when the last one failed only by a gap below its cuts, by extending it (reading only the
-- postings between the new cuts and the old ones).
--
-- Pruned rounds (one term). Each (term, visibility bucket) postings list is read in impact
-- order (postings_impact_idx), depths[t] postings deep (per term), only from the buckets the
-- reader may hold. After each round:
--   lb(c)     = the exact contributions of the terms c was seen under;
--   bnd(t)    = a bound on the contribution of any posting of t not read yet (0 once every
--               list of t is exhausted), from the last impact read;
--   ub(c)     = lb(c) + bnd of the terms c was not seen under;   ub_unseen = sum of bnd(t).
-- theta_lb is the k-th largest lb among candidates that pass the live permission predicate.
-- A candidate with ub(c) < max(theta_lb, ub_unseen) cannot be in a top k this round can
-- confirm. The rest (survivors) are scored exactly (primary-key lookups), then checked against
-- the live predicate best-first; their k-th score theta is final once ub_unseen <= theta: no
-- chunk not read yet can beat it. Otherwise, or when the survivors are too many to be worth
-- scoring yet, the depth grows fourfold, for the essential terms only (MaxScore, below).
--
-- Nothing caps any depth, so a selective reader still gets k rows when k exist. Queries whose
-- lists are short are scanned whole instead (one aggregate, below). strategy (tests and
-- benchmarks) forces one: 'scan', 'threshold' or 'rounds' ('extend': the threshold rounds,
-- extending a round whenever that is allowed, whatever it costs; 'shares': the threshold rounds,
-- reading every round in two passes whatever its length; 'merge': the threshold rounds, reading
-- every round's ranges from the primary key in chunk-id order; 'pieces': the same in four pieces
-- of the chunk ids, planned for parallel workers). Without it, start_depth 0 forces the scan and
-- a positive start_depth the pruned rounds, starting that deep; with 'threshold', 'extend',
-- 'shares', 'merge' or 'pieces' it is how deep the first lower bound reads (0: none).
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
    depths integer[];
    bnds double precision[];
    theta_h double precision;
    first_round boolean := true;
    c_ids bigint[];
    c_lb double precision[];
    c_seen double precision[];
    c_dl integer[];
    n_read bigint;
    s_ids bigint[];
    s_dl integer[];
    a_ids bigint[];
    a_scores double precision[];
    ub_unseen double precision;
    lo integer;
    step integer;
    cnt integer;
    mn double precision;
    theta_lb double precision;
    kth_ub double precision;
    n_vis integer;
    r_ids bigint[];
    r_scores double precision[];
    v_strategy text;
    -- threshold rounds
    t_terms text[];
    t_ws double precision[];
    t_maxcs double precision[];
    t_dfs double precision[];
    nt integer;
    tot double precision;
    full_n double precision;
    x_lb double precision;
    guess double precision;
    thr_g double precision;
    thr_f double precision;
    final boolean;
    done boolean;
    cuts double precision[];
    ns double precision[];
    n_one bigint;
    probe boolean[];
    best_probe boolean[];
    cost double precision;
    best_cost double precision;
    n_cand double precision;
    -- the final round's estimate for the probe set chosen (null where none was made)
    best_cand double precision;
    est_cand boolean;
    est_whole boolean;
    l_need double precision;
    jj integer;
    n_probe integer;
    p_max double precision;
    best_p_max double precision;
    n_left double precision;
    rest double precision;
    j integer;
    c_known double precision[];
    theta double precision;
    -- extending the last threshold round instead of running a new one
    incr boolean;
    e_ids bigint[];
    e_known double precision[];
    e_cuts double precision[];
    e_thr double precision;
    e_gap boolean;
    e_reads double precision;
    e_cand double precision;
    e_counted double precision;
    dn double precision;
    n_new bigint;
    -- reading long ranges in two passes
    n_big double precision;
    n_long bigint;
    budget double precision;
    taus double precision[];
    d_ids bigint[];
    -- how a round reads its ranges: joined (one or two terms), merged (whole lists), D estimated
    rd integer[];
    joined boolean;
    merged boolean;
    hi_a double precision;
    hi_b double precision;
    m_splits bigint[];
    -- partner bits in a merged read: which read terms' postings are tested, up to which chunk
    -- id, and how many read terms have bits
    m_filter boolean[];
    m_wmax bigint;
    m_nbits integer;
    d_cut double precision;
    est_d double precision;
    -- range counts kept from round to round: where each term was last counted, and its count
    k_cuts double precision[];
    k_ns bigint[];
    e_dcuts double precision[];
    e_dns bigint[];
    n_sk double precision;
    sk_keys bigint[];
    rest_keys bigint[];
    -- term bits of a probed term, and how many candidates a probe step looked up, of how many
    bm bigint[];
    bw bigint;
    b_looked bigint;
    b_cands bigint;
    -- how many of the best chunks at the lists' tops are scored for x_lb
    x_cands integer;
    -- how deep the lists' tops are read for x_lb, and whether that is still to be done
    x_depth integer;
    x_pending boolean;
    -- x_lb from a short list: the shortest list's term (by index, when it holds at most _short_max()
    -- of the reader's postings), scored only when the round the final one replaces (or a round
    -- that failed) reads _short_min() postings or more (groundkit._short_lb)
    s_j integer;
    -- the first probed term when a joined read looks it up too (else null), and the rest after it
    fused integer;
    -- an extension that reads one term (read like a round of one range), and the old cut it stops at
    e_one boolean;
    e_hi double precision;
    -- the weights of the read terms of a joined read and of a probed term, as scalars: a
    -- subscript in a statement is evaluated for every row
    w_a double precision;
    w_b double precision;
    w_f double precision;
    -- w_max of each term's bits where a probe would use them (else null), and the probed term
    -- a joined read would look up
    t_bw bigint[];
    f_j integer;
    rest1 double precision;
    -- the pending part's top k (null when it holds none of the terms), in the final order
    pend_ids bigint[];
    pend_scores double precision[];
    pend_obj text[];
    pend_seq integer[];
    has_pend boolean;
begin
    perform groundkit._search_check(_search_pruned.query, _search_pruned.k, _search_pruned.content_types);
    if _search_pruned.strategy is not null
       and _search_pruned.strategy not in ('scan', 'threshold', 'extend', 'shares', 'merge', 'pieces', 'rounds') then
        raise exception 'strategy must be scan, threshold, extend, shares, merge, pieces or rounds (got %)', quote_literal(_search_pruned.strategy)
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

    select coalesce(sum(s.n_chunks), 0), coalesce(sum(s.total_len), 0) into v_n, v_total
      from groundkit.scope_stats s where s.scope <= v_rank;
    v_avgdl := case when v_n > 0 and v_total > 0 then v_total / v_n else 1 end;
    select array_agg(q.term order by q.term),
           array_agg(q.qtf * groundkit._idf(v_n, q.df) order by q.term),
           array_agg(q.df order by q.term),
           bool_or(q.pend)
      into terms, ws, dfs, has_pend
      from (with qt as materialized (select * from groundkit.query_terms(_search_pruned.query))
            select q.term, q.qtf,
                   (coalesce((select sum(ts.df) from groundkit.term_stats ts
                               where ts.term = q.term and ts.scope <= v_rank), 0)
                    -- the pending part's chunks, which term_stats counts once they are merged
                    + pd.df)::double precision as df,
                   pd.present as pend
              from qt q
              join groundkit._pending_dfs((select array_agg(x.term) from qt x), v_rank) pd
                on pd.term = q.term) q;
    if terms is null then
        return;
    end if;
    buckets := array(
        select t.rank::bigint from groundkit.tiers t where t.rank <= v_rank
        union
        select groundkit._vis_key(false, null, true, g.space_id, null)
          from groundkit.space_grants g join groundkit.spaces s on s.space_id = g.space_id
         where g.member_sub = v_member and s.private
        union
        select groundkit._vis_key(true, v_member, false, null, null));
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
                                      _search_pruned.k) z;
        raise debug 'groundkit pruned: % pending chunks in the top k of the pending part', cardinality(pend_ids);
    end if;

    -- Which strategy (speed only: all three are exact). One term: the pruned rounds (k postings
    -- deep is usually enough, however long the list). Several terms: the scan when the reader's
    -- lists are short, where one aggregate over them costs less than any bookkeeping: at most
    -- 20,000 postings of shared content for four or more terms, 10,000 for two or three, whose
    -- threshold rounds probe fewer lists (docs/bm25.md, "The scan's limit by term count");
    -- otherwise the threshold rounds.
    v_strategy := coalesce(
        case when _search_pruned.strategy in ('extend', 'shares', 'merge', 'pieces') then 'threshold' else _search_pruned.strategy end,
        case when _search_pruned.start_depth = 0 then 'scan'
             when _search_pruned.start_depth > 0 then 'rounds' end,
        case when cardinality(terms) = 1 then 'rounds'
             when (select sum(d) from unnest(dfs) as d) <= groundkit._scan_max(cardinality(terms))
                  then 'scan'
             else 'threshold' end);

    if v_strategy = 'threshold' then
        -- Generic plans, planned once per session, as for the pruned rounds below: auto kept
        -- choosing custom plans for some of these statements, their generic costs being
        -- estimated high (arrays of unknown length), and planned them at every call, with the
        -- bits and candidates written into them (docs/bm25.md, "Generic plans for the threshold
        -- rounds"). Back to auto (the function's own setting) for the scan.
        perform set_config('plan_cache_mode', 'force_generic_plan', true);
        <<threshold>>
        begin
            -- x_lb, a lower bound on the final k-th score, from real chunks (groundkit._top_lb):
            -- the best chunks by their partial sums among the lists' top postings, scored
            -- exactly, checked against the live predicate best-first. How deep: 64 or 4k
            -- postings a list; for two terms, whose first guess is 0.9 of both maxima and
            -- seldom x_lb, 2k and at least 16; start_depth deep, for tests (0: none, and x_lb
            -- stays -infinity). How many: the best 4k, or 8k for three terms or more whose lists
            -- hold 100,000 shared postings or more, where a final round at x_lb reads long lists
            -- whole and a higher x_lb saves more than 4k more lookups cost (docs/bm25.md, "Maxima
            -- from one posting, and x_lb for two terms", "More chunks for x_lb over long lists").
            -- When: at once for two terms, where x_lb is sometimes above the first guess and
            -- then ends the search in one round; for three terms or more only when a round needs
            -- it (a commitment to the final round, or a round that failed with fewer than k
            -- visible chunks kept), and until then it is -infinity, a valid lower bound: there
            -- it cost more than it saved (docs/bm25.md, "x_lb when a round needs it").
            x_cands := _search_pruned.k
                       * case when cardinality(terms) >= 3 and (select sum(d) from unnest(dfs) as d) >= 100000
                              then 8 else 4 end;
            x_depth := greatest(0, coalesce(_search_pruned.start_depth,
                                            case when cardinality(terms) = 2 then greatest(16, 2 * _search_pruned.k)
                                                 else greatest(64, 4 * _search_pruned.k) end));
            x_pending := cardinality(terms) >= 3 and x_depth > 0;
            -- The terms by their largest possible contribution to a chunk the reader may see
            -- (the top impact of each of the reader's lists, one posting each), smallest first; and
            -- x_lb, unless it waits.
            with q as (
                select u.term, u.w, u.df from unnest(terms, ws, dfs) as u(term, w, df)
            ),
            mx as (
                select q.term, q.w, q.df, q.w * least(1.0, groundkit._imp_ub(coalesce(max(t.imp), 0), rho)) as maxc
                  from q
                 cross join unnest(buckets) as b(vk)
                  left join lateral (select p.imp from groundkit.postings p
                                      where p.term = q.term and p.vis_key = b.vk
                                      order by p.imp desc limit 1) t on true
                 group by q.term, q.w, q.df
            )
            select array_agg(mx.term order by mx.maxc, mx.term), array_agg(mx.w order by mx.maxc, mx.term),
                   array_agg(mx.maxc order by mx.maxc, mx.term), array_agg(mx.df order by mx.maxc, mx.term),
                   array_agg((select b.w_max from groundkit._probe_bits(mx.term, mx.df) b where b.words is not null)
                             order by mx.maxc, mx.term),
                   (select t.lb from groundkit._top_lb(terms, ws, buckets, x_depth,
                                                       case when x_pending then 0 else x_cands end,
                                                       v_k1, v_b, v_avgdl, v_rank, v_member,
                                                       _search_pruned.content_types, _search_pruned.space_ids,
                                                       _search_pruned.k) t)
              into t_terms, t_ws, t_maxcs, t_dfs, t_bw, x_lb
              from mx;
            nt := cardinality(t_terms);
            -- (the short list for x_lb, if there is one; used only when x_lb is scored, below)
            s_j := (select x.i from unnest(t_dfs) with ordinality as x(df, i) where x.df <= groundkit._short_max() order by x.df, x.i limit 1);
            k_cuts := array_fill(null::double precision, array[nt]);
            k_ns := array_fill(null::bigint, array[nt]);
            tot := (select sum(x) from unnest(t_maxcs) as x);
            full_n := (select sum(x) from unnest(t_dfs) as x);

            -- The first guess: 0.9 of the two largest maxima together (of tot for one or two
            -- terms), or x_lb if higher. The best chunks seldom hold more than two of the terms
            -- near their maxima: with four terms or more, 0.9 · tot was 1.5-2.4 times the final
            -- k-th score (10th to 90th percentile of the benchmark's queries; docs/bm25.md, "The
            -- first guess from two maxima").
            guess := greatest(x_lb, groundkit._guess_first() * least(tot, t_maxcs[nt] + coalesce(t_maxcs[nt - 1], 0)));
            final := guess <= x_lb;
            raise debug 'groundkit pruned: threshold terms % weights % maxima % x_lb % rho % buckets %',
                t_terms, t_ws, t_maxcs, x_lb, rho, buckets;
            loop
                -- Extend the last round instead of running a new one (docs/bm25.md, "Extending a
                -- round"): allowed while the guess is at or above the level the last round kept
                -- chunks down to and the same probed terms stay below it; chosen when the last
                -- round failed only by a gap below its cuts (had it kept too few chunks, the same
                -- chunks would be too few again) and the postings between the new cuts and the
                -- old ones cost less to look up than reading the ranges and probing again.
                incr := false;
                fused := null;
                e_dcuts := null;
                if e_thr is not null and guess >= e_thr and p_max < guess * (1 - groundkit._slack()) then
                    thr_g := guess * (1 - groundkit._slack());
                    select array_agg(groundkit._imp_cut((thr_g - (tot - x.mc)) / x.w, rho) order by x.i)
                      into cuts
                      from unnest(t_ws, t_maxcs) with ordinality as x(w, mc, i);
                    -- (each read term's count between its new cut and its old one is kept, for
                    -- the range counts below if this round is not an extension)
                    e_dcuts := cuts;
                    e_dns := array_fill(null::bigint, array[nt]);
                    dn := 0;
                    for j in 1 .. nt loop
                        if not probe[j] and e_cuts[j] > 0 then
                            select count(*) into n_one
                              from (select 1 from groundkit.postings p
                                     where p.term = t_terms[j] and p.vis_key = any (buckets)
                                       and p.imp < e_cuts[j] and p.imp >= cuts[j]
                                     limit 20000) x;
                            e_dns[j] := n_one;
                            dn := dn + n_one;
                        end if;
                    end loop;
                    -- A new round counts its ranges again (~0.135 us a posting), reads them, and probes
                    -- every candidate; an extension reads the new postings and looks up the other read
                    -- terms for the chunks they hold (at most dn). ('extend', for tests: whenever it is
                    -- allowed.)
                    -- (not null when no strategy is named: it is negated below)
                    incr := _search_pruned.strategy is not distinct from 'extend'
                            or (e_gap and dn < 20000
                                and 5 * ((select count(*) from unnest(probe) as x where not x) - 1) * dn
                                    < 0.135 * e_counted + 0.8 * e_reads
                                      + 5 * (select count(*) from unnest(probe) as x where x) * e_cand);
                end if;

                <<plan>>
                loop
                    exit plan when incr;
                    thr_g := guess * (1 - groundkit._slack());
                    -- cuts[t]: the least impact a chunk scoring >= guess can have in t's list
                    select array_agg(groundkit._imp_cut((thr_g - (tot - x.mc)) / x.w, rho) order by x.i)
                      into cuts
                      from unnest(t_ws, t_maxcs) with ordinality as x(w, mc, i);
                    -- ns[t]: how many postings that range holds. From the sketches of the
                    -- reader's long lists where there are any (docs/bm25.md, "Sketches": counting
                    -- was a quarter of a median broad-reader query); the rest counted up to
                    -- 40,000 (beyond, an estimate: half the list). A cut at or below one counted
                    -- before adds only the postings between the two to that count (none to count
                    -- once it reached the limit): guesses fall round after round, and the long
                    -- counts were repeated.
                    ns := array_fill(0::double precision, array[nt]);
                    for j in 1 .. nt loop
                        if cuts[j] <= 0 then
                            ns[j] := t_dfs[j];
                            continue;
                        end if;
                        -- (the reader's sketched lists whose range reaches the sketch's first rank)
                        select z.n, z.keys into n_sk, sk_keys
                          from groundkit._sketched_size(t_terms[j], cuts[j], buckets) z;
                        if cardinality(sk_keys) > 0 then
                            -- (the reader's other lists counted, as below, up to 40,000 postings
                            -- with the sketched ones: none when those reach it. A range that long
                            -- is long; its exact size steers no choice the sketched part has not
                            -- made, and a broad reader's private boards hold thousands of a common
                            -- term's postings: docs/bm25.md, "Range counts stop at 40,000")
                            rest_keys := array(select b from unnest(buckets) as b where b <> all (sk_keys));
                            select count(*) into n_one
                              from (select 1 from groundkit.postings p
                                     where p.term = t_terms[j] and p.vis_key = any (rest_keys) and p.imp >= cuts[j]
                                     limit greatest(0, groundkit._count_cap() - least(ceil(n_sk), groundkit._count_cap()))::bigint) x;
                            k_cuts[j] := null;
                            k_ns[j] := null;
                            ns[j] := n_sk + n_one;
                        else
                            if k_cuts[j] is not null and cuts[j] <= k_cuts[j] then
                                n_one := k_ns[j];
                                if n_one < groundkit._count_cap() and e_dcuts[j] = cuts[j] and e_cuts[j] = k_cuts[j]
                                   and e_dns[j] < 20000 then
                                    -- counted just now, between the same two cuts, not cut short
                                    n_one := least(n_one + e_dns[j], groundkit._count_cap());
                                elsif n_one < groundkit._count_cap() and cuts[j] < k_cuts[j] then
                                    n_one := n_one + (
                                        select count(*)
                                          from (select 1 from groundkit.postings p
                                                 where p.term = t_terms[j] and p.vis_key = any (buckets)
                                                   and p.imp >= cuts[j] and p.imp < k_cuts[j]
                                                 limit groundkit._count_cap() - n_one) x);
                                end if;
                            else
                                select count(*) into n_one
                                  from (select 1 from groundkit.postings p
                                         where p.term = t_terms[j] and p.vis_key = any (buckets) and p.imp >= cuts[j]
                                         limit groundkit._count_cap()) x;
                            end if;
                            k_cuts[j] := cuts[j];
                            k_ns[j] := n_one;
                            ns[j] := case when n_one < groundkit._count_cap() then n_one else greatest(n_one, t_dfs[j] / 2) end;
                        end if;
                    end loop;
                    raise debug 'groundkit pruned: threshold counts terms % cuts % counted % sizes % reader %',
                        t_terms, cuts, k_ns, ns, _search_pruned.reader_sub;
                    -- Probed terms: the longest lists first, as long as the probed terms' maxima sum
                    -- below the guess (then every chunk reaching it holds a term that is read); of
                    -- those sets, the one of least estimated cost (a posting read ~0.8 us, a probe
                    -- ~5 us per candidate and probed term; for queries of two or three terms, the
                    -- first probed term 0.3 + 10 df / w_max us when it has bits: docs/bm25.md,
                    -- "Probes by bits in the choice of probed terms"). The candidates: every posting read, or
                    -- in the final round over whole lists an estimate (docs/bm25.md, "Candidates of
                    -- a final round"): there the others are far fewer, and a round that reads a
                    -- common list whole only to look up a rarer one's few chunks is the slowest kind.
                    probe := array_fill(false, array[nt]);
                    best_probe := probe;
                    p_max := 0;
                    best_p_max := 0;
                    n_probe := 0;
                    f_j := 0;
                    n_left := (select sum(x) from unnest(ns) as x);
                    best_cost := groundkit._us_read() * n_left;
                    best_cand := null;
                    -- (the final round: over whole lists, every cut at or below 0, for any probe
                    -- set; over ranges cut above 0, for a probe set that reads 10,000 postings or
                    -- more: shorter ranges are often of lists without sketches, which the estimate
                    -- counts as none, so that probing looked free: docs/bm25.md, "Candidates of a
                    -- final round over ranges")
                    est_whole := not exists (select 1 from unnest(cuts) as c(x) where c.x > 0);
                    for j in select x.i from unnest(ns) with ordinality as x(n, i) order by x.n desc, x.i loop
                        if p_max + t_maxcs[j] < thr_g then
                            probe[j] := true;
                            p_max := p_max + t_maxcs[j];
                            n_probe := n_probe + 1;
                            f_j := greatest(f_j, j);
                            n_left := n_left - ns[j];
                            n_cand := n_left;
                            est_cand := final and (est_whole or n_left >= 10000);
                            if est_cand then
                                -- (a kept chunk's read terms add up to l_need. One alone reaches
                                -- it only at or above _imp_cut(l_need / w) in its list, and its cut:
                                -- so many postings by the sketches (none counted where there are
                                -- none). Chunks of two or more read terms: as if the terms were
                                -- independent. Only the final round, which cannot fail: in others
                                -- the cheaper plan ran rounds that failed, then the final one.)
                                l_need := thr_g - p_max;
                                n_cand := 0;
                                for jj in select x.i from unnest(probe) with ordinality as x(pr, i) where not x.pr loop
                                    if t_maxcs[jj] >= l_need then
                                        n_cand := n_cand + coalesce((select z.n from groundkit._sketched_size(
                                                      t_terms[jj], greatest(cuts[jj], groundkit._imp_cut(l_need / t_ws[jj], rho)), buckets) z), 0);
                                    end if;
                                end loop;
                                n_cand := least(n_left, n_cand + (
                                    select coalesce(sum(a.n * b.n), 0) / greatest(v_n, 1)
                                      from unnest(ns, probe) with ordinality as a(n, pr, i)
                                      join unnest(ns, probe) with ordinality as b(n, pr, i) on b.i > a.i
                                     where not a.pr and not b.pr));
                            end if;
                            cost := groundkit._us_read() * n_left + groundkit._us_probe() * n_probe * n_cand;
                            -- (the probed term of largest maximum, when it has bits, is looked up only
                            -- where its bit is set, in a joined read of one or two terms: 0.3 us a
                            -- candidate for the bit test and the rest, and a lookup where the bit is
                            -- set, taken as twice as likely as df / w_max says, since the candidates
                            -- hold related words. Only for two or three terms: with more, cheaper
                            -- probes made plans that probed more terms and kept more candidates)
                            if nt <= 3 and nt - n_probe <= 2 and t_bw[f_j] is not null then
                                cost := cost - greatest(0, groundkit._us_probe() - groundkit._us_bit_test()
                                                             - 2 * groundkit._us_probe() * t_dfs[f_j] / t_bw[f_j]) * n_cand;
                            end if;
                            if cost < best_cost then
                                best_cost := cost;
                                best_probe := probe;
                                best_p_max := p_max;
                                best_cand := case when est_cand then n_cand end;
                            end if;
                        end if;
                    end loop;
                    probe := best_probe;
                    p_max := best_p_max;
                    n_left := (select coalesce(sum(x.n), 0) from unnest(ns, probe) as x(n, pr) where not x.pr);
                    if best_cand is not null then
                        raise debug 'groundkit pruned: threshold final round estimated at % candidates', round(best_cand);
                    end if;
                    -- A round that reads half of everything costs about what a round at x_lb costs,
                    -- and that one cannot fail: commit to it (x_lb from the lists' tops first, if it
                    -- is not known yet).
                    exit plan when final or n_left < 0.5 * full_n;
                    if x_pending then
                        select greatest(x_lb, t.lb) into x_lb
                          from groundkit._top_lb(t_terms, t_ws, buckets, x_depth, x_cands, v_k1, v_b, v_avgdl, v_rank, v_member,
                                                 _search_pruned.content_types, _search_pruned.space_ids, _search_pruned.k) t;
                        -- and from a short list, when the round the final one replaces would read 50,000
                        -- postings or more (below that, the 1-6 ms it costs was more than it saved:
                        -- docs/bm25.md, "x_lb from a short list")
                        if s_j is not null and n_left >= groundkit._short_min() then
                            x_lb := groundkit._short_lb(t_terms, t_ws, t_maxcs, s_j, buckets, x_cands, v_k1, v_b,
                                                        v_avgdl, v_rank, v_member, _search_pruned.content_types,
                                                        _search_pruned.space_ids, _search_pruned.k, x_lb);
                        end if;
                        x_pending := false;
                        raise debug 'groundkit pruned: threshold x_lb % from the lists'' tops, for the final round', x_lb;
                    end if;
                    final := true;
                    guess := x_lb;
                    if guess = '-infinity' then
                        exit threshold;  -- no lower bound: the scan
                    end if;
                end loop;

                -- Read the ranges of the terms not probed, keep the candidates that can still reach
                -- thr_f (<= thr_g: the others' values give the next guess a lower bound if this one
                -- fails), then probe the probed terms for them, largest maximum first.
                -- An extension that reads one term: its new postings hold each chunk once, so they
                -- are read like a round of one range (the joined read below, between the new cut
                -- and the old one, e_hi), with no grouping, and the first probed term looked up
                -- by its bits in the same statement (docs/bm25.md, "An extension of one range").
                -- (rd: the read terms, by index)
                rd := array(select x.i from unnest(probe) with ordinality as x(pr, i) where not x.pr order by x.i);
                e_one := incr and cardinality(rd) = 1;
                e_hi := 'infinity';
                if e_one then
                    thr_f := e_thr;
                    e_hi := e_cuts[rd[1]];
                    joined := true;
                    merged := false;
                    d_ids := null;
                elsif incr then
                    -- The new candidates: chunks with a posting between a read term's new cut and
                    -- its old one, scored for every term read (the other read terms by lookups:
                    -- exact), then probed below like any candidate. Kept down to the last round's
                    -- level.
                    thr_f := e_thr;
                    with x as (
                        select x.term, x.w, x.cut, x.ecut
                          from unnest(t_terms, t_ws, cuts, e_cuts, probe) as x(term, w, cut, ecut, pr)
                         where not x.pr
                    ),
                    d as (
                        select p.chunk_id, max(p.doc_len) as dl, array_agg(x.term) as terms,
                               sum(x.w * groundkit._tf_part(p.tf, p.doc_len, v_k1, v_b, v_avgdl)) as known
                          from x
                          join groundkit.postings p on p.term = x.term and p.vis_key = any (buckets)
                                                   and p.imp >= x.cut and p.imp < x.ecut
                         where x.ecut > 0
                         group by p.chunk_id
                    ),
                    -- (materialized: each chunk's lookups run once, not once per use of known
                    -- below; none when a chunk holds every read term, or one term is read)
                    s as materialized (
                        select d.chunk_id, d.dl,
                               d.known + case when cardinality(d.terms) < (select count(*) from x) then coalesce(
                                   (select sum(x.w * groundkit._tf_part(pp.tf, d.dl, v_k1, v_b, v_avgdl))
                                      from x
                                      join groundkit.postings pp on pp.term = x.term and pp.chunk_id = d.chunk_id
                                     where x.term <> all (d.terms)), 0) else 0 end as known
                          from d
                    )
                    select coalesce(array_agg(s.chunk_id) filter (where s.known + p_max >= thr_f), '{}'),
                           coalesce(array_agg(s.known) filter (where s.known + p_max >= thr_f), '{}'),
                           coalesce(array_agg(s.dl) filter (where s.known + p_max >= thr_f), '{}'),
                           count(*)
                      into c_ids, c_known, c_dl, n_new
                      from s;
                    n_read := n_read + n_new;
                    e_reads := e_reads + dn;
                    e_cand := e_cand + cardinality(c_ids);
                    raise debug 'groundkit pruned: threshold guess % (final %) cuts % extends the last round by % postings, % candidates',
                        guess, final, cuts, dn, cardinality(c_ids);
                else
                    thr_f := case when final then thr_g else greatest(x_lb, groundkit._guess_next() * guess) * (1 - groundkit._slack()) end;
                    -- Long ranges in two passes (docs/bm25.md, "Shares"). A chunk is kept only if
                    -- its known part reaches L = thr_f - p_max. Give each read term a share
                    -- tau(t), the shares summing to L (less 1e-7 of it, for rounding): a chunk
                    -- whose every read contribution is below its share is not kept. Shares: the
                    -- longest ranges first get a share just above their maximum, while these fit
                    -- in L (pass 1 reads nothing of them; pass 2 sums them for the chunks other
                    -- terms bring); the rest of L is split over the other read terms by their
                    -- maxima. Pass 1 reads only the postings at or above their share (D: the
                    -- chunks that can be kept); pass 2 reads the ranges with D as a hashed filter
                    -- and sums only D's postings, as one pass would. Grouping costs ~0.5 us a
                    -- posting, the filter far less. Only for long ranges (short ones cost less
                    -- than planning pass 2).
                    -- (n_long: the longest range, up to 40,000; a range holds a chunk once, so a
                    -- round that drops rows unread still read at least that many chunks)
                    select coalesce(sum(x.n), 0), coalesce(max(least(x.n, groundkit._count_cap())), 0)::bigint into n_big, n_long
                      from unnest(ns, probe) as x(n, pr) where not x.pr;
                    d_ids := null;
                    taus := null;
                    est_d := null;
                    joined := cardinality(rd) <= 2;
                    -- Whole lists (every read term's cut at or below 0), long: read in chunk-id
                    -- order from the primary key and merged (docs/bm25.md, "How a round reads its
                    -- ranges"), when the reader's lists are most of the terms' postings (the
                    -- primary key holds every bucket's).
                    -- ('merge' and 'pieces', for tests: every round, whatever its cuts.)
                    merged := case when _search_pruned.strategy in ('merge', 'pieces') then true
                                   when _search_pruned.strategy = 'shares' then false
                              else n_big >= groundkit._long_round()
                                   and not exists (select 1 from unnest(rd) as r(i) where cuts[r.i] > 0)
                                   and 2 * n_big >= (select coalesce(sum(ts.df), 0) from groundkit.term_stats ts
                                                      where ts.term in (select t_terms[r.i] from unnest(rd) as r(i)))
                              end;
                    if (n_big >= groundkit._long_round() or _search_pruned.strategy = 'shares') and thr_f - p_max > 1e-4 * abs(thr_f)
                       and _search_pruned.strategy is distinct from 'merge'
                       and _search_pruned.strategy is distinct from 'pieces' then
                        budget := (thr_f - p_max) * (1 - 1e-7);
                        taus := array_fill(null::double precision, array[nt]);
                        for j in select x.i from unnest(ns, probe) with ordinality as x(n, pr, i)
                                  where not x.pr order by x.n desc, x.i loop
                            if t_maxcs[j] * (1 + groundkit._slack()) <= budget then
                                taus[j] := t_maxcs[j] * (1 + groundkit._slack());
                                budget := budget - taus[j];
                            end if;
                        end loop;
                        select array_agg(case when x.pr or x.tau is not null then x.tau
                                              else budget * x.mc / nullif(o.mc, 0) end order by x.i)
                          into taus
                          from unnest(probe, taus, t_maxcs) with ordinality as x(pr, tau, mc, i)
                         cross join (select sum(y.mc) as mc from unnest(probe, taus, t_maxcs) as y(pr, tau, mc)
                                      where not y.pr and y.tau is null) o;
                        -- D's size before pass 1 is paid for: at most the postings at or above
                        -- each read term's share (from the sketches, or counted), which pass 1
                        -- reads. Over a fifth of the ranges' postings: one pass instead (pass 2
                        -- would save less than pass 1 costs; a pass 1 stopped there, as until
                        -- revision 0004, cost as much as a merged read of whole lists).
                        est_d := 0;
                        if _search_pruned.strategy is distinct from 'shares' then
                            for j in select r.i from unnest(rd) as r(i) where taus[r.i] < t_maxcs[r.i] loop
                                d_cut := greatest(cuts[j], groundkit._imp_cut(taus[j] / t_ws[j], rho));
                                select z.n, z.keys into n_sk, sk_keys
                                  from groundkit._sketched_size(t_terms[j], d_cut, buckets) z;
                                rest_keys := array(select b from unnest(buckets) as b where b <> all (sk_keys));
                                select count(*) into n_one
                                  from (select 1 from groundkit.postings p
                                         where p.term = t_terms[j] and p.vis_key = any (rest_keys) and p.imp >= d_cut
                                         limit greatest(0, floor(n_big / 5) + 1 - est_d - coalesce(ceil(n_sk), 0))::bigint) x;
                                est_d := est_d + coalesce(n_sk, 0) + n_one;
                                exit when est_d > n_big / 5;
                            end loop;
                        end if;
                        raise debug 'groundkit pruned: threshold D estimated at % of % postings', est_d, n_big;
                        if est_d <= n_big / 5 then
                            -- (Not cut short: D is whole, however far the estimate was off, for
                            -- sketches can be stale. A chunk may be in D twice: harmless for the
                            -- hashed filter, cheaper than a distinct.)
                            select coalesce(array_agg(s.chunk_id), '{}'), count(*) into d_ids, n_one
                              from (select p.chunk_id
                                      from unnest(t_terms, t_ws, cuts, probe, taus) as x(term, w, cut, pr, tau)
                                      join groundkit.postings p
                                        on p.term = x.term and p.vis_key = any (buckets)
                                       and p.imp >= greatest(x.cut, groundkit._imp_cut(x.tau / x.w, rho))
                                     where not x.pr
                                       and x.w * groundkit._tf_part(p.tf, p.doc_len, v_k1, v_b, v_avgdl) >= x.tau) s;
                            raise debug 'groundkit pruned: threshold shares % D % of % postings, two passes', taus, n_one, n_big;
                        end if;
                    end if;
                end if;
                if e_one or not incr then
                    -- A joined read (below) also looks up the first probed term (the largest
                    -- maximum) when that term has bits and the probe steps would use them: the
                    -- probe steps then start at the next term (docs/bm25.md, "The first probe
                    -- inside the joined read").
                    if joined and not merged and d_ids is null then
                        fused := (select x.i from unnest(t_maxcs, probe) with ordinality as x(mc, pr, i)
                                   where x.pr order by x.mc desc, x.i limit 1);
                        bm := null;
                        if fused is not null then
                            select b.words, b.w_max into bm, bw from groundkit._probe_bits(t_terms[fused], t_dfs[fused]) b;
                        end if;
                        if bm is null then
                            fused := null;
                        end if;
                    end if;
                    if d_ids is not null then
                        -- EXECUTE: planned with D as a constant, so that "= any" is a hashed filter
                        -- (chunk_id + 0: not an index condition, so the ranges are read in impact
                        -- order and filtered, not looked up chunk by chunk in the primary key).
                        execute 'with q as (
                                     select x.term, x.w, x.cut
                                       from unnest($1::text[], $2::double precision[], $3::double precision[],
                                                   $4::boolean[]) as x(term, w, cut, pr)
                                      where not x.pr
                                 ),
                                 cand as (
                                     select p.chunk_id,
                                            sum(q.w * groundkit._tf_part(p.tf, p.doc_len, $5, $6, $7)) as known,
                                            max(p.doc_len) as dl
                                       from q
                                       join groundkit.postings p
                                         on p.term = q.term and p.vis_key = any ($8) and p.imp >= q.cut
                                      where p.chunk_id + 0 = any ($9)
                                      group by p.chunk_id
                                 )
                                 select coalesce(array_agg(c.chunk_id) filter (where c.known + $10 >= $11), ''{}''),
                                        coalesce(array_agg(c.known) filter (where c.known + $10 >= $11), ''{}''),
                                        coalesce(array_agg(c.dl) filter (where c.known + $10 >= $11), ''{}'')
                                   from cand c'
                          into c_ids, c_known, c_dl
                          using t_terms, t_ws, cuts, probe, v_k1, v_b, v_avgdl, buckets, d_ids, p_max, thr_f;
                        -- The chunks read, for "fewer than k" below: at least the longest range.
                        n_read := n_long;
                    elsif merged then
                        -- One index-only scan of the primary key per term, each in chunk-id order,
                        -- merged (Merge Append) and summed chunk by chunk (GroupAggregate): no hash
                        -- table over hundreds of thousands of chunks. Long: in four pieces, cut at
                        -- the quarters of the range from the least to the greatest chunk id, in
                        -- parallel processes when two workers may be planned (with one, the planner
                        -- keeps every piece in one process; docs/bm25.md, "Merged reads in
                        -- parallel"). Each process takes the next piece left when it is done, so a
                        -- process slowed by another tenant of its CPU, or a piece that holds more
                        -- of the postings, delays the read less than with two halves ("Four pieces
                        -- instead of two").
                        -- Partner bits (docs/bm25.md, "Partner bits in merged reads"): the postings
                        -- of a read term that cannot reach thr_f alone are read only for the chunks
                        -- whose bit of another read term is set (or that lie above the bits); the
                        -- others could not be kept. When every read term has bits; for a term of
                        -- 5,000 postings or more in its range, when the other read terms are in
                        -- fewer than half the chunks by their document frequencies (with 'merge' and
                        -- 'pieces', which the tests run, whatever the sizes).
                        m_filter := null;
                        select min(tb.w_max), count(*) into m_wmax, m_nbits
                          from groundkit.term_bits tb
                         where tb.term = any (array(select t_terms[u.i] from unnest(rd) as u(i))) and tb.bits is not null;
                        if m_nbits = cardinality(rd) then
                            m_filter := array(
                                select x.i = any (rd) and t_maxcs[x.i] + p_max < thr_f
                                       and (_search_pruned.strategy in ('merge', 'pieces')
                                            or (coalesce(ns[x.i], 0) >= 5000
                                                and (select coalesce(sum(t_dfs[u.i]), 0) from unnest(rd) as u(i)
                                                      where u.i <> x.i) < 0.5 * m_wmax))
                                  from generate_series(1, nt) as x(i)
                                 order by x.i);
                            if true = any (m_filter) then
                                raise debug 'groundkit pruned: threshold merged read tests partner bits for %',
                                    array(select t_terms[x.i] from generate_series(1, nt) as x(i) where m_filter[x.i]);
                            else
                                m_filter := null;
                            end if;
                        end if;
                        if _search_pruned.strategy = 'pieces'
                           or (n_big >= groundkit._parallel_min() and current_setting('max_parallel_workers_per_gather')::integer >= 2) then
                            m_splits := array(select distinct m.lo + (m.hi - m.lo) * g.i / groundkit._parallel_pieces() as x
                                                from (select min(c.chunk_id) as lo, max(c.chunk_id) as hi
                                                        from groundkit.chunks c) m
                                               cross join generate_series(1, groundkit._parallel_pieces() - 1) as g(i)
                                               where m.lo is not null
                                               order by x);
                            select * into c_ids, c_known, c_dl
                              from groundkit._merged_read_parallel(t_terms, t_ws, buckets, v_k1, v_b, v_avgdl,
                                                                   p_max, thr_f, cuts, rd, m_splits,
                                                                   m_filter, m_wmax);
                        else
                            m_splits := '{}';
                            select * into c_ids, c_known, c_dl
                              from groundkit._merged_read(t_terms, t_ws, buckets, v_k1, v_b, v_avgdl,
                                                          p_max, thr_f, cuts, rd, m_splits,
                                                          m_filter, m_wmax);
                        end if;
                        -- The chunks read, for "fewer than k" below: at least the longest range.
                        n_read := greatest(cardinality(c_ids), n_long);
                        raise debug 'groundkit pruned: threshold merges % lists in % pieces', cardinality(rd),
                            cardinality(m_splits) + 1;
                    elsif joined then
                        -- One or two terms read (docs/bm25.md, "How a round reads its ranges"): a
                        -- term's range holds a chunk at most once, so the two ranges are joined by
                        -- chunk id (a full join: a chunk may be in one of them only) and nothing is
                        -- grouped. The same chunks and values as the one pass below; a hash join
                        -- costs less than half of what grouping costs a posting. (A full join has
                        -- no nested-loop plan: no per-chunk index probes.) A chunk found in one
                        -- range only has known <= w * _imp_ub(imp) there, so it cannot be kept when
                        -- its impact is below hi = _imp_cut((thr_f - p_max) / w): such rows are
                        -- dropped as the join emits them, before their values are computed (most
                        -- rows, when a chunk needs both terms; about a third of the statement).
                        w_a := t_ws[rd[1]];
                        w_b := t_ws[rd[2]];
                        w_f := t_ws[fused];
                        hi_a := groundkit._imp_cut((thr_f - p_max) / w_a, rho) * (1 - groundkit._slack());
                        hi_b := groundkit._imp_cut((thr_f - p_max) / w_b, rho) * (1 - groundkit._slack());
                        -- (One range alone is read without the join: the first branch of the union
                        -- below; each branch runs behind a one-time filter on the number of read
                        -- terms, docs/bm25.md.)
                        -- With a fused term, as in the probe steps: the chunks the read keeps are
                        -- tested against its bits as the join emits them, looked up only where the
                        -- bit is set, and dropped when their sum then falls below thr_f less the
                        -- rest. Without one (null), the read alone.
                        rest1 := p_max - coalesce(t_maxcs[fused], 0);
                        select coalesce(array_agg(y.id) filter (where y.known + rest1 >= thr_f), '{}'),
                               coalesce(array_agg(y.known) filter (where y.known + rest1 >= thr_f), '{}'),
                               coalesce(array_agg(y.dl) filter (where y.known + rest1 >= thr_f), '{}'),
                               count(*) filter (where y.kept and not y.absent), count(*) filter (where y.kept),
                               count(*)
                          into c_ids, c_known, c_dl, b_looked, b_cands, n_new
                          from (select z.id, z.dl, z.kept, x.absent,
                                       z.known + case when fused is null or not z.kept or x.absent then 0
                                                      else coalesce((select w_f * groundkit._tf_part(pp.tf, z.dl, v_k1, v_b, v_avgdl)
                                                                       from groundkit.postings pp
                                                                      where pp.term = t_terms[fused] and pp.chunk_id = z.id), 0)
                                                 end as known
                                  from (select w.id, w.dl, w.known, w.known + p_max >= thr_f as kept
                                          from (select a.chunk_id as id, a.doc_len as dl,
                                                       w_a * groundkit._tf_part(a.tf, a.doc_len, v_k1, v_b, v_avgdl)
                                                           as known
                                                  from groundkit.postings a
                                                 where cardinality(rd) = 1 and a.term = t_terms[rd[1]]
                                                   and a.vis_key = any (buckets) and a.imp >= cuts[rd[1]]
                                                   and a.imp >= hi_a and a.imp < e_hi
                                                union all
                                                select coalesce(a.chunk_id, b.chunk_id) as id,
                                                       coalesce(a.doc_len, b.doc_len) as dl,
                                                       coalesce(w_a * groundkit._tf_part(a.tf, a.doc_len, v_k1, v_b, v_avgdl), 0)
                                                       + coalesce(w_b * groundkit._tf_part(b.tf, b.doc_len, v_k1, v_b, v_avgdl), 0)
                                                           as known
                                                  from (select p.chunk_id, p.tf, p.doc_len, p.imp from groundkit.postings p
                                                         where cardinality(rd) = 2 and p.term = t_terms[rd[1]]
                                                           and p.vis_key = any (buckets) and p.imp >= cuts[rd[1]]) a
                                                  full join (select p.chunk_id, p.tf, p.doc_len, p.imp from groundkit.postings p
                                                              where cardinality(rd) = 2 and p.term = t_terms[rd[2]]
                                                                and p.vis_key = any (buckets) and p.imp >= cuts[rd[2]]) b
                                                    on a.chunk_id = b.chunk_id
                                                 where (b.chunk_id is not null or a.imp >= hi_a)
                                                   and (a.chunk_id is not null or b.imp >= hi_b)
                                                offset 0) w) z  -- (known computed once a row)
                                 cross join lateral (
                                       select z.id <= bw and (bm[(z.id >> 6) + 1] >> (z.id & 63)::integer) & 1 = 0 as absent) x
                                offset 0) y;
                        -- The chunks read, for "fewer than k" below: the rows dropped were read too.
                        -- (An extension's: the new postings, counted above.)
                        if e_one then
                            n_read := n_read + dn;
                            raise debug 'groundkit pruned: threshold extends one range';
                        else
                            n_read := greatest(n_new, n_long);
                            raise debug 'groundkit pruned: threshold joins % ranges', cardinality(rd);
                        end if;
                        if fused is not null then
                            raise debug 'groundkit pruned: threshold term bits of % leave % of % candidates to look up',
                                t_terms[fused], b_looked, b_cands;
                        end if;
                    else
                        with q as (
                            select x.term, x.w, x.cut
                              from unnest(t_terms, t_ws, cuts, probe) as x(term, w, cut, pr)
                             where not x.pr
                        ),
                        cand as (
                            select p.chunk_id,
                                   sum(q.w * groundkit._tf_part(p.tf, p.doc_len, v_k1, v_b, v_avgdl)) as known,
                                   max(p.doc_len) as dl
                              from q
                              join groundkit.postings p on p.term = q.term and p.vis_key = any (buckets) and p.imp >= q.cut
                             group by p.chunk_id
                        )
                        select coalesce(array_agg(c.chunk_id) filter (where c.known + p_max >= thr_f), '{}'),
                               coalesce(array_agg(c.known) filter (where c.known + p_max >= thr_f), '{}'),
                               coalesce(array_agg(c.dl) filter (where c.known + p_max >= thr_f), '{}'),
                               count(*)
                          into c_ids, c_known, c_dl, n_read
                          from cand c;
                    end if;
                    if e_one then
                        e_reads := e_reads + dn;
                        e_cand := e_cand + case when fused is not null then b_cands else cardinality(c_ids) end;
                        raise debug 'groundkit pruned: threshold guess % (final %) cuts % extends the last round by % postings, % candidates',
                            guess, final, cuts, dn, cardinality(c_ids);
                    else
                        raise debug 'groundkit pruned: threshold guess % (final %) cuts % range sizes % probed % candidates %',
                            guess, final, cuts, ns, probe, cardinality(c_ids);
                        e_reads := n_big;
                        e_counted := (select coalesce(sum(least(x.n, groundkit._count_cap())), 0) from unnest(ns, cuts) as x(n, cut) where x.cut > 0);
                        -- (the candidates the read gave, before any probe)
                        e_cand := case when fused is not null then b_cands else cardinality(c_ids) end;
                    end if;
                end if;
                -- (The candidates' arrays are unnested in select lists, in step: a set-returning
                -- function in FROM puts every row in a tuplestore first, ~0.08 us a row and array
                -- against ~0.03; docs/bm25.md, "Arrays unnested in select lists".)
                rest := p_max;
                for j in select x.i from unnest(t_maxcs, probe) with ordinality as x(mc, pr, i)
                          where x.pr order by x.mc desc, x.i loop
                    exit when cardinality(c_ids) = 0;
                    rest := rest - t_maxcs[j];
                    continue when j = fused;  -- (looked up by the joined read)
                    -- (a term's bits, when it has them and fewer than half the chunks hold it)
                    bm := null;
                    w_f := t_ws[j];
                    select b.words, b.w_max into bm, bw from groundkit._probe_bits(t_terms[j], t_dfs[j]) b;
                    -- Two ways to look t up for every candidate (the same values). Candidates dense
                    -- in t's list (at least one per 200 of its postings): one primary-key scan for
                    -- them all (= any walks the sorted ids, several to a leaf page), joined to them
                    -- by a group by, which no plan turns into a nested loop. Sparse: one lookup per
                    -- candidate, in id order (neighbouring lookups share index pages); there = any
                    -- costs more, reading most of a leaf page per id (measured, docs/bm25.md).
                    if bm is not null then
                        -- Term bits (docs/bm25.md, "Term bits"): a chunk the bits say does not hold t
                        -- is not looked up (its known part stays); the others are, one at a time.
                        -- (Chunks above w_max, written since the bits were made, are looked up.)
                        select coalesce(array_agg(z.id) filter (where z.known + rest >= thr_f), '{}'),
                               coalesce(array_agg(z.known) filter (where z.known + rest >= thr_f), '{}'),
                               coalesce(array_agg(z.dl) filter (where z.known + rest >= thr_f), '{}'),
                               count(*) filter (where not z.absent), count(*)
                          into c_ids, c_known, c_dl, b_looked, b_cands
                          from (select v.id, v.dl, y.absent,
                                       v.known + case when y.absent then 0
                                                      else coalesce((select w_f * groundkit._tf_part(pp.tf, v.dl, v_k1, v_b, v_avgdl)
                                                                       from groundkit.postings pp
                                                                      where pp.term = t_terms[j] and pp.chunk_id = v.id), 0)
                                                 end as known
                                  from (select unnest(c_ids) as id, unnest(c_known) as known, unnest(c_dl) as dl) v
                                 cross join lateral (
                                       select v.id <= bw and (bm[(v.id >> 6) + 1] >> (v.id & 63)::integer) & 1 = 0 as absent) y
                                offset 0) z;
                        raise debug 'groundkit pruned: threshold term bits of % leave % of % candidates to look up',
                            t_terms[j], b_looked, b_cands;
                    elsif cardinality(c_ids)::double precision * 200 >= t_dfs[j] then
                        select coalesce(array_agg(z.id), '{}'), coalesce(array_agg(z.known), '{}'),
                               coalesce(array_agg(z.dl), '{}')
                          into c_ids, c_known, c_dl
                          from (select g.id, max(g.dl) as dl,
                                       max(g.known) + coalesce(w_f * groundkit._tf_part(max(g.tf), max(g.dl), v_k1, v_b, v_avgdl),
                                                               0) as known
                                  from (select unnest(c_ids) as id, unnest(c_known) as known, unnest(c_dl) as dl,
                                               null::integer as tf
                                        union all
                                        select p1.chunk_id, null, null, p1.tf
                                          from groundkit._postings_of(t_terms[j], c_ids) p1) g
                                 group by g.id) z
                         where z.known + rest >= thr_f;
                    else
                        select coalesce(array_agg(z.id), '{}'), coalesce(array_agg(z.known), '{}'),
                               coalesce(array_agg(z.dl), '{}')
                          into c_ids, c_known, c_dl
                          from (select u.id, u.dl,
                                       u.known + coalesce(w_f * groundkit._tf_part(pp.tf, u.dl, v_k1, v_b, v_avgdl), 0) as known
                                  from (select unnest(c_ids) as id, unnest(c_known) as known, unnest(c_dl) as dl
                                         order by 1) u
                                  left join lateral (select p1.tf from groundkit.postings p1
                                                      where p1.term = t_terms[j] and p1.chunk_id = u.id) pp on true) z
                         where z.known + rest >= thr_f;
                    end if;
                end loop;

                if incr then
                    -- With the last round's kept chunks. A chunk in both has two values, both at
                    -- most its score; the new one is exact where it matters: keep the larger.
                    -- (Lengths are not carried: kept chunks are probed already; c_dl is set anew
                    -- by the next round before it is read.)
                    select coalesce(array_agg(z.id), '{}'), coalesce(array_agg(z.known), '{}')
                      into c_ids, c_known
                      from (select u.id, max(u.known) as known
                              from (select unnest(e_ids), unnest(e_known)
                                    union all
                                    select unnest(c_ids), unnest(c_known)) as u(id, known)
                             group by u.id) z;
                end if;

                -- theta: the k-th score among the kept candidates the reader may see, best-first.
                -- Every chunk scoring at least the guess is kept with its exact score; the others'
                -- values are lower bounds of theirs.
                select coalesce(min(z.score), '-infinity'), count(*) into theta, n_vis
                  from (select s.score
                          from (select unnest(c_ids) as id, unnest(c_known) as score
                                 order by 2 desc offset 0) s
                         where exists (select 1 from groundkit._visible_chunk(s.id, v_rank, v_member,
                                                                              _search_pruned.content_types,
                                                                              _search_pruned.space_ids))
                         limit _search_pruned.k) z;
                -- Done when this round is complete at level theta: the probed terms' maxima sum
                -- below it, the filter kept everything reaching it, and no list read to a cut has a
                -- posting between the impact theta needs and the cut (then a chunk scoring >= theta
                -- was read wherever it was needed). Always so in the final round (guess = x_lb).
                -- e_gap: all of that but the last, so that only a gap can make the round fail.
                e_gap := n_vis >= _search_pruned.k and theta >= p_max * (1 + groundkit._slack()) and theta >= thr_f;
                done := e_gap
                        and not exists (
                            select 1
                              from unnest(t_terms, t_ws, t_maxcs, cuts, probe) as x(term, w, mc, cut, pr)
                             where not x.pr and x.cut > 0
                               and exists (select 1 from groundkit.postings p
                                            where p.term = x.term and p.vis_key = any (buckets)
                                              and p.imp < x.cut
                                              and p.imp >= groundkit._imp_cut((theta * (1 - groundkit._slack()) - (tot - x.mc)) / x.w, rho)));
                raise debug 'groundkit pruned: threshold theta % visible % done %', theta, n_vis, done;
                if done then
                    return query
                    select z.id, z.score
                      from (select u.id, u.score, v.object_id, v.chunk_seq
                              from (select unnest(c_ids) as id, unnest(c_known) as score) u
                             cross join lateral groundkit._visible_chunk(u.id, v_rank, v_member,
                                                                         _search_pruned.content_types,
                                                                         _search_pruned.space_ids) v
                             where u.score >= theta
                            union all
                            select p.id, p.score, p.object_id, p.chunk_seq
                              from unnest(pend_ids, pend_scores, pend_obj, pend_seq)
                                   as p(id, score, object_id, chunk_seq)) z
                     order by z.score desc, z.object_id, z.chunk_seq
                     limit _search_pruned.k;
                    return;
                end if;
                exit threshold when final;  -- cannot happen (see above); the scan, to be safe
                -- What a next round may extend: this round's kept chunks and where they were cut
                -- (e_gap above: whether the round failed only by a gap).
                e_ids := c_ids;
                e_known := c_known;
                e_cuts := cuts;
                e_thr := thr_f;
                -- Too high. k visible kept values are a lower bound (they are lower bounds of real
                -- scores); the next guess is that or 0.8 of this one. Without them, x_lb from the
                -- lists' tops if it is not known yet.
                if n_vis >= _search_pruned.k then
                    x_lb := greatest(x_lb, theta);
                elsif x_pending then
                    select greatest(x_lb, t.lb) into x_lb
                      from groundkit._top_lb(t_terms, t_ws, buckets, x_depth, x_cands, v_k1, v_b, v_avgdl, v_rank, v_member,
                                             _search_pruned.content_types, _search_pruned.space_ids, _search_pruned.k) t;
                    -- and from a short list, when this round read 50,000 postings or more (as above)
                    if s_j is not null and (select coalesce(sum(x.n), 0) from unnest(ns, probe) as x(n, pr) where not x.pr) >= groundkit._short_min() then
                        x_lb := groundkit._short_lb(t_terms, t_ws, t_maxcs, s_j, buckets, x_cands, v_k1, v_b,
                                                    v_avgdl, v_rank, v_member, _search_pruned.content_types,
                                                    _search_pruned.space_ids, _search_pruned.k, x_lb);
                    end if;
                    x_pending := false;
                    raise debug 'groundkit pruned: threshold x_lb % from the lists'' tops, after a round that kept % visible chunks',
                        x_lb, n_vis;
                end if;
                guess := greatest(x_lb, groundkit._guess_next() * guess);
                if n_read < _search_pruned.k then
                    -- the terms read hold fewer than k chunks: probe fewer terms next time
                    guess := greatest(x_lb, least(guess, p_max * (1 - groundkit._slack())));
                end if;
                final := guess <= x_lb;
                if not final and guess < groundkit._guess_floor() * tot then
                    final := true;
                    guess := x_lb;
                    exit threshold when guess = '-infinity';
                end if;
            end loop;
        end;
        perform set_config('plan_cache_mode', 'auto', true);
        v_strategy := 'scan';
    end if;

    if v_strategy = 'scan' then
        raise debug 'groundkit pruned: scan of % postings', (select sum(d) from unnest(dfs) as d);
        return query
        with q as (
            select x.term, x.w from unnest(terms, ws) as x(term, w)
        ),
        scored as materialized (
            select p.chunk_id, sum(q.w * groundkit._tf_part(p.tf, p.doc_len, v_k1, v_b, v_avgdl)) as score
              from q
              join groundkit.postings p on p.term = q.term and p.vis_key = any (buckets)
             group by p.chunk_id
        ),
        -- theta: the k-th score among chunks the reader may see, checked best-first
        top as (
            select s.score
              from (select sc.chunk_id, sc.score from scored sc order by sc.score desc offset 0) s
             where exists (select 1 from groundkit._visible_chunk(s.chunk_id, v_rank, v_member,
                                                                  _search_pruned.content_types,
                                                                  _search_pruned.space_ids))
             limit _search_pruned.k
        ),
        theta as (
            select case when count(*) < _search_pruned.k then '-infinity'::double precision
                        else min(t.score) end as t
              from top t
        )
        select z.chunk_id, z.score
          from (select s.chunk_id, s.score, v.object_id, v.chunk_seq
                  from scored s
                 cross join theta
                 cross join lateral groundkit._visible_chunk(s.chunk_id, v_rank, v_member,
                                                             _search_pruned.content_types,
                                                             _search_pruned.space_ids) v
                 where s.score >= theta.t
                union all
                select p.id, p.score, p.object_id, p.chunk_seq
                  from unnest(pend_ids, pend_scores, pend_obj, pend_seq) as p(id, score, object_id, chunk_seq)) z
         order by z.score desc, z.object_id, z.chunk_seq
         limit _search_pruned.k;
        return;
    end if;

    -- The pruned rounds' statements with generic plans, planned once per session: with custom
    -- plans (what auto keeps choosing for them, their generic costs being estimated high)
    -- planning was about a third of a one-term query (docs/bm25.md, "Generic plans for the
    -- pruned rounds"). Local to this call: the function's own plan_cache_mode clause restores
    -- the setting when it returns.
    perform set_config('plan_cache_mode', 'force_generic_plan', true);
    -- start_depth is for tests: 1 forces many rounds on a small corpus.
    depths := array_fill(greatest(1, coalesce(_search_pruned.start_depth, greatest(64, 4 * _search_pruned.k))),
                         array[cardinality(terms)]);

    loop
        -- Deepen (every round but the first). Exactness does not depend on which lists are
        -- deepened, only on bnd bounding what is unread; termination needs one unexhausted list
        -- deepened per round. Per-term depth, MaxScore style: with theta_h a lower estimate of
        -- the final k-th score, the terms of smallest bnd whose bnds sum to at most theta_h / 4
        -- keep their depth; the other (essential) terms' lists grow fourfold. A quarter, not
        -- all of theta_h as in MaxScore: this loop stops when the sum of every bnd is <= theta,
        -- so terms left shallow make the others go deeper (docs/bm25.md). No estimate yet:
        -- every unexhausted term grows. The term of largest bnd always grows.
        if not first_round then
            select array_agg(case when e.grow then least(e.d::bigint * 4, 1000000000)::integer
                                  else e.d end order by e.i)
              into depths
              from (select x.i, x.d,
                           x.bnd > 0
                           and (theta_h is null
                                or sum(x.bnd) over (order by x.bnd, x.i
                                                    rows between unbounded preceding and current row)
                                   > 0.25 * theta_h
                                or x.bnd >= max(x.bnd) over ()) as grow
                      from unnest(depths, bnds) with ordinality as x(d, bnd, i)) e;
        end if;
        first_round := false;

        with q as (
            select x.i, x.term, x.w from unnest(terms, ws) with ordinality as x(term, w, i)
        ),
        p as (
            select q.i, b.vk, x.chunk_id, x.imp, x.doc_len,
                   q.w * groundkit._tf_part(x.tf, x.doc_len, v_k1, v_b, v_avgdl) as s
              from q
             cross join unnest(buckets) as b(vk)
             cross join lateral (
                   select p.chunk_id, p.tf, p.doc_len, p.imp from groundkit.postings p
                    where p.term = q.term and p.vis_key = b.vk
                    order by p.imp desc
                    limit depths[q.i]) x
        ),
        lists as (
            select p.i, p.vk, count(*) as n, min(p.imp) as last_imp from p group by p.i, p.vk
        ),
        bnd as (
            select q.i,
                   q.w * least(1.0, groundkit._imp_ub(coalesce(max(l.last_imp) filter (where l.n >= depths[q.i]), 0), rho)) as bnd
              from q left join lists l on l.i = q.i
             group by q.i, q.w
        ),
        cand as (
            select p.chunk_id, sum(p.s) as lb, sum(b.bnd) as seen_bnd, max(p.doc_len) as dl
              from p join bnd b on b.i = p.i
             group by p.chunk_id
        )
        select (select sum(b.bnd) from bnd b),
               (select array_agg(b.bnd order by b.i) from bnd b),
               (select sum(l.n) from lists l),
               coalesce(array_agg(c.chunk_id), '{}'), coalesce(array_agg(c.lb), '{}'),
               coalesce(array_agg(c.seen_bnd), '{}'), coalesce(array_agg(c.dl), '{}')
          into ub_unseen, bnds, n_read, c_ids, c_lb, c_seen, c_dl
          -- one sort; the arrays follow it (only speed depends on this order: theta_lb below is
          -- a lower bound whichever k visible candidates define it)
          from (select * from cand order by cand.lb desc) c;

        -- The final k-th score cannot exceed the k-th largest upper bound of any candidate: while
        -- that is below ub_unseen this depth cannot decide, so read deeper before scoring anything.
        select min(z.ub) into kth_ub
          from (select u.lb + ub_unseen - u.seen as ub
                  from (select unnest(c_lb) as lb, unnest(c_seen) as seen) u
                 order by 1 desc limit _search_pruned.k) z;
        if ub_unseen > 0 and (cardinality(c_ids) < _search_pruned.k or kth_ub < ub_unseen) then
            raise debug 'groundkit pruned: depths % candidates % ub_unseen % kth_ub %: deeper',
                depths, cardinality(c_ids), ub_unseen, kth_ub;
            continue;
        end if;

        -- theta_lb: the k-th best lower bound among candidates the reader may see, checked
        -- against the live predicate best-first until k pass, in slices of the sorted arrays
        -- (a broad reader needs few checks; sorting every candidate again would cost more).
        n_vis := 0;
        theta_lb := null;
        lo := 1;
        step := 4 * _search_pruned.k;
        while n_vis < _search_pruned.k and lo <= cardinality(c_ids) loop
            select count(*), min(z.lb) into cnt, mn
              from (select s.lb
                      from (select u.id, u.lb
                              from unnest(c_ids[lo:lo + step - 1], c_lb[lo:lo + step - 1])
                                   with ordinality as u(id, lb, ord)
                             order by u.ord offset 0) s
                     where exists (
                           select 1 from groundkit._visible_chunk(s.id, v_rank, v_member,
                                                                  _search_pruned.content_types,
                                                                  _search_pruned.space_ids))
                     limit _search_pruned.k - n_vis) z;
            n_vis := n_vis + cnt;
            theta_lb := least(theta_lb, mn);
            lo := lo + step;
            step := step * 4;
        end loop;

        if n_vis >= _search_pruned.k then
            theta_h := greatest(theta_h, theta_lb);
        end if;
        if n_vis < _search_pruned.k then
            if ub_unseen > 0 then
                continue;
            end if;
            theta_lb := '-infinity';
        end if;

        -- The survivors: candidates with ub(c) >= max(theta_lb, ub_unseen). Below theta_lb a
        -- candidate cannot reach the top k (the k visible candidates that define theta_lb survive
        -- and score at least theta_lb). Below ub_unseen it cannot either, if this round ends: it
        -- ends only when the k-th score is >= ub_unseen. In floating point lb + ub_unseen - seen
        -- can come out an ulp below lb for a chunk seen under every term, and pruning it then
        -- would be wrong when it ties the threshold: the unseen part is clamped at 0 and the
        -- threshold has a relative slack of 1e-9.
        -- (Arrays unnested in select lists, as in the threshold rounds.)
        select coalesce(array_agg(u.id), '{}'), coalesce(array_agg(u.dl), '{}')
          into s_ids, s_dl
          from (select unnest(c_ids) as id, unnest(c_lb) as lb, unnest(c_seen) as seen, unnest(c_dl) as dl) u
         where u.lb + greatest(ub_unseen - u.seen, 0) >= greatest(theta_lb, ub_unseen) * (1 - groundkit._slack());
        -- Scoring a survivor costs an index probe per term, reading a posting much less: while
        -- lists remain and the survivors outnumber a quarter of the postings this round read,
        -- read deeper instead (the bounds fall, and with them the survivors). Speed only: every
        -- round may be skipped except the last, when ub_unseen is 0.
        if ub_unseen > 0 and cardinality(s_ids) > greatest(8 * _search_pruned.k, n_read / 4) then
            raise debug 'groundkit pruned: depths % survivors % read %: deeper', depths, cardinality(s_ids), n_read;
            continue;
        end if;

        -- Their exact scores (primary-key lookups), best first.
        select coalesce(array_agg(z.id order by z.score desc), '{}'),
               coalesce(array_agg(z.score order by z.score desc), '{}')
          into a_ids, a_scores
          from (select u.id, sum(q.w * groundkit._tf_part(pp.tf, u.dl, v_k1, v_b, v_avgdl)) as score
                  from (select unnest(s_ids) as id, unnest(s_dl) as dl) u
                 cross join unnest(terms, ws) as q(term, w)
                 join groundkit.postings pp on pp.term = q.term and pp.chunk_id = u.id
                 group by u.id) z;
        -- theta: the k-th score among the survivors the reader may see, the live predicate
        -- checked best-first until k pass. Then the top k, ties at theta broken by the
        -- foundation's order (object_id, chunk_seq).
        select coalesce(min(z.score), '-infinity'), count(*) into theta_lb, n_vis
          from (select u.score
                  from (select x.id, x.score from unnest(a_ids, a_scores) with ordinality as x(id, score, ord)
                         order by x.ord offset 0) u
                 where exists (
                       select 1 from groundkit._visible_chunk(u.id, v_rank, v_member,
                                                              _search_pruned.content_types,
                                                              _search_pruned.space_ids))
                 limit _search_pruned.k) z;
        if n_vis < _search_pruned.k then
            theta_lb := '-infinity';
        end if;
        select array_agg(z.id order by z.score desc, z.object_id, z.chunk_seq),
               array_agg(z.score order by z.score desc, z.object_id, z.chunk_seq)
          into r_ids, r_scores
          from (select u.id, u.score, v.object_id, v.chunk_seq
                  from unnest(a_ids, a_scores) as u(id, score)
                 cross join lateral groundkit._visible_chunk(u.id, v_rank, v_member,
                                                             _search_pruned.content_types,
                                                             _search_pruned.space_ids) v
                 where u.score >= theta_lb
                 order by u.score desc, v.object_id, v.chunk_seq
                 limit _search_pruned.k) z;

        exit when ub_unseen <= 0
               or (cardinality(r_ids) >= _search_pruned.k
                   and r_scores[_search_pruned.k] >= ub_unseen);
        -- theta only grows with depth (the candidate set only grows), so this k-th score is a
        -- lower estimate of the final one.
        if cardinality(r_ids) >= _search_pruned.k then
            theta_h := r_scores[_search_pruned.k];
        end if;
    end loop;

    raise debug 'groundkit pruned: done at depths % with ub_unseen %', depths, ub_unseen;
    if pend_ids is null then
        return query select u.id, u.score from unnest(r_ids, r_scores) as u(id, score);
    else
        return query
        select z.id, z.score
          from (select u.id, u.score, c.object_id, c.chunk_seq
                  from unnest(r_ids, r_scores) as u(id, score)
                  join groundkit.chunks c on c.chunk_id = u.id
                union all
                select p.id, p.score, p.object_id, p.chunk_seq
                  from unnest(pend_ids, pend_scores, pend_obj, pend_seq) as p(id, score, object_id, chunk_seq)) z
         order by z.score desc, z.object_id, z.chunk_seq
         limit _search_pruned.k;
    end if;
end
$$;

create or replace function groundkit.search(
    reader_sub text,
    query text,
    k integer default 10,
    content_types text[] default null,
    space_ids text[] default null)
returns table (
    object_id text,
    object_version bigint,
    chunk_seq integer,
    content_type text,
    space_id text,
    title text,
    content text,
    score double precision,
    start_ms bigint,
    end_ms bigint)
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select c.object_id, c.object_version, c.chunk_seq, o.content_type, o.space_id, o.title,
           c.content, r.score, c.start_ms, c.end_ms
      from groundkit._search_pruned(search.reader_sub, search.query, search.k,
                                    search.content_types, search.space_ids) r
      join groundkit.chunks c on c.chunk_id = r.chunk_id
      join groundkit.objects o on o.object_id = c.object_id
     order by r.score desc, c.object_id, c.chunk_seq
$$;
