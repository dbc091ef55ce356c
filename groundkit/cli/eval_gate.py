"""``groundkit eval gate``: the permission-leak and staleness gate, fail-closed.

TAP goes to stdout (or, with ``--json``, the JSON summary goes to stdout and TAP to stderr);
progress and errors go to stderr. The exit code is 0 only when every check passed.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from groundkit.cli._common import DsnOption, err, handle_errors
from groundkit.config import Settings
from groundkit.errors import InvalidArgument
from groundkit.gate.runner import SECTIONS, GateOptions, run_gate

app = typer.Typer(help="Evaluations: the permission gate.", no_args_is_help=True,
                  rich_markup_mode="markdown")


@handle_errors
def gate(
    dsn: DsnOption = None,
    embedded: Annotated[bool, typer.Option(
        "--embedded", help="Use a throwaway embedded PostgreSQL even if GROUNDKIT_DSN is set.")] = False,
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print a JSON summary on stdout (TAP then goes to stderr).")] = False,
    examples: Annotated[int, typer.Option(help="Hypothesis examples for the model check.")] = 40,
    max_steps: Annotated[int, typer.Option(help="Calls per hypothesis example.")] = 25,
    concurrency_ops: Annotated[int, typer.Option(help="Writes in the concurrency section.")] = 240,
    seed: Annotated[int, typer.Option(help="Seed for the concurrency section's random writers.")] = 0,
    skip: Annotated[list[str] | None, typer.Option(
        help=f"Skip a section (repeatable): {', '.join(SECTIONS)}. Printed as '# SKIP'.")] = None,
) -> None:
    """Run the permission gate on fresh throwaway databases: golden set, planted bugs, model check,
    concurrency, fault injection, least privilege and bad input. Exits 1 on any failure."""
    unknown = sorted(set(skip or ()) - set(SECTIONS))
    if unknown:
        raise InvalidArgument(f"unknown section {unknown[0]!r}; sections: {', '.join(SECTIONS)}")
    server = None if embedded else (dsn or Settings.from_env().dsn)
    options = GateOptions(examples=examples, max_steps=max_steps, concurrency_ops=concurrency_ops, seed=seed,
                          skip=frozenset(skip or ()))
    where = "a throwaway embedded PostgreSQL" if server is None else "fresh databases on the configured server"
    err.print(f"groundkit eval gate: running on {where}", highlight=False)
    summary = run_gate(server, options, out=sys.stderr if as_json else sys.stdout,
                       progress=lambda s: err.print(f"[dim]section {s}...[/]", highlight=False))
    if as_json:
        sys.stdout.write(summary.model_dump_json(indent=2) + "\n")
    verdict = "[green]PASS[/]" if summary.ok else "[bold red]FAIL[/]"
    err.print(f"{verdict} {summary.passed}/{summary.checks} checks passed, {summary.failed} failed, "
              f"{summary.todo} todo, {summary.skipped} skipped; leaks {summary.leaks}, resurrections "
              f"{summary.resurrections}, missing {summary.missing}, stale {summary.stale}; "
              f"{summary.bad_inputs_tried} bad inputs tried; planted bugs caught "
              f"{summary.planted_bugs_caught}/{summary.planted_bugs}; {summary.duration_s:.1f}s", highlight=False)
    if not summary.ok:
        raise typer.Exit(1)


app.command("gate")(gate)
