-- Search modes per content type: what a search in mode 'auto' runs, per content type searched
-- (config.search_modes, revision 0031; docs/dense.md, "Search modes per content type").
-- Replaceable: re-applied after every `groundkit migrate`.

-- Set (or, with mode 'auto', clear) one content type's search mode and hybrid's settings; the
-- owner's call. A setting left NULL is search_hybrid's default. Returns the entry now in force
-- (NULL: none, auto's built-in rule). GK004 for an unknown content type; GK005 for a mode other
-- than auto, bm25, dense or hybrid, a hybrid setting with another mode, or a value
-- search_hybrid would refuse.
create or replace function groundkit.set_search_mode(
    content_type text,
    mode text,
    fusion text default null,
    rrf_k integer default null,
    bm25_weight double precision default null,
    dense_weight double precision default null,
    depth integer default null)
returns jsonb
language plpgsql volatile
set search_path = pg_catalog, pg_temp
as $$
declare
    entry jsonb;
    knobs boolean := fusion is not null or rrf_k is not null or bm25_weight is not null
                     or dense_weight is not null or depth is not null;
begin
    if set_search_mode.content_type is null
       or not exists (select 1 from groundkit.content_types t where t.name = set_search_mode.content_type) then
        raise exception 'unknown content_type %', coalesce(quote_literal(set_search_mode.content_type), 'NULL')
            using errcode = 'GK004';
    end if;
    if mode is null or mode not in ('auto', 'bm25', 'dense', 'hybrid') then
        raise exception 'mode must be auto, bm25, dense or hybrid (got %)', coalesce(quote_literal(mode), 'NULL')
            using errcode = 'GK005';
    end if;
    if knobs and mode <> 'hybrid' then
        raise exception 'fusion, rrf_k, bm25_weight, dense_weight and depth go with mode hybrid (got %)', mode
            using errcode = 'GK005';
    end if;
    if fusion is not null and fusion not in ('rrf', 'score') then
        raise exception 'fusion must be rrf or score (got %)', quote_literal(fusion) using errcode = 'GK005';
    end if;
    if rrf_k is not null and (rrf_k < 0 or rrf_k > 100000) then
        raise exception 'rrf_k must be between 0 and 100000 (got %)', rrf_k using errcode = 'GK005';
    end if;
    if (bm25_weight is not null and (bm25_weight < 0 or bm25_weight = 'NaN'::double precision
                                     or bm25_weight = 'Infinity'::double precision))
       or (dense_weight is not null and (dense_weight < 0 or dense_weight = 'NaN'::double precision
                                         or dense_weight = 'Infinity'::double precision)) then
        raise exception 'bm25_weight and dense_weight must be finite and >= 0' using errcode = 'GK005';
    end if;
    if depth is not null and (depth < 1 or depth > 200) then
        raise exception 'depth must be between 1 and 200 (got %)', depth using errcode = 'GK005';
    end if;
    if mode = 'auto' then
        update groundkit.config c set search_modes = c.search_modes - set_search_mode.content_type;
        return null;
    end if;
    entry := jsonb_strip_nulls(jsonb_build_object(
        'mode', mode, 'fusion', fusion, 'rrf_k', rrf_k, 'bm25_weight', bm25_weight,
        'dense_weight', dense_weight, 'depth', depth));
    update groundkit.config c
       set search_modes = jsonb_set(c.search_modes, array[set_search_mode.content_type], entry);
    return entry;
end
$$;

-- What a search in mode 'auto' over `content_types` (NULL or empty: every content type) runs.
-- The entry every searched type shares (config.search_modes), else auto's built-in rule:
-- 'hybrid' with search_hybrid's defaults when this database has pgvector and an active model
-- whose provider the outbound policy lets queries go to, else 'bm25'. Searched types whose
-- entries differ take the built-in rule too (one search runs one mode). A dense or hybrid entry
-- where hybrid could not run either runs bm25. NULL
-- settings are search_hybrid's defaults. `source`: content_type (an entry), default (no entry),
-- mixed (entries differ), fallback (an entry that cannot run here). Never an error, so that a
-- default search works, in the caller's transaction, on a server without pgvector; unknown
-- content types have no entry (search itself refuses them).
create or replace function groundkit.auto_search_settings(content_types text[] default null)
returns table (mode text, fusion text, rrf_k integer, bm25_weight double precision,
               dense_weight double precision, depth integer, source text)
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    entries jsonb[];
    entry jsonb := 'null'::jsonb;
    -- pgvector, an active model, and an outbound policy that lets a query go to its provider
    -- (sql/083_outbound.sql): else neither dense nor hybrid can run a query here
    dense_ok boolean := groundkit._vector_schema() is not null
                        and exists (select 1 from groundkit.embedding_models m
                                     where m.active
                                       and groundkit._outbound_queries_allowed(m.provider, m.options ->> 'url'));
    v_mode text;
    v_source text;
begin
    select array_agg(distinct coalesce(c.search_modes -> t.name, 'null'::jsonb))
      into entries
      from groundkit.config c
     cross join (select x as name
                   from unnest(coalesce(nullif(auto_search_settings.content_types, '{}'::text[]),
                                        (select array_agg(ct.name) from groundkit.content_types ct))) x) t;
    if cardinality(entries) = 1 then
        entry := entries[1];
        v_source := case when entry = 'null'::jsonb then 'default' else 'content_type' end;
    else
        v_source := 'mixed';
    end if;
    v_mode := coalesce(entry ->> 'mode', case when dense_ok then 'hybrid' else 'bm25' end);
    if v_mode in ('dense', 'hybrid') and not dense_ok then
        v_mode := 'bm25';
        v_source := 'fallback';
    end if;
    if v_mode <> 'hybrid' then
        entry := 'null'::jsonb;
    end if;
    return query
    select v_mode, entry ->> 'fusion', (entry ->> 'rrf_k')::integer, (entry ->> 'bm25_weight')::double precision,
           (entry ->> 'dense_weight')::double precision, (entry ->> 'depth')::integer, v_source;
end
$$;

-- config.search_modes, however it is written (set_search_mode, or an owner's own update): an
-- object of content type -> {"mode", "fusion", "rrf_k", "bm25_weight", "dense_weight", "depth"},
-- "mode" required and one of bm25, dense, hybrid, the others hybrid's alone and within
-- search_hybrid's bounds. GK005 otherwise, and nothing is stored.
create or replace function groundkit._config_search_modes_guard() returns trigger
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    ct text;
    entry jsonb;
    bad text;
begin
    if tg_op = 'UPDATE' and new.search_modes is not distinct from old.search_modes then
        return new;
    end if;
    if jsonb_typeof(new.search_modes) is distinct from 'object' then
        raise exception 'config.search_modes must be a JSON object of content type -> {"mode", ...}'
            using errcode = 'GK005';
    end if;
    for ct, entry in select key, value from jsonb_each(new.search_modes) loop
        if not exists (select 1 from groundkit.content_types t where t.name = ct) then
            raise exception 'config.search_modes: unknown content type %', quote_literal(ct) using errcode = 'GK005';
        end if;
        if jsonb_typeof(entry) <> 'object' or entry ->> 'mode' is null
           or entry ->> 'mode' not in ('bm25', 'dense', 'hybrid') then
            raise exception 'config.search_modes.%: needs "mode": bm25, dense or hybrid', ct using errcode = 'GK005';
        end if;
        select e.key into bad from jsonb_each(entry) e
         where e.key <> 'mode'
           and (entry ->> 'mode' <> 'hybrid'
                or case e.key
                   when 'fusion' then e.value not in ('"rrf"'::jsonb, '"score"'::jsonb)
                   when 'rrf_k' then jsonb_typeof(e.value) <> 'number'
                                     or (e.value #>> '{}')::numeric <> trunc((e.value #>> '{}')::numeric)
                                     or (e.value #>> '{}')::numeric not between 0 and 100000
                   when 'depth' then jsonb_typeof(e.value) <> 'number'
                                     or (e.value #>> '{}')::numeric <> trunc((e.value #>> '{}')::numeric)
                                     or (e.value #>> '{}')::numeric not between 1 and 200
                   when 'bm25_weight' then jsonb_typeof(e.value) <> 'number' or (e.value #>> '{}')::numeric < 0
                   when 'dense_weight' then jsonb_typeof(e.value) <> 'number' or (e.value #>> '{}')::numeric < 0
                   else true end)
         limit 1;
        if found then
            raise exception 'config.search_modes.%.%: not a setting of mode % (or out of search_hybrid''s bounds)',
                ct, bad, entry ->> 'mode' using errcode = 'GK005';
        end if;
    end loop;
    return new;
end
$$;

create or replace trigger config_search_modes_guard
    before insert or update on groundkit.config
    for each row execute function groundkit._config_search_modes_guard();
