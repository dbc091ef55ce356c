-- Planning statistics: sketches of the long postings lists, term bits, and the growth since
-- they were made (analyze_postings, postings_growth), and term_stats compaction. Replaceable.

-- Sketch every long list of shared content (docs/bm25.md, "Sketches"): for each (term, tier
-- rank) list of at least v_min postings, the impacts at ranks least(floor(256 * 2^((i - 1) / 4)),
-- n), i = 1, 2, ... up to the list's length n, and those ranks. Replaces every sketch in one
-- transaction (searches see the old ones until it commits; writers are not blocked). Returns
-- the number of lists sketched; progress goes out as DEBUG messages 'groundkit.analyze_postings:
-- <done> of <total> lists'. Planner statistics only: search answers are the same with any
-- sketches or none. (set_tier_rank and reindex_impacts call this alone: they change impacts and
-- buckets, not which chunks hold which terms.)
create or replace function groundkit._analyze_sketches(v_min integer)
returns bigint
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    l_terms text[];
    l_scopes integer[];
    i integer;
    imps real[];
    ranks bigint[];
begin
    if v_min is null or v_min < 1 then
        raise exception 'min_postings must be a positive integer (got %)', coalesce(v_min::text, 'NULL')
            using errcode = 'GK005';
    end if;
    -- one analyze at a time (this lock conflicts with itself, not with searches' reads)
    lock table groundkit.postings_sketch in share row exclusive mode;
    delete from groundkit.postings_sketch;
    -- The lists: shared content's document frequencies per tier rank are its lists' lengths.
    select coalesce(array_agg(x.term order by x.term, x.scope), '{}'),
           coalesce(array_agg(x.scope order by x.term, x.scope), '{}')
      into l_terms, l_scopes
      from (select ts.term, ts.scope from groundkit.term_stats ts group by ts.term, ts.scope
             having sum(ts.df) >= v_min) x;
    for i in 1 .. cardinality(l_terms) loop
        imps := array(select p.imp from groundkit.postings p
                       where p.term = l_terms[i] and p.vis_key = l_scopes[i]
                       order by p.imp desc);
        if cardinality(imps) > 0 then
            -- ranks 256 * 2^((j - 1) / 4), up to the first at or past the list's end (then n)
            ranks := array(select least(floor(256 * 2 ^ ((j - 1) / 4.0))::bigint, cardinality(imps))
                             from generate_series(1, 200) as j
                            where j = 1 or floor(256 * 2 ^ ((j - 2) / 4.0)) < cardinality(imps)
                            order by j);
            insert into groundkit.postings_sketch (term, vis_key, n, ranks, imps)
            select l_terms[i], l_scopes[i], cardinality(imps), ranks,
                   array(select imps[u.r] from unnest(ranks) with ordinality as u(r, o) order by u.o);
        end if;
        raise debug 'groundkit.analyze_postings: % of % lists', i, cardinality(l_terms);
    end loop;
    return (select count(*) from groundkit.postings_sketch);
end
$$;

-- Term bits (docs/bm25.md, "Term bits"): for every term whose shared lists hold at least
-- greatest(v_min, w_max / 256) postings (a bitmap is then at most 32 bytes a posting), one bit per
-- chunk id up to w_max, set when the chunk holds the term. Search skips the lookups of the
-- chunks whose bit is clear, so the bits must never miss a chunk up to w_max. That holds because
-- chunk ids only grow (an identity without a cache, checked here) and a chunk's terms never
-- change (a new version gets new chunks; deletes leave a bit set for nothing, which costs only a
-- lookup). What needs care is a chunk id at or below w_max whose writer has not committed when
-- the bits are read. So w_max is the largest chunk id visible first; then this waits for every
-- transaction that holds a lock on chunks at that moment (any writer of a chunk id at or below
-- w_max is one of them: it allocated its id before w_max's), as CREATE INDEX CONCURRENTLY does,
-- without blocking anyone; then, in a new snapshot (READ COMMITTED), every chunk up to w_max is
-- settled and the bits are read. Replaces every term's bits. Returns how many terms have bits;
-- progress: DEBUG messages 'groundkit.analyze_postings: <done> of <total> terms'. Under another
-- isolation level the snapshot would not move: GK005. p_settled: the caller holds chunks against
-- every other writer (rebuild: it truncated them), so there is nothing to wait for.
create or replace function groundkit._analyze_term_bits(v_min integer, p_settled boolean default false)
returns bigint
language plpgsql
set search_path = pg_catalog, pg_temp
-- one index range of the pending part per term, whatever size the table had at planning
set enable_seqscan = off
as $$
declare
    w bigint;
    holders text[];
    b_terms text[];
    i integer;
    waited integer := 0;
    started timestamptz := pg_catalog.clock_timestamp();
    in_flight boolean;
    cycle boolean;
begin
    if not p_settled and current_setting('transaction_isolation') <> 'read committed' then
        raise exception 'term bits are made under READ COMMITTED only (this transaction is %)',
            current_setting('transaction_isolation') using errcode = 'GK005';
    end if;
    if (select s.cache_size from pg_catalog.pg_sequences s
         where format('%I.%I', s.schemaname, s.sequencename)::regclass
               = pg_catalog.pg_get_serial_sequence('groundkit.chunks', 'chunk_id')::regclass) <> 1 then
        raise exception 'the chunk id sequence caches values: chunk ids would not grow in commit order'
            using errcode = 'GK005';
    end if;
    w := (select max(c.chunk_id) from groundkit.chunks c);
    holders := array(select l.virtualtransaction from pg_catalog.pg_locks l
                      where not p_settled
                        and l.locktype = 'relation' and l.relation = 'groundkit.chunks'::regclass
                        and l.database = (select d.oid from pg_catalog.pg_database d where d.datname = current_database())
                        and l.pid is distinct from pg_catalog.pg_backend_pid());
    -- A wait like a lock's, and ended like one: by lock_timeout when it is set, and by a
    -- deadlock (a writer waited for that waits for this transaction, say its own
    -- analyze_postings() queued behind this one's sketch lock). One look at pg_locks a turn.
    loop
        select count(*) > 0,
               coalesce(bool_or(pg_catalog.pg_backend_pid() = any (pg_catalog.pg_blocking_pids(l.pid))), false)
          into in_flight, cycle
          from pg_catalog.pg_locks l
         where l.locktype = 'relation' and l.relation = 'groundkit.chunks'::regclass
           and l.virtualtransaction = any (holders);
        exit when not in_flight;
        if cycle then
            raise exception 'term bits: a writer of chunks this waits for is waiting for this transaction'
                using errcode = 'deadlock_detected';
        end if;
        if current_setting('lock_timeout')::interval > interval '0'
           and pg_catalog.clock_timestamp() - started > current_setting('lock_timeout')::interval then
            raise exception 'term bits: writers of chunks still in flight after lock_timeout (%)',
                current_setting('lock_timeout') using errcode = 'lock_not_available';
        end if;
        perform pg_catalog.pg_sleep(0.01);
        waited := waited + 1;
    end loop;
    raise debug 'groundkit.analyze_postings: term bits up to chunk %, after waiting % times for % writer(s)',
        w, waited, cardinality(holders);
    delete from groundkit.term_bits;
    -- what this analyze saw, for postings_growth()
    insert into groundkit.postings_analyzed as a (through_chunk_id, chunks, analyzed_at)
    values (coalesce(w, 0), (select count(*) from groundkit.chunks c where c.chunk_id <= w), pg_catalog.now())
    on conflict (one) do update set through_chunk_id = excluded.through_chunk_id, chunks = excluded.chunks,
                                    analyzed_at = excluded.analyzed_at;
    if w is null then
        return 0;
    end if;
    -- (the shared postings of a term: counted in term_stats, and in the pending part)
    b_terms := array(select x.term
                       from (select ts.term, ts.df from groundkit.term_stats ts
                             union all
                             select pp.term, 1 from groundkit.pending_postings pp where pp.stat_scope is not null) x
                      group by x.term
                     having sum(x.df) >= greatest(v_min, w / 256) order by x.term);
    for i in 1 .. cardinality(b_terms) loop
        -- (words: bit c % 64 of words[c / 64 + 1]; bits: get_bit(bits, c), the same bits byte by
        -- byte, each word's eight bytes written most significant first by int8send)
        insert into groundkit.term_bits (term, w_max, words, bits)
        select b_terms[i], w, array_agg(coalesce(x.bits, 0) order by g.word),
               string_agg(int8send(coalesce(x.bytes, 0)), ''::bytea order by g.word)
          from generate_series(0, w >> 6) as g(word)
          left join (select p.chunk_id >> 6 as word, bit_or(1::bigint << (p.chunk_id & 63)::integer) as bits,
                            bit_or(1::bigint << (8 * (7 - ((p.chunk_id & 63) >> 3)) + (p.chunk_id & 7))::integer)
                                as bytes
                       from (select p.chunk_id from groundkit.postings p
                              where p.term = b_terms[i] and p.chunk_id <= w
                             union all
                             -- chunks still pending: merged later, they must not be missed then
                             select p.chunk_id from groundkit.pending_postings p
                              where p.term = b_terms[i] and p.chunk_id <= w) p
                      group by 1) x on x.word = g.word;
        raise debug 'groundkit.analyze_postings: % of % terms', i, cardinality(b_terms);
    end loop;
    return cardinality(b_terms);
end
$$;

-- Planning statistics of the postings, made again (like ANALYZE): the sketches of the long lists
-- (groundkit._analyze_sketches) and the term bits of the long lists' terms
-- (groundkit._analyze_term_bits). min_postings: lists at least this long (default:
-- groundkit.config.sketch_min_postings). Searches and writers go on while it runs; it waits
-- for the writes in flight when its term bits begin. Returns the number of lists sketched.
-- It does not merge the pending part (a merge's lock would be held for the whole analyze, and
-- writers that replace chunks would wait that long): the sketches leave the pending chunks out,
-- the term bits read both parts. Groundkit.analyze_postings() merges first, in its own
-- transaction.
create or replace function groundkit.analyze_postings(min_postings integer default null)
returns bigint
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    v_min integer := coalesce(analyze_postings.min_postings,
                              (select c.sketch_min_postings from groundkit.config c));
    n bigint;
begin
    n := groundkit._analyze_sketches(v_min);
    perform groundkit._analyze_term_bits(v_min);
    return n;
end
$$;

-- How far the chunks have grown past the last analyze_postings() (or rebuild()): chunk ids
-- issued since, over the chunks there were then, and at least over config.sketch_min_postings
-- (below that no list is long enough to be sketched, so a small database is not analyzed again
-- every few writes). Chunk ids only grow; replaced and deleted chunks count as written. Never
-- analyzed: every chunk id counts. A merger (`groundkit merge --analyze-at`) analyzes again
-- past a share of it (docs/bm25.md, "Analyze after growth").
create or replace function groundkit.postings_growth()
returns double precision
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select greatest(0, coalesce((select max(c.chunk_id) from groundkit.chunks c), 0)
                       - coalesce(a.through_chunk_id, 0))::double precision
           / greatest(coalesce(a.chunks, 0), (select c.sketch_min_postings from groundkit.config c), 1)
      from (select) one
      left join groundkit.postings_analyzed a on true
$$;

-- Counter rows that net to zero still carry their term. Redaction calls this with the terms of
-- the redacted text: every (term, scope) group among them that sums to zero is deleted, in every
-- shard. The caller has locked those rows already (redact_object), so this waits for nobody.
-- Groups that still count other content keep their rows: those terms are not the redacted
-- text's alone.
create or replace function groundkit._compact_term_stats(p_terms text[]) returns void
language sql
set search_path = pg_catalog, pg_temp
as $$
    delete from groundkit.term_stats t
     using (select z.term, z.scope from groundkit.term_stats z
             where z.term = any (p_terms)
             group by z.term, z.scope having sum(z.df) = 0) g
     where t.term = g.term and t.scope = g.scope
$$;

-- The planner's statistics (pg_statistic, read through pg_stats) hold samples of the columns'
-- values: after a redaction, its terms could stay there until the next ANALYZE. The term
-- columns keep their statistics (plans and index_status() read them; the columns of text
-- have none, revision 0014), and this analyzes again each one whose most common values or
-- histogram name one of p_terms. The caller's deletions are not sampled: ANALYZE leaves out
-- rows its own transaction deleted. Rarely needed (a term in one object's text is seldom among
-- a sample's most common values or bounds); when it is, it costs one ANALYZE of that column (a
-- sample of 30,000 rows at the default statistics target, whatever the table's size), and waits
-- for a VACUUM or ANALYZE of the table in flight (autovacuum's gives way). An ANALYZE that
-- samples no row keeps the old statistics (the pending part is often empty): those are cleared
-- (pg_clear_attribute_stats, PostgreSQL 18; before it, only a superuser may, else a warning).
create or replace function groundkit._restat_terms(p_terms text[]) returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    rel text;
    has_rows boolean;
begin
    foreach rel in array array['postings', 'pending_postings', 'term_stats', 'term_bits', 'postings_sketch'] loop
        continue when not groundkit._stats_name(rel, p_terms);
        execute format('analyze groundkit.%I (term)', rel);
        -- (a table with rows was sampled again: a term still named is other content's too)
        execute format('select exists (select 1 from groundkit.%I)', rel) into has_rows;
        continue when has_rows or not groundkit._stats_name(rel, p_terms);
        if current_setting('server_version_num')::integer >= 180000 then
            execute 'select pg_catalog.pg_clear_attribute_stats(''groundkit'', $1, ''term'', false)' using rel;
        elsif (select r.rolsuper from pg_catalog.pg_roles r where r.rolname = current_user) then
            delete from pg_catalog.pg_statistic s
             where s.starelid = format('groundkit.%I', rel)::regclass
               and s.staattnum = (select a.attnum from pg_catalog.pg_attribute a
                                   where a.attrelid = format('groundkit.%I', rel)::regclass and a.attname = 'term');
        else
            raise warning 'groundkit: the planner statistics of groundkit.%.term keep terms of the redacted text', rel
                using hint = 'Run ANALYZE on it once it has rows, or clear them as a superuser.';
        end if;
    end loop;
end
$$;

-- Whether the planner statistics of groundkit.<p_rel>.term name one of p_terms.
create or replace function groundkit._stats_name(p_rel text, p_terms text[]) returns boolean
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select exists (select 1 from pg_catalog.pg_stats s
                    where s.schemaname = 'groundkit' and s.tablename = p_rel and s.attname = 'term'
                      and (s.most_common_vals::text::text[] && p_terms
                           or s.histogram_bounds::text::text[] && p_terms))
$$;
