"""Plans that must not depend on the planner's luck (docs/bm25.md, "A quadratic probe plan").

The threshold rounds look a term up for thousands of candidate chunks at once
(``groundkit._postings_of``). After five calls a cached plan goes generic, and a generic plan
knows neither the ids nor how long the term's list is. On a corpus whose lists are short on
average it read the whole list through the impact index and tested ``chunk_id = any(ids)``
against every id, one by one, for every posting: quadratic (243 ms for one probe at 100,000
chunks). The function now disables sorts for its own planning and asks for chunk-id order, so
the primary key, which yields that order, is searched for the ids, cached plan or not.
"""

from __future__ import annotations

import math
from typing import Any

import psycopg
import pytest
from psycopg import sql

from groundkit import ContentObject, Groundkit

Raw = psycopg.Connection[tuple[Any, ...]]


def _plans(raw: Raw, stmt: str, params: tuple[Any, ...], verbose: bool = False) -> list[str]:
    """The plans auto_explain logs for stmt and every statement it runs (verbose: with each
    node's expressions, such as a function scan's call and its arguments)."""
    notices: list[str] = []
    raw.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
    raw.execute("load 'auto_explain'")
    for setting in ("auto_explain.log_min_duration = 0", "auto_explain.log_nested_statements = on",
                    "auto_explain.log_level = notice", "auto_explain.log_analyze = on",
                    "auto_explain.log_timing = off", f"auto_explain.log_verbose = {'on' if verbose else 'off'}"):
        raw.execute("set " + setting)
    try:
        raw.execute(stmt, params).fetchall()
    finally:
        raw.execute("set auto_explain.log_min_duration = -1")
    return [n for n in notices if "plan:" in n]


def test_dense_probe_searches_the_primary_key_in_a_generic_plan(community: Groundkit, raw: Raw) -> None:
    gk = community
    # one long list ('granit') among many short ones: the average list is a few postings long
    objs = [ContentObject(object_id=f"p{i}", version=1, content_type="board_post", space_id="open",
                          tier_visibility="T0", title=f"note {i}",
                          body=f"granite quarry{i} vein{i} ledge{i} slab{i % 50}")
            for i in range(600)]
    gk.put_objects(objs)
    raw.execute("analyze groundkit.postings")
    ids = [r[0] for r in raw.execute(
        "select chunk_id from groundkit.chunks where object_id like 'p%' order by chunk_id").fetchall()]
    wanted = ids[::2]
    expected = raw.execute(
        "select p.chunk_id, p.tf from groundkit.postings p where p.term = 'granit' and p.chunk_id = any (%s)"
        " order by p.chunk_id", (wanted,)).fetchall()
    assert len(expected) == len(wanted)

    raw.execute("set plan_cache_mode = force_generic_plan")
    plans = _plans(raw, "select * from groundkit._postings_of('granit', %s)", (wanted,))
    inner = [p for p in plans if "groundkit.postings" in p]
    assert inner, plans
    for p in inner:
        assert "postings_pkey" in p, p
        assert "Index Cond: ((term = " in p and "chunk_id = ANY" in p, p
        assert "Filter: (chunk_id = ANY" not in p, p
    # the same rows, cached plan or not
    for _ in range(7):
        got = raw.execute("select * from groundkit._postings_of('granit', %s)", (wanted,)).fetchall()
        assert got == expected
    raw.execute("reset plan_cache_mode")
    assert raw.execute("select * from groundkit._postings_of('granit', %s)", (wanted,)).fetchall() == expected


def _merged(raw: Raw, fn: str, terms: list[str], splits: list[int | None] | None) -> dict[int, tuple[float, int]]:
    """groundkit._merged_read (or _parallel) over whole lists of every bucket: {chunk: (known, length)} of
    the chunks whose sum reaches 2.0."""
    row = raw.execute(
        sql.SQL("select r.ids, r.known, r.dls"
                " from {}(%s, %s, (select array_agg(distinct vis_key) from groundkit.postings),"
                " 0.9, 0.4, 20.0, 0, 2.0, %s, %s, %s::bigint[]) r").format(sql.Identifier("groundkit", fn)),
        (terms, [1.0 + i / 10 for i in range(len(terms))], [0.0] * len(terms), list(range(1, len(terms) + 1)),
         splits)).fetchone()
    assert row is not None
    ids, known, dls = row
    assert len(ids) == len(known) == len(dls) == len(set(ids))
    return {i: (k, d) for i, k, d in zip(ids, known, dls, strict=True)}


def test_merged_read_in_pieces_sums_like_one_piece(community: Groundkit, raw: Raw) -> None:
    """A merged read cut into pieces of the chunk ids (docs/bm25.md, "Merged reads in parallel")
    keeps the same chunks with the same sums, however the ids are cut, empty pieces included (no
    split points, or null: one piece); its parallel form plans the pieces as the children of a
    Parallel Append, and answers the same when no worker can start. Split points must ascend."""
    gk = community
    objs = [ContentObject(object_id=f"m{i}", version=1, content_type="board_post", space_id="open",
                          tier_visibility=("T0", "T1", "T3")[i % 3], title=f"note {i}",
                          body=f"granite quarry ledge {'granite ' * (i % 4)}vein{i % 5} slab{i % 3}")
            for i in range(900)]
    gk.put_objects(objs)
    lo, hi = raw.execute("select min(chunk_id), max(chunk_id) from groundkit.chunks").fetchone() or (0, 0)
    terms = ["granit", "quarri", "vein1", "slab2"]
    want = _merged(raw, "_merged_read", terms, [])
    # some chunks reach the threshold, not all; the kept ones with the sum and length written out here
    row = raw.execute(
        "select count(*), count(*) filter (where s.known >= 2.0)"
        " from (select q.chunk_id,"
        "        sum((%s::float8[])[array_position(%s, q.term)] * q.tf"
        "            / (q.tf + 0.9::float8 * (1 - 0.4::float8 + 0.4::float8 * q.doc_len / 20.0::float8))) as known"
        "         from groundkit.postings q where q.term = any (%s) group by q.chunk_id) s",
        ([1.0, 1.1, 1.2, 1.3], terms, terms)).fetchone()
    assert row is not None and 0 < len(want) == row[1] < row[0]
    for c, (k, d) in want.items():
        assert k >= 2.0 and d == raw.execute("select doc_len from groundkit.chunks where chunk_id = %s",
                                             (c,)).fetchone()[0]  # type: ignore[index]
    cuts: list[list[int | None] | None] = [[(lo + hi) // 2], [lo - 1], [hi + 1], [lo], [lo + 7, lo + 300, hi - 5],
                                           [hi + 10, hi + 20], None]
    for splits in cuts:
        for fn in ("_merged_read", "_merged_read_parallel"):
            got = _merged(raw, fn, terms, splits)
            assert got.keys() == want.keys(), (fn, splits)
            for c, (k, d) in got.items():
                assert math.isclose(k, want[c][0], rel_tol=1e-12) and d == want[c][1], (fn, splits, c)

    raw.execute("set max_parallel_workers_per_gather = 2")
    plans = _plans(raw, "select * from groundkit._merged_read_parallel(%s, %s, '{0}', 0.9, 0.4, 20.0, 0, 1.0,"
                   " %s, %s, %s::bigint[])",
                   (terms, [1.0] * 4, [0.0] * 4, [1, 2, 3, 4], [(lo + hi) // 2]))
    inner = [p for p in plans if "Query Text: select coalesce(array_agg(c.chunk_id)" in p]
    assert len(inner) == 1 and all("Parallel Append" in p and "Workers Planned: 2" in p for p in inner), plans
    raw.execute("set max_parallel_workers = 0")  # no worker starts: the leader runs both pieces
    got = _merged(raw, "_merged_read_parallel", terms, [(lo + hi) // 2])
    assert got.keys() == want.keys()
    raw.execute("reset max_parallel_workers")

    # no term to read: nothing read
    assert raw.execute("select * from groundkit._merged_read('{}', '{}', '{0}', 0.9, 0.4, 20.0, 0, 2.0, '{}', '{}',"
                       " '{}')").fetchone() == ([], [], [])
    bad_splits: list[list[int | None] | None] = [[hi, lo], [lo, lo], [None]]
    for bad in bad_splits:
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="split points must be ascending"):
            _merged(raw, "_merged_read", terms, bad)


def test_parallel_pieces_see_the_transaction_s_own_writes(community: Groundkit, dsn: str) -> None:
    """Parallel workers read with the leader's transaction: a search forced to merge in four pieces,
    in the transaction that has just written (not committed) objects, finds them, with the exhaustive
    path's answer, and the pieces' plan started workers to do it."""
    gk = community
    gk.put_objects([ContentObject(object_id=f"c{i}", version=1, content_type="board_post", space_id="open",
                                  tier_visibility="T0", title="", body=f"granite quarry {'ledge ' * (i % 3)}")
                    for i in range(400)])
    with psycopg.connect(dsn) as conn:  # one transaction, rolled back at the end
        conn.execute("set max_parallel_workers_per_gather = 2")
        # the write's postings straight into postings, which the pieces read (not pending)
        conn.execute("update groundkit.config set pending_merge_chunks = 0")
        conn.execute(
            "select groundkit.put_object(object_id => %s, version => 1, content_type => 'board_post',"
            " space_id => 'open', tier_visibility => 'T0', title => '', body => %s)",
            ("fresh", "granite quarry ledge ledge ledge ledge obsidian"))
        plans = _plans(conn, "select * from groundkit._search_pruned('t0', 'granite quarry ledge', 5,"
                             " strategy => 'pieces')", ())
        merged = [p for p in plans if "Query Text: select coalesce(array_agg(c.chunk_id)" in p]
        assert merged and all("Workers Launched: 2" in p or "Workers Launched: 1" in p for p in merged), plans
        got = conn.execute(
            "select c.object_id, r.score from groundkit._search_pruned('t0', 'granite quarry ledge', 5,"
            " strategy => 'pieces') r join groundkit.chunks c using (chunk_id) order by r.score desc, c.object_id"
        ).fetchall()
        want = conn.execute(
            "select c.object_id, r.score from groundkit._search_exhaustive('t0', 'granite quarry ledge', 5) r"
            " join groundkit.chunks c using (chunk_id) order by r.score desc, c.object_id").fetchall()
        # (the 400 others tie in threes: which of a tie comes back is not compared)
        assert got[0][0] == want[0][0] == "fresh" and got[0][1] > got[1][1] and len(got) == len(want) == 5
        assert all(math.isclose(g[1], w[1], rel_tol=1e-12) for g, w in zip(got, want, strict=True))
        # and the pieces themselves: every chunk of those terms, the new one with them
        fresh = conn.execute("select chunk_id from groundkit.chunks where object_id = 'fresh'").fetchone()
        lo, hi = conn.execute("select min(chunk_id), max(chunk_id) from groundkit.chunks").fetchone() or (0, 0)
        assert fresh is not None
        for splits in ([(lo + hi) // 2], [lo + (hi - lo) * i // 4 for i in (1, 2, 3)]):
            row = conn.execute(
                "select r.ids from groundkit._merged_read_parallel('{granit,quarri,ledg}', '{1,1,1}',"
                " (select array_agg(distinct vis_key) from groundkit.postings), 0.9, 0.4, 20.0, 0, 0,"
                " '{0,0,0}', '{1,2,3}', %s::bigint[]) r", (splits,)).fetchone()
            assert row is not None and fresh[0] in row[0] and sorted(row[0]) == sorted(set(row[0])), splits
            assert len(row[0]) == 401, splits
        conn.rollback()


def test_rounds_plan_generically_and_leave_the_setting_alone(community: Groundkit, raw: Raw) -> None:
    """The pruned rounds (one-term queries) and the threshold rounds run their statements with
    generic plans, planned once per session (docs/bm25.md, "Generic plans for the pruned rounds",
    "Generic plans for the threshold rounds"), whatever the caller's plan_cache_mode; the
    caller's setting is the same after the call, in a transaction or not, and the scan plans
    under the function's own setting (auto: custom plans for its first calls)."""
    gk = community
    gk.put_objects([ContentObject(object_id=f"g{i}", version=1, content_type="board_post", space_id="open",
                                  tier_visibility="T0", title="", body=f"granite ledge{i % 7} quarry")
                    for i in range(60)])
    expected = raw.execute("select * from groundkit._search_exhaustive('t3', 'granite', 10)").fetchall()
    assert len(expected) == 10
    raw.execute("set plan_cache_mode = force_custom_plan")
    call = "select * from groundkit._search_pruned('t3', 'granite', 10, null, null, null, 'rounds')"
    plans = _plans(raw, call, (), verbose=True)
    rounds = [p for p in plans if "lists as (" in p]
    assert rounds, plans
    # a generic plan has the function's variables as parameters; a custom one, their values
    assert all("Function Call: unnest($" in p and "{granit}" not in p for p in rounds), rounds
    # the threshold rounds too (docs/bm25.md, "Generic plans for the threshold rounds")
    plans = _plans(raw, "select * from groundkit._search_pruned('t3', 'granite quarry', 10, null, null, null,"
                        " 'threshold')", (), verbose=True)
    prologue = [p for p in plans if "mx as (" in p]
    assert prologue and all("Function Call: unnest($" in p and "{granit" not in p for p in prologue), prologue
    # (the scan, inlined into the planner's statement, under its auto: custom plans at first,
    # the values written in)
    plans = _plans(raw, "select * from groundkit._search_pruned('t3', 'granite quarry', 10, null, null, null,"
                        " 'scan')", (), verbose=True)
    scan = [p for p in plans if "groundkit._search_scan(" in p]
    assert scan and all("Function Call: unnest('{" in p for p in scan), scan
    assert raw.execute("show plan_cache_mode").fetchone() == ("force_custom_plan",)
    with raw.transaction():
        assert raw.execute(call).fetchall() == expected
        assert raw.execute("show plan_cache_mode").fetchone() == ("force_custom_plan",)
    assert raw.execute("show plan_cache_mode").fetchone() == ("force_custom_plan",)
    raw.execute("reset plan_cache_mode")
    assert raw.execute(call).fetchall() == expected
    assert raw.execute("show plan_cache_mode").fetchone() == ("auto",)
