-- The permission fence for read replicas (docs/replicas.md). Replaceable.
--
-- Every transaction that changes live authority or visibility adds one to a counter in
-- groundkit.authority_position: the row of its backend's shard (pid % 16), once per transaction.
-- A router reads the primary's counters for each read and lets a standby serve it only when the
-- standby's replayed counters are at least as high, shard by shard. Why that is exact:
--   * the writers of one shard row are serialised by its row lock, so their commit records are in
--     the WAL in counter order: a standby showing value v has replayed every commit that wrote a
--     value <= v on that row;
--   * a standby shows exactly the commits it has replayed, in WAL order;
--   * every authority change the primary's snapshot shows bumped some shard to a value that
--     snapshot shows; the standby at or above it on every shard has replayed that change.
-- Content that is merely new bumps nothing: it may lag, by at most the router's max_lag.

-- Adds one to this backend's shard, once per transaction (a transaction-local setting remembers;
-- a rolled-back savepoint takes the setting back with its bump).
create or replace function groundkit._advance_authority() returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    if current_setting('groundkit.authority_advanced', true) = 'on' then
        return;
    end if;
    perform set_config('groundkit.authority_advanced', 'on', true);
    update groundkit.authority_position p set n = p.n + 1 where p.shard = (pg_backend_pid() % 16);
end
$$;

-- The trigger on the authority tables (members, spaces, grants, tiers, login bindings) and on
-- objects whose visibility changed. An app that maps groundkit.reader_authority over its own
-- membership table attaches it there too (docs/replicas.md). SECURITY DEFINER (sql/090_roles.sql).
create or replace function groundkit.authority_changed() returns trigger
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    perform groundkit._advance_authority();
    return null;
end
$$;

-- Constraint triggers, deferred: they fire at commit, so a writer holds its shard's row only
-- while it commits, not for the rest of its transaction (no new lock waits, no new deadlocks
-- between writers that share a shard). Constraint triggers cannot be replaced: dropped and made.
do $triggers$
declare
    t text;
begin
    foreach t in array array['members', 'spaces', 'space_grants', 'tiers', 'login_members'] loop
        execute format('drop trigger if exists %I on groundkit.%I', t || '_authority', t);
        execute format('create constraint trigger %I after insert or update or delete on groundkit.%I '
                       'deferrable initially deferred for each row '
                       'execute function groundkit.authority_changed()', t || '_authority', t);
        execute format('create or replace trigger %I after truncate on groundkit.%I '
                       'for each statement execute function groundkit.authority_changed()',
                       t || '_authority_truncate', t);
    end loop;
end
$triggers$;
-- An object's visibility: a re-tier, a move, a delete or redaction (state), its owner. A new
-- object (an insert) or a new version with the same visibility is content, not authority.
drop trigger if exists objects_authority on groundkit.objects;
create constraint trigger objects_authority
    after update on groundkit.objects
    deferrable initially deferred
    for each row
    when (old.state is distinct from new.state
          or old.space_id is distinct from new.space_id
          or old.tier_visibility is distinct from new.tier_visibility
          or old.owner_sub is distinct from new.owner_sub
          or old.owner_only is distinct from new.owner_only)
    execute function groundkit.authority_changed();
drop trigger if exists objects_authority_delete on groundkit.objects;
create constraint trigger objects_authority_delete
    after delete on groundkit.objects
    deferrable initially deferred
    for each row execute function groundkit.authority_changed();
create or replace trigger objects_authority_truncate
    after truncate on groundkit.objects
    for each statement execute function groundkit.authority_changed();

-- The authority position this server shows: its 16 counters, shard order. On a standby, what it
-- has replayed.
create or replace function groundkit.authority_position() returns bigint[]
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select coalesce(array_agg(p.n order by p.shard), '{}') from groundkit.authority_position p
$$;

-- One server's state for the router, in one round trip: its authority position, whether it is a
-- standby, its WAL position (on the primary what it has written, on a standby what it has
-- replayed), and on a standby how far its replay is behind what it has received, in seconds: 0
-- when it has replayed all it received, else the age of the last transaction it replayed.
create or replace function groundkit.replica_state(
    out authority bigint[], out in_recovery boolean, out lsn pg_lsn, out lag_seconds double precision)
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
begin
    authority := groundkit.authority_position();
    in_recovery := pg_is_in_recovery();
    if not in_recovery then
        lsn := pg_current_wal_insert_lsn();
        lag_seconds := 0;
    else
        lsn := pg_last_wal_replay_lsn();
        -- behind with nothing replayed yet since it started: no bound, so not fresh
        lag_seconds := case when pg_last_wal_receive_lsn() is not distinct from lsn then 0
                            else coalesce(greatest(0, extract(epoch from clock_timestamp()
                                                              - pg_last_xact_replay_timestamp())),
                                          'infinity') end;
    end if;
end
$$;

-- A router's counts since its last flush: {"replica": {"route": n, ...}, ...} with the routes of
-- groundkit.replica_routes. Adds them to today's rows.
create or replace function groundkit.note_routes(counts jsonb) returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    if jsonb_typeof(counts) is distinct from 'object' then
        raise exception 'counts must be a JSON object of replica -> route -> count' using errcode = 'GK005';
    end if;
    insert into groundkit.replica_routes as r (day, replica, route, n)
    select current_date, left(rep.key, 256), rt.key, round(rt.value::text::numeric)::bigint
      from jsonb_each(counts) rep
     cross join lateral jsonb_each(case jsonb_typeof(rep.value) when 'object' then rep.value
                                        else '{}'::jsonb end) rt
     where rt.key in ('replica', 'fence', 'lag', 'unreachable')
       and jsonb_typeof(rt.value) = 'number' and rt.value::text::numeric between 1 and 1e15
     order by 2, 3
    on conflict (day, replica, route) do update set n = r.n + excluded.n;
end
$$;
