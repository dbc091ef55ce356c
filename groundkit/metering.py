"""Cost per flow: meter an LLM or embedding call, and read the spend.

:func:`meter` is the one seam every metered call goes through (the embedding provider adapter,
``run.record_llm``): it prices the call from the configured price table
(:mod:`groundkit.prices`) and records it with ``groundkit.record_call`` on the caller's
connection, so a call metered inside a transaction commits or rolls back with it.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any, Literal
from uuid import UUID

import psycopg
from psycopg import sql
from psycopg.rows import dict_row
from pydantic import BaseModel, ConfigDict

from groundkit.config import Settings
from groundkit.errors import from_psycopg
from groundkit.prices import PriceTable
from groundkit.session import Session
from groundkit.steps import Op, Query, drive

__all__ = ["CostRow", "MeteredCall", "add_flow", "cost_summary", "meter"]

CallKind = Literal["llm", "embedding"]
CostBy = Literal["flow", "model", "reader", "day"]


class MeteredCall(BaseModel):
    """A recorded call: its id in ``groundkit.calls`` and its cost (``None``: unpriced)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    call_id: int
    cost: Decimal | None
    currency: str | None


class CostRow(BaseModel):
    """The spend of one key (a flow, model, reader or UTC day) in one currency. Unpriced calls
    form the key's row with ``currency`` and ``cost`` None."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    key: str | None
    currency: str | None
    calls: int
    tokens_in: int
    tokens_out: int
    cost: Decimal | None
    unpriced: int


Target = Session | psycopg.Connection[Any]


def _fetch(target: Target, query: str | sql.Composable, params: dict[str, Any]) -> list[dict[str, Any]]:
    conn = target.conn if isinstance(target, Session) else target
    try:
        with conn.cursor(row_factory=dict_row) as cur:
            return cur.execute(query, params).fetchall()  # type: ignore[arg-type]
    except psycopg.Error as exc:
        raise from_psycopg(exc) from exc


def meter(
    target: Target,
    *,
    flow: str,
    model: str,
    kind: CallKind,
    tokens_in: int,
    tokens_out: int,
    run_id: UUID | str | None = None,
    reader: str | None = None,
    prices: PriceTable | None = None,
) -> MeteredCall:
    """Record one call on ``target`` (a :class:`~groundkit.Groundkit` or a psycopg connection),
    priced from ``prices`` (default: the table ``GROUNDKIT_PRICES`` names). An unknown flow
    raises :class:`~groundkit.errors.UnknownFlow`, negative tokens
    :class:`~groundkit.errors.InvalidArgument`; nothing is recorded then."""
    return drive(meter_steps(flow=flow, model=model, kind=kind, tokens_in=tokens_in, tokens_out=tokens_out,
                             run_id=run_id, reader=reader, prices=prices),
                 lambda step: _fetch(target, step.statement, dict(step.params)))  # type: ignore[union-attr]


def meter_steps(*, flow: str, model: str, kind: CallKind, tokens_in: int, tokens_out: int,
                run_id: UUID | str | None = None, reader: str | None = None,
                prices: PriceTable | None = None) -> Op[MeteredCall]:
    """:func:`meter` as an operation (:mod:`groundkit.steps`), for either client's driver."""
    table = prices if prices is not None else Settings.from_env().price_table()
    price = table.price(model)
    cost = currency = None
    if price is not None and tokens_in >= 0 and tokens_out >= 0:  # negative tokens: SQL refuses them
        cost, currency = price.cost(tokens_in, tokens_out), price.currency
    rows = yield Query(
        "select groundkit.record_call(%(flow)s, %(model)s, %(kind)s, %(tokens_in)s, %(tokens_out)s,"
        " %(cost)s, %(currency)s, %(run_id)s::uuid, %(reader)s) as call_id",
        {"flow": flow, "model": model, "kind": kind, "tokens_in": tokens_in, "tokens_out": tokens_out,
         "cost": cost, "currency": currency, "run_id": None if run_id is None else str(run_id), "reader": reader})
    return MeteredCall(call_id=rows[0]["call_id"], cost=cost, currency=currency)


def cost_summary(target: Target, *, since: datetime | None = None,
                 by: CostBy = "flow") -> list[CostRow]:
    """The spend since ``since`` (all time: None), grouped ``by`` flow, model, reader or UTC day
    (``groundkit.cost_summary``; the owner's, or an auditor's, to read)."""
    rows = _fetch(target, "select * from groundkit.cost_summary(%(since)s, %(by)s)", {"since": since, "by": by})
    return [CostRow.model_validate(r) for r in rows]


def add_flow(target: Target, flow: str) -> bool:
    """Configure ``flow`` for metered calls and runs (``groundkit.add_flow``, the owner's);
    False if it was there already. Flows are never removed."""
    return bool(_fetch(target, "select groundkit.add_flow(%(flow)s) as added", {"flow": flow})[0]["added"])
