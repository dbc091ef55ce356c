-- Invariants enforced by the database itself, not by application discipline.
-- Replaceable: re-applied after every `groundkit migrate`.

-- The content log is append-only. The one permitted UPDATE is the scrub that redaction
-- performs: payload text set to NULL on an object that has a 'redact' event, every other
-- column unchanged.
create or replace function groundkit._log_guard() returns trigger
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    if tg_op = 'UPDATE'
       and not old.scrubbed and new.scrubbed
       and new.title is null and new.body is null and new.segments is null
       and (new.seq, new.object_id, new.version, new.op, new.content_type, new.space_id,
            new.tier_visibility, new.owner_sub, new.owner_only, new.metadata, new.content_hash,
            new.xact_id, new.logged_at)
           is not distinct from
           (old.seq, old.object_id, old.version, old.op, old.content_type, old.space_id,
            old.tier_visibility, old.owner_sub, old.owner_only, old.metadata, old.content_hash,
            old.xact_id, old.logged_at)
       and exists (select 1 from groundkit.content_log l
                   where l.object_id = old.object_id and l.op = 'redact')
    then
        return new;
    end if;
    raise exception 'groundkit.content_log is append-only: % rejected', tg_op
        using errcode = 'GK006',
              hint = 'Write through groundkit.put_object, retier_object, delete_object or redact_object.';
end
$$;

create or replace trigger content_log_append_only
    before update or delete on groundkit.content_log
    for each row execute function groundkit._log_guard();

create or replace trigger content_log_no_truncate
    before truncate on groundkit.content_log
    for each statement execute function groundkit._log_guard();

-- Derived objects never move to a lower version, and a tombstone is terminal.
create or replace function groundkit._objects_guard() returns trigger
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    if tg_op = 'DELETE' then
        raise exception 'groundkit.objects rows are durable (object %): tombstones cannot be removed',
            old.object_id using errcode = 'GK007';
    end if;
    if new.object_id is distinct from old.object_id then
        raise exception 'groundkit.objects.object_id cannot change' using errcode = 'GK007';
    end if;
    if new.version < old.version then
        raise exception 'object % cannot move from version % to lower version %',
            old.object_id, old.version, new.version using errcode = 'GK007';
    end if;
    if old.state <> 'live' and new.state = 'live' then
        raise exception 'object % is % and cannot come back', old.object_id, old.state
            using errcode = 'GK007';
    end if;
    if old.state = 'redacted' and new.state <> 'redacted' then
        raise exception 'object % is redacted; that is terminal', old.object_id using errcode = 'GK007';
    end if;
    return new;
end
$$;

create or replace trigger objects_monotonic
    before update or delete on groundkit.objects
    for each row execute function groundkit._objects_guard();

-- A chunk can only be written for a live object, at its current version.
create or replace function groundkit._chunks_guard() returns trigger
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    if not exists (select 1 from groundkit.objects o
                   where o.object_id = new.object_id and o.version = new.object_version
                     and o.state = 'live') then
        raise exception 'chunk for object % version % does not match a live current version',
            new.object_id, new.object_version using errcode = 'GK007';
    end if;
    return new;
end
$$;

create or replace trigger chunks_current_version
    before insert or update on groundkit.chunks
    for each row execute function groundkit._chunks_guard();
