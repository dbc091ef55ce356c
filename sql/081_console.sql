-- The operator console (groundkit serve console, docs/console.md): its login tokens (revision
-- 0029) and the reads its Health page needs beyond what `groundkit status` calls. Replaceable.
--
-- Console tokens are operator tokens, kept apart from the members' api_tokens: token_member
-- never answers for one, and console_operator never answers for a member's token. As for member
-- tokens, Python makes the token and passes only its sha256. Making and revoking them is the
-- owner's alone (sql/090_roles.sql grants neither): a writer that could make one could read
-- anything the console shows.

create or replace function groundkit.create_console_token(operator text, token_hash bytea,
                                                          expires_at timestamptz default null)
returns bigint
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    id bigint;
begin
    perform groundkit._check_id('operator', create_console_token.operator);
    if create_console_token.token_hash is null or length(create_console_token.token_hash) <> 32 then
        raise exception 'token_hash must be a sha256 (32 bytes)' using errcode = 'GK005';
    end if;
    if create_console_token.expires_at is not null and create_console_token.expires_at <= now() then
        raise exception 'expires_at must be in the future' using errcode = 'GK005';
    end if;
    insert into groundkit.console_tokens (operator, token_hash, expires_at)
    values (create_console_token.operator, create_console_token.token_hash, create_console_token.expires_at)
    returning token_id into id;
    return id;
end
$$;

-- Revokes every live console token of the operator; returns how many.
create or replace function groundkit.revoke_console_tokens(operator text) returns bigint
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    n bigint;
begin
    update groundkit.console_tokens t set revoked_at = now()
     where t.operator = revoke_console_tokens.operator and t.revoked_at is null;
    get diagnostics n = row_count;
    return n;
end
$$;

-- The operator a console token (by its sha256) stands for, or NULL: unknown, revoked, expired,
-- or a member's token. The console asks on every request, so a revocation counts from the next.
create or replace function groundkit.console_operator(token_hash bytea) returns text
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select t.operator from groundkit.console_tokens t
     where t.token_hash = console_operator.token_hash and t.revoked_at is null
       and (t.expires_at is null or t.expires_at > now())
$$;

-- How many current chunks waited for `model`'s embedding at the end of each `bucket` since
-- `since`, reconstructed from timestamps: a chunk arrived when its object's current version was
-- logged and stopped waiting when its text's embedding was stored. Chunks replaced or deleted
-- since left no trace, so the past is as the chunks present now say; a chunk whose text had an
-- embedding before it arrived never waited. The series starts when the model was registered, if
-- later than `since`. For the console's Health page (embedding lag over time); groundkit status
-- reports the lag now (groundkit.embedding_lag).
create or replace function groundkit.embedding_backlog(model text, since timestamptz, bucket interval)
returns table (bucket_end timestamptz, waiting bigint)
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
declare
    m groundkit.embedding_models;
    col text;
    start timestamptz;
begin
    if bucket is null or bucket < interval '1 minute' then
        raise exception 'bucket must be at least a minute' using errcode = 'GK005';
    end if;
    select * into m from groundkit.embedding_models em where em.name = embedding_backlog.model;
    if not found then
        raise exception 'unknown embedding model %', quote_literal(embedding_backlog.model) using errcode = 'GK015';
    end if;
    col := groundkit._recipe_column(m.recipe);
    start := greatest(coalesce(embedding_backlog.since, m.created_at), m.created_at);
    if start >= now() then
        return;
    end if;
    if extract(epoch from now() - start) / extract(epoch from bucket) > 2000 then
        raise exception 'at most 2000 buckets (% of % since %)', bucket, now() - start, start
            using errcode = 'GK005';
    end if;
    return query execute format($q$
        with waited as (
            select l.logged_at as arrived, e.created_at as embedded
              from groundkit.chunks c
              join groundkit.objects o on o.object_id = c.object_id
              join groundkit.content_log l on l.seq = o.log_seq
              left join groundkit.embeddings e on e.model = $1 and e.content_hash = c.%I
             where e.created_at is null or e.created_at > l.logged_at
        ),
        buckets as (
            select b from generate_series(pg_catalog.date_bin($3, $2, $2), now(), $3) b
        ),
        moves as (
            select pg_catalog.date_bin($3, w.arrived, $2) as b, 1 as d from waited w where w.arrived > $2
            union all
            select pg_catalog.date_bin($3, w.embedded, $2), -1 from waited w where w.embedded > $2
        ),
        per_bucket as (
            select mv.b, sum(mv.d) as d from moves mv group by mv.b
        ),
        base as (
            select count(*) as n from waited w where w.arrived <= $2 and (w.embedded is null or w.embedded > $2)
        )
        select least(bk.b + $3, now()),
               (base.n + coalesce(sum(coalesce(pb.d, 0)) over (order by bk.b), 0))::bigint
          from buckets bk
          cross join base
          left join per_bucket pb on pb.b = bk.b
         order by bk.b
    $q$, col) using m.name, start, bucket;
end
$$;
