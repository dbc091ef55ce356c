-- Cost per flow (docs/costs.md): flows, metered calls and their spend. Replaceable.

-- The ledger is append-only: no update, delete or truncate, whoever asks.
create or replace function groundkit._calls_guard() returns trigger
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    raise exception 'groundkit.calls is append-only: % rejected', tg_op
        using errcode = 'GK006', hint = 'Metered calls are written by groundkit.record_call only.';
end
$$;

create or replace trigger calls_append_only
    before update or delete on groundkit.calls
    for each row execute function groundkit._calls_guard();

create or replace trigger calls_no_truncate
    before truncate on groundkit.calls
    for each statement execute function groundkit._calls_guard();

-- Raises GK011 unless p_flow is a configured flow. Shared by every recorder of a flow.
create or replace function groundkit._check_flow(p_flow text) returns void
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
begin
    if p_flow is null or not exists (select 1 from groundkit.flows f where f.flow = p_flow) then
        raise exception 'unknown flow %', coalesce(pg_catalog.quote_literal(p_flow), 'null')
            using errcode = 'GK011',
                  hint = 'Flows are home, tutor, authoring, conversational and those added with groundkit.add_flow.';
    end if;
end
$$;

-- Owner only: a flow, once added, stays (calls and runs reference it).
create or replace function groundkit.add_flow(p_flow text) returns boolean
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    if p_flow is null or p_flow !~ '^[a-z][a-z0-9_-]{0,62}$' then
        raise exception 'a flow is 1-63 characters of a-z, 0-9, _ and -, starting with a letter (got %)',
            coalesce(pg_catalog.quote_literal(p_flow), 'null') using errcode = 'GK005';
    end if;
    insert into groundkit.flows (flow) values (p_flow) on conflict (flow) do nothing;
    return found;
end
$$;

-- One metered call. The caller prices it (groundkit.metering, from the price table in the
-- configuration); a call without a price has a null cost and currency, never 0.
create or replace function groundkit.record_call(
    p_flow text,
    p_model text,
    p_kind text,
    p_tokens_in bigint,
    p_tokens_out bigint,
    p_cost numeric default null,
    p_currency text default null,
    p_run_id uuid default null,
    p_reader text default null
) returns bigint
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    id bigint;
begin
    perform groundkit._check_flow(p_flow);
    if p_tokens_in is null or p_tokens_out is null or p_tokens_in < 0 or p_tokens_out < 0 then
        raise exception 'tokens must be non-negative (got tokens_in %, tokens_out %)',
            coalesce(p_tokens_in::text, 'null'), coalesce(p_tokens_out::text, 'null') using errcode = 'GK005';
    end if;
    if p_kind is null or p_kind not in ('llm', 'embedding', 'rerank') then
        raise exception 'kind must be llm, embedding or rerank (got %)', coalesce(pg_catalog.quote_literal(p_kind), 'null')
            using errcode = 'GK005';
    end if;
    if p_model is null or p_model = '' or pg_catalog.length(p_model) > 256 then
        raise exception 'model must be 1-256 characters' using errcode = 'GK005';
    end if;
    if p_reader is not null and (p_reader = '' or pg_catalog.length(p_reader) > 256) then
        raise exception 'reader must be 1-256 characters or null' using errcode = 'GK005';
    end if;
    if p_cost < 0 then
        raise exception 'cost must be non-negative (got %)', p_cost using errcode = 'GK005';
    end if;
    if (p_cost is null) <> (p_currency is null) or p_currency !~ '^[A-Z]{3}$' then
        raise exception 'a cost needs a currency (three capital letters) and a currency a cost (got %, %)',
            coalesce(p_cost::text, 'null'), coalesce(pg_catalog.quote_literal(p_currency), 'null')
            using errcode = 'GK005';
    end if;
    insert into groundkit.calls (run_id, flow, reader, model, kind, tokens_in, tokens_out, cost, currency)
    values (p_run_id, p_flow, p_reader, p_model, p_kind, p_tokens_in, p_tokens_out, p_cost, p_currency)
    returning call_id into id;
    return id;
end
$$;

-- The spend since p_since (all time when null), one row per key of p_by and currency. Calls
-- without a price form the key's row with a null currency and cost, counted in `unpriced`.
create or replace function groundkit.cost_summary(p_since timestamptz default null, p_by text default 'flow')
returns table (key text, currency text, calls bigint, tokens_in numeric, tokens_out numeric,
               cost numeric, unpriced bigint)
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
declare
    -- the grouping key, and how it is shown: fixed fragments, chosen by p_by from this list only
    group_key constant text := case p_by when 'flow' then 'c.flow' when 'model' then 'c.model'
                                         when 'reader' then 'c.reader'
                                         -- UTC days by arithmetic: no time zone lookup per row
                                         when 'day' then 'pg_catalog.date_bin(''1 day'', c.at, ''2000-01-01 00:00:00+00'')' end;
    shown constant text := case p_by when 'day' then 'pg_catalog.to_char(s.k at time zone ''UTC'', ''YYYY-MM-DD'')'
                                     else 's.k' end;
begin
    if group_key is null then
        raise exception 'by must be flow, model, reader or day (got %)',
            coalesce(pg_catalog.quote_literal(p_by), 'null') using errcode = 'GK005';
    end if;
    -- EXECUTE plans with the actual p_since each time: a cached generic plan would not know
    -- whether the range is a week (the calls_at index) or all time (a sequential scan). Days are
    -- grouped as timestamps and formatted once per group, not once per call.
    return query execute pg_catalog.format($q$
    select %s, s.currency, s.calls, s.tokens_in, s.tokens_out, s.cost, s.unpriced
      from (select %s as k, c.currency,
                   pg_catalog.count(*) as calls,
                   pg_catalog.sum(c.tokens_in) as tokens_in,
                   pg_catalog.sum(c.tokens_out) as tokens_out,
                   pg_catalog.sum(c.cost) as cost,
                   pg_catalog.count(*) filter (where c.cost is null) as unpriced
              from groundkit.calls c
             where c.at >= $1
             group by 1, 2) s
     order by s.k nulls last, s.currency nulls last
    $q$, shown, group_key) using coalesce(p_since, '-infinity'::timestamptz);
end
$$;
