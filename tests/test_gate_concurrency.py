"""Concurrency, judged at each reader's exact snapshot, and fault injection."""

from __future__ import annotations

import io

from groundkit.gate import concurrency, faults
from groundkit.gate.tap import Tap


def test_concurrent_writers_and_readers_never_leak(dsn: str) -> None:
    out = io.StringIO()
    tap = Tap(out)
    concurrency._run(dsn, tap, ops=80, seconds=60, seed=3)
    assert tap.failed == [], out.getvalue()
    assert len(tap.results) == 6


def test_killed_backends_and_clients_leave_whole_objects(dsn: str) -> None:
    out = io.StringIO()
    tap = Tap(out)
    faults._run(dsn, tap, ops=("put", "redact"), tables=("content_log", "chunks", "term_stats"))
    assert tap.failed == [], out.getvalue()
    assert len(tap.results) == 9
    assert "client killed after writing inside an open transaction" in out.getvalue()
    assert "client killed in the middle of a run: none of the run is recorded" in out.getvalue()
