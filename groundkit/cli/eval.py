"""``groundkit eval``: evals as source code."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from groundkit.cli import eval_gate
from groundkit.cli._common import DsnOption, err, handle_errors, out
from groundkit.client import resolve_dsn
from groundkit.errors import InvalidArgument

app = typer.Typer(help="Run groundkit's evals.", no_args_is_help=True,
                  rich_markup_mode="markdown")
app.command("gate")(eval_gate.gate)


@app.command()
@handle_errors
def quality(
    dataset: Annotated[Path, typer.Option(help="A BEIR folder (corpus.jsonl, queries.jsonl, qrels/test.tsv) "
                                          "or a Cranfield folder.", exists=True, file_okay=False)],
    arm: Annotated[list[str] | None, typer.Option(help="Arms to run (repeatable). Default: all of "
                                                  "groundkit, ts_rank_cd, fts5, tantivy, bm25s.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per arm, one per line.")] = False,
    dsn: DsnOption = None,
) -> None:
    """nDCG@10, recall@10, recall@100 and MRR@10 of groundkit and reference BM25 engines."""
    from groundkit.quality.harness import ALL_ARMS, run_quality

    arms = tuple(arm or ALL_ARMS)
    unknown = [a for a in arms if a not in ALL_ARMS]
    if unknown:
        raise InvalidArgument(f"unknown arm {unknown[0]!r}; choose from {', '.join(ALL_ARMS)}")
    server = resolve_dsn(dsn)
    with Progress(TextColumn("{task.description:>10}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err, transient=False) as bar:
        tasks: dict[str, TaskID] = {}

        def progress(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = bar.add_task(stage, total=total)
            bar.update(tasks[stage], completed=done)

        def skipped(name: str, why: str) -> None:
            err.print(f"[yellow]skipped arm {name}:[/] {why}")

        rows = run_quality(dataset, server, arms, progress=progress, skipped=skipped)
    if as_json:
        for row in rows:
            sys.stdout.write(json.dumps(row.as_json()) + "\n")
        return
    table = Table(title=f"{rows[0].dataset if rows else dataset}: {rows[0].queries if rows else 0} queries")
    for col in ("arm", "nDCG@10", "R@10", "R@100", "MRR@10", "ms/query"):
        table.add_column(col, justify="left" if col == "arm" else "right")
    for row in rows:
        table.add_row(row.arm, f"{row.ndcg_10:.3f}", f"{row.recall_10:.3f}", f"{row.recall_100:.3f}",
                      f"{row.mrr_10:.3f}", f"{row.ms_per_query:.1f}")
    out.print(table)
