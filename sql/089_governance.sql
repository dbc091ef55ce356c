-- Governance (docs/governance.md): the configuration that serves readers, the gate ledger that
-- certifies configurations, and the audit chain over runs, run searches and ledger rows.
-- Replaceable.

-- == The configuration ==========================================================================
-- What the gate certifies. One line per component; a component is a string or null. Code
-- components come with the software (a throwaway database migrated by this groundkit has the same
-- ones); data components come from owner-managed tables of this database. Adding a component is
-- one line in one of the two functions (and, in Python, its trigger sections:
-- groundkit.deployment.TRIGGERS; a component without an entry there needs the whole migrate set).

-- An embedding model as a component: its name and the sha256 of its whole definition (provider,
-- dimension, distance, recipe, options), so that a model redefined under the same name is
-- another configuration.
create or replace function groundkit.model_component(name text, provider text, dimension integer, distance text,
                                                     recipe text, options jsonb)
returns text
language sql immutable
set search_path = pg_catalog, pg_temp
as $$
    select model_component.name || '@' || left(encode(sha256(convert_to(
        jsonb_build_object('name', model_component.name, 'provider', model_component.provider,
                           'dimension', model_component.dimension, 'distance', model_component.distance,
                           'recipe', model_component.recipe,
                           'options', coalesce(model_component.options, '{}'))::text, 'UTF8')), 'hex'), 16)
$$;

-- The sha256 (hex) of a configuration: its canonical JSON, keys in byte order, no spaces; every
-- value a string or null (GK005 otherwise). groundkit/deployment.py computes the same in Python
-- (json.dumps(sort_keys=True, separators=(",", ":"), ensure_ascii=False)).
create or replace function groundkit.configuration_hash(config jsonb) returns text
language plpgsql immutable
set search_path = pg_catalog, pg_temp
as $$
declare
    canonical text;
begin
    if configuration_hash.config is null or jsonb_typeof(configuration_hash.config) <> 'object' then
        raise exception 'a configuration is a JSON object' using errcode = 'GK005';
    end if;
    if exists (select 1 from jsonb_each(configuration_hash.config) e
                where jsonb_typeof(e.value) not in ('string', 'null')) then
        raise exception 'a configuration''s components are strings or null' using errcode = 'GK005';
    end if;
    select '{' || coalesce(string_agg(to_json(e.key)::text || ':' || e.value::text, ',' order by e.key collate "C"), '')
           || '}'
      into canonical
      from jsonb_each(configuration_hash.config) e;
    return encode(sha256(convert_to(canonical, 'UTF8')), 'hex');
end
$$;

-- What the schema's behaviour is made of: every function's definition and privileges, every
-- trigger (and whether it is enabled), every relation's privileges. A function replaced by hand,
-- a trigger disabled or a privilege granted outside migrate is another configuration.
create or replace function groundkit._sql_digest() returns text
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select encode(sha256(convert_to(string_agg(x.def, E'\n' order by x.k collate "C"), 'UTF8')), 'hex')
      from (
        select 'f ' || p.oid::regprocedure::text as k,
               pg_get_functiondef(p.oid) || coalesce(p.proacl::text, '') as def
          from pg_proc p
         where p.pronamespace = 'groundkit'::regnamespace and p.prokind in ('f', 'p', 'w')
           and not exists (select 1 from pg_depend d where d.classid = 'pg_proc'::regclass and d.objid = p.oid
                                                     and d.deptype = 'e')
        union all
        select 't ' || c.relname || '.' || t.tgname, pg_get_triggerdef(t.oid) || ' ' || t.tgenabled::text
          from pg_trigger t join pg_class c on c.oid = t.tgrelid
         where c.relnamespace = 'groundkit'::regnamespace and not t.tgisinternal
        union all
        select 'r ' || c.relname, coalesce(c.relacl::text, '')
          from pg_class c
         where c.relnamespace = 'groundkit'::regnamespace and c.relkind in ('r', 'p', 'v', 'm', 'S', 'f')
           and not exists (select 1 from pg_depend d where d.classid = 'pg_class'::regclass and d.objid = c.oid
                                                     and d.deptype = 'e')
      ) x
$$;

create or replace function groundkit._configuration_code() returns jsonb
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select jsonb_build_object(
        'groundkit_version', (select d.groundkit_version from groundkit.deployment d),
        'schema_revision', (select string_agg(v.version_num, ',' order by v.version_num)
                              from groundkit.alembic_version v),
        'sql_digest', groundkit._sql_digest(),
        'postgres', (current_setting('server_version_num')::integer / 10000)::text,
        'pgvector', (select e.extversion::text from pg_catalog.pg_extension e where e.extname = 'vector')
    )
$$;

create or replace function groundkit._configuration_data() returns jsonb
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select jsonb_build_object(
        'embedding_model', (select groundkit.model_component(m.name, m.provider, m.dimension, m.distance, m.recipe,
                                                             m.options)
                              from groundkit.embedding_models m where m.active),
        -- the hash of the outbound policy in force (sql/083_outbound.sql): it names the content, so
        -- two versions alike are one configuration
        'outbound_policy', groundkit.outbound_policy_hash(),
        -- what a search in mode auto runs per content type (config.search_modes,
        -- sql/085_search_modes.sql), as its JSON text; null while no type sets one
        'search_modes', (select nullif(c.search_modes, '{}'::jsonb)::text from groundkit.config c)
    )
$$;

-- The configuration serving readers now: code || data.
create or replace function groundkit.deployment_configuration() returns jsonb
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select groundkit._configuration_code() || groundkit._configuration_data()
$$;

-- Every migrate records the groundkit version that ran it (groundkit.migrate calls this).
create or replace function groundkit._record_installed(version text) returns void
language sql
set search_path = pg_catalog, pg_temp
as $$
    insert into groundkit.deployment (id, groundkit_version) values (1, _record_installed.version)
    on conflict (id) do update set groundkit_version = excluded.groundkit_version, migrated_at = now(),
                                   migrated_by = session_user
$$;

-- The sha256 of a row's canonical encoding. Callers pin TimeZone, extra_float_digits,
-- bytea_output and IntervalStyle (the text forms of timestamps, floats, bytea and intervals).
create or replace function groundkit._audit_row_hash(row_json jsonb) returns bytea
language sql immutable
set search_path = pg_catalog, pg_temp
as $$
    select sha256(convert_to(jsonb_strip_nulls(row_json)::text, 'UTF8'))
$$;

-- == The gate ledger ============================================================================

-- Append-only, like runs: no update, delete or truncate, by anyone (GK006).
create or replace function groundkit._append_only() returns trigger
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    raise exception 'groundkit.% is append-only: % rejected', tg_table_name, tg_op using errcode = 'GK006';
end
$$;

create or replace trigger gate_ledger_append_only
    before update or delete on groundkit.gate_ledger
    for each row execute function groundkit._append_only();
create or replace trigger gate_ledger_no_truncate
    before truncate on groundkit.gate_ledger
    for each statement execute function groundkit._append_only();
create or replace trigger audit_chain_append_only
    before update or delete on groundkit.audit_chain
    for each row execute function groundkit._append_only();
create or replace trigger audit_chain_no_truncate
    before truncate on groundkit.audit_chain
    for each statement execute function groundkit._append_only();

-- One ledger row (groundkit/deployment.py writes it; the owner's alone). entry: the columns of
-- groundkit.gate_ledger by name; config_hash is computed here. Returns the row's id.
create or replace function groundkit.record_gate(entry jsonb) returns bigint
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    new_id bigint;
    e jsonb := record_gate.entry;
begin
    if e is null or jsonb_typeof(e) <> 'object' or jsonb_typeof(e -> 'config') is distinct from 'object' then
        raise exception 'a ledger entry is a JSON object with a config object' using errcode = 'GK005';
    end if;
    if exists (select 1 from jsonb_object_keys(e) k
                where k not in ('operator', 'kind', 'command', 'verdict', 'config', 'fixture_digest', 'dense_model',
                                'sections_run', 'sections_skipped', 'passed', 'checks', 'failed', 'failures',
                                'tap_digest', 'duration_ms', 'basis_id', 'bundle_digest', 'reason')) then
        raise exception 'a ledger entry has unknown keys' using errcode = 'GK005';
    end if;
    insert into groundkit.gate_ledger (operator, kind, command, verdict, config, config_hash, fixture_digest,
                                       dense_model, sections_run, sections_skipped, passed, checks, failed,
                                       failures, tap_digest, duration_ms, basis_id, bundle_digest, reason)
    values (e ->> 'operator', e ->> 'kind', e ->> 'command', e ->> 'verdict', e -> 'config',
            groundkit.configuration_hash(e -> 'config'), e ->> 'fixture_digest', e ->> 'dense_model',
            coalesce(array(select jsonb_array_elements_text(coalesce(e -> 'sections_run', '[]')) ), '{}'),
            coalesce(array(select jsonb_array_elements_text(coalesce(e -> 'sections_skipped', '[]'))), '{}'),
            (e ->> 'passed')::boolean, (e ->> 'checks')::integer, (e ->> 'failed')::integer,
            case when e ? 'failures' then array(select jsonb_array_elements_text(e -> 'failures')) end,
            e ->> 'tap_digest', (e ->> 'duration_ms')::bigint, (e ->> 'basis_id')::bigint,
            e ->> 'bundle_digest', e ->> 'reason')
    returning id into new_id;
    return new_id;
end
$$;

-- Is a ledger row what was chained when it was written? (Its chain entry exists and holds the
-- hash of the row's canonical encoding as it is now.) A certificate written around the chain, or
-- edited since, does not certify.
create or replace function groundkit._ledger_row_intact(p_id bigint) returns boolean
language sql stable
set search_path = pg_catalog, pg_temp
set TimeZone = 'UTC'
set extra_float_digits = 1
set bytea_output = 'hex'
set IntervalStyle = 'postgres'
as $$
    select exists (select 1 from groundkit.gate_ledger g
                     join groundkit.audit_chain c on c.kind = 'gate' and c.ledger_id = g.id
                    where g.id = p_id and c.row_hash = groundkit._audit_row_hash(to_jsonb(g)))
$$;

-- Whether the configuration serving readers now is certified, and by which ledger row. The
-- latest certified or failed row for this configuration decides (a failure after a certificate
-- revokes it; a bypass, or a passing run that did not cover the configuration, decides nothing
-- but is shown). certified_by: the row whose gate run the decision rests on (a reuse names the
-- certificate it reused).
create or replace function groundkit.deployment_status()
returns table (certified boolean, config jsonb, config_hash text, ledger_id bigint, kind text, verdict text,
               recorded_at timestamptz, recorded_by text, operator text, certified_by bigint, reason text)
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
declare
    cfg jsonb := groundkit.deployment_configuration();
    h text := groundkit.configuration_hash(cfg);
    decisive groundkit.gate_ledger;
    latest groundkit.gate_ledger;
    intact boolean;
begin
    select * into decisive from groundkit.gate_ledger g
     where g.config_hash = h and g.verdict in ('certified', 'failed') order by g.id desc limit 1;
    select * into latest from groundkit.gate_ledger g where g.config_hash = h order by g.id desc limit 1;
    if decisive.id is not null then
        intact := groundkit._ledger_row_intact(decisive.id);
        return query select decisive.verdict = 'certified' and intact, cfg, h, decisive.id, decisive.kind,
            decisive.verdict, decisive.recorded_at, decisive.recorded_by, decisive.operator,
            coalesce(decisive.basis_id, decisive.id),
            case when not intact then format('ledger row %s is not the row the audit chain recorded', decisive.id)
                 when decisive.verdict = 'failed' then format('the gate failed on this configuration (ledger row %s)',
                                                              decisive.id)
                 else null end;
    elsif latest.id is not null then
        return query select false, cfg, h, latest.id, latest.kind, latest.verdict, latest.recorded_at,
            latest.recorded_by, latest.operator, null::bigint,
            case latest.verdict when 'bypassed' then 'the gate was bypassed: ' || coalesce(latest.reason, '')
                 else coalesce(latest.reason, 'no gate run covered this configuration') end;
    else
        return query select false, cfg, h, null::bigint, null::text, null::text, null::timestamptz, null::text,
            null::text, null::bigint, 'no gate run has certified this configuration'::text;
    end if;
end
$$;

-- == The audit chain ============================================================================
-- One entry per run header, run search and ledger row, in commit order: each holds the sha256 of
-- its row's canonical encoding (jsonb_strip_nulls(to_jsonb(row)), under the settings pinned
-- below) and hash = sha256(prev_hash || seq (8 bytes, big-endian) || kind ':' ref || row_hash).
-- Entries are written by deferred constraint triggers, at commit: a run holds the chain's head
-- only while it commits, not while its app calls a model between searches. The head is a row
-- lock on the genesis entry, so committing transactions that chain take turns (measured in
-- docs/governance.md).

-- The text an entry's hash names it by.
create or replace function groundkit._audit_ref(kind text, run_id uuid, search_no integer, ledger_id bigint)
returns text
language sql immutable
set search_path = pg_catalog, pg_temp
as $$
    select _audit_ref.kind || ':' || case _audit_ref.kind
        when 'search' then _audit_ref.run_id::text || '/' || _audit_ref.search_no::text
        when 'gate' then _audit_ref.ledger_id::text
        when 'genesis' then ''
        else _audit_ref.run_id::text end
$$;

create or replace function groundkit._audit_entry_hash(prev_hash bytea, seq bigint, ref text, row_hash bytea)
returns bytea
language sql immutable
set search_path = pg_catalog, pg_temp
as $$
    select sha256(_audit_entry_hash.prev_hash || int8send(_audit_entry_hash.seq)
                  || convert_to(_audit_entry_hash.ref, 'UTF8') || _audit_entry_hash.row_hash)
$$;

-- Append one entry after the head, taking the head's lock (a row lock on the genesis entry, held
-- until the transaction ends; taking it again in the same transaction costs nothing). The head is
-- read from the index every time: a cache the session could set would let it fork the chain, and
-- it saved nothing measurable (docs/journal/audit-chain.md).
create or replace function groundkit._audit_link(p_kind text, p_run_id uuid, p_search_no integer,
                                                 p_ledger_id bigint, p_row_hash bytea)
returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    head_seq bigint;
    head_hash bytea;
    h bytea;
begin
    perform 1 from groundkit.audit_chain c where c.seq = 0 for update;
    if not found then
        raise exception 'the audit chain has no genesis entry; run groundkit migrate' using errcode = 'GK022';
    end if;
    select c.seq, c.hash into head_seq, head_hash from groundkit.audit_chain c order by c.seq desc limit 1;
    h := sha256(head_hash || int8send(head_seq + 1)
                || convert_to(p_kind || ':' || case p_kind
                                  when 'search' then p_run_id::text || '/' || p_search_no::text
                                  when 'gate' then p_ledger_id::text
                                  else p_run_id::text end, 'UTF8')
                || p_row_hash);
    insert into groundkit.audit_chain (seq, kind, run_id, search_no, ledger_id, row_hash, prev_hash, hash)
    values (head_seq + 1, p_kind, p_run_id, p_search_no, p_ledger_id, p_row_hash, head_hash, h);
end
$$;

-- The deferred trigger on runs, run_searches and gate_ledger (the row's hash computed inline:
-- this is every run's commit path).
create or replace function groundkit._audit_chain_row() returns trigger
language plpgsql
set search_path = pg_catalog, pg_temp
set TimeZone = 'UTC'
set extra_float_digits = 1
set bytea_output = 'hex'
set IntervalStyle = 'postgres'
as $$
declare
    h bytea := sha256(convert_to(jsonb_strip_nulls(to_jsonb(new))::text, 'UTF8'));
begin
    if tg_table_name = 'run_searches' then
        perform groundkit._audit_link('search', new.run_id, new.search_no, null, h);
    elsif tg_table_name = 'runs' then
        perform groundkit._audit_link(case when new.kind = 'pruned' then 'prune' else 'run' end,
                                      new.run_id, null, null, h);
    else
        perform groundkit._audit_link('gate', null, null, new.id, h);
    end if;
    return null;
end
$$;

do $chain$
declare
    t text;
begin
    foreach t in array array['runs', 'run_searches', 'gate_ledger'] loop
        execute format('drop trigger if exists %I on groundkit.%I', t || '_audit_chain', t);
        execute format('create constraint trigger %I after insert on groundkit.%I '
                       'deferrable initially deferred for each row '
                       'execute function groundkit._audit_chain_row()', t || '_audit_chain', t);
    end loop;
end
$chain$;

-- The genesis entry, once; rows recorded before the chain existed (runs from an earlier
-- revision) are chained after it in the order they were recorded, each run's searches before
-- its header, as a run commits them.
do $genesis$
declare
    r record;
    s record;
    g bytea;
begin
    if exists (select 1 from groundkit.audit_chain) then
        return;
    end if;
    g := sha256(convert_to('groundkit audit chain ' || gen_random_uuid()::text, 'UTF8'));
    insert into groundkit.audit_chain (seq, kind, row_hash, prev_hash, hash)
    values (0, 'genesis', g, '\x0000000000000000000000000000000000000000000000000000000000000000'::bytea,
            groundkit._audit_entry_hash('\x0000000000000000000000000000000000000000000000000000000000000000'::bytea,
                                        0, 'genesis:', g));
    perform set_config('TimeZone', 'UTC', true);
    perform set_config('extra_float_digits', '1', true);
    perform set_config('bytea_output', 'hex', true);
    perform set_config('IntervalStyle', 'postgres', true);
    for r in select * from groundkit.runs x order by x.recorded_at, x.run_id loop
        for s in select * from groundkit.run_searches y where y.run_id = r.run_id order by y.search_no loop
            perform groundkit._audit_link('search', s.run_id, s.search_no, null, groundkit._audit_row_hash(to_jsonb(s)));
        end loop;
        perform groundkit._audit_link(case when r.kind = 'pruned' then 'prune' else 'run' end, r.run_id, null, null,
                                      groundkit._audit_row_hash(to_jsonb(r)));
    end loop;
end
$genesis$;

-- The chain's head: its id (the genesis entry's hash), the last entry's seq and hash. For
-- checkpoints (groundkit audit checkpoint); the auditor's and the owner's.
create or replace function groundkit.audit_head()
returns table (chain_id text, seq bigint, hash text)
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select encode(g.hash, 'hex'), h.seq, encode(h.hash, 'hex')
      from groundkit.audit_chain g,
           lateral (select c.seq, c.hash from groundkit.audit_chain c order by c.seq desc limit 1) h
     where g.seq = 0
$$;

-- The chain's entries after after_seq (at most max_rows), each with the hash of its row's
-- canonical encoding as the row is NOW (null: the row is gone), and for a prune tombstone the
-- entries whose rows it deleted. groundkit audit verify recomputes the chain from these in Python.
create or replace function groundkit.audit_entries(after_seq bigint default -1, max_rows integer default 10000)
returns table (seq bigint, kind text, run_id uuid, search_no integer, ledger_id bigint, row_hash bytea,
               prev_hash bytea, hash bytea, current_hash bytea, pruned_seqs text, pruned_runs bigint,
               pruned_searches bigint)
language plpgsql stable
set search_path = pg_catalog, pg_temp
set TimeZone = 'UTC'
set extra_float_digits = 1
set bytea_output = 'hex'
set IntervalStyle = 'postgres'
as $$
begin
    if not groundkit._is_auditor() then
        raise exception 'reading the audit chain needs the groundkit_auditor role' using errcode = 'GK010';
    end if;
    return query
    select c.seq, c.kind, c.run_id, c.search_no, c.ledger_id, c.row_hash, c.prev_hash, c.hash,
           case c.kind
               when 'genesis' then c.row_hash
               when 'search' then (select groundkit._audit_row_hash(to_jsonb(s)) from groundkit.run_searches s
                                    where s.run_id = c.run_id and s.search_no = c.search_no)
               when 'gate' then (select groundkit._audit_row_hash(to_jsonb(g)) from groundkit.gate_ledger g
                                  where g.id = c.ledger_id)
               else (select groundkit._audit_row_hash(to_jsonb(r)) from groundkit.runs r
                      where r.run_id = c.run_id and r.kind = case c.kind when 'prune' then 'pruned' else 'run' end)
           end,
           p.pruned_seqs::text, p.pruned_runs, p.pruned_searches
      from groundkit.audit_chain c
      left join groundkit.runs p on c.kind = 'prune' and p.run_id = c.run_id and p.kind = 'pruned'
     where c.seq > coalesce(audit_entries.after_seq, -1)
     order by c.seq
     limit greatest(coalesce(audit_entries.max_rows, 10000), 0);
end
$$;

-- Rows no entry chains: written with the triggers off (session_replication_role = replica),
-- or restored around them.
create or replace function groundkit.audit_unchained()
returns table (kind text, run_id uuid, search_no integer, ledger_id bigint)
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
begin
    if not groundkit._is_auditor() then
        raise exception 'reading the audit chain needs the groundkit_auditor role' using errcode = 'GK010';
    end if;
    return query
    select case r.kind when 'pruned' then 'prune' else 'run' end, r.run_id, null::integer, null::bigint
      from groundkit.runs r
     where not exists (select 1 from groundkit.audit_chain c
                        where c.run_id = r.run_id and c.kind in ('run', 'prune'))
    union all
    select 'search', s.run_id, s.search_no, null::bigint
      from groundkit.run_searches s
     where not exists (select 1 from groundkit.audit_chain c
                        where c.run_id = s.run_id and c.kind = 'search' and c.search_no = s.search_no)
    union all
    select 'gate', null::uuid, null::integer, g.id
      from groundkit.gate_ledger g
     where not exists (select 1 from groundkit.audit_chain c where c.kind = 'gate' and c.ledger_id = g.id);
end
$$;

-- The gate ledger, newest first: the auditor's and the owner's.
create or replace function groundkit.gate_ledger_rows(max_rows integer default 100)
returns setof groundkit.gate_ledger
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
begin
    if not groundkit._is_auditor() then
        raise exception 'reading the gate ledger needs the groundkit_auditor role' using errcode = 'GK010';
    end if;
    return query select * from groundkit.gate_ledger g order by g.id desc limit greatest(coalesce(max_rows, 100), 0);
end
$$;

-- The canonical encoding of chained rows, for evidence bundles: each row's encoding text (what
-- its row hash is the sha256 of) and its chain entry. The auditor's and the owner's.
create or replace function groundkit.audit_rows(p_run_id uuid default null, p_ledger_id bigint default null)
returns table (seq bigint, kind text, ref text, encoding text, row_hash bytea, prev_hash bytea, hash bytea)
language plpgsql stable
set search_path = pg_catalog, pg_temp
set TimeZone = 'UTC'
set extra_float_digits = 1
set bytea_output = 'hex'
set IntervalStyle = 'postgres'
as $$
begin
    if not groundkit._is_auditor() then
        raise exception 'reading the audit chain needs the groundkit_auditor role' using errcode = 'GK010';
    end if;
    return query
    select c.seq, c.kind, groundkit._audit_ref(c.kind, c.run_id, c.search_no, c.ledger_id),
           case c.kind
               when 'search' then (select jsonb_strip_nulls(to_jsonb(s))::text from groundkit.run_searches s
                                    where s.run_id = c.run_id and s.search_no = c.search_no)
               when 'gate' then (select jsonb_strip_nulls(to_jsonb(g))::text from groundkit.gate_ledger g
                                  where g.id = c.ledger_id)
               else (select jsonb_strip_nulls(to_jsonb(r))::text from groundkit.runs r
                      where r.run_id = c.run_id and r.kind = 'run')
           end,
           c.row_hash, c.prev_hash, c.hash
      from groundkit.audit_chain c
     where (p_run_id is not null and c.run_id = p_run_id and c.kind in ('run', 'search'))
        or (p_ledger_id is not null and c.kind = 'gate' and c.ledger_id = p_ledger_id)
     order by c.seq;
end
$$;
