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

from typing import Any

import psycopg

from groundkit import ContentObject, Groundkit

Raw = psycopg.Connection[tuple[Any, ...]]


def _plans(raw: Raw, stmt: str, params: tuple[Any, ...]) -> list[str]:
    """The plans auto_explain logs for stmt and every statement it runs."""
    notices: list[str] = []
    raw.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
    raw.execute("load 'auto_explain'")
    for setting in ("auto_explain.log_min_duration = 0", "auto_explain.log_nested_statements = on",
                    "auto_explain.log_level = notice"):
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
