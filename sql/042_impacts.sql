-- The impact reference: how far the stored impacts drift from the best reference, and their
-- recompute (in one transaction, or in steps that merges and bulk writes wait for one at a time).
-- Replaceable.

-- The largest average chunk length any reader rank's statistics give (a reader of rank R counts
-- the scopes at or below R), or NULL without shared chunks: reindex_impacts()'s default
-- reference, with which no reader's bound needs widening.
create or replace function groundkit._avgdl_max() returns double precision
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select max(x.total / x.n)
      from (select sum(sum(s.total_len)) over (order by s.scope)::double precision as total,
                   sum(sum(s.n_chunks)) over (order by s.scope)::double precision as n
              from groundkit.scope_stats s group by s.scope) x
     where x.n > 0 and x.total > 0
$$;

-- How far the postings' stored impacts are from the ones search bounds best with: the larger of
-- avgdl / avgdl_ref and avgdl_ref / avgdl, avgdl being _avgdl_max() (1 without shared chunks).
-- A reader whose average chunk length is larger than the reference has its bounds widened
-- (groundkit._imp_ub); a smaller one gets tf-parts below the stored ones. Either way search
-- reads more before it can stop (at 1M chunks, a reference at half the chunks' length made the
-- broad reader 1.21x slower by mean; docs/bm25.md, "The impact reference"). Infinity while
-- config's k1 or b differ from the impacts' (search is exhaustive until reindex_impacts() runs).
-- While a recompute in steps is under way (or was left unfinished), some postings may still be
-- at avgdl_ref_min, and search bounds them all with it: the drift counts that reference too.
-- Groundkit.analyze_postings (groundkit analyze) recomputes the impacts past a threshold of it.
create or replace function groundkit.impact_drift() returns double precision
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select case when c.bm25_k1 is distinct from i.k1 or c.bm25_b is distinct from i.b
                then 'infinity'::double precision
                else coalesce(greatest(a.avgdl / coalesce(i.avgdl_ref_min, i.avgdl_ref), i.avgdl_ref / a.avgdl),
                              1) end
      from groundkit.bm25_impact i
     cross join groundkit.config c
     cross join (select groundkit._avgdl_max() as avgdl) a
$$;

-- Recompute every posting's impact with groundkit.config's k1 and b and the given reference
-- length (default: the largest average chunk length any reader's statistics give, so that no
-- reader's bound needs widening). Search uses the pruned path again once this has run after a
-- change of k1 or b. Rewrites every posting: an administrative operation. Refused (55P03) while
-- another session recomputes in steps: both hold SHARE on the postings, and each would wait for
-- the other's to update them (a deadlock Postgres would break by cancelling one).
create or replace function groundkit.reindex_impacts(avgdl_ref double precision default null)
returns bigint
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    ref double precision := reindex_impacts.avgdl_ref;
    n bigint;
    ip groundkit.bm25_impact;
begin
    if ref is null then
        ref := coalesce(groundkit._avgdl_max(), (select i.avgdl_ref from groundkit.bm25_impact i));
    end if;
    if ref is null or ref <= 0 or ref in ('infinity'::double precision, 'NaN'::double precision) then
        raise exception 'avgdl_ref must be positive and finite (got %)', ref using errcode = 'GK005';
    end if;
    -- (the session recomputing in steps may call this: it holds the recompute already)
    perform groundkit._reindex_claim(false);
    -- Writers and merges take ROW EXCLUSIVE on postings before they read the impact parameters:
    -- every posting written before this commits is here for the update below, and every one
    -- written after uses the new parameters.
    lock table groundkit.postings in share mode;
    lock table groundkit.bm25_impact in exclusive mode;
    -- (every posting is rewritten below: none is left at an older reference, even if a
    -- recompute in steps was under way)
    update groundkit.bm25_impact i set k1 = c.bm25_k1, b = c.bm25_b, avgdl_ref = ref, avgdl_ref_min = null,
                                         reindex_term = null, reindex_chunk = null, reindex_done = false
      from groundkit.config c
    returning i.* into ip;
    update groundkit.postings p
       set imp = groundkit._impact(p.tf, p.doc_len, ip.k1, ip.b, ip.avgdl_ref);
    get diagnostics n = row_count;
    perform groundkit._analyze_sketches((select c.sketch_min_postings from groundkit.config c));  -- the sketches hold impacts
    return n;
end
$$;

-- The recompute in steps (docs/bm25.md, "Recomputing the impacts in steps"): the same result as
-- reindex_impacts(), in short transactions, so that writers to the postings wait for one step
-- (about 100,000 postings) at a time instead of the whole rewrite. Search stays exact meanwhile:
-- it bounds every stored impact with the smallest reference any posting may have
-- (bm25_impact.avgdl_ref_min), and the bound only widens as that reference falls.
-- Groundkit.reindex_impacts() drives it on an autocommit connection; from SQL, call
-- _reindex_begin(), then _reindex_step() until it returns no key, then _reindex_end(), each in
-- its own transaction and all on one session (the first claims the recompute for the session,
-- _reindex_claim, and the last lets go of it). The steps keep their position in bm25_impact
-- (revision 0010), so no range can be skipped, the end is refused before the last step, and an interrupted recompute
-- resumes where it stopped. Needs k1 and b unchanged since the impacts were computed: a posting
-- at other parameters has no such bound (reindex_impacts() rewrites those in one transaction).

-- Who recomputes in steps. A row lock cannot say it: it lasts one transaction, and the steps
-- are many. The recompute's session holds a session-level advisory lock whose key is drawn at
-- random when it begins, and groundkit.locks' row 'reindex' (which only the owner may update)
-- names that backend and that key. The row says who began; the advisory lock says that the
-- session is still there (it goes with the session, as a killed or crashed backend's locks
-- do), so a session that died leaves nothing to clean up. A fixed key would be anyone's to
-- take (pg_advisory_lock is PUBLIC's) and would block every recompute. pg_locks shows the
-- random key while it is held: a role that asks for it then only queues behind the recompute,
-- and gets a key no recompute uses again. (The one way around it: after the recompute's session
-- died without ending, a new backend that the OS gives the same pid takes the old key; it then
-- passes for the holder until it disconnects, or pg_terminate_backend ends it.)

-- The backend recomputing the impacts in steps, if any. NULL with avgdl_ref_min set: one was
-- left unfinished.
create or replace function groundkit._reindex_pid()
returns integer
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select l.holder_pid from groundkit.locks l
     where l.name = 'reindex'
       and exists (select 1 from pg_catalog.pg_locks k
                    where k.locktype = 'advisory' and k.granted and k.pid = l.holder_pid
                      and k.database = (select d.oid from pg_catalog.pg_database d
                                         where d.datname = pg_catalog.current_database())
                      and k.classid = ((l.holder_key >> 32) & 4294967295)::oid
                      and k.objid = (l.holder_key & 4294967295)::oid
                      and k.objsubid = 1)
$$;

create or replace function groundkit._reindex_lock_held()
returns boolean
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select coalesce(groundkit._reindex_pid() = pg_backend_pid(), false)
$$;

-- Refuse (55P03) when another session recomputes in steps, or runs reindex_impacts() (which
-- holds the row until it commits). p_steps: this session begins one, under a new random key
-- (returned; NULL when it holds the recompute already).
create or replace function groundkit._reindex_claim(p_steps boolean)
returns bigint
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    key bigint;
begin
    begin
        perform 1 from groundkit.locks l where l.name = 'reindex' for update nowait;
    exception when lock_not_available then
        raise exception 'another session is recomputing the impacts'
            using errcode = '55P03', hint = 'Wait for it, and call this again.';
    end;
    if groundkit._reindex_pid() is distinct from pg_backend_pid() and groundkit._reindex_pid() is not null then
        raise exception 'another session is recomputing the impacts in steps'
            using errcode = '55P03',
                  hint = 'Wait for it; if that session died, its lock went with it and this can run again.';
    end if;
    if not p_steps or groundkit._reindex_lock_held() then
        return null;
    end if;
    key := ('x' || translate(gen_random_uuid()::text, '-', ''))::bit(64)::bigint;
    if not pg_try_advisory_lock(key) then
        raise exception 'the recompute''s random lock key is taken' using errcode = '55P03',
            hint = 'Call this again.';
    end if;
    update groundkit.locks l set holder_pid = pg_backend_pid(), holder_key = key where l.name = 'reindex';
    return key;
end
$$;

-- Let go of the recompute in steps, if this session holds it.
create or replace function groundkit._reindex_release()
returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    key bigint;
begin
    if groundkit._reindex_lock_held() then
        select l.holder_key into key from groundkit.locks l where l.name = 'reindex';
        update groundkit.locks l set holder_pid = null, holder_key = null where l.name = 'reindex';
        perform pg_advisory_unlock(key);
    end if;
end
$$;

-- Begin: the new reference (default as reindex_impacts()'s), and the smallest one any posting
-- may still be at. SHARE on postings waits for the writers and merges in flight, which read the
-- parameters they write with after taking ROW EXCLUSIVE: every posting committed before this
-- commits is visible to the steps, and every one written after is at the new reference. The
-- recompute is the session's, not the transaction's (_reindex_claim): a begin that fails lets
-- go of it.
-- A recompute left unfinished resumes where its steps stopped when avgdl_ref is NULL or its own
-- reference: the postings up to its position are at that reference already, and so is every
-- posting written since it began. Any other reference starts over from the first posting.
-- Returns the reference.
create or replace function groundkit._reindex_begin(avgdl_ref double precision default null)
returns double precision
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    ref double precision := _reindex_begin.avgdl_ref;
    ip groundkit.bm25_impact;
    key bigint;
begin
    if ref is not null and (ref <= 0 or ref in ('infinity'::double precision, 'NaN'::double precision)) then
        raise exception 'avgdl_ref must be positive and finite (got %)', ref using errcode = 'GK005';
    end if;
    -- (a session that began and did not end resumes: it holds the lock once)
    key := groundkit._reindex_claim(true);
    begin
        lock table groundkit.postings in share mode;
        lock table groundkit.bm25_impact in exclusive mode;
        select * into ip from groundkit.bm25_impact;
        if exists (select 1 from groundkit.config c
                    where c.bm25_k1 is distinct from ip.k1 or c.bm25_b is distinct from ip.b) then
            raise exception 'k1 or b changed since the impacts were computed: they are recomputed in one transaction'
                using errcode = 'GK005', hint = 'Call groundkit.reindex_impacts().';
        end if;
        if ip.avgdl_ref_min is not null and (ref is null or ref = ip.avgdl_ref) then
            ref := ip.avgdl_ref;
            raise debug 'groundkit._reindex_begin: resuming after (%, %)', ip.reindex_term, ip.reindex_chunk;
        else
            if ref is null then
                ref := coalesce(groundkit._avgdl_max(), ip.avgdl_ref);
            end if;
            if ref is null or ref <= 0 then
                raise exception 'avgdl_ref must be positive and finite (got %)', ref using errcode = 'GK005';
            end if;
            update groundkit.bm25_impact i
               set avgdl_ref = ref,
                   avgdl_ref_min = least(coalesce(i.avgdl_ref_min, i.avgdl_ref), i.avgdl_ref, ref),
                   reindex_term = null, reindex_chunk = null, reindex_done = false;
        end if;
    exception when others then
        if key is not null then
            perform pg_advisory_unlock(key);  -- (the claim's row update is undone with the error)
        end if;
        raise;
    end;
    return ref;
end
$$;

-- One step, on the session that began: the next p_rows postings after the steps' position (in
-- the primary key's order) get the impacts of the current parameters where theirs differ, and
-- the position moves to the last of them. Returns that key (NULLs when none was left), the
-- postings in the range and how many were rewritten. Once a step has returned fewer than p_rows
-- postings, or none, the recompute may end. Postings written
-- meanwhile are already at the new reference. With no recompute unfinished (another session
-- ran reindex_impacts() or rebuild() meanwhile, which rewrite every posting), there is nothing
-- to do: no key.
create or replace function groundkit._reindex_step(p_rows integer default 100000)
returns table (last_term text, last_chunk_id bigint, postings bigint, rewritten bigint)
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    lo_term text;
    lo_chunk bigint;
    ip groundkit.bm25_impact;
begin
    if p_rows is null or p_rows < 1 then
        raise exception 'p_rows must be a positive integer (got %)', coalesce(p_rows::text, 'NULL')
            using errcode = 'GK005';
    end if;
    if not groundkit._reindex_lock_held() then
        raise exception 'this session is not recomputing the impacts in steps'
            using errcode = 'GK005', hint = 'Call groundkit._reindex_begin() first, on this session.';
    end if;
    -- SHARE, as reindex_impacts() takes for the whole rewrite: writers to the postings wait for
    -- this step, and it for the writers in flight. Row locks alone deadlocked: a writer deleting
    -- an object's postings (many terms, in no order) and the step updating a range of them in
    -- key order each held rows the other wanted (docs/bm25.md, "Recomputing the impacts in
    -- steps"). Taken before the parameters are read, as writers do.
    lock table groundkit.postings in share mode;
    select * into ip from groundkit.bm25_impact;
    postings := 0;
    rewritten := 0;
    if ip.avgdl_ref_min is null or ip.reindex_done then
        return next;
        return;
    end if;
    lo_term := coalesce(ip.reindex_term, '');
    lo_chunk := coalesce(ip.reindex_chunk, -9223372036854775808);
    -- (row comparisons: one range of the primary key, however long a term's list is)
    select p.term, p.chunk_id into last_term, last_chunk_id
      from groundkit.postings p
     where (p.term, p.chunk_id) > (lo_term, lo_chunk)
     order by p.term, p.chunk_id
    offset p_rows - 1 limit 1;
    postings := p_rows;
    if last_term is null then
        -- the last step: fewer than p_rows left
        select p.term, p.chunk_id into last_term, last_chunk_id
          from groundkit.postings p
         where (p.term, p.chunk_id) > (lo_term, lo_chunk)
         order by p.term desc, p.chunk_id desc
         limit 1;
        if last_term is null then
            update groundkit.bm25_impact i set reindex_done = true;
            postings := 0;
            return next;
            return;
        end if;
        select count(*) into postings
          from groundkit.postings p
         where (p.term, p.chunk_id) > (lo_term, lo_chunk);
    end if;
    update groundkit.postings p
       set imp = groundkit._impact(p.tf, p.doc_len, ip.k1, ip.b, ip.avgdl_ref)
     where (p.term, p.chunk_id) > (lo_term, lo_chunk) and (p.term, p.chunk_id) <= (last_term, last_chunk_id)
       and p.imp is distinct from groundkit._impact(p.tf, p.doc_len, ip.k1, ip.b, ip.avgdl_ref);
    get diagnostics rewritten = row_count;
    -- (a range that reached the last posting leaves nothing after it)
    update groundkit.bm25_impact i
       set reindex_term = last_term, reindex_chunk = last_chunk_id, reindex_done = postings < p_rows;
    return next;
end
$$;

-- End, after the last step: the sketches again (they hold impacts), then no posting is at an
-- older reference any more. Lets go of the session's claim. Refused (GK005) on a session
-- that did not begin, and while steps remain: search's bounds then assume every posting is at
-- avgdl_ref. (With no recompute unfinished, as after another session's reindex_impacts(), it
-- only lets go of the lock.)
create or replace function groundkit._reindex_end()
returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    ip groundkit.bm25_impact;
begin
    if not groundkit._reindex_lock_held() then
        raise exception 'this session is not recomputing the impacts in steps'
            using errcode = 'GK005', hint = 'Call groundkit._reindex_begin() first, on this session.';
    end if;
    select * into ip from groundkit.bm25_impact;
    if ip.avgdl_ref_min is not null then
        if not ip.reindex_done then
            raise exception 'the recompute has steps left (it has reached %)',
                    coalesce(format('(%L, %s)', ip.reindex_term, ip.reindex_chunk), 'no posting yet')
                using errcode = 'GK005', hint = 'Call groundkit._reindex_step() until it returns no key.';
        end if;
        perform groundkit._analyze_sketches((select c.sketch_min_postings from groundkit.config c));
        update groundkit.bm25_impact i
           set avgdl_ref_min = null, reindex_term = null, reindex_chunk = null, reindex_done = false;
    end if;
    perform groundkit._reindex_release();
end
$$;
