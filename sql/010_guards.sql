-- Invariants enforced by the database itself, not by application discipline.
-- Replaceable: re-applied after every `groundkit migrate`.

-- Groundkit's locks are rows of groundkit.locks (and groundkit.object_locks, sql/050_write.sql),
-- not advisory locks: an advisory key is a number anyone can compute, and pg_advisory_lock is
-- PUBLIC's, so any role that can connect could hold one and stall every writer queued on it.
-- Locking a row needs UPDATE on its table, which only groundkit_owner has (the write functions
-- run as it). Row locks last until the transaction ends, like the advisory xact locks they
-- replace; the recompute in steps, which needs a lock across transactions, is in
-- sql/042_impacts.sql. pg_locks shows a row lock only while someone waits for it, as a tuple
-- of groundkit.locks or object_locks: no object id.

-- The lock of the pending part (docs/bm25.md, "The pending part"): a merge takes it exclusive
-- (p_wait false: only if free at once; returns whether it has it), and writers that replace or
-- move chunks whose postings may be pending take it shared. One definition per side, so that
-- the two cannot name different locks.
create or replace function groundkit._lock_pending(p_wait boolean) returns boolean
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    if p_wait then
        perform 1 from groundkit.locks l where l.name = 'pending' for update;
    else
        perform 1 from groundkit.locks l where l.name = 'pending' for update skip locked;
    end if;
    return found;
end
$$;

create or replace function groundkit._lock_pending_shared() returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    perform 1 from groundkit.locks l where l.name = 'pending' for key share;
end
$$;

-- Redactions queue behind each other (redact_object says why).
create or replace function groundkit._lock_redactions() returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    perform 1 from groundkit.locks l where l.name = 'redact' for update;
end
$$;

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

-- A tier's rank is stamped into derived rows: the statistics scope and postings bucket of every
-- chunk whose object or space names the tier. Changing it underneath them would leave readers
-- reading the wrong buckets (missing results) and statistics in the wrong scopes, so it is only
-- allowed through groundkit.set_tier_rank(), which moves them in the same transaction: it writes
-- its transaction's id into groundkit.locks' row 'tier_rank' (a token in a table only the owner
-- may write, where a setting would be anyone's to set) and clears it after the update. A tier
-- that stored objects name can be neither renamed nor deleted (their log rows name it).
create or replace function groundkit._tiers_guard() returns trigger
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    by_objects boolean := exists (select 1 from groundkit.objects o where o.tier_visibility = old.name);
begin
    if tg_op = 'DELETE' then
        if by_objects then
            raise exception 'tier % is the tier of stored objects and cannot be deleted', old.name
                using errcode = 'GK007', hint = 'Retier or delete those objects first.';
        end if;
        return old;
    end if;
    if new.name is distinct from old.name and by_objects then
        raise exception 'tier % is the tier of stored objects and cannot be renamed', old.name
            using errcode = 'GK007', hint = 'Add a tier under the new name and retier the objects.';
    end if;
    if new.rank is distinct from old.rank
       and not exists (select 1 from groundkit.locks l
                        where l.name = 'tier_rank' and l.holder_xact = pg_current_xact_id())
       and (by_objects or exists (select 1 from groundkit.spaces s where s.min_tier = old.name)) then
        raise exception 'the rank of tier % is stamped into the statistics scopes and postings of stored content',
            old.name using errcode = 'GK007',
            hint = 'Use groundkit.set_tier_rank(tier, rank), which moves them in the same transaction.';
    end if;
    return new;
end
$$;

create or replace trigger tiers_guard
    before update or delete on groundkit.tiers
    for each row execute function groundkit._tiers_guard();
