"""groundkit: permission-correct retrieval inside one Postgres database."""

from groundkit.client import Groundkit, connect, resolve_dsn
from groundkit.errors import (
    ConfigError,
    DatabaseUnavailable,
    GroundkitError,
    InvalidArgument,
    InvariantViolation,
    MigrationError,
    PgvectorMissing,
    UnknownContentType,
    UnknownObject,
    UnknownSpace,
    UnknownTier,
    VersionConflict,
)
from groundkit.migrate import MigrationState, migrate, migration_sql, migration_state
from groundkit.models import (
    ContentObject,
    Due,
    IndexStatus,
    MaintenanceReport,
    MaintenanceStep,
    Member,
    SearchHit,
    Segment,
    Space,
    WorkerHeartbeat,
    WriteResult,
    WriteStatus,
)

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "ContentObject",
    "DatabaseUnavailable",
    "Due",
    "Groundkit",
    "GroundkitError",
    "IndexStatus",
    "InvalidArgument",
    "InvariantViolation",
    "MaintenanceReport",
    "MaintenanceStep",
    "Member",
    "MigrationError",
    "MigrationState",
    "PgvectorMissing",
    "SearchHit",
    "Segment",
    "Space",
    "UnknownContentType",
    "UnknownObject",
    "UnknownSpace",
    "UnknownTier",
    "VersionConflict",
    "WorkerHeartbeat",
    "WriteResult",
    "WriteStatus",
    "connect",
    "migrate",
    "migration_sql",
    "migration_state",
    "resolve_dsn",
]
