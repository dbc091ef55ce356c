-- Rebuild, checksum and the snapshot marker. Replaceable.

-- The log's high-water mark: the highest sequence number this snapshot can see.
create or replace function groundkit.snapshot_marker() returns bigint
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select coalesce(max(l.seq), 0) from groundkit.content_log l
$$;

-- A digest of every derived row (objects, chunks, postings, statistics summed over shards),
-- independent of surrogate keys and physical order.
create or replace function groundkit.state_checksum() returns text
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select encode(sha256(convert_to(coalesce(string_agg(x.line, E'\n' order by x.line), ''), 'UTF8')), 'hex')
      from (
        select concat_ws('|', 'o', o.object_id, o.version, o.state, o.content_type, o.space_id,
                         o.tier_visibility, o.title, o.owner_sub, o.owner_only, o.metadata::text,
                         o.content_hash) as line
          from groundkit.objects o
        union all
        select concat_ws('|', 'c', c.object_id, c.chunk_seq, c.object_version, md5(c.content),
                         c.tsv::text, c.doc_len, coalesce(c.stat_scope::text, '-'), c.start_ms, c.end_ms,
                         c.chunker_version)
          from groundkit.chunks c
        union all
        select concat_ws('|', 'p', coalesce(c.object_id, '<orphan ' || p.chunk_id || '>'), c.chunk_seq, p.term,
                         p.tf, p.doc_len, p.vis_key, p.imp)
          from groundkit.postings p left join groundkit.chunks c on c.chunk_id = p.chunk_id
        union all
        select concat_ws('|', 't', t.term, t.scope, sum(t.df))
          from groundkit.term_stats t group by t.term, t.scope having sum(t.df) <> 0
        union all
        select concat_ws('|', 's', s.scope, sum(s.n_chunks), sum(s.total_len))
          from groundkit.scope_stats s group by s.scope having sum(s.n_chunks) <> 0 or sum(s.total_len) <> 0
      ) x
$$;

-- Recompute every derived view from the log. Readers and writers wait for it (it truncates).
create or replace function groundkit.rebuild() returns bigint
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    n bigint := 0;
    ids text[];
begin
    truncate groundkit.postings, groundkit.chunks, groundkit.objects, groundkit.term_stats,
             groundkit.scope_stats;
    -- Set-based, a thousand objects per statement batch.
    for ids in select array_agg(x.object_id order by x.object_id)
                 from (select distinct l.object_id from groundkit.content_log l) x
                group by hashtext(x.object_id) % greatest(1, (select count(distinct l.object_id) / 1000
                                                               from groundkit.content_log l)::integer)
    loop
        perform groundkit._materialize_many(ids);
        n := n + cardinality(ids);
    end loop;
    return n;
end
$$;

-- Change a tier's rank and recompute every derived row that carries it (statistics scopes,
-- postings buckets), in one transaction: a rebuild, so readers and writers wait for it.
create or replace function groundkit.set_tier_rank(tier text, rank integer) returns bigint
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    taken text;
begin
    -- No lock on tiers beyond the row update: writers read tiers without locks, and some read
    -- them after locking objects, so an exclusive lock here could deadlock with them. rebuild()'s
    -- truncate orders us with writers: one that already holds the derived tables finishes first
    -- and is rebuilt from the log below; one that waits for them plans its statements after we
    -- commit, with a snapshot that sees the new rank.
    perform groundkit._tier_rank(set_tier_rank.tier);
    if set_tier_rank.rank is null or set_tier_rank.rank < 0 then
        raise exception 'rank must be a non-negative integer (got %)', coalesce(set_tier_rank.rank::text, 'NULL')
            using errcode = 'GK005';
    end if;
    select t.name into taken from groundkit.tiers t
     where t.rank = set_tier_rank.rank and t.name <> set_tier_rank.tier;
    if found then
        raise exception 'rank % is the rank of tier %', set_tier_rank.rank, taken using errcode = 'GK005',
            hint = 'Ranks are unique; move the other tier first.';
    end if;
    perform set_config('groundkit.tier_rank_rebuild', 'on', true);
    update groundkit.tiers t set rank = set_tier_rank.rank where t.name = set_tier_rank.tier;
    perform set_config('groundkit.tier_rank_rebuild', 'off', true);
    return groundkit.rebuild();
end
$$;

-- Whether the pgvector extension can be used on this server (dense features need it).
create or replace function groundkit.pgvector_available() returns boolean
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select exists (select 1 from pg_catalog.pg_available_extensions where name = 'vector')
$$;
