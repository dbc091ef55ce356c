-- The analysis: what a chunk's text and a query become before BM25 scores them. Replaceable.
-- docs/bm25/analysis.md.
--
-- One function, groundkit._analyze(language, text), analyzes both sides: chunks
-- (groundkit._chunk_tsv, sql/040_materialize.sql) and queries (groundkit._parse_query,
-- sql/058_query.sql). It is PostgreSQL's text search with a groundkit.<language> configuration
-- (the Snowball stemmer and stopwords of that language, unaccent chained before the stemmer),
-- after code tokens (pg_stat_statements, os.path.join, C++, E0425, ...) were split into their
-- parts, the whole tokens added as lexemes of their own. A change here that changes what any
-- text becomes is a new groundkit._analysis_version(): `groundkit status` then says the index
-- needs `groundkit rebuild`.

-- unaccent, where the server has it (contrib; the embedded server ships it): the first migrate
-- that may create it does (it is a trusted extension: the database's owner may); a migrate that
-- may not warns and goes on, and accents are kept (docs/bm25/analysis.md).
do $unaccent$
begin
    if not exists (select 1 from pg_catalog.pg_extension where extname = 'unaccent')
       and exists (select 1 from pg_catalog.pg_available_extensions where name = 'unaccent') then
        begin
            create extension unaccent;
        exception
            when insufficient_privilege then
                raise warning 'groundkit: cannot create the unaccent extension (%); accents are kept in the index', sqlerrm;
        end;
    end if;
    if not exists (select 1 from pg_catalog.pg_extension where extname = 'unaccent') then
        raise warning 'groundkit: this server has no unaccent extension (PostgreSQL contrib); accents are kept in the index, so "cafe" does not find "café"'
            using hint = 'Install the server''s contrib package, then run groundkit migrate and groundkit rebuild.';
    end if;
end
$unaccent$;

-- The unaccent dictionary, schema-qualified, or null.
create or replace function groundkit._unaccent_dictionary()
returns text
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select pg_catalog.format('%I.%I', n.nspname, d.dictname)
      from pg_catalog.pg_extension e
      join pg_catalog.pg_depend dep on dep.refobjid = e.oid and dep.classid = 'pg_catalog.pg_ts_dict'::regclass
      join pg_catalog.pg_ts_dict d on d.oid = dep.objid
      join pg_catalog.pg_namespace n on n.oid = d.dictnamespace
     where e.extname = 'unaccent' and d.dictname = 'unaccent'
     limit 1
$$;

-- One configuration per Snowball language PostgreSQL ships (pg_catalog.<language>, with its
-- <language>_stem dictionary): groundkit.<language>, a copy, with unaccent before the stemmer for
-- the token types that can hold accented letters. ASCII words skip unaccent (nothing to fold,
-- and a dictionary less per token). Made again by every migrate: a server that gained unaccent
-- gets it chained (and its digest, below, tells `groundkit status` that the index needs a rebuild).
do $configs$
declare
    lang text;
    dict text := groundkit._unaccent_dictionary();
begin
    for lang in
        select c.cfgname::text
          from pg_catalog.pg_ts_config c
         where c.cfgnamespace = 'pg_catalog'::regnamespace
           and exists (select 1 from pg_catalog.pg_ts_dict d
                        where d.dictnamespace = 'pg_catalog'::regnamespace and d.dictname = c.cfgname || '_stem')
         order by 1
    loop
        if not exists (select 1 from pg_catalog.pg_ts_config c
                            where c.cfgnamespace = 'groundkit'::regnamespace and c.cfgname = lang) then
            execute format('create text search configuration groundkit.%I (copy = pg_catalog.%I)', lang, lang);
        end if;
        execute format('alter text search configuration groundkit.%I alter mapping for word, hword, hword_part with %s',
                       lang, concat_ws(', ', dict, format('pg_catalog.%I', lang || '_stem')));
    end loop;
end
$configs$;

-- Accents folded (lower-case text in, as the analysis passes it) by the unaccent dictionary, or
-- the text itself where the server has none; made again by every migrate, naming the dictionary
-- where the extension put it. Only text with non-ASCII characters is looked up.
do $fold$
declare
    dict text := groundkit._unaccent_dictionary();
begin
    if dict is null then
        create or replace function groundkit._fold(t text) returns text
        language sql stable parallel safe
        as 'select t';
    else
        execute format($f$
            create or replace function groundkit._fold(t text) returns text
            language sql stable parallel safe
            as $b$
                select case when pg_catalog.octet_length(t) = pg_catalog.length(t) then t
                            else coalesce((pg_catalog.ts_lexize(%L::pg_catalog.regdictionary, t))[1], t) end
            $b$$f$, dict);
    end if;
end
$fold$;

-- The languages a space or an object may name: PostgreSQL's Snowball configurations, each as
-- groundkit.<language>, and whether accents are folded in it.
create or replace function groundkit.languages()
returns table (language text, configuration regconfig, folds_accents boolean)
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select c.cfgname::text, c.oid::regconfig,
           exists (select 1 from pg_catalog.pg_ts_config_map m
                     join pg_catalog.pg_ts_dict d on d.oid = m.mapdict
                    where m.mapcfg = c.oid and d.dictname = 'unaccent')
      from pg_catalog.pg_ts_config c
     where c.cfgnamespace = 'groundkit'::regnamespace
     order by 1
$$;

-- A language name as stored: null for English (the default, whose lexemes carry no prefix),
-- else the name. GK026 for a name groundkit has no configuration for.
create or replace function groundkit._check_language(p_language text)
returns text
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
begin
    if p_language is null or p_language = 'english' then
        return null;
    end if;
    if p_language !~ '^[a-z]{1,32}$'
       or not exists (select 1 from pg_catalog.pg_ts_config c
                       where c.cfgnamespace = 'groundkit'::regnamespace and c.cfgname = p_language) then
        raise exception 'unknown language %', quote_literal(p_language)
            using errcode = 'GK026',
                  hint = 'Languages are PostgreSQL''s Snowball configurations: select language from groundkit.languages().';
    end if;
    return p_language;
end
$$;

-- The analysis's version: a change to what any text becomes is a new one (docs/bm25/analysis.md,
-- "Versioned like a chunker"). gk-analysis-1 was to_tsvector('groundkit.english') alone.
create or replace function groundkit._analysis_version()
returns text
language sql immutable parallel safe
as $$ select 'gk-analysis-2'::text $$;

-- A code token's case changes as spaces (lower to upper; before the last capital of an acronym
-- followed by a word: HTTPResponse), only when it has both cases.
create or replace function groundkit._split_case(s text)
returns text
language sql immutable parallel safe
as $$
    select case when pg_catalog.lower(s) = s or pg_catalog.upper(s) = s then s
                else pg_catalog.regexp_replace(pg_catalog.regexp_replace(s,
                         '([[:lower:]])([[:upper:]])', '\1 \2', 'g'),
                         '([[:upper:]])([[:upper:]][[:lower:]]{2})', '\1 \2', 'g') end
$$;

-- A code token's changes between letters and digits as spaces, only when it has a digit.
create or replace function groundkit._split_digits(s text)
returns text
language sql immutable parallel safe
as $$
    select case when pg_catalog.translate(s, '0123456789', '') = s then s
                else pg_catalog.regexp_replace(pg_catalog.regexp_replace(s,
                         '([[:alpha:]])([[:digit:]])', '\1 \2', 'g'),
                         '([[:digit:]])([[:alpha:]])', '\1 \2', 'g') end
$$;

-- A text's code tokens, split (docs/bm25/analysis.md, "The analysis"): the text with '<' and '>'
-- read as spaces and each code token replaced by its parts between spaces (so the parser
-- positions the parts where the token stood), and the tokens' whole lexemes (lower-cased,
-- accents folded; one element per occurrence). A code token is a run of [alnum _ . / \ : ~ @ + #]
-- holding a signal: an underscore or '#' next to an alphanumeric, a '+' after one, a dot, slash,
-- backslash or '::' between alphanumerics, a lower-to-upper case change after two lower-case
-- letters and before a letter (getUserName, JavaScript; not mRNA, iPhone, pH, clpC: one letter is
-- a word's prefix or suffix, not an identifier's word; splitting those cost SciFact 0.003
-- nDCG@10), a letter next to a digit, a leading '.' before a letter (after leading '/', '~', '@',
-- ':' and underscores: ~/.bashrc; not the dots of an ellipsis, wait...then). A run starts at a
-- character of the set other than '+' and '#' (a '#' before an alphanumeric: #include), so a sign
-- is not part of it (+0.5). Left as they are: URLs and e-mail addresses (PostgreSQL's parser has
-- its own tokens for them), plain decimals, and runs that hold no signal once leading '/', '~',
-- '@', ':' and underscores, trailing punctuation and a single trailing '+' are trimmed.
-- Parts: split at every non-alphanumeric, at a lower-to-upper change (and before the last
-- capital of an acronym followed by a word: HTTPResponse), between letters and digits; a 0x
-- number's part is its digits.
-- One regexp_replace marks every token (\x01 before, \x02 after; those characters in the text
-- become spaces first) and the tokens are processed row by row: a second pass splitting the text
-- around the same expression cost as much as the first.
create or replace function groundkit._code_split(t text, out rewritten text, out wholes text[])
language sql stable parallel safe
as $$
    select pg_catalog.string_agg(
               case when z.i = 1 then z.piece
                    when y.ok then ' ' || y.parts || ' ' || y.rest
                    else y.tok || y.rest end, '' order by z.i),
           pg_catalog.array_agg(y.whole order by z.i) filter (where y.ok)
      from pg_catalog.unnest(pg_catalog.string_to_array(pg_catalog.regexp_replace(
               pg_catalog.translate(t, E'<>\x01\x02', '    '),
               '(?<![[:alnum:]_./\\:~@])(?:[~/@:]*_*\.[[:alpha:]]|[[:alnum:]_./\\:~@]*(?:[[:alnum:]][_#+]|[_#][[:alnum:]]|[[:lower:]]{2}[[:upper:]][[:alpha:]]|[[:alpha:]][[:digit:]]|[[:digit:]][[:alpha:]]|[[:alnum:]](?:[./\\]|::)[[:alnum:]]))[[:alnum:]_./\\:+#@]*',
               E'\x01\\&\x02', 'g'), E'\x01')) with ordinality as z(piece, i)
     cross join lateral (
           select x.tok, x.rest, o.ok,
                  case when not o.ok then null
                       when v.s ~ '^0[xX][[:xdigit:]]+$' then pg_catalog.substr(v.s, 3)
                       -- (plain passes, each only where it can split: one pass with lookaheads
                       -- cost four times as much)
                       else groundkit._split_digits(groundkit._split_case(
                                pg_catalog.regexp_replace(v.s, '[^[:alnum:]]+', ' ', 'g'))) end as parts,
                  case when o.ok then groundkit._fold(pg_catalog.lower(v.s)) end as whole
             from (select pg_catalog.split_part(z.piece, E'\x02', 1) as tok,
                          pg_catalog.substr(z.piece, pg_catalog.strpos(z.piece, E'\x02') + 1) as rest) x
            cross join lateral (
                  select case when w.s like '%+' and w.s not like '%++' then pg_catalog.left(w.s, -1) else w.s end as s
                    from (select pg_catalog.btrim(pg_catalog.rtrim(pg_catalog.ltrim(x.tok, '~/@:'), '.:/\~@'), '_') as s) w
                  offset 0) v
            -- (a marked token holds a signal, and the expression above finds the same signals as
            -- this test, so an untrimmed token skips it; trimmed, it is tested again. offset 0:
            -- each computed once, where the flattened query computed them for every reference)
            cross join lateral (
                  select z.i > 1 and pg_catalog.strpos(x.tok, '://') = 0 and pg_catalog.strpos(v.s, '@') = 0
                         and (v.s = x.tok
                              or v.s ~ '[[:alnum:]][_#+]|[_#][[:alnum:]]|^\.[[:alpha:]]|[[:lower:]]{2}[[:upper:]][[:alpha:]]|[[:alpha:]][[:digit:]]|[[:digit:]][[:alpha:]]|[[:alnum:]](?:[./\\]|::)[[:alnum:]]')
                         and v.s !~ '^[[:digit:]]+\.[[:digit:]]+$' as ok
                  offset 0) o
     ) y
$$;

-- Whether a text may hold a code token or angle brackets (the cheap test before
-- groundkit._code_split; prose without any is analyzed by to_tsvector alone).
create or replace function groundkit._has_code(t text)
returns boolean
language sql immutable parallel safe
as $$
    select t ~ '[_#+<>]|\.[[:alpha:]]|[[:lower:]]{2}[[:upper:]][[:alpha:]]|[[:alpha:]][[:digit:]]|[[:digit:]][[:alpha:]]|[[:alnum:]](?:[./\\]|::)[[:alnum:]]'
$$;

-- The text the parser reads: code tokens split, angle brackets as spaces (or the text itself).
create or replace function groundkit._analysis_text(t text)
returns text
language sql stable parallel safe
as $$
    select case when groundkit._has_code(t) then coalesce((groundkit._code_split(t)).rewritten, '') else t end
$$;

-- A text search configuration's name for a language as stored (null: English).
create or replace function groundkit._language_config(p_language text)
returns regconfig
language sql stable parallel safe
as $$
    select pg_catalog.format('groundkit.%I', coalesce(p_language, 'english'))::pg_catalog.regconfig
$$;

-- Lexemes of a language other than English carry it as a prefix ('french|chat'): a French stem
-- and an English word of the same letters are different terms with their own statistics. No
-- lexeme the analysis makes contains '|' (PostgreSQL's parser treats it as a separator, and it
-- is not a code token's character) or white space, so every lexeme of the tsvector's text form
-- starts at a quote at its beginning or after a space. p_language is not null (English's lexemes
-- carry no prefix). Each argument is named once, so that it is inlined.
create or replace function groundkit._prefix_lexemes(v tsvector, p_language text)
returns tsvector
language sql immutable parallel safe
as $$
    select pg_catalog.regexp_replace(v::text, '(^| )''', '\1''' || p_language || '|', 'g')::tsvector
$$;

-- A text with code tokens analyzed (groundkit._analyze's second branch): the parts where the
-- tokens stood, and the whole tokens as extra lexemes, counted once per occurrence, after the
-- text's positions (phrases use the parts). A function of its own: it holds sub-selects, which
-- would keep _analyze from being inlined.
create or replace function groundkit._analyze_code(p_language text, t text)
returns tsvector
language sql stable parallel safe
as $$
    select pg_catalog.to_tsvector(groundkit._language_config(p_language), coalesce(s.rewritten, ''))
           || coalesce((select pg_catalog.string_agg(
                                   '''' || pg_catalog.replace(pg_catalog.replace(w.lexeme, '\', '\\'), '''', '''''')
                                   || ''':' || pg_catalog.array_to_string(
                                       array(select pg_catalog.generate_series(1, w.n::integer)), ','),
                                   ' ')::tsvector
                          from (select u.lexeme, count(*) as n
                                  from pg_catalog.unnest(s.wholes) as u(lexeme)
                                 where u.lexeme <> ''
                                 group by u.lexeme) w), ''::tsvector)
      from groundkit._code_split(t) s
$$;

-- THE analysis (docs/bm25/analysis.md): text in a language (null: English) as a tsvector. Code
-- tokens as their parts, in place, and whole (groundkit._analyze_code). One expression with no
-- sub-select and no SET clause, so that it is inlined where it is called (every name is
-- qualified): prose without a code signal costs one regular-expression test more than
-- to_tsvector. It names its arguments several times, so PostgreSQL inlines it only where they
-- are cheap (a column, a parameter) and calls it otherwise: a call cost a query's terms 0.1 ms.
create or replace function groundkit._analyze(p_language text, t text)
returns tsvector
language sql stable parallel safe
as $$
    select case when p_language is null
                then case when not groundkit._has_code(t)
                          then pg_catalog.to_tsvector('groundkit.english'::pg_catalog.regconfig, t)
                          else groundkit._analyze_code(null, t) end
                else groundkit._prefix_lexemes(
                         case when not groundkit._has_code(t)
                              then pg_catalog.to_tsvector(groundkit._language_config(p_language), t)
                              else groundkit._analyze_code(p_language, t) end,
                         p_language) end
$$;

-- Words whose analysis stands for a configuration's (docs/bm25/analysis.md, "A PostgreSQL major
-- upgrade"): inflected words of several languages, accented words and code tokens. A stemmer
-- or a dictionary that changes what one of them becomes changes the digest.
create or replace function groundkit._analysis_probe()
returns text
language sql immutable parallel safe
as $$
    select 'caresses ponies ties caress cats feed agreed plastered motoring sing conflated troubled '
           'sized hopping tanned falling hissing fizzed failing filing happy sky relational '
           'conditional rational valenci hesitanci digitizer conformabli radicalli differentli '
           'vileli analogousli vietnamization predication operator feudalism decisiveness '
           'hopefulness callousness formaliti sensitiviti sensibiliti triplicate formative '
           'formalize electriciti electrical hopeful goodness revival allowance inference airliner '
           'gyroscopic adjustable defensible irritant replacement adjustment dependent adoption '
           'homologou communism activate angulariti homologous effective bowdlerize probate rate '
           'cease controll roll generously generalizations organization universities '
           'continuellement nationalité heureusement gestionnaire développement amélioration '
           'Möglichkeiten Häuser Bedürfnisse Entwicklungen zusammenarbeiten verständlich '
           'informaciones corriendo rápidamente naciones organización estudiantes '
           'brincadeiras possibilidades coração nazionalità velocemente sviluppatori '
           'ontwikkelingen mogelijkheden utvecklingen möjligheter udviklingen muligheder '
           'kehitykset mahdollisuudet fejlesztések lehetőségek gelişmeler olasılıklar '
           'возможности развитие разработчиками πιθανότητες ανάπτυξη '
           'Café naïve résumé façade Ærøskøbing Straße coöperate '
           'ERR_CONNECTION_REFUSED pg_stat_statements getHTTPResponse os.path.join /usr/lib/libpq.so '
           '0x1F E0425 v2.0.1 C++ C# F# .NET std::vector #include <stdio.h> x86_64 CD4+ 3.11'::text
$$;

-- What a language's analysis makes of the probe words, as a digest.
create or replace function groundkit._analysis_digest(p_language text)
returns text
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select md5(groundkit._analyze(nullif(p_language, 'english'), groundkit._analysis_probe())::text)
     where exists (select 1 from pg_catalog.pg_ts_config c
                    where c.cfgnamespace = 'groundkit'::regnamespace and c.cfgname = p_language)
$$;

-- The analysis now: its version, whether accents are folded, the server's version and every
-- language's digest (the state a rebuild records in groundkit.analysis_state).
create or replace function groundkit._analysis_now(
    out version text, out digests jsonb, out unaccent boolean, out server_version_num integer)
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select groundkit._analysis_version(),
           (select jsonb_object_agg(l.language, groundkit._analysis_digest(l.language)) from groundkit.languages() l),
           groundkit._unaccent_dictionary() is not null,
           current_setting('server_version_num')::integer
$$;

-- Record the analysis now as the index's (rebuild, and a migrate of a database without chunks).
create or replace function groundkit._analysis_record()
returns void
language sql
set search_path = pg_catalog, pg_temp
as $$
    delete from groundkit.analysis_state;
    insert into groundkit.analysis_state (version, digests, unaccent, server_version_num)
    select n.version, n.digests, n.unaccent, n.server_version_num from groundkit._analysis_now() n;
$$;

-- A database without chunks has nothing analyzed otherwise: it is at the analysis now.
do $record$
begin
    if not exists (select 1 from groundkit.chunks) then
        perform groundkit._analysis_record();
    end if;
end
$record$;

-- The languages the index holds (English always, each space's, and those its objects name) and,
-- for each, whether the index was analyzed as this groundkit and this server analyze now: the
-- analysis's version and the language's digest recorded by the last rebuild (or by the migrate
-- of an empty database) against today's. `groundkit status` says a rebuild is needed when
-- `current` is false.
create or replace function groundkit.analysis_status()
returns table (language text, built_version text, built_server_version integer, built_digest text,
               version text, digest text, folds_accents boolean, current boolean)
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    with used as (
        select 'english'::text as language
        union
        select s.language from groundkit.spaces s where s.language is not null
        union
        select l.language from groundkit.space_languages l
    )
    select u.language, a.version, a.server_version_num, a.digests ->> u.language,
           groundkit._analysis_version(), groundkit._analysis_digest(u.language),
           (select l.folds_accents from groundkit.languages() l where l.language = u.language),
           coalesce(a.version = groundkit._analysis_version()
                    and a.digests ->> u.language = groundkit._analysis_digest(u.language), false)
      from used u
      left join groundkit.analysis_state a on true
     order by u.language <> 'english', u.language
$$;
