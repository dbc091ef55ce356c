-- Least privilege, as Postgres sees it. Replaceable, and deliberately the last file: every
-- `create or replace function` in an earlier file resets SECURITY DEFINER and may create new
-- functions with EXECUTE for PUBLIC, so this file re-establishes the grid on every migrate.
--
--   groundkit_owner   owns the schema and everything in it; the SECURITY DEFINER functions
--                     run as this role. NOLOGIN.
--   groundkit_writer  may call the write and membership functions. NOLOGIN.
--   groundkit_reader  may call groundkit.search and groundkit.fetch_citation and nothing else:
--                     no SELECT on chunks, the log or members, so it cannot go around the
--                     permission predicate; and record, replay and diff its readers' own
--                     runs (the runs block below). NOLOGIN.
--   groundkit_auditor may list, replay and diff every reader's runs, and read the spend. NOLOGIN.
--
-- Apps log in as their own roles and are granted one of these (`grant groundkit_reader to app_api`).
-- Roles are cluster-wide: they are created once, guarded by existence checks, and a migrate that
-- may not create roles (no CREATEROLE) warns and goes on; the grants below then wait for a
-- migrate by a role that can.

do $roles$
declare
    r text;
begin
    foreach r in array array['groundkit_owner', 'groundkit_writer', 'groundkit_reader', 'groundkit_auditor'] loop
        if not exists (select 1 from pg_catalog.pg_roles where rolname = r) then
            begin
                execute format('create role %I nologin', r);
            exception
                when duplicate_object or unique_violation then
                    null;  -- another database's migrate created it at the same moment
                when insufficient_privilege then
                    raise warning 'groundkit: cannot create role % (needs CREATEROLE); least-privilege roles are not set up', r;
            end;
        end if;
    end loop;
end
$roles$;

-- Hand the schema and everything in it to groundkit_owner, when the migrating role may do so and
-- keeps its privileges through membership (a superuser always may). Otherwise the migrating role
-- stays the owner, and the SECURITY DEFINER functions run as it.
do $owner$
declare
    obj record;
    may_set boolean;
begin
    if not exists (select 1 from pg_catalog.pg_roles where rolname = 'groundkit_owner') then
        return;
    end if;
    if current_setting('server_version_num')::integer >= 160000 then
        execute 'select pg_catalog.pg_has_role(current_user, ''groundkit_owner'', ''SET'')' into may_set;
    else
        may_set := pg_catalog.pg_has_role(current_user, 'groundkit_owner', 'MEMBER');
    end if;
    if not (may_set and pg_catalog.pg_has_role(current_user, 'groundkit_owner', 'USAGE')) then
        raise notice 'groundkit: % is not a member of groundkit_owner; objects stay owned by %',
            current_user, current_user;
        return;
    end if;
    execute 'alter schema groundkit owner to groundkit_owner';
    for obj in
        select c.relname, c.relkind
          from pg_catalog.pg_class c
          join pg_catalog.pg_namespace n on n.oid = c.relnamespace
         where n.nspname = 'groundkit' and c.relkind in ('r', 'p', 'v', 'm', 'S', 'f', 'c')
           and pg_catalog.pg_get_userbyid(c.relowner) <> 'groundkit_owner'
           -- identity sequences follow their table
           and not exists (select 1 from pg_catalog.pg_depend d
                            where d.objid = c.oid and d.deptype in ('a', 'i') and c.relkind = 'S')
    loop
        execute format('alter %s groundkit.%I owner to groundkit_owner',
                       case obj.relkind when 'v' then 'view' when 'm' then 'materialized view'
                                        when 'S' then 'sequence' when 'f' then 'foreign table'
                                        when 'c' then 'type'  -- a composite type: groundkit.search_hit
                                        else 'table' end,
                       obj.relname);
    end loop;
    for obj in
        select p.oid::regprocedure as sig
          from pg_catalog.pg_proc p
          join pg_catalog.pg_namespace n on n.oid = p.pronamespace
         where n.nspname = 'groundkit' and pg_catalog.pg_get_userbyid(p.proowner) <> 'groundkit_owner'
    loop
        execute format('alter routine %s owner to groundkit_owner', obj.sig);
    end loop;
    for obj in
        select c.cfgname
          from pg_catalog.pg_ts_config c
          join pg_catalog.pg_namespace n on n.oid = c.cfgnamespace
         where n.nspname = 'groundkit' and pg_catalog.pg_get_userbyid(c.cfgowner) <> 'groundkit_owner'
    loop
        execute format('alter text search configuration groundkit.%I owner to groundkit_owner', obj.cfgname);
    end loop;
end
$owner$;

-- Nothing for PUBLIC: functions are created with EXECUTE for PUBLIC, so take it back from every
-- function in the schema (internal helpers such as _materialize_many included), on every migrate.
revoke all on schema groundkit from public;
revoke all on all tables in schema groundkit from public;
revoke all on all sequences in schema groundkit from public;
revoke execute on all functions in schema groundkit from public;

-- The public API runs as the owner, with a pinned search_path (each function already sets
-- `search_path = pg_catalog, pg_temp`; it is re-pinned here so that the pair cannot drift).
-- Internal helpers stay SECURITY INVOKER: called from these, they run as the owner anyway.
do $definer$
declare
    fn text;
begin
    foreach fn in array array[
        'groundkit.search(text, text, integer, text[], text[], text, text)',
        'groundkit.fetch_citation(text, text, bigint, integer)',
        'groundkit.put_member(text, text, text)',
        'groundkit.put_space(text, text, boolean)',
        'groundkit.set_space_language(text, text)',
        'groundkit.grant_space(text, text)',
        'groundkit.revoke_space(text, text)',
        'groundkit.put_object(text, bigint, text, text, text, text, text, text, boolean, jsonb, jsonb)',
        'groundkit.put_objects(jsonb)',
        'groundkit.retier_object(text, bigint, text)',
        'groundkit.delete_object(text, bigint)',
        'groundkit.redact_object(text, bigint)',
        'groundkit.snapshot_marker()',
        'groundkit.create_token(text, bytea, timestamp with time zone)',
        'groundkit.revoke_tokens(text)',
        'groundkit.token_member(bytea)',
        'groundkit.schema_revision()',
        'groundkit.record_call(text, text, text, bigint, bigint, numeric, text, uuid, text)',
        'groundkit.cost_summary(timestamptz, text)',
        'groundkit.add_flow(text)',
        'groundkit.search_sampling(text)',
        'groundkit.record_sample(text, text, text, integer, jsonb)',
        'groundkit.record_sample_engagement(uuid, text, text, double precision)'
    ] loop
        execute format('alter function %s security definer set search_path = pg_catalog, pg_temp', fn);
    end loop;
end
$definer$;

do $grants$
begin
    if exists (select 1 from pg_catalog.pg_roles where rolname = 'groundkit_reader') then
        grant usage on schema groundkit to groundkit_reader;
        grant execute on function
            groundkit.search(text, text, integer, text[], text[], text, text),
            groundkit.fetch_citation(text, text, bigint, integer)
        to groundkit_reader;
        -- the text a dense leg embeds of a query (its words, without its syntax: sql/058_query.sql)
        grant execute on function groundkit.query_text(text) to groundkit_reader;
        -- the MCP and HTTP servers map a bearer token to a member and report the revision (sql/080_serve.sql)
        grant execute on function groundkit.token_member(bytea), groundkit.schema_revision() to groundkit_reader;
        -- the sampler the client runs with every search, and engagement on what it recorded
        grant execute on function
            groundkit.search_sampling(text),
            groundkit.record_sample(text, text, text, integer, jsonb),
            groundkit.record_sample_engagement(uuid, text, text, double precision)
        to groundkit_reader;
    end if;
    if exists (select 1 from pg_catalog.pg_roles where rolname = 'groundkit_writer') then
        grant usage on schema groundkit to groundkit_writer;
        grant execute on function
            groundkit.put_member(text, text, text),
            groundkit.put_space(text, text, boolean),
            groundkit.set_space_language(text, text),
            groundkit.grant_space(text, text),
            groundkit.revoke_space(text, text),
            groundkit.put_object(text, bigint, text, text, text, text, text, text, boolean, jsonb, jsonb),
            groundkit.put_objects(jsonb),
            groundkit.retier_object(text, bigint, text),
            groundkit.delete_object(text, bigint),
            groundkit.redact_object(text, bigint),
            groundkit.snapshot_marker(),
            groundkit.create_token(text, bytea, timestamp with time zone),
            groundkit.revoke_tokens(text)
        to groundkit_writer;
        -- metered calls (sql/080_costs.sql): the app's writer records; reading the spend and
        -- adding flows stay with the owner
        grant execute on function
            groundkit.record_call(text, text, text, bigint, bigint, numeric, text, uuid, text)
        to groundkit_writer;
    end if;
    -- the spend is an audit read: an auditor role, where one exists, may read it
    if exists (select 1 from pg_catalog.pg_roles where rolname = 'groundkit_auditor') then
        grant usage on schema groundkit to groundkit_auditor;
        grant execute on function groundkit.cost_summary(timestamptz, text) to groundkit_auditor;
    end if;
end
$grants$;

-- The home feed (sql/080_home.sql): home reads like search, record_engagement writes counters.
do $home$
begin
    alter function groundkit.home(text, text, integer, text[], text[])
        security definer set search_path = pg_catalog, pg_temp;
    alter function groundkit.record_engagement(text, text, text, timestamptz, bigint)
        security definer set search_path = pg_catalog, pg_temp;
    if exists (select 1 from pg_catalog.pg_roles where rolname = 'groundkit_reader') then
        grant execute on function groundkit.home(text, text, integer, text[], text[]) to groundkit_reader;
    end if;
    if exists (select 1 from pg_catalog.pg_roles where rolname = 'groundkit_writer') then
        grant execute on function groundkit.record_engagement(text, text, text, timestamptz, bigint)
            to groundkit_writer;
    end if;
end
$home$;

-- Runs (sql/085_runs.sql, docs/runs.md): a reader records, replays and diffs its own runs (the
-- functions check whose); the auditor lists, replays and diffs anyone's. prune_runs is granted
-- to nobody: the owner's alone.
do $runs$
declare
    fn text;
begin
    foreach fn in array array[
        'groundkit.run_search(uuid, integer, text, text, text, integer, text[], text[], text, text)',
        'groundkit.record_run(uuid, text, text, text, text, timestamptz, jsonb, jsonb, text)',
        'groundkit.replay_run(uuid, text)',
        'groundkit.run_header(uuid, text)',
        'groundkit.list_runs(text, text, timestamptz, integer)',
        'groundkit.diff_runs(uuid, uuid, text)'
    ] loop
        execute format('alter function %s security definer set search_path = pg_catalog, pg_temp', fn);
    end loop;
    if exists (select 1 from pg_catalog.pg_roles where rolname = 'groundkit_reader') then
        grant execute on function
            groundkit.run_search(uuid, integer, text, text, text, integer, text[], text[], text, text),
            groundkit.record_run(uuid, text, text, text, text, timestamptz, jsonb, jsonb, text),
            groundkit.replay_run(uuid, text),
            groundkit.run_header(uuid, text),
            groundkit.diff_runs(uuid, uuid, text)
        to groundkit_reader;
    end if;
    if exists (select 1 from pg_catalog.pg_roles where rolname = 'groundkit_auditor') then
        grant usage on schema groundkit to groundkit_auditor;
        grant execute on function
            groundkit.replay_run(uuid, text),
            groundkit.run_header(uuid, text),
            groundkit.list_runs(text, text, timestamptz, integer),
            groundkit.diff_runs(uuid, uuid, text)
        to groundkit_auditor;
    end if;
end
$runs$;

-- Why a member can or cannot see an object (sql/078_explain.sql): the oracle a reader must never
-- have (it says whether an object exists and what its policy is). The auditor's, and the owner's.
do $explain$
begin
    alter function groundkit.explain_visibility(text, text) security definer set search_path = pg_catalog, pg_temp;
    alter function groundkit.explain_match(text, text) security definer set search_path = pg_catalog, pg_temp;
    if exists (select 1 from pg_catalog.pg_roles where rolname = 'groundkit_auditor') then
        grant usage on schema groundkit to groundkit_auditor;
        grant execute on function groundkit.explain_visibility(text, text), groundkit.explain_match(text, text)
            to groundkit_auditor;
    end if;
end
$explain$;

-- The dense arm (sql/086_dense.sql, docs/dense.md): readers search (and read which model to embed
-- their query with, and what mode 'auto' runs: sql/085_search_modes.sql); writers register
-- models, run the embedding worker, read the lag and cut over. The owner alone builds HNSW
-- indexes (groundkit.dense.build_hnsw_indexes). The searches'
-- signatures differ with and without pgvector (087_dense_search.*.sql): found by name.
do $dense$
declare
    fn text;
begin
    foreach fn in array array[
        'groundkit.add_embedding_model(text, text, integer, text, text, jsonb)',
        'groundkit.list_embedding_models()',
        'groundkit.active_embedding_model()',
        'groundkit.embedding_lag(text)',
        'groundkit.embed_claim(text, integer)',
        'groundkit.embed_store(text, bytea[], real[])',
        'groundkit.cutover(text, boolean)',
        'groundkit.hnsw_status(text)',
        'groundkit.dense_recheck(text)',
        'groundkit.dense_merge_pending(text, integer, bigint)',
        'groundkit.auto_search_mode()',
        'groundkit.auto_search_settings(text[])'
    ] loop
        execute format('alter function %s security definer set search_path = pg_catalog, pg_temp', fn);
        if exists (select 1 from pg_catalog.pg_roles where rolname = 'groundkit_writer') then
            execute format('grant execute on function %s to groundkit_writer', fn);
        end if;
    end loop;
    for fn in
        select p.oid::regprocedure::text
          from pg_catalog.pg_proc p join pg_catalog.pg_namespace n on n.oid = p.pronamespace
         where n.nspname = 'groundkit' and p.proname in ('search_dense', 'search_hybrid')
    loop
        execute format('alter function %s security definer set search_path = pg_catalog, pg_temp', fn);
        if exists (select 1 from pg_catalog.pg_roles where rolname = 'groundkit_reader') then
            execute format('grant execute on function %s to groundkit_reader', fn);
        end if;
    end loop;
    if exists (select 1 from pg_catalog.pg_roles where rolname = 'groundkit_reader') then
        grant execute on function groundkit.active_embedding_model(), groundkit.auto_search_mode(),
            groundkit.auto_search_settings(text[])
            to groundkit_reader;
    end if;
end
$dense$;
-- Read replicas (sql/089_replicas.sql, docs/replicas.md): a reader's router reads the authority
-- position and the replica's state and flushes its route counts; the trigger function runs as
-- the owner, so that an app's own membership table may carry it.
do $replicas$
begin
    alter function groundkit.authority_changed() security definer set search_path = pg_catalog, pg_temp;
    alter function groundkit.authority_position() security definer set search_path = pg_catalog, pg_temp;
    alter function groundkit.replica_state() security definer set search_path = pg_catalog, pg_temp;
    alter function groundkit.note_routes(jsonb) security definer set search_path = pg_catalog, pg_temp;
    if exists (select 1 from pg_catalog.pg_roles where rolname = 'groundkit_reader') then
        grant execute on function
            groundkit.authority_position(),
            groundkit.replica_state(),
            groundkit.note_routes(jsonb)
        to groundkit_reader;
    end if;
    if exists (select 1 from pg_catalog.pg_roles where rolname = 'groundkit_writer') then
        grant execute on function groundkit.authority_position() to groundkit_writer;
    end if;
end
$replicas$;

-- The operator console (sql/081_console.sql, docs/console.md): its tokens are made and revoked
-- by the owner alone; the console's login (an auditor's, or the owner's) maps a token to its
-- operator, reads the embedding backlog over time and the stored quality results.
do $console$
begin
    alter function groundkit.create_console_token(text, bytea, timestamptz)
        security definer set search_path = pg_catalog, pg_temp;
    alter function groundkit.revoke_console_tokens(text) security definer set search_path = pg_catalog, pg_temp;
    alter function groundkit.console_operator(bytea) security definer set search_path = pg_catalog, pg_temp;
    alter function groundkit.embedding_backlog(text, timestamptz, interval)
        security definer set search_path = pg_catalog, pg_temp;
    if exists (select 1 from pg_catalog.pg_roles where rolname = 'groundkit_auditor') then
        grant usage on schema groundkit to groundkit_auditor;
        grant execute on function
            groundkit.console_operator(bytea),
            groundkit.embedding_backlog(text, timestamptz, interval)
        to groundkit_auditor;
        grant select on groundkit.quality_results to groundkit_auditor;
    end if;
end
$console$;

-- The outbound gate (sql/083_outbound.sql, docs/outbound.md): a reader's session reads the
-- policy, decides its own calls (objects only as that reader may see them) and records them; the
-- writer also decides the embedding job's batches (by text hash), names members for the scrubber
-- and reads their names; the auditor reads the history and the decisions. Setting the policy is
-- the owner's alone.
do $outbound$
declare
    fn text;
begin
    foreach fn in array array[
        'groundkit.outbound_policy()',
        'groundkit.outbound_policy_hash()',
        'groundkit.outbound_policy_history()',
        'groundkit.set_outbound_policy(jsonb, text)',
        'groundkit.outbound_class(text, text)',
        'groundkit.outbound_decide(text, text, text, text, text[], integer, integer)',
        'groundkit.outbound_decide_embedding(text, bytea[])',
        'groundkit.record_outbound(jsonb)',
        'groundkit.outbound_summary(timestamptz)',
        'groundkit.put_member_name(text, text)',
        'groundkit.outbound_member_names(text)',
        'groundkit.outbound_withheld()'
    ] loop
        execute format('alter function %s security definer set search_path = pg_catalog, pg_temp', fn);
    end loop;
    if exists (select 1 from pg_catalog.pg_roles where rolname = 'groundkit_reader') then
        grant execute on function
            groundkit.outbound_policy(),
            groundkit.outbound_policy_hash(),
            groundkit.outbound_class(text, text),
            groundkit.outbound_decide(text, text, text, text, text[], integer, integer),
            groundkit.record_outbound(jsonb)
        to groundkit_reader;
    end if;
    if exists (select 1 from pg_catalog.pg_roles where rolname = 'groundkit_writer') then
        grant execute on function
            groundkit.outbound_policy(),
            groundkit.outbound_policy_hash(),
            groundkit.outbound_class(text, text),
            groundkit.outbound_decide(text, text, text, text, text[], integer, integer),
            groundkit.outbound_decide_embedding(text, bytea[]),
            groundkit.record_outbound(jsonb),
            groundkit.put_member_name(text, text),
            groundkit.outbound_member_names(text),
            groundkit.outbound_withheld()
        to groundkit_writer;
    end if;
    if exists (select 1 from pg_catalog.pg_roles where rolname = 'groundkit_auditor') then
        grant execute on function
            groundkit.outbound_policy(),
            groundkit.outbound_policy_hash(),
            groundkit.outbound_policy_history(),
            groundkit.outbound_summary(timestamptz)
        to groundkit_auditor;
    end if;
end
$outbound$;

-- Governance (sql/089_governance.sql, docs/governance.md): every role may ask whether the
-- configuration serving readers is certified; the auditor reads the ledger and the audit chain.
-- Writing the ledger (record_gate) is the owner's alone; the chain is written by its trigger.
do $governance$
declare
    fn text;
begin
    foreach fn in array array[
        'groundkit.deployment_status()',
        'groundkit.deployment_configuration()',
        'groundkit.audit_head()',
        'groundkit.audit_entries(bigint, integer)',
        'groundkit.audit_unchained()',
        'groundkit.audit_rows(uuid, bigint)',
        'groundkit.gate_ledger_rows(integer)',
        -- the chain's deferred trigger: it fires at commit, where (before PostgreSQL 16) it runs as
        -- the session's role, not as the function that inserted the row
        'groundkit._audit_chain_row()'
    ] loop
        execute format('alter function %s security definer set search_path = pg_catalog, pg_temp', fn);
    end loop;
    foreach fn in array array['groundkit_reader', 'groundkit_writer', 'groundkit_auditor'] loop
        if exists (select 1 from pg_catalog.pg_roles where rolname = fn) then
            execute format('grant usage on schema groundkit to %I', fn);
            execute format('grant execute on function groundkit.deployment_status(), '
                           'groundkit.deployment_configuration() to %I', fn);
        end if;
    end loop;
    if exists (select 1 from pg_catalog.pg_roles where rolname = 'groundkit_auditor') then
        grant execute on function
            groundkit.audit_head(),
            groundkit.audit_entries(bigint, integer),
            groundkit.audit_unchained(),
            groundkit.audit_rows(uuid, bigint),
            groundkit.gate_ledger_rows(integer)
        to groundkit_auditor;
    end if;
end
$governance$;
