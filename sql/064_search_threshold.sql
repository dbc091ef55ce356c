-- Search strategy: the threshold rounds, for two or more terms whose lists are long.
-- Replaceable. The pieces they read with are in sql/063_search_threshold_parts.sql.
--
-- Reads: for a guess g of the final k-th score, the ranges of some terms' lists down to their
-- cuts (postings_impact_idx, or the primary key in chunk-id order for whole lists), and
-- primary-key lookups of the other (probed) terms for the candidates those ranges give.
-- Exact because: a chunk scoring at least g that contains term t has, in t's list, an impact
-- of at least cut_t(g) (the other terms add at most their maxima, groundkit._imp_cut). The
-- probed terms' maxima sum below g, so every chunk scoring >= g holds a read term and is found
-- with its exact score. The round is done when k visible chunks reach a level theta >= g less
-- the slack and no read list holds a posting between the impact theta needs and its cut; else
-- the guess was too high: lower it and go again. The final round, at x_lb (a lower bound on the
-- k-th score from real chunks), cannot fail (docs/bm25.md, "The threshold rounds and why they
-- are exact").
-- Picked by the planner (groundkit._search_pruned) for two or more terms whose shared postings
-- number more than groundkit._scan_max(terms), and by strategy 'threshold' ('shares': every
-- round read in two passes; 'merge': every round merged in chunk-id order; 'pieces': the same
-- in pieces, planned for parallel workers), with start_depth as how deep the first lower
-- bound reads (0: none). With no lower bound at all it answers by the scan.
--
-- The round's steps are functions of their own: the range sizes (_threshold_sizes), the choice
-- of probed terms (_threshold_plan), the read (_threshold_read) and the lookups
-- (_threshold_lookups). They pin search_path but not plan_cache_mode, so that they run with
-- this function's generic plans; PUBLIC may not execute them (sql/090_roles.sql). Their
-- parameters keep the names the round uses.

-- ns[t]: how many postings of t's list, in the reader's buckets, are at or above cuts[t]; and
-- the counts kept from round to round (k_cuts, k_ns: where each term was last counted, and its
-- count). Planning only: any value is exact, only speed depends on it.
create or replace function groundkit._threshold_sizes(
    t_terms text[], t_dfs double precision[], cuts double precision[], buckets bigint[],
    inout k_cuts double precision[], inout k_ns bigint[], out ns double precision[])
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    nt integer := cardinality(t_terms);
    j integer;
    n_sk double precision;
    sk_keys bigint[];
    rest_keys bigint[];
    n_one bigint;
    lim bigint;
begin
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
            -- (bucket by bucket, each an index range of (term, vis_key, imp): the generic plan of
            -- "vis_key = any" read the term's whole list by its primary key, and this count runs
            -- again in every round, the sketched lists not being kept from round to round)
            rest_keys := array(select b from unnest(buckets) as b where b <> all (sk_keys));
            lim := greatest(0, groundkit._count_cap() - least(ceil(n_sk), groundkit._count_cap()))::bigint;
            select count(*) into n_one
              from (select 1
                      from unnest(rest_keys) as b(vk)
                     cross join lateral (select 1 from groundkit.postings p
                                          where p.term = t_terms[j] and p.vis_key = b.vk and p.imp >= cuts[j]
                                          limit lim) x
                     limit lim) y;
            k_cuts[j] := null;
            k_ns[j] := null;
            ns[j] := n_sk + n_one;
        else
            if k_cuts[j] is not null and cuts[j] <= k_cuts[j] then
                n_one := k_ns[j];
                if n_one < groundkit._count_cap() and cuts[j] < k_cuts[j] then
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
end
$$;

-- Which terms a round probes (by primary-key lookups) rather than reads down to their cuts:
-- the probed terms' maxima must sum below the round's level thr_g (then every chunk reaching it
-- holds a read term), and of those sets the one of least estimated cost is chosen
-- (groundkit._us_read, _us_probe, _us_bit_test). Also the probed terms' maxima (p_max) and the
-- postings the read terms' ranges hold (n_left). Speed only: any such set is exact.
create or replace function groundkit._threshold_plan(
    t_terms text[], t_ws double precision[], t_maxcs double precision[], t_dfs double precision[],
    t_bw bigint[], ns double precision[], cuts double precision[], buckets bigint[],
    thr_g double precision, final boolean, v_n double precision, rho double precision,
    out probe boolean[], out p_max double precision, out n_left double precision)
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    nt integer := cardinality(t_terms);
    best_probe boolean[];
    best_p_max double precision;
    best_cost double precision;
    best_cand double precision;
    n_probe integer;
    f_j integer;
    est_whole boolean;
    est_cand boolean;
    n_cand double precision;
    l_need double precision;
    cost double precision;
    j integer;
    jj integer;
begin
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
        if groundkit._debug_allowed() then
            raise debug 'groundkit pruned: threshold final round estimated at % candidates', round(best_cand);
        end if;
    end if;
end
$$;

-- A round's read: the ranges of the terms not probed, down to their cuts, summed chunk by chunk;
-- the chunks whose sum plus the probed terms' maxima (p_max) reaches thr_f are kept, with their
-- known parts and lengths. n_read: the chunks read (at least), for "fewer than k". Four ways,
-- the same chunks and values (docs/bm25.md, "How a round reads its ranges"): two passes by
-- shares (long ranges where few chunks can be kept), merged in chunk-id order (long whole
-- lists, groundkit._merged_read), joined (one or two read terms, with the first probed term
-- looked up by its bits in the same statement: fused, which the lookups then skip), or one
-- aggregate. p_force ('shares', 'merge', 'pieces', for tests) forces a way.
create or replace function groundkit._threshold_read(
    t_terms text[], t_ws double precision[], t_maxcs double precision[], t_dfs double precision[],
    cuts double precision[], ns double precision[], probe boolean[], p_max double precision,
    thr_f double precision, buckets bigint[], v_k1 double precision, v_b double precision,
    v_avgdl double precision, rho double precision, p_force text,
    out c_ids bigint[], out c_known double precision[], out c_dl integer[], out n_read bigint,
    out fused integer)
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    nt integer := cardinality(t_terms);
    -- the read terms, by index
    rd integer[];
    n_big double precision;
    n_long bigint;
    n_new bigint;
    n_one bigint;
    -- two passes: each read term's share, D (the chunks that can be kept) and its estimate
    budget double precision;
    taus double precision[];
    d_ids bigint[];
    d_cut double precision;
    est_d double precision;
    lim bigint;
    n_sk double precision;
    sk_keys bigint[];
    rest_keys bigint[];
    joined boolean;
    merged boolean;
    -- merged reads: the split points, and the partner bits (which read terms' postings are
    -- tested, up to which chunk id, and how many read terms have bits)
    m_splits bigint[];
    m_filter boolean[];
    m_wmax bigint;
    m_nbits integer;
    -- joined reads: the read terms' weights as scalars (a subscript in a statement is evaluated
    -- for every row), the impacts below which a one-range row cannot be kept, and the fused
    -- term's bits
    w_a double precision;
    w_b double precision;
    w_f double precision;
    hi_a double precision;
    hi_b double precision;
    rest1 double precision;
    bm bigint[];
    bw bigint;
    b_looked bigint;
    b_cands bigint;
    j integer;
begin
    rd := array(select x.i from unnest(probe) with ordinality as x(pr, i) where not x.pr order by x.i);
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
    merged := case when p_force in ('merge', 'pieces') then true
                   when p_force = 'shares' then false
              else n_big >= groundkit._long_round()
                   and not exists (select 1 from unnest(rd) as r(i) where cuts[r.i] > 0)
                   and 2 * n_big >= (select coalesce(sum(ts.df), 0) from groundkit.term_stats ts
                                      where ts.term in (select t_terms[r.i] from unnest(rd) as r(i)))
              end;
    if (n_big >= groundkit._long_round() or p_force = 'shares') and thr_f - p_max > 1e-4 * abs(thr_f)
       and p_force is distinct from 'merge'
       and p_force is distinct from 'pieces' then
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
        if p_force is distinct from 'shares' then
            for j in select r.i from unnest(rd) as r(i) where taus[r.i] < t_maxcs[r.i] loop
                d_cut := greatest(cuts[j], groundkit._imp_cut(taus[j] / t_ws[j], rho));
                select z.n, z.keys into n_sk, sk_keys
                  from groundkit._sketched_size(t_terms[j], d_cut, buckets) z;
                -- (bucket by bucket, as in _threshold_sizes)
                rest_keys := array(select b from unnest(buckets) as b where b <> all (sk_keys));
                lim := greatest(0, floor(n_big / 5) + 1 - est_d - coalesce(ceil(n_sk), 0))::bigint;
                select count(*) into n_one
                  from (select 1
                          from unnest(rest_keys) as b(vk)
                         cross join lateral (select 1 from groundkit.postings p
                                              where p.term = t_terms[j] and p.vis_key = b.vk and p.imp >= d_cut
                                              limit lim) x
                         limit lim) y;
                est_d := est_d + coalesce(n_sk, 0) + n_one;
                exit when est_d > n_big / 5;
            end loop;
        end if;
        if groundkit._debug_allowed() then
            raise debug 'groundkit pruned: threshold D estimated at % of % postings', est_d, n_big;
        end if;
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
                       and groundkit._score_part(x.w, p.tf, p.doc_len, v_k1, v_b, v_avgdl) >= x.tau) s;
            if groundkit._debug_allowed() then
                raise debug 'groundkit pruned: threshold shares % D % of % postings, two passes', taus, n_one, n_big;
            end if;
        end if;
    end if;
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
                            sum(groundkit._score_part(q.w, p.tf, p.doc_len, $5, $6, $7)) as known,
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
                       and (p_force in ('merge', 'pieces')
                            or (coalesce(ns[x.i], 0) >= 5000
                                and (select coalesce(sum(t_dfs[u.i]), 0) from unnest(rd) as u(i)
                                      where u.i <> x.i) < 0.5 * m_wmax))
                  from generate_series(1, nt) as x(i)
                 order by x.i);
            if true = any (m_filter) then
                if groundkit._debug_allowed() then
                    raise debug 'groundkit pruned: threshold merged read tests partner bits for %',
                        array(select t_terms[x.i] from generate_series(1, nt) as x(i) where m_filter[x.i]);
                end if;
            else
                m_filter := null;
            end if;
        end if;
        if p_force = 'pieces'
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
        if groundkit._debug_allowed() then
            raise debug 'groundkit pruned: threshold merges % lists in % pieces', cardinality(rd),
                cardinality(m_splits) + 1;
        end if;
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
                                      else coalesce((select groundkit._score_part(w_f, pp.tf, z.dl, v_k1, v_b, v_avgdl)
                                                       from groundkit.postings pp
                                                      where pp.term = t_terms[fused] and pp.chunk_id = z.id), 0)
                                 end as known
                  from (select w.id, w.dl, w.known, w.known + p_max >= thr_f as kept
                          from (select a.chunk_id as id, a.doc_len as dl,
                                       groundkit._score_part(w_a, a.tf, a.doc_len, v_k1, v_b, v_avgdl)
                                           as known
                                  from groundkit.postings a
                                 where cardinality(rd) = 1 and a.term = t_terms[rd[1]]
                                   and a.vis_key = any (buckets) and a.imp >= cuts[rd[1]]
                                   and a.imp >= hi_a
                                union all
                                select coalesce(a.chunk_id, b.chunk_id) as id,
                                       coalesce(a.doc_len, b.doc_len) as dl,
                                       coalesce(groundkit._score_part(w_a, a.tf, a.doc_len, v_k1, v_b, v_avgdl), 0)
                                       + coalesce(groundkit._score_part(w_b, b.tf, b.doc_len, v_k1, v_b, v_avgdl), 0)
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
        -- The chunks read, for "fewer than k": the rows dropped were read too.
        n_read := greatest(n_new, n_long);
        if groundkit._debug_allowed() then
            raise debug 'groundkit pruned: threshold joins % ranges', cardinality(rd);
        end if;
        if fused is not null then
            if groundkit._debug_allowed() then
                raise debug 'groundkit pruned: threshold term bits of % leave % of % candidates to look up',
                    t_terms[fused], b_looked, b_cands;
            end if;
        end if;
    else
        with q as (
            select x.term, x.w, x.cut
              from unnest(t_terms, t_ws, cuts, probe) as x(term, w, cut, pr)
             where not x.pr
        ),
        cand as (
            select p.chunk_id,
                   sum(groundkit._score_part(q.w, p.tf, p.doc_len, v_k1, v_b, v_avgdl)) as known,
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
end
$$;

-- The probe steps: each probed term (largest maximum first, the fused one skipped: the read
-- looked it up) looked up for every candidate, which is dropped once its known part plus the
-- maxima of the terms still to probe falls below thr_f. What is left is every chunk that can
-- reach thr_f, with its exact score.
create or replace function groundkit._threshold_lookups(
    inout c_ids bigint[], inout c_known double precision[], inout c_dl integer[],
    t_terms text[], t_ws double precision[], t_maxcs double precision[], t_dfs double precision[],
    probe boolean[], p_max double precision, thr_f double precision, fused integer,
    v_k1 double precision, v_b double precision, v_avgdl double precision)
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    rest double precision;
    j integer;
    bm bigint[];
    bw bigint;
    w_f double precision;
    b_looked bigint;
    b_cands bigint;
begin
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
                                          else coalesce((select groundkit._score_part(w_f, pp.tf, v.dl, v_k1, v_b, v_avgdl)
                                                           from groundkit.postings pp
                                                          where pp.term = t_terms[j] and pp.chunk_id = v.id), 0)
                                     end as known
                      from (select unnest(c_ids) as id, unnest(c_known) as known, unnest(c_dl) as dl) v
                     cross join lateral (
                           select v.id <= bw and (bm[(v.id >> 6) + 1] >> (v.id & 63)::integer) & 1 = 0 as absent) y
                    offset 0) z;
            if groundkit._debug_allowed() then
                raise debug 'groundkit pruned: threshold term bits of % leave % of % candidates to look up',
                    t_terms[j], b_looked, b_cands;
            end if;
        elsif cardinality(c_ids)::double precision * 200 >= t_dfs[j] then
            select coalesce(array_agg(z.id), '{}'), coalesce(array_agg(z.known), '{}'),
                   coalesce(array_agg(z.dl), '{}')
              into c_ids, c_known, c_dl
              from (select g.id, max(g.dl) as dl,
                           max(g.known) + coalesce(groundkit._score_part(w_f, max(g.tf), max(g.dl), v_k1, v_b, v_avgdl),
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
                           u.known + coalesce(groundkit._score_part(w_f, pp.tf, u.dl, v_k1, v_b, v_avgdl), 0) as known
                      from (select unnest(c_ids) as id, unnest(c_known) as known, unnest(c_dl) as dl
                             order by 1) u
                      left join lateral (select p1.tf from groundkit.postings p1
                                          where p1.term = t_terms[j] and p1.chunk_id = u.id) pp on true) z
             where z.known + rest >= thr_f;
        end if;
    end loop;
end
$$;

create or replace function groundkit._search_threshold(
    p_reader_sub text, terms text[], ws double precision[], dfs double precision[], buckets bigint[],
    v_k1 double precision, v_b double precision, v_avgdl double precision, v_n double precision,
    rho double precision, v_rank integer, v_member text, p_content_types text[], p_space_ids text[],
    p_k integer, p_start_depth integer, p_force text, p_filter tsquery default null)
returns table (chunk_id bigint, score double precision, object_id text, chunk_seq integer)
language plpgsql stable
rows 10
set search_path = pg_catalog, pg_temp
-- Generic plans, planned once per session: auto kept choosing custom plans for some of these
-- statements, their generic costs being estimated high (arrays of unknown length), and planned
-- them at every call, with the bits and candidates written into them (docs/bm25.md, "Generic
-- plans for the threshold rounds").
set plan_cache_mode = force_generic_plan
as $$
#variable_conflict use_column
declare
    -- the terms, smallest maximum first: weights, maxima, document frequencies, w_max of the
    -- bits a probe would use (else null)
    t_terms text[];
    t_ws double precision[];
    t_maxcs double precision[];
    t_dfs double precision[];
    t_bw bigint[];
    nt integer;
    tot double precision;
    full_n double precision;
    -- the lower bound on the k-th score, how many chunks and how deep it scores, whether it is
    -- still to be scored, and the short list's term for _short_lb (else null)
    x_lb double precision;
    x_cands integer;
    x_depth integer;
    x_pending boolean;
    s_j integer;
    -- the round: its guess, the levels it cuts at (thr_g) and keeps chunks down to (thr_f)
    guess double precision;
    thr_g double precision;
    thr_f double precision;
    final boolean;
    done boolean;
    cuts double precision[];
    ns double precision[];
    k_cuts double precision[];
    k_ns bigint[];
    probe boolean[];
    p_max double precision;
    n_left double precision;
    -- its candidates, their known parts and lengths, the chunks it read and the fused term
    c_ids bigint[];
    c_known double precision[];
    c_dl integer[];
    n_read bigint;
    fused integer;
    theta double precision;
    n_vis integer;
    -- what each step returned (called in an expression: no statement of their own)
    sized record;
    planned record;
    was_read record;
    looked_up record;
begin
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
    x_cands := p_k
               * case when cardinality(terms) >= 3 and (select sum(d) from unnest(dfs) as d) >= 100000
                      then 8 else 4 end;
    x_depth := greatest(0, coalesce(p_start_depth,
                                    case when cardinality(terms) = 2 then greatest(16, 2 * p_k)
                                         else greatest(64, 4 * p_k) end));
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
                                               p_content_types, p_space_ids,
                                               p_k, p_filter) t)
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
    if groundkit._debug_allowed() then
        raise debug 'groundkit pruned: threshold terms % weights % maxima % x_lb % rho % buckets %',
            t_terms, t_ws, t_maxcs, x_lb, rho, buckets;
    end if;
    loop
        <<plan>>
        loop
            thr_g := guess * (1 - groundkit._slack());
            -- cuts[t]: the least impact a chunk scoring >= guess can have in t's list
            select array_agg(groundkit._imp_cut((thr_g - (tot - x.mc)) / x.w, rho) order by x.i)
              into cuts
              from unnest(t_ws, t_maxcs) with ordinality as x(w, mc, i);
            sized := groundkit._threshold_sizes(t_terms, t_dfs, cuts, buckets, k_cuts, k_ns);
            k_cuts := sized.k_cuts;
            k_ns := sized.k_ns;
            ns := sized.ns;
            if groundkit._debug_allowed() then
                raise debug 'groundkit pruned: threshold counts terms % cuts % counted % sizes % reader %',
                    t_terms, cuts, k_ns, ns, p_reader_sub;
            end if;
            planned := groundkit._threshold_plan(t_terms, t_ws, t_maxcs, t_dfs, t_bw, ns, cuts, buckets,
                                                 thr_g, final, v_n, rho);
            probe := planned.probe;
            p_max := planned.p_max;
            n_left := planned.n_left;
            -- A round that reads half of everything costs about what a round at x_lb costs,
            -- and that one cannot fail: commit to it (x_lb from the lists' tops first, if it
            -- is not known yet).
            exit plan when final or n_left < 0.5 * full_n;
            if x_pending then
                select greatest(x_lb, t.lb) into x_lb
                  from groundkit._top_lb(t_terms, t_ws, buckets, x_depth, x_cands, v_k1, v_b, v_avgdl, v_rank, v_member,
                                         p_content_types, p_space_ids, p_k, p_filter) t;
                -- and from a short list, when the round the final one replaces would read 50,000
                -- postings or more (below that, the 1-6 ms it costs was more than it saved:
                -- docs/bm25.md, "x_lb from a short list")
                if s_j is not null and n_left >= groundkit._short_min() then
                    x_lb := groundkit._short_lb(t_terms, t_ws, t_maxcs, s_j, buckets, x_cands, v_k1, v_b,
                                                v_avgdl, v_rank, v_member, p_content_types,
                                                p_space_ids, p_k, x_lb, p_filter);
                end if;
                x_pending := false;
                if groundkit._debug_allowed() then
                    raise debug 'groundkit pruned: threshold x_lb % from the lists'' tops, for the final round', x_lb;
                end if;
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
        thr_f := case when final then thr_g
                      else greatest(x_lb, groundkit._guess_next() * guess) * (1 - groundkit._slack()) end;
        was_read := groundkit._threshold_read(t_terms, t_ws, t_maxcs, t_dfs, cuts, ns, probe, p_max, thr_f,
                                              buckets, v_k1, v_b, v_avgdl, rho, p_force);
        c_ids := was_read.c_ids;
        c_known := was_read.c_known;
        c_dl := was_read.c_dl;
        n_read := was_read.n_read;
        fused := was_read.fused;
        if groundkit._debug_allowed() then
            raise debug 'groundkit pruned: threshold guess % (final %) cuts % range sizes % probed % candidates %',
                guess, final, cuts, ns, probe, cardinality(c_ids);
        end if;
        looked_up := groundkit._threshold_lookups(c_ids, c_known, c_dl, t_terms, t_ws, t_maxcs, t_dfs, probe,
                                                  p_max, thr_f, fused, v_k1, v_b, v_avgdl);
        c_ids := looked_up.c_ids;
        c_known := looked_up.c_known;
        c_dl := looked_up.c_dl;
        -- theta: the k-th score among the kept candidates the reader may see, best-first.
        -- Every chunk scoring at least the guess is kept with its exact score; the others'
        -- values are lower bounds of theirs.
        select coalesce(min(z.score), '-infinity'), count(*) into theta, n_vis
          from (select s.score
                  from (select unnest(c_ids) as id, unnest(c_known) as score
                         order by 2 desc offset 0) s
                 where exists (select 1 from groundkit._visible_chunk(s.id, v_rank, v_member,
                                                                      p_content_types,
                                                                      p_space_ids, p_filter))
                 limit p_k) z;
        -- Done when this round is complete at level theta: the probed terms' maxima sum
        -- below it, the filter kept everything reaching it, and no list read to a cut has a
        -- posting between the impact theta needs and the cut (then a chunk scoring >= theta
        -- was read wherever it was needed). Always so in the final round (guess = x_lb).
        done := n_vis >= p_k and theta >= p_max * (1 + groundkit._slack()) and theta >= thr_f
                and not exists (
                    select 1
                      from unnest(t_terms, t_ws, t_maxcs, cuts, probe) as x(term, w, mc, cut, pr)
                     where not x.pr and x.cut > 0
                       and exists (select 1 from groundkit.postings p
                                    where p.term = x.term and p.vis_key = any (buckets)
                                      and p.imp < x.cut
                                      and p.imp >= groundkit._imp_cut((theta * (1 - groundkit._slack()) - (tot - x.mc)) / x.w, rho)));
        if groundkit._debug_allowed() then
            raise debug 'groundkit pruned: threshold theta % visible % done %', theta, n_vis, done;
        end if;
        if done then
            return query
            select u.id, u.score, v.object_id, v.chunk_seq
              from (select unnest(c_ids) as id, unnest(c_known) as score) u
             cross join lateral groundkit._visible_chunk(u.id, v_rank, v_member, p_content_types, p_space_ids, p_filter) v
             where u.score >= theta
             order by u.score desc, v.object_id, v.chunk_seq
             limit p_k;
            return;
        end if;
        exit threshold when final;  -- cannot happen (see above); the scan, to be safe
        -- Too high. k visible kept values are a lower bound (they are lower bounds of real
        -- scores); the next guess is that or 0.8 of this one. Without them, x_lb from the
        -- lists' tops if it is not known yet.
        if n_vis >= p_k then
            x_lb := greatest(x_lb, theta);
        elsif x_pending then
            select greatest(x_lb, t.lb) into x_lb
              from groundkit._top_lb(t_terms, t_ws, buckets, x_depth, x_cands, v_k1, v_b, v_avgdl, v_rank, v_member,
                                     p_content_types, p_space_ids, p_k, p_filter) t;
            -- and from a short list, when this round read 50,000 postings or more (as above)
            if s_j is not null and (select coalesce(sum(x.n), 0) from unnest(ns, probe) as x(n, pr) where not x.pr) >= groundkit._short_min() then
                x_lb := groundkit._short_lb(t_terms, t_ws, t_maxcs, s_j, buckets, x_cands, v_k1, v_b,
                                            v_avgdl, v_rank, v_member, p_content_types,
                                            p_space_ids, p_k, x_lb, p_filter);
            end if;
            x_pending := false;
            if groundkit._debug_allowed() then
                raise debug 'groundkit pruned: threshold x_lb % from the lists'' tops, after a round that kept % visible chunks',
                    x_lb, n_vis;
            end if;
        end if;
        guess := greatest(x_lb, groundkit._guess_next() * guess);
        if n_read < p_k then
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

    -- No lower bound (fewer than k visible chunks hold any read term, or none was found): the scan.
    if groundkit._debug_allowed() then
        raise debug 'groundkit pruned: scan of % postings', (select sum(d) from unnest(dfs) as d);
    end if;
    return query select * from groundkit._search_scan(terms, ws, buckets, v_k1, v_b, v_avgdl, v_rank, v_member,
                                                     p_content_types, p_space_ids, p_k, p_filter);
end
$$;
