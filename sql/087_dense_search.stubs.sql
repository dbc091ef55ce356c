-- Dense and hybrid search where pgvector is missing: the same names, raising GK008
-- (PgvectorMissing). Replaceable; applied by migrate instead of 087_dense_search.pgvector.sql,
-- whose signatures name pgvector's `vector` type. The query embedding is text here (an untyped
-- literal such as '[0.1, 0.2]' finds these); a migrate after pgvector is installed drops them.
-- (the signature before the query's filter, revision 0030)
drop function if exists groundkit.search_dense(text, text, integer, text[], text[], boolean);
create or replace function groundkit.search_dense(
    reader_sub text,
    query_embedding text,
    k integer default 10,
    content_types text[] default null,
    space_ids text[] default null,
    exact boolean default false,
    query text default null)
returns setof groundkit.search_hit
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
begin
    perform groundkit._require_pgvector();
end
$$;

create or replace function groundkit.search_hybrid(
    reader_sub text,
    query text,
    query_embedding text,
    k integer default 10,
    content_types text[] default null,
    space_ids text[] default null,
    fusion text default 'rrf',
    rrf_k integer default 20,
    bm25_weight double precision default 1,
    dense_weight double precision default 1,
    depth integer default 100,
    match_gate boolean default false,
    snippet_start text default '<mark>',
    snippet_end text default '</mark>')
returns setof groundkit.search_hit
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
begin
    perform groundkit._require_pgvector();
end
$$;
