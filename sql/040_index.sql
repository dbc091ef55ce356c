-- Derived views: current objects, chunks, postings and BM25 statistics, computed from the
-- content log. groundkit._materialize_many is the only code that writes objects, chunks and
-- postings, for incremental writes and for groundkit.rebuild() alike; the statistics are kept by
-- its deltas, and rebuild() counts them afresh from the chunks (so rebuild equality also checks
-- the deltas). Replaceable.

create or replace function groundkit._content_hash(
    content_type text, space_id text, tier_visibility text, title text, body text,
    owner_sub text, owner_only boolean, segments jsonb, metadata jsonb)
returns text
language sql immutable parallel safe
set search_path = pg_catalog, pg_temp
as $$
    select encode(sha256(convert_to(jsonb_build_array(
        content_type, space_id, tier_visibility, title, body, owner_sub, owner_only, segments, metadata
    )::text, 'UTF8')), 'hex')
$$;

-- Chunks of one payload, with the chunker version that produced them. PL/pgSQL, which plans
-- its statements once a session: the SQL function it replaces (a union of three branches; not
-- inlinable, since it pins search_path) was planned afresh at every call unless the caller
-- forced generic plans, as _materialize_many does, about 55 µs a call (docs/bm25.md, "The floor
-- of a bulk write, any layout").
create or replace function groundkit._chunks_of(
    content_type text, body text, segments jsonb, max_chars integer, overlap_chars integer)
returns table (chunk_seq integer, content text, start_ms bigint, end_ms bigint, chunker_version text)
language plpgsql immutable
set search_path = pg_catalog, pg_temp
as $$
begin
    if coalesce(content_type = 'transcript' and segments is not null, false) then
        return query
            select s.chunk_seq, s.content, s.start_ms, s.end_ms, 'gk-segments-1'::text
              from groundkit.chunk_segments(segments, max_chars, overlap_chars) s;
    elsif coalesce(length(body) <= max_chars and btrim(body, E' \n\r\t') <> ''
                   and max_chars >= 1 and overlap_chars >= 0 and overlap_chars < max_chars, false) then
        -- A body that fits one window is one chunk: chunk_text's own result, without its loop.
        chunk_seq := 0;
        content := btrim(body, E' \n\r\t');
        start_ms := null;
        end_ms := null;
        chunker_version := 'gk-text-1';
        return next;
    else
        return query
            select t.chunk_seq, t.content, null::bigint, null::bigint, 'gk-text-1'::text
              from groundkit.chunk_text(body, max_chars, overlap_chars) t;
    end if;
end
$$;

-- The visibility bucket of a chunk (postings.vis_key, docs/bm25.md): the tier rank shared
-- content needs, or a hash naming the private space or the owner. Only used to choose which
-- postings lists a reader reads; the live predicate still decides visibility.
create or replace function groundkit._vis_key(
    owner_only boolean, owner_sub text, private boolean, space_id text, scope_rank integer)
returns bigint
language sql immutable parallel safe
set search_path = pg_catalog, pg_temp
as $$
    select case when owner_only then hashtextextended('o:' || owner_sub, 0)
                when private then hashtextextended('s:' || space_id, 0)
                else scope_rank::bigint end
$$;

-- A posting's stored impact (postings.imp, docs/bm25.md "Postings"): the BM25 term-frequency
-- part tf / (tf + k1 (1 - b + b dl / avgdl_ref)) with groundkit.bm25_impact's parameters, as a
-- real. The one definition of it for writes, merges, reindex_impacts() and state_checksum():
-- pruning is exact only while every stored impact is this function of its posting. One
-- expression with no SET clause, so that it is inlined into the statement that calls it; as
-- for _top_lb, its callers pin search_path and PUBLIC may not execute it (sql/090_roles.sql).
-- (Revision 0002, frozen, keeps its own copy for the postings it filled.)
create or replace function groundkit._impact(
    tf integer, doc_len integer, k1 double precision, b double precision, avgdl_ref double precision)
returns real
language sql immutable parallel safe
as $$
    select (tf / (tf + k1 * (1 - b + b * doc_len / avgdl_ref)))::real
$$;

-- Recompute the derived rows of a set of objects from their latest log events: set-based, so
-- the bulk path and rebuild() write many objects per statement. Callers hold the objects'
-- locks. Statistics change by one ordered upsert of the net deltas, in this transaction.
-- rebuild() alone passes p_rebuilding => true: it emptied the derived tables in this
-- transaction, so there are no old chunks to replace (the plans cached for reading them were
-- made on an empty table: sequential scans, quadratic over a rebuild), and it counts the
-- statistics once at the end (upserting the same counter rows batch after batch in one
-- transaction leaves version chains that every later upsert walks). docs/bm25.md, "Rebuild".
-- p_pending (put_object and retier_object): the new chunks' postings go to the pending part
-- (groundkit.pending_postings) and term_stats leaves them out until groundkit.merge_pending()
-- moves them, unless config.pending_merge_chunks is 0 (docs/bm25.md, "The pending part").
drop function if exists groundkit._materialize_many(text[]);
drop function if exists groundkit._materialize_many(text[], boolean);
create or replace function groundkit._materialize_many(p_ids text[], p_rebuilding boolean default false,
                                                       p_pending boolean default false)
returns void
language plpgsql
set search_path = pg_catalog, pg_temp
-- Planning these statements afresh for every call (custom plans) cost about 2 ms per object,
-- a third of a one-object put_object; their plans do not depend on the ids (docs/bm25.md).
set plan_cache_mode = force_generic_plan
-- Those plans are made once per session. The pending part grows from empty to tens of
-- thousands of rows between merges, and a plan made while it was nearly empty would scan it
-- whole for every old posting (docs/bm25.md, "The pending part"): no sequential scans here.
set enable_seqscan = off
as $$
declare
    cfg groundkit.config;
    imp groundkit.bm25_impact;
    old_terms text[] := '{}';
    old_term_scopes integer[] := '{}';
    old_scopes integer[] := '{}';
    old_counts bigint[] := '{}';
    old_lens bigint[] := '{}';
    old_pend_terms text[];
    old_pend_ids bigint[];
    evs groundkit.content_log[];
    my_shard smallint := (pg_backend_pid() % 8)::smallint;
    pend boolean;
    lo_id bigint;
    hi_id bigint;
begin
    select * into cfg from groundkit.config;
    pend := p_pending and not p_rebuilding and cfg.pending_merge_chunks > 0;
    -- A writer that counts in term_stats or replaces chunks holds this lock shared, taken before
    -- any counter row, so that no merge (which takes it exclusively) moves postings while the
    -- writer reads where they are, and no merge waits for counter rows such a writer holds
    -- while that writer waits for the merge (docs/bm25.md, "The pending part").
    if not p_rebuilding and not pend then
        perform pg_advisory_xact_lock_shared(groundkit._pending_lock_key());
    end if;
    -- A new object has no chunks to replace: one statement instead of four (a one-object write
    -- runs about twenty statements, and each costs its executor start-up).
    if not p_rebuilding and exists (select 1 from groundkit.chunks c where c.object_id = any (p_ids)) then
        if pend then
            perform pg_advisory_xact_lock_shared(groundkit._pending_lock_key());
        end if;
        -- One pass over the old chunks' lexemes. The statistics they contributed: their lexemes
        -- are exactly their postings' terms, and term_stats counts those in postings, not the
        -- pending ones. Their pending postings' keys: every pair of their ids and their terms is
        -- one of those keys or no row's, so the delete below has conditions on the key alone and
        -- every plan probes it (a join was planned as a hash of the whole part, in a plan cached
        -- while it was empty: docs/bm25.md, "The pending part").
        select coalesce(array_agg(u.lexeme) filter (where m.merged), '{}'),
               coalesce(array_agg(c.stat_scope) filter (where m.merged), '{}'),
               coalesce(array_agg(distinct u.lexeme), '{}'), coalesce(array_agg(distinct c.chunk_id), '{}')
          into old_terms, old_term_scopes, old_pend_terms, old_pend_ids
          from groundkit.chunks c
         cross join lateral unnest(c.tsv) u
         -- offset 0 keeps this a probe of the key per posting (an anti join may hash the
         -- whole part, in a plan cached while it was empty)
         cross join lateral (select c.stat_scope is not null
                                    and not exists (select 1 from groundkit.pending_postings pp
                                                     where pp.term = u.lexeme and pp.chunk_id = c.chunk_id
                                                    offset 0) as merged) m
         where c.object_id = any (p_ids);
        select coalesce(array_agg(x.stat_scope), '{}'), coalesce(array_agg(x.n), '{}'),
               coalesce(array_agg(x.len), '{}')
          into old_scopes, old_counts, old_lens
          from (select c.stat_scope, count(*) as n, sum(c.doc_len) as len
                  from groundkit.chunks c
                 where c.object_id = any (p_ids) and c.stat_scope is not null
                 group by c.stat_scope) x;
        delete from groundkit.pending_postings p
         where p.term = any (old_pend_terms) and p.chunk_id = any (old_pend_ids);
        delete from groundkit.postings p
         using groundkit.chunks c, unnest(c.tsv) u
         where c.object_id = any (p_ids) and p.term = u.lexeme and p.chunk_id = c.chunk_id;
        delete from groundkit.chunks c where c.object_id = any (p_ids);
    end if;

    -- The postings' lock before the impact parameters are read: reindex_impacts() (SHARE) waits
    -- for this write, or this write for it, so no posting comes in with replaced parameters.
    if not pend then
        lock table groundkit.postings in row exclusive mode;
    end if;
    select * into imp from groundkit.bm25_impact;

    -- The latest event and the highest version of each object.
    select coalesce(array_agg(x.ev order by x.object_id), '{}')
      into evs
      from (select distinct on (l.object_id) l.object_id, l as ev
              from groundkit.content_log l
             where l.object_id = any (p_ids)
             order by l.object_id, l.seq desc) x;

    -- Current objects: a tombstone keeps the highest version ever written and nothing else.
    insert into groundkit.objects as o (object_id, version, state, content_type, space_id,
                                        tier_visibility, title, owner_sub, owner_only, metadata,
                                        content_hash, log_seq)
    select e.object_id,
           case when x.dead then (select max(l.version) from groundkit.content_log l
                                   where l.object_id = e.object_id)
                else e.version end,
           case e.op when 'redact' then 'redacted' when 'delete' then 'deleted' else 'live' end,
           case when x.dead then null else e.content_type end,
           case when x.dead then null else e.space_id end,
           case when x.dead then null else e.tier_visibility end,
           case when x.dead then null else e.title end,
           case when x.dead then null else e.owner_sub end,
           not x.dead and coalesce(e.owner_only, false),
           case when x.dead then null else e.metadata end,
           case when x.dead then null else e.content_hash end,
           e.seq
      from unnest(evs) as e
     cross join lateral (select e.op in ('delete', 'redact') as dead) x
     order by e.object_id
    on conflict on constraint objects_pkey do update
        set version = excluded.version, state = excluded.state, content_type = excluded.content_type,
            space_id = excluded.space_id, tier_visibility = excluded.tier_visibility,
            title = excluded.title, owner_sub = excluded.owner_sub, owner_only = excluded.owner_only,
            metadata = excluded.metadata, content_hash = excluded.content_hash,
            log_seq = excluded.log_seq;

    with ev as (
        select e.*,
               case when s.private or coalesce(e.owner_only, false) then null
                    else greatest(ot.rank, st.rank) end as scope,
               groundkit._vis_key(coalesce(e.owner_only, false), e.owner_sub, s.private,
                                  e.space_id, greatest(ot.rank, st.rank)) as vis_key
          from unnest(evs) as e
          join groundkit.spaces s on s.space_id = e.space_id
          join groundkit.tiers st on st.name = s.min_tier
          join groundkit.tiers ot on ot.name = e.tier_visibility
         where e.op not in ('delete', 'redact')
    ),
    new_chunks as (
        insert into groundkit.chunks (object_id, object_version, chunk_seq, content, tsv, doc_len,
                                      stat_scope, start_ms, end_ms, chunker_version)
        select ev.object_id, ev.version, ch.chunk_seq, ch.content, v.tsv,
               (select coalesce(sum(coalesce(array_length(u.positions, 1), 1)), 0)
                  from unnest(v.tsv) u)::integer,
               ev.scope, ch.start_ms, ch.end_ms, ch.chunker_version
          from ev
         cross join lateral groundkit._chunks_of(ev.content_type, ev.body, ev.segments,
                                                 cfg.chunk_chars, cfg.chunk_overlap) ch
         cross join lateral (
               select to_tsvector('groundkit.english'::regconfig,
                                  coalesce(ev.title, '') || E'\n' || ch.content) as tsv
               offset 0) v
        returning chunk_id, object_id, tsv, doc_len
    ),
    pending as (
        insert into groundkit.pending_postings (term, chunk_id, tf, doc_len, vis_key, stat_scope)
        select u.lexeme, c.chunk_id, coalesce(array_length(u.positions, 1), 1), c.doc_len, ev.vis_key,
               ev.scope
          from new_chunks c
          join ev on ev.object_id = c.object_id
         cross join lateral unnest(c.tsv) u
         where pend
         order by u.lexeme, c.chunk_id
    )
    insert into groundkit.postings (term, chunk_id, tf, doc_len, vis_key, imp)
    select u.lexeme, c.chunk_id, x.tf, c.doc_len, ev.vis_key,
           groundkit._impact(x.tf, c.doc_len, imp.k1, imp.b, imp.avgdl_ref)
      from new_chunks c
      join ev on ev.object_id = c.object_id
     cross join lateral unnest(c.tsv) u
     cross join lateral (select coalesce(array_length(u.positions, 1), 1) as tf) x
     where not pend
    -- in index order: neighbouring rows land on the same index pages (bulk put_objects 1.3-1.4x
    -- faster at 1M chunks, measured in docs/bm25.md)
     order by u.lexeme, c.chunk_id;

    if p_rebuilding then
        return;
    end if;

    -- The net change to the statistics, as one statement ordered by key: two writers lock
    -- counter rows of a shard in the same order and cannot deadlock on them. A pending write
    -- that replaced no merged posting has nothing to count here (its postings are counted when
    -- they are merged): the statement is skipped, not run empty.
    if not pend or cardinality(old_terms) > 0 then
        insert into groundkit.term_stats as t (term, scope, shard, df)
        select d.term, d.scope, my_shard, sum(d.delta)
          from (select u.term, u.scope, -1 as delta
                  from unnest(old_terms, old_term_scopes) as u(term, scope)
                union all
                select u.lexeme, c.stat_scope, 1
                  from groundkit.chunks c
                 cross join lateral unnest(c.tsv) u
                 where not pend and c.object_id = any (p_ids) and c.stat_scope is not null) d
         group by d.term, d.scope
        having sum(d.delta) <> 0
         order by d.term, d.scope
        on conflict (term, scope, shard) do update set df = t.df + excluded.df;
    end if;

    insert into groundkit.scope_stats as t (scope, shard, n_chunks, total_len)
    select d.scope, my_shard, sum(d.n), sum(d.len)
      from (select u.scope, -u.n as n, -u.len as len
              from unnest(old_scopes, old_counts, old_lens) as u(scope, n, len)
            union all
            select c.stat_scope, 1, c.doc_len
              from groundkit.chunks c
             where c.object_id = any (p_ids) and c.stat_scope is not null) d
     group by d.scope
    having sum(d.n) <> 0 or sum(d.len) <> 0
     order by d.scope
    on conflict (scope, shard) do update
        set n_chunks = t.n_chunks + excluded.n_chunks, total_len = t.total_len + excluded.total_len;

    -- The writer whose new chunk ids pass a multiple of pending_merge_chunks merges the pending
    -- part, unless a merge is running (then the next one does). Chunk ids come from an identity
    -- without a cache: about one write in pending_merge_chunks chunks merges, and no counter
    -- row is shared by the writers.
    if pend then
        select min(c.chunk_id), max(c.chunk_id) into lo_id, hi_id
          from groundkit.chunks c where c.object_id = any (p_ids);
        if hi_id / cfg.pending_merge_chunks > (lo_id - 1) / cfg.pending_merge_chunks then
            perform groundkit._merge_pending(false);
        end if;
    end if;
end
$$;

-- Move the pending part (groundkit.pending_postings) into groundkit.postings and its document
-- frequencies into groundkit.term_stats, in one transaction: a search sees the postings of a
-- chunk in one part or the other, and the same statistics either way. Under an exclusive
-- advisory lock that writers replacing or moving chunks take shared, so that none of them reads
-- where a chunk's postings are while they move. p_wait false: give up (0) when the lock is
-- taken. Returns the number of postings moved.
create or replace function groundkit._merge_pending(p_wait boolean)
returns bigint
language plpgsql
set search_path = pg_catalog, pg_temp
set plan_cache_mode = force_generic_plan
as $$
declare
    imp groundkit.bm25_impact;
    my_shard smallint := (pg_backend_pid() % 8)::smallint;
    moved bigint;
begin
    if p_wait then
        perform pg_advisory_xact_lock(groundkit._pending_lock_key());
    elsif not pg_try_advisory_xact_lock(groundkit._pending_lock_key()) then
        return 0;
    end if;
    -- before the impact parameters are read: reindex_impacts() (SHARE) waits for this, or this
    -- for it, so no posting comes in with the parameters it replaced
    lock table groundkit.postings in row exclusive mode;
    select * into imp from groundkit.bm25_impact;
    with moving as (
        delete from groundkit.pending_postings p returning p.*
    ),
    ins as (
        insert into groundkit.postings (term, chunk_id, tf, doc_len, vis_key, imp)
        select m.term, m.chunk_id, m.tf, m.doc_len, m.vis_key,
               groundkit._impact(m.tf, m.doc_len, imp.k1, imp.b, imp.avgdl_ref)
          from moving m
         order by m.term, m.chunk_id
    ),
    stats as (
        insert into groundkit.term_stats as t (term, scope, shard, df)
        select m.term, m.stat_scope, my_shard, count(*)
          from moving m
         where m.stat_scope is not null
         group by m.term, m.stat_scope
         order by m.term, m.stat_scope
        on conflict (term, scope, shard) do update set df = t.df + excluded.df
    )
    select count(*) into moved from moving;
    raise debug 'groundkit.merge_pending: % postings moved', moved;
    return moved;
end
$$;

create or replace function groundkit.merge_pending()
returns bigint
language sql
set search_path = pg_catalog, pg_temp
as $$
    select groundkit._merge_pending(true)
$$;

-- Writers call _materialize_many with one id (the one-id wrapper cost a statement per write).
drop function if exists groundkit._materialize(text);

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
    -- (the session recomputing in steps may call this: it holds the lock already)
    if not pg_try_advisory_xact_lock(groundkit._reindex_lock_key()) then
        raise exception 'another session is recomputing the impacts in steps'
            using errcode = '55P03',
                  hint = 'Wait for it; if that session died, its lock went with it and this can run again.';
    end if;
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
-- its own transaction and all on one session (the first takes a session-level advisory lock
-- that the last releases). The steps keep their position in bm25_impact (revision 0010), so no
-- range can be skipped, the end is refused before the last step, and an interrupted recompute
-- resumes where it stopped. Needs k1 and b unchanged since the impacts were computed: a posting
-- at other parameters has no such bound (reindex_impacts() rewrites those in one transaction).

-- The backend that holds the recompute's advisory lock, if any (pg_locks shows a bigint key as
-- its high and low 32 bits): a recompute in steps under way there. NULL with avgdl_ref_min set:
-- one was left unfinished.
create or replace function groundkit._reindex_pid()
returns integer
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select l.pid from pg_locks l
     where l.locktype = 'advisory' and l.granted and l.database = (select d.oid from pg_database d
                                                                   where d.datname = current_database())
       and l.classid = ((groundkit._reindex_lock_key() >> 32) & 4294967295)::oid
       and l.objid = (groundkit._reindex_lock_key() & 4294967295)::oid
       and l.objsubid = 1
     limit 1
$$;

create or replace function groundkit._reindex_lock_held()
returns boolean
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select coalesce(groundkit._reindex_pid() = pg_backend_pid(), false)
$$;

-- Begin: the new reference (default as reindex_impacts()'s), and the smallest one any posting
-- may still be at. SHARE on postings waits for the writers and merges in flight, which read the
-- parameters they write with after taking ROW EXCLUSIVE: every posting committed before this
-- commits is visible to the steps, and every one written after is at the new reference. The
-- advisory lock is the session's, not the transaction's: a begin that fails lets go of it.
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
begin
    if ref is not null and (ref <= 0 or ref in ('infinity'::double precision, 'NaN'::double precision)) then
        raise exception 'avgdl_ref must be positive and finite (got %)', ref using errcode = 'GK005';
    end if;
    -- (a session that began and did not end resumes: it holds the lock once)
    if not groundkit._reindex_lock_held() and not pg_try_advisory_lock(groundkit._reindex_lock_key()) then
        raise exception 'another session is recomputing the impacts in steps'
            using errcode = '55P03',
                  hint = 'Wait for it; if that session died, its lock went with it and this can run again.';
    end if;
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
        perform pg_advisory_unlock(groundkit._reindex_lock_key());
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
drop function if exists groundkit._reindex_step(text, bigint, integer);
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
-- older reference any more. Releases the session's advisory lock. Refused (GK005) on a session
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
    perform pg_advisory_unlock(groundkit._reindex_lock_key());
end
$$;

-- Sketch every long list of shared content (docs/bm25.md, "Sketches"): for each (term, tier
-- rank) list of at least v_min postings, the impacts at ranks least(floor(256 * 2^((i - 1) / 4)),
-- n), i = 1, 2, ... up to the list's length n, and those ranks. Replaces every sketch in one
-- transaction (searches see the old ones until it commits; writers are not blocked). Returns
-- the number of lists sketched; progress goes out as DEBUG messages 'groundkit.analyze_postings:
-- <done> of <total> lists'. Planner statistics only: search answers are the same with any
-- sketches or none. (set_tier_rank and reindex_impacts call this alone: they change impacts and
-- buckets, not which chunks hold which terms.)
create or replace function groundkit._analyze_sketches(v_min integer)
returns bigint
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    l_terms text[];
    l_scopes integer[];
    i integer;
    imps real[];
    ranks bigint[];
begin
    if v_min is null or v_min < 1 then
        raise exception 'min_postings must be a positive integer (got %)', coalesce(v_min::text, 'NULL')
            using errcode = 'GK005';
    end if;
    -- one analyze at a time (this lock conflicts with itself, not with searches' reads)
    lock table groundkit.postings_sketch in share row exclusive mode;
    delete from groundkit.postings_sketch;
    -- The lists: shared content's document frequencies per tier rank are its lists' lengths.
    select coalesce(array_agg(x.term order by x.term, x.scope), '{}'),
           coalesce(array_agg(x.scope order by x.term, x.scope), '{}')
      into l_terms, l_scopes
      from (select ts.term, ts.scope from groundkit.term_stats ts group by ts.term, ts.scope
             having sum(ts.df) >= v_min) x;
    for i in 1 .. cardinality(l_terms) loop
        imps := array(select p.imp from groundkit.postings p
                       where p.term = l_terms[i] and p.vis_key = l_scopes[i]
                       order by p.imp desc);
        if cardinality(imps) > 0 then
            -- ranks 256 * 2^((j - 1) / 4), up to the first at or past the list's end (then n)
            ranks := array(select least(floor(256 * 2 ^ ((j - 1) / 4.0))::bigint, cardinality(imps))
                             from generate_series(1, 200) as j
                            where j = 1 or floor(256 * 2 ^ ((j - 2) / 4.0)) < cardinality(imps)
                            order by j);
            insert into groundkit.postings_sketch (term, vis_key, n, ranks, imps)
            select l_terms[i], l_scopes[i], cardinality(imps), ranks,
                   array(select imps[u.r] from unnest(ranks) with ordinality as u(r, o) order by u.o);
        end if;
        raise debug 'groundkit.analyze_postings: % of % lists', i, cardinality(l_terms);
    end loop;
    return (select count(*) from groundkit.postings_sketch);
end
$$;

-- Term bits (docs/bm25.md, "Term bits"): for every term whose shared lists hold at least
-- greatest(v_min, w_max / 256) postings (a bitmap is then at most 32 bytes a posting), one bit per
-- chunk id up to w_max, set when the chunk holds the term. Search skips the lookups of the
-- chunks whose bit is clear, so the bits must never miss a chunk up to w_max. That holds because
-- chunk ids only grow (an identity without a cache, checked here) and a chunk's terms never
-- change (a new version gets new chunks; deletes leave a bit set for nothing, which costs only a
-- lookup). What needs care is a chunk id at or below w_max whose writer has not committed when
-- the bits are read. So w_max is the largest chunk id visible first; then this waits for every
-- transaction that holds a lock on chunks at that moment (any writer of a chunk id at or below
-- w_max is one of them: it allocated its id before w_max's), as CREATE INDEX CONCURRENTLY does,
-- without blocking anyone; then, in a new snapshot (READ COMMITTED), every chunk up to w_max is
-- settled and the bits are read. Replaces every term's bits. Returns how many terms have bits;
-- progress: DEBUG messages 'groundkit.analyze_postings: <done> of <total> terms'. Under another
-- isolation level the snapshot would not move: GK005. p_settled: the caller holds chunks against
-- every other writer (rebuild: it truncated them), so there is nothing to wait for.
create or replace function groundkit._analyze_term_bits(v_min integer, p_settled boolean default false)
returns bigint
language plpgsql
set search_path = pg_catalog, pg_temp
-- one index range of the pending part per term, whatever size the table had at planning
set enable_seqscan = off
as $$
declare
    w bigint;
    holders text[];
    b_terms text[];
    i integer;
    waited integer := 0;
    started timestamptz := pg_catalog.clock_timestamp();
    in_flight boolean;
    cycle boolean;
begin
    if not p_settled and current_setting('transaction_isolation') <> 'read committed' then
        raise exception 'term bits are made under READ COMMITTED only (this transaction is %)',
            current_setting('transaction_isolation') using errcode = 'GK005';
    end if;
    if (select s.cache_size from pg_catalog.pg_sequences s
         where format('%I.%I', s.schemaname, s.sequencename)::regclass
               = pg_catalog.pg_get_serial_sequence('groundkit.chunks', 'chunk_id')::regclass) <> 1 then
        raise exception 'the chunk id sequence caches values: chunk ids would not grow in commit order'
            using errcode = 'GK005';
    end if;
    w := (select max(c.chunk_id) from groundkit.chunks c);
    holders := array(select l.virtualtransaction from pg_catalog.pg_locks l
                      where not p_settled
                        and l.locktype = 'relation' and l.relation = 'groundkit.chunks'::regclass
                        and l.database = (select d.oid from pg_catalog.pg_database d where d.datname = current_database())
                        and l.pid is distinct from pg_catalog.pg_backend_pid());
    -- A wait like a lock's, and ended like one: by lock_timeout when it is set, and by a
    -- deadlock (a writer waited for that waits for this transaction, say its own
    -- analyze_postings() queued behind this one's sketch lock). One look at pg_locks a turn.
    loop
        select count(*) > 0,
               coalesce(bool_or(pg_catalog.pg_backend_pid() = any (pg_catalog.pg_blocking_pids(l.pid))), false)
          into in_flight, cycle
          from pg_catalog.pg_locks l
         where l.locktype = 'relation' and l.relation = 'groundkit.chunks'::regclass
           and l.virtualtransaction = any (holders);
        exit when not in_flight;
        if cycle then
            raise exception 'term bits: a writer of chunks this waits for is waiting for this transaction'
                using errcode = 'deadlock_detected';
        end if;
        if current_setting('lock_timeout')::interval > interval '0'
           and pg_catalog.clock_timestamp() - started > current_setting('lock_timeout')::interval then
            raise exception 'term bits: writers of chunks still in flight after lock_timeout (%)',
                current_setting('lock_timeout') using errcode = 'lock_not_available';
        end if;
        perform pg_catalog.pg_sleep(0.01);
        waited := waited + 1;
    end loop;
    raise debug 'groundkit.analyze_postings: term bits up to chunk %, after waiting % times for % writer(s)',
        w, waited, cardinality(holders);
    delete from groundkit.term_bits;
    -- what this analyze saw, for postings_growth()
    insert into groundkit.postings_analyzed as a (through_chunk_id, chunks, analyzed_at)
    values (coalesce(w, 0), (select count(*) from groundkit.chunks c where c.chunk_id <= w), pg_catalog.now())
    on conflict (one) do update set through_chunk_id = excluded.through_chunk_id, chunks = excluded.chunks,
                                    analyzed_at = excluded.analyzed_at;
    if w is null then
        return 0;
    end if;
    -- (the shared postings of a term: counted in term_stats, and in the pending part)
    b_terms := array(select x.term
                       from (select ts.term, ts.df from groundkit.term_stats ts
                             union all
                             select pp.term, 1 from groundkit.pending_postings pp where pp.stat_scope is not null) x
                      group by x.term
                     having sum(x.df) >= greatest(v_min, w / 256) order by x.term);
    for i in 1 .. cardinality(b_terms) loop
        -- (words: bit c % 64 of words[c / 64 + 1]; bits: get_bit(bits, c), the same bits byte by
        -- byte, each word's eight bytes written most significant first by int8send)
        insert into groundkit.term_bits (term, w_max, words, bits)
        select b_terms[i], w, array_agg(coalesce(x.bits, 0) order by g.word),
               string_agg(int8send(coalesce(x.bytes, 0)), ''::bytea order by g.word)
          from generate_series(0, w >> 6) as g(word)
          left join (select p.chunk_id >> 6 as word, bit_or(1::bigint << (p.chunk_id & 63)::integer) as bits,
                            bit_or(1::bigint << (8 * (7 - ((p.chunk_id & 63) >> 3)) + (p.chunk_id & 7))::integer)
                                as bytes
                       from (select p.chunk_id from groundkit.postings p
                              where p.term = b_terms[i] and p.chunk_id <= w
                             union all
                             -- chunks still pending: merged later, they must not be missed then
                             select p.chunk_id from groundkit.pending_postings p
                              where p.term = b_terms[i] and p.chunk_id <= w) p
                      group by 1) x on x.word = g.word;
        raise debug 'groundkit.analyze_postings: % of % terms', i, cardinality(b_terms);
    end loop;
    return cardinality(b_terms);
end
$$;

-- Planning statistics of the postings, made again (like ANALYZE): the sketches of the long lists
-- (groundkit._analyze_sketches) and the term bits of the long lists' terms
-- (groundkit._analyze_term_bits). min_postings: lists at least this long (default:
-- groundkit.config.sketch_min_postings). Searches and writers go on while it runs; it waits
-- for the writes in flight when its term bits begin. Returns the number of lists sketched.
-- It does not merge the pending part (a merge's lock would be held for the whole analyze, and
-- writers that replace chunks would wait that long): the sketches leave the pending chunks out,
-- the term bits read both parts. Groundkit.analyze_postings() merges first, in its own
-- transaction.
create or replace function groundkit.analyze_postings(min_postings integer default null)
returns bigint
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    v_min integer := coalesce(analyze_postings.min_postings,
                              (select c.sketch_min_postings from groundkit.config c));
    n bigint;
begin
    n := groundkit._analyze_sketches(v_min);
    perform groundkit._analyze_term_bits(v_min);
    return n;
end
$$;

-- How far the chunks have grown past the last analyze_postings() (or rebuild()): chunk ids
-- issued since, over the chunks there were then, and at least over config.sketch_min_postings
-- (below that no list is long enough to be sketched, so a small database is not analyzed again
-- every few writes). Chunk ids only grow; replaced and deleted chunks count as written. Never
-- analyzed: every chunk id counts. A merger (`groundkit merge --analyze-at`) analyzes again
-- past a share of it (docs/bm25.md, "Analyze after growth").
create or replace function groundkit.postings_growth()
returns double precision
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select greatest(0, coalesce((select max(c.chunk_id) from groundkit.chunks c), 0)
                       - coalesce(a.through_chunk_id, 0))::double precision
           / greatest(coalesce(a.chunks, 0), (select c.sketch_min_postings from groundkit.config c), 1)
      from (select) one
      left join groundkit.postings_analyzed a on true
$$;

-- Counter rows that net to zero still carry their term. Redaction calls this with the terms of
-- the redacted text: every (term, scope) group among them that sums to zero is deleted, in every
-- shard. The caller has locked those rows already (redact_object), so this waits for nobody.
-- Groups that still count other content keep their rows: those terms are not the redacted
-- text's alone.
create or replace function groundkit._compact_term_stats(p_terms text[]) returns void
language sql
set search_path = pg_catalog, pg_temp
as $$
    delete from groundkit.term_stats t
     using (select z.term, z.scope from groundkit.term_stats z
             where z.term = any (p_terms)
             group by z.term, z.scope having sum(z.df) = 0) g
     where t.term = g.term and t.scope = g.scope
$$;
