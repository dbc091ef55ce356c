-- Runs: what an AI flow read, pinned so that it can be replayed (docs/runs.md). Replaceable.
--
-- A run is one transaction of the client's (groundkit.runs.Run): every search is one call of
-- groundkit.run_search, which searches and records the hits in ONE statement (one snapshot: the
-- reader's tier and status, the hits and the log's marker are what that statement saw), and the
-- run ends with groundkit.record_run, which writes the header. run_searches' foreign key to the
-- header is checked at commit, so a run is recorded whole or not at all (a killed client rolls
-- back). Nothing here stores chunk text: replay re-chunks the log's payload at the pinned
-- version, so a redaction, which scrubs the log, reaches replays too.

-- Runs and their searches are append-only. The one way out is groundkit.prune_runs, which holds
-- the 'runs_prune' token of groundkit.locks (a table only the owner may write) while it deletes.
create or replace function groundkit._runs_guard() returns trigger
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    if tg_op = 'DELETE' and exists (select 1 from groundkit.locks l
                                     where l.name = 'runs_prune' and l.holder_xact = pg_current_xact_id()) then
        return old;
    end if;
    raise exception 'groundkit.% is append-only: % rejected', tg_table_name, tg_op
        using errcode = 'GK006', hint = 'Runs leave only through groundkit.prune_runs(before).';
end
$$;

create or replace trigger runs_append_only
    before update or delete on groundkit.runs
    for each row execute function groundkit._runs_guard();
create or replace trigger runs_no_truncate
    before truncate on groundkit.runs
    for each statement execute function groundkit._runs_guard();
create or replace trigger run_searches_append_only
    before update or delete on groundkit.run_searches
    for each row execute function groundkit._runs_guard();
create or replace trigger run_searches_no_truncate
    before truncate on groundkit.run_searches
    for each statement execute function groundkit._runs_guard();

-- The checks before a run's search: a known flow, a run id not already recorded, a positive
-- search number, and the login binding (GK010).
create or replace function groundkit._run_search_check(p_run_id uuid, p_search_no integer, p_flow text, p_reader_sub text)
returns void
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
begin
    perform groundkit._check_flow(p_flow);
    perform groundkit._reader_allowed(p_reader_sub);
    if p_run_id is null or p_search_no is null or p_search_no < 1 then
        raise exception 'run_id must be given and search_no be positive' using errcode = 'GK005';
    end if;
    if exists (select 1 from groundkit.runs r where r.run_id = p_run_id) then
        raise exception 'run % is already recorded', p_run_id using errcode = 'GK005';
    end if;
end
$$;

-- Search as groundkit.search does, and record the search in the same statement.
create or replace function groundkit.run_search(
    run_id uuid,
    search_no integer,
    flow text,
    reader_sub text,
    query text,
    k integer default 10,
    content_types text[] default null,
    space_ids text[] default null,
    snippet_start text default '<mark>',
    snippet_end text default '</mark>')
returns setof groundkit.search_hit
language sql volatile
set search_path = pg_catalog, pg_temp
as $$
    with chk as materialized (
        select groundkit._run_search_check(run_search.run_id, run_search.search_no, run_search.flow,
                                           run_search.reader_sub)
    ),
    s as materialized (
        select h.*
          from chk, groundkit.search(run_search.reader_sub, run_search.query, run_search.k,
                                run_search.content_types, run_search.space_ids,
                                run_search.snippet_start, run_search.snippet_end) with ordinality as h
    ),
    rec as (
        insert into groundkit.run_searches (run_id, search_no, reader_sub, reader_tier, reader_status,
                                            reader_rank, query, mode, params, log_marker, snapshot, hits)
        select run_search.run_id, run_search.search_no, run_search.reader_sub, w.tier, w.status, w.rank,
               run_search.query, 'bm25',
               jsonb_build_object('k', run_search.k, 'content_types', to_jsonb(run_search.content_types),
                                  'space_ids', to_jsonb(run_search.space_ids)),
               (select coalesce(max(l.seq), 0) from groundkit.content_log l),
               pg_current_snapshot(),
               coalesce((select jsonb_agg(jsonb_build_object(
                                    'object_id', s.object_id, 'object_version', s.object_version,
                                    'chunk_seq', s.chunk_seq, 'score', s.score, 'chunker', s.chunker,
                                    'chunker_version', c.chunker_version, 'chunk_chars', c.chunk_chars,
                                    'chunk_overlap', c.chunk_overlap, 'char_start', s.char_start,
                                    'char_end', s.char_end) order by s.ordinality)
                           from s left join groundkit.chunks c
                                  on c.object_id = s.object_id and c.chunk_seq = s.chunk_seq), '[]'::jsonb)
          from chk  -- (one row: the checks run before anything is written, even with no hits)
          left join (select a.tier, a.status, t.rank
                       from groundkit.reader_authority a left join groundkit.tiers t on t.name = a.tier
                      where a.member_sub = run_search.reader_sub limit 1) w on true
        returning 1
    )
    select s.object_id, s.object_version, s.chunk_seq, s.content_type, s.space_id, s.title, s.content,
           s.score, s.start_ms, s.end_ms, s.char_start, s.char_end, s.heading_path, s.thread_id,
           s.thread_title, s.chunker, s.snippet, s.bm25_rank, s.dense_rank
      from s
     where (select count(*) from rec) = 1
     order by s.ordinality
$$;

-- The run's header, written last, in the transaction of its searches. llm_calls: a JSON array
-- of {model, tokens_in, tokens_out, cost} (cost null when unpriced); context: the citation ids
-- the run's context assembly gave. Returns the run id.
create or replace function groundkit.record_run(
    run_id uuid,
    flow text,
    reader_sub text,
    model text default null,
    prompt_version text default null,
    started_at timestamptz default null,
    llm_calls jsonb default '[]',
    context jsonb default '[]',
    error_class text default null)
returns uuid
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    v_in bigint;
    v_out bigint;
    v_cost numeric;
    v_unpriced integer;
begin
    perform groundkit._check_flow(record_run.flow);
    perform groundkit._reader_allowed(record_run.reader_sub);
    if record_run.run_id is null or record_run.reader_sub is null then
        raise exception 'run_id and reader_sub must be given' using errcode = 'GK005';
    end if;
    if jsonb_typeof(coalesce(record_run.llm_calls, '[]')) <> 'array'
       or jsonb_typeof(coalesce(record_run.context, '[]')) <> 'array' then
        raise exception 'llm_calls and context must be JSON arrays' using errcode = 'GK005';
    end if;
    if exists (select 1 from groundkit.run_searches s
                where s.run_id = record_run.run_id and s.reader_sub is distinct from record_run.reader_sub) then
        raise exception 'run % searched as another reader', record_run.run_id using errcode = 'GK005';
    end if;
    -- checked without casts that could fail (an exception block would cost a subtransaction)
    v_in := 0;
    v_out := 0;
    v_unpriced := 0;
    if jsonb_array_length(coalesce(record_run.llm_calls, '[]')) = 0 then
        null;  -- no calls: nothing to check or add
    elsif exists (select 1 from jsonb_array_elements(record_run.llm_calls) e
                where jsonb_typeof(e) <> 'object'
                   or jsonb_typeof(e -> 'tokens_in') is distinct from 'number'
                   or jsonb_typeof(e -> 'tokens_out') is distinct from 'number'
                   or (e ->> 'tokens_in') !~ '^[0-9]{1,18}$' or (e ->> 'tokens_out') !~ '^[0-9]{1,18}$'
                   or (e -> 'cost' is not null and jsonb_typeof(e -> 'cost') <> 'null'
                       and coalesce((e ->> 'cost') !~ '^[0-9]{1,30}(\.[0-9]{1,30})?$', true))) then
        raise exception 'llm_calls: tokens must be non-negative integers and cost a non-negative number or null'
            using errcode = 'GK005';
    else
        select coalesce(sum((e ->> 'tokens_in')::bigint), 0), coalesce(sum((e ->> 'tokens_out')::bigint), 0),
               sum((e ->> 'cost')::numeric), count(*) filter (where e ->> 'cost' is null)
          into v_in, v_out, v_cost, v_unpriced
          from jsonb_array_elements(record_run.llm_calls) e;
    end if;
    -- (a run id already recorded: the primary key refuses it, and run_search refused it before)
    insert into groundkit.runs (run_id, flow, reader_sub, reader_tier, reader_status, model, prompt_version,
                                started_at, log_marker, snapshot, tokens_in, tokens_out, cost, unpriced,
                                llm_calls, context, error_class)
    select record_run.run_id, record_run.flow, record_run.reader_sub, a.tier, a.status, record_run.model,
           record_run.prompt_version, coalesce(record_run.started_at, now()),
           (select coalesce(max(l.seq), 0) from groundkit.content_log l), pg_current_snapshot(),
           v_in, v_out, v_cost, v_unpriced, coalesce(record_run.llm_calls, '[]'),
           coalesce(record_run.context, '[]'), record_run.error_class
      from (select 1) one
      left join (select x.tier, x.status from groundkit.reader_authority x
                  where x.member_sub = record_run.reader_sub limit 1) a on true;
    return record_run.run_id;
end
$$;

-- May the session replay (or list, or diff) runs of p_reader_sub? Its own reader's (the login
-- binding, GK010, as search), anyone's for groundkit_auditor and the owner. GK012 for a run
-- that does not exist, GK010 for another reader's.
create or replace function groundkit._run_access(p_run_id uuid, p_reader_sub text) returns groundkit.runs
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
declare
    r groundkit.runs;
begin
    select * into r from groundkit.runs x where x.run_id = p_run_id and x.kind = 'run';
    if not found then
        raise exception 'unknown run %', coalesce(p_run_id::text, 'NULL') using errcode = 'GK012';
    end if;
    if groundkit._is_auditor() then
        return r;
    end if;
    perform groundkit._reader_allowed(p_reader_sub);
    if p_reader_sub is null or p_reader_sub is distinct from r.reader_sub then
        raise exception 'run % is another reader''s', p_run_id
            using errcode = 'GK010', hint = 'Replaying another reader''s run needs the groundkit_auditor role.';
    end if;
    return r;
end
$$;

-- session_user (the login; these functions run as the owner) is an auditor or the owner.
create or replace function groundkit._is_auditor() returns boolean
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select exists (select 1 from pg_catalog.pg_roles r
                    where r.rolname in ('groundkit_auditor', 'groundkit_owner')
                      and pg_catalog.pg_has_role(session_user, r.oid, 'USAGE'))
$$;

-- What became of an object since a run read version p_version of it (whose log row is p_log).
create or replace function groundkit._run_hit_now(p_object_id text, p_version bigint, p_tier text)
returns text
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select case when o.object_id is null then 'deleted'
                when o.state = 'redacted' then 'redacted'
                when o.state = 'deleted' then 'deleted'
                when o.version = p_version then 'current'
                when o.tier_visibility is distinct from p_tier then 'retiered'
                else 'newer version' end
      from (select 1) one
      left join groundkit.objects o on o.object_id = p_object_id
$$;

-- The chunks a run saw, in its order: each re-chunked from the log's payload at the pinned
-- version, by the chunker and sizes that made it. content is null when the object was
-- redacted (redacted true), or when today's chunker no longer makes that chunk version
-- (verified false: its chunker version or offsets differ from the recorded ones).
create or replace function groundkit.replay_run(run_id uuid, reader_sub text default null)
returns table (
    search_no integer,
    query text,
    hit_no integer,
    object_id text,
    object_version bigint,
    chunk_seq integer,
    score double precision,
    content_type text,
    title text,
    content text,
    start_ms bigint,
    end_ms bigint,
    char_start integer,
    char_end integer,
    heading_path text[],
    chunker text,
    chunker_version text,
    redacted boolean,
    verified boolean,
    now text)
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
begin
    perform groundkit._run_access(replay_run.run_id, replay_run.reader_sub);
    return query
    select s.search_no, s.query, h.ord::integer, h.object_id, h.object_version, h.chunk_seq, h.score,
           lg.content_type,
           case when red.yes then null else lg.title end,
           case when red.yes or not ok.yes then null else ch.content end,
           ch.start_ms, ch.end_ms, ch.char_start, ch.char_end, ch.heading_path,
           coalesce(ch.chunker, h.chunker), h.chunker_version,
           red.yes, ok.yes and not red.yes,
           groundkit._run_hit_now(h.object_id, h.object_version, lg.tier_visibility)
      from groundkit.run_searches s
     cross join lateral rows from (jsonb_to_recordset(s.hits)
                 as (object_id text, object_version bigint, chunk_seq integer, score double precision,
                     chunker text, chunker_version text, chunk_chars integer, chunk_overlap integer,
                     char_start integer, char_end integer)) with ordinality
           as h(object_id, object_version, chunk_seq, score, chunker, chunker_version, chunk_chars,
                chunk_overlap, char_start, char_end, ord)
      left join lateral (select l.* from groundkit.content_log l
                          where l.object_id = h.object_id and l.version = h.object_version
                            and l.op in ('put', 'retier')
                          order by l.seq desc limit 1) lg on true
     cross join lateral (select lg.scrubbed is not false
                                or exists (select 1 from groundkit.content_log r
                                            where r.object_id = h.object_id and r.op = 'redact') as yes) red
      left join lateral (select c.* from groundkit._chunks_of(
                                    lg.content_type, lg.title, lg.body, lg.segments, lg.metadata,
                                    coalesce(h.chunk_chars, (groundkit.chunk_sizes(lg.content_type)).chunk_chars),
                                    coalesce(h.chunk_overlap, (groundkit.chunk_sizes(lg.content_type)).chunk_overlap)) c
                          where not red.yes and c.chunk_seq = h.chunk_seq) ch on true
     cross join lateral (select ch.chunk_seq is not null
                                and ch.chunker_version is not distinct from h.chunker_version
                                and (h.char_start is null or ch.char_start = h.char_start)
                                and (h.char_end is null or ch.char_end = h.char_end) as yes) ok
     where s.run_id = replay_run.run_id
     order by s.search_no, h.ord;
end
$$;

-- The run's header, as list_runs gives it, for one run (the same access as replay_run).
create or replace function groundkit.run_header(run_id uuid, reader_sub text default null)
returns setof groundkit.runs
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
begin
    return next groundkit._run_access(run_header.run_id, run_header.reader_sub);
end
$$;

-- Runs, newest first, with their search and hit counts: the auditor's and the owner's.
create or replace function groundkit.list_runs(
    only_flow text default null, only_reader text default null, since timestamptz default null,
    max_rows integer default 1000)
returns table (run_id uuid, flow text, reader_sub text, reader_tier text, model text,
               prompt_version text, recorded_at timestamptz, searches bigint, hits bigint,
               tokens_in bigint, tokens_out bigint, cost numeric, unpriced integer, error_class text)
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
begin
    if not groundkit._is_auditor() then
        raise exception 'listing runs needs the groundkit_auditor role' using errcode = 'GK010';
    end if;
    return query
    select r.run_id, r.flow, r.reader_sub, r.reader_tier, r.model, r.prompt_version, r.recorded_at,
           (select count(*) from groundkit.run_searches s where s.run_id = r.run_id),
           (select coalesce(sum(jsonb_array_length(s.hits)), 0)::bigint from groundkit.run_searches s
             where s.run_id = r.run_id),
           r.tokens_in, r.tokens_out, r.cost, r.unpriced, r.error_class
      from groundkit.runs r
     where r.kind = 'run'
       and (list_runs.only_flow is null or r.flow = list_runs.only_flow)
       and (list_runs.only_reader is null or r.reader_sub = list_runs.only_reader)
       and (list_runs.since is null or r.recorded_at >= list_runs.since)
     order by r.recorded_at desc, r.run_id
     limit greatest(list_runs.max_rows, 0);
end
$$;

-- Which hits entered, left or moved between run_a and run_b, search by search (search_no), and
-- why when the log can say: the log rows of the object that one run's snapshot saw and the
-- other's did not (a new version, a re-tier, a delete, a redaction), or the reader's tier.
create or replace function groundkit.diff_runs(run_a uuid, run_b uuid, reader_sub text default null)
returns table (search_no integer, change text, object_id text, chunk_seq integer,
               version_a bigint, version_b bigint, rank_a integer, rank_b integer, why text)
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
begin
    perform groundkit._run_access(diff_runs.run_a, diff_runs.reader_sub);
    perform groundkit._run_access(diff_runs.run_b, diff_runs.reader_sub);
    return query
    with a as (
        select s.search_no, s.snapshot, s.reader_tier, h.object_id, h.chunk_seq, h.object_version, h.ord
          from groundkit.run_searches s
         cross join lateral rows from (jsonb_to_recordset(s.hits)
                     as (object_id text, chunk_seq integer, object_version bigint)) with ordinality
               as h(object_id, chunk_seq, object_version, ord)
         where s.run_id = diff_runs.run_a
    ), b as (
        select s.search_no, s.snapshot, s.reader_tier, h.object_id, h.chunk_seq, h.object_version, h.ord
          from groundkit.run_searches s
         cross join lateral rows from (jsonb_to_recordset(s.hits)
                     as (object_id text, chunk_seq integer, object_version bigint)) with ordinality
               as h(object_id, chunk_seq, object_version, ord)
         where s.run_id = diff_runs.run_b
    ), snaps as (
        select sa.search_no, sa.snapshot as snap_a, sb.snapshot as snap_b,
               sa.reader_tier as tier_a, sb.reader_tier as tier_b
          from groundkit.run_searches sa
          join groundkit.run_searches sb on sb.run_id = diff_runs.run_b and sb.search_no = sa.search_no
         where sa.run_id = diff_runs.run_a
    ), pairs as (
        select coalesce(a.search_no, b.search_no) as search_no,
               coalesce(a.object_id, b.object_id) as object_id,
               coalesce(a.chunk_seq, b.chunk_seq) as chunk_seq,
               a.object_version as version_a, b.object_version as version_b,
               a.ord::integer as rank_a, b.ord::integer as rank_b
          from a full join b on b.search_no = a.search_no and b.object_id = a.object_id
                            and b.chunk_seq = a.chunk_seq
    )
    select p.search_no,
           case when p.rank_a is null then 'entered' when p.rank_b is null then 'left'
                when p.rank_a <> p.rank_b or p.version_a <> p.version_b then 'moved'
                else 'same' end,
           p.object_id, p.chunk_seq, p.version_a, p.version_b, p.rank_a, p.rank_b,
           nullif(concat_ws(', ',
               (select string_agg(distinct case l.op when 'put' then 'new version' when 'retier' then 're-tier'
                                                     when 'delete' then 'delete' else 'redaction' end, ', ')
                  from groundkit.content_log l
                 where l.object_id = p.object_id
                   and (pg_visible_in_snapshot(l.xact_id, sn.snap_a) <> pg_visible_in_snapshot(l.xact_id, sn.snap_b))),
               case when sn.tier_a is distinct from sn.tier_b
                    then format('reader tier %s -> %s', coalesce(sn.tier_a, 'none'), coalesce(sn.tier_b, 'none')) end),
               '')
      from pairs p
      left join snaps sn on sn.search_no = p.search_no
     order by p.search_no, coalesce(p.rank_b, p.rank_a + 1000000), p.rank_a;
end
$$;

-- The only way runs leave the table: every run recorded before `before`, and their searches.
-- Leaves a tombstone row counting them, with the audit chain's entries of the rows it deleted
-- (pruned_seqs, sql/089_governance.sql): the tombstone is chained itself, so a pruned range shows
-- in every later checkpoint instead of a gap. Granted to nobody: the owner's alone.
create or replace function groundkit.prune_runs(before timestamptz) returns bigint
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    n_runs bigint;
    n_searches bigint;
    seqs int8multirange;
begin
    if prune_runs.before is null then
        raise exception 'before must be given' using errcode = 'GK005';
    end if;
    update groundkit.locks l set holder_xact = pg_current_xact_id() where l.name = 'runs_prune';
    select range_agg(int8range(c.seq, c.seq, '[]')) into seqs
      from groundkit.runs r
      join groundkit.audit_chain c on c.run_id = r.run_id and c.kind in ('run', 'search')
     where r.kind = 'run' and r.recorded_at < prune_runs.before;
    delete from groundkit.run_searches s
     using groundkit.runs r
     where r.run_id = s.run_id and r.kind = 'run' and r.recorded_at < prune_runs.before;
    get diagnostics n_searches = row_count;
    delete from groundkit.runs r where r.kind = 'run' and r.recorded_at < prune_runs.before;
    get diagnostics n_runs = row_count;
    update groundkit.locks l set holder_xact = null where l.name = 'runs_prune';
    insert into groundkit.runs (run_id, kind, pruned_runs, pruned_searches, pruned_before, pruned_seqs)
    values (gen_random_uuid(), 'pruned', n_runs, n_searches, prune_runs.before, coalesce(seqs, '{}'));
    return n_runs;
end
$$;
