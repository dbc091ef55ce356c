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

-- The window and overlap every chunker takes: GK005 unless 1 <= max_chars and
-- 0 <= overlap_chars < max_chars.
create or replace function groundkit._check_chunk_sizes(max_chars integer, overlap_chars integer)
returns void
language plpgsql immutable parallel safe
set search_path = pg_catalog, pg_temp
as $$
begin
    if max_chars is null or max_chars < 1 then
        raise exception 'max_chars must be at least 1 (got %)', max_chars using errcode = 'GK005';
    end if;
    if overlap_chars is null or overlap_chars < 0 or overlap_chars >= max_chars then
        raise exception 'overlap_chars must be between 0 and max_chars - 1 (got %)', overlap_chars
            using errcode = 'GK005';
    end if;
end
$$;

-- Split text into windows of at most max_chars characters, preferring paragraph, line,
-- sentence and word breaks, with overlap_chars of overlap. The start position strictly
-- increases on every step, so text with no separators at all (base64, long URLs, minified
-- code) terminates for any overlap: the defect this chunker must never have.
-- Each window is trimmed of whitespace and carries its place in body: 0-based character
-- offsets, [char_start, char_end), with substr(body, char_start + 1, char_end - char_start) =
-- content. Positions are character positions in body, but substr and length walk a UTF-8 string
-- from its start, so every read goes to `tail`, a suffix of body that starts at most a few
-- windows before start_pos (body position p is tail position p - base). Long texts chunk in
-- linear time instead of quadratic; the output is the same.
create or replace function groundkit.chunk_text_spans(body text, max_chars integer, overlap_chars integer)
returns table (chunk_seq integer, char_start integer, char_end integer, content text)
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
    raw text;
begin
    perform groundkit._check_chunk_sizes(max_chars, overlap_chars);
    if n = 0 or btrim(body, E' \n\r\t') = '' then
        chunk_seq := 0;
        char_start := 0;
        char_end := 0;
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
        raw := substr(tail, start_pos - base, stop_pos - start_pos + 1);
        content := btrim(raw, E' \n\r\t');
        if content <> '' then
            chunk_seq := s;
            char_start := start_pos - 1 + length(raw) - length(ltrim(raw, E' \n\r\t'));
            char_end := char_start + length(content);
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

-- chunk_text_spans without the offsets (the recursive chunker, version gk-text-1).
create or replace function groundkit.chunk_text(body text, max_chars integer, overlap_chars integer)
returns table (chunk_seq integer, content text)
language sql immutable parallel safe
set search_path = pg_catalog, pg_temp
as $$
    select t.chunk_seq, t.content from groundkit.chunk_text_spans(body, max_chars, overlap_chars) t
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

-- The transcript chunker (gk-segments-2): windows of whole segments, at most max_chars characters
-- of their texts joined by one space, so that a citation can jump to the moment. A window
-- ends, among the segments that fit, after the longest pause (a gap of at least a second before
-- the next segment), else after the last segment that ends a sentence, else after the last
-- segment that fits; no earlier than half a window. The next window starts with the window's
-- last whole segments that fit in overlap_chars, unless it ended at a pause (then it starts
-- where the speaker resumed). A segment longer than max_chars is the only one ever split:
-- chunk_text_spans cuts it, every piece with the segment's times.
-- Offsets are into the segments' trimmed, non-empty texts joined by one space; seg_first and
-- seg_last are the 0-based indexes (in `segments`) of the first and last segment covered.
create or replace function groundkit.chunk_transcript(segments jsonb, max_chars integer, overlap_chars integer)
returns table (chunk_seq integer, char_start integer, char_end integer, content text,
               start_ms bigint, end_ms bigint, seg_first integer, seg_last integer)
language plpgsql immutable parallel safe
set search_path = pg_catalog, pg_temp
as $$
declare
    pause_ms constant bigint := 1000;
    joined text;
    -- fixed-width arrays only: a subscript of a text[] walks it from its start
    idx integer[];
    starts bigint[];
    ends bigint[];
    offs integer[];
    lens integer[];
    sentence boolean[];
    n integer;
    i integer := 1;
    j integer;
    b integer;
    c integer;
    k integer;
    prev_b integer := 0;
    best_gap bigint;
    s integer := 0;
    piece record;
begin
    perform groundkit._check_chunk_sizes(max_chars, overlap_chars);
    perform groundkit._check_segments(segments);
    select string_agg(x.t, ' ' order by x.n), array_agg(x.n::integer - 1 order by x.n),
           array_agg(x.s order by x.n), array_agg(x.e order by x.n),
           array_agg(x.off order by x.n), array_agg(length(x.t) order by x.n),
           array_agg(x.t ~ '[.!?…]["''”’)\]]*$' order by x.n)
      into joined, idx, starts, ends, offs, lens, sentence
      from (select y.*, (sum(length(y.t) + 1) over (order by y.n) - length(y.t) - 1)::integer as off
              from (select e.n, btrim(e.v ->> 'text', E' \n\r\t') as t,
                           (e.v ->> 'start_ms')::numeric::bigint as s, (e.v ->> 'end_ms')::numeric::bigint as e
                      from jsonb_array_elements(segments) with ordinality e(v, n)) y
             where y.t <> '') x;
    n := coalesce(cardinality(idx), 0);
    if n = 0 then
        chunk_seq := 0; char_start := 0; char_end := 0; content := '';
        start_ms := null; end_ms := null; seg_first := null; seg_last := null;
        return next;
        return;
    end if;
    while i <= n loop
        if lens[i] > max_chars then
            for piece in select * from groundkit.chunk_text_spans(substr(joined, offs[i] + 1, lens[i]),
                                                                  max_chars, overlap_chars) loop
                chunk_seq := s; char_start := offs[i] + piece.char_start; char_end := offs[i] + piece.char_end;
                content := piece.content; start_ms := starts[i]; end_ms := ends[i];
                seg_first := idx[i]; seg_last := idx[i];
                return next;
                s := s + 1;
            end loop;
            prev_b := i;
            i := i + 1;
            continue;
        end if;
        -- the last segment that fits in a window starting with segment i
        j := i;
        while j < n and offs[j + 1] + lens[j + 1] - offs[i] <= max_chars loop
            j := j + 1;
        end loop;
        b := j;
        if j < n and lens[j + 1] <= max_chars then
            -- a choice of break: the longest pause, else the last sentence end, else j
            best_gap := pause_ms - 1;
            for c in reverse j .. greatest(i, prev_b + 1) loop
                exit when (offs[c] + lens[c] - offs[i]) * 2 < max_chars;
                if starts[c + 1] - ends[c] > best_gap then
                    best_gap := starts[c + 1] - ends[c];
                    b := c;
                end if;
            end loop;
            if best_gap < pause_ms then
                for c in reverse j .. greatest(i, prev_b + 1) loop
                    exit when (offs[c] + lens[c] - offs[i]) * 2 < max_chars;
                    if sentence[c] then
                        b := c;
                        exit;
                    end if;
                end loop;
            end if;
        end if;
        chunk_seq := s; char_start := offs[i]; char_end := offs[b] + lens[b];
        content := substr(joined, offs[i] + 1, char_end - char_start);
        start_ms := starts[i]; end_ms := ends[i];
        for c in i + 1 .. b loop
            start_ms := least(start_ms, starts[c]);
            end_ms := greatest(end_ms, ends[c]);
        end loop;
        seg_first := idx[i]; seg_last := idx[b];
        return next;
        s := s + 1;
        exit when b = n;
        -- the overlap: the window's last whole segments within overlap_chars, as long as the
        -- next window still takes a new segment (and it starts after this one's start); none
        -- across a pause, so that the next window starts where the speaker resumed
        k := b + 1;
        if lens[b + 1] <= max_chars and starts[b + 1] - ends[b] < pause_ms then
            while k - 1 > i and offs[b] + lens[b] - offs[k - 1] <= overlap_chars
                  and offs[b + 1] + lens[b + 1] - offs[k - 1] <= max_chars loop
                k := k - 1;
            end loop;
        end if;
        prev_b := b;
        i := k;
    end loop;
end
$$;

-- chunk_transcript without the offsets and segment indexes.
create or replace function groundkit.chunk_segments(segments jsonb, max_chars integer, overlap_chars integer)
returns table (chunk_seq integer, content text, start_ms bigint, end_ms bigint)
language sql immutable parallel safe
set search_path = pg_catalog, pg_temp
as $$
    select t.chunk_seq, t.content, t.start_ms, t.end_ms
      from groundkit.chunk_transcript(segments, max_chars, overlap_chars) t
$$;

-- The Markdown chunker (gk-markdown-1), for course sections and documents: the body is cut into
-- sections at its ATX headings (`#` to `######` at the start of a line, outside ``` and ~~~
-- fences), and each section by chunk_text_spans. A chunk carries its heading path: the title
-- (when not blank), then the headings open at its section, its own last (a first heading equal
-- to the title is not repeated). A bare heading right above a deeper one joins the section below. search_prefix is that path without the title, one heading a
-- line: indexed with the chunk (the title is indexed with every chunk already), not displayed.
-- Offsets as chunk_text_spans's, into body. Lines split at LF; a CR before it stays in the text.
create or replace function groundkit.chunk_markdown(body text, title text, max_chars integer, overlap_chars integer)
returns table (chunk_seq integer, char_start integer, char_end integer, content text,
               heading_path text[], search_prefix text)
language plpgsql immutable parallel safe
set search_path = pg_catalog, pg_temp
as $$
declare
    sec record;
    piece record;
    root text[] := case when btrim(coalesce(title, '')) = '' then '{}'::text[] else array[btrim(title)] end;
    levels integer[] := '{}';   -- the levels of the open headings
    heads text[] := '{}';       -- and their texts
    head text;
    sec_off integer;
    sec_text text;
    carry_off integer;     -- a bare heading waiting for the section below it
    carry_text text;
    s integer := 0;
begin
    perform groundkit._check_chunk_sizes(max_chars, overlap_chars);
    for sec in
        with lines as (
            select l.n, l.line,
                   (sum(length(l.line) + 1) over (order by l.n) - length(l.line) - 1)::integer as off,
                   l.line ~ '^ {0,3}(```|~~~)' as fence
              from string_to_table(coalesce(body, ''), E'\n') with ordinality l(line, n)
        ), marked as (
            select x.n, x.line, x.off,
                   not x.in_fence and not x.fence and x.line ~ '^ {0,3}#{1,6}([ \t\r]|$)' as heading
              from (select lines.*,
                           coalesce(count(*) filter (where lines.fence)
                                    over (order by lines.n rows between unbounded preceding and 1 preceding), 0)
                           % 2 = 1 as in_fence
                      from lines) x
        ), numbered as (
            select m.*, count(*) filter (where m.heading) over (order by m.n) as sec_no from marked m
        ), sections as (
            select u.sec_no, min(u.off) as off, string_agg(u.line, E'\n' order by u.n) as text,
                   max(u.line) filter (where u.heading) as heading_line,
                   count(*) filter (where btrim(u.line, E' \t\r') <> '') = 1 as bare
              from numbered u
             group by u.sec_no
        )
        select x.*, length(substring(x.heading_line from '^ {0,3}(#{1,6})')) as level,
               lead(length(substring(x.heading_line from '^ {0,3}(#{1,6})'))) over (order by x.sec_no) as next_level
          from sections x
         order by x.sec_no
    loop
        if sec.heading_line is not null then
            head := btrim(regexp_replace(regexp_replace(sec.heading_line, '^ {0,3}#{1,6}', ''),
                                         '[ \t]+#+[ \t\r]*$|^#+[ \t\r]*$', ''), E' \t\r');
            while cardinality(levels) > 0 and levels[cardinality(levels)] >= sec.level loop
                levels := levels[1:cardinality(levels) - 1];
                heads := heads[1:cardinality(heads) - 1];
            end loop;
            if head <> '' then
                levels := levels || sec.level;
                heads := heads || head;
            end if;
        end if;
        -- A heading alone, right above a deeper one ("## Module" then "### Lesson"), is no chunk
        -- of its own: it goes with the section below, under that section's heading path.
        if sec.bare and sec.heading_line is not null and sec.next_level > sec.level then
            carry_off := coalesce(carry_off, sec.off);
            carry_text := coalesce(carry_text || E'\n', '') || sec.text;
            continue;
        end if;
        sec_off := coalesce(carry_off, sec.off);
        sec_text := coalesce(carry_text || E'\n', '') || sec.text;
        carry_off := null;
        carry_text := null;
        if cardinality(root) > 0 and cardinality(heads) > 0 and heads[1] = root[1] then
            heading_path := root || heads[2:];
            search_prefix := nullif(array_to_string(heads[2:], E'\n'), '');
        else
            heading_path := root || heads;
            search_prefix := nullif(array_to_string(heads, E'\n'), '');
        end if;
        if length(sec_text) <= max_chars then
            -- a section that fits one window is one chunk: chunk_text_spans's result, without the call
            content := btrim(sec_text, E' \n\r\t');
            if content <> '' then
                chunk_seq := s;
                char_start := sec_off + length(sec_text) - length(ltrim(sec_text, E' \n\r\t'));
                char_end := char_start + length(content);
                return next;
                s := s + 1;
            end if;
            continue;
        end if;
        for piece in select * from groundkit.chunk_text_spans(sec_text, max_chars, overlap_chars) loop
            continue when piece.content = '';
            chunk_seq := s;
            char_start := sec_off + piece.char_start;
            char_end := sec_off + piece.char_end;
            content := piece.content;
            return next;
            s := s + 1;
        end loop;
    end loop;
    if s = 0 then
        chunk_seq := 0; char_start := 0; char_end := 0; content := '';
        heading_path := root; search_prefix := null;
        return next;
    end if;
end
$$;

-- A board post's thread header (gk-thread-1), indexed with each of its chunks and not displayed:
-- the thread's title (metadata.thread_title, unless it is the post's own title, which every
-- chunk indexes already), the board's name (metadata.board) and the tags (metadata.tags, an
-- array of strings or one string), one a line; null when there is none of them. The board's
-- name comes from the metadata, not the space id: groundkit knows a space by its id alone, often
-- an opaque key, and its tokens in every post would shift every post's length and score.
create or replace function groundkit.thread_header(title text, metadata jsonb)
returns text
language sql immutable parallel safe
set search_path = pg_catalog, pg_temp
as $$
    select nullif(concat_ws(E'\n',
                            case when t.thread_title is distinct from btrim(coalesce(title, ''))
                                 then t.thread_title end,
                            nullif(btrim(metadata ->> 'board'), ''),
                            t.tags), '')
      from (select nullif(btrim(metadata ->> 'thread_title'), '') as thread_title,
                   case jsonb_typeof(metadata -> 'tags')
                        when 'string' then nullif(btrim(metadata ->> 'tags'), '')
                        when 'array' then (select string_agg(g.v #>> '{}', ' ' order by g.o)
                                             from jsonb_array_elements(metadata -> 'tags') with ordinality g(v, o)
                                            where jsonb_typeof(g.v) = 'string')
                   end as tags) t
$$;

-- The chunkers' current versions. A chunk whose version is not its chunker's here, or whose
-- sizes are not its content type's (chunk_sizes), is out of date: groundkit status counts them,
-- groundkit rebuild re-chunks them (docs/chunking.md).
create or replace function groundkit.chunker_versions()
returns table (chunker text, chunker_version text)
language sql immutable parallel safe
set search_path = pg_catalog, pg_temp
as $$
    values ('text', 'gk-text-1'), ('markdown', 'gk-markdown-1'), ('thread', 'gk-thread-1'),
           ('segments', 'gk-segments-2')
$$;

-- The chunk sizes of a content type: config.chunk_sizes's entry for it, else chunk_chars and
-- chunk_overlap. (_materialize_many computes the same from the config row it holds.)
create or replace function groundkit.chunk_sizes(content_type text, out chunk_chars integer, out chunk_overlap integer)
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select coalesce((c.chunk_sizes -> content_type ->> 'chars')::integer, c.chunk_chars),
           coalesce((c.chunk_sizes -> content_type ->> 'overlap')::integer, c.chunk_overlap)
      from groundkit.config c
$$;

-- config.chunk_sizes: {"<content type>": {"chars": integer, "overlap": integer}, ...}, either key
-- optional; every content type's sizes must satisfy the same bounds as chunk_chars and
-- chunk_overlap (200 <= chars <= 1000000, 0 <= overlap, 2 * overlap < chars).
create or replace function groundkit._config_chunk_sizes_guard() returns trigger
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    ct text;
    entry jsonb;
    chars integer;
    overlap integer;
begin
    if jsonb_typeof(new.chunk_sizes) is distinct from 'object' then
        raise exception 'config.chunk_sizes must be a JSON object of content type -> {"chars", "overlap"}'
            using errcode = 'GK005';
    end if;
    for ct, entry in select key, value from jsonb_each(new.chunk_sizes) loop
        if not exists (select 1 from groundkit.content_types t where t.name = ct) then
            raise exception 'config.chunk_sizes: unknown content type %', quote_literal(ct) using errcode = 'GK005';
        end if;
        if jsonb_typeof(entry) <> 'object'
           or exists (select 1 from jsonb_each(entry) e
                       where e.key not in ('chars', 'overlap') or jsonb_typeof(e.value) <> 'number'
                          or (e.value #>> '{}')::numeric <> trunc((e.value #>> '{}')::numeric)
                          or abs((e.value #>> '{}')::numeric) > 2147483647) then
            raise exception 'config.chunk_sizes.%: must be an object with integer "chars" and/or "overlap"', ct
                using errcode = 'GK005';
        end if;
    end loop;
    for ct in select t.name from groundkit.content_types t loop
        chars := coalesce((new.chunk_sizes -> ct ->> 'chars')::integer, new.chunk_chars);
        overlap := coalesce((new.chunk_sizes -> ct ->> 'overlap')::integer, new.chunk_overlap);
        if chars not between 200 and 1000000 or overlap < 0 or overlap * 2 >= chars then
            raise exception 'chunk sizes for %: chars % and overlap % (need 200 <= chars <= 1000000 and 0 <= 2 * overlap < chars)',
                ct, chars, overlap using errcode = 'GK005';
        end if;
    end loop;
    return new;
end
$$;

create or replace trigger config_chunk_sizes_guard
    before insert or update on groundkit.config
    for each row execute function groundkit._config_chunk_sizes_guard();

-- Chunks made by another chunker version or with other sizes than their content type's now
-- (chunker_versions(), chunk_sizes()), by content type, chunker, version and sizes. Chunks
-- written before revision 0015 have no chunker. A change of the configuration re-chunks nothing
-- by itself: groundkit status reports these, groundkit rebuild re-chunks them.
create or replace function groundkit.outdated_chunks()
returns table (content_type text, chunker text, chunker_version text, chunk_chars integer,
               chunk_overlap integer, chunks bigint)
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    with expected as (
        select t.name as content_type, z.chunk_chars, z.chunk_overlap
          from groundkit.content_types t cross join lateral groundkit.chunk_sizes(t.name) z
    ), made as (
        select o.content_type, c.chunker, c.chunker_version, c.chunk_chars, c.chunk_overlap, count(*) as chunks
          from groundkit.chunks c join groundkit.objects o on o.object_id = c.object_id
         group by 1, 2, 3, 4, 5
    )
    select m.content_type, m.chunker, m.chunker_version, m.chunk_chars, m.chunk_overlap, m.chunks
      from made m join expected e on e.content_type = m.content_type
     where m.chunk_chars is distinct from e.chunk_chars or m.chunk_overlap is distinct from e.chunk_overlap
        or not exists (select 1 from groundkit.chunker_versions() v
                        where v.chunker = m.chunker and v.chunker_version = m.chunker_version)
     order by 1, 2, 3, 4, 5
$$;
