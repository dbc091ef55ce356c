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

-- Chunks of one payload, by its content type's chunker (docs/chunking.md): transcripts with
-- segments by chunk_transcript, course sections and documents by chunk_markdown, board posts by
-- chunk_text_spans under their thread header, anything else by chunk_text_spans. Each chunk with
-- its chunker's name and version, its offsets, its heading path and the text indexed with it but
-- not displayed (search_prefix). PL/pgSQL, which plans its statements once a session: the SQL
-- function it replaced (a union of branches; not inlinable, since it pins search_path) was
-- planned afresh at every call unless the caller forced generic plans, as _materialize_many
-- does, about 55 µs a call (docs/bm25.md, "The floor of a bulk write, any layout").
create or replace function groundkit._chunks_of(
    content_type text, title text, body text, segments jsonb, metadata jsonb,
    max_chars integer, overlap_chars integer)
returns table (chunk_seq integer, content text, start_ms bigint, end_ms bigint, chunker text,
               chunker_version text, char_start integer, char_end integer, heading_path text[],
               search_prefix text)
language plpgsql immutable
set search_path = pg_catalog, pg_temp
as $$
declare
    sections boolean := content_type in ('course_section', 'document');
begin
    if coalesce(content_type = 'transcript' and segments is not null, false) then
        return query
            select t.chunk_seq, t.content, t.start_ms, t.end_ms, 'segments'::text, 'gk-segments-2'::text,
                   t.char_start, t.char_end, null::text[], null::text
              from groundkit.chunk_transcript(segments, max_chars, overlap_chars) t;
        return;
    end if;
    if sections and strpos(body, '#') > 0 then
        return query
            select m.chunk_seq, m.content, null::bigint, null::bigint, 'markdown'::text, 'gk-markdown-1'::text,
                   m.char_start, m.char_end, m.heading_path, m.search_prefix
              from groundkit.chunk_markdown(body, title, max_chars, overlap_chars) m;
        return;
    end if;
    -- no headings (chunk_markdown's result without its line scan), a board post, or plain text
    start_ms := null;
    end_ms := null;
    if sections then
        chunker := 'markdown';
        chunker_version := 'gk-markdown-1';
        heading_path := case when btrim(coalesce(title, '')) = '' then '{}'::text[] else array[btrim(title)] end;
        search_prefix := null;
    elsif content_type = 'board_post' then
        chunker := 'thread';
        chunker_version := 'gk-thread-1';
        -- (most posts name no thread: no call)
        search_prefix := case when metadata ?| array['thread_title', 'board', 'tags']
                              then groundkit.thread_header(title, metadata) end;
    else
        chunker := 'text';
        chunker_version := 'gk-text-1';
        search_prefix := null;
    end if;
    if coalesce(length(body) <= max_chars and btrim(body, E' \n\r\t') <> ''
                and max_chars >= 1 and overlap_chars >= 0 and overlap_chars < max_chars, false) then
        -- A body that fits one window is one chunk: chunk_text_spans's own result, without its loop.
        chunk_seq := 0;
        content := btrim(body, E' \n\r\t');
        char_start := length(body) - length(ltrim(body, E' \n\r\t'));
        char_end := char_start + length(content);
        return next;
        return;
    end if;
    for chunk_seq, char_start, char_end, content in
        select t.chunk_seq, t.char_start, t.char_end, t.content
          from groundkit.chunk_text_spans(body, max_chars, overlap_chars) t loop
        return next;
    end loop;
end
$$;

-- A language's marker term as a tsvector of one lexeme without a position ('french|').
create or replace function groundkit._language_marker(language text)
returns tsvector
language sql immutable parallel safe
as $$
    select pg_catalog.array_to_tsvector(array[language || '|'])
$$;

-- The text a chunk is indexed by: its object's title, its search prefix (a thread header, the
-- headings above it) and its content, analyzed in the chunk's language (null: English) by
-- groundkit._analyze (sql/034_analysis.sql, the same analysis as a query's). A chunk in another
-- language also carries that language's marker term ('french|', no position): its document
-- frequency, scoped like every term's, is how many chunks of the language a reader may see, the
-- N of that language's IDF (docs/bm25/analysis.md, "Languages"). One expression, inlined where it
-- is called (no SET clause; as for _impact, PUBLIC may not execute it: sql/090_roles.sql).
create or replace function groundkit._chunk_tsv(title text, search_prefix text, content text, language text)
returns tsvector
language sql stable parallel safe
as $$
    select groundkit._analyze(language,
                              coalesce(title, '') || E'\n' || coalesce(search_prefix || E'\n', '') || content)
           || case when language is null then ''::tsvector else groundkit._language_marker(language) end
$$;

-- The language an object's chunks are analyzed in (null: English): its metadata's "language" if
-- groundkit has a configuration of that name (put_object refuses any other, GK026; one written
-- before names were checked falls back), else its space's.
create or replace function groundkit._object_language(metadata jsonb, space_language text)
returns text
language sql stable parallel safe
as $$
    select case when metadata ? 'language'
                     and exists (select 1 from pg_catalog.pg_ts_config c
                                  where c.cfgnamespace = 'groundkit'::pg_catalog.regnamespace
                                    and c.cfgname = metadata ->> 'language')
                then nullif(metadata ->> 'language', 'english')
                else space_language end
$$;

-- The text an embedding model embeds of a chunk, by the model's recipe (docs/dense.md): 'text',
-- the chunk's content; 'titled', the text BM25 indexes (_chunk_tsv: the object's title, the
-- headings or thread header above the chunk, its content). Its SHA-256 is the chunk's key into
-- groundkit.embeddings (chunks.embed_hash_text / embed_hash_titled, written below). Inlined into
-- its callers (no SET clause, as _chunk_tsv); they pin search_path. Revision 0022 keeps its own
-- copy for the chunks it hashed.
create or replace function groundkit._embed_text(recipe text, title text, search_prefix text, content text)
returns text
language sql immutable parallel safe
as $$
    select case recipe
               when 'text' then content
               when 'titled' then coalesce(title, '') || E'\n' || coalesce(search_prefix || E'\n', '') || content
           end
$$;

create or replace function groundkit._embed_hash(t text)
returns bytea
language sql immutable parallel safe
as $$
    select pg_catalog.sha256(pg_catalog.convert_to(t, 'UTF8'))
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

-- A chunk's bucket (dense_entries.vis_key, docs/dense.md "Buckets") from its own row: its scope
-- is NULL exactly for private spaces and owner-only objects, and the object's owner and space are
-- fixed for the chunk's lifetime (a new version writes new chunks). So a chunk row locked FOR
-- SHARE gives its bucket, whatever a concurrent put_space did to the space row.
create or replace function groundkit._chunk_vis_key(owner_only boolean, owner_sub text, space_id text,
                                                    stat_scope integer)
returns bigint
language sql immutable parallel safe
set search_path = pg_catalog, pg_temp
as $$
    select groundkit._vis_key(coalesce(owner_only, false), owner_sub, stat_scope is null, space_id, stat_scope)
$$;

-- A posting's stored impact (postings.imp, docs/bm25.md "Postings"): the BM25 term-frequency
-- part (groundkit._tf_part, sql/035_bm25.sql) at the reference length avgdl_ref with
-- groundkit.bm25_impact's parameters, as a real. The one definition of it for writes, merges, reindex_impacts() and state_checksum():
-- pruning is exact only while every stored impact is this function of its posting. One
-- expression with no SET clause, so that it is inlined into the statement that calls it; as
-- for _top_lb, its callers pin search_path and PUBLIC may not execute it (sql/090_roles.sql).
-- (Revision 0002, frozen, keeps its own copy for the postings it filled.)
create or replace function groundkit._impact(
    tf integer, doc_len integer, k1 double precision, b double precision, avgdl_ref double precision)
returns real
language sql immutable parallel safe
as $$
    select groundkit._tf_part(tf, doc_len, k1, b, avgdl_ref)::real
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
    old_chunk_ids bigint[] := '{}';
begin
    select * into cfg from groundkit.config;
    pend := p_pending and not p_rebuilding and cfg.pending_merge_chunks > 0;
    -- A writer that counts in term_stats or replaces chunks holds this lock shared, taken before
    -- any counter row, so that no merge (which takes it exclusively) moves postings while the
    -- writer reads where they are, and no merge waits for counter rows such a writer holds
    -- while that writer waits for the merge (docs/bm25.md, "The pending part").
    if not p_rebuilding and not pend then
        perform groundkit._lock_pending_shared();
    end if;
    -- A new object has no chunks to replace: one statement instead of four (a one-object write
    -- runs about twenty statements, and each costs its executor start-up).
    if not p_rebuilding and exists (select 1 from groundkit.chunks c where c.object_id = any (p_ids)) then
        if pend then
            perform groundkit._lock_pending_shared();
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
        -- The chunks first (their row locks: an embedding store filing one of them finishes
        -- first, sql/086_dense.sql), then their entries in the dense index, which this
        -- statement's snapshot now shows whoever filed them.
        with d as (delete from groundkit.chunks c where c.object_id = any (p_ids) returning c.chunk_id)
        select coalesce(array_agg(d.chunk_id), '{}') into old_chunk_ids from d;
        delete from groundkit.dense_entries e where e.chunk_id = any (old_chunk_ids);
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
                                  e.space_id, greatest(ot.rank, st.rank)) as vis_key,
               groundkit._object_language(e.metadata, s.language) as language,
               s.language as space_language
          from unnest(evs) as e
          join groundkit.spaces s on s.space_id = e.space_id
          join groundkit.tiers st on st.name = s.min_tier
          join groundkit.tiers ot on ot.name = e.tier_visibility
         where e.op not in ('delete', 'redact')
    ),
    new_chunks as (
        insert into groundkit.chunks (object_id, object_version, chunk_seq, content, tsv, doc_len,
                                      stat_scope, start_ms, end_ms, chunker_version, chunker,
                                      chunk_chars, chunk_overlap, char_start, char_end, heading_path,
                                      search_prefix, embed_hash_text, embed_hash_titled, language)
        select ev.object_id, ev.version, ch.chunk_seq, ch.content, v.tsv,
               -- (the language's marker term is not a token of the text)
               (select coalesce(sum(coalesce(array_length(u.positions, 1), 1)), 0)
                  from unnest(v.tsv) u)::integer - (ev.language is not null)::integer,
               ev.scope, ch.start_ms, ch.end_ms, ch.chunker_version, ch.chunker,
               sz.chars, sz.overlap, ch.char_start, ch.char_end, ch.heading_path, ch.search_prefix,
               -- the chunk's keys into groundkit.embeddings, one per recipe (docs/dense.md)
               groundkit._embed_hash(groundkit._embed_text('text', ev.title, ch.search_prefix, ch.content)),
               groundkit._embed_hash(groundkit._embed_text('titled', ev.title, ch.search_prefix, ch.content)),
               ev.language
          from ev
         -- the content type's sizes, as groundkit.chunk_sizes() reads them
         cross join lateral (
               select coalesce((cfg.chunk_sizes -> ev.content_type ->> 'chars')::integer, cfg.chunk_chars) as chars,
                      coalesce((cfg.chunk_sizes -> ev.content_type ->> 'overlap')::integer, cfg.chunk_overlap)
                          as overlap) sz
         cross join lateral groundkit._chunks_of(ev.content_type, ev.title, ev.body, ev.segments, ev.metadata,
                                                 sz.chars, sz.overlap) ch
         cross join lateral (
               select groundkit._chunk_tsv(ev.title, ch.search_prefix, ch.content, ev.language) as tsv
               offset 0) v
        returning chunk_id, object_id, tsv, doc_len
    ),
    -- The languages a space's objects name besides the space's own: a query searching the space
    -- is analyzed in each (docs/bm25/analysis.md, "Languages"). Never a row where no object
    -- names a language.
    languages as (
        insert into groundkit.space_languages (space_id, language)
        select distinct ev.space_id, coalesce(ev.language, 'english')
          from ev
         where ev.language is distinct from ev.space_language
        on conflict do nothing
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

    -- The new chunks' entries in the dense index, for every model that has embedded their text
    -- already (a re-tier, a move, an unchanged new version; docs/dense.md "Buckets"). Pending:
    -- the worker puts them in their bucket's HNSW index (dense_merge_pending), so that no write
    -- pays for HNSW inserts; searches read them meanwhile. A text being stored right now is
    -- filed by the store, or checked again after this transaction (groundkit._dense_recheck).
    if exists (select 1 from groundkit.embedding_models) then
        insert into groundkit.dense_entries (chunk_id, model, vis_key, content_hash, embedding, pending)
        select c.chunk_id, m.name, groundkit._chunk_vis_key(o.owner_only, o.owner_sub, o.space_id, c.stat_scope),
               e.content_hash, e.embedding, true
          from groundkit.chunks c
          join groundkit.objects o on o.object_id = c.object_id
         cross join groundkit.embedding_models m
          join groundkit.embeddings e
            on e.model = m.name
           and e.content_hash = case m.recipe when 'text' then c.embed_hash_text else c.embed_hash_titled end
         where c.object_id = any (p_ids)
        on conflict (chunk_id, model) do nothing;
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
