-- The production-traffic sampler (docs/telemetry.md, "The sampler"). Replaceable.
--
-- groundkit.search is STABLE and writes nothing, so it cannot record itself (a stable function may
-- not write, and making search volatile would refuse it in read-only transactions and on
-- standbys). The Python client calls groundkit.search_sampling in the same statement as the
-- search, so that the draw and the reader's tier rank come from the search's own snapshot, and
-- records a drawn search with groundkit.record_sample right after it, in a savepoint of the
-- caller's transaction or its own: the recorded set is the set the caller got.

-- Whether to record this search (a draw against config.sample_rate) and the reader's tier rank
-- (null: no active reader). STABLE so that it shares the calling statement's snapshot; the draw
-- (random()) is taken once per call, which is all a FROM-clause call makes.
create or replace function groundkit.search_sampling(reader_sub text, out sample boolean, out tier_rank integer)
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
declare
    rate double precision;
begin
    perform groundkit._reader_allowed(search_sampling.reader_sub);  -- a bound login: its own member only
    select c.sample_rate into rate from groundkit.config c;
    sample := rate > 0 and random() < rate;
    select r.rank into tier_rank from groundkit._reader(search_sampling.reader_sub) r;
end
$$;

-- Record one sampled search: its query, mode, k, the reader's tier rank (never the reader) and
-- its hits in order, a JSON array of objects with object_id, object_version, chunk_seq, score and,
-- when the chunk has them, char_start, char_end and chunker. Returns the sample id.
create or replace function groundkit.record_sample(
    query text, mode text, k integer, tier_rank integer, hits jsonb)
returns uuid
language plpgsql volatile
set search_path = pg_catalog, pg_temp
as $$
declare
    id uuid;
begin
    if query is null or length(query) > 4096 then
        raise exception 'query must be text of at most 4096 characters' using errcode = 'GK005';
    end if;
    if mode is null or mode !~ '^[a-z0-9_]{1,32}$' then
        raise exception 'mode must be a short lowercase name (got %)', quote_nullable(mode) using errcode = 'GK005';
    end if;
    if k is null or k < 1 or k > 1000 then
        raise exception 'k must be between 1 and 1000 (got %)', k using errcode = 'GK005';
    end if;
    if hits is null or jsonb_typeof(hits) <> 'array' or jsonb_array_length(hits) > k then
        raise exception 'hits must be a JSON array of at most k hits' using errcode = 'GK005';
    end if;
    insert into groundkit.search_samples (query, mode, k, tier_rank)
    values (record_sample.query, record_sample.mode, record_sample.k, record_sample.tier_rank)
    returning sample_id into id;
    insert into groundkit.search_sample_hits
        (sample_id, position, object_id, object_version, chunk_seq, score, char_start, char_end, chunker)
    select id, h.ord, h.x ->> 'object_id', (h.x ->> 'object_version')::bigint, (h.x ->> 'chunk_seq')::integer,
           (h.x ->> 'score')::double precision, (h.x ->> 'char_start')::integer, (h.x ->> 'char_end')::integer,
           h.x ->> 'chunker'
      from jsonb_array_elements(hits) with ordinality as h(x, ord);
    return id;
exception
    when not_null_violation or invalid_text_representation or numeric_value_out_of_range then
        raise exception 'each hit needs object_id, object_version, chunk_seq and score' using errcode = 'GK005';
end
$$;

-- An engagement with one hit of a sample: a 'click' (no value) or a 'dwell_ms' (milliseconds,
-- >= 0). Refused (GK005) for an unknown sample, an object that is not among the sample's hits,
-- another kind, or a value that does not fit the kind.
create or replace function groundkit.record_sample_engagement(
    sample_id uuid, object_id text, kind text, value double precision default null)
returns void
language plpgsql volatile
set search_path = pg_catalog, pg_temp
as $$
begin
    if kind is null or kind not in ('click', 'dwell_ms') then
        raise exception 'kind must be click or dwell_ms (got %)', quote_nullable(kind) using errcode = 'GK005';
    end if;
    if kind = 'click' and value is not null then
        raise exception 'a click takes no value' using errcode = 'GK005';
    end if;
    if kind = 'dwell_ms' and (value is null or value < 0 or value = 'Infinity'::double precision or value = 'NaN') then
        raise exception 'dwell_ms needs a finite value >= 0 (got %)', value using errcode = 'GK005';
    end if;
    if not exists (select 1 from groundkit.search_samples s where s.sample_id = record_sample_engagement.sample_id) then
        raise exception 'no sample %', sample_id using errcode = 'GK005';
    end if;
    if not exists (select 1 from groundkit.search_sample_hits h
                    where h.sample_id = record_sample_engagement.sample_id
                      and h.object_id = record_sample_engagement.object_id) then
        raise exception 'object % is not among the hits of sample %', quote_literal(object_id), sample_id
            using errcode = 'GK005';
    end if;
    insert into groundkit.sample_engagement (sample_id, object_id, kind, value)
    values (record_sample_engagement.sample_id, record_sample_engagement.object_id,
            record_sample_engagement.kind, record_sample_engagement.value);
end
$$;

-- Set config.sample_rate (GK005 outside [0, 1]); returns the rate now in force.
create or replace function groundkit.set_sample_rate(rate double precision)
returns double precision
language plpgsql volatile
set search_path = pg_catalog, pg_temp
as $$
begin
    if rate is null or not (rate >= 0 and rate <= 1) then
        raise exception 'sample_rate must be between 0 and 1 (got %)', rate using errcode = 'GK005';
    end if;
    update groundkit.config c set sample_rate = set_sample_rate.rate;
    return rate;
end
$$;

-- The text a sampled hit showed, from the log at its version: the body (or a transcript's
-- segment texts, trimmed, joined by one space) between the chunk's offsets. Null when the log's
-- text at that version was redacted (scrubbed), or the chunk has no offsets (made before
-- revision 0015) and the object has moved on from that version.
create or replace function groundkit.sample_hit_text(
    object_id text, object_version bigint, chunk_seq integer, char_start integer, char_end integer,
    out content text, out redacted boolean)
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
declare
    e groundkit.content_log;
    source text;
begin
    -- the version's text: the last put at or before it (a retier carries no text)
    select l.* into e from groundkit.content_log l
     where l.object_id = sample_hit_text.object_id and l.version <= sample_hit_text.object_version
       and l.op = 'put'
     order by l.version desc, l.seq desc limit 1;
    redacted := coalesce(e.scrubbed, false)
                or exists (select 1 from groundkit.content_log r
                            where r.object_id = sample_hit_text.object_id and r.op = 'redact');
    if redacted or e.seq is null then
        return;
    end if;
    if char_start is null or char_end is null then
        select c.content into content from groundkit.chunks c
         where c.object_id = sample_hit_text.object_id and c.object_version = sample_hit_text.object_version
           and c.chunk_seq = sample_hit_text.chunk_seq;
        return;
    end if;
    if e.content_type = 'transcript' and e.segments is not null then
        select string_agg(t.txt, ' ' order by t.ord) into source
          from (select x.ord, btrim(x.s ->> 'text', E' \n\r\t') as txt
                  from jsonb_array_elements(e.segments) with ordinality as x(s, ord)) t
         where t.txt <> '';
    else
        source := e.body;
    end if;
    content := substr(source, char_start + 1, char_end - char_start);
end
$$;
