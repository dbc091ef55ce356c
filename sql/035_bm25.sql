-- BM25's formula and the search's numbers, each written once. Replaceable.
--
-- Every function here is one SQL expression with no SET clause, so that the planner inlines it
-- into the statement that calls it (a SET clause, or PL/pgSQL, would make it a call per row).
-- Every relation-free, they need no search_path; PUBLIC may not execute them (sql/090_roles.sql).
--
-- Changing the ranking formula means changing _tf_part and _idf here, and the bound on _tf_part
-- the pruned paths use (_imp_ub and _imp_cut, sql/060_search.sql). groundkit._impact
-- (sql/040_materialize.sql), what the postings store, is _tf_part at the reference length.

-- BM25's term-frequency part: tf / (tf + k1 (1 - b + b dl / avgdl)), in [0, 1). A term's
-- contribution to a chunk's score is its weight (qtf · _idf) times this.
create or replace function groundkit._tf_part(
    tf integer, doc_len integer, k1 double precision, b double precision, avgdl double precision)
returns double precision
language sql immutable parallel safe
as $$
    select tf / (tf + k1 * (1 - b + b * doc_len / avgdl))
$$;

-- A term's contribution to a chunk's score: its weight times its tf-part, rounded down to a
-- multiple of 2^-36. Scores are sums of these, and sums of multiples of 2^-36 below 2^16 are
-- exact in double precision, so a score does not depend on the order its terms were added in:
-- the plan (a hash or a sorted aggregate, a join order, which a session's settings change)
-- cannot move its last bit, and two chunks with the same text tie exactly and are ordered by
-- (object_id, chunk_seq). Rounded down, never up: every bound on a contribution the pruned
-- strategies use (_imp_ub, the maxima) is a bound on this one too.
create or replace function groundkit._score_part(
    w double precision, tf integer, doc_len integer, k1 double precision, b double precision,
    avgdl double precision)
returns double precision
language sql immutable parallel safe
as $$
    select floor(w * groundkit._tf_part(tf, doc_len, k1, b, avgdl) * 68719476736.0) / 68719476736.0
$$;

-- BM25's inverse document frequency (the Lucene form, never negative) of a term held by df of
-- n chunks; both counted over the reader's scopes only (docs/bm25.md, "Statistics scoping").
create or replace function groundkit._idf(n double precision, df double precision)
returns double precision
language sql immutable parallel safe
as $$
    select ln(1 + (greatest(n - df, 0) + 0.5) / (df + 0.5))
$$;

-- The search's numbers. Only speed depends on them (every strategy is exact for any value),
-- except _slack, which keeps exact ties from being pruned. docs/bm25.md names the measurement
-- behind each.

-- Relative slack on every pruning comparison: sums of the same contributions in another order
-- differ in the last bits, and a chunk tying the threshold must not be pruned for that.
create or replace function groundkit._slack() returns double precision
language sql immutable parallel safe as $$ select 1e-9::double precision $$;

-- The scan, not the threshold rounds, when the reader's shared postings of the query's terms
-- number at most this: one aggregate costs less than any bookkeeping there. Fewer for two or
-- three terms, whose rounds probe fewer lists ("The scan's limit by term count").
create or replace function groundkit._scan_max(n_terms integer) returns double precision
language sql immutable parallel safe as $$ select case when n_terms >= 4 then 20000 else 10000 end::double precision $$;

-- A range is counted up to this many postings; beyond, its size is taken as at least half the
-- list. A longer exact count steers no choice ("Range counts stop at 40,000").
create or replace function groundkit._count_cap() returns bigint
language sql immutable parallel safe as $$ select 40000::bigint $$;

-- A round whose read ranges hold at least this many postings reads them merged (whole lists) or
-- in two passes (shares); shorter ones cost less than planning either ("Shares", "Joined and
-- merged reads").
create or replace function groundkit._long_round() returns double precision
language sql immutable parallel safe as $$ select 20000::double precision $$;

-- A merged read of at least this many postings runs in pieces in parallel workers, when two may
-- be planned ("Merged reads in parallel"), in this many pieces ("Four pieces instead of two").
create or replace function groundkit._parallel_min() returns double precision
language sql immutable parallel safe as $$ select 50000::double precision $$;
create or replace function groundkit._parallel_pieces() returns integer
language sql immutable parallel safe as $$ select 4 $$;

-- The cost model that chooses the probed terms (µs, calibrated together at 1M chunks, "Candidates
-- of a final round"): reading and scoring a posting in a round; a primary-key probe of one term
-- for one candidate; a bit test of a candidate against a probed term's term bits ("Probes by
-- bits in the choice of probed terms").
create or replace function groundkit._us_read() returns double precision
language sql immutable parallel safe as $$ select 0.8::double precision $$;
create or replace function groundkit._us_probe() returns double precision
language sql immutable parallel safe as $$ select 5::double precision $$;
create or replace function groundkit._us_bit_test() returns double precision
language sql immutable parallel safe as $$ select 0.3::double precision $$;

-- The threshold rounds' guesses of the final k-th score: the first, this share of the two
-- largest maxima together ("The first guess from two maxima": 0.9 · the sum was 1.5-2.4 times
-- the final score with four terms or more); after a failed round, this share of the last guess
-- (or the kept chunks' lower bound, if higher); below this share of the maxima's sum, straight
-- to the final round at x_lb ("Threshold rounds").
create or replace function groundkit._guess_first() returns double precision
language sql immutable parallel safe as $$ select 0.9::double precision $$;
create or replace function groundkit._guess_next() returns double precision
language sql immutable parallel safe as $$ select 0.8::double precision $$;
create or replace function groundkit._guess_floor() returns double precision
language sql immutable parallel safe as $$ select 0.05::double precision $$;

-- x_lb from a short list: a list of at most _short_max of the reader's postings, scored only
-- when the round it would shorten reads _short_min postings or more (below, its 1-6 ms cost
-- more than it saved: "x_lb from a short list").
create or replace function groundkit._short_max() returns double precision
language sql immutable parallel safe as $$ select 10000::double precision $$;
create or replace function groundkit._short_min() returns double precision
language sql immutable parallel safe as $$ select 50000::double precision $$;

-- The most distinct terms a query keeps in each language it is analyzed in: past it, those of
-- the highest IDF by the reader's statistics (groundkit._search_terms; docs/bm25/analysis.md,
-- "Long questions"). A query's cost grows with its terms (300 took 1.2-2.0 s on 8,000 objects
-- when all were scored), and 64 is more than any typed query holds.
create or replace function groundkit._max_terms() returns integer
language sql immutable parallel safe as $$ select 64 $$;

-- The longest query, in characters (GK005 past it): a pasted page or two. Its analysis and the
-- document frequencies of its terms are what a long query costs before the bound above
-- (docs/performance.md, "Long queries").
create or replace function groundkit._max_query_chars() returns integer
language sql immutable parallel safe as $$ select 32768 $$;
