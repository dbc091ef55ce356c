-- The bulk write path: many put_object calls as one set-based transaction. Replaceable.
--
-- groundkit.put_objects(objects jsonb) takes a JSON array of objects with put_object's
-- parameter names ({"object_id", "version", "content_type", "space_id", "tier_visibility",
-- "title", "body", "owner_sub"?, "owner_only"?, "segments"?, "metadata"?}) and returns one
-- (object_id, version, status) row per element, in input order, with put_object's statuses and
-- errors. Every invariant of put_object holds: each applied element appends one log row, and the
-- derived rows, postings and statistics change in the same transaction. Objects are locked in
-- object_id order, so concurrent batches cannot deadlock. An object_id may appear once per batch.

create or replace function groundkit.put_objects(objects jsonb)
returns table (object_id text, version bigint, status text)
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    bad text;
    applied text[];
    clash record;
begin
    if jsonb_typeof(put_objects.objects) is distinct from 'array' then
        raise exception 'objects must be a JSON array of objects' using errcode = 'GK005';
    end if;
    select k into bad
      from jsonb_array_elements(put_objects.objects) e
     cross join lateral jsonb_object_keys(case when jsonb_typeof(e) = 'object' then e else '{"?": 0}' end) k
     where k not in ('object_id', 'version', 'content_type', 'space_id', 'tier_visibility', 'title', 'body',
                     'owner_sub', 'owner_only', 'segments', 'metadata')
     limit 1;
    if found then
        raise exception 'unknown key % in an element of objects', quote_literal(bad) using errcode = 'GK005',
            hint = 'Elements take put_object''s parameter names.';
    end if;

    create temp table if not exists gk_bulk_in (
        ord bigint primary key,
        object_id text,
        version bigint,
        content_type text,
        space_id text,
        tier_visibility text,
        title text,
        body text,
        owner_sub text,
        owner_only boolean,
        segments jsonb,
        metadata jsonb,
        content_hash text,
        status text
    ) on commit drop;
    truncate gk_bulk_in;

    insert into gk_bulk_in (ord, object_id, version, content_type, space_id, tier_visibility, title, body,
                            owner_sub, owner_only, segments, metadata)
    select e.ord, e.v ->> 'object_id',
           case when jsonb_typeof(e.v -> 'version') = 'number' then (e.v ->> 'version')::numeric end,
           e.v ->> 'content_type', e.v ->> 'space_id', e.v ->> 'tier_visibility', e.v ->> 'title',
           e.v ->> 'body', e.v ->> 'owner_sub',
           case when e.v ? 'owner_only' then (e.v ->> 'owner_only')::boolean else false end,
           case when jsonb_typeof(e.v -> 'segments') = 'null' then null else e.v -> 'segments' end,
           coalesce(case when jsonb_typeof(e.v -> 'metadata') = 'null' then null else e.v -> 'metadata' end,
                    '{}'::jsonb)
      from jsonb_array_elements(put_objects.objects) with ordinality as e(v, ord);

    perform groundkit._check_put(b.object_id, b.version, b.content_type, b.space_id, b.tier_visibility,
                                 b.title, b.body, b.owner_sub, b.owner_only, b.segments, b.metadata)
       from gk_bulk_in b order by b.ord;
    select b.object_id into bad from gk_bulk_in b group by b.object_id having count(*) > 1 limit 1;
    if found then
        raise exception 'object % appears more than once in one put_objects call', quote_literal(bad)
            using errcode = 'GK005';
    end if;

    update gk_bulk_in b
       set content_hash = groundkit._content_hash(b.content_type, b.space_id, b.tier_visibility, b.title,
                                                  b.body, b.owner_sub, b.owner_only, b.segments, b.metadata);

    -- Spaces FOR SHARE (a concurrent put_space waits for us), then the objects, in key order.
    perform 1 from groundkit.spaces s
     where s.space_id in (select b.space_id from gk_bulk_in b)
     order by s.space_id
       for share;
    perform groundkit._lock_objects(array(select b.object_id from gk_bulk_in b));
    perform 1 from groundkit.objects o
     where o.object_id in (select b.object_id from gk_bulk_in b)
     order by o.object_id
       for update;
    -- Objects that leave a space take their chunks out of its statistics: hold those spaces too
    -- (as put_object does), so that a concurrent put_space cannot move the same chunks.
    perform 1 from groundkit.spaces s
     where s.space_id in (select o.space_id from groundkit.objects o
                           where o.object_id in (select b.object_id from gk_bulk_in b) and o.state = 'live')
     order by s.space_id
       for share;

    update gk_bulk_in b
       set status = case when o.object_id is null then 'applied'
                         when o.state <> 'live' then 'tombstoned'
                         when b.version < o.version then 'stale'
                         when b.version > o.version then 'applied'
                         when o.content_hash = b.content_hash then 'duplicate'
                         else 'conflict' end
      from gk_bulk_in b2
      left join groundkit.objects o on o.object_id = b2.object_id
     where b2.ord = b.ord;
    select b.object_id, b.version into clash from gk_bulk_in b where b.status = 'conflict' order by b.ord limit 1;
    if found then
        raise exception 'object % version % already exists with different content', clash.object_id, clash.version
            using errcode = 'GK001', hint = 'Write a higher version to change an object.';
    end if;

    insert into groundkit.content_log (object_id, version, op, content_type, space_id, tier_visibility,
                                       title, body, owner_sub, owner_only, segments, metadata, content_hash)
    select b.object_id, b.version, 'put', b.content_type, b.space_id, b.tier_visibility, b.title, b.body,
           b.owner_sub, b.owner_only, b.segments, b.metadata, b.content_hash
      from gk_bulk_in b
     where b.status = 'applied'
     order by b.ord;

    select coalesce(array_agg(b.object_id order by b.object_id), '{}') into applied
      from gk_bulk_in b where b.status = 'applied';
    if cardinality(applied) > 0 then
        perform groundkit._materialize_many(applied);
    end if;

    return query select b.object_id, b.version, b.status from gk_bulk_in b order by b.ord;
end
$$;
