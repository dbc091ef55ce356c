"""``groundkit replay`` and ``groundkit runs list|diff|prune``: recorded runs (docs/runs.md)."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from groundkit import audit
from groundkit.cli import governance as gov
from groundkit.cli._common import DsnOption, handle_errors, out
from groundkit.cli.costs import parse_since
from groundkit.client import Groundkit
from groundkit.errors import InvalidArgument

app = typer.Typer(help="Recorded runs: list, diff, prune, export (docs/runs.md).", no_args_is_help=True)

ReaderOption = Annotated[str | None, typer.Option(
    "--reader", help="The reader you act as (your own runs). An auditor or the owner may omit it.")]


@handle_errors
def replay(
    run_id: Annotated[str, typer.Argument(help="The run's id (a UUID).")],
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per hit, in the run's order.")] = False,
    reader: ReaderOption = None,
    dsn: DsnOption = None,
) -> None:
    """The exact chunks a run saw, rebuilt from the log at the pinned versions, and what became
    of each object since (current, newer version, retiered, deleted, redacted). A redacted
    object's text is never shown."""
    with Groundkit.connect(dsn) as gk:
        result = gk.replay(run_id, reader=reader)
    if as_json:
        for hit in result.hits:
            sys.stdout.write(hit.model_dump_json() + "\n")
        return
    run = result.run
    out.print(f"run {run.run_id}  flow {run.flow}  reader {run.reader_sub} ({run.reader_tier})  "
              f"model {run.model or '-'}  prompt {run.prompt_version or '-'}  at {run.recorded_at:%Y-%m-%d %H:%M:%S}"
              + (f"  error {run.error_class}" if run.error_class else ""), highlight=False, markup=False)
    for hit in result.hits:
        text = "[redacted]" if hit.redacted else (hit.content if hit.verified else "[not reproducible]")
        out.print(f"\n#{hit.search_no}.{hit.hit_no} {hit.object_id} v{hit.object_version} chunk {hit.chunk_seq}"
                  f"  score {hit.score:.4f}  now: {hit.now}  query: {hit.query}", highlight=False, markup=False)
        out.print(text, highlight=False, markup=False)


@app.command("list")
@handle_errors
def list_runs(
    flow: Annotated[str | None, typer.Option(help="Only this flow.")] = None,
    reader: Annotated[str | None, typer.Option(help="Only this reader (member_sub).")] = None,
    since: Annotated[str | None, typer.Option(help="Only runs since: 7d, 12h, 30m, 2w or an ISO date.")] = None,
    limit: Annotated[int, typer.Option(help="At most this many, newest first.")] = 1000,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per run.")] = False,
    dsn: DsnOption = None,
) -> None:
    """Recorded runs, newest first (groundkit_auditor or the owner)."""
    with Groundkit.connect(dsn) as gk:
        rows = gk.runs(flow=flow, reader=reader, since=parse_since(since), limit=limit)
    if as_json:
        for row in rows:
            sys.stdout.write(row.model_dump_json() + "\n")
        return
    table = Table("run", "at", "flow", "reader", "model", "searches", "hits", "tokens", "cost", "error")
    for r in rows:
        table.add_row(r.run_id, f"{r.recorded_at:%Y-%m-%d %H:%M:%S}", r.flow, r.reader_sub, r.model or "-",
                      str(r.searches), str(r.hits), f"{r.tokens_in}/{r.tokens_out}",
                      "-" if r.cost is None else f"{r.cost:g}", r.error_class or "")
    out.print(table)


@app.command("diff")
@handle_errors
def diff(
    run_a: Annotated[str, typer.Argument(help="The earlier run.")],
    run_b: Annotated[str, typer.Argument(help="The later run.")],
    reader: ReaderOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per hit.")] = False,
    dsn: DsnOption = None,
) -> None:
    """Which hits entered, left or moved between two runs of the same query (search by search),
    and why when the log can say: a new version, a re-tier, a delete, the reader's tier."""
    with Groundkit.connect(dsn) as gk:
        rows = gk.diff_runs(run_a, run_b, reader=reader)
    if as_json:
        for row in rows:
            sys.stdout.write(row.model_dump_json() + "\n")
        return
    table = Table("search", "change", "object", "chunk", "rank a", "rank b", "version a", "version b", "why")
    for r in rows:
        if r.change == "same":
            continue
        table.add_row(str(r.search_no), r.change, r.object_id, str(r.chunk_seq),
                      *("-" if v is None else str(v) for v in (r.rank_a, r.rank_b, r.version_a, r.version_b)),
                      r.why or "")
    out.print(table)


@app.command("prune")
@handle_errors
def prune(
    before: Annotated[str, typer.Option(help="Delete runs recorded before this ISO date or time (UTC unless "
                                             "it says).")],
    dsn: DsnOption = None,
) -> None:
    """Delete old runs (the owner's alone); leaves a tombstone row counting them."""
    try:
        at = datetime.fromisoformat(before)
    except ValueError:
        raise InvalidArgument(f"--before {before!r}: expected an ISO date") from None
    with Groundkit.connect(dsn) as gk:
        n = gk.prune_runs(at if at.tzinfo else at.replace(tzinfo=UTC))
    out.print(f"pruned {n} runs recorded before {before}")


@app.command("export")
@handle_errors
def export(
    run_id: Annotated[str, typer.Argument(help="The run's id (a UUID).")],
    bundle: Annotated[Path, typer.Option("--bundle", dir_okay=False, help="Where to write the signed bundle.")],
    key: gov.KeyOption = None,
    key_env: gov.KeyEnvOption = None,
    dsn: DsnOption = None,
) -> None:
    """Write a run's signed evidence bundle: its header and searches as the audit chain recorded
    them (each row's canonical encoding, hash and chain entry), the pinned set, what became of each
    hit since (replay statuses; no chunk text), and the chain's head. `groundkit audit
    verify-bundle` checks it offline. The auditor's or the owner's."""
    signing = audit.load_private_key(key, key_env)
    with Groundkit.connect(dsn) as gk:
        doc = audit.run_bundle(gk, run_id, signing)
    audit.write_json(bundle, doc)
    body = doc["body"]
    out.print(f"run {body['run_id']}: {len(body['pinned'])} search(es), chain entries "
              f"#{body['entries'][0]['seq']}..#{body['entries'][-1]['seq']} of head #{body['head']['seq']}; "
              f"signed by key {doc['signature']['key_id']}; written to {bundle}", highlight=False)
