"""The groundkit schema, ungated: Alembic ``upgrade head`` plus the replaceable SQL, its state
in a database, and the head revision this code expects.

Table changes live in Alembic revisions (``groundkit/migrations/versions``) that never change
once released. Functions and triggers live in ``groundkit/sql/*.sql`` as ``create or replace``
statements and are re-applied by every apply, in file-name order.

Nothing here runs the permission gate: :func:`groundkit.migrate` (``groundkit/migrate.py``) is
the public, gated-by-default entry, built on :func:`apply` through :mod:`groundkit.deployment`.
This module imports neither, so the servers (their head-revision check), the gate (its
throwaway databases) and the deployment ledger can all use it.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path

import psycopg
import sqlalchemy
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from pydantic import BaseModel, ConfigDict

from groundkit.dsn import connect as dsn_connect
from groundkit.dsn import scrub
from groundkit.errors import GroundkitError, MigrationError, from_psycopg

# Advisory under a fixed key, unlike the writers' locks (rows only the owner may lock,
# sql/010_guards.sql): the first migrate runs before any groundkit table exists, and only an
# operator migrates. A role holding this key can make a migrate wait, not stall the app.
LOCK_SQL = "select pg_advisory_xact_lock(hashtextextended('groundkit.migrate', 0))"
SCHEMA_SQL = "create schema if not exists groundkit"

# Alembic's ``context`` is module-level state, so two runs in one process (threads) must take
# turns; the advisory lock above serialises runs in different processes.
_ALEMBIC = threading.Lock()


class MigrationState(BaseModel):
    """What is applied and what is pending. Reading it writes nothing."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    current: tuple[str, ...]
    head: str
    applied: tuple[str, ...]
    pending: tuple[str, ...]
    replaceable_sql: tuple[str, ...]
    #: what the server warned of while migrating (an extension it lacks: pgvector, unaccent)
    warnings: tuple[str, ...] = ()

    @property
    def up_to_date(self) -> bool:
        return not self.pending


# Every migrate records the groundkit version that ran it (sql/089_governance.sql): a component
# of the configuration the gate certifies (docs/governance.md).
RECORD_VERSION_SQL = "select groundkit._record_installed(%s)"


def installed_version() -> str:
    """This groundkit's version, as migrate records it."""
    from groundkit._version import __version__

    return __version__


# Replaceable files that exist in two variants: ``NAME.pgvector.sql`` where the database has the
# ``vector`` extension (their signatures name its types), ``NAME.stubs.sql`` (raising GK008) where not.
PGVECTOR_SUFFIX = ".pgvector.sql"
STUBS_SUFFIX = ".stubs.sql"
HAS_PGVECTOR_SQL = "select exists (select 1 from pg_catalog.pg_extension where extname = 'vector')"


def replaceable_sql() -> list[tuple[str, str]]:
    """The replaceable SQL files (name, text), in the order they are applied (both variants of a
    file that needs pgvector: ``applies`` says which one a database takes)."""
    root = resources.files("groundkit.sql")
    files = sorted(
        (entry for entry in root.iterdir() if entry.name.endswith(".sql")), key=lambda e: e.name
    )
    return [(f.name, f.read_text(encoding="utf-8")) for f in files]


def applies(name: str, pgvector: bool) -> bool:
    """Whether the replaceable file ``name`` is applied to a database with (or without) pgvector."""
    if name.endswith(PGVECTOR_SUFFIX):
        return pgvector
    if name.endswith(STUBS_SUFFIX):
        return not pgvector
    return True


def _script_location() -> Path:
    return Path(str(resources.files("groundkit.migrations")))


def _alembic_config() -> Config:
    cfg = Config(stdout=io.StringIO())
    cfg.set_main_option("script_location", str(_script_location()))
    return cfg


@contextmanager
def _engine_connection(dsn: str) -> Iterator[sqlalchemy.Connection]:
    def creator() -> psycopg.Connection[tuple[object, ...]]:
        # ConfigError or DatabaseUnavailable, without the password (SQLAlchemy passes them on)
        return dsn_connect(dsn)

    engine = sqlalchemy.create_engine("postgresql+psycopg://", creator=creator, poolclass=sqlalchemy.NullPool)
    try:
        with engine.connect() as conn:
            yield conn
    finally:
        engine.dispose()


def apply(dsn: str) -> MigrationState:
    """Bring the database at ``dsn`` to the latest schema, without the gate and without a ledger
    row: the bare schema operation (``groundkit.migrate(dsn, gate=False)``). Idempotent and safe
    to run concurrently."""
    cfg = _alembic_config()
    warnings: list[str] = []
    cfg.attributes["warnings"] = warnings
    try:
        with _engine_connection(dsn) as conn:
            cfg.attributes["connection"] = conn
            with _ALEMBIC:
                command.upgrade(cfg, "head")
            conn.commit()
    except GroundkitError:
        raise
    except sqlalchemy.exc.DBAPIError as exc:
        orig = exc.orig
        if isinstance(orig, psycopg.Error):
            failed = from_psycopg(orig)
            message, sqlstate = scrub(dsn, failed.message), failed.sqlstate
        else:
            message, sqlstate = scrub(dsn, str(exc)), None
    else:
        return migration_state(dsn).model_copy(update={"warnings": tuple(warnings)})
    # raised outside the handler: SQLAlchemy's error holds psycopg's, whose pgconn holds the password
    raise MigrationError(f"migration failed: {message}", sqlstate=sqlstate)


def migration_sql() -> str:
    """The DDL ``migrate`` would run on an empty database, without connecting anywhere."""
    cfg = _alembic_config()
    buf = io.StringIO()
    cfg.output_buffer = buf
    with _ALEMBIC:
        command.upgrade(cfg, "head", sql=True)
    return buf.getvalue()


def head_revision() -> str:
    """The Alembic head revision this code ships: the revision a database must be at to be served."""
    head = ScriptDirectory.from_config(_alembic_config()).get_current_head()
    assert head is not None
    return head


def migration_state(dsn: str) -> MigrationState:
    """Applied and pending revisions of the database at ``dsn``."""
    script = ScriptDirectory.from_config(_alembic_config())
    head = head_revision()
    with _engine_connection(dsn) as conn:
        has_schema = conn.exec_driver_sql(
            "select 1 from pg_namespace where nspname = 'groundkit'"
        ).first()
        current: tuple[str, ...] = ()
        if has_schema is not None:
            ctx = MigrationContext.configure(conn, opts={"version_table_schema": "groundkit"})
            current = tuple(ctx.get_current_heads())
        conn.rollback()
    ordered = [rev.revision for rev in reversed(list(script.walk_revisions()))]
    applied: set[str] = set()
    for rev in current:
        applied.update(r.revision for r in script.iterate_revisions(rev, "base"))
    return MigrationState(
        current=current,
        head=head,
        applied=tuple(r for r in ordered if r in applied),
        pending=tuple(r for r in ordered if r not in applied),
        replaceable_sql=tuple(name for name, _ in replaceable_sql()),
    )
