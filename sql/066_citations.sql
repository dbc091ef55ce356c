-- Citations (docs/sql-api.md, "Citations"): the snippet and the thread of a hit for
-- groundkit.search, and groundkit.fetch_citation, a cited chunk in its context. Replaceable.
--
-- The snippet is a short excerpt of the chunk around the query's best-matching terms.
-- ts_headline picks it: it parses the chunk with its language's configuration, the one the index
-- and the query's analysis use, so a match is a token whose stem is a query term, as in ranking
-- ("running" matches the query "runs"; "rerun" does not). It does not escape HTML and drops
-- anything its parser reads as a tag, so the text goes through it with its own markup
-- neutralised: '<' and '>' travel as the control characters 3 and 4 (back after it), the matches
-- come back between the control characters 1 and 2, the result is HTML-escaped, and only then
-- do 1 and 2 become the caller's markers. Those four characters in the chunk itself become
-- spaces, so nothing in a chunk can forge a marker or inject markup. (Our own SQL over the
-- chunk's tsvector positions would need the text's tokens with their character offsets, which
-- only ts_parse gives, and a lexize call per token from SQL, where ts_headline does both in C.)

-- The query's terms in a language (null: English) as one tsquery of lexemes ORed together,
-- without the language's prefix (each term quoted, so that no character of it is tsquery
-- syntax); null when the query has no term. The snippet's: ts_headline reads the chunk with the
-- language's configuration, whose lexemes carry no prefix.
create or replace function groundkit._query_tsquery(query text, language text default null)
returns tsquery
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select nullif(string_agg('''' || replace(replace(
                                 case when language is null then q.term
                                      else substr(q.term, length(language) + 2) end,
                                 '\', '\\'), '''', '''''') || '''', ' | '
                             order by q.term), '')::tsquery
      -- (the query's words as a column: groundkit._analyze is inlined only with cheap arguments)
      from (select groundkit._query_text(query) as t offset 0) x
     cross join lateral unnest(groundkit._analyze(language, x.t)) as q(term)
$$;

-- Text made safe to put in HTML: & < > " ' as entities.
create or replace function groundkit._html_escape(t text)
returns text
language sql immutable parallel safe
as $$
    select pg_catalog.replace(pg_catalog.replace(pg_catalog.replace(pg_catalog.replace(pg_catalog.replace(
               t, '&', '&amp;'), '<', '&lt;'), '>', '&gt;'), '"', '&quot;'), '''', '&#39;')
$$;

-- The snippet of one chunk in a language (null: English) for the tsquery q (groundkit._query_tsquery
-- in that language): up to two fragments of
-- 12-18 words around the matches, joined by ' … ', on one line (line breaks and tabs become
-- spaces, which the parser reads alike: a regexp collapsing runs of spaces cost a third of the
-- snippet), HTML-escaped, matches between mark_start and mark_end. Without a match, the chunk's
-- first words.
--
-- Without `set search_path`, so that it is inlined into groundkit.search's statement (a call
-- with a SET clause costs tens of µs a row): every name below is schema-qualified, its callers
-- pin search_path, and PUBLIC may not execute it (sql/090_roles.sql).
create or replace function groundkit._snippet(content text, q tsquery, mark_start text, mark_end text,
                                              language text default null)
returns text
language sql stable
as $$
    select pg_catalog.replace(pg_catalog.replace(
               groundkit._html_escape(pg_catalog.translate(pg_catalog.btrim(
                   pg_catalog.ts_headline(groundkit._language_config(language),
                                          pg_catalog.translate(content, E'\x01\x02\x03\x04<>\n\r\t',
                                                               E'    \x03\x04   '),
                                          q,
                                          E'StartSel=\x01, StopSel=\x02, MaxFragments=2, MaxWords=18, '
                                          'MinWords=12, FragmentDelimiter=" … "')),
                   E'\x03\x04', '<>')),
               E'\x01', mark_start),
           E'\x02', mark_end)
$$;

-- The markers' checks: given, at most 64 characters, none of the control characters the
-- snippet uses inside. True, or GK005.
create or replace function groundkit._snippet_check(snippet_start text, snippet_end text)
returns boolean
language plpgsql immutable
set search_path = pg_catalog, pg_temp
as $$
begin
    if snippet_start is null or snippet_end is null then
        raise exception 'snippet_start and snippet_end must not be NULL' using errcode = 'GK005';
    end if;
    if length(snippet_start) > 64 or length(snippet_end) > 64 then
        raise exception 'snippet_start and snippet_end are at most 64 characters' using errcode = 'GK005';
    end if;
    if snippet_start || snippet_end ~ E'[\\x01-\\x04]' then
        raise exception 'snippet_start and snippet_end must not contain the control characters 1-4'
            using errcode = 'GK005';
    end if;
    return true;
end
$$;

-- A board post's thread (docs/sql-api.md, "Citations"): metadata.thread_id and
-- metadata.thread_title, else the post itself (an opening post names its own thread: its id and
-- its title); nulls for other content types. Inlined, as _snippet.
create or replace function groundkit._thread_of(content_type text, object_id text, title text, metadata jsonb)
returns table (thread_id text, thread_title text)
language sql immutable
as $$
    select case when content_type = 'board_post'
                then coalesce(metadata ->> 'thread_id', object_id) end,
           case when content_type = 'board_post'
                then coalesce(metadata ->> 'thread_title', title) end
$$;

-- The context of a cited chunk (groundkit.fetch_citation), from its object's body or segments
-- in the log: a transcript's window of segments (the chunk's, and two more on each side), a
-- board post whole, a section or document chunk's whole section (the run of chunks around it
-- that share its heading path), anything else the chunk with the chunks before and after it. Offsets are
-- char_start/char_end's: into the body, or into a transcript's segment texts joined by one space.
-- A section or other chunk made before revision 0015 has no offsets: its context is itself.
create or replace function groundkit._citation_context(
    c groundkit.chunks, content_type text, body text, segments jsonb)
returns table (context text, char_start integer, char_end integer, start_ms bigint, end_ms bigint)
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    lo integer;
    hi integer;
begin
    if _citation_context.content_type = 'transcript' and segments is not null then
        return query
        -- the segments as the transcript chunker joins them (groundkit.chunk_transcript):
        -- trimmed, the empty ones left out, offsets into their texts joined by one space
        with seg as (
            select y.ord, y.txt, y.s_ms, y.e_ms, row_number() over (order by y.ord) as i,
                   (sum(length(y.txt) + 1) over (order by y.ord) - length(y.txt) - 1)::integer as off
              from (select e.ord, btrim(e.s ->> 'text', E' \n\r\t') as txt,
                           (e.s ->> 'start_ms')::numeric::bigint as s_ms,
                           (e.s ->> 'end_ms')::numeric::bigint as e_ms
                      from jsonb_array_elements(segments) with ordinality as e(s, ord)) y
             where y.txt <> ''
        ),
        -- the segments the chunk covers: by its offsets, or, on a chunk made before revision
        -- 0015, by its times (a chunk never splits a segment but the one longer than a window)
        covered as (
            select min(sg.i) as lo, max(sg.i) as hi from seg sg
             where case when c.char_start is not null
                        then sg.off < c.char_end and sg.off + length(sg.txt) > c.char_start
                        else sg.s_ms >= c.start_ms and sg.e_ms <= c.end_ms end
        ),
        -- and two more on each side
        win as (
            select sg.* from seg sg, covered cv
             where sg.i between cv.lo - 2 and cv.hi + 2
        )
        select string_agg(w.txt, ' ' order by w.ord), min(w.off), max(w.off + length(w.txt)),
               min(w.s_ms), max(w.e_ms)
          from win w;
    elsif _citation_context.content_type = 'board_post' then
        return query select body, 0, length(body), null::bigint, null::bigint;
    elsif c.char_start is null or c.char_end is null then
        return query select c.content, null::integer, null::integer, c.start_ms, c.end_ms;
    else
        if c.heading_path is not null then
            -- the run of chunks around this one under the same headings (a heading repeated
            -- further down the body is another section)
            select min(x.char_start), max(x.char_end) into lo, hi
              from groundkit.chunks x
             where x.object_id = c.object_id and x.object_version = c.object_version
               and x.chunk_seq > coalesce((select max(y.chunk_seq) from groundkit.chunks y
                                            where y.object_id = c.object_id and y.chunk_seq < c.chunk_seq
                                              and y.heading_path is distinct from c.heading_path), -1)
               and x.chunk_seq < coalesce((select min(y.chunk_seq) from groundkit.chunks y
                                            where y.object_id = c.object_id and y.chunk_seq > c.chunk_seq
                                              and y.heading_path is distinct from c.heading_path),
                                          2147483647);
        else
            select min(x.char_start), max(x.char_end) into lo, hi
              from groundkit.chunks x
             where x.object_id = c.object_id and x.object_version = c.object_version
               and x.chunk_seq between c.chunk_seq - 1 and c.chunk_seq + 1;
        end if;
        return query select substr(body, lo + 1, hi - lo), lo, hi, null::bigint, null::bigint;
    end if;
end
$$;

-- A cited chunk with its context, for a reader (docs/sql-api.md, "Citations"): the chunk's
-- columns as groundkit.search returns them (but the three that name it, the arguments), and
-- groundkit._citation_context's text around it. Under the permission predicate search uses
-- (groundkit._reader, groundkit._visible_chunk): a reader who may not see the object gets no
-- row, exactly as for an object, version or chunk that does not exist. Only the current version
-- has chunks, so an older version is no row too. A login bound to one member (login_members)
-- gets GK010 for any other reader, as from search.
create or replace function groundkit.fetch_citation(
    reader_sub text, object_id text, version bigint, chunk_seq integer)
returns table (
    content_type text,
    space_id text,
    title text,
    content text,
    start_ms bigint,
    end_ms bigint,
    char_start integer,
    char_end integer,
    heading_path text[],
    thread_id text,
    thread_title text,
    chunker text,
    context text,
    context_char_start integer,
    context_char_end integer,
    context_start_ms bigint,
    context_end_ms bigint)
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select o.content_type, o.space_id, o.title, c.content, c.start_ms, c.end_ms, c.char_start,
           c.char_end, c.heading_path, t.thread_id, t.thread_title, c.chunker, x.context, x.char_start, x.char_end, x.start_ms, x.end_ms
      from groundkit._reader(fetch_citation.reader_sub) r
      join groundkit.chunks c on c.object_id = fetch_citation.object_id
                             and c.object_version = fetch_citation.version
                             and c.chunk_seq = fetch_citation.chunk_seq
     cross join lateral groundkit._visible_chunk(c.chunk_id, r.rank, r.member_sub, null, null) v
      join groundkit.objects o on o.object_id = c.object_id
      join groundkit.content_log l on l.seq = o.log_seq
     cross join lateral groundkit._thread_of(o.content_type, o.object_id, o.title, o.metadata) t
     cross join lateral groundkit._citation_context(c, o.content_type, l.body, l.segments) x
     where groundkit._reader_allowed(fetch_citation.reader_sub)
$$;
