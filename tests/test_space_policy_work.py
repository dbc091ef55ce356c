"""What a space's policy change (put_space) reads and writes: the space's own rows, once.

put_space(..., private=True) on a board of a 100k-chunk database took seconds (issue 50, item 11):
it looked up the chunks that move seven times, every time through the database's live objects,
and rewrote each posting through a per-row function call. It now finds them once and writes each
of the space's postings once (`python -m evals.bench policy` has the figures). The counts come from
pg_stat_xact_*: the difference within one transaction is that transaction's work alone.
"""

from __future__ import annotations

from typing import Any

import psycopg

from groundkit import Groundkit
from groundkit.models import ContentObject

Raw = psycopg.Connection[tuple[Any, ...]]

TABLES = ("objects", "chunks", "postings", "pending_postings", "term_stats")


def _work(conn: Raw) -> dict[str, int]:
    """This session's not yet flushed counters: per table, rows read (sequential and index
    fetches) and written; and how often the lookup of the chunks that move ran."""
    out: dict[str, int] = {}
    for name, read, written in conn.execute(
        "select relname, seq_tup_read + coalesce(idx_tup_fetch, 0), n_tup_ins + n_tup_upd + n_tup_del"
        "  from pg_stat_xact_user_tables where schemaname = 'groundkit' and relname = any(%s)", (list(TABLES),)
    ):
        out[f"{name} read"], out[f"{name} written"] = int(read), int(written)
    row = conn.execute("select coalesce(sum(calls), 0) from pg_stat_xact_user_functions"
                       " where schemaname = 'groundkit' and funcname = '_space_scope_changes'").fetchone()
    out["lookups"] = int(row[0]) if row else 0
    return out


def _space_postings(conn: Raw, space: str) -> int:
    row = conn.execute(
        "select count(*) from groundkit.postings p join groundkit.chunks c on c.chunk_id = p.chunk_id"
        " join groundkit.objects o on o.object_id = c.object_id where o.space_id = %s", (space,)).fetchone()
    return int(row[0]) if row else 0


def test_put_space_finds_the_moving_chunks_once_and_writes_each_posting_once(gk: Groundkit, dsn: str) -> None:
    gk.put_space("big", "T0")
    gk.put_space("small", "T0")
    gk.put_objects([ContentObject(object_id=f"b{i}", version=1, content_type="board_post", space_id="big",
                                  tier_visibility="T1", title=f"big {i}", body=f"ceramics glaze kiln number {i}")
                    for i in range(2000)])
    gk.put_objects([ContentObject(object_id=f"s{i}", version=1, content_type="board_post", space_id="small",
                                  tier_visibility="T1", title=f"small {i}", body=f"weaving loom warp number {i}")
                    for i in range(3)])
    gk.merge_pending()
    with psycopg.connect(dsn) as conn:
        conn.execute("analyze")
        conn.commit()
        conn.execute("set track_functions = 'all'")
        postings = _space_postings(conn, "small")
        before = _work(conn)
        conn.execute("select groundkit.put_space('small', 'T0', true)")
        after = _work(conn)
        conn.commit()
    did = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    assert did["lookups"] == 1, did  # seven before the fix
    # each posting of the space moves once; its three chunks change scope; nothing else is written
    assert did["postings written"] == postings > 0, did
    assert did["chunks written"] == 3, did
    # reads are the small space's rows, not the 2,000 other objects or their chunks
    assert did["objects read"] <= 4 * 3, did
    assert did["chunks read"] <= 6 * 3, did
    assert {h.object_id for h in gk.search("t1-reader", "weaving", k=10)} == set()
