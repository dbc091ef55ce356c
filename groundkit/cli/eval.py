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
    reference: Annotated[bool, typer.Option(
        "--reference", help="Instead: check the reference engines against their known numbers on this "
        "collection (BEIR SciFact, NFCorpus); exit 1 when one is off by more than --tolerance.")] = False,
    tolerance: Annotated[float, typer.Option(help="With --reference: the largest allowed difference in "
                                             "nDCG@10 and R@100.", min=0.0)] = 0.01,
    dsn: DsnOption = None,
) -> None:
    """nDCG@10, recall@10, recall@100 and MRR@10 of groundkit and reference BM25 engines."""
    from groundkit.quality.harness import ALL_ARMS, run_quality

    if reference:
        if arm:
            raise InvalidArgument("--reference runs the reference engines; it takes no --arm")
        _reference(dataset, tolerance, as_json)
        return
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

        rows = run_quality(dataset, server, arms, progress=progress, skipped=_skipped)
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


def _skipped(arm: str, why: str) -> None:
    err.print(f"[yellow]skipped arm {arm}:[/] {why}")


def _reference(dataset: Path, tolerance: float, as_json: bool) -> None:
    from groundkit.quality.reference import run_reference

    rows = run_reference(dataset, tolerance, skipped=_skipped)
    if as_json:
        for row in rows:
            sys.stdout.write(json.dumps(row.as_json()) + "\n")
    else:
        table = Table(title=f"{dataset.name}: reference engines, known numbers within ±{tolerance}")
        for col in ("arm", "nDCG@10", "R@10", "R@100", "MRR@10", "known nDCG@10 / R@100", "ok"):
            table.add_column(col, justify="left" if col in ("arm", "ok") else "right")
        for row in rows:
            q = row.quality
            known = "" if row.within is None else f"{row.known_ndcg_10:.3f} / {row.known_recall_100:.3f}"
            ok = "" if row.within is None else "yes" if row.within else "[bold red]NO[/]"
            table.add_row(q.arm, f"{q.ndcg_10:.3f}", f"{q.recall_10:.3f}", f"{q.recall_100:.3f}", f"{q.mrr_10:.3f}",
                          known, ok)
        out.print(table)
    off = [row.quality.arm for row in rows if row.within is False]
    if off:
        err.print(f"[bold red]{len(off)} reference arm(s) off their known numbers by more than {tolerance}:[/] "
                  f"{', '.join(off)}", highlight=False)
        raise typer.Exit(1)
