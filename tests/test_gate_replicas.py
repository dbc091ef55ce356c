"""The gate's replicas section: it passes on groundkit as it is, and fails (leaks counted) when the
router's fence is removed (every replica taken to have replayed every permission change)."""

from __future__ import annotations

import io

import pytest

from groundkit import replica_pair, replicas
from groundkit.gate.runner import SECTIONS, GateOptions, run_gate

ONLY_REPLICAS = GateOptions(skip=frozenset(s for s in SECTIONS if s != "replicas"))


@pytest.fixture(autouse=True)
def _binaries() -> None:
    try:
        replica_pair.bin_dir()
    except replica_pair.Unavailable as exc:
        pytest.skip(str(exc))


def test_replicas_section_passes(server_dsn: str) -> None:
    out = io.StringIO()
    summary = run_gate(server_dsn, ONLY_REPLICAS, out=out)
    assert summary.ok, out.getvalue()
    assert summary.sections["replicas"] == 15
    assert "a revoked grant committed while the standby's replay is paused" in out.getvalue()


def test_replicas_section_fails_without_the_fence(server_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replicas, "covers", lambda replica, primary: True)
    summary = run_gate(server_dsn, ONLY_REPLICAS, out=io.StringIO())
    assert not summary.ok
    assert summary.leaks >= 7
