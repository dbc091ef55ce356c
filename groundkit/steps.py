"""Operations written once, run by two drivers (docs/design.md, "sync and async").

An operation is a generator: it validates its arguments, then yields what it needs done, a
:class:`Query` (one statement; it receives the rows) or a :class:`Transmit` (one provider call:
an embedding, a completion; it receives the result), and returns its answer, built from those
rows into groundkit's models. It does no I/O itself. A driver runs it: the sync one
(:meth:`groundkit.session.Session._run`) on a ``psycopg.Connection``, the async one
(:meth:`groundkit.session.AsyncSession._run`) on a ``psycopg.AsyncConnection``. A step that
fails is thrown into the operation as a :class:`~groundkit.errors.GroundkitError`, so what an
operation does about an error (the sampler's refusal, a read-only transaction) is written once
too.

This is psycopg's own shape (its connection's generators and its two ``wait`` functions) and
that of sans-IO protocol libraries (h11, hyper-h2): the rules, the SQL and the row mapping live
in the generator; the drivers are a few lines that only move bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from psycopg import sql

from groundkit.errors import GroundkitError

__all__ = ["Op", "Query", "Step", "Transmit", "drive", "rows", "scalar"]

T = TypeVar("T")

#: which connection a statement goes to when a caller has several (the outbound gate reads its
#: policy from one and may record to another); a client's driver runs both on its own
Role = Literal["client", "policy", "record"]


@dataclass(frozen=True)
class Query:
    """One statement and its parameters; the operation receives its rows as dicts.
    ``savepoint``: run it inside ``conn.transaction()`` (a savepoint of the caller's
    transaction, or its own), so that its failure leaves the caller's transaction usable."""

    statement: str | sql.Composable
    params: Mapping[str, Any] = field(default_factory=dict)
    savepoint: bool = False
    role: Role = "client"


@dataclass(frozen=True)
class Transmit:
    """A blocking provider call (CPU-bound model inference, or an HTTP request through the
    outbound gate's ticket): the sync driver calls it, the async one in a worker thread with the
    caller's context (telemetry spans, the gate's ticket)."""

    call: Callable[[], Any]


Step = Query | Transmit
Op = Generator[Step, Any, T]


def drive(op: Op[T], run_step: Callable[[Step], Any]) -> T:
    """Run ``op`` to its answer with ``run_step`` (a sync driver's one step). An error of a
    step goes into the operation, which may handle it; one it does not handle propagates."""
    try:
        step = next(op)
        while True:
            try:
                result = run_step(step)
            except GroundkitError as exc:
                step = op.throw(exc)
            else:
                step = op.send(result)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    finally:
        op.close()


def rows(statement: str | sql.Composable, params: Mapping[str, Any] | None = None) -> Op[list[dict[str, Any]]]:
    """The rows of one statement (the building block of the others)."""
    result: list[dict[str, Any]] = yield Query(statement, params or {})
    return result


def scalar(statement: str | sql.Composable, params: Mapping[str, Any] | None = None) -> Op[Any]:
    """The first column of the first row."""
    result = yield from rows(statement, params)
    return next(iter(result[0].values()))
