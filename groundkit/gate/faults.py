"""Fault injection: kill the backend, or the client, in the middle of a write.

To stop a write at a precise point, a second connection holds ``LOCK TABLE ... IN EXCLUSIVE
MODE`` on one of the tables the write touches (the log, objects, chunks, postings, the term
or scope statistics), so the write blocks right before it changes that table, having changed
the tables before it. Then:

- ``pg_terminate_backend`` kills the writer's backend while it waits (every write kind x every
  table): the object must be wholly at its old version, the whole derived state unchanged;
- the client process is SIGKILLed after its write ran inside an open transaction: nothing may
  remain;
- the client process is SIGKILLed while its autocommit write waits on the lock: the server
  finishes or abandons the statement, and the object must be wholly at its old or wholly at
  its new version.

- the client process is SIGKILLed in the middle of a run (``gk.run``), after a search: the run
  is recorded whole or not at all, never its searches without their header.

After each: no partial chunks, no orphan postings, no log row without its views
(:mod:`groundkit.gate.integrity`), and the derived state equals a rebuild from the log.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from groundkit.client import Groundkit
from groundkit.gate.integrity import structure_problems
from groundkit.gate.tap import Counts, Tap
from groundkit.gate.throwaway import GateDatabases, connect_dict

TABLES = ("objects", "content_log", "chunks", "postings", "pending_postings", "term_stats", "scope_stats")
OPS = ("put", "retier", "delete", "redact")
BODY = " ".join(f"Paragraph {i} about kiln {i % 7} glaze and firing, word{i}." for i in range(180))

_VICTIM = r"""
import sys, time, psycopg
dsn, mode, object_id = sys.argv[1], sys.argv[2], sys.argv[3]
conn = psycopg.connect(dsn, autocommit=(mode == "autocommit"))
conn.execute("set application_name = 'gk-gate-victim'")
print("connected", flush=True)
conn.execute("select groundkit.put_object(object_id => %s, version => 2, content_type => 'document',"
             " space_id => 's', tier_visibility => 'T1', title => 'v2', body => 'the second version')",
             (object_id,))
print("written", flush=True)
time.sleep(120)
"""


def _call(gk: Groundkit, op: str, object_id: str) -> object:
    if op == "put":
        return gk.put_object(object_id, 2, "document", "s", "T1", "v2", "the second version " + BODY[:2000])
    if op == "retier":
        return gk.retier_object(object_id, 2, "T2")
    if op == "delete":
        return gk.delete_object(object_id, 2)
    return gk.redact_object(object_id, 2)


def _state(admin: psycopg.Connection[Any], object_id: str) -> dict[str, Any]:
    row = admin.execute("select groundkit.state_checksum() as checksum,"
                        " (select count(*) from groundkit.content_log) as log_rows,"
                        " (select version from groundkit.objects where object_id = %s) as version,"
                        " (select state from groundkit.objects where object_id = %s) as state",
                        (object_id, object_id)).fetchone()
    assert row is not None
    return dict(row)


def _wait(admin: psycopg.Connection[Any], pred: Callable[[], bool], seconds: float = 15.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.01)
    return False


def _blocked(admin: psycopg.Connection[Any], pid: int) -> bool:
    row = admin.execute("select wait_event_type from pg_stat_activity where pid = %s", (pid,)).fetchone()
    return row is not None and row["wait_event_type"] == "Lock"


def _victim_pid(admin: psycopg.Connection[Any]) -> int | None:
    row = admin.execute("select pid from pg_stat_activity where application_name = 'gk-gate-victim'"
                        " and datname = current_database()").fetchone()
    return None if row is None else int(row["pid"])


def _whole(admin: psycopg.Connection[Any]) -> list[str]:
    problems = structure_problems(admin)
    after = admin.execute("select groundkit.state_checksum() as c").fetchone()
    assert after is not None
    admin.execute("select groundkit.rebuild()")
    rebuilt = admin.execute("select groundkit.state_checksum() as c").fetchone()
    assert rebuilt is not None
    if after["c"] != rebuilt["c"]:
        problems.append("derived state is not a function of the log (checksum changed across rebuild)")
    return problems

_RUN_VICTIM = r"""
import sys, time
from groundkit import Groundkit
gk = Groundkit.connect(sys.argv[1])
gk.conn.execute("set application_name = 'gk-gate-victim'")
with gk.run(flow="tutor", reader="m") as run:
    run.search("kiln glaze", k=5)
    print(run.id, flush=True)
    time.sleep(120)
"""


def _new_object(gk: Groundkit, object_id: str, merged: bool = False) -> None:
    gk.put_object(object_id, 1, "document", "s", "T0", "v1", BODY)
    if merged:
        gk.merge_pending()


def run_section(dbs: GateDatabases, tap: Tap, opts: Any) -> None:
    dsn = dbs.clone()
    try:
        _run(dsn, tap)
    finally:
        dbs.drop(dsn)


def _run(dsn: str, tap: Tap, ops: tuple[str, ...] = OPS, tables: tuple[str, ...] = TABLES) -> None:
    with Groundkit.connect(dsn) as gk, connect_dict(dsn) as admin:
        gk.put_member("m", "T3")
        gk.put_space("s", "T0")
        for op in ops:
            for table in tables:
                _terminate_case(dsn, gk, admin, tap, op, table)
        _client_kill_in_transaction(dsn, gk, admin, tap)
        _client_kill_while_blocked(dsn, gk, admin, tap)
        _client_kill_mid_run(dsn, admin, tap)


def _terminate_case(dsn: str, gk: Groundkit, admin: psycopg.Connection[Any], tap: Tap, op: str, table: str) -> None:
    oid = f"f-{op}-{table}"
    # Chunks still pending are in no term statistics (a merge counts them), so a write that
    # replaces them has nothing to change there: the term_stats case starts from merged chunks.
    _new_object(gk, oid, merged=table == "term_stats")
    before = _state(admin, oid)
    locker = psycopg.connect(dsn, row_factory=dict_row)
    victim = Groundkit.connect(dsn)
    outcome: list[BaseException | object] = []
    problems: list[str] = []
    try:
        locker.execute(sql.SQL("lock table {}.{} in exclusive mode").format(sql.Identifier("groundkit"),
                                                                             sql.Identifier(table)))
        pid = victim.conn.info.backend_pid

        def write() -> None:
            try:
                outcome.append(_call(victim, op, oid))
            except BaseException as exc:
                outcome.append(exc)

        t = threading.Thread(target=write)
        t.start()
        if not _wait(admin, lambda: _blocked(admin, pid)):
            problems.append(f"the {op} never waited on {table}: the kill point was not reached")
        admin.execute("select pg_terminate_backend(%s)", (pid,))
        t.join(timeout=30)
        locker.rollback()
        if outcome and not isinstance(outcome[0], BaseException):
            problems.append(f"the {op} completed although its backend was terminated: {outcome[0]}")
    finally:
        locker.close()
        with contextlib.suppress(Exception):
            victim.close()
    after = _state(admin, oid)
    if after != before:
        problems.append(f"state changed although nothing committed: before {before}, after {after}")
    problems += _whole(admin)
    tap.check(not problems, f"backend killed while {op} waits on {table}: object wholly at its old version",
              problems, counts=Counts(integrity=len(problems)))


def _spawn(dsn: str, mode: str, oid: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", _VICTIM, dsn, mode, oid], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)


def _kill(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


def _client_kill_in_transaction(dsn: str, gk: Groundkit, admin: psycopg.Connection[Any], tap: Tap) -> None:
    oid = "f-client-txn"
    _new_object(gk, oid)
    before = _state(admin, oid)
    proc = _spawn(dsn, "transaction", oid)
    problems = []
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline().strip() for _ in range(2)]
        if lines != ["connected", "written"]:
            problems.append(f"the victim client did not write: {lines}")
    finally:
        _kill(proc)
    if not _wait(admin, lambda: _victim_pid(admin) is None):
        problems.append("the server kept the killed client's backend")
    after = _state(admin, oid)
    if after != before:
        problems.append(f"an uncommitted write survived its client: before {before}, after {after}")
    problems += _whole(admin)
    tap.check(not problems, "client killed after writing inside an open transaction: object wholly at its old "
              "version", problems, counts=Counts(integrity=len(problems)))


def _client_kill_while_blocked(dsn: str, gk: Groundkit, admin: psycopg.Connection[Any], tap: Tap) -> None:
    oid = "f-client-blocked"
    _new_object(gk, oid)
    locker = psycopg.connect(dsn, row_factory=dict_row)
    problems = []
    proc = _spawn(dsn, "autocommit", oid)
    try:
        locker.execute("lock table groundkit.chunks in exclusive mode")
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "connected":
            problems.append("the victim client did not connect")
        if not _wait(admin, lambda: (pid := _victim_pid(admin)) is not None and _blocked(admin, pid)):
            problems.append("the victim's write never waited on chunks")
        _kill(proc)
        locker.rollback()
    finally:
        _kill(proc)
        locker.close()
    _wait(admin, lambda: _victim_pid(admin) is None)
    after = _state(admin, oid)
    version = after["version"]
    if version not in (1, 2):
        problems.append(f"object at version {version}")
    problems += _whole(admin)
    tap.check(not problems, f"client killed while its autocommit write waited on a lock: object wholly at "
              f"version {version} ({'the server finished the statement' if version == 2 else 'rolled back'})",
              problems, counts=Counts(integrity=len(problems)))


def _client_kill_mid_run(dsn: str, admin: psycopg.Connection[Any], tap: Tap) -> None:
    """A client SIGKILLed inside ``gk.run``, after its search was recorded: nothing of the run stays."""
    proc = subprocess.Popen([sys.executable, "-c", _RUN_VICTIM, dsn], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    problems = []
    run_id = ""
    try:
        assert proc.stdout is not None
        run_id = proc.stdout.readline().strip()
        if not run_id:
            problems.append("the victim client did not search inside its run")
    finally:
        _kill(proc)
    if not _wait(admin, lambda: _victim_pid(admin) is None):
        problems.append("the server kept the killed client's backend")
    if run_id:
        row = admin.execute("select (select count(*) from groundkit.runs where run_id::text = %(r)s) as runs,"
                            " (select count(*) from groundkit.run_searches where run_id::text = %(r)s) as searches",
                            {"r": run_id}).fetchone()
        if row != {"runs": 0, "searches": 0}:
            problems.append(f"a killed run left {row}")
    tap.check(not problems, "client killed in the middle of a run: none of the run is recorded (whole or none)",
              problems, counts=Counts(integrity=len(problems)))
