-- The dense arm: embedding models, the embedding worker's claim and store, the lag, the cutover.
-- Replaceable. docs/dense.md. The searches are in 087_dense_search.pgvector.sql (stubs raising
-- GK008 in 087_dense_search.stubs.sql where pgvector is missing): their signatures name the
-- `vector` type. Everything here works on any server; each public function raises GK008 where
-- the extension is not installed in the database.

-- pgvector, where the server has it: the first migrate that may create it does (a superuser,
-- or a role pgvector's control file trusts); a migrate that may not warns and goes on.
do $pgvector$
begin
    if not exists (select 1 from pg_catalog.pg_extension where extname = 'vector')
       and exists (select 1 from pg_catalog.pg_available_extensions where name = 'vector') then
        begin
            create extension vector;
        exception
            when insufficient_privilege then
                raise warning 'groundkit: cannot create the vector extension (%); dense search stays off', sqlerrm;
        end;
    end if;
end
$pgvector$;

-- The schema pgvector is installed in, or null. Its operators are named through it (the dense
-- functions pin search_path = pg_catalog, pg_temp).
create or replace function groundkit._vector_schema()
returns text
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select n.nspname::text
      from pg_catalog.pg_extension e join pg_catalog.pg_namespace n on n.oid = e.extnamespace
     where e.extname = 'vector'
$$;

-- GK008 unless pgvector is installed; else its schema.
create or replace function groundkit._require_pgvector()
returns text
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
declare
    s text := groundkit._vector_schema();
begin
    if s is null then
        raise exception 'the pgvector extension is not installed in this database; dense features need it'
            using errcode = 'GK008',
                  hint = 'Install pgvector on the server, then run groundkit migrate.';
    end if;
    return s;
end
$$;

-- The chunks' column holding a recipe's hash (revision 0022; sql/040_materialize.sql writes it).
create or replace function groundkit._recipe_column(recipe text)
returns text
language sql immutable
set search_path = pg_catalog, pg_temp
as $$
    select case recipe when 'text' then 'embed_hash_text' when 'titled' then 'embed_hash_titled' end
$$;

-- A model by name: GK015 (UnknownModel) when there is none; null asks for the active one.
create or replace function groundkit._dense_model(p_name text)
returns groundkit.embedding_models
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
declare
    m groundkit.embedding_models;
begin
    if p_name is null then
        select * into m from groundkit.embedding_models x where x.active;
        if not found then
            raise exception 'no embedding model is active'
                using errcode = 'GK015', hint = 'groundkit models add, groundkit embed, then groundkit cutover.';
        end if;
    else
        select * into m from groundkit.embedding_models x where x.name = p_name;
        if not found then
            raise exception 'unknown embedding model %', quote_literal(p_name) using errcode = 'GK015';
        end if;
    end if;
    return m;
end
$$;

-- What every index name of a model starts with (the bucket follows).
create or replace function groundkit._hnsw_index_prefix(model text)
returns text
language sql immutable
set search_path = pg_catalog, pg_temp
as $$
    select 'dense_hnsw_' || left(encode(sha256(convert_to(model, 'UTF8')), 'hex'), 16) || '_'
$$;

-- The name of the HNSW index of a model's bucket (docs/dense.md, "Buckets"): derived from the
-- model's name and the bucket, so any name gives a valid identifier (at most 48 characters).
drop function if exists groundkit._hnsw_index_name(text);
create or replace function groundkit._hnsw_index_name(model text, bucket bigint)
returns text
language sql immutable
set search_path = pg_catalog, pg_temp
as $$
    select groundkit._hnsw_index_prefix(model)
           || case when bucket < 0 then 'm' || (-(bucket + 1))::text else bucket::text end
$$;

-- How many entries a bucket needs before its HNSW index is due. Below it, the bucket is scanned
-- exactly: a distance per entry, about 3-6 us each at 384 dimensions (docs/dense.md, "Buckets").
drop function if exists groundkit._hnsw_min_embeddings();
create or replace function groundkit._hnsw_min_entries()
returns bigint
language sql immutable
as $$
    select 1000::bigint
$$;

-- The options a model is configured with: a JSON object of the provider's settings (URL, the
-- remote model's name, the NAME of an environment variable holding an API key). Never a secret.
create or replace function groundkit._check_model_options(options jsonb)
returns void
language plpgsql immutable
set search_path = pg_catalog, pg_temp
as $$
declare
    bad text;
begin
    if options is null or jsonb_typeof(options) <> 'object' then
        raise exception 'options must be a JSON object' using errcode = 'GK005';
    end if;
    select k into bad from jsonb_object_keys(options) k
     where k ~* '(secret|password|passwd|token|credential|authorization|bearer|api_?key)' and k <> 'api_key_env'
     limit 1;
    if found then
        raise exception 'option % looks like a secret; store the name of an environment variable holding it (api_key_env)',
            quote_literal(bad) using errcode = 'GK005';
    end if;
    if options ? 'api_key_env' and coalesce(jsonb_typeof(options -> 'api_key_env') <> 'string'
                                            or (options ->> 'api_key_env') !~ '^[A-Za-z_][A-Za-z0-9_]{0,127}$', true) then
        raise exception 'api_key_env must name an environment variable (letters, digits, underscores)'
            using errcode = 'GK005';
    end if;
end
$$;

-- Register a model. Its definition never changes (its embeddings depend on all of it): adding
-- the same name again with the same definition does nothing, with another one raises GK005.
create or replace function groundkit.add_embedding_model(
    name text,
    provider text,
    dimension integer,
    distance text default 'cosine',
    recipe text default 'titled',
    options jsonb default '{}')
returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    old groundkit.embedding_models;
begin
    perform groundkit._require_pgvector();
    if name is null or name !~ '^[A-Za-z0-9_.:/-]{1,100}$' then
        raise exception 'model name must be 1-100 letters, digits or _.:/- (got %)', coalesce(quote_literal(name), 'NULL')
            using errcode = 'GK005';
    end if;
    if provider is null or provider not in ('local', 'ollama', 'openai') then
        raise exception 'provider must be local, ollama or openai (got %)', coalesce(quote_literal(provider), 'NULL')
            using errcode = 'GK005';
    end if;
    if dimension is null or dimension < 1 or dimension > 2000 then
        raise exception 'dimension must be between 1 and 2000 (got %)', coalesce(dimension::text, 'NULL')
            using errcode = 'GK005';
    end if;
    if distance is null or distance not in ('cosine', 'l2', 'inner_product') then
        raise exception 'distance must be cosine, l2 or inner_product (got %)', coalesce(quote_literal(distance), 'NULL')
            using errcode = 'GK005';
    end if;
    if recipe is null or recipe not in ('text', 'titled') then
        raise exception 'recipe must be text or titled (got %)', coalesce(quote_literal(recipe), 'NULL')
            using errcode = 'GK005';
    end if;
    perform groundkit._check_model_options(options);
    lock table groundkit.embedding_models in share row exclusive mode;
    select * into old from groundkit.embedding_models m where m.name = add_embedding_model.name;
    if found then
        if (old.provider, old.dimension, old.distance, old.recipe, old.options)
           is distinct from (provider, dimension, distance, recipe, options) then
            raise exception 'embedding model % exists with another definition; a model never changes, add one under a new name',
                quote_literal(name) using errcode = 'GK005';
        end if;
        return;
    end if;
    insert into groundkit.embedding_models (name, provider, dimension, distance, recipe, options)
    values (name, provider, dimension, distance, recipe, options);
end
$$;

-- Every model, with its embedding count and how many of its buckets' HNSW indexes are built
-- (valid) and how many are due (hnsw_status).
drop function if exists groundkit.list_embedding_models();
create or replace function groundkit.list_embedding_models()
returns table (name text, provider text, dimension integer, distance text, recipe text, options jsonb,
               active boolean, created_at timestamptz, activated_at timestamptz, embeddings bigint,
               hnsw_indexes bigint, hnsw_due bigint, hnsw_built_at timestamptz)
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
begin
    perform groundkit._require_pgvector();
    return query
    select m.name, m.provider, m.dimension, m.distance, m.recipe, m.options, m.active, m.created_at,
           m.activated_at,
           (select count(*) from groundkit.embeddings e where e.model = m.name),
           (select count(*) from groundkit.hnsw_status(m.name) h where h.index_valid),
           (select count(*) from groundkit.hnsw_status(m.name) h where h.due),
           m.hnsw_built_at
      from groundkit.embedding_models m
     order by m.name;
end
$$;

-- The active model (no row when none is): what a client embeds its query with.
create or replace function groundkit.active_embedding_model()
returns table (name text, provider text, dimension integer, distance text, recipe text, options jsonb)
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
begin
    perform groundkit._require_pgvector();
    return query
    select m.name, m.provider, m.dimension, m.distance, m.recipe, m.options
      from groundkit.embedding_models m where m.active;
end
$$;

-- The mode a search without one takes over every content type (search's mode 'auto',
-- groundkit.models.DEFAULT_SEARCH_MODE): the content types' own mode where they all set the same
-- (groundkit.auto_search_settings, sql/085_search_modes.sql), else 'hybrid' when this database
-- has pgvector and an active model whose provider the outbound policy lets queries go to, else
-- 'bm25'. Never an error, so that a default search works, in the caller's transaction, on a
-- server without pgvector.
create or replace function groundkit.auto_search_mode()
returns text
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select s.mode from groundkit.auto_search_settings(null) s
$$;

-- The lag: how many current chunks lack an embedding for the model (default: the active one),
-- exactly, and when the oldest of them was written (its object's current log event). Chunks
-- whose text the outbound policy keeps from the model's provider (sql/083_outbound.sql) are not
-- lagging, they are withheld: counted apart, and never claimed (they stay BM25-only).
create or replace function groundkit.embedding_lag(model text default null)
returns table (name text, chunks bigint, missing bigint, oldest timestamptz, age interval, withheld bigint)
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    m groundkit.embedding_models;
    col text;
    r record;
    n_missing bigint;
    n_withheld bigint := 0;
    v_oldest timestamptz;
begin
    perform groundkit._require_pgvector();
    m := groundkit._dense_model(embedding_lag.model);
    col := groundkit._recipe_column(m.recipe);
    select * into r from groundkit._outbound_rule(groundkit.outbound_class(m.provider, m.options ->> 'url'));
    if r.unrestricted then
        -- over the hash index (an index-only scan), a probe of the embeddings' key per chunk
        execute format('select count(*) from groundkit.chunks c
                         where not exists (select 1 from groundkit.embeddings e
                                            where e.model = $1 and e.content_hash = c.%I)', col)
           into n_missing using m.name;
        if n_missing > 0 then
            execute format('select min(l.logged_at)
                              from groundkit.chunks c
                              join groundkit.objects o on o.object_id = c.object_id
                              join groundkit.content_log l on l.seq = o.log_seq
                             where not exists (select 1 from groundkit.embeddings e
                                                where e.model = $1 and e.content_hash = c.%I)', col)
               into v_oldest using m.name;
        end if;
    else
        -- set-based: each missing text may go when any current chunk with it may
        -- (groundkit._outbound_refusal, the predicate the claim and the gate use)
        execute format('
            with missing as materialized (
                select c.%1$I as h, o.log_seq
                  from groundkit.chunks c join groundkit.objects o on o.object_id = c.object_id
                 where not exists (select 1 from groundkit.embeddings e
                                    where e.model = $1 and e.content_hash = c.%1$I)),
            verdict as (
                select c.%1$I as h,
                       bool_or(groundkit._outbound_refusal($2, $3, $4, s.private, o.owner_only, o.space_id,
                                                           o.content_type, greatest(ot.rank, st.rank)) is null) as ok
                  from (select distinct m.h from missing m) d
                  join groundkit.chunks c on c.%1$I = d.h
                  join groundkit.objects o on o.object_id = c.object_id and o.state = ''live''
                  join groundkit.spaces s on s.space_id = o.space_id
                  join groundkit.tiers st on st.name = s.min_tier
                  join groundkit.tiers ot on ot.name = o.tier_visibility
                 group by 1)
            select count(*) filter (where v.ok), count(*) filter (where v.ok is not true),
                   min(l.logged_at) filter (where v.ok)
              from missing m
              left join verdict v on v.h = m.h
              left join groundkit.content_log l on l.seq = m.log_seq', col)
           into n_missing, n_withheld, v_oldest using m.name, r.class, r.allow, r.max_rank;
    end if;
    return query
    select m.name, (select count(*) from groundkit.chunks), n_missing, v_oldest, now() - v_oldest, n_withheld;
end
$$;

-- A claim's advisory key for a hash: its first four bytes (the model is the other key).
create or replace function groundkit._hash_key(h bytea)
returns integer
language sql immutable parallel safe
as $$
    select ('x' || pg_catalog.encode(pg_catalog.substr(h, 1, 4), 'hex'))::bit(32)::integer
$$;

-- The worker's claim: up to `batch` distinct hashes of current chunks that lack an embedding
-- for the model and that the outbound policy lets go to its provider, with the exact text to embed (the model's recipe; its SHA-256 is the hash).
-- Each is held by a transaction-level advisory try-lock keyed by model and hash, so concurrent
-- workers skip each other's claims and never wait; writers never wait for a claim (no row is
-- locked). A claim ends with its transaction: commit it with embed_store's rows, or roll back
-- and lose nothing. A role that takes such a key itself can only make workers skip that hash
-- (docs/dense.md, "The worker").
create or replace function groundkit.embed_claim(model text, batch integer default 64)
returns table (content_hash bytea, text text)
language plpgsql volatile
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    m groundkit.embedding_models;
    r record;
    col text;
    key1 integer;
    n integer := 0;
    last bytea;
    h bytea;
begin
    perform groundkit._require_pgvector();
    m := groundkit._dense_model(embed_claim.model);
    if batch is null or batch < 1 or batch > 4096 then
        raise exception 'batch must be between 1 and 4096 (got %)', coalesce(batch::text, 'NULL')
            using errcode = 'GK005';
    end if;
    col := groundkit._recipe_column(m.recipe);
    key1 := hashtext('groundkit.embed:' || m.name);
    -- the outbound policy's allowance for the model's provider (sql/083_outbound.sql): a text it
    -- withholds is skipped, never claimed
    select * into r from groundkit._outbound_rule(groundkit.outbound_class(m.provider, m.options ->> 'url'));
    -- in hash order over the hash index: equal hashes come together
    for h in execute format('select c.%1$I from groundkit.chunks c
                              where not exists (select 1 from groundkit.embeddings e
                                                 where e.model = $1 and e.content_hash = c.%1$I)
                                and ($2 or exists (
                                     select 1 from groundkit.chunks c2
                                       join groundkit.objects o on o.object_id = c2.object_id and o.state = ''live''
                                       join groundkit.spaces s on s.space_id = o.space_id
                                       join groundkit.tiers st on st.name = s.min_tier
                                       join groundkit.tiers ot on ot.name = o.tier_visibility
                                      where c2.%1$I = c.%1$I
                                        and groundkit._outbound_refusal($3, $4, $5, s.private, o.owner_only, o.space_id,
                                                                        o.content_type, greatest(ot.rank, st.rank)) is null))
                              order by c.%1$I', col)
        using m.name, r.unrestricted, r.class, r.allow, r.max_rank
    loop
        continue when h is not distinct from last;
        last := h;
        continue when not pg_try_advisory_xact_lock(key1, groundkit._hash_key(h));
        -- stored by a worker that committed after this loop's snapshot: not again
        continue when exists (select 1 from groundkit.embeddings e where e.model = m.name and e.content_hash = h);
        execute format('select groundkit._embed_text($1, o.title, c.search_prefix, c.content)
                          from groundkit.chunks c join groundkit.objects o on o.object_id = c.object_id
                         where c.%I = $2 limit 1', col)
           into text using m.recipe, h;
        continue when text is null;  -- its chunk went since the loop's snapshot
        content_hash := h;
        return next;
        n := n + 1;
        exit when n >= batch;
    end loop;
end
$$;

-- The dense index's entries (revision 0028, docs/dense.md "Buckets"): one per current chunk and
-- model whose text the model embedded, in the chunk's visibility bucket, as its postings are
-- (groundkit._vis_key). Writers file the entries of the chunks they write whose text is already
-- embedded (sql/040_materialize.sql) and move them with their chunks' scopes (_restat_space);
-- the worker's store files those of the texts it stores (below). A chunk's bucket:
-- groundkit._chunk_vis_key (sql/040_materialize.sql).

-- File the entries of the current chunks whose text is one of `hashes`, for a model that has
-- embedded them. Each chunk row is locked FOR SHARE first, so that a writer replacing it or
-- moving it to another bucket (put_space) waits for this transaction and then sees its entry,
-- or, if the writer came first, the chunk is skipped (SKIP LOCKED: the worker never waits for a
-- writer). Returns false when it skipped a chunk: the caller checks those texts again later.
create or replace function groundkit._dense_file(p_model text, p_hashes bytea[])
returns boolean
language plpgsql volatile
set search_path = pg_catalog, pg_temp
as $$
declare
    col text := groundkit._recipe_column((select m.recipe from groundkit.embedding_models m where m.name = p_model));
    seen bigint;
    locked bigint;
begin
    execute format('select count(*) from groundkit.chunks c where c.%I = any ($1)', col) into seen using p_hashes;
    execute format(
        'with c as (select c.chunk_id, c.object_id, c.stat_scope, c.%1$I as h
                      from groundkit.chunks c
                     where c.%1$I = any ($2)
                       for share of c skip locked),
              ins as (insert into groundkit.dense_entries (chunk_id, model, vis_key, content_hash, embedding)
                      select c.chunk_id, $1, groundkit._chunk_vis_key(o.owner_only, o.owner_sub, o.space_id, c.stat_scope),
                             c.h, e.embedding
                        from c
                        join groundkit.objects o on o.object_id = c.object_id
                        join groundkit.embeddings e on e.model = $1 and e.content_hash = c.h
                       where not exists (select 1 from groundkit.dense_entries d
                                          where d.chunk_id = c.chunk_id and d.model = $1)
                      on conflict (chunk_id, model) do nothing)
         select count(*) from c', col)
       into locked using p_model, p_hashes;
    return locked >= seen;
end
$$;

-- The texts a store filed, checked again (dense_recheck, revision 0028). A writer that wrote a
-- chunk of a text while the worker stored that text's embedding saw no embedding (not yet
-- committed), and the store saw no chunk (not yet committed): neither filed it. So every stored
-- text is queued; a later call stamps it with a fence (every transaction id below it had begun
-- when the store had committed) and, once no transaction below the fence is running, files its
-- chunks again and forgets it. Runs at the start of every embed_store and on every worker pass
-- (dense_recheck). Returns how many texts it checked.
create or replace function groundkit._dense_recheck(p_model text)
returns bigint
language plpgsql volatile
set search_path = pg_catalog, pg_temp
as $$
declare
    due bytea[];
    n bigint;
begin
    update groundkit.dense_recheck r set fence = pg_snapshot_xmax(pg_current_snapshot())
     where (r.model, r.content_hash) in (select q.model, q.content_hash from groundkit.dense_recheck q
                                          where q.model = p_model and q.fence is null
                                            for update skip locked);
    select coalesce(array_agg(q.content_hash), '{}') into due
      from (select q.content_hash from groundkit.dense_recheck q
             where q.model = p_model and q.fence <= pg_snapshot_xmin(pg_current_snapshot())
             for update skip locked) q;
    n := cardinality(due);
    if n = 0 then
        return 0;
    end if;
    if groundkit._dense_file(p_model, due) then
        delete from groundkit.dense_recheck q where q.model = p_model and q.content_hash = any (due);
    else
        -- a writer holds one of their chunks: again, after it
        update groundkit.dense_recheck q set fence = null where q.model = p_model and q.content_hash = any (due);
    end if;
    return n;
end
$$;

-- The worker's pass: check again the texts stored since (groundkit.embedding.build_due_indexes
-- calls it after embedding; embed_store calls it too). Returns how many it checked.
create or replace function groundkit.dense_recheck(model text default null)
returns bigint
language plpgsql volatile
set search_path = pg_catalog, pg_temp
as $$
begin
    perform groundkit._require_pgvector();
    return groundkit._dense_recheck((groundkit._dense_model(dense_recheck.model)).name);
end
$$;

-- The worker's pass: put up to `batch` pending entries of a model (filed or moved by writers;
-- of one bucket, if given) in their buckets' HNSW indexes (an entry leaves the pending part; the
-- index whose predicate it now meets takes it). Rows a writer holds are skipped, never waited
-- for. Returns how many. (groundkit.dense.merge_pending builds a bucket's index again instead,
-- when much of it is pending.)
drop function if exists groundkit.dense_merge_pending(text, integer);
create or replace function groundkit.dense_merge_pending(model text default null, batch integer default 1000,
                                                         bucket bigint default null)
returns bigint
language plpgsql volatile
set search_path = pg_catalog, pg_temp
as $$
declare
    m groundkit.embedding_models;
    n bigint;
begin
    perform groundkit._require_pgvector();
    m := groundkit._dense_model(dense_merge_pending.model);
    if batch is null or batch < 1 or batch > 100000 then
        raise exception 'batch must be between 1 and 100000 (got %)', coalesce(batch::text, 'NULL')
            using errcode = 'GK005';
    end if;
    update groundkit.dense_entries e set pending = false
     where (e.chunk_id, e.model) in (select p.chunk_id, p.model from groundkit.dense_entries p
                                      where p.model = m.name and p.pending
                                        and (dense_merge_pending.bucket is null
                                             or p.vis_key = dense_merge_pending.bucket)
                                      order by p.chunk_id
                                      limit batch
                                        for update skip locked)
       and e.pending;
    get diagnostics n = row_count;
    return n;
end
$$;

-- The worker's store: one embedding per hash (a 2-D real[], one row per hash, the model's
-- dimension wide), inserted idempotently. Hashes no current chunk uses any more are skipped (a
-- redaction since the claim: its text is not kept). Returns how many rows it inserted.
create or replace function groundkit.embed_store(model text, hashes bytea[], embeddings real[])
returns integer
language plpgsql volatile
set search_path = pg_catalog, pg_temp
as $$
declare
    m groundkit.embedding_models;
    n integer;
begin
    perform groundkit._require_pgvector();
    m := groundkit._dense_model(embed_store.model);
    if hashes is null or array_position(hashes, null) is not null then
        raise exception 'hashes must not be NULL or hold NULL' using errcode = 'GK005';
    end if;
    if cardinality(hashes) = 0 then
        return 0;
    end if;
    if exists (select 1 from unnest(hashes) h where length(h) <> 32) then
        raise exception 'each hash is a SHA-256 (32 bytes), as embed_claim returns it' using errcode = 'GK005';
    end if;
    if embeddings is null or array_ndims(embeddings) is distinct from 2
       or array_length(embeddings, 1) <> cardinality(hashes) then
        raise exception 'embeddings must be a 2-D array with one row per hash (% hashes)', cardinality(hashes)
            using errcode = 'GK005';
    end if;
    if array_length(embeddings, 2) <> m.dimension then
        raise exception 'embeddings have dimension %, model % has dimension %',
            array_length(embeddings, 2), quote_literal(m.name), m.dimension using errcode = 'GK005';
    end if;
    if exists (select 1 from unnest(embeddings) x
                where x is null or x = 'NaN'::real or x in ('Infinity'::real, '-Infinity'::real)) then
        raise exception 'embeddings must be finite numbers' using errcode = 'GK005';
    end if;
    -- A redaction deletes the embeddings of its text under this table's EXCLUSIVE lock: a
    -- store waits for it here, and its next statement sees the redacted object's chunks gone
    -- (groundkit._forget_unused_embeddings).
    lock table groundkit.embeddings in row exclusive mode;
    perform groundkit._dense_recheck(m.name);
    insert into groundkit.embeddings (model, content_hash, embedding)
    select m.name, x.h, x.v
      from (select u.h, array(select unnest(embed_store.embeddings[u.i:u.i][1:m.dimension])) as v
              from unnest(hashes) with ordinality as u(h, i)) x
     where (m.recipe = 'text' and exists (select 1 from groundkit.chunks c where c.embed_hash_text = x.h))
        or (m.recipe = 'titled' and exists (select 1 from groundkit.chunks c where c.embed_hash_titled = x.h))
    on conflict on constraint embeddings_pkey do nothing;
    get diagnostics n = row_count;
    -- the dense index's entries of these texts' chunks, now; and again once every writer that
    -- may have written one meanwhile has finished (_dense_recheck)
    perform groundkit._dense_file(m.name, hashes);
    insert into groundkit.dense_recheck (model, content_hash)
    select distinct m.name, h from unnest(hashes) h
    on conflict on constraint dense_recheck_pkey do update set fence = null;
    return n;
end
$$;

-- Make a model the one search uses, atomically. Refused (GK016) while it lacks an embedding for
-- any current chunk, unless forced (its unembedded chunks are then missing from the dense leg
-- until the worker catches up). Rolling back is a cutover to the old model.
create or replace function groundkit.cutover(model text, force boolean default false)
returns table (previous_model text, active_model text, missing bigint)
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    m groundkit.embedding_models;
    prev text;
    lag bigint;
begin
    perform groundkit._require_pgvector();
    lock table groundkit.embedding_models in share row exclusive mode;
    m := groundkit._dense_model(cutover.model);
    if cutover.model is null then
        raise exception 'model must not be NULL' using errcode = 'GK005';
    end if;
    select l.missing into lag from groundkit.embedding_lag(m.name) l;
    if lag > 0 and not coalesce(cutover.force, false) then
        raise exception 'embedding model % lacks embeddings for % current chunks', quote_literal(m.name), lag
            using errcode = 'GK016',
                  hint = 'Run groundkit embed --model for it first, or force the cutover.';
    end if;
    select x.name into prev from groundkit.embedding_models x where x.active;
    update groundkit.embedding_models x set active = false where x.active and x.name <> m.name;
    update groundkit.embedding_models x set active = true, activated_at = now()
     where x.name = m.name and not x.active;
    return query select prev, m.name, lag;
end
$$;

-- A model's buckets (docs/dense.md, "Buckets"): each with its entries (and how many of them are
-- pending: filed or moved by writers, not in the index yet), its HNSW index and whether that index
-- is due (at least _hnsw_min_entries() entries and no valid index yet;
-- groundkit.dense.build_hnsw_indexes builds them, concurrently, as the owner). A bucket with an
-- index and no entries left is listed too.
drop function if exists groundkit.hnsw_status(text);
create or replace function groundkit.hnsw_status(model text default null)
returns table (name text, dimension integer, distance text, bucket bigint, entries bigint, pending bigint,
               threshold bigint, index_name text, index_valid boolean, due boolean)
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    m groundkit.embedding_models;
begin
    perform groundkit._require_pgvector();
    m := groundkit._dense_model(hnsw_status.model);
    return query
    with b as (
        select e.vis_key as bucket, count(*) as n, count(*) filter (where e.pending) as p
          from groundkit.dense_entries e where e.model = m.name group by e.vis_key
    ), i as (
        -- the model's bucket indexes, by name (the bucket is the part after the prefix)
        select c.relname::text as index_name, x.indisvalid as valid
          from pg_catalog.pg_index x
          join pg_catalog.pg_class c on c.oid = x.indexrelid
         where x.indrelid = 'groundkit.dense_entries'::regclass
           and starts_with(c.relname::text, groundkit._hnsw_index_prefix(m.name))
    ), s as (
        select b.bucket, b.n, b.p, groundkit._hnsw_index_name(m.name, b.bucket) as index_name from b
    )
    select m.name, m.dimension, m.distance, s.bucket, coalesce(s.n, 0), coalesce(s.p, 0),
           groundkit._hnsw_min_entries(),
           coalesce(s.index_name, i.index_name), coalesce(i.valid, false),
           coalesce(s.n, 0) >= groundkit._hnsw_min_entries() and not coalesce(i.valid, false)
      from s full join i on i.index_name = s.index_name
     order by s.bucket nulls last, i.index_name;
end
$$;

-- Record that an HNSW index of a model was built (groundkit.dense.build_hnsw_indexes, after its
-- CREATE INDEX CONCURRENTLY committed).
create or replace function groundkit._hnsw_built(model text)
returns void
language sql
set search_path = pg_catalog, pg_temp
as $$
    update groundkit.embedding_models m set hnsw_built_at = now() where m.name = model
$$;

-- After a redaction: delete every embedding that no current chunk uses, of every model (the
-- redacted object's texts among them, all its versions', whatever chunker made them; an
-- embedding can give its text away). An identical text in another current chunk keeps its
-- embedding: it is that chunk's too. Under the embeddings' EXCLUSIVE lock, so that no store
-- that began before the redaction committed slips in after this delete (embed_store).
create or replace function groundkit._forget_unused_embeddings()
returns bigint
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    n bigint;
begin
    lock table groundkit.embeddings in exclusive mode;
    delete from groundkit.embeddings e
     using groundkit.embedding_models m
     where m.name = e.model
       and not (m.recipe = 'text' and exists (select 1 from groundkit.chunks c where c.embed_hash_text = e.content_hash))
       and not (m.recipe = 'titled'
                and exists (select 1 from groundkit.chunks c where c.embed_hash_titled = e.content_hash));
    get diagnostics n = row_count;
    return n;
end
$$;
