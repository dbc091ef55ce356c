"""The console's templates (``templates/``, Jinja2) and the filters they format values with.

Autoescaping is on for every template, and undefined names are errors. The one filter that
returns markup, :func:`bar`, builds it from numbers alone.
"""

from __future__ import annotations

import math
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup

from groundkit.cli.citations import where
from groundkit.console.queries import Unreadable


def when(value: datetime | None) -> str:
    """A time as ``2026-12-06 03:24:12 UTC``."""
    if value is None:
        return "-"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def ago(value: datetime | None, now: datetime | None = None) -> str:
    """How long before now: ``42 s``, ``17 min``, ``3.5 h``, ``2.1 d``."""
    if value is None:
        return "-"
    seconds = ((now or datetime.now(UTC)) - value).total_seconds()
    return seconds_text(seconds)


def seconds_text(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def num(value: float | int | None, digits: int = 0) -> str:
    """A number with thousands separators; ``-`` for none, ``∞`` for infinity."""
    if value is None:
        return "-"
    if isinstance(value, float) and math.isinf(value):
        return "∞"
    return f"{value:,.{digits}f}" if digits else f"{round(value):,}"


def money(value: Decimal | float | None) -> str:
    """An exact amount without trailing zeros (``0.0015``, ``12``)."""
    if value is None:
        return "-"
    return format(Decimal(str(value)).normalize(), "f")


def epoch(value: datetime | date) -> str:
    """Seconds since the epoch (a chart's x), for a time or a UTC day."""
    if not isinstance(value, datetime):
        value = datetime(value.year, value.month, value.day, tzinfo=UTC)
    return f"{value.timestamp():.0f}"


def day_epoch(day: str | None) -> str:
    """A ``YYYY-MM-DD`` day's start in seconds since the epoch."""
    return epoch(date.fromisoformat(day)) if day else ""


def bar(value: float | int | Decimal | None, top: float | int | Decimal | None) -> Markup:
    """A bar as long as ``value`` is of ``top``: an inline SVG of numbers only (no style
    attribute, so the Content-Security-Policy needs no ``unsafe-inline``)."""
    if value is None or not top or float(top) <= 0:
        return Markup("")
    share = max(0.0, min(1.0, float(value) / float(top)))
    width = f"{100 * share:.2f}"
    return Markup('<svg class="bar" viewBox="0 0 100 10" preserveAspectRatio="none" aria-hidden="true">'
                  f'<rect width="{width}" height="10"></rect></svg>')


def peak(values: Any) -> float:
    """The largest of ``values`` (None ignored); 0.0 for none."""
    found = [float(v) for v in values if v is not None]
    return max(found) if found else 0.0


class Renderer:
    """Renders the console's pages; ``base`` is the path prefix links start with."""

    def __init__(self, base: str = "") -> None:
        self.base = base
        self.env = Environment(loader=PackageLoader("groundkit.console", "templates"), autoescape=True,
                               undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
        self.env.filters.update(when=when, ago=ago, num=num, money=money, epoch=epoch, day_epoch=day_epoch,
                                bar=bar, seconds=seconds_text)
        self.env.globals.update(peak=peak, base=base, time_rows=time_rows, where=where, spend_charts=spend_charts,
                                quality_chart=quality_chart)
        self.env.tests.update(unreadable=lambda v: isinstance(v, Unreadable))

    def page(self, template: str, **context: Any) -> str:
        return self.env.get_template(template).render(**context)


# -- chart data: (x as epoch seconds, the x as text, one value per series) ------------------

ChartRows = list[tuple[str, str, tuple[Any, ...]]]


def time_rows(points: Any, digits: int | None = None) -> ChartRows:
    """``(datetime, values)`` pairs as chart rows."""
    def fmt(v: Any) -> Any:
        return None if v is None else round(float(v), digits) if digits is not None else v

    return [(epoch(at), when(at)[:-7] if isinstance(at, datetime) else str(at), tuple(fmt(v) for v in values))
            for at, values in points]


def spend_charts(page: Any) -> dict[str, tuple[tuple[str, ...], ChartRows]]:
    """The Spend page's two series per UTC day: cost per currency, and calls (priced, unpriced)."""
    currencies = page.currencies
    cost: dict[str, dict[str, Decimal]] = {}
    calls: dict[str, list[int]] = {}
    for r in page.by_day:
        if r.key is None:
            continue
        if r.currency is not None and r.cost is not None:
            cost.setdefault(r.key, {})[r.currency] = r.cost
        counted = calls.setdefault(r.key, [0, 0])
        counted[0] += r.calls - r.unpriced
        counted[1] += r.unpriced
    days = sorted(set(cost) | set(calls))
    return {
        "cost": (currencies, [(day_epoch(d), d, tuple(money(cost.get(d, {}).get(c)) if cost.get(d, {}).get(c)
                                                       is not None else None for c in currencies)) for d in days]),
        "calls": (("priced", "unpriced"), [(day_epoch(d), d, tuple(calls.get(d, [0, 0]))) for d in days]),
    }


def quality_chart(rows: Any, key: str) -> dict[str, tuple[tuple[str, ...], ChartRows]]:
    """nDCG@10 over time per collection (or labels file), one series per ``key`` (``arm`` or
    ``tier_rank``), one row per stored run."""
    charts: dict[str, tuple[tuple[str, ...], ChartRows]] = {}
    by_collection: dict[str, list[Any]] = {}
    for r in rows:
        by_collection.setdefault(r.collection, []).append(r)
    for collection, items in by_collection.items():
        names = tuple(dict.fromkeys(str(getattr(r, key)) for r in items))
        runs: dict[Any, tuple[datetime, dict[str, float]]] = {}
        for r in items:
            _, values = runs.setdefault(r.eval_id, (r.recorded_at, {}))
            values[str(getattr(r, key))] = r.ndcg_10
        points = sorted(runs.values(), key=lambda p: p[0])
        charts[collection] = (tuple(f"rank {n}" if key == "tier_rank" else n for n in names),
                              time_rows(((at, tuple(v.get(n) for n in names)) for at, v in points), digits=4))
    return charts
