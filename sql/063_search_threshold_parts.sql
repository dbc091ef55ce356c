-- The pieces the threshold rounds (sql/064_search_threshold.sql) are made of: range sizes from
-- the sketches, the term bits a probe uses, probes of many chunks at once, the merged read of
-- whole lists, and the two lower bounds on the k-th score (x_lb). Replaceable.


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
    known_sum constant text := 'sum(groundkit._score_part(p.w, p.tf, p.doc_len, $4, $5, $6))';
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

-- x_lb of the threshold rounds: a lower bound on the k-th score of the reader's answer, from
-- real chunks. The best chunks by their partial sums among the top depth postings of every list
-- the reader may read (cands of them) are scored exactly, by primary-key lookups, and checked
-- against the live predicate best-first; the k-th visible score, or -infinity if fewer than k
-- are visible (or depth or cands is 0: then no list is read). docs/bm25.md, "The threshold
-- rounds", "x_lb when a round needs it". One SELECT, with no SET clause, so that it is inlined
-- into the statement that reads it: a call of its own measured about 3 % slower on two-term
-- queries. As for _visible_chunk, every relation is schema-qualified, it is called only from
-- _search_threshold, which pins search_path = pg_catalog, pg_temp, and PUBLIC may not execute it
-- (sql/090_roles.sql).
create or replace function groundkit._top_lb(
    p_terms text[], p_ws double precision[], p_buckets bigint[], p_depth integer, p_cands integer,
    p_k1 double precision, p_b double precision, p_avgdl double precision,
    p_rank integer, p_member text, p_content_types text[], p_space_ids text[], p_k integer,
    p_filter tsquery default null)
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
         order by sum(groundkit._score_part(p.w, p.tf, p.doc_len, p_k1, p_b, p_avgdl)) desc
         limit p_cands
    ),
    scored as (
        select c.chunk_id,
               sum(groundkit._score_part(q.w, pp.tf, c.dl, p_k1, p_b, p_avgdl)) as score
          from cand c
         cross join q
          join groundkit.postings pp on pp.term = q.term and pp.chunk_id = c.chunk_id
         group by c.chunk_id
    )
    select case when count(*) >= p_k then min(z.score) else '-infinity' end
      from (select s.score
              from (select sc.chunk_id, sc.score from scored sc order by sc.score desc offset 0) s
             where exists (select 1 from groundkit._visible_chunk(s.chunk_id, p_rank, p_member,
                                                                  p_content_types, p_space_ids, p_filter))
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
create or replace function groundkit._short_lb(
    p_terms text[], p_ws double precision[], p_maxcs double precision[], p_short integer,
    p_buckets bigint[], p_cands integer,
    p_k1 double precision, p_b double precision, p_avgdl double precision,
    p_rank integer, p_member text, p_content_types text[], p_space_ids text[], p_k integer,
    p_x_lb double precision, p_filter tsquery default null)
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
         order by groundkit._score_part(p_ws[p_short], p.tf, p.doc_len, p_k1, p_b, p_avgdl)
                  -- (in this order: get_bit fails past the end of the bytes)
                  + case when p.chunk_id > v_wmax then v_mc
                         when get_bit(v_bits, p.chunk_id) = 1 then v_mc
                         else 0 end desc
         limit p_cands
    ),
    scored as (
        select c.chunk_id,
               sum(groundkit._score_part(q.w, pp.tf, c.dl, p_k1, p_b, p_avgdl)) as score
          from cand c
         cross join q
          join groundkit.postings pp on pp.term = q.term and pp.chunk_id = c.chunk_id
         group by c.chunk_id
    )
    select case when count(*) >= p_k then min(z.score) else '-infinity' end into lb
      from (select s.score
              from (select sc.chunk_id, sc.score from scored sc order by sc.score desc offset 0) s
             where exists (select 1 from groundkit._visible_chunk(s.chunk_id, p_rank, p_member,
                                                                  p_content_types, p_space_ids, p_filter))
             limit p_k) z;
    if groundkit._debug_allowed() then
        raise debug 'groundkit pruned: threshold x_lb % from the short list of % (by the bits of %), % from the lists'' tops',
            lb, p_terms[p_short], partner, p_x_lb;
    end if;
    return greatest(p_x_lb, lb);
end
$$;

