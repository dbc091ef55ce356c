-- The pending part: one-object writes put their postings in groundkit.pending_postings, and a
-- merge moves them into groundkit.postings with their statistics. Replaceable.

-- Move the pending part (groundkit.pending_postings) into groundkit.postings and its document
-- frequencies into groundkit.term_stats, in one transaction: a search sees the postings of a
-- chunk in one part or the other, and the same statistics either way. Under an exclusive lock
-- (groundkit._lock_pending) that writers replacing or moving chunks take shared, so that none
-- of them reads where a chunk's postings are while they move. p_wait false: give up (0) when the lock is
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
    if not groundkit._lock_pending(p_wait) then
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
