-- The write API: each call appends one row to the content log (when it has an effect) and
-- updates the derived views in the same transaction. Returns 'applied', 'duplicate',
-- 'stale' or 'tombstoned'. Replaceable.

create or replace function groundkit._check_write(object_id text, version bigint) returns void
language plpgsql immutable
set search_path = pg_catalog, pg_temp
as $$
begin
    perform groundkit._check_id('object_id', object_id);
    if version is null or version < 1 then
        raise exception 'version must be a positive integer (got %)', coalesce(version::text, 'NULL')
            using errcode = 'GK005';
    end if;
end
$$;

-- Writers of an object queue on its row of groundkit.object_locks (only the owner may lock it:
-- sql/010_guards.sql) until their transaction ends. One statement, in key order, whether the
-- rows exist or not: ON CONFLICT DO UPDATE locks every conflicting row, even where its WHERE
-- updates none; an object's first write inserts the row, and a concurrent first write of it
-- waits for that transaction, then locks the row. Rows stay: one per object id ever written,
-- as in objects. Row locks take no slot of PostgreSQL's shared lock table, so the number of
-- objects one transaction writes is not bounded by max_locks_per_transaction.
create or replace function groundkit._lock_objects(p_object_ids text[]) returns void
language sql
set search_path = pg_catalog, pg_temp
as $$
    insert into groundkit.object_locks as l (object_id)
    select distinct x.id from unnest(p_object_ids) x(id) order by x.id
    on conflict (object_id) do update set object_id = excluded.object_id where false
$$;

create or replace function groundkit._lock_object(object_id text) returns void
language sql
set search_path = pg_catalog, pg_temp
as $$
    select groundkit._lock_objects(array[_lock_object.object_id])
$$;

-- The argument checks of put_object (and of each element of put_objects).
create or replace function groundkit._check_put(
    object_id text, version bigint, content_type text, space_id text, tier_visibility text,
    title text, body text, owner_sub text, owner_only boolean, segments jsonb, metadata jsonb)
returns void
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
declare
    known_type boolean;
    known_tier boolean;
    known_space boolean;
    unsafe text;
begin
    perform groundkit._check_write(_check_put.object_id, _check_put.version);
    -- Ids reach terminals, logs and reports: no controls (newline, tab, ESC), line separators or
    -- bidi controls in an id being written (groundkit.models.UNSAFE_ID_CHARS is the same set). Only
    -- here: an id written before this check can still be retiered, deleted and redacted.
    unsafe := substring(_check_put.object_id
                        from '[\u0001-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]');
    if unsafe is not null then
        raise exception 'object_id must not contain control, line separator or bidi control characters '
                        '(found U+% at character %)',
            upper(lpad(to_hex(ascii(unsafe)), 4, '0')), strpos(_check_put.object_id, unsafe)
            using errcode = 'GK005';
    end if;
    -- The three catalogue lookups in one statement (each statement costs its executor start-up).
    select exists (select 1 from groundkit.content_types t where t.name = _check_put.content_type),
           exists (select 1 from groundkit.tiers t where t.name = _check_put.tier_visibility),
           exists (select 1 from groundkit.spaces s where s.space_id = _check_put.space_id)
      into known_type, known_tier, known_space;
    if not known_type then
        raise exception 'unknown content_type %', coalesce(quote_literal(_check_put.content_type), 'NULL')
            using errcode = 'GK004', hint = 'Known content types are listed in groundkit.content_types.';
    end if;
    if not known_tier then
        perform groundkit._tier_rank(_check_put.tier_visibility);  -- raises its GK002
    end if;
    if not known_space then
        raise exception 'unknown space %', coalesce(quote_literal(_check_put.space_id), 'NULL')
            using errcode = 'GK003';
    end if;
    if _check_put.title is null then
        raise exception 'title must not be NULL (use an empty string)' using errcode = 'GK005';
    end if;
    if _check_put.owner_only is null then
        raise exception 'owner_only must be true or false' using errcode = 'GK005';
    end if;
    if _check_put.owner_only and _check_put.owner_sub is null then
        raise exception 'an owner_only object needs an owner_sub' using errcode = 'GK005';
    end if;
    if _check_put.owner_sub is not null then
        perform groundkit._check_id('owner_sub', _check_put.owner_sub);
    end if;
    if jsonb_typeof(_check_put.metadata) <> 'object' then
        raise exception 'metadata must be a JSON object' using errcode = 'GK005';
    end if;
    -- the object's language, overriding its space's (docs/bm25/analysis.md, "Languages")
    if _check_put.metadata ? 'language' then
        if jsonb_typeof(_check_put.metadata -> 'language') <> 'string' then
            raise exception 'unknown language % in metadata.language', _check_put.metadata -> 'language'
                using errcode = 'GK026';
        end if;
        perform groundkit._check_language(_check_put.metadata ->> 'language');
    end if;
    if _check_put.content_type = 'transcript' then
        if _check_put.segments is not null then
            perform groundkit._check_segments(_check_put.segments);
        elsif _check_put.body is null then
            raise exception 'a transcript needs segments or a body' using errcode = 'GK005';
        end if;
    else
        if _check_put.segments is not null then
            raise exception 'segments are only accepted for content_type ''transcript''' using errcode = 'GK005';
        end if;
        if _check_put.body is null then
            raise exception 'body must not be NULL (use an empty string)' using errcode = 'GK005';
        end if;
    end if;

end
$$;

create or replace function groundkit.put_object(
    object_id text,
    version bigint,
    content_type text,
    space_id text,
    tier_visibility text,
    title text,
    body text,
    owner_sub text default null,
    owner_only boolean default false,
    segments jsonb default null,
    metadata jsonb default '{}'::jsonb)
returns text
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    cur groundkit.objects;
    h text;
    meta jsonb := coalesce(put_object.metadata, '{}'::jsonb);
begin
    perform groundkit._check_put(put_object.object_id, put_object.version, put_object.content_type,
                                 put_object.space_id, put_object.tier_visibility, put_object.title,
                                 put_object.body, put_object.owner_sub, put_object.owner_only,
                                 put_object.segments, meta);
    -- FOR SHARE: a concurrent put_space on this space waits for us, and we for it.
    perform 1 from groundkit.spaces s where s.space_id = put_object.space_id for share;

    h := groundkit._content_hash(put_object.content_type, put_object.space_id, put_object.tier_visibility,
                                 put_object.title, put_object.body, put_object.owner_sub,
                                 put_object.owner_only, put_object.segments, meta);

    perform groundkit._lock_object(put_object.object_id);
    select * into cur from groundkit.objects o where o.object_id = put_object.object_id for update;
    if found then
        if cur.state <> 'live' then
            return 'tombstoned';
        elsif put_object.version < cur.version then
            return 'stale';
        elsif put_object.version = cur.version then
            if cur.content_hash = h then
                return 'duplicate';
            end if;
            raise exception 'object % version % already exists with different content',
                put_object.object_id, put_object.version
                using errcode = 'GK001', hint = 'Write a higher version to change an object.';
        end if;
        if cur.space_id is distinct from put_object.space_id then
            -- The old chunks leave the old space's statistics: hold that space too, so that a
            -- concurrent put_space cannot move them between scopes at the same moment.
            perform 1 from groundkit.spaces s where s.space_id = cur.space_id for share;
        end if;
    end if;

    insert into groundkit.content_log (object_id, version, op, content_type, space_id, tier_visibility,
                                       title, body, owner_sub, owner_only, segments, metadata, content_hash)
    values (put_object.object_id, put_object.version, 'put', put_object.content_type, put_object.space_id,
            put_object.tier_visibility, put_object.title, put_object.body, put_object.owner_sub,
            put_object.owner_only, put_object.segments, meta, h);
    perform groundkit._materialize_many(array[put_object.object_id], p_pending => true);
    return 'applied';
end
$$;

-- A new version of an object with a new tier stamp and the same content.
create or replace function groundkit.retier_object(object_id text, version bigint, tier_visibility text)
returns text
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    cur groundkit.objects;
    last_put groundkit.content_log;
    h text;
begin
    perform groundkit._check_write(retier_object.object_id, retier_object.version);
    perform groundkit._tier_rank(retier_object.tier_visibility);
    perform groundkit._lock_object(retier_object.object_id);
    select * into cur from groundkit.objects o where o.object_id = retier_object.object_id for update;
    if not found then
        raise exception 'unknown object %', quote_literal(retier_object.object_id) using errcode = 'GK009',
            hint = 'put_object must be applied before an object can be re-tiered.';
    end if;
    if cur.state <> 'live' then
        return 'tombstoned';
    elsif retier_object.version < cur.version then
        return 'stale';
    elsif retier_object.version = cur.version then
        if cur.tier_visibility = retier_object.tier_visibility then
            return 'duplicate';
        end if;
        raise exception 'object % version % already exists with a different tier',
            retier_object.object_id, retier_object.version
            using errcode = 'GK001', hint = 'Write a higher version to change an object.';
    end if;
    perform 1 from groundkit.spaces s where s.space_id = cur.space_id for share;

    select * into last_put from groundkit.content_log l
     where l.object_id = retier_object.object_id and l.op in ('put', 'retier')
     order by l.seq desc limit 1;
    h := groundkit._content_hash(last_put.content_type, last_put.space_id, retier_object.tier_visibility,
                                 last_put.title, last_put.body, last_put.owner_sub, last_put.owner_only,
                                 last_put.segments, last_put.metadata);
    insert into groundkit.content_log (object_id, version, op, content_type, space_id, tier_visibility,
                                       title, body, owner_sub, owner_only, segments, metadata, content_hash)
    values (retier_object.object_id, retier_object.version, 'retier', last_put.content_type, last_put.space_id,
            retier_object.tier_visibility, last_put.title, last_put.body, last_put.owner_sub,
            last_put.owner_only, last_put.segments, last_put.metadata, h);
    perform groundkit._materialize_many(array[retier_object.object_id], p_pending => true);
    return 'applied';
end
$$;

-- Deletion always wins, whatever its version, and is terminal. Deleting an object that was
-- never written leaves a tombstone, so a late insert cannot create it.
create or replace function groundkit.delete_object(object_id text, version bigint)
returns text
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    cur groundkit.objects;
begin
    perform groundkit._check_write(delete_object.object_id, delete_object.version);
    perform groundkit._lock_object(delete_object.object_id);
    select * into cur from groundkit.objects o where o.object_id = delete_object.object_id for update;
    if found and cur.state = 'live' then
        -- the chunks leave the space's statistics: serialise with put_space on that space
        -- (which moves them between statistics scopes), as put_object and retier_object do
        perform 1 from groundkit.spaces s where s.space_id = cur.space_id for share;
    end if;
    if found and cur.state <> 'live' then
        return 'tombstoned';
    end if;
    insert into groundkit.content_log (object_id, version, op)
    values (delete_object.object_id, delete_object.version, 'delete');
    perform groundkit._materialize_many(array[delete_object.object_id]);
    return 'applied';
end
$$;

-- Redaction is a delete that also scrubs the object's text from every earlier log payload
-- (the log keeps the events, their metadata and content hashes) and from every derived row.
-- Redacting a deleted object upgrades its tombstone; redacting twice is 'tombstoned'.
create or replace function groundkit.redact_object(object_id text, version bigint)
returns text
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    cur groundkit.objects;
    pair_terms text[];
    pair_scopes integer[];
    terms text[];
    my_shard smallint := (pg_backend_pid() % 8)::smallint;
begin
    perform groundkit._check_write(redact_object.object_id, redact_object.version);
    -- Redactions queue behind each other: each locks counter rows of every shard below, and two
    -- of them doing so at once could deadlock.
    perform groundkit._lock_redactions();
    -- and before any counter row, the lock a merge of the pending part takes exclusively
    -- (_materialize_many takes it again below; docs/bm25.md, "The pending part")
    perform groundkit._lock_pending_shared();
    perform groundkit._lock_object(redact_object.object_id);
    select * into cur from groundkit.objects o where o.object_id = redact_object.object_id for update;
    if found and cur.state = 'redacted' then
        return 'tombstoned';
    end if;
    if found and cur.state = 'live' then
        -- the chunks leave the space's statistics: serialise with put_space on that space
        -- (which moves them between statistics scopes), as put_object and retier_object do
        perform 1 from groundkit.spaces s where s.space_id = cur.space_id for share;
    end if;

    -- What the object's text put in the index, as stored, not derived again (the chunker and
    -- its settings may have changed since an older version was chunked): the (term, scope)
    -- counters of its chunks' lexemes, which are exactly their postings' terms, pending or
    -- merged (a chunk's postings are its lexemes: read them from the chunk, not by scanning
    -- postings for its id, which no index serves); and the counter groups that sum to zero,
    -- wherever they came from. Older versions' chunks are gone, and their terms live on only
    -- there: a counter row stays when its count falls to zero. Every such group counts nothing,
    -- so all of them go, this object's older versions' among them. (A group that sums to zero
    -- has a row at or below zero: the scan reads those.)
    select coalesce(array_agg(x.term order by x.term, x.scope), '{}'),
           coalesce(array_agg(x.scope order by x.term, x.scope), '{}')
      into pair_terms, pair_scopes
      from (select distinct u.lexeme as term, c.stat_scope as scope
              from groundkit.chunks c cross join lateral unnest(c.tsv) u
             where c.object_id = redact_object.object_id and c.stat_scope is not null
            union
            select t.term, t.scope from groundkit.term_stats t
             where t.term in (select z.term from groundkit.term_stats z where z.df <= 0)
             group by t.term, t.scope
            having sum(t.df) = 0) x;
    select coalesce(array_agg(distinct x.term order by x.term), '{}') into terms
      from (select unnest(pair_terms) as term
            union
            select u.lexeme from groundkit.chunks c cross join lateral unnest(c.tsv) u
             where c.object_id = redact_object.object_id) x;

    -- Lock the counter rows of those terms before touching any other: first this backend's
    -- shard (creating the rows _materialize_many will write), then every other shard, each pass in
    -- key order. Writers lock only their own shard's rows, in key order, so no cycle can form.
    insert into groundkit.term_stats as t (term, scope, shard, df)
    select x.term, x.scope, my_shard, 0
      from unnest(pair_terms, pair_scopes) x(term, scope)
     order by 1, 2
    on conflict (term, scope, shard) do update set df = t.df;
    perform 1 from groundkit.term_stats t
     where t.term = any (terms) and t.shard <> my_shard
     order by t.term, t.scope, t.shard
       for update;

    insert into groundkit.content_log (object_id, version, op)
    values (redact_object.object_id, redact_object.version, 'redact');
    update groundkit.content_log l
       set title = null, body = null, segments = null, scrubbed = true
     where l.object_id = redact_object.object_id and not l.scrubbed
       and (l.title is not null or l.body is not null or l.segments is not null);
    perform groundkit._materialize_many(array[redact_object.object_id]);
    -- No counter row may keep a term of the redacted text when nothing counts it any more.
    perform groundkit._compact_term_stats(terms);
    -- nor the planner's statistics (docs/operations.md, "What a redaction leaves")
    perform groundkit._restat_terms(terms);
    -- nor any embedding of it: every embedding no current chunk uses goes (sql/086_dense.sql)
    perform groundkit._forget_unused_embeddings();
    return 'applied';
end
$$;
