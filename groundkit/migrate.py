"""``groundkit migrate`` as a Python call: the schema change, behind the permission gate.

The gate's part (run its migrate sections on a throwaway database at the target revision, refuse
on a failure, record the verdict in the gate ledger) is :func:`groundkit.deployment.gated_migrate`;
the schema operation itself, ungated, is :func:`groundkit.schema.apply`. This module only chooses
between them, so nothing below it (the servers, the gate, the ledger) depends on it.
"""

from __future__ import annotations

from groundkit.deployment import gated_migrate
from groundkit.schema import MigrationState, apply, migration_sql, migration_state

__all__ = ["MigrationState", "migrate", "migration_sql", "migration_state"]


def migrate(dsn: str, *, gate: bool = True, skip_gate_reason: str | None = None) -> MigrationState:
    """Bring the database at ``dsn`` to the latest schema. Idempotent and safe to run concurrently.

    Gated by default (docs/governance.md): the permission gate's migrate sections run first on a
    throwaway database at the target revision, on the same server; a failure raises
    :class:`~groundkit.errors.GateRefused` and changes nothing; the verdict goes into the gate
    ledger. A configuration already certified is not gated again.

    ``gate=False`` is the bare schema operation (:func:`groundkit.schema.apply`), for databases
    that serve no one (test fixtures, the gate's own throwaway databases, the demo, benchmarks):
    no gate and no ledger row, so the configuration stays uncertified. ``skip_gate_reason``
    applies without the gate and records a bypass with that reason."""
    if gate or skip_gate_reason is not None:
        return gated_migrate(dsn, skip_reason=skip_gate_reason)[0]
    return apply(dsn)
