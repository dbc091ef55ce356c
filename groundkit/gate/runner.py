"""``groundkit eval gate``: the permission-leak and staleness gate, run fail-closed.

Sections, each on fresh throwaway databases (:mod:`groundkit.gate.throwaway`):

- ``golden``: the golden permission set: grid vs grid.txt, queries, scenario steps.
- ``planted``: the golden set against deliberately broken search variants; each must be caught.
- ``model``: a hypothesis state machine against the pure model (:mod:`groundkit.gate.stateful`).
- ``concurrency``: writers and readers at once, judged at each reader's exact snapshot.
- ``faults``: backends and clients killed mid-write; every object whole at its old or new version.
- ``roles``: least privilege: the privilege grid, and non-superuser logins trying both doors.
- ``bad_input``: hostile and malformed input; a clear error and nothing changed.
- ``side_channels``: what a reader's search tells it (DEBUG lines, branches taken) about content
  it may not see: nothing.
- ``home``: the home feed, engagement and the framework retrievers keep the live predicate.
- ``surfaces``: the golden set again through the HTTP API and the MCP server, over loopback, as
  each reader's bearer token (skipped, saying so, without the ``http`` and ``mcp`` extras).
- ``dense``: the golden set through dense and hybrid search, and an embedding-model swap
  (:mod:`groundkit.gate.dense`; skipped, saying so, without pgvector).
- ``replicas``: a primary and a streaming standby with its replay paused: no change of authority
  or visibility is served stale through the fenced router, and without the fence the same cases
  leak (skipped, saying so, where the embedded server binaries are missing).

Any failing check makes :attr:`GateSummary.ok` false, and the CLI exits non-zero.
"""

from __future__ import annotations

import contextlib
import io
import time
from collections.abc import Callable
from typing import TextIO

from pydantic import BaseModel, ConfigDict, Field

from groundkit.client import Groundkit
from groundkit.embedders import EmbeddingModel
from groundkit.gate import planted
from groundkit.gate.golden import GoldenRun, load_golden, load_grid, real_searcher
from groundkit.gate.tap import Counts, Tap
from groundkit.gate.throwaway import GateDatabases, connect_dict

SECTIONS = ("golden", "planted", "model", "concurrency", "faults", "roles", "bad_input", "side_channels", "home",
            "surfaces", "dense", "replicas")


class GateOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    examples: int = Field(default=40, ge=1, le=10_000)  # hypothesis examples
    max_steps: int = Field(default=25, ge=1, le=1_000)  # rules per example
    concurrency_ops: int = Field(default=240, ge=8, le=100_000)  # writes across all writers
    concurrency_seconds: float = Field(default=60.0, gt=0)  # hard bound on the concurrent phase
    seed: int = 0
    skip: frozenset[str] = frozenset()
    # The dense section embeds with this model through its provider (groundkit cutover certifies
    # the model it switches to this way); None: the test double (groundkit/gate/dense_double.py).
    dense_model: EmbeddingModel | None = None


class GateSummary(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    ok: bool
    checks: int
    passed: int
    failed: int
    todo: int
    skipped: int
    leaks: int
    resurrections: int
    missing: int
    stale: int
    wrong_status: int
    bad_inputs_tried: int
    bad_inputs_failed: int
    integrity: int
    privileges: int
    planted_bugs: int
    planted_bugs_caught: int
    duration_s: float
    sections: dict[str, int]
    failures: tuple[str, ...]
    todos: tuple[str, ...]


# -- sections -------------------------------------------------------------------------------


def run_golden(dbs: GateDatabases, tap: Tap, opts: GateOptions) -> None:
    _, _, grid = load_grid()
    dsn = dbs.clone()
    try:
        with Groundkit.connect(dsn) as gk, connect_dict(dsn) as admin:
            GoldenRun(gk, admin, real_searcher(gk), tap, load_golden(), grid, explain=True).run()
    finally:
        dbs.drop(dsn)


def run_planted(dbs: GateDatabases, tap: Tap, opts: GateOptions) -> None:
    _, _, grid = load_grid()
    for name, variant in planted.VARIANTS.items():
        dsn = dbs.clone()
        try:
            with Groundkit.connect(dsn) as gk, connect_dict(dsn) as admin:
                planted.install(admin)
                inner = Tap(io.StringIO())
                GoldenRun(gk, admin, planted.planted_searcher(admin, name), inner, load_golden(), grid).run()
        finally:
            dbs.drop(dsn)
        failed = inner.failed
        c = inner.counts
        caught = bool(failed) and (c.leaks + c.missing + c.resurrections + c.stale) > 0
        tap.check(caught, f"planted bug '{name}' ({variant['what']}) is caught by the golden set: "
                  f"{len(failed)} failing checks ({c.leaks} leaks, {c.missing} missing)",
                  [] if caught else ["the golden set passed against a broken predicate: the gate cannot fail"])
        tap.tally("planted_bugs")
        tap.tally("planted_bugs_caught", int(caught))


def _section_runners() -> dict[str, Callable[[GateDatabases, Tap, GateOptions], None]]:
    runners: dict[str, Callable[[GateDatabases, Tap, GateOptions], None]] = {
        "golden": run_golden,
        "planted": run_planted,
    }
    try:
        from groundkit.gate import stateful

        runners["model"] = stateful.run_section
    except ImportError:
        pass
    from groundkit.gate import bad_input, concurrency, faults, roles, surfaces

    runners["concurrency"] = concurrency.run_section
    runners["faults"] = faults.run_section
    runners["roles"] = roles.run_section
    runners["bad_input"] = bad_input.run_section
    from groundkit.gate import side_channels

    runners["side_channels"] = side_channels.run_section

    from groundkit.gate import home

    runners["home"] = home.run_section

    runners["surfaces"] = surfaces.run_section

    from groundkit.gate import dense

    runners["dense"] = dense.run_section

    from groundkit.gate import replicas

    runners["replicas"] = replicas.run_section
    return runners


def run_gate(server_dsn: str | None, options: GateOptions | None = None, out: TextIO | None = None,
             progress: Callable[[str], None] | None = None, dbs: GateDatabases | None = None) -> GateSummary:
    """Run the gate against a fresh database on ``server_dsn``'s server (or a throwaway embedded
    one when None), printing TAP to ``out``. Returns the summary; never raises for a failing check.
    ``dbs``: throwaway databases already made (their template migrated), instead of new ones."""
    with contextlib.nullcontext(dbs) if dbs is not None else GateDatabases(server_dsn) as made:
        return _run_sections(made, options or GateOptions(), Tap(out), progress)


def _run_sections(dbs: GateDatabases, opts: GateOptions, tap: Tap,
                  progress: Callable[[str], None] | None) -> GateSummary:
    started = time.monotonic()
    tap.header()
    per_section: dict[str, int] = {}
    runners = _section_runners()
    for section in SECTIONS:
        tap.section = section
        tap.comment(f"== {section} ==")
        if progress is not None:
            progress(section)
        before = len(tap.results)
        if section in opts.skip:
            tap.skip(f"{section} section", "skipped on request (--skip)")
        elif section not in runners:
            tap.check(False, f"{section} section runs", ["hypothesis is not installed: pip install hypothesis"])
        else:
            try:
                runners[section](dbs, tap, opts)
            except Exception as exc:  # a crashing section fails the gate, it never passes it
                tap.check(False, f"{section} section ran to completion", [f"{type(exc).__name__}: {exc}"],
                          counts=Counts(integrity=1))
        per_section[section] = len(tap.results) - before
    tap.plan()
    results = tap.results
    c = tap.counts
    failed = tap.failed
    return GateSummary(
        ok=not failed,
        checks=len(results),
        passed=sum(1 for r in results if r.ok and r.skip is None),
        failed=len(failed),
        todo=sum(1 for r in results if r.todo is not None),
        skipped=sum(1 for r in results if r.skip is not None),
        leaks=c.leaks, resurrections=c.resurrections, missing=c.missing, stale=c.stale,
        wrong_status=c.wrong_status, bad_inputs_tried=tap.tallies.get("bad_inputs_tried", 0),
        bad_inputs_failed=c.bad_inputs_failed,
        integrity=c.integrity, privileges=c.privileges,
        planted_bugs=tap.tallies.get("planted_bugs", 0),
        planted_bugs_caught=tap.tallies.get("planted_bugs_caught", 0),
        duration_s=round(time.monotonic() - started, 2),
        sections=per_section,
        failures=tuple(f"{r.number} - {r.description}" for r in failed),
        todos=tuple(f"{r.number} - {r.description}: {r.todo}" for r in results if r.todo is not None),
    )
