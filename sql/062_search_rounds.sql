-- Search strategy: the pruned rounds. Replaceable.
--
-- Reads: each (term, visibility bucket) postings list the reader may read, in impact order
-- (postings_impact_idx), depths[t] postings deep per term, deeper round after round; the
-- survivors' exact scores by primary-key lookups.
-- Exact because: after each round, with
--   lb(c)     = the exact contributions of the terms c was seen under;
--   bnd(t)    = a bound on the contribution of any posting of t not read yet (0 once every
--               list of t is exhausted), from the last impact read (groundkit._imp_ub);
--   ub(c)     = lb(c) + bnd of the terms c was not seen under;   ub_unseen = sum of bnd(t),
-- theta_lb is the k-th largest lb among candidates that pass the live permission predicate, and
-- a candidate with ub(c) < max(theta_lb, ub_unseen) cannot be in a top k this round can
-- confirm. The rest (survivors) are scored exactly, then checked against the live predicate
-- best-first; their k-th score theta is final once ub_unseen <= theta: no chunk not read yet
-- can beat it. Otherwise, or when the survivors are too many to be worth scoring yet, the
-- essential terms' depths grow fourfold (MaxScore). Nothing caps any depth, so a selective
-- reader still gets k rows when k exist (docs/bm25.md, "The pruned search and why it is exact").
-- Picked by the planner (groundkit._search_pruned) for one-term queries, however long the
-- list (the top k of one list usually sit in its first few dozen postings by impact), and by
-- strategy 'rounds' or a positive start_depth (how deep the first round reads; 1 forces many
-- rounds on a small corpus).
--
-- Returns the postings' top k (ties broken by object_id, chunk_seq) with the keys the planner
-- needs to merge them with the pending part's top k.
create or replace function groundkit._search_rounds(
    p_terms text[], p_ws double precision[], p_buckets bigint[], p_k1 double precision,
    p_b double precision, p_avgdl double precision, p_rho double precision, p_rank integer,
    p_member text, p_content_types text[], p_space_ids text[], p_k integer, p_start_depth integer,
    p_filter tsquery default null)
returns table (chunk_id bigint, score double precision, object_id text, chunk_seq integer)
language plpgsql stable
rows 10
set search_path = pg_catalog, pg_temp
-- Generic plans, planned once per session: with custom plans (what auto keeps choosing for
-- these statements, their generic costs being estimated high) planning was about a third of a
-- one-term query (docs/bm25.md, "Generic plans for the pruned rounds").
set plan_cache_mode = force_generic_plan
as $$
#variable_conflict use_column
declare
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
    r_obj text[];
    r_seq integer[];
begin
    depths := array_fill(greatest(1, coalesce(p_start_depth, greatest(64, 4 * p_k))),
                         array[cardinality(p_terms)]);

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
            select x.i, x.term, x.w from unnest(p_terms, p_ws) with ordinality as x(term, w, i)
        ),
        p as (
            select q.i, b.vk, x.chunk_id, x.imp, x.doc_len,
                   groundkit._score_part(q.w, x.tf, x.doc_len, p_k1, p_b, p_avgdl) as s
              from q
             cross join unnest(p_buckets) as b(vk)
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
                   q.w * least(1.0, groundkit._imp_ub(coalesce(max(l.last_imp) filter (where l.n >= depths[q.i]), 0), p_rho)) as bnd
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
                 order by 1 desc limit p_k) z;
        if ub_unseen > 0 and (cardinality(c_ids) < p_k or kth_ub < ub_unseen) then
            if groundkit._debug_allowed() then
                raise debug 'groundkit pruned: depths % candidates % ub_unseen % kth_ub %: deeper',
                    depths, cardinality(c_ids), ub_unseen, kth_ub;
            end if;
            continue;
        end if;

        -- theta_lb: the k-th best lower bound among candidates the reader may see, checked
        -- against the live predicate best-first until k pass, in slices of the sorted arrays
        -- (a broad reader needs few checks; sorting every candidate again would cost more).
        n_vis := 0;
        theta_lb := null;
        lo := 1;
        step := 4 * p_k;
        while n_vis < p_k and lo <= cardinality(c_ids) loop
            select count(*), min(z.lb) into cnt, mn
              from (select s.lb
                      from (select u.id, u.lb
                              from unnest(c_ids[lo:lo + step - 1], c_lb[lo:lo + step - 1])
                                   with ordinality as u(id, lb, ord)
                             order by u.ord offset 0) s
                     where exists (
                           select 1 from groundkit._visible_chunk(s.id, p_rank, p_member,
                                                                  p_content_types,
                                                                  p_space_ids, p_filter))
                     limit p_k - n_vis) z;
            n_vis := n_vis + cnt;
            theta_lb := least(theta_lb, mn);
            lo := lo + step;
            step := step * 4;
        end loop;

        if n_vis >= p_k then
            theta_h := greatest(theta_h, theta_lb);
        end if;
        if n_vis < p_k then
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
        if ub_unseen > 0 and cardinality(s_ids) > greatest(8 * p_k, n_read / 4) then
            if groundkit._debug_allowed() then
                raise debug 'groundkit pruned: depths % survivors % read %: deeper', depths, cardinality(s_ids), n_read;
            end if;
            continue;
        end if;

        -- Their exact scores (primary-key lookups), best first.
        select coalesce(array_agg(z.id order by z.score desc), '{}'),
               coalesce(array_agg(z.score order by z.score desc), '{}')
          into a_ids, a_scores
          from (select u.id, sum(groundkit._score_part(q.w, pp.tf, u.dl, p_k1, p_b, p_avgdl)) as score
                  from (select unnest(s_ids) as id, unnest(s_dl) as dl) u
                 cross join unnest(p_terms, p_ws) as q(term, w)
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
                       select 1 from groundkit._visible_chunk(u.id, p_rank, p_member,
                                                              p_content_types,
                                                              p_space_ids, p_filter))
                 limit p_k) z;
        if n_vis < p_k then
            theta_lb := '-infinity';
        end if;
        select array_agg(z.id order by z.score desc, z.object_id, z.chunk_seq),
               array_agg(z.score order by z.score desc, z.object_id, z.chunk_seq),
               array_agg(z.object_id order by z.score desc, z.object_id, z.chunk_seq),
               array_agg(z.chunk_seq order by z.score desc, z.object_id, z.chunk_seq)
          into r_ids, r_scores, r_obj, r_seq
          from (select u.id, u.score, v.object_id, v.chunk_seq
                  from unnest(a_ids, a_scores) as u(id, score)
                 cross join lateral groundkit._visible_chunk(u.id, p_rank, p_member,
                                                             p_content_types,
                                                             p_space_ids, p_filter) v
                 where u.score >= theta_lb
                 order by u.score desc, v.object_id, v.chunk_seq
                 limit p_k) z;

        exit when ub_unseen <= 0
               or (cardinality(r_ids) >= p_k
                   and r_scores[p_k] >= ub_unseen);
        -- theta only grows with depth (the candidate set only grows), so this k-th score is a
        -- lower estimate of the final one.
        if cardinality(r_ids) >= p_k then
            theta_h := r_scores[p_k];
        end if;
    end loop;

    if groundkit._debug_allowed() then
        raise debug 'groundkit pruned: done at depths % with ub_unseen %', depths, ub_unseen;
    end if;
    return query select u.id, u.score, u.object_id, u.chunk_seq
                   from unnest(r_ids, r_scores, r_obj, r_seq) as u(id, score, object_id, chunk_seq);
end
$$;
