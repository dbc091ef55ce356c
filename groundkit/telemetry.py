"""OpenTelemetry spans and counters for groundkit's calls, when the ``otel`` extra is installed.

Nothing is configured here: groundkit asks the OpenTelemetry API for its tracer and meter, and
whatever provider the application installed (or none: the API's no-op) receives them. Without
the ``opentelemetry-api`` package every helper is a branch on a module flag and a shared no-op
context, nothing more (evals/bench/telemetry.py measures it).

Attributes say what a call was (flow, mode, k, hit count, the reader's tier rank), never what
it was about: the query text and the reader id are left out unless the application asks for
them with :func:`configure` or ``GROUNDKIT_TELEMETRY_INCLUDE=query,reader`` (docs/telemetry.md).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from typing import Any

from groundkit.errors import ConfigError

__all__ = ["add_cost", "add_hits", "add_outbound", "add_tokens", "configure", "enabled", "included", "span"]

PREFIX = "groundkit."
SENSITIVE = frozenset({"query", "reader"})
INCLUDE_ENV = "GROUNDKIT_TELEMETRY_INCLUDE"

AttrValue = str | bool | int | float

try:  # the optional extra: import once, never configure
    from opentelemetry import metrics as _metrics
    from opentelemetry import trace as _trace
except ImportError:  # pragma: no cover - exercised by the no-package benchmark and test
    _trace = None  # type: ignore[assignment]
    _metrics = None  # type: ignore[assignment]

_ENABLED = _trace is not None
_include: frozenset[str] | None = None  # None: not read from the environment yet
_flow: ContextVar[str | None] = ContextVar("groundkit_flow", default=None)
_counters: dict[str, Any] = {}


class _NoSpan(AbstractContextManager[None]):
    """What :func:`span` returns without OpenTelemetry: enters and leaves, records nothing."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_NO_SPAN = _NoSpan()


def enabled() -> bool:
    """Whether the OpenTelemetry API is importable (spans go to whatever provider is set)."""
    return _ENABLED


def configure(*, include: set[str] | frozenset[str] | None = None) -> None:
    """Opt in to sensitive attributes: ``include`` is a subset of ``{"query", "reader"}``
    (``groundkit.query``: the query text; ``groundkit.reader``: the reader id). ``None`` goes
    back to the environment (``GROUNDKIT_TELEMETRY_INCLUDE``, comma-separated; default none)."""
    global _include
    _include = None if include is None else _checked(frozenset(include))


def _checked(names: frozenset[str]) -> frozenset[str]:
    unknown = sorted(names - SENSITIVE)
    if unknown:
        raise ConfigError(f"unknown telemetry attribute(s) {', '.join(unknown)}; "
                          f"known: {', '.join(sorted(SENSITIVE))}")
    return names


def included() -> frozenset[str]:
    """The sensitive attributes spans carry (read from the environment on first use)."""
    global _include
    if _include is None:
        raw = os.environ.get(INCLUDE_ENV, "")
        _include = _checked(frozenset(p.strip() for p in raw.split(",") if p.strip()))
    return _include


def span(name: str, **attrs: AttrValue | None) -> AbstractContextManager[Any]:
    """A span ``groundkit.<name>`` around a block, current while it runs; each attribute becomes
    ``groundkit.<key>`` (``None`` values are left out; ``query`` and ``reader`` only when
    :func:`configure` includes them). ``flow=`` also tags every span opened inside the block. An
    exception leaving the block is recorded on the span (an ``exception`` event, status ERROR)
    and goes on. Without OpenTelemetry: a shared no-op context."""
    if not _ENABLED:
        return _NO_SPAN
    return _span(name, attrs)


@contextmanager
def _span(name: str, attrs: Mapping[str, AttrValue | None]) -> Iterator[Any]:
    assert _trace is not None
    flow = attrs.get("flow")
    token = _flow.set(str(flow)) if flow is not None else None
    tracer = _trace.get_tracer("groundkit")
    try:
        with tracer.start_as_current_span(PREFIX + name, record_exception=True,
                                          set_status_on_exception=True) as current:
            if current.is_recording():
                current.set_attributes(_attributes(attrs))
            yield current
    finally:
        if token is not None:
            _flow.reset(token)


def _attributes(attrs: Mapping[str, AttrValue | None]) -> dict[str, AttrValue]:
    sensitive = included()
    out: dict[str, AttrValue] = {}
    flow = _flow.get()
    if flow is not None:
        out[PREFIX + "flow"] = flow
    for key, value in attrs.items():
        if value is None or (key in SENSITIVE and key not in sensitive):
            continue
        out[PREFIX + key] = value
    return out


def set_attributes(current: Any, **attrs: AttrValue | None) -> None:
    """Add attributes to a span :func:`span` returned (a no-op without OpenTelemetry or for a
    span nobody records): for what is known only at the end, such as the hit count."""
    if current is not None and current.is_recording():
        current.set_attributes(_attributes(attrs))


# -- counters -------------------------------------------------------------------------------

def _counter(name: str, unit: str, description: str) -> Any:
    counter = _counters.get(name)
    if counter is None:
        assert _metrics is not None
        counter = _metrics.get_meter("groundkit").create_counter(PREFIX + name, unit=unit, description=description)
        _counters[name] = counter
    return counter


def _labels(attrs: Mapping[str, AttrValue | None]) -> dict[str, AttrValue]:
    return {k: v for k, v in _attributes(attrs).items() if not k.endswith(".query") and not k.endswith(".reader")}


def add_hits(n: int, **attrs: AttrValue | None) -> None:
    """Count ``n`` search hits (``groundkit.hits``), with low-cardinality attributes (mode, flow)."""
    if _ENABLED:
        _counter("hits", "{hit}", "Chunks returned by groundkit searches").add(n, _labels(attrs))


def add_tokens(n: int, *, direction: str, **attrs: AttrValue | None) -> None:
    """Count ``n`` tokens (``groundkit.tokens``); ``direction`` is ``in`` or ``out`` (model calls)
    or ``embed``; attributes such as ``model`` and ``flow``."""
    if _ENABLED:
        _counter("tokens", "{token}", "Tokens metered by groundkit").add(n, _labels({**attrs, "direction": direction}))


def add_cost(amount: float, *, currency: str, **attrs: AttrValue | None) -> None:
    """Count ``amount`` of spend in ``currency`` (``groundkit.cost``); attributes such as
    ``model`` and ``flow``. An unpriced call is not counted here (its cost is unknown, not 0)."""
    if _ENABLED:
        _counter("cost", currency, "Spend metered by groundkit").add(amount, _labels({**attrs, "currency": currency}))


def add_outbound(*, decision: str, provider_class: str, kind: str) -> None:
    """Count one decision of the outbound gate (``groundkit.outbound.calls``): sent or refused,
    by provider class and kind of call."""
    if _ENABLED:
        _counter("outbound.calls", "{call}", "Provider calls decided by groundkit's outbound gate").add(
            1, _labels({"decision": decision, "provider_class": provider_class, "kind": kind}))
