"""The gate's dense section: the golden set through search_dense and search_hybrid (with the
gate's test-double embedder), and a model swap, passes on groundkit as it is, and fails on a
dense leg whose permission predicate is dropped."""

from __future__ import annotations

import io

import pytest

from groundkit.gate import dense
from groundkit.gate.golden import load_golden
from groundkit.gate.runner import SECTIONS, GateOptions, run_gate

ONLY_DENSE = GateOptions(skip=frozenset(s for s in SECTIONS if s != "dense"))


def test_dense_section_passes(server_dsn: str) -> None:
    out = io.StringIO()
    summary = run_gate(server_dsn, ONLY_DENSE, out=out)
    text = out.getvalue()
    assert summary.ok, text
    assert summary.sections["dense"] > 100
    for line in ("[dense] reader x object grid of the golden world matches grid.txt",
                 "[hybrid] reader x object grid of the golden world matches grid.txt",
                 "[dense] step commits as the rules say: downgrade: cara drops from T2 to T1",
                 "[hybrid] step commits as the rules say: re-tier down",
                 "[dense] a cutover to a model that lags is refused (GK016)",
                 "[dense] reader x object grid matches the model after rolling back to gate-double"):
        assert line in text, line
    assert "pgvector is not installed" not in text


def test_dense_section_fails_on_a_post_filter_free_leg(server_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A dense leg that answers as the most privileged reader (no predicate of its own) leaks."""
    real = dense.dense_searcher

    def leaky(gk, admin, mode, vectors=None):  # type: ignore[no-untyped-def]
        inner = real(gk, admin, mode, vectors)
        return lambda reader_sub, query, k=10, content_types=None, space_ids=None: inner(
            "eli", query, k, content_types, space_ids)

    monkeypatch.setattr(dense, "dense_searcher", leaky)
    # the world's grid leaks already: the scenario's steps (the passing test runs them) are left out
    monkeypatch.setattr(dense, "load_golden", lambda: load_golden().model_copy(update={"steps": ()}))
    summary = run_gate(server_dsn, ONLY_DENSE, out=io.StringIO())
    assert not summary.ok
    assert summary.leaks > 0
