"""Maintenance that runs itself: Groundkit.maintain(), the due rules, set_bm25 and its guard, the
worker (as a real process) and its heartbeat in `groundkit status`, revision 0012."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from typer.testing import CliRunner

import groundkit
from groundkit import Groundkit, maintenance
from groundkit.cli import app
from groundkit.errors import InvalidArgument, InvariantViolation
from tests.conftest import upgrade_revisions_only

runner = CliRunner()
WORKER = [sys.executable, "-c", "from groundkit.cli import app; app()", "worker"]


def _write(gk: Groundkit, ids: range, body: str = "loom weaving wool") -> None:
    for i in ids:
        gk.put_object(f"p{i}", 1, "board_post", "commons", "T0", "t", f"{body} w{i}")


def _count(gk: Groundkit, table: str) -> int:
    row = gk.conn.execute(f"select count(*) as n from groundkit.{table}").fetchone()  # noqa: S608 - fixed names
    assert row is not None
    return int(row["n"])


def test_due_defaults_are_the_libraries(gk: Groundkit) -> None:
    """groundkit.maintenance_due()'s defaults are maintenance.py's constants (pg_cron schedules
    call it without arguments)."""
    row = gk.conn.execute(
        "select pg_get_function_arguments("
        "'groundkit.maintenance_due(double precision, double precision)'::regprocedure) as args").fetchone()
    assert row is not None
    assert f"DEFAULT {maintenance.ANALYZE_GROWTH}" in row["args"]
    assert f"DEFAULT {maintenance.REINDEX_DRIFT}" in row["args"]


def test_maintain_does_what_is_due_and_says_so(gk: Groundkit) -> None:
    """On a database with pending postings and growth, one pass recomputes the drifted impacts,
    merges the pending part, analyzes and vacuums, and reports each step; the next pass only
    merges (nothing), and nothing is due after."""
    gk.put_space("commons")
    gk.conn.execute("update groundkit.config set sketch_min_postings = 5, pending_merge_chunks = 1000000")
    _write(gk, range(30))
    pending = _count(gk, "pending_postings")
    assert pending >= 90
    assert {d.job for d in gk.due()} == {"reindex", "analyze"}  # a new database's reference is 64 tokens
    seen: list[tuple[str, int, int]] = []
    report = gk.maintain(progress=lambda step, done, total: seen.append((step, done, total)))
    assert [s.name for s in report.steps] == ["reindex", "merge", "analyze", "vacuum"]
    assert report.merged == pending and _count(gk, "pending_postings") == 0
    analyze = report.step("analyze")
    # loom, weav, wool, and w: the part every code token w0..w29 shares (docs/bm25/analysis.md)
    assert analyze is not None and analyze.count == 4 and "never analyzed" in analyze.reason
    vacuum = report.step("vacuum")
    assert vacuum is not None and "groundkit.pending_postings" in vacuum.reason and vacuum.count == 3
    assert all(s.seconds >= 0 for s in report.steps)
    assert report.seconds >= sum(s.seconds for s in report.steps) - 0.005  # (each rounded to 1 ms)
    assert {step for step, _, _ in seen} >= {"analyze"}
    st = gk.index_status()
    assert st.impacts_current and st.impact_drift < maintenance.REINDEX_DRIFT and st.growth == 0
    assert gk.due() == ()
    again = gk.maintain()
    assert [(s.name, s.count) for s in again.steps] == [("merge", 0)]
    # growth past a tenth: analyzed again, and the report is JSON for the heartbeat
    _write(gk, range(30, 34))
    third = gk.maintain()
    assert [s.name for s in third.steps] == ["merge", "analyze", "vacuum"]
    assert third.step("analyze") is not None and "the chunks grew 13.3% since the last analyze" in \
        third.model_dump_json()


def test_maintain_resumes_an_interrupted_recompute(dsn: str) -> None:
    with Groundkit.connect(dsn) as gk:
        gk.put_space("commons")
        _write(gk, range(40))
        gk.maintain()
        fitted = gk.index_status().avgdl_ref
        with psycopg.connect(dsn, autocommit=True) as steps:
            steps.execute("select groundkit._reindex_begin(%s)", (1.2 * fitted,))
            steps.execute("select * from groundkit._reindex_step(10)")
        for _ in range(100):  # (the session's lock goes with its backend)
            if gk.index_status().reindex_unfinished:
                break
            time.sleep(0.05)
        assert [d.reason for d in gk.due()] == ["the impacts' recompute was interrupted"]
        report = gk.maintain(analyze_growth=0)
        assert [s.name for s in report.steps] == ["reindex", "merge"]
        st = gk.index_status()
        assert not st.reindex_unfinished and st.avgdl_ref == pytest.approx(1.2 * fitted)
        # reindex_at 0: never
        assert gk.due(reindex_at=0) == ()


def test_a_recompute_under_way_elsewhere_is_not_due(dsn: str) -> None:
    """While another session recomputes the impacts in steps, a pass does not try to (it would be
    refused) and still merges; bad thresholds are InvalidArgument."""
    with Groundkit.connect(dsn) as gk:
        gk.put_space("commons")
        _write(gk, range(20))
        gk.maintain()
        with psycopg.connect(dsn, autocommit=True) as steps:
            steps.execute("select groundkit._reindex_begin(%s)", (3 * gk.index_status().avgdl_ref,))
            st = gk.index_status()
            assert st.reindex_pid == steps.info.backend_pid and st.impact_drift >= 1.5
            assert gk.due() == ()
            _write(gk, range(20, 22))
            report = gk.maintain(analyze_growth=0)
            assert [s.name for s in report.steps] == ["merge", "vacuum"] and report.merged > 0
        with pytest.raises(InvalidArgument, match="reindex_at must be a number"):
            gk.due(reindex_at=float("nan"))


def test_maintain_in_a_transaction_vacuums_nothing(gk: Groundkit) -> None:
    gk.put_space("commons")
    _write(gk, range(5))
    with gk.conn.transaction():
        report = gk.maintain()
    assert "vacuum" not in [s.name for s in report.steps] and report.merged > 0


def test_set_bm25_is_the_only_way_to_change_k1_and_b(gk: Groundkit) -> None:
    """A direct update of k1 or b is refused (GK007, naming set_bm25); set_bm25 changes them and
    the impacts together, so search never turns exhaustive; bad values are GK005."""
    gk.put_space("commons")
    gk.put_member("reader", "T0")
    _write(gk, range(10))
    gk.maintain()
    for update in ("update groundkit.config set bm25_k1 = 1.2", "update groundkit.config set bm25_b = 0.75"):
        with pytest.raises(InvariantViolation, match=r"groundkit\.set_bm25") as refused:
            gk._fetch(update, {})
        assert refused.value.sqlstate == "GK007"
    gk.conn.execute("update groundkit.config set sketch_min_postings = 7")  # other settings: as before
    postings = _count(gk, "postings")
    assert gk.set_bm25(1.2, 0.75) == postings
    st = gk.index_status()
    assert (st.k1, st.b, st.impact_k1, st.impact_b) == (1.2, 0.75, 1.2, 0.75) and st.impacts_current
    assert gk.set_bm25(1.2, 0.75) == 0  # unchanged: nothing to recompute
    assert gk.search("reader", "w3")[0].object_id == "p3"  # (the others hold its part w)
    for k1, b in ((0, 0.4), (11, 0.4), (0.9, 1.5), (0.9, -0.1), (float("nan"), 0.4), (0.9, float("inf"))):
        with pytest.raises(InvalidArgument):
            gk.set_bm25(k1, b)
    with pytest.raises(InvalidArgument, match="k1 must be a number"):
        gk._fetch("select groundkit.set_bm25('NaN', 0.4)", {})
    assert (gk.index_status().k1, gk.index_status().b) == (1.2, 0.75)


def test_config_set_bm25_command(dsn: str) -> None:
    with Groundkit.connect(dsn) as gk:
        gk.put_space("commons")
        _write(gk, range(3))
        gk.merge_pending()
    done = runner.invoke(app, ["config", "set-bm25", "1.5", "0.6", "--dsn", dsn])
    assert done.exit_code == 0 and "BM25 k1 1.5, b 0.6; recomputed 18 postings' impacts" in done.output, done.output
    same = runner.invoke(app, ["config", "set-bm25", "1.5", "0.6", "--dsn", dsn])
    assert same.exit_code == 0 and "nothing to recompute" in same.output
    bad = runner.invoke(app, ["config", "set-bm25", "1.5", "2", "--dsn", dsn])
    assert bad.exit_code == 1 and "GK005" in bad.output and "b must be a number in [0, 1]" in bad.output


def _heartbeat(gk: Groundkit) -> dict[str, Any] | None:
    return gk.conn.execute("select * from groundkit.worker_heartbeat order by beat_at desc limit 1").fetchone()


def test_worker_once_json_and_status(dsn: str) -> None:
    """`groundkit worker --once --json`, a real process: one JSON object for its pass, a
    heartbeat row marked stopped, and `groundkit status` showing both."""
    with Groundkit.connect(dsn) as gk:
        gk.put_space("commons")
        _write(gk, range(12))
        pending = _count(gk, "pending_postings")
    before = runner.invoke(app, ["status", "--dsn", dsn])
    assert "worker            none has run (groundkit worker)" in before.output, before.output
    assert "due: the postings were never analyzed: the worker's next pass" in before.output
    proc = subprocess.run([*WORKER, "--once", "--json", "--dsn", dsn], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1
    got = json.loads(lines[0])
    assert got["pass"] == 1 and got["error"] is None
    steps = {s["name"]: s for s in got["report"]["steps"]}
    assert steps["merge"]["count"] == pending and "analyze" in steps
    with Groundkit.connect(dsn) as gk:
        (beat,) = gk.workers()
        assert beat.pid == proc_pid_of(beat.worker_id) and beat.stopped_at is not None and beat.last_error is None
        assert beat.last_result is not None and beat.last_result["steps"] == got["report"]["steps"]
        assert gk.due() == ()
    shown = runner.invoke(app, ["status", "--dsn", dsn])
    assert shown.exit_code == 0 and f"worker            {beat.worker_id}, started" in shown.output, shown.output
    assert "last pass" in shown.output and "stopped" in shown.output and "due:" not in shown.output
    as_json = json.loads(runner.invoke(app, ["status", "--json", "--dsn", dsn]).output)
    assert as_json["due"] == [] and as_json["workers"][0]["worker_id"] == beat.worker_id


def proc_pid_of(worker_id: str) -> int:
    return int(worker_id.rsplit(":", 1)[1])


def test_worker_loop_stops_cleanly_on_sigterm(dsn: str) -> None:
    """`groundkit worker --every 0.2 --json` keeps passing, one JSON object each, merging what
    writers leave pending; SIGTERM stops it with exit 0 and marks its heartbeat stopped."""
    with Groundkit.connect(dsn) as gk:
        gk.put_space("commons")
        proc = subprocess.Popen([*WORKER, "--every", "0.2", "--json", "--dsn", dsn],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 60
            while not ((row := _heartbeat(gk)) and row["last_run_at"] is not None):
                assert time.monotonic() < deadline and proc.poll() is None, "no heartbeat"
                time.sleep(0.05)
            assert row["pid"] == proc.pid and row["stopped_at"] is None
            _write(gk, range(3))
            while _count(gk, "pending_postings"):
                assert time.monotonic() < deadline, "the worker did not merge"
                time.sleep(0.05)
            # two more heartbeats: the pass that merged has printed (a pass prints after its
            # heartbeat, and the merge commits before it)
            for _ in range(2):
                last = row["last_run_at"]
                while (row := _heartbeat(gk)) is None or row["last_run_at"] == last:
                    assert time.monotonic() < deadline, "no next pass"
                    time.sleep(0.05)
        finally:
            proc.send_signal(signal.SIGTERM)
            stdout, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 0, (stdout, stderr)
        assert "worker stopped after" in stderr
        passes = [json.loads(line) for line in stdout.splitlines()]
        assert len(passes) >= 2 and [p["pass"] for p in passes] == list(range(1, len(passes) + 1))
        assert sum(s["count"] for p in passes for s in p["report"]["steps"] if s["name"] == "merge") >= 9
        row = _heartbeat(gk)
        assert row is not None and row["stopped_at"] is not None


def test_worker_connects_again_after_losing_its_database(dsn: str) -> None:
    """The worker outlives its session: terminated under it, it says so, connects again (with
    backoff) and goes on."""
    name = "groundkit-worker-test"
    with Groundkit.connect(dsn) as gk:
        gk.put_space("commons")
        proc = subprocess.Popen([*WORKER, "--every", "0.1", "--dsn", dsn], env={**os.environ, "PGAPPNAME": name},
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 60

            def pids() -> list[int]:
                rows = gk.conn.execute("select pid from pg_stat_activity where application_name = %s",
                                       (name,)).fetchall()
                return [int(r["pid"]) for r in rows]

            while not (first := pids()):
                assert time.monotonic() < deadline
                time.sleep(0.05)
            gk.conn.execute("select pg_terminate_backend(%s)", (first[0],))
            _write(gk, range(3))
            while _count(gk, "pending_postings") or not [p for p in pids() if p not in first]:
                assert time.monotonic() < deadline, "the worker did not come back"
                time.sleep(0.05)
        finally:
            proc.send_signal(signal.SIGINT)
            stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, (stdout, stderr)
    said = " ".join(stderr.split())
    assert "lost the database:" in said and "connecting again in 0.2 s" in said and "connected again" in said


def test_revision_0012_from_0011(empty_dsn: str) -> None:
    """Migrating a database at revision 0011 to head: the heartbeat table, autovacuum settings on
    the hot tables, and a database with term bits still missing their bytes (revision 0007)
    marked never analyzed, so the first maintenance pass makes them; no manual step."""
    upgrade_revisions_only(empty_dsn, "0011")
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        assert conn.execute("select version_num from groundkit.alembic_version").fetchone() == ("0011",)
        conn.execute("insert into groundkit.term_bits (term, w_max, words) values ('loom', 10, '{1}')")
        conn.execute("insert into groundkit.postings_analyzed (through_chunk_id, chunks, analyzed_at)"
                     " values (10, 10, now())")
    head = groundkit.migrate(empty_dsn, gate=False).head
    with Groundkit.connect(empty_dsn) as gk:
        assert gk.conn.execute("select version_num from groundkit.alembic_version").fetchone() == \
            {"version_num": head}  # (0012 and every later one)
        assert _count(gk, "postings_analyzed") == 0 and _count(gk, "worker_heartbeat") == 0
        options = {r["relname"]: r["reloptions"] for r in gk.conn.execute(
            "select c.relname, c.reloptions from pg_class c join pg_namespace n on n.oid = c.relnamespace"
            " where n.nspname = 'groundkit' and c.reloptions is not null").fetchall()}
        assert "autovacuum_vacuum_insert_scale_factor=0.01" in options["postings"]
        assert {"autovacuum_vacuum_threshold=20000", "vacuum_truncate=false"} <= set(options["pending_postings"])
        assert {"term_stats", "chunks", "objects"} <= set(options)
        with pytest.raises(InvariantViolation):
            gk._fetch("update groundkit.config set bm25_k1 = 2", {})


def test_revision_0012_keeps_an_analyzed_database_analyzed(empty_dsn: str) -> None:
    upgrade_revisions_only(empty_dsn, "0011")
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        conn.execute("insert into groundkit.term_bits (term, w_max, words, bits)"
                     " values ('loom', 10, '{1}', '\\x0000000000000001')")
        conn.execute("insert into groundkit.postings_analyzed (through_chunk_id, chunks, analyzed_at)"
                     " values (10, 10, now())")
    groundkit.migrate(empty_dsn, gate=False)
    with Groundkit.connect(empty_dsn) as gk:
        assert _count(gk, "postings_analyzed") == 1


def test_the_pg_cron_schedule_in_the_docs_does_what_the_worker_does(dsn: str) -> None:
    """The job bodies docs/operations.md schedules with pg_cron, run as pg_cron runs them (each
    command string one transaction, VACUUM alone): afterwards nothing is due and nothing pending."""
    page = (Path(__file__).resolve().parent.parent / "docs" / "operations.md").read_text(encoding="utf-8")
    jobs = re.findall(r"cron\.schedule\('([^']+)', '[^']+', \$\$(.*?)\$\$\)", page, flags=re.DOTALL)
    assert [name for name, _ in jobs] == ["groundkit-merge", "groundkit-analyze", "groundkit-reindex",
                                          "groundkit-vacuum"]
    with Groundkit.connect(dsn) as gk:
        gk.put_space("commons")
        _write(gk, range(20))
        assert {d.job for d in gk.due()} == {"reindex", "analyze"} and _count(gk, "pending_postings")
        with psycopg.connect(dsn, autocommit=True) as cron:
            for _name, body in jobs:
                cron.execute(body.encode())
        assert gk.due() == () and _count(gk, "pending_postings") == 0
