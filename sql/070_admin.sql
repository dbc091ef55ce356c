-- Rebuild, checksum and the snapshot marker. Replaceable.

-- The log's high-water mark: the highest sequence number this snapshot can see.
create or replace function groundkit.snapshot_marker() returns bigint
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select coalesce(max(l.seq), 0) from groundkit.content_log l
$$;

-- A digest of every derived row (objects, chunks, postings, statistics summed over shards),
-- independent of surrogate keys and physical order. Lines are hashed in 4,096 buckets (by their
-- md5), each bucket's sorted lines digested alone and the digests digested in bucket order: one
-- string of every line exceeded PostgreSQL's 1 GB limit at a million chunks.
create or replace function groundkit.state_checksum() returns text
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select encode(sha256(convert_to(coalesce(string_agg(b.digest, E'\n' order by b.bucket), ''), 'UTF8')), 'hex')
      from (
        select y.bucket,
               encode(sha256(convert_to(string_agg(y.line, E'\n' order by y.line), 'UTF8')), 'hex') as digest
          from (select x.line, left(md5(x.line), 3) as bucket
                  from (
                    select concat_ws('|', 'o', o.object_id, o.version, o.state, o.content_type, o.space_id,
                                     o.tier_visibility, o.title, o.owner_sub, o.owner_only, o.metadata::text,
                                     o.content_hash) as line
                      from groundkit.objects o
                    union all
                    select concat_ws('|', 'c', c.object_id, c.chunk_seq, c.object_version, md5(c.content),
                                     c.tsv::text, c.doc_len, coalesce(c.stat_scope::text, '-'), c.start_ms,
                                     c.end_ms, c.chunker_version,
                                     -- the columns of revision 0015, null on older chunks
                                     coalesce(c.chunker, '-'), coalesce(c.chunk_chars::text, '-'),
                                     coalesce(c.chunk_overlap::text, '-'), coalesce(c.char_start::text, '-'),
                                     coalesce(c.char_end::text, '-'), coalesce(c.heading_path::text, '-'),
                                     coalesce(md5(c.search_prefix), '-'),
                                     -- the keys into groundkit.embeddings (revision 0022)
                                     coalesce(encode(c.embed_hash_text, 'hex'), '-'),
                                     coalesce(encode(c.embed_hash_titled, 'hex'), '-'),
                                     -- its language (revision 0030)
                                     coalesce(c.language, '-'))
                      from groundkit.chunks c
                    union all
                    select concat_ws('|', 'p', coalesce(c.object_id, '<orphan ' || p.chunk_id || '>'), c.chunk_seq,
                                     p.term, p.tf, p.doc_len, p.vis_key, p.imp)
                      from groundkit.postings p left join groundkit.chunks c on c.chunk_id = p.chunk_id
                    union all
                    -- a pending posting is the posting a merge makes of it (docs/bm25.md, "The
                    -- pending part"): the same line, and counted in its term's df
                    select concat_ws('|', 'p', coalesce(c.object_id, '<orphan ' || p.chunk_id || '>'), c.chunk_seq,
                                     p.term, p.tf, p.doc_len, p.vis_key,
                                     groundkit._impact(p.tf, p.doc_len, i.k1, i.b, i.avgdl_ref))
                      from groundkit.pending_postings p
                      cross join groundkit.bm25_impact i
                      left join groundkit.chunks c on c.chunk_id = p.chunk_id
                    union all
                    -- the dense index's entries (revision 0028): a chunk's bucket, model and text
                    select concat_ws('|', 'e', coalesce(c.object_id, '<orphan ' || e.chunk_id || '>'), c.chunk_seq,
                                     e.model, e.vis_key, encode(e.content_hash, 'hex'))
                      from groundkit.dense_entries e left join groundkit.chunks c on c.chunk_id = e.chunk_id
                    union all
                    select concat_ws('|', 't', t.term, t.scope, sum(t.df))
                      from (select t.term, t.scope, t.df from groundkit.term_stats t
                            union all
                            select p.term, p.stat_scope, 1 from groundkit.pending_postings p
                             where p.stat_scope is not null) t
                     group by t.term, t.scope having sum(t.df) <> 0
                    union all
                    select concat_ws('|', 's', s.scope, sum(s.n_chunks), sum(s.total_len))
                      from groundkit.scope_stats s group by s.scope
                    having sum(s.n_chunks) <> 0 or sum(s.total_len) <> 0
                  ) x) y
         group by y.bucket
      ) b
$$;

-- Recompute every derived view from the log. Readers and writers wait for it (it truncates).
create or replace function groundkit.rebuild() returns bigint
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    n bigint := 0;
    b record;
    idx record;
    constraints text[] := '{}';
    indexes text[] := '{}';
    dense_indexes text[] := '{}';
    ddl text;
begin
    -- objects first, as writers lock them: the truncate alone took postings and chunks first,
    -- and a writer that had locked its object row and then wanted them deadlocked with it.
    lock table groundkit.objects in access exclusive mode;
    -- and the sketches, which it makes at the end: an analyze_postings() running meanwhile would
    -- hold them and wait for the statistics this truncates (a deadlock); it finishes first
    lock table groundkit.postings_sketch in share row exclusive mode;
    truncate groundkit.postings, groundkit.pending_postings, groundkit.chunks, groundkit.objects,
             groundkit.term_stats, groundkit.scope_stats, groundkit.space_languages, groundkit.dense_entries;
    -- The dense index's HNSW indexes likewise (one build each instead of an insert per entry).
    for idx in select c.relname, pg_get_indexdef(i.indexrelid) as def
                 from pg_index i
                 join pg_class c on c.oid = i.indexrelid
                 join pg_am a on a.oid = c.relam
                where i.indrelid = 'groundkit.dense_entries'::regclass and a.amname = 'hnsw'
    loop
        dense_indexes := dense_indexes || idx.def;
        execute format('drop index groundkit.%I', idx.relname);
    end loop;
    -- The postings' indexes are dropped and built again after the load (one sort each instead of
    -- a btree insert per posting: 1.5x at 1M chunks, docs/bm25.md), from their own catalog
    -- definitions, in this transaction.
    for idx in select c.conname, pg_get_constraintdef(c.oid) as def
                 from pg_constraint c
                where c.conrelid = 'groundkit.postings'::regclass and c.contype in ('p', 'u')
    loop
        constraints := constraints || format('alter table groundkit.postings add constraint %I %s',
                                             idx.conname, idx.def);
        execute format('alter table groundkit.postings drop constraint %I', idx.conname);
    end loop;
    for idx in select c.relname, pg_get_indexdef(i.indexrelid) as def
                 from pg_index i
                 join pg_class c on c.oid = i.indexrelid
                where i.indrelid = 'groundkit.postings'::regclass
    loop
        indexes := indexes || idx.def;
        execute format('drop index groundkit.%I', idx.relname);
    end loop;
    -- Objects, chunks and postings set-based, a thousand objects (in id order) per statement
    -- batch. Progress goes out as DEBUG messages 'groundkit.rebuild: <done> of <total> objects'
    -- (Groundkit.rebuild(progress=...) and `groundkit rebuild` show them).
    for b in select array_agg(x.object_id order by x.object_id) as ids, max(x.total) as total
               from (select l.object_id, (dense_rank() over (order by l.object_id) - 1) / 1000 as batch,
                            count(*) over () as total
                       from (select distinct c.object_id from groundkit.content_log c) l) x
              group by x.batch
              order by x.batch
    loop
        perform groundkit._materialize_many(b.ids, p_rebuilding => true);
        n := n + cardinality(b.ids);
        raise debug 'groundkit.rebuild: % of % objects', n, b.total;
    end loop;
    raise debug 'groundkit.rebuild: indexes';
    foreach ddl in array constraints || indexes loop
        execute ddl;
    end loop;
    raise debug 'groundkit.rebuild: dense index';
    -- The current chunks' entries for every model that embedded their text (docs/dense.md,
    -- "Buckets"), then its HNSW indexes.
    insert into groundkit.dense_entries (chunk_id, model, vis_key, content_hash, embedding)
    select c.chunk_id, m.name, groundkit._chunk_vis_key(o.owner_only, o.owner_sub, o.space_id, c.stat_scope),
           e.content_hash, e.embedding
      from groundkit.chunks c
      join groundkit.objects o on o.object_id = c.object_id
     cross join groundkit.embedding_models m
      join groundkit.embeddings e
        on e.model = m.name
       and e.content_hash = case m.recipe when 'text' then c.embed_hash_text else c.embed_hash_titled end;
    foreach ddl in array dense_indexes loop
        execute ddl;
    end loop;
    raise debug 'groundkit.rebuild: statistics';
    -- The statistics, counted once from the chunks: the same rows the writers' deltas sum to, in
    -- shard 0 (upserted batch by batch in this one transaction, each counter row grew a version
    -- chain that every later upsert walked).
    insert into groundkit.term_stats (term, scope, shard, df)
    select u.lexeme, c.stat_scope, 0, count(*)
      from groundkit.chunks c
     cross join lateral unnest(c.tsv) u
     where c.stat_scope is not null
     group by u.lexeme, c.stat_scope
     order by u.lexeme, c.stat_scope;
    insert into groundkit.scope_stats (scope, shard, n_chunks, total_len)
    select c.stat_scope, 0, count(*), sum(c.doc_len)
      from groundkit.chunks c
     where c.stat_scope is not null
     group by c.stat_scope
     order by c.stat_scope;
    raise debug 'groundkit.rebuild: sketches';
    -- (the truncate holds chunks against every writer: the term bits wait for nobody)
    perform groundkit._analyze_sketches((select c.sketch_min_postings from groundkit.config c));
    -- Every posting was written at avgdl_ref: none is left at an older one (after the sketches,
    -- whose lock comes before this row's in _reindex_end too).
    update groundkit.bm25_impact i
       set avgdl_ref_min = null, reindex_term = null, reindex_chunk = null, reindex_done = false
     where i.avgdl_ref_min is not null;
    perform groundkit._analyze_term_bits((select c.sketch_min_postings from groundkit.config c), true);
    -- Everything was analyzed as this groundkit and this server analyze now
    -- (docs/bm25/analysis.md, "Versioned like a chunker").
    perform groundkit._analysis_record();
    return n;
end
$$;

-- Change a tier's rank and move every chunk whose statistics scope and postings bucket were
-- stamped from it (content of that tier, or in a space whose minimum tier it is) to the scope the
-- new rank gives, with the statistics, in one transaction. Returns the number of chunks moved.
-- Readers are not blocked (they see the old ranks and scopes or the new ones, never a mix);
-- writers of objects and put_space wait until it commits.
create or replace function groundkit.set_tier_rank(tier text, rank integer) returns bigint
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    taken text;
    spaces text[];
    i integer;
    moved bigint := 0;
begin
    -- Locks, first thing, so that nothing is held that a waiting writer could need. Object
    -- writers lock object rows (ROW SHARE or more on objects): EXCLUSIVE waits for those in
    -- flight and holds back new ones, whose statements then plan and snapshot after our commit
    -- and see the new rank. put_space writes its space row (ROW EXCLUSIVE on spaces): SHARE
    -- waits for one in flight and holds back new ones. Plain reads (searches) take ACCESS SHARE,
    -- which neither lock blocks.
    lock table groundkit.objects in exclusive mode;
    lock table groundkit.spaces in share mode;
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
    -- the token tiers_guard lets this one update through with (sql/010_guards.sql)
    update groundkit.locks l set holder_xact = pg_current_xact_id() where l.name = 'tier_rank';
    update groundkit.tiers t set rank = set_tier_rank.rank where t.name = set_tier_rank.tier;
    update groundkit.locks l set holder_xact = null where l.name = 'tier_rank';
    -- A chunk's scope is greatest(rank of its object's tier, rank of its space's minimum tier)
    -- (null for private and owner-only content): only chunks whose object or space names this
    -- tier can move. _restat_space moves a space's chunks to the scopes the live ranks give.
    -- Progress: DEBUG messages 'groundkit.set_tier_rank: <done> of <total> spaces'.
    select coalesce(array_agg(x.space_id order by x.space_id), '{}') into spaces
      from (select s.space_id from groundkit.spaces s where s.min_tier = set_tier_rank.tier
            union
            select o.space_id from groundkit.objects o
             where o.tier_visibility = set_tier_rank.tier and o.state = 'live') x;
    for i in 1 .. cardinality(spaces) loop
        moved := moved + groundkit._restat_space(spaces[i]);
        raise debug 'groundkit.set_tier_rank: % of % spaces', i, cardinality(spaces);
    end loop;
    -- the sketches are keyed by tier rank (speed only: search answers do not depend on them;
    -- which chunks hold which terms does not change: the term bits stay)
    perform groundkit._analyze_sketches((select c.sketch_min_postings from groundkit.config c));
    return moved;
end
$$;

-- Whether the pgvector extension can be used on this server (dense features need it).
create or replace function groundkit.pgvector_available() returns boolean
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select exists (select 1 from pg_catalog.pg_available_extensions where name = 'vector')
$$;

-- The search index's state at a glance (groundkit status): what is stored, what waits for a
-- merge, how old the planning statistics are, and whether the postings' stored impacts fit the
-- statistics (docs/bm25.md, "The impact reference"). One row; it counts the chunks (a scan of
-- their primary key, about 0.1 s at 1M) and the pending part, and reads one row elsewhere.
create or replace function groundkit.index_status()
returns table (chunks bigint, pending_postings bigint, analyzed_at timestamptz, growth double precision,
               sketched_lists bigint, bitted_terms bigint, k1 double precision, b double precision,
               impact_k1 double precision, impact_b double precision, avgdl_ref double precision,
               avgdl_ref_min double precision, reindex_pid integer, avgdl double precision,
               impact_drift double precision, reindex_share double precision)
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select (select count(*) from groundkit.chunks),
           (select count(*) from groundkit.pending_postings),
           (select a.analyzed_at from groundkit.postings_analyzed a),
           groundkit.postings_growth(),
           (select count(*) from groundkit.postings_sketch),
           (select count(*) from groundkit.term_bits),
           c.bm25_k1, c.bm25_b, i.k1, i.b, i.avgdl_ref, i.avgdl_ref_min, groundkit._reindex_pid(),
           groundkit._avgdl_max(),
           groundkit.impact_drift(),
           -- how far an unfinished recompute in steps got, estimated from the planner's
           -- statistics of the postings' terms as the planner estimates `term <= x`: the most
           -- common terms' frequencies, plus the rest's share of the histogram (NULL before the
           -- postings were analyzed)
           case when i.avgdl_ref_min is null then null
                when i.reindex_done then 1.0
                when i.reindex_term is null then 0.0
                else (select coalesce((select sum(m.f) from unnest(st.most_common_vals::text::text[],
                                                                   st.most_common_freqs) as m(v, f)
                                        where m.v <= i.reindex_term), 0)
                             + (1 - coalesce((select sum(f) from unnest(st.most_common_freqs) as f), 0))
                               * coalesce((select count(*) filter (where b <= i.reindex_term)::double precision
                                                  / nullif(count(*), 0)
                                             from unnest(st.histogram_bounds::text::text[]) as b), 0)
                        from pg_catalog.pg_stats st
                       where st.schemaname = 'groundkit' and st.tablename = 'postings'
                         and st.attname = 'term') end
      from groundkit.config c cross join groundkit.bm25_impact i
$$;
