-- Maintenance: what is due (the rules `groundkit status`, Groundkit.maintain() and `groundkit
-- worker` follow), and BM25's parameters, which change only with the impacts. Replaceable.

-- What a maintenance pass does now, one row per reason (docs/operations.md):
--   reindex  the impacts' recompute was interrupted; or k1/b changed since the impacts were
--            computed (search is exhaustive until then); or their reference length is off from
--            the chunks' average by reindex_at or more, either way (impact_drift()). At 1M
--            chunks a drift of 2 cost the broad reader 1.21x by mean, one of 1.25 1.07x.
--   analyze  the postings were never analyzed, or the chunks grew by analyze_growth since the
--            last analyze (postings_growth()): at 1M chunks a tenth more unanalyzed made the
--            broad reader's p95 1.20x slower.
-- reindex_at or analyze_growth 0 (or less): that job is never due. NULL: the default.
-- (Merging the pending part is never "due": writers merge it inline; every pass merges it.)
create or replace function groundkit.maintenance_due(analyze_growth double precision default 0.1,
                                                     reindex_at double precision default 1.5)
returns table (job text, reason text)
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select r.job, r.reason
      from groundkit.index_status() s
     cross join lateral (values
        (1, 'reindex', case when s.avgdl_ref_min is not null and s.reindex_pid is null
                            then 'the impacts'' recompute was interrupted' end),
        -- (not while another session recomputes in steps: it is being done, and a second is refused)
        (2, 'reindex', case when s.reindex_pid is not null then null
                            when (s.k1, s.b) is distinct from (s.impact_k1, s.impact_b)
                            then 'search is exhaustive until the impacts are recomputed with the new k1 and b'
                            when s.impact_drift >= coalesce(maintenance_due.reindex_at, 1.5)
                            then format('the impacts'' reference length is off by %sx, so search reads more '
                                        'than it needs', to_char(s.impact_drift, 'FM999999990.00')) end),
        (3, 'analyze', case when s.analyzed_at is null and s.chunks > 0
                            then 'the postings were never analyzed'
                            when s.growth >= coalesce(maintenance_due.analyze_growth, 0.1)
                            then format('the chunks grew %s%% since the last analyze',
                                        to_char(s.growth * 100, 'FM999999990.0')) end)
     ) as r(n, job, reason)
     where r.reason is not null
       and (r.job <> 'reindex' or coalesce(maintenance_due.reindex_at, 1.5) > 0)
       and (r.job <> 'analyze' or coalesce(maintenance_due.analyze_growth, 0.1) > 0)
     order by r.n
$$;

-- Set BM25's k1 and b and recompute every posting's stored impact with them, in one
-- transaction (reindex_impacts()); returns the number of postings rewritten, 0 when the
-- configuration and the impacts already have them. Writers to the postings wait for it;
-- searches go on with the old parameters until it commits. Refused (55P03) while another
-- session recomputes the impacts in steps. The only way to change them: a direct update of
-- groundkit.config is refused (config_bm25_guard), since every search would be exhaustive until
-- the impacts were recomputed.
create or replace function groundkit.set_bm25(k1 double precision, b double precision)
returns bigint
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    -- (NaN compares above every number: it fails the upper bounds)
    if set_bm25.k1 is null or not (set_bm25.k1 > 0 and set_bm25.k1 <= 10) then
        raise exception 'k1 must be a number in (0, 10] (got %)', coalesce(set_bm25.k1::text, 'NULL')
            using errcode = 'GK005';
    end if;
    if set_bm25.b is null or not (set_bm25.b >= 0 and set_bm25.b <= 1) then
        raise exception 'b must be a number in [0, 1] (got %)', coalesce(set_bm25.b::text, 'NULL')
            using errcode = 'GK005';
    end if;
    if exists (select 1 from groundkit.config c cross join groundkit.bm25_impact i
                where c.bm25_k1 = set_bm25.k1 and c.bm25_b = set_bm25.b
                  and i.k1 = set_bm25.k1 and i.b = set_bm25.b) then
        return 0;
    end if;
    perform set_config('groundkit.set_bm25', 'on', true);
    update groundkit.config c set bm25_k1 = set_bm25.k1, bm25_b = set_bm25.b;
    perform set_config('groundkit.set_bm25', 'off', true);
    return groundkit.reindex_impacts();
end
$$;

create or replace function groundkit._config_guard() returns trigger
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    if (new.bm25_k1, new.bm25_b) is distinct from (old.bm25_k1, old.bm25_b)
       and coalesce(current_setting('groundkit.set_bm25', true), '') <> 'on' then
        raise exception 'k1 and b change only through groundkit.set_bm25(k1, b)' using errcode = 'GK007',
            hint = 'groundkit.set_bm25(k1, b) (or `groundkit config set-bm25 K1 B`) recomputes the postings'' '
                   'impacts with them in the same transaction; without that every search would be exhaustive.';
    end if;
    return new;
end
$$;

create or replace trigger config_bm25_guard
    before update on groundkit.config
    for each row execute function groundkit._config_guard();
