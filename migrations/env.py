"""Alembic environment for groundkit (shipped inside the wheel as ``groundkit.migrations``).

Everything runs in one transaction under an advisory lock, so two concurrent ``migrate`` runs
are safe: the second waits, then finds the schema at head. After the revisions, the
replaceable SQL in ``groundkit/sql`` (functions, triggers) is re-applied in the same transaction.
"""

from __future__ import annotations

import sys

from alembic import context
from psycopg import sql

from groundkit.schema import (
    HAS_PGVECTOR_SQL,
    LOCK_SQL,
    PGVECTOR_SUFFIX,
    RECORD_VERSION_SQL,
    SCHEMA_SQL,
    STUBS_SUFFIX,
    applies,
    installed_version,
    replaceable_sql,
)

config = context.config


def run_migrations_offline() -> None:
    out = config.output_buffer or sys.stdout
    context.configure(
        dialect_name="postgresql",
        version_table_schema="groundkit",
        transactional_ddl=True,
        output_buffer=out,
    )
    with context.begin_transaction():
        out.write(f"{LOCK_SQL};\n\n{SCHEMA_SQL};\n\n")
        context.run_migrations()
        # offline, the server is unknown: the variants that work without pgvector
        for name, text in replaceable_sql():
            if applies(name, pgvector=False):
                out.write(f"-- groundkit/sql/{name}\n{text}\n")
        record = sql.SQL(RECORD_VERSION_SQL.replace("%s", "{}")).format(sql.Literal(installed_version()))
        out.write(f"{record.as_string(None)};\n")


def run_migrations_online() -> None:
    connection = config.attributes["connection"]
    context.configure(
        connection=connection,
        version_table_schema="groundkit",
        transactional_ddl=True,
        transaction_per_migration=False,
    )
    # The raw psycopg connection, so that SQL text is sent as is (no parameter parsing).
    raw = connection.connection.driver_connection
    # the server's warnings (an extension it lacks), for migrate to report
    warnings = config.attributes.get("warnings")
    if warnings is not None:
        raw.add_notice_handler(
            lambda d: warnings.append(d.message_primary) if d.severity_nonlocalized == "WARNING" else None)
    with context.begin_transaction():
        raw.execute(LOCK_SQL)
        raw.execute(SCHEMA_SQL)
        context.run_migrations()
        # (tests that build an older schema set revisions_only: today's SQL needs today's tables)
        if not config.attributes.get("revisions_only"):
            for name, text in replaceable_sql():
                # asked per file: an earlier file (sql/086_dense.sql) may have created the extension
                if name.endswith((PGVECTOR_SUFFIX, STUBS_SUFFIX)):
                    row = raw.execute(HAS_PGVECTOR_SQL).fetchone()
                    if not applies(name, pgvector=bool(row and row[0])):
                        continue
                raw.execute(text)
            # the version that ran this migrate: a component of the configuration the gate certifies
            raw.execute(RECORD_VERSION_SQL, (installed_version(),))


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
