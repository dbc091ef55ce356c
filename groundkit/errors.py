"""The groundkit error hierarchy.

SQLSTATE is the contract between the SQL API and Python: every error the SQL functions raise
on purpose has a ``GKnnn`` code (listed in docs/sql-api.md), and :func:`from_psycopg` maps it to
the class below that carries it, keeping the database's message.
"""

from __future__ import annotations

import re

import psycopg


class GroundkitError(Exception):
    """Base class of every error groundkit raises on purpose."""

    sqlstate: str | None = None

    def __init__(self, message: str, *, sqlstate: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if sqlstate is not None:
            self.sqlstate = sqlstate


class ConfigError(GroundkitError):
    """Unknown or invalid configuration (environment variables, options)."""


class DatabaseUnavailable(GroundkitError):
    """The database could not be reached, or ended the session (SQLSTATE class 08, 57P01-57P03:
    a shutdown, a crash, a terminated backend). The message never contains a password."""


class MigrationError(GroundkitError):
    """The schema is missing, behind, or could not be migrated."""


class InvalidArgument(GroundkitError):
    """An argument is out of bounds or of the wrong shape (GK005)."""

    sqlstate = "GK005"


class UnknownTier(InvalidArgument):
    sqlstate = "GK002"


class UnknownSpace(InvalidArgument):
    sqlstate = "GK003"


class UnknownContentType(InvalidArgument):
    sqlstate = "GK004"


class UnknownObject(InvalidArgument):
    sqlstate = "GK009"


class VersionConflict(GroundkitError):
    """The same object version was written before with different content (GK001)."""

    sqlstate = "GK001"


class InvariantViolation(GroundkitError):
    """A write would break an invariant the database enforces: the append-only log (GK006),
    monotonic versions, durable tombstones, or tier ranks in step with the derived rows (GK007)."""

    sqlstate = "GK007"


class PgvectorMissing(GroundkitError):
    """A dense (vector) feature was asked for on a server without the pgvector extension."""

    sqlstate = "GK008"


class ReaderNotAllowed(GroundkitError):
    """A login bound to one member (``groundkit.login_members``) searched as another (GK010)."""

    sqlstate = "GK010"


class Unauthenticated(GroundkitError):
    """A request to the MCP or HTTP server without a valid bearer token: missing, unknown,
    revoked or expired, all alike (GK014; HTTP 401)."""

    sqlstate = "GK014"


class ContextBudgetTooSmall(InvalidArgument):
    """A context's token budget cannot hold the frame and the first hit (GK005)."""


class UnknownFlow(InvalidArgument):
    """A metered call or run names a flow that is not configured (GK011)."""

    sqlstate = "GK011"


class UnknownRun(InvalidArgument):
    """A run id that names no recorded run (GK012)."""

    sqlstate = "GK012"


class UnknownModel(InvalidArgument):
    """An embedding model that is not registered, or no active model where search needs one (GK015)."""

    sqlstate = "GK015"


class CutoverRefused(GroundkitError):
    """A cutover to an embedding model that still lacks embeddings for current chunks, not
    forced (GK016)."""

    sqlstate = "GK016"


class EmbeddingProviderError(GroundkitError):
    """An embedding (or rerank) provider failed, was unreachable, is not configured, or answered
    vectors that do not fit the model (another dimension, another count). Never answered by
    falling back to another provider (GK017; raised by Python, not by SQL)."""

    sqlstate = "GK017"


class OutboundRefused(GroundkitError):
    """The outbound policy (or the gate itself) refuses a provider call: its texts may not go to
    that provider's class. The message names the rule (``cloud.max_tier``, ``private.closed``,
    ``gate.bypass``: a provider called around the gate), the class, the policy version and how
    many texts; never their content. Nothing was sent (GK023; docs/outbound.md)."""

    sqlstate = "GK023"

    def __init__(self, message: str, *, rule: str = "", policy_version: int | None = None,
                 sqlstate: str | None = None) -> None:
        super().__init__(message, sqlstate=sqlstate)
        self.rule = rule
        self.policy_version = policy_version


class LlmProviderError(GroundkitError):
    """An LLM provider failed, was unreachable, is not configured, or answered something that is
    not a completion. Never answered by falling back to another provider (GK024; raised by
    Python, not by SQL)."""

    sqlstate = "GK024"


class OutboundPolicyInvalid(InvalidArgument):
    """An outbound policy document of another shape, an unknown tier in it, or a change without a
    reason (GK025)."""

    sqlstate = "GK025"


class UnknownLanguage(InvalidArgument):
    """A language groundkit has no text search configuration for (GK026): languages are
    PostgreSQL's Snowball configurations (``groundkit.languages()``)."""

    sqlstate = "GK026"


class NoFreshServer(DatabaseUnavailable):
    """A read routed by the permission fence found no server it may use: the primary is
    unreachable and no replica is provably fresh (GK018; docs/replicas.md). Fails closed: an
    error, never a possibly stale answer."""

    sqlstate = "GK018"


class SampleRefused(InvalidArgument):
    """``record_sample`` named a hit that is not a chunk of a current version the reader may see
    now (GK027): a sample names only what the reader's search returned. Nothing is recorded."""

    sqlstate = "GK027"


class ScratchDatabaseInUse(GroundkitError):
    """A command would replace a database of its own that another session is connected to (the
    demo's, a benchmark's kept one): refused, never ending that session's work (GK028; raised by
    Python, not by SQL)."""

    sqlstate = "GK028"


class DatabaseBusy(GroundkitError):
    """The database did not answer in time, or is busy (GK019): a statement or lock timeout ended
    the statement (the server's 57014 or 55P03, kept as ``sqlstate``), or a server found no
    pooled connection free in time. Nothing was changed; try again. Raised by Python, not by
    SQL; the MCP and HTTP servers answer it with 503 and code GK019."""

    sqlstate = "GK019"


class GateRefused(GroundkitError):
    """A change (``groundkit migrate``, ``groundkit cutover``) refused because the permission gate
    failed on it, could not run, or a certificate offered for it does not certify it; nothing was
    changed (GK020; docs/governance.md)."""

    sqlstate = "GK020"


class Uncertified(GroundkitError):
    """The configuration serving readers has no passing gate certificate (none, a failure, or a
    bypass): ``groundkit serve`` refuses to start on it without ``--allow-ungated`` (GK021)."""

    sqlstate = "GK021"


class AuditFailure(GroundkitError):
    """The audit chain, a checkpoint or an evidence bundle does not verify: a link is broken, a
    checkpoint is not a prefix of today's history, a signature or a digest does not match (GK022)."""

    sqlstate = "GK022"


class ConsoleFormRefused(GroundkitError):
    """A form of the operator console that changes state (log in, log out) came without its CSRF
    token, with a wrong one, or from another site (GK030; HTTP 403). Raised by Python, not by
    SQL. Nothing was changed: reload the page and send the form again."""

    sqlstate = "GK030"


_BY_SQLSTATE: dict[str, type[GroundkitError]] = {
    "GK001": VersionConflict,
    "GK002": UnknownTier,
    "GK003": UnknownSpace,
    "GK004": UnknownContentType,
    "GK005": InvalidArgument,
    "GK006": InvariantViolation,
    "GK007": InvariantViolation,
    "GK008": PgvectorMissing,
    "GK009": UnknownObject,
    "GK010": ReaderNotAllowed,
    "GK011": UnknownFlow,
    "GK012": UnknownRun,
    "GK014": Unauthenticated,
    "GK015": UnknownModel,
    "GK016": CutoverRefused,
    "GK017": EmbeddingProviderError,
    "GK018": NoFreshServer,
    "GK027": SampleRefused,
    "GK028": ScratchDatabaseInUse,
    "GK019": DatabaseBusy,
    "57014": DatabaseBusy,  # query_canceled: statement_timeout (or a cancel request)
    "55P03": DatabaseBusy,  # lock_not_available: lock_timeout, NOWAIT, or a groundkit function's refusal
    "GK023": OutboundRefused,
    "GK024": LlmProviderError,
    "GK025": OutboundPolicyInvalid,
    "GK020": GateRefused,
    "GK021": Uncertified,
    "GK022": AuditFailure,
    "GK026": UnknownLanguage,
    "GK030": ConsoleFormRefused,
}

# admin_shutdown (also pg_terminate_backend), crash_shutdown, cannot_connect_now
_SERVER_GONE = frozenset({"57P01", "57P02", "57P03"})

_PASSWORD_PATTERNS = (
    re.compile(r"(://[^:/@\s]*:)([^@\s]*)(@)"),  # URI userinfo
    re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE),  # key=value DSN
)


def scrub(text: str) -> str:
    """Replace passwords in DSNs inside ``text`` with ``***``."""
    text = _PASSWORD_PATTERNS[0].sub(r"\1***\3", text)
    return _PASSWORD_PATTERNS[1].sub(r"\1***", text)


def from_psycopg(exc: psycopg.Error) -> GroundkitError:
    """The :class:`GroundkitError` for a database error, keeping the server's message."""
    state = exc.sqlstate
    diag = exc.diag
    message = diag.message_primary or str(exc)
    if diag.message_hint:
        message = f"{message} (hint: {diag.message_hint})"
    # no connection (libpq gives no SQLSTATE then), the connection failed, or the server ended
    # the session (shutdown, crash, terminated, not accepting connections yet)
    if (state is None and isinstance(exc, psycopg.OperationalError)) or (
            state is not None and (state.startswith("08") or state in _SERVER_GONE)):
        return DatabaseUnavailable(scrub(message), sqlstate=state)
    if state == "42P01" or state == "42883" or state == "3F000":
        return MigrationError(
            f"{message}: the groundkit schema is missing or out of date; run `groundkit migrate`",
            sqlstate=state,
        )
    cls = _BY_SQLSTATE.get(state or "")
    if cls is not None:
        return cls(message, sqlstate=state)
    if isinstance(exc, psycopg.DataError):
        return InvalidArgument(message, sqlstate=state)
    return GroundkitError(message, sqlstate=state)
