"""Scratch databases: two runs on one server never end each other's work (issue 50, item 13).

`groundkit eval quality` used to load into the fixed database groundkit_eval_quality, dropped
WITH (FORCE) at the start of every run, so a second run on the same server terminated the first
one's connections. Now every run has databases of its own, held by an advisory lock for its
life; the databases of a run that was killed are dropped by the next run, a live run's never.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from evals.bench.common import scratch_db, setup_db
from groundkit.databases import ScratchDatabases, fresh_database, remove_stale
from groundkit.errors import ScratchDatabaseInUse
from groundkit.gate.throwaway import GateDatabases
from groundkit.quality.harness import run_quality

DOCS = [("d1", "Dovetail joints", "Hand-cut dovetails for drawer boxes in walnut."),
        ("d2", "Finishing oil", "Hardwax oil finishing schedule for oak tables.")]
QUERIES = [("q1", "dovetail drawer"), ("q2", "oil finish for oak")]


def _beir(root: Path) -> Path:
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text("".join(json.dumps({"_id": i, "title": t, "text": x}) + "\n"
                                               for i, t, x in DOCS), encoding="utf-8")
    (root / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in QUERIES),
                                        encoding="utf-8")
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\n", encoding="utf-8")
    return root


def _scratch_names(server_dsn: str, purpose: str) -> set[str]:
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        return {str(r[0]) for r in conn.execute(
            "select datname from pg_database where starts_with(datname, %s)", (f"groundkit_scratch_{purpose}_",))}


def test_two_quality_runs_on_one_server_overlap_and_both_complete(server_dsn: str, tmp_path: Path) -> None:
    """Run A stops halfway through loading its collection; run B starts, runs whole, and ends;
    then A goes on. Both finish with the right answers, each in a database of its own."""
    dataset = _beir(tmp_path / "tiny")
    a_loading, b_done = threading.Event(), threading.Event()
    seen_during_b: set[str] = set()
    outcome: dict[str, object] = {}

    def a_progress(stage: str, done: int, total: int) -> None:
        if stage == "load" and not a_loading.is_set():
            a_loading.set()
            assert b_done.wait(120), "run B never finished"

    def run_a() -> None:
        try:
            outcome["a"] = run_quality(dataset, server_dsn, arms=("bm25", "ts_rank_cd"), progress=a_progress)
        except BaseException as exc:  # reported by the assertion below
            outcome["a"] = exc

    def b_progress(stage: str, done: int, total: int) -> None:
        if stage == "load":
            seen_during_b.update(_scratch_names(server_dsn, "eval_quality"))

    a = threading.Thread(target=run_a)
    a.start()
    try:
        assert a_loading.wait(120), "run A never started loading"
        b_rows = run_quality(dataset, server_dsn, arms=("bm25", "ts_rank_cd"), progress=b_progress)
    finally:
        b_done.set()
        a.join(120)
    a_rows = outcome["a"]
    assert isinstance(a_rows, list), f"run A failed: {a_rows!r}"
    for rows in (a_rows, b_rows):
        assert [r.arm for r in rows] == ["bm25", "ts_rank_cd"] and rows[0].ndcg_10 == 1.0
    assert len(seen_during_b) >= 2  # A's and B's, side by side
    assert not seen_during_b & _scratch_names(server_dsn, "eval_quality")  # both dropped at the end


HOLDER = """
import sys, time
from groundkit.databases import ScratchDatabases
scratch = ScratchDatabases(sys.argv[1], "eval_quality").__enter__()
print(scratch.create(), flush=True)
time.sleep(600)
"""


def _holder(server_dsn: str) -> tuple[subprocess.Popen[str], str]:
    """A process that made a scratch database and holds it: (the process, the database's name)."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, server_dsn], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, "the holder process died"
    return proc, str(conninfo_to_dict(line.strip())["dbname"])


def _token_released(server_dsn: str, name: str) -> None:
    """Wait until the server has ended the killed process's session (its lock is gone)."""
    from groundkit.databases import _held

    with psycopg.connect(server_dsn, autocommit=True) as conn:
        for _ in range(200):
            if not _held(conn, name[-16:]):
                return
            time.sleep(0.05)
    raise AssertionError(f"the lock of {name} was never released")


def test_a_killed_runs_scratch_database_is_dropped_and_a_live_runs_is_not(server_dsn: str) -> None:
    killed, killed_db = _holder(server_dsn)
    live, live_db = _holder(server_dsn)
    try:
        killed.send_signal(signal.SIGKILL)
        killed.wait(30)
        _token_released(server_dsn, killed_db)
        heard: list[str] = []
        with ScratchDatabases(server_dsn, "eval_quality", heard.append) as scratch:
            names = _scratch_names(server_dsn, "eval_quality")
            assert killed_db not in names and live_db in names and scratch.name() not in names
            assert any(killed_db in m and "gone" in m for m in heard) and not any(live_db in m for m in heard)
            # the live run's database still works
            with psycopg.connect(make_conninfo(server_dsn, dbname=live_db)) as conn:
                assert conn.execute("select 1").fetchone() == (1,)
        assert live.poll() is None
    finally:
        for proc in (killed, live):
            proc.kill()
            proc.wait(30)
    _token_released(server_dsn, live_db)
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        assert live_db in remove_stale(conn)


def test_a_killed_runs_database_a_session_still_uses_is_left(server_dsn: str) -> None:
    """Stale cleanup drops without FORCE: a session still on the database keeps it (and its work)."""
    killed, killed_db = _holder(server_dsn)
    try:
        with psycopg.connect(make_conninfo(server_dsn, dbname=killed_db)) as user:
            killed.send_signal(signal.SIGKILL)
            killed.wait(30)
            _token_released(server_dsn, killed_db)
            heard: list[str] = []
            with psycopg.connect(server_dsn, autocommit=True) as conn:
                assert remove_stale(conn, heard.append) == []
            assert any(killed_db in m and "connected" in m for m in heard)
            assert user.execute("select 1").fetchone() == (1,)
        with psycopg.connect(server_dsn, autocommit=True) as conn:
            assert killed_db in remove_stale(conn)
    finally:
        killed.kill()
        killed.wait(30)


def test_the_demos_database_is_not_replaced_while_a_session_uses_it(server_dsn: str) -> None:
    dsn = fresh_database(server_dsn, "groundkit_demo_scratch_test")
    try:
        with psycopg.connect(dsn) as explorer:
            with pytest.raises(ScratchDatabaseInUse, match="in use"):
                fresh_database(server_dsn, "groundkit_demo_scratch_test")
            assert explorer.execute("select 1").fetchone() == (1,)  # not terminated
        assert fresh_database(server_dsn, "groundkit_demo_scratch_test") == dsn
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as conn:
            conn.execute("drop database if exists groundkit_demo_scratch_test")


def test_two_gates_and_two_benchmarks_on_one_server_keep_to_their_own(server_dsn: str) -> None:
    with GateDatabases(server_dsn) as one, GateDatabases(server_dsn) as two:
        first, second = one.clone(), two.clone()
        assert first != second
        one.drop(first)
        with psycopg.connect(second) as conn:
            assert conn.execute("select count(*) from groundkit.tiers").fetchone() is not None
    with scratch_db(server_dsn, "bh_twin") as a, scratch_db(server_dsn, "bh_twin") as b:
        assert a != b
    kept = setup_db(server_dsn, "gk_bench_scratch_test")
    try:
        with psycopg.connect(kept) as user:
            with pytest.raises(ScratchDatabaseInUse):
                setup_db(server_dsn, "gk_bench_scratch_test")
            assert user.execute("select 1").fetchone() == (1,)
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as conn:
            conn.execute("drop database if exists gk_bench_scratch_test")
