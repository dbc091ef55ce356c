-- Reading a query: its syntax (quoted phrases, exclusions, OR), its terms in each language it is
-- analyzed in, and the filter its phrases and exclusions make. Replaceable.
-- docs/bm25/analysis.md, "Query syntax".
--
-- The grammar is small enough for one regular expression to tokenize it: an item is a quoted
-- phrase or a run of characters that are neither white space nor a quote, either one after an
-- optional '-'. Everything else follows from a few rules on the items, so any text is a query:
-- a quote without its pair matches neither alternative and is skipped, the words around it read
-- as words. It is SQL so that every surface (SQL, Python, HTTP, MCP) reads a query alike.

-- A query's items in order: kind 'phrase', 'word' or 'or', whether excluded, and the text.
-- A '-' excludes only before a letter or a quote ('--force', '-1' and 'a-b' are words); 'OR' is
-- an operator only in capitals and between two terms that are not excluded (elsewhere a word).
create or replace function groundkit._query_items(query text)
returns table (i bigint, kind text, neg boolean, body text)
language sql immutable parallel safe
as $$
    select r.i,
           case when r.kind <> 'or' then r.kind
                when lag(r.kind) over w is not null and lead(r.kind) over w is not null
                     and lag(r.kind) over w <> 'or' and lead(r.kind) over w <> 'or'
                     and not lag(r.neg) over w and not lead(r.neg) over w then 'or'
                else 'word' end,
           r.neg, r.body
      from (select z.i,
                   case when m[2] is not null then 'phrase'
                        when m[4] = 'OR' and m[3] = '' then 'or'
                        else 'word' end as kind,
                   case when m[2] is not null then m[1] = '-'
                        else m[3] = '-' and m[4] ~ '^[[:alpha:]]' end as neg,
                   case when m[2] is not null then m[2]
                        when m[3] = '-' and m[4] !~ '^[[:alpha:]]' then '-' || m[4]
                        else m[4] end as body
              from pg_catalog.regexp_matches(query, '(-?)"([^"]*)"|(-?)([^[:space:]"]+)', 'g')
                   with ordinality as z(m, i)) r
    window w as (order by r.i)
$$;

-- Whether a query uses any syntax (else it is a bag of words as it stands: the common case
-- skips the tokenizer).
create or replace function groundkit._query_has_syntax(query text)
returns boolean
language sql immutable parallel safe
as $$
    select query ~ '"|(^|[[:space:]])-[[:alpha:]]|(^|[[:space:]])OR([[:space:]]|$)'
$$;

-- A phrase of text in a language (null: English) as a tsquery over the analysis's positions:
-- the parts of code tokens in place (groundkit._analysis_text), stopwords keeping their
-- distance, lexemes at one position ORed. Null when the text has no lexeme (stopwords only).
create or replace function groundkit._phrase(p_language text, t text)
returns tsquery
language sql stable parallel safe
as $$
    select pg_catalog.string_agg(case when o.d is null then o.alt else '<' || o.d || '> ' || o.alt end, ' '
                                 order by o.pos)::tsquery
      from (select g.pos, g.alt, g.pos - pg_catalog.lag(g.pos) over (order by g.pos) as d
              from (select p.pos, '(' || pg_catalog.string_agg(
                                   '''' || pg_catalog.replace(pg_catalog.replace(u.lexeme, '\', '\\'), '''', '''''') || '''',
                                   ' | ' order by u.lexeme) || ')' as alt
                      from pg_catalog.unnest(case when p_language is null
                               then pg_catalog.to_tsvector('groundkit.english'::pg_catalog.regconfig,
                                                           groundkit._analysis_text(t))
                               else groundkit._prefix_lexemes(
                                   pg_catalog.to_tsvector(groundkit._language_config(p_language),
                                                          groundkit._analysis_text(t)),
                                   p_language) end) u
                     cross join pg_catalog.unnest(u.positions) as p(pos)
                     group by p.pos) g) o
$$;

-- A query read in the given languages ('english', 'french', ...): its terms (each language's
-- analysis of the words it scores, lexemes prefixed as the index's are) with how often each
-- occurs, and its filter (null: none), a tsquery every returned chunk must match. Terms: every
-- word and phrase that is not excluded. Filter: each phrase, and each group of terms joined by
-- OR that holds a phrase (one of them), must match; no excluded word or phrase may. Each clause
-- holds when it holds in any of the languages: a chunk has its own language's lexemes only, so
-- it is held to its own language's reading.
create or replace function groundkit._parse_query(query text, languages text[],
                                                  out terms text[], out qtfs integer[], out filter tsquery)
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
declare
    it record;
    -- the items: kind, excluded, text; the OR group each positive item belongs to
    k text[] := '{}';
    neg boolean[] := '{}';
    body text[] := '{}';
    grp integer[] := '{}';
    n integer := 0;
    g integer := 0;
    j integer;
    clause tsquery;
    member tsquery;
    lang text;
    has_phrase boolean;
begin
    if groundkit._query_has_syntax(coalesce(query, '')) then
        for it in select * from groundkit._query_items(query) order by 1 loop
            n := n + 1;
            k := k || it.kind;
            neg := neg || it.neg;
            body := body || it.body;
        end loop;
        -- OR joins the terms on its two sides into one group
        for j in 1 .. n loop
            if k[j] = 'or' or neg[j] then
                grp := grp || null::integer;
            else
                if not (j > 1 and k[j - 1] = 'or') then
                    g := g + 1;
                end if;
                grp := grp || g;
            end if;
        end loop;
        -- the clauses, each holding in any language
        for j in 1 .. g loop
            select bool_or(x.k = 'phrase') into has_phrase
              from unnest(k, grp) as x(k, g) where x.g = j;
            continue when not has_phrase;
            clause := null;
            foreach lang in array languages loop
                for it in select x.b from unnest(body, grp) as x(b, g) where x.g = j loop
                    member := groundkit._phrase(nullif(lang, 'english'), it.b);
                    if member is null then
                        clause := null;  -- a member without lexemes matches anything: no clause
                        exit;
                    end if;
                    clause := case when clause is null then member else clause || member end;
                end loop;
                exit when member is null;
            end loop;
            if member is not null and clause is not null then
                filter := case when filter is null then clause else filter && clause end;
            end if;
        end loop;
        for j in 1 .. n loop
            continue when not neg[j];
            clause := null;
            foreach lang in array languages loop
                member := groundkit._phrase(nullif(lang, 'english'), body[j]);
                if member is not null then
                    clause := case when clause is null then member else clause || member end;
                end if;
            end loop;
            if clause is not null then
                filter := case when filter is null then !! clause else filter && !! clause end;
            end if;
        end loop;
    end if;
    -- (the words and phrases not excluded: bag is groundkit._query_text(query))
    select array_agg(x.term order by x.term), array_agg(x.qtf order by x.term)
      into terms, qtfs
      from groundkit._bag_terms(query, languages) x;
    terms := coalesce(terms, '{}');
    qtfs := coalesce(qtfs, '{}');
end
$$;

-- The text of a query that its terms come from: its words and phrases without quotes, OR and
-- exclusions (the query itself when it uses no syntax). What a dense leg embeds of a query;
-- groundkit.query_text for readers, _query_text inlined where search calls it (it holds no
-- sub-select: the items' text is a function of its own, called only for a query with syntax;
-- planning it with every search cost 0.3 ms).
create or replace function groundkit._query_items_text(query text)
returns text
language sql immutable parallel safe
as $$
    select coalesce((select pg_catalog.string_agg(x.body, ' ' order by x.i)
                       from groundkit._query_items(query) x
                      where not x.neg and x.kind <> 'or'), '')
$$;

create or replace function groundkit._query_text(query text)
returns text
language sql immutable parallel safe
as $$
    select case when groundkit._query_has_syntax(query) then groundkit._query_items_text(query)
                else coalesce(query, '') end
$$;

create or replace function groundkit.query_text(query text)
returns text
language sql immutable parallel safe
set search_path = pg_catalog, pg_temp
as $$
    select groundkit._query_text(query)
$$;

-- A query's terms in the given languages ('english', 'french', ...), each with how often it
-- occurs: the analysis of its words and phrases (groundkit._query_text), lexemes prefixed as the
-- index's are. What groundkit._parse_query returns as terms, without its filter. PL/pgSQL, so
-- that the text is a variable when it reaches _analyze, which is inlined only with cheap
-- arguments (called instead, it cost a query's terms 60 µs more).
create or replace function groundkit._bag_terms(query text, languages text[])
returns table (term text, qtf integer)
language plpgsql stable
set search_path = pg_catalog, pg_temp
set plan_cache_mode = force_generic_plan
as $$
declare
    t text := groundkit._query_text(query);
begin
    return query
    select u.lexeme, coalesce(array_length(u.positions, 1), 1)
      from unnest(languages) as l(language)
     cross join lateral unnest(groundkit._analyze(nullif(l.language, 'english'), t)) u;
end
$$;

-- The analyzed terms of a query in English, the default language, and how often each occurs in
-- it: its words and phrases, not its exclusions (docs/bm25/analysis.md). Never raises for the
-- query's content.
create or replace function groundkit.query_terms(query text)
returns table (term text, qtf integer)
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select b.term, b.qtf from groundkit._bag_terms(query, array['english']) b
$$;

-- The language of a term: the prefix before '|' of a lexeme of another language than English.
create or replace function groundkit._term_language(term text)
returns text
language sql immutable parallel safe
as $$
    select case when pg_catalog.strpos(term, '|') > 0 then pg_catalog.split_part(term, '|', 1) else 'english' end
$$;
