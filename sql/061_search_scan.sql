-- Search strategy: the scan. Replaceable.
--
-- Reads: every posting of the query's terms in the reader's buckets (the postings table only;
-- the pending part is the planner's), one aggregate.
-- Exact because: every chunk the reader may see has its postings in the reader's buckets, and
-- all of them are scored whole; candidates are checked against the live predicate best-first
-- until k pass (theta, the k-th of those scores), and every visible chunk at or above theta is
-- returned.
-- Picked by the planner (groundkit._search_pruned) for two or more terms when the reader's
-- shared postings of them number at most groundkit._scan_max(terms): one aggregate costs less
-- than any bookkeeping there; by the threshold rounds when they find no lower bound; and by
-- strategy 'scan' or start_depth 0.
--
-- Returns the postings' top k (ties broken by object_id, chunk_seq) with the keys the planner
-- needs to merge them with the pending part's top k.
-- One SELECT with no SET clause, so that it is inlined into the statement that calls it (the
-- planner's, under its plan_cache_mode auto, as before the split; the threshold rounds'
-- fallback, under their generic plans) and costs no call. As for _visible_chunk, every relation is schema-qualified, its
-- callers pin search_path = pg_catalog, pg_temp, and PUBLIC may not execute it.
create or replace function groundkit._search_scan(
    p_terms text[], p_ws double precision[], p_buckets bigint[], p_k1 double precision,
    p_b double precision, p_avgdl double precision, p_rank integer, p_member text,
    p_content_types text[], p_space_ids text[], p_k integer, p_filter tsquery default null)
returns table (chunk_id bigint, score double precision, object_id text, chunk_seq integer)
language sql stable
rows 10
as $$
    with q as (
        select x.term, x.w from unnest(p_terms, p_ws) as x(term, w)
    ),
    scored as materialized (
        select p.chunk_id, sum(groundkit._score_part(q.w, p.tf, p.doc_len, p_k1, p_b, p_avgdl)) as score
          from q
          join groundkit.postings p on p.term = q.term and p.vis_key = any (p_buckets)
         group by p.chunk_id
    ),
    -- theta: the k-th score among chunks the reader may see, checked best-first
    top as (
        select s.score
          from (select sc.chunk_id, sc.score from scored sc order by sc.score desc offset 0) s
         where exists (select 1 from groundkit._visible_chunk(s.chunk_id, p_rank, p_member,
                                                              p_content_types, p_space_ids, p_filter))
         limit p_k
    ),
    theta as (
        select case when count(*) < p_k then '-infinity'::double precision else min(t.score) end as t
          from top t
    )
    -- (offset 0: the join planned on its own, as it was inside the search's union before the
    -- split; under the limit, the planner put the tiers' lookups outermost and ran the rest once
    -- per tier)
    select z.chunk_id, z.score, z.object_id, z.chunk_seq
      from (select s.chunk_id, s.score, v.object_id, v.chunk_seq
              from scored s
             cross join theta
             cross join lateral groundkit._visible_chunk(s.chunk_id, p_rank, p_member, p_content_types, p_space_ids, p_filter) v
             where s.score >= theta.t
            offset 0) z
     order by z.score desc, z.object_id, z.chunk_seq
     limit p_k
$$;
