-- The production-traffic sampler (docs/telemetry.md, "The sampler"). Replaceable.
--
-- groundkit.search is STABLE and writes nothing, so it cannot record itself (a stable function may
-- not write, and making search volatile would refuse it in read-only transactions and on
-- standbys). The Python client calls groundkit.search_sampling in the same statement as the
-- search, so that the draw and the reader's tier rank come from the search's own snapshot, and
-- records a drawn search with groundkit.record_sample right after it, in a savepoint of the
-- caller's transaction or its own: the recorded set is the set the caller got. record_sample
-- checks every hit against what the reader may see now and bounds the samples per reader, so a
-- reader login calling it directly can record nothing more than its own searches could.

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

-- (The signature before issue 50 took the tier rank from the caller and any hits at all.)
drop function if exists groundkit.record_sample(text, text, integer, integer, jsonb);

-- Record one sampled search of reader_sub: its query, mode, k, the reader's tier rank (read here,
-- never taken from the caller; the reader itself is not stored) and its hits in order, a JSON
-- array of objects with exactly object_id, object_version, chunk_seq and score. Returns the
-- sample id, or NULL when nothing is recorded: the reader is not an active member (no rank to
-- score it under), or it has taken config.sample_limit samples in this config.sample_window.
--
-- A sample may name only what the reader may see now: every hit must be a chunk of its object's
-- current version that passes the permission predicate for this reader (the one search applies),
-- else GK027 and nothing is recorded. Its offsets and chunker are read from that chunk, so the
-- export reads the text the reader was shown, never a range the caller made up. The Python
-- client records exactly what its search returned, in the caller's transaction; a GK027 there
-- means an object changed between the two statements, and the client records nothing.
-- (issue 50: a reader login named another member's owner-only note, with made-up offsets, and
-- the export wrote the note's text.)
create or replace function groundkit.record_sample(
    reader_sub text, query text, mode text, k integer, hits jsonb)
returns uuid
language plpgsql volatile
set search_path = pg_catalog, pg_temp
as $$
declare
    id uuid;
    reader record;
    bad record;
    cfg record;
    bin timestamptz;
    taken integer;
begin
    perform groundkit._reader_allowed(record_sample.reader_sub);  -- a bound login: its own member only
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
    select h.ord into bad from jsonb_array_elements(hits) with ordinality as h(x, ord)
     where jsonb_typeof(h.x) <> 'object'
        or (select array_agg(key order by key) from jsonb_object_keys(h.x) key)
           is distinct from array['chunk_seq', 'object_id', 'object_version', 'score']
     limit 1;
    if found then
        raise exception 'hit % must be an object with exactly object_id, object_version, chunk_seq and score', bad.ord
            using errcode = 'GK005';
    end if;
    select r.member_sub, r.rank into reader from groundkit._reader(record_sample.reader_sub) r;
    if reader.rank is null then
        return null;  -- no active reader: nothing it could have been shown, no rank to score under
    end if;
    select h.ord into bad
      from jsonb_array_elements(hits) with ordinality as h(x, ord)
     where not exists (
            select 1 from groundkit.chunks c
             cross join lateral groundkit._visible_chunk(c.chunk_id, reader.rank, reader.member_sub, null, null) v
             where c.object_id = h.x ->> 'object_id'
               and c.object_version = (h.x ->> 'object_version')::bigint
               and c.chunk_seq = (h.x ->> 'chunk_seq')::integer)
     order by h.ord limit 1;
    if found then
        raise exception 'hit % is not a chunk of a current version this reader may see', bad.ord
            using errcode = 'GK027',
                  hint = 'A sample may name only what the reader''s search returned; nothing was recorded.';
    end if;
    -- The bound: at most sample_limit samples per reader in each window, the windows aligned to
    -- the epoch (a window's start is never a sample's time, so this table names no sample).
    select c.sample_limit, c.sample_window into cfg from groundkit.config c;
    bin := date_bin(cfg.sample_window, now(), timestamptz 'epoch');
    -- rows of passed windows go; skip locked, so that concurrent samplers never wait on each other
    delete from groundkit.sample_quota q
     where q.ctid = any (array(select x.ctid from groundkit.sample_quota x
                                where x.window_start < bin and x.reader_sub <> reader.member_sub
                                for update skip locked));
    insert into groundkit.sample_quota as q (reader_sub, window_start, taken)
    values (reader.member_sub, bin, 1)
    on conflict on constraint sample_quota_pkey do update
        set window_start = excluded.window_start,
            taken = case when q.window_start < excluded.window_start then 1 else q.taken + 1 end
        where q.window_start < excluded.window_start or q.taken < cfg.sample_limit
    returning q.taken into taken;
    if taken is null then
        return null;  -- over the bound: dropped, silently (the search it came from has answered)
    end if;
    insert into groundkit.search_samples (query, mode, k, tier_rank)
    values (record_sample.query, record_sample.mode, record_sample.k, reader.rank)
    returning sample_id into id;
    insert into groundkit.search_sample_hits
        (sample_id, position, object_id, object_version, chunk_seq, score, char_start, char_end, chunker)
    select id, h.ord, c.object_id, c.object_version, c.chunk_seq, (h.x ->> 'score')::double precision,
           c.char_start, c.char_end, c.chunker
      from jsonb_array_elements(hits) with ordinality as h(x, ord)
      join groundkit.chunks c on c.object_id = h.x ->> 'object_id'
                             and c.object_version = (h.x ->> 'object_version')::bigint
                             and c.chunk_seq = (h.x ->> 'chunk_seq')::integer;
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
    -- Bounded like the samples themselves: a sample holds at most k hits, and each hit at most
    -- 32 engagements (a login cannot grow the table without end through one sample). Two
    -- concurrent calls may both pass the count, so the bound is 32 plus the concurrent callers.
    if (select count(*) from groundkit.sample_engagement e
         where e.sample_id = record_sample_engagement.sample_id
           and e.object_id = record_sample_engagement.object_id) >= 32 then
        raise exception 'object % of sample % has its 32 engagements already', quote_literal(object_id), sample_id
            using errcode = 'GK005';
    end if;
    insert into groundkit.sample_engagement (sample_id, object_id, kind, value)
    values (record_sample_engagement.sample_id, record_sample_engagement.object_id,
            record_sample_engagement.kind, record_sample_engagement.value);
end
$$;

-- Set the sampler's bound: at most per_reader samples per reader in each window of length per
-- (1 second to 31 days, no months; GK005 otherwise).
create or replace function groundkit.set_sample_limit(per_reader integer, per interval)
returns void
language plpgsql volatile
set search_path = pg_catalog, pg_temp
as $$
begin
    if per_reader is null or per_reader < 1 then
        raise exception 'sample_limit must be at least 1 (got %)', per_reader using errcode = 'GK005';
    end if;
    if per is null or per < interval '1 second' or per > interval '31 days'
       or extract(month from per) <> 0 or extract(year from per) <> 0 then
        raise exception 'sample_window must be between 1 second and 31 days, in days or less (got %)', per
            using errcode = 'GK005';
    end if;
    update groundkit.config c set sample_limit = per_reader, sample_window = per;
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
