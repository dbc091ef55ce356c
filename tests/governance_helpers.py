"""Test helpers for the gate ledger (docs/governance.md).

:func:`certify` writes the ledger row a passing full gate run would have written for the
configuration a test database serves now, through the owner's ``groundkit.record_gate`` (so it is
chained like any other). Tests of commands that need a certified deployment (``status --check``,
``serve``) start from it instead of running the whole gate for every database; the gate's own
certification is tests/test_governance.py's subject.
"""

from __future__ import annotations

import psycopg
from psycopg.rows import dict_row

from groundkit import deployment
from groundkit.gate.runner import SECTIONS


def certify(dsn: str) -> int:
    """A certified ledger row for ``dsn``'s serving configuration; returns its id."""
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        config = deployment.serving_configuration(conn)
        return deployment.record(conn, {
            "kind": "gate", "command": "tests.governance_helpers.certify", "verdict": "certified", "config": config,
            "sections_run": list(SECTIONS), "passed": True, "checks": 1, "failed": 0,
            "reason": "test fixture: stands for a passing run of the whole gate"})
