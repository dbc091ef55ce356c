-- Home v1: the newest objects a reader may see, and "top this week" by engagement. Replaceable.
--
-- Both modes apply the one permission predicate, groundkit._visible_object (sql/059_visible.sql),
-- inside their own query, to the reader as groundkit._reader resolves it at that statement: a
-- downgrade, a board made private or a delete removes an object from the next call on.
-- Engagement is counted per object and UTC day (groundkit.engagement_daily, revision 0013).

-- What one day's counts of an object weigh in "top": a view 1, a click 2, a reaction 3, a minute
-- of dwell 1 (record_engagement counts at most ten minutes of dwell per event). Inlined.
create or replace function groundkit._engagement_score(
    views bigint, clicks bigint, reactions bigint, dwell_ms bigint)
returns double precision
language sql immutable parallel safe
as $$
    select (views + 2 * clicks + 3 * reactions)::double precision + dwell_ms / 60000.0::double precision
$$;

-- The argument checks of groundkit.home.
create or replace function groundkit._home_check(mode text, k integer, content_types text[])
returns void
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
declare
    bad text;
begin
    if mode is null or mode not in ('latest', 'top') then
        raise exception 'unknown home mode %; expected latest or top', coalesce(quote_literal(mode), 'NULL')
            using errcode = 'GK005';
    end if;
    if k is null or k < 1 or k > 200 then
        raise exception 'k must be between 1 and 200 (got %)', coalesce(k::text, 'NULL')
            using errcode = 'GK005';
    end if;
    if content_types is not null then
        select x into bad from unnest(content_types) x
         where x is null or not exists (select 1 from groundkit.content_types t where t.name = x)
         limit 1;
        if found then
            raise exception 'unknown content_type % in content_types', coalesce(quote_literal(bad), 'NULL')
                using errcode = 'GK004';
        end if;
    end if;
end
$$;

-- The newest k objects the reader may see, newest first (by the log position of their current
-- version), leaving out the objects with engagement since p_skip_since (null: none left out; the
-- filler of "top"). Without space_ids one walk of the live objects newest first, the predicate
-- checked per object until k pass; with space_ids one such walk per space, merged.
create or replace function groundkit._home_latest(
    p_rank integer, p_member text, p_content_types text[], p_space_ids text[], p_k integer,
    p_skip_since date)
returns table (object_id text, version bigint, content_type text, space_id text, title text,
               metadata jsonb, updated_at timestamptz, score double precision)
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
begin
    if p_space_ids is null then
        return query
        select v.object_id, v.version, v.content_type, v.space_id, v.title, v.metadata, l.logged_at,
               case when p_skip_since is null then null else 0::double precision end
          from groundkit.objects o
         cross join lateral groundkit._visible_object(o.object_id, p_rank, p_member, p_content_types, null) v
          join groundkit.content_log l on l.seq = v.log_seq
         where o.state = 'live'
           and (p_skip_since is null or not groundkit._engaged_since(o.object_id, p_skip_since))
         order by o.log_seq desc
         limit p_k;
    else
        return query
        select x.object_id, x.version, x.content_type, x.space_id, x.title, x.metadata, l.logged_at,
               case when p_skip_since is null then null else 0::double precision end
          from (select distinct s.id from unnest(p_space_ids) s(id) where s.id is not null) sp
         cross join lateral (
                select v.* from groundkit.objects o
                 cross join lateral groundkit._visible_object(o.object_id, p_rank, p_member,
                                                              p_content_types, p_space_ids) v
                 where o.state = 'live' and o.space_id = sp.id
                   and (p_skip_since is null or not groundkit._engaged_since(o.object_id, p_skip_since))
                 order by o.log_seq desc
                 limit p_k) x
          join groundkit.content_log l on l.seq = x.log_seq
         order by x.log_seq desc
         limit p_k;
    end if;
end
$$;

-- Whether the object has a positive engagement score since p_since. Inlined.
create or replace function groundkit._engaged_since(p_object_id text, p_since date)
returns boolean
language sql stable
as $$
    select exists (select 1 from groundkit.engagement_daily e
                    where e.object_id = p_object_id and e.day >= p_since
                      and groundkit._engagement_score(e.views, e.clicks, e.reactions, e.dwell_ms) > 0)
$$;

-- "Top this week": the k visible objects with the highest engagement score over the window (the
-- last config.home_top_days UTC days, today included), ties by recency. Every object's score is
-- summed over the window, then the predicate is checked best first until k pass (their lowest
-- score is the threshold), then the visible objects at or above it are put in the final order.
create or replace function groundkit._home_top(
    p_rank integer, p_member text, p_content_types text[], p_space_ids text[], p_k integer,
    p_since date)
returns table (object_id text, version bigint, content_type text, space_id text, title text,
               metadata jsonb, updated_at timestamptz, score double precision)
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    with scored as materialized (
        select e.object_id, sum(groundkit._engagement_score(e.views, e.clicks, e.reactions, e.dwell_ms)) as score
          from groundkit.engagement_daily e
         where e.day >= p_since
         group by e.object_id
    ),
    top as (
        select s.score
          from (select sc.object_id, sc.score from scored sc where sc.score > 0 order by sc.score desc offset 0) s
         where exists (select 1 from groundkit._visible_object(s.object_id, p_rank, p_member,
                                                               p_content_types, p_space_ids))
         limit p_k
    ),
    theta as materialized (
        select case when count(*) < p_k then 0 else min(t.score) end as t from top t
    )
    select v.object_id, v.version, v.content_type, v.space_id, v.title, v.metadata, l.logged_at, s.score
      from scored s
     cross join theta
     cross join lateral groundkit._visible_object(s.object_id, p_rank, p_member, p_content_types, p_space_ids) v
      join groundkit.content_log l on l.seq = v.log_seq
     where s.score > 0 and s.score >= theta.t
     order by s.score desc, v.log_seq desc
     limit p_k
$$;

-- The home feed of a reader: 'latest' (the newest visible objects, one row per object, its
-- current version) or 'top' (by engagement over the window, ties by recency; when fewer than k
-- visible objects have any, the newest others follow with score 0). updated_at is when the
-- current version was written; score is null for 'latest'. A reader who is not exactly one
-- active member gets no rows.
create or replace function groundkit.home(
    reader_sub text,
    mode text default 'latest',
    k integer default 20,
    space_ids text[] default null,
    content_types text[] default null)
returns table (object_id text, version bigint, content_type text, space_id text, title text,
               metadata jsonb, updated_at timestamptz, score double precision)
language plpgsql stable
rows 20
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    v_member text;
    v_rank integer;
    v_since date;
    n integer;
begin
    perform groundkit._home_check(home.mode, home.k, home.content_types);
    select r.member_sub, r.rank into v_member, v_rank from groundkit._reader(home.reader_sub) r;
    if not found then
        return;
    end if;
    if home.mode = 'latest' then
        return query select * from groundkit._home_latest(v_rank, v_member, home.content_types,
                                                          home.space_ids, home.k, null);
        return;
    end if;
    select (now() at time zone 'UTC')::date - c.home_top_days + 1 into v_since from groundkit.config c;
    return query select * from groundkit._home_top(v_rank, v_member, home.content_types,
                                                   home.space_ids, home.k, v_since);
    get diagnostics n = row_count;
    if n < home.k then
        return query select * from groundkit._home_latest(v_rank, v_member, home.content_types,
                                                          home.space_ids, home.k - n, v_since);
    end if;
end
$$;

-- One engagement event of a member with an object: kind 'view', 'click', 'reaction' (value
-- null) or 'dwell_ms' (value: the milliseconds, at most a day; ten minutes at most count). at is
-- when it happened (not more than five minutes ahead of the server's clock). An object the member
-- may not see right now, or that is not live, or a member who is not exactly one active member,
-- raises GK009 exactly as an object that never existed does, and counts nothing.
create or replace function groundkit.record_engagement(
    object_id text,
    member_sub text,
    kind text,
    at timestamptz default now(),
    value bigint default null)
returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    v_day date;
begin
    perform groundkit._check_id('object_id', record_engagement.object_id);
    if kind is null or kind not in ('view', 'click', 'reaction', 'dwell_ms') then
        raise exception 'unknown engagement kind %; expected view, click, reaction or dwell_ms',
            coalesce(quote_literal(kind), 'NULL') using errcode = 'GK005';
    end if;
    if kind = 'dwell_ms' and (value is null or value < 0 or value > 86400000) then
        raise exception 'a dwell_ms event needs a value between 0 and 86400000 (got %)',
            coalesce(value::text, 'NULL') using errcode = 'GK005';
    end if;
    if kind <> 'dwell_ms' and value is not null then
        raise exception 'only a dwell_ms event takes a value' using errcode = 'GK005';
    end if;
    if record_engagement.at is null or record_engagement.at > now() + interval '5 minutes' then
        raise exception 'at must be a time no later than now (got %)', coalesce(record_engagement.at::text, 'NULL')
            using errcode = 'GK005';
    end if;
    if not exists (select 1 from groundkit._reader(record_engagement.member_sub) r
                    cross join lateral groundkit._visible_object(record_engagement.object_id, r.rank,
                                                                 r.member_sub, null, null) v) then
        raise exception 'unknown object %', quote_literal(record_engagement.object_id)
            using errcode = 'GK009';
    end if;
    v_day := (record_engagement.at at time zone 'UTC')::date;
    insert into groundkit.engagement_daily as e (object_id, day, views, clicks, reactions, dwell_ms)
    values (record_engagement.object_id, v_day,
            (kind = 'view')::integer, (kind = 'click')::integer, (kind = 'reaction')::integer,
            case when kind = 'dwell_ms' then least(value, 600000) else 0 end)
    on conflict on constraint engagement_daily_pkey do update
        set views = e.views + excluded.views, clicks = e.clicks + excluded.clicks,
            reactions = e.reactions + excluded.reactions, dwell_ms = e.dwell_ms + excluded.dwell_ms;
end
$$;
