"""The gate's home section: it passes on groundkit as it is, and fails (leaks counted) on a home
feed that answers from a cache, the way a store with permissions stamped at ingest would."""

from __future__ import annotations

import io
from typing import Any

import pytest

from groundkit.client import Groundkit
from groundkit.gate.runner import SECTIONS, GateOptions, run_gate

ONLY_HOME = GateOptions(skip=frozenset(s for s in SECTIONS if s != "home"))


def test_home_section_passes(server_dsn: str) -> None:
    out = io.StringIO()
    summary = run_gate(server_dsn, ONLY_HOME, out=out)
    assert summary.ok, out.getvalue()
    assert summary.sections["home"] == 13
    assert "LangChain retriever: a downgrade between two calls" in out.getvalue()


def test_home_section_fails_on_a_cached_feed(server_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    real = Groundkit.home
    cache: dict[tuple[int, str, str], Any] = {}

    def cached(self: Groundkit, reader_sub: str, mode: Any = "latest", *args: Any, **kw: Any) -> Any:
        key = (id(self), reader_sub, mode)
        if key not in cache:
            cache[key] = real(self, reader_sub, mode, *args, **kw)
        return cache[key]

    monkeypatch.setattr(Groundkit, "home", cached)
    summary = run_gate(server_dsn, ONLY_HOME, out=io.StringIO())
    assert not summary.ok
    assert summary.leaks == 6
