-- The deterministic chunker. Every chunk records the chunker version that produced it.
-- Replaceable: re-applied after every `groundkit migrate` (changing the output of a
-- chunker means a new version string and a groundkit.rebuild()).

-- End position (1-based, inclusive) of the last separator in seg that ends at or after
-- min_pos, trying paragraph, line, sentence and word breaks in that order; 0 if none.
create or replace function groundkit._last_break(seg text, min_pos integer) returns integer
language plpgsql immutable strict parallel safe
set search_path = pg_catalog, pg_temp
as $$
declare
    sep text;
    r integer;
    pos_end integer;
begin
    foreach sep in array array[E'\n\n', E'\n', '. ', ' '] loop
        r := strpos(reverse(seg), reverse(sep));
        if r > 0 then
            pos_end := length(seg) - r + 1;
            if pos_end >= min_pos then
                return pos_end;
            end if;
        end if;
    end loop;
    return 0;
end
$$;

-- Split text into windows of at most max_chars characters, preferring paragraph, line,
-- sentence and word breaks, with overlap_chars of overlap. The start position strictly
-- increases on every step, so text with no separators at all (base64, long URLs, minified
-- code) terminates for any overlap: the defect this chunker must never have.
-- Positions are character positions in body, but substr and length walk a UTF-8 string from
-- its start, so every read goes to `tail`, a suffix of body that starts at most a few windows
-- before start_pos (body position p is tail position p - base). Long texts chunk in linear
-- time instead of quadratic; the output is the same.
create or replace function groundkit.chunk_text(body text, max_chars integer, overlap_chars integer)
returns table (chunk_seq integer, content text)
language plpgsql immutable parallel safe
set search_path = pg_catalog, pg_temp
as $$
declare
    n integer := coalesce(length(body), 0);
    start_pos integer := 1;
    stop_pos integer;
    cut integer;
    next_pos integer;
    space_at integer;
    s integer := 0;
    tail text := body;
    base integer := 0;
begin
    if max_chars is null or max_chars < 1 then
        raise exception 'max_chars must be at least 1 (got %)', max_chars using errcode = 'GK005';
    end if;
    if overlap_chars is null or overlap_chars < 0 or overlap_chars >= max_chars then
        raise exception 'overlap_chars must be between 0 and max_chars - 1 (got %)', overlap_chars
            using errcode = 'GK005';
    end if;
    if n = 0 or btrim(body, E' \n\r\t') = '' then
        chunk_seq := 0;
        content := '';
        return next;
        return;
    end if;
    loop
        if start_pos - base > greatest(16384, 4 * max_chars) then
            -- keep one window before start_pos: the overlap never reaches further back
            tail := substr(tail, start_pos - max_chars - base);
            base := start_pos - max_chars - 1;
        end if;
        stop_pos := start_pos + max_chars - 1;
        if stop_pos >= n then
            stop_pos := n;
        else
            cut := groundkit._last_break(substr(tail, start_pos - base, max_chars), greatest(max_chars / 2, 1));
            if cut > 0 then
                stop_pos := start_pos + cut - 1;
            end if;
        end if;
        content := btrim(substr(tail, start_pos - base, stop_pos - start_pos + 1), E' \n\r\t');
        if content <> '' then
            chunk_seq := s;
            s := s + 1;
            return next;
        end if;
        exit when stop_pos >= n;
        next_pos := stop_pos + 1 - overlap_chars;
        if overlap_chars > 0 then
            -- start the overlap at a word boundary when one is near
            space_at := strpos(substr(tail, next_pos - base, overlap_chars), ' ');
            if space_at > 0 then
                next_pos := next_pos + space_at;
            end if;
        end if;
        if next_pos <= start_pos then
            next_pos := start_pos + 1;
        end if;
        start_pos := next_pos;
    end loop;
end
$$;

-- Validate transcript segments: a non-empty array of {"start_ms", "end_ms", "text"}.
create or replace function groundkit._check_segments(segments jsonb) returns void
language plpgsql immutable
set search_path = pg_catalog, pg_temp
as $$
declare
    el jsonb;
    i integer := 0;
begin
    if jsonb_typeof(segments) is distinct from 'array' or jsonb_array_length(segments) = 0 then
        raise exception 'segments must be a non-empty JSON array of {"start_ms", "end_ms", "text"}'
            using errcode = 'GK005';
    end if;
    for el in select value from jsonb_array_elements(segments) loop
        if jsonb_typeof(el) <> 'object'
           or (select array_agg(k order by k) from jsonb_object_keys(el) k)
              is distinct from array['end_ms', 'start_ms', 'text']
           or jsonb_typeof(el -> 'start_ms') <> 'number'
           or jsonb_typeof(el -> 'end_ms') <> 'number'
           or jsonb_typeof(el -> 'text') <> 'string'
        then
            raise exception 'segments[%] must be an object with exactly start_ms (number), end_ms (number) and text (string)', i
                using errcode = 'GK005';
        end if;
        if (el ->> 'start_ms')::numeric <> trunc((el ->> 'start_ms')::numeric)
           or (el ->> 'end_ms')::numeric <> trunc((el ->> 'end_ms')::numeric)
           or (el ->> 'start_ms')::numeric < 0
           or (el ->> 'end_ms')::numeric < (el ->> 'start_ms')::numeric
           or (el ->> 'end_ms')::numeric > 9223372036854775807
        then
            raise exception 'segments[%]: start_ms and end_ms must be whole milliseconds with 0 <= start_ms <= end_ms', i
                using errcode = 'GK005';
        end if;
        i := i + 1;
    end loop;
end
$$;

-- Pack consecutive transcript segments into windows of at most max_chars characters; each
-- chunk carries the start of its first segment and the end of its last, so a citation can
-- jump to the moment. A single segment longer than max_chars is split by chunk_text.
create or replace function groundkit.chunk_segments(segments jsonb, max_chars integer, overlap_chars integer)
returns table (chunk_seq integer, content text, start_ms bigint, end_ms bigint)
language plpgsql immutable parallel safe
set search_path = pg_catalog, pg_temp
as $$
declare
    el jsonb;
    buf text := '';
    buf_start bigint;
    buf_end bigint;
    seg_text text;
    piece record;
    s integer := 0;
begin
    perform groundkit._check_segments(segments);
    for el in select value from jsonb_array_elements(segments) loop
        seg_text := btrim(el ->> 'text');
        if seg_text = '' then
            continue;
        end if;
        if buf <> '' and length(buf) + 1 + length(seg_text) > max_chars then
            chunk_seq := s; content := buf; start_ms := buf_start; end_ms := buf_end;
            return next;
            s := s + 1;
            buf := '';
        end if;
        if length(seg_text) > max_chars then
            for piece in select * from groundkit.chunk_text(seg_text, max_chars, overlap_chars) loop
                chunk_seq := s; content := piece.content;
                start_ms := (el ->> 'start_ms')::numeric::bigint;
                end_ms := (el ->> 'end_ms')::numeric::bigint;
                return next;
                s := s + 1;
            end loop;
            continue;
        end if;
        if buf = '' then
            buf := seg_text;
            buf_start := (el ->> 'start_ms')::numeric::bigint;
        else
            buf := buf || ' ' || seg_text;
        end if;
        buf_end := (el ->> 'end_ms')::numeric::bigint;
    end loop;
    if buf <> '' then
        chunk_seq := s; content := buf; start_ms := buf_start; end_ms := buf_end;
        return next;
    elsif s = 0 then
        chunk_seq := 0; content := ''; start_ms := null; end_ms := null;
        return next;
    end if;
end
$$;
