"""`groundkit eval gate`: TAP, the JSON summary, and the exit code, which must be able to say no."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest
import typer
from typer.testing import CliRunner

from groundkit.cli.eval_gate import app as eval_app
from groundkit.client import Groundkit
from groundkit.gate import runner as gate_mod
from groundkit.gate.golden import Hit, Searcher, real_searcher
from groundkit.gate.runner import SECTIONS

# covered by tests/test_gate_concurrency.py and tests/test_gate_surfaces.py
# (dense: tests/test_gate_dense.py runs it; replicas: tests/test_gate_replicas.py)
HEAVY = ["--skip", "faults", "--skip", "concurrency", "--skip", "surfaces", "--skip", "dense", "--skip", "replicas"]


def _cli() -> typer.Typer:
    root = typer.Typer()
    root.add_typer(eval_app, name="eval")

    @root.callback()
    def _root() -> None:
        """groundkit (test harness)."""

    return root


def test_gate_passes_with_tap_and_json(server_dsn: str) -> None:
    result = CliRunner().invoke(_cli(), ["eval", "gate", "--dsn", server_dsn, "--json", "--examples", "3",
                                         "--max-steps", "10", *HEAVY])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["ok"] is True
    assert summary["failed"] == 0 and summary["leaks"] == 0 and summary["resurrections"] == 0
    assert summary["planted_bugs_caught"] == summary["planted_bugs"] == 3
    assert summary["bad_inputs_tried"] >= 120
    assert summary["skipped"] == 5  # the five HEAVY sections
    assert "ok 1 - golden world loads" in result.stderr
    assert "# SKIP" in result.stderr


def test_gate_prints_tap_on_stdout(server_dsn: str) -> None:
    result = CliRunner().invoke(_cli(), ["eval", "gate", "--dsn", server_dsn, "--skip", "model", "--skip",
                                         "planted", "--skip", "bad_input", "--skip", "roles", "--skip",
                                         "side_channels", "--skip", "home", *HEAVY])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "TAP version 13"
    assert lines[-1].startswith("1..")
    assert any(line.startswith("ok ") and "T1 reader does not see T2 post after downgrade" in line for line in lines)


def test_gate_fails_closed_on_a_leak(server_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Swap groundkit.search for one that answers everyone as the T3 member: exit 1, leaks counted."""
    def leaky_factory(gk: Groundkit) -> Searcher:
        real = real_searcher(gk)

        def search(reader_sub: str, query: str, k: int = 10, content_types: Sequence[str] | None = None,
                   space_ids: Sequence[str] | None = None) -> list[Hit]:
            return real("eli", query, k, content_types, space_ids)

        return search

    monkeypatch.setattr(gate_mod, "real_searcher", leaky_factory)
    skip = [x for s in SECTIONS if s != "golden" for x in ("--skip", s)]
    result = CliRunner().invoke(_cli(), ["eval", "gate", "--dsn", server_dsn, "--json", *skip])
    assert result.exit_code == 1
    summary = json.loads(result.stdout)
    assert summary["ok"] is False and summary["leaks"] > 0
    assert "not ok" in result.stderr and "LEAK:" in result.stderr


def test_unknown_section_is_a_clear_error(server_dsn: str) -> None:
    result = CliRunner().invoke(_cli(), ["eval", "gate", "--dsn", server_dsn, "--skip", "nope"])
    assert result.exit_code == 1
    assert "unknown section 'nope'" in result.stderr
