"""``groundkit costs``: the spend of metered calls, by flow, model, reader or day."""

from __future__ import annotations

import json
import re
import sys
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Annotated

import typer
from rich.table import Table

from groundkit.cli._common import DsnOption, handle_errors, out
from groundkit.client import Groundkit
from groundkit.errors import InvalidArgument
from groundkit.metering import CostBy, cost_summary

_SPAN = re.compile(r"(\d+)([mhdw])")
_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_since(text: str | None, now: datetime | None = None) -> datetime | None:
    """``7d``, ``12h``, ``30m``, ``2w`` before now, or an ISO date or time (UTC unless it says)."""
    if text is None:
        return None
    span = _SPAN.fullmatch(text.strip())
    if span:
        return (now or datetime.now(UTC)) - timedelta(**{_UNITS[span[2]]: int(span[1])})
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidArgument(f"--since {text!r}: expected 7d, 12h, 30m, 2w or an ISO date") from None
    return at if at.tzinfo else at.replace(tzinfo=UTC)


def _amount(value: Decimal | None) -> str | None:
    """An exact decimal without trailing zeros (``0.001``, ``100``); None stays None."""
    return None if value is None else format(value.normalize(), "f")


@handle_errors
def costs(
    since: Annotated[str | None, typer.Option(help="Only calls since: 7d, 12h, 30m, 2w or an ISO date. "
                                                   "Default: all.")] = None,
    by: Annotated[str, typer.Option(help="Group by flow, model, reader or day (UTC).")] = "flow",
    as_json: Annotated[bool, typer.Option("--json", help="JSON lines instead of a table.")] = False,
    dsn: DsnOption = None,
) -> None:
    """The spend of metered LLM and embedding calls. Calls for a model without a price count in
    `unpriced` (their cost is unknown, never 0); currencies are never added together."""
    if by not in ("flow", "model", "reader", "day"):
        raise InvalidArgument(f"--by {by!r}: expected flow, model, reader or day")
    key: CostBy = by  # type: ignore[assignment]
    start = parse_since(since)
    with Groundkit.connect(dsn) as gk:
        rows = cost_summary(gk, since=start, by=key)
    if as_json:
        for row in rows:
            data = row.model_dump()
            data[by] = data.pop("key")
            data["cost"] = _amount(row.cost)
            sys.stdout.write(json.dumps(data) + "\n")
        return
    table = Table(by, "calls", "tokens in", "tokens out", "cost", "currency", "unpriced",
                  title=f"spend since {start:%Y-%m-%d %H:%M} UTC" if start else "spend, all time")
    for row in rows:
        table.add_row(row.key or "-", str(row.calls), str(row.tokens_in), str(row.tokens_out),
                      _amount(row.cost) or "-", row.currency or "-", str(row.unpriced))
    out.print(table)
