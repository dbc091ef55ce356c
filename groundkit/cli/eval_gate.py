"""``groundkit eval gate``: the permission-leak and staleness gate, fail-closed.

TAP goes to stdout (or, with ``--json``, the JSON summary goes to stdout and TAP to stderr);
progress and errors go to stderr. The exit code is 0 only when every check passed.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from groundkit import audit, deployment
from groundkit.cli import governance as gov
from groundkit.cli._common import DsnOption, err, handle_errors
from groundkit.client import Groundkit, resolve_dsn
from groundkit.config import Settings
from groundkit.errors import InvalidArgument
from groundkit.gate.runner import SECTIONS, GateOptions, GateSummary
from groundkit.gate.throwaway import GateDatabases

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
    record: Annotated[bool | None, typer.Option(
        "--record/--no-record", help="Record the verdict in the gate ledger of the database --dsn (or "
                                     "GROUNDKIT_DSN, or with --record the embedded one) names, certifying the "
                                     "configuration it serves (docs/governance.md). Default: when a DSN is "
                                     "given and that database is migrated.", show_default=False)] = None,
    bundle: Annotated[Path | None, typer.Option(
        "--bundle", dir_okay=False, help="Write a signed evidence bundle (configuration, summary, TAP, ledger row) "
                                         "to this file; needs --key or --key-env.")] = None,
    key: gov.KeyOption = None,
    key_env: gov.KeyEnvOption = None,
) -> None:
    """Run the permission gate on fresh throwaway databases: golden set, planted bugs, model check,
    concurrency, fault injection, least privilege and bad input. Exits 1 on any failure."""
    unknown = sorted(set(skip or ()) - set(SECTIONS))
    if unknown:
        raise InvalidArgument(f"unknown section {unknown[0]!r}; sections: {', '.join(SECTIONS)}")
    settings = Settings.from_env()
    server = None if embedded else (dsn or settings.dsn)
    signing = audit.load_private_key(key, key_env) if bundle is not None else None
    if bundle is None and (key is not None or key_env is not None):
        raise InvalidArgument("--key and --key-env sign a --bundle")
    target = _record_target(dsn or settings.dsn, record)
    options = GateOptions(examples=examples, max_steps=max_steps, concurrency_ops=concurrency_ops, seed=seed,
                          skip=frozenset(skip or ()))
    where = "a throwaway embedded PostgreSQL" if server is None else "fresh databases on the configured server"
    err.print(f"groundkit eval gate: running on {where}", highlight=False)
    with GateDatabases(server) as dbs:
        data, model = deployment.gate_target(target, dbs)
        if model is not None:
            err.print(f"dense: embedding with the active model {model.name} ({model.provider})", highlight=False)
        evidence = deployment.run_sections(
            dbs, [s for s in SECTIONS if s not in options.skip], tested_data=data, dense_model=model,
            out=sys.stderr if as_json else sys.stdout, options=options,
            progress=lambda s: err.print(f"[dim]section {s}...[/]", highlight=False))
    summary = GateSummary.model_validate(evidence.summary)
    change = deployment.record_gate_run(target, evidence) if target is not None else None
    if as_json:
        sys.stdout.write(summary.model_dump_json(indent=2) + "\n")
    verdict = "[green]PASS[/]" if summary.ok else "[bold red]FAIL[/]"
    err.print(f"{verdict} {summary.passed}/{summary.checks} checks passed, {summary.failed} failed, "
              f"{summary.todo} todo, {summary.skipped} skipped; leaks {summary.leaks}, resurrections "
              f"{summary.resurrections}, missing {summary.missing}, stale {summary.stale}; "
              f"{summary.bad_inputs_tried} bad inputs tried; planted bugs caught "
              f"{summary.planted_bugs_caught}/{summary.planted_bugs}; {summary.duration_s:.1f}s", highlight=False)
    if change is not None:
        gov.say_change("eval gate", change)
    else:
        err.print(f"not recorded in a gate ledger (configuration {evidence.config_hash[:16]})", highlight=False,
                  soft_wrap=True)
    if bundle is not None:
        assert signing is not None
        if target is not None and change is not None and change.ledger_id is not None:
            with Groundkit.connect(target) as gk:
                doc = audit.gate_bundle(evidence, signing, s=gk, ledger_id=change.ledger_id)
        else:
            doc = audit.gate_bundle(evidence, signing)
        audit.write_json(bundle, doc)
        err.print(f"evidence bundle written to {bundle} (signed by key {doc['signature']['key_id']})",
                  highlight=False, soft_wrap=True)
    if not summary.ok:
        raise typer.Exit(1)


def _record_target(dsn: str | None, record: bool | None) -> str | None:
    """The database whose ledger records this run: with --record, the one --dsn, GROUNDKIT_DSN or
    the embedded server names; by default the one a DSN names, if migrated; with --no-record none."""
    if record is False or (record is None and not dsn):
        return None
    target = resolve_dsn(dsn)
    with deployment._connection(target) as conn:
        if deployment.has_ledger(conn):
            return target
    if record:
        raise InvalidArgument("that database has no gate ledger: run groundkit migrate first (or --no-record)")
    err.print("note: the database named is not migrated to a gate ledger; this run is not recorded",
              highlight=False)
    return None


app.command("gate")(gate)
