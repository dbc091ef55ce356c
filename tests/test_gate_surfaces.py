"""The gate's surfaces section: the golden set through the HTTP API and the MCP server, and it
can fail (a surface that reads as the wrong member is caught)."""

from __future__ import annotations

import io

import pytest

from groundkit.gate import surfaces
from groundkit.gate.golden import Golden, load_golden
from groundkit.gate.tap import Tap
from groundkit.gate.throwaway import GateDatabases
from groundkit.serve.models import SearchInput, SearchResult
from groundkit.serve.service import ReadService


def _run(server_dsn: str) -> Tap:
    tap = Tap(io.StringIO())
    with GateDatabases(server_dsn) as dbs:
        surfaces.run_section(dbs, tap, None)
    return tap


def test_golden_set_through_both_surfaces(server_dsn: str) -> None:
    tap = _run(server_dsn)
    assert not tap.failed, [f"{r.description}: {r.diagnostics}" for r in tap.failed]
    described = [r.description for r in tap.results]
    for surface in ("http", "mcp"):
        mine = [d for d in described if d.startswith(f"{surface}: ")]
        assert len(mine) > 30
        assert any("grid matches the model after" in d and "downgrade" in d.lower() for d in mine), mine


def _world_only() -> Golden:
    """The golden world and its queries without the scenario's steps: the grid of the world is
    where a surface reading as the wrong member leaks first, and the whole run (every step
    through both surfaces) is the passing test's above, at a fraction of its time."""
    return load_golden().model_copy(update={"steps": ()})


def test_a_surface_reading_as_the_wrong_member_fails_the_section(server_dsn: str,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    real = ReadService.search
    monkeypatch.setattr(surfaces, "load_golden", _world_only)

    async def as_eli(self: ReadService, member: str, request: SearchInput) -> SearchResult:
        return await real(self, "eli", request)  # the T3 member, whoever asked

    monkeypatch.setattr(ReadService, "search", as_eli)
    tap = _run(server_dsn)
    assert tap.counts.leaks > 0
    assert {r.description.split(":")[0] for r in tap.failed} == {"http", "mcp"}


def test_without_the_extras_the_section_is_skipped(server_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(surfaces, "missing_extras", lambda: ["mcp"])
    tap = _run(server_dsn)
    assert not tap.failed and len(tap.results) == 1 and tap.results[0].skip is not None
    assert "groundkit[http,mcp]" in tap.results[0].skip
