-- Home v1: the newest objects a reader may see, and "top this week" by engagement. Replaceable.
--
-- Both modes apply the one permission predicate, groundkit._visible_object (sql/059_visible.sql),
-- inside their own query, to the reader as groundkit._reader resolves it at that statement: a
-- downgrade, a board made private or a delete removes an object from the next call on.
--
-- Engagement (revision 0017) is counted per object and UTC day (engagement_daily), and each
-- object's score over the window of "top" is kept apart (engagement_window, with the first day it
-- counts from in engagement_window_since): "top" walks it best first and stops after k visible
-- objects, whatever the number of objects engaged with. record_engagement keeps it, and moves the
-- window when the day or config.home_top_days changed; until it does, "top" sums the window's
-- days itself (slower, as exact).

-- What one event scores: a view 1, a click 2, a reaction 3, 30 s of dwell 1 (ten minutes at most
-- count). Integers, so that the window's sums stay exact when days leave it.
create or replace function groundkit._event_score(kind text, value bigint)
returns bigint
language sql immutable parallel safe
as $$
    select case kind when 'view' then 1 when 'click' then 2 when 'reaction' then 3
                     else least(value, 600000) / 30000 end
$$;

-- The first day of the window of "top" today: the last config.home_top_days UTC days.
create or replace function groundkit._home_since()
returns date
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select (now() at time zone 'UTC')::date - c.home_top_days + 1 from groundkit.config c
$$;

-- The argument checks of groundkit.home.
create or replace function groundkit._home_check(mode text, k integer, content_types text[])
returns void
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
begin
    if mode is null or mode not in ('latest', 'top') then
        raise exception 'unknown home mode %; expected latest or top', coalesce(quote_literal(mode), 'NULL')
            using errcode = 'GK005';
    end if;
    perform groundkit._check_page(k, content_types);
end
$$;

-- The newest k objects the reader may see, newest first (by the log position of their current
-- version), leaving out the objects that scored since p_skip_since (null: none left out; the
-- filler of "top"). Without filters one walk of the live objects newest first, the predicate
-- checked per object until k pass. With filters one such walk per space the reader may see at
-- all (and asked for), or per such space and content type, merged: a reader who may see none of
-- a type does not walk every object of it. The log's rows (for the time) are read for the k
-- objects only, after the limit: joined inside it, the planner hashed the whole log.
create or replace function groundkit._home_latest(
    p_rank integer, p_member text, p_content_types text[], p_space_ids text[], p_k integer,
    p_skip_since date)
returns table (object_id text, version bigint, content_type text, space_id text, title text,
               metadata jsonb, updated_at timestamptz, score double precision)
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    ids text[];
    seqs bigint[];
begin
    if p_space_ids is null and p_content_types is null then
        select array_agg(x.object_id order by x.log_seq desc), array_agg(x.log_seq order by x.log_seq desc)
          into ids, seqs
          from (select o.object_id, o.log_seq from groundkit.objects o
                 where o.state = 'live'
                   and exists (select 1 from groundkit._visible_object(o.object_id, p_rank, p_member, null, null))
                   and (p_skip_since is null or not groundkit._engaged_since(o.object_id, p_skip_since))
                 order by o.log_seq desc
                 limit p_k) x;
    elsif p_content_types is null then
        select array_agg(y.object_id order by y.log_seq desc), array_agg(y.log_seq order by y.log_seq desc)
          into ids, seqs
          from (select x.object_id, x.log_seq
                  from groundkit._visible_space(p_rank, p_member) vs
                 cross join lateral (
                        select o.object_id, o.log_seq from groundkit.objects o
                         where o.state = 'live' and o.space_id = vs.space_id
                           and exists (select 1 from groundkit._visible_object(o.object_id, p_rank, p_member,
                                                                               null, p_space_ids))
                           and (p_skip_since is null or not groundkit._engaged_since(o.object_id, p_skip_since))
                         order by o.log_seq desc
                         limit p_k) x
                 where p_space_ids is null or vs.space_id = any (p_space_ids)
                 order by x.log_seq desc
                 limit p_k) y;
    else
        select array_agg(y.object_id order by y.log_seq desc), array_agg(y.log_seq order by y.log_seq desc)
          into ids, seqs
          from (select x.object_id, x.log_seq
                  from groundkit._visible_space(p_rank, p_member) vs
                 cross join (select distinct t.name from unnest(p_content_types) t(name)) ct
                 cross join lateral (
                        select o.object_id, o.log_seq from groundkit.objects o
                         where o.state = 'live' and o.content_type = ct.name and o.space_id = vs.space_id
                           and exists (select 1 from groundkit._visible_object(o.object_id, p_rank, p_member,
                                                                               p_content_types, p_space_ids))
                           and (p_skip_since is null or not groundkit._engaged_since(o.object_id, p_skip_since))
                         order by o.log_seq desc
                         limit p_k) x
                 where p_space_ids is null or vs.space_id = any (p_space_ids)
                 order by x.log_seq desc
                 limit p_k) y;
    end if;
    return query
    select o.object_id, o.version, o.content_type, o.space_id, o.title, o.metadata, l.logged_at,
           case when p_skip_since is null then null else 0::double precision end
      from unnest(ids, seqs) with ordinality as u(object_id, log_seq, n)
      join groundkit.objects o on o.object_id = u.object_id
      join groundkit.content_log l on l.seq = u.log_seq
     order by u.n;
end
$$;

-- Whether the object scored since p_since. Inlined.
create or replace function groundkit._engaged_since(p_object_id text, p_since date)
returns boolean
language sql stable
as $$
    select exists (select 1 from groundkit.engagement_daily e
                    where e.object_id = p_object_id and e.day >= p_since
                      and e.score > 0)
$$;

-- "Top this week": the k visible objects with the highest score over the window, ties by
-- recency. engagement_window read by its index best first, the predicate joined per object, an
-- incremental sort by recency within equal scores: it stops once k visible objects are out (the
-- log's rows read for those k only, as in _home_latest).
create or replace function groundkit._home_top(
    p_rank integer, p_member text, p_content_types text[], p_space_ids text[], p_k integer)
returns table (object_id text, version bigint, content_type text, space_id text, title text,
               metadata jsonb, updated_at timestamptz, score double precision)
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select x.object_id, x.version, x.content_type, x.space_id, x.title, x.metadata, l.logged_at,
           x.score::double precision
      from (select v.*, w.score
              from groundkit.engagement_window w
             cross join lateral groundkit._visible_object(w.object_id, p_rank, p_member,
                                                          p_content_types, p_space_ids) v
             where w.score > 0
             order by w.score desc, v.log_seq desc
             limit p_k) x
      join groundkit.content_log l on l.seq = x.log_seq
     order by x.score desc, x.log_seq desc
$$;

-- "Top this week" under filters, first try: engagement_window's best p_cap rows walked as
-- _home_top walks them, stopping after k visible ones. groundkit.home takes this answer when it
-- is exact (the k-th score is above every score past the walked rows, or the window has no more
-- rows) and asks _home_top otherwise, whose plan the planner picks: for a filter that keeps few
-- engaged objects, the objects under the filter, each looked up in the window. Either alone was
-- 50-120 ms at 1M chunks for some reader and filter.
create or replace function groundkit._home_top_walk(
    p_rank integer, p_member text, p_content_types text[], p_space_ids text[], p_k integer, p_cap integer)
returns table (object_id text, score bigint, log_seq bigint)
language sql stable
set search_path = pg_catalog, pg_temp
-- in window order, stopping at k (an incremental sort by recency within a score): the planner
-- sorted all p_cap rows instead, 30 ms at 1M chunks where the first hundred held the answer
set enable_sort = off
as $$
    select w.object_id, w.score, v.log_seq
      from (select w.object_id, w.score from groundkit.engagement_window w
             where w.score > 0 order by w.score desc, w.object_id limit p_cap) w
     cross join lateral groundkit._visible_object(w.object_id, p_rank, p_member, p_content_types, p_space_ids) v
     order by w.score desc, v.log_seq desc
     limit p_k
$$;

-- "Top this week" summed from the days since p_since, when engagement_window is not at that window
-- yet: every object's score is summed, then the predicate is checked best first until k pass
-- (their lowest score is the threshold), then the visible objects at or above it are put in the
-- final order.
create or replace function groundkit._home_top_summed(
    p_rank integer, p_member text, p_content_types text[], p_space_ids text[], p_k integer,
    p_since date)
returns table (object_id text, version bigint, content_type text, space_id text, title text,
               metadata jsonb, updated_at timestamptz, score double precision)
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    with scored as materialized (
        select e.object_id, sum(e.score) as score
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
    select x.object_id, x.version, x.content_type, x.space_id, x.title, x.metadata, l.logged_at,
           x.score::double precision
      from (select v.*, s.score
              from scored s
             cross join theta
             cross join lateral groundkit._visible_object(s.object_id, p_rank, p_member, p_content_types, p_space_ids) v
             where s.score > 0 and s.score >= theta.t
             order by s.score desc, v.log_seq desc
             limit p_k) x
      join groundkit.content_log l on l.seq = x.log_seq
     order by x.score desc, x.log_seq desc
$$;

-- Whether any live object lies in the spaces the reader may see at all (and asked for), of the
-- content types asked for: one probe per such space. When none does, "top" has nothing to walk
-- engagement_window for (a reader filtering to a type or board they can see nothing of would
-- otherwise walk all of it).
create or replace function groundkit._home_any(
    p_rank integer, p_member text, p_content_types text[], p_space_ids text[])
returns boolean
language sql stable
set search_path = pg_catalog, pg_temp
-- the content types as an index condition: a generic plan cannot make one of `is null or = any`,
-- and scanned each space's whole index range instead (1 ms a space at 1M chunks)
set plan_cache_mode = force_custom_plan
as $$
    select exists (
        select 1 from groundkit._visible_space(p_rank, p_member) vs
         where (p_space_ids is null or vs.space_id = any (p_space_ids))
           and exists (select 1 from groundkit.objects o
                        where o.state = 'live' and o.space_id = vs.space_id
                          and (p_content_types is null or o.content_type = any (p_content_types))))
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
    w_ids text[];
    w_scores bigint[];
    w_past bigint;
    -- how many window rows the filtered walk reads (a setting for tests)
    v_cap integer := coalesce(nullif(current_setting('groundkit.home_walk_cap', true), '')::integer, 4000);
begin
    perform groundkit._reader_allowed(home.reader_sub);  -- GK010 for a bound login's other readers
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
    if (home.space_ids is not null or home.content_types is not null)
       and not groundkit._home_any(v_rank, v_member, home.content_types, home.space_ids) then
        return;
    end if;
    v_since := groundkit._home_since();
    if (select s.since from groundkit.engagement_window_since s) = v_since then
        if home.space_ids is not null or home.content_types is not null then
            select array_agg(t.object_id order by t.score desc, t.log_seq desc),
                   array_agg(t.score order by t.score desc, t.log_seq desc)
              into w_ids, w_scores
              from groundkit._home_top_walk(v_rank, v_member, home.content_types, home.space_ids,
                                            home.k, v_cap) t;
            select w.score into w_past from groundkit.engagement_window w
             where w.score > 0 order by w.score desc, w.object_id offset v_cap limit 1;
        end if;
        if w_ids is not null and (w_past is null or (cardinality(w_ids) = home.k and w_scores[home.k] > w_past)) then
            return query
            select o.object_id, o.version, o.content_type, o.space_id, o.title, o.metadata, l.logged_at,
                   u.score::double precision
              from unnest(w_ids, w_scores) with ordinality as u(object_id, score, n)
              join groundkit.objects o on o.object_id = u.object_id
              join groundkit.content_log l on l.seq = o.log_seq
             order by u.n;
        elsif w_ids is null and w_past is null and (home.space_ids is not null or home.content_types is not null) then
            null;  -- the whole window walked: nothing scored under the filter
        else
            return query select * from groundkit._home_top(v_rank, v_member, home.content_types,
                                                           home.space_ids, home.k);
        end if;
    else
        return query select * from groundkit._home_top_summed(v_rank, v_member, home.content_types,
                                                              home.space_ids, home.k, v_since);
    end if;
    get diagnostics n = row_count;
    if n < home.k then
        return query select * from groundkit._home_latest(v_rank, v_member, home.content_types,
                                                          home.space_ids, home.k - n, v_since);
    end if;
end
$$;

-- Move engagement_window to the window that starts at p_since: the days that left it are taken
-- off, the days that joined it (a longer config.home_top_days) added. The caller holds the
-- engagement lock exclusively, so no event is being counted meanwhile.
create or replace function groundkit._engagement_move_window(p_since date)
returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    old date;
begin
    select s.since into old from groundkit.engagement_window_since s for update;
    if old = p_since then
        return;
    elsif old < p_since then
        update groundkit.engagement_window w set score = w.score - d.score
          from (select e.object_id, sum(e.score) as score from groundkit.engagement_daily e
                 where e.day >= old and e.day < p_since group by e.object_id) d
         where w.object_id = d.object_id;
        delete from groundkit.engagement_window w where w.score = 0;
    else
        insert into groundkit.engagement_window as w (object_id, score)
        select e.object_id, sum(e.score) from groundkit.engagement_daily e
         where e.day >= p_since and e.day < old group by e.object_id having sum(e.score) > 0
        on conflict on constraint engagement_window_pkey do update set score = w.score + excluded.score;
    end if;
    update groundkit.engagement_window_since set since = p_since;
end
$$;

-- One engagement event of a member with an object: kind 'view', 'click', 'reaction' (value
-- null) or 'dwell_ms' (value: the milliseconds, at most a day). at is when it happened (not more
-- than five minutes ahead of the server's clock). An object the member may not see right now, or
-- that is not live, or a member who is not exactly one active member, raises GK009 exactly as an
-- object that never existed does, and counts nothing.
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
    v_score bigint;
    v_since date;
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
    v_score := groundkit._event_score(kind, value);

    -- The window moves at the first event of a day (or after home_top_days changed): exclusively,
    -- so that it sees every event counted before it and none is counted while it runs.
    v_since := groundkit._home_since();
    -- The lock is groundkit.locks' row 'engagement', which only the owner may lock (sql/010_guards.sql
    -- says why no advisory key): writers of engagement hold it shared, the move exclusively.
    if (select s.since from groundkit.engagement_window_since s) <> v_since then
        perform 1 from groundkit.locks l where l.name = 'engagement' for update;
        perform groundkit._engagement_move_window(v_since);
    else
        perform 1 from groundkit.locks l where l.name = 'engagement' for key share;
    end if;

    insert into groundkit.engagement_daily as e (object_id, day, views, clicks, reactions, dwell_ms, score)
    values (record_engagement.object_id, v_day,
            (kind = 'view')::integer, (kind = 'click')::integer, (kind = 'reaction')::integer,
            case when kind = 'dwell_ms' then value else 0 end, v_score)
    on conflict on constraint engagement_daily_pkey do update
        set views = e.views + excluded.views, clicks = e.clicks + excluded.clicks,
            reactions = e.reactions + excluded.reactions, dwell_ms = e.dwell_ms + excluded.dwell_ms,
            score = e.score + excluded.score;
    -- (since is read again: under the lock, no one moves it before this transaction ends)
    if v_score > 0 and v_day >= (select s.since from groundkit.engagement_window_since s) then
        insert into groundkit.engagement_window as w (object_id, score)
        values (record_engagement.object_id, v_score)
        on conflict on constraint engagement_window_pkey do update set score = w.score + excluded.score;
    end if;
end
$$;
