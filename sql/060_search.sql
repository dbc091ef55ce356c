-- Permission-correct BM25 search. Replaceable.
--
-- One statement reads the reader's live tier and status, the spaces' live policy, the grants,
-- the BM25 statistics of the reader's scopes and the postings, so every part of the answer
-- comes from one snapshot. Visibility is a join predicate inside the ranking query; nothing
-- is filtered after top-k, so k rows come back whenever k visible chunks match.

-- The analyzed terms of a query and how often each occurs in it. Plain text only: tsquery
-- syntax has no meaning here and cannot raise.
create or replace function groundkit.query_terms(query text)
returns table (term text, qtf integer)
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select u.lexeme, coalesce(array_length(u.positions, 1), 1)
      from unnest(to_tsvector('groundkit.english'::regconfig, coalesce(query, ''))) u
$$;

create or replace function groundkit.search(
    reader_sub text,
    query text,
    k integer default 10,
    content_types text[] default null,
    space_ids text[] default null)
returns table (
    object_id text,
    object_version bigint,
    chunk_seq integer,
    content_type text,
    space_id text,
    title text,
    content text,
    score double precision,
    start_ms bigint,
    end_ms bigint)
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    bad text;
begin
    if search.query is null then
        raise exception 'query must not be NULL' using errcode = 'GK005';
    end if;
    if length(search.query) > 4096 then
        raise exception 'query is % characters long; the limit is 4096', length(search.query)
            using errcode = 'GK005';
    end if;
    if search.k is null or search.k < 1 or search.k > 200 then
        raise exception 'k must be between 1 and 200 (got %)', coalesce(search.k::text, 'NULL')
            using errcode = 'GK005';
    end if;
    if search.content_types is not null then
        select x into bad from unnest(search.content_types) x
         where x is null or not exists (select 1 from groundkit.content_types t where t.name = x)
         limit 1;
        if found then
            raise exception 'unknown content_type % in content_types', coalesce(quote_literal(bad), 'NULL')
                using errcode = 'GK004';
        end if;
    end if;

    return query
    with reader as (
        -- exactly one authority row for the reader, active, with a known tier; anything else
        -- (no row, two rows whatever they say, another status, an unknown tier) is no row at
        -- all: fail closed
        select a.member_sub, t.rank
          from (select x.member_sub, x.tier, x.status, count(*) over () as n
                  from groundkit.reader_authority x
                 where x.member_sub = search.reader_sub) a
          join groundkit.tiers t on t.name = a.tier
         where a.n = 1 and a.status = 'active'
    ),
    cfg as (
        select c.bm25_k1 as k1, c.bm25_b as b from groundkit.config c
    ),
    corpus as (
        select coalesce(sum(s.n_chunks), 0)::double precision as n,
               coalesce(sum(s.total_len), 0)::double precision as total_len
          from groundkit.scope_stats s, reader r
         where s.scope <= r.rank
    ),
    qterms as (
        select q.term, q.qtf,
               coalesce((select sum(ts.df) from groundkit.term_stats ts, reader r
                          where ts.term = q.term and ts.scope <= r.rank), 0)::double precision as df
          from groundkit.query_terms(search.query) q
    ),
    weights as (
        select q.term,
               q.qtf * ln(1 + (greatest(cp.n - q.df, 0) + 0.5) / (q.df + 0.5)) as w,
               case when cp.n > 0 and cp.total_len > 0 then cp.total_len / cp.n else 1 end as avgdl
          from qterms q, corpus cp
    ),
    scored as (
        select p.chunk_id,
               sum(w.w * p.tf / (p.tf + cfg.k1 * (1 - cfg.b + cfg.b * c.doc_len / w.avgdl))) as score
          from weights w
          join groundkit.postings p on p.term = w.term
          join groundkit.chunks c on c.chunk_id = p.chunk_id
          join groundkit.objects o on o.object_id = c.object_id
                                  and o.version = c.object_version
                                  and o.state = 'live'
          join groundkit.tiers ot on ot.name = o.tier_visibility
          join groundkit.spaces s on s.space_id = o.space_id
          join groundkit.tiers st on st.name = s.min_tier
          cross join reader r
          cross join cfg
         where r.rank >= ot.rank
           and r.rank >= st.rank
           and (not s.private
                or exists (select 1 from groundkit.space_grants g
                            where g.space_id = s.space_id and g.member_sub = r.member_sub))
           and (not o.owner_only or o.owner_sub = r.member_sub)
           and (search.content_types is null or o.content_type = any (search.content_types))
           and (search.space_ids is null or o.space_id = any (search.space_ids))
         group by p.chunk_id
    )
    select c.object_id, c.object_version, c.chunk_seq, o.content_type, o.space_id, o.title,
           c.content, sc.score, c.start_ms, c.end_ms
      from scored sc
      join groundkit.chunks c on c.chunk_id = sc.chunk_id
      join groundkit.objects o on o.object_id = c.object_id
     order by sc.score desc, c.object_id, c.chunk_seq
     limit search.k;
end
$$;
