"""Features the console shows when the database (and the installed groundkit) has them.

Each adapter checks for its SQL function with ``to_regprocedure`` and answers
:class:`Unavailable` ("not available in this version") when it is absent, so that a console
talks to an older schema without failing, and lights the panel up once a ``groundkit migrate``
brings the function. The interfaces are the SQL functions' own:

- :func:`explain`: ``groundkit.explain_visibility(reader_sub text, object_id text)`` returning
  ``(step integer, clause text, value text, holds boolean, decides boolean)``, the last row
  ``predicate`` being search's own answer (the owner's and ``groundkit_auditor``'s).
- :func:`gate_ledger`: ``groundkit.deployment_status()`` (is the configuration serving readers
  certified, by which ledger row) and ``groundkit.gate_ledger_rows(max_rows integer)``.
- :func:`verify_chain`: the audit chain's ``groundkit.audit_entries(bigint, integer)`` in SQL and
  :func:`groundkit.audit.verify_chain` in Python.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from groundkit.client import Groundkit

EXPLAIN_FUNCTION = "groundkit.explain_visibility(text, text)"
DEPLOYMENT_FUNCTION = "groundkit.deployment_status()"
LEDGER_FUNCTION = "groundkit.gate_ledger_rows(integer)"
CHAIN_FUNCTION = "groundkit.audit_entries(bigint, integer)"
LEDGER_ROWS = 20


@dataclass(frozen=True)
class Unavailable:
    """A feature this database or this groundkit does not have yet."""

    feature: str
    needs: str  # what brings it

    @property
    def message(self) -> str:
        return f"{self.feature}: not available in this version ({self.needs})"


def has_function(gk: Groundkit, signature: str) -> bool:
    """Whether the database has the function ``signature`` (``schema.name(argument types)``)."""
    return bool(gk._scalar("select to_regprocedure(%(sig)s) is not null as ok", {"sig": signature}))


# -- explain --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Clause:
    step: int
    clause: str
    value: str | None
    holds: bool | None  # None: cannot be judged (a tier clause of an object that does not exist)
    decides: bool


@dataclass(frozen=True)
class Explanation:
    reader_sub: str
    object_id: str
    clauses: tuple[Clause, ...]

    @property
    def visible(self) -> bool:
        """Search's own answer: the ``predicate`` row, else every clause holding."""
        last = next((c for c in self.clauses if c.clause == "predicate"), None)
        if last is not None:
            return last.holds is True
        return all(c.holds is not False for c in self.clauses)

    @property
    def decided_by(self) -> str | None:
        return next((c.clause for c in self.clauses if c.decides), None)


def explain(gk: Groundkit, reader_sub: str, object_id: str) -> Explanation | Unavailable:
    """Why ``reader_sub`` may or may not see ``object_id`` now, clause by clause."""
    if not has_function(gk, EXPLAIN_FUNCTION):
        return Unavailable("explain", "groundkit.explain_visibility arrives with a later groundkit: upgrade, then "
                                      "groundkit migrate")
    rows = gk._fetch("select step, clause, value, holds, decides"
                     "  from groundkit.explain_visibility(%(r)s, %(o)s) order by step",
                     {"r": reader_sub, "o": object_id})
    return Explanation(reader_sub, object_id, tuple(
        Clause(int(r["step"]), str(r["clause"]), r["value"], r["holds"], bool(r["decides"])) for r in rows))


# -- the gate ledger ------------------------------------------------------------------------


@dataclass(frozen=True)
class Deployment:
    certified: bool
    config_hash: str | None
    ledger_id: int | None
    verdict: str | None
    recorded_at: datetime | None
    recorded_by: str | None
    operator: str | None
    certified_by: int | None
    reason: str | None


@dataclass(frozen=True)
class LedgerRow:
    id: int
    recorded_at: datetime
    kind: str
    command: str
    verdict: str
    recorded_by: str | None
    operator: str | None
    config_hash: str
    checks: int | None
    failed: int | None
    reason: str | None


@dataclass(frozen=True)
class GateLedger:
    deployment: Deployment | None
    rows: tuple[LedgerRow, ...]


def _pick(row: dict[str, Any], cls: type[Any]) -> Any:
    return cls(**{name: row.get(name) for name in cls.__dataclass_fields__})


def gate_ledger(gk: Groundkit, limit: int = LEDGER_ROWS) -> GateLedger | Unavailable:
    """Which configuration is certified, when and by which run, and the newest ledger rows."""
    if not (has_function(gk, DEPLOYMENT_FUNCTION) and has_function(gk, LEDGER_FUNCTION)):
        return Unavailable("the gate ledger", "groundkit.deployment_status arrives with a later groundkit: upgrade, "
                                              "then groundkit migrate")
    status = gk._fetch("select * from groundkit.deployment_status()", {})
    rows = gk._fetch("select * from groundkit.gate_ledger_rows(%(n)s)", {"n": limit})
    return GateLedger(_pick(status[0], Deployment) if status else None, tuple(_pick(r, LedgerRow) for r in rows))


# -- the audit chain ------------------------------------------------------------------------


@dataclass(frozen=True)
class ChainCheck:
    ok: bool
    entries: int
    head_seq: int
    head_hash: str
    problems: tuple[str, ...]


def verify_chain(gk: Groundkit) -> ChainCheck | Unavailable:
    """Recompute the audit chain from its entries and today's rows (``groundkit audit verify``)."""
    try:
        audit = importlib.import_module("groundkit.audit")
    except ImportError:
        audit = None
    if audit is None or not hasattr(audit, "verify_chain") or not has_function(gk, CHAIN_FUNCTION):
        return Unavailable("verifying the audit chain", "the audit chain arrives with a later groundkit: upgrade, "
                                                        "then groundkit migrate")
    report = audit.verify_chain(gk)
    problems = tuple(f"#{p.seq}: {p.what}" if p.seq is not None else str(p.what) for p in report.problems)
    return ChainCheck(bool(report.ok), int(report.entries), int(report.head_seq), str(report.head_hash), problems)
