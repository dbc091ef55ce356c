-- Derived views: current objects, chunks, postings and BM25 statistics, computed from the
-- content log. groundkit._materialize is the only code that writes them, for incremental
-- writes and for groundkit.rebuild() alike. Replaceable.

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

-- Chunks of one payload, with the chunker version that produced them.
create or replace function groundkit._chunks_of(
    content_type text, body text, segments jsonb, max_chars integer, overlap_chars integer)
returns table (chunk_seq integer, content text, start_ms bigint, end_ms bigint, chunker_version text)
language sql immutable
set search_path = pg_catalog, pg_temp
as $$
    select s.chunk_seq, s.content, s.start_ms, s.end_ms, 'gk-segments-1'
      from groundkit.chunk_segments(segments, max_chars, overlap_chars) s
     where content_type = 'transcript' and segments is not null
    union all
    select t.chunk_seq, t.content, null::bigint, null::bigint, 'gk-text-1'
      from groundkit.chunk_text(body, max_chars, overlap_chars) t
     where not (content_type = 'transcript' and segments is not null)
$$;

-- Recompute the derived rows of one object from its latest log event.
create or replace function groundkit._materialize(p_object_id text) returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    ev groundkit.content_log;
    max_version bigint;
    cfg groundkit.config;
    v_scope integer;
    old_terms text[];
    old_term_scopes integer[];
    old_scopes integer[];
    old_counts bigint[];
    old_lens bigint[];
    my_shard smallint := (pg_backend_pid() % 8)::smallint;
begin
    -- Statistics contributed by the chunks about to be replaced.
    select coalesce(array_agg(p.term), '{}'), coalesce(array_agg(c.stat_scope), '{}')
      into old_terms, old_term_scopes
      from groundkit.chunks c
      join groundkit.postings p on p.chunk_id = c.chunk_id
     where c.object_id = p_object_id and c.stat_scope is not null;
    select coalesce(array_agg(x.stat_scope), '{}'), coalesce(array_agg(x.n), '{}'), coalesce(array_agg(x.len), '{}')
      into old_scopes, old_counts, old_lens
      from (select c.stat_scope, count(*) as n, sum(c.doc_len) as len
              from groundkit.chunks c
             where c.object_id = p_object_id and c.stat_scope is not null
             group by c.stat_scope) x;
    delete from groundkit.chunks c where c.object_id = p_object_id;

    select * into ev from groundkit.content_log l
     where l.object_id = p_object_id order by l.seq desc limit 1;
    if not found then
        return;
    end if;
    select max(l.version) into max_version from groundkit.content_log l where l.object_id = p_object_id;

    if ev.op in ('delete', 'redact') then
        insert into groundkit.objects as o (object_id, version, state, log_seq)
        values (p_object_id, max_version, case ev.op when 'redact' then 'redacted' else 'deleted' end, ev.seq)
        on conflict on constraint objects_pkey do update
            set version = excluded.version, state = excluded.state, content_type = null,
                space_id = null, tier_visibility = null, title = null, owner_sub = null,
                owner_only = false, metadata = null, content_hash = null, log_seq = excluded.log_seq;
    else
        insert into groundkit.objects as o (object_id, version, state, content_type, space_id,
                                            tier_visibility, title, owner_sub, owner_only, metadata,
                                            content_hash, log_seq)
        values (p_object_id, ev.version, 'live', ev.content_type, ev.space_id, ev.tier_visibility,
                ev.title, ev.owner_sub, coalesce(ev.owner_only, false), ev.metadata, ev.content_hash, ev.seq)
        on conflict on constraint objects_pkey do update
            set version = excluded.version, state = excluded.state, content_type = excluded.content_type,
                space_id = excluded.space_id, tier_visibility = excluded.tier_visibility,
                title = excluded.title, owner_sub = excluded.owner_sub, owner_only = excluded.owner_only,
                metadata = excluded.metadata, content_hash = excluded.content_hash,
                log_seq = excluded.log_seq;

        select * into cfg from groundkit.config;
        select case when s.private or coalesce(ev.owner_only, false) then null
                    else greatest(ot.rank, st.rank) end
          into v_scope
          from groundkit.spaces s
          join groundkit.tiers st on st.name = s.min_tier
          join groundkit.tiers ot on ot.name = ev.tier_visibility
         where s.space_id = ev.space_id;

        insert into groundkit.chunks (object_id, object_version, chunk_seq, content, tsv, doc_len,
                                      stat_scope, start_ms, end_ms, chunker_version)
        select p_object_id, ev.version, ch.chunk_seq, ch.content, v.tsv,
               (select coalesce(sum(coalesce(array_length(u.positions, 1), 1)), 0)
                  from unnest(v.tsv) u)::integer,
               v_scope, ch.start_ms, ch.end_ms, ch.chunker_version
          from groundkit._chunks_of(ev.content_type, ev.body, ev.segments, cfg.chunk_chars, cfg.chunk_overlap) ch
         cross join lateral (
               select to_tsvector('groundkit.english'::regconfig,
                                  coalesce(ev.title, '') || E'\n' || ch.content) as tsv) v;

        insert into groundkit.postings (term, chunk_id, tf)
        select u.lexeme, c.chunk_id, coalesce(array_length(u.positions, 1), 1)
          from groundkit.chunks c
         cross join lateral unnest(c.tsv) u
         where c.object_id = p_object_id;
    end if;

    -- The net change to the statistics, as one statement ordered by key: two single-object
    -- writers lock counter rows in the same order and cannot deadlock on them.
    insert into groundkit.term_stats as t (term, scope, shard, df)
    select d.term, d.scope, my_shard, sum(d.delta)
      from (select u.term, u.scope, -1 as delta
              from unnest(old_terms, old_term_scopes) as u(term, scope)
            union all
            select p.term, c.stat_scope, 1
              from groundkit.chunks c
              join groundkit.postings p on p.chunk_id = c.chunk_id
             where c.object_id = p_object_id and c.stat_scope is not null) d
     group by d.term, d.scope
    having sum(d.delta) <> 0
     order by d.term, d.scope
    on conflict (term, scope, shard) do update set df = t.df + excluded.df;

    insert into groundkit.scope_stats as t (scope, shard, n_chunks, total_len)
    select d.scope, my_shard, sum(d.n), sum(d.len)
      from (select u.scope, -u.n as n, -u.len as len
              from unnest(old_scopes, old_counts, old_lens) as u(scope, n, len)
            union all
            select c.stat_scope, 1, c.doc_len
              from groundkit.chunks c
             where c.object_id = p_object_id and c.stat_scope is not null) d
     group by d.scope
    having sum(d.n) <> 0 or sum(d.len) <> 0
     order by d.scope
    on conflict (scope, shard) do update
        set n_chunks = t.n_chunks + excluded.n_chunks, total_len = t.total_len + excluded.total_len;
end
$$;

-- Counter rows that net to zero still carry their term. Redaction calls this so that no
-- counter row names a term of the redacted text: every (term, scope) group that sums to zero
-- is removed, in every shard. The rows of those terms are locked in key order (the order
-- writers take them in), deleted, and their net sums, exactly as deleted, are written back to
-- this backend's shard: the totals never change, even with concurrent writers. A full pass
-- over term_stats, which is fine for an operation as rare as redaction.
create or replace function groundkit._compact_term_stats() returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    zero_terms text[];
    t text[];
    s integer[];
    d bigint[];
    my_shard smallint := (pg_backend_pid() % 8)::smallint;
begin
    select coalesce(array_agg(distinct z.term), '{}') into zero_terms
      from (select ts.term from groundkit.term_stats ts
             group by ts.term, ts.scope having sum(ts.df) = 0) z;
    if cardinality(zero_terms) = 0 then
        return;
    end if;
    perform 1 from groundkit.term_stats ts where ts.term = any (zero_terms)
     order by ts.term, ts.scope, ts.shard for update;
    with gone as (
        delete from groundkit.term_stats ts where ts.term = any (zero_terms)
        returning ts.term, ts.scope, ts.df)
    select coalesce(array_agg(g.term), '{}'), coalesce(array_agg(g.scope), '{}'), coalesce(array_agg(g.df), '{}')
      into t, s, d
      from gone g;
    insert into groundkit.term_stats as ts (term, scope, shard, df)
    select u.term, u.scope, my_shard, sum(u.df)
      from unnest(t, s, d) as u(term, scope, df)
     group by u.term, u.scope
    having sum(u.df) <> 0
     order by u.term, u.scope
    on conflict (term, scope, shard) do update set df = ts.df + excluded.df;
    delete from groundkit.term_stats ts where ts.term = any (zero_terms) and ts.df = 0;
end
$$;
