"""Regression: a delete, redact or space move racing put_space must not corrupt the statistics.

put_space moves a space's chunks between statistics scopes; a writer that removes those chunks
at the same moment used to subtract them from the old scope as well (delete_object and
redact_object did not hold the space, put_object held only the new space), so the counters
drifted from the log (state_checksum changed across rebuild, and search could fail with
"cannot take logarithm of zero"). Found by the gate's concurrency section.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import psycopg
import pytest

from groundkit import Groundkit


def _wait_until_blocked(dsn: str, pid: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for _ in range(500):
            row = conn.execute("select wait_event_type from pg_stat_activity where pid = %s", (pid,)).fetchone()
            if row is not None and row[0] == "Lock":
                return
            time.sleep(0.01)
    raise AssertionError(f"backend {pid} never waited on a lock")


def _race(dsn: str, first: Callable[[Groundkit], object]) -> None:
    """``first`` runs in an open transaction; put_space on the same space starts meanwhile."""
    with Groundkit.connect(dsn) as setup:
        setup.put_member("m", "T3")
        setup.put_space("a", "T0")
        setup.put_space("b", "T0")
        for i in range(3):
            setup.put_object(f"o{i}", 1, "board_post", "a", "T1", "race", f"shared words object{i}")
    writer = Groundkit(psycopg.connect(dsn, autocommit=False, row_factory=psycopg.rows.dict_row))
    other = Groundkit.connect(dsn)
    try:
        first(writer)  # uncommitted
        t = threading.Thread(target=other.put_space, args=("a", "T2"))
        t.start()
        # with the fix put_space waits for the space row; before it, it waited on the chunk rows
        _wait_until_blocked(dsn, other.conn.info.backend_pid)
        writer.conn.commit()
        t.join(timeout=30)
        assert not t.is_alive()
    finally:
        writer.close()
        other.close()
    with Groundkit.connect(dsn) as gk:
        before = gk.state_checksum()
        gk.rebuild()
        assert gk.state_checksum() == before
        assert [h.object_id for h in gk.search("m", "shared words")] == ["o1", "o2"]


@pytest.mark.parametrize("op", ["delete", "redact", "move"])
def test_writer_racing_put_space_keeps_statistics(dsn: str, op: str) -> None:
    def first(gk: Groundkit) -> object:
        if op == "delete":
            return gk.delete_object("o0", 2)
        if op == "redact":
            return gk.redact_object("o0", 2)
        return gk.put_object("o0", 2, "board_post", "b", "T1", "moved", "elsewhere now")

    _race(dsn, first)
