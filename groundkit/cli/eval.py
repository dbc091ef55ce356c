"""``groundkit eval``: evals as source code."""

from __future__ import annotations

import json
import sys
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from groundkit.cli import eval_gate
from groundkit.cli._common import DsnOption, err, handle_errors, out
from groundkit.client import resolve_dsn
from groundkit.errors import GroundkitError, InvalidArgument
from groundkit.quality.results import store_collection_results, store_label_results

if TYPE_CHECKING:
    from groundkit.client import Groundkit

if TYPE_CHECKING:
    from groundkit.quality.harness import Comparison, QualityRow
    from groundkit.quality.propose import Proposal

app = typer.Typer(help="Run groundkit's evals.", no_args_is_help=True,
                  rich_markup_mode="markdown")
app.command("gate")(eval_gate.gate)


@app.command()
@handle_errors
def quality(
    dataset: Annotated[Path | None, typer.Option(help="A BEIR folder (corpus.jsonl, queries.jsonl, qrels/test.tsv; "
                                                 "with segments.jsonl: transcripts) or a Cranfield folder.",
                                                 exists=True, file_okay=False)] = None,
    arm: Annotated[list[str] | None, typer.Option(help="Arms to run (repeatable): groundkit's bm25, dense and "
                                                  "hybrid (docs/evals.md), ts_rank_cd, fts5, tantivy, bm25s, "
                                                  "bm25s-k1.2. Default: all.")] = None,
    view: Annotated[list[str] | None, typer.Option(
        help="Transcripts: windows (the prepared windows) or turns (the raw turns through groundkit's transcript "
        "chunker); repeatable. Default: every view the collection has.")] = None,
    scope: Annotated[list[str] | None, typer.Option(
        help="all (the whole collection) or meeting (each query within its own meeting: transcripts); "
        "repeatable. Default: every scope the collection has.")] = None,
    bm25_k1: Annotated[float | None, typer.Option(
        help="groundkit's BM25 k1 in the scratch database (with --bm25-b; default groundkit's own, 0.9), as "
        "`groundkit config set-bm25` sets it. The reference engines keep theirs.")] = None,
    bm25_b: Annotated[float | None, typer.Option(help="groundkit's BM25 b (with --bm25-k1; default 0.4).")
                      ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per line: each arm's numbers "
                                          "(kind arm), then the paired comparisons (kind comparison).")] = False,
    reference: Annotated[bool, typer.Option(
        "--reference", help="Instead: check the reference engines against their known numbers on this "
        "collection (BEIR SciFact, NFCorpus); exit 1 when one is off by more than --tolerance.")] = False,
    tolerance: Annotated[float, typer.Option(help="With --reference: the largest allowed difference in "
                                             "nDCG@10 and R@100.", min=0.0)] = 0.01,
    labels: Annotated[Path | None, typer.Option(
        help="Instead: score the current search against a labelled file from `groundkit eval export-samples`, "
        "per tier rank, with the leak check (docs/telemetry.md).", exists=True, dir_okay=False)] = None,
    reader: Annotated[list[str] | None, typer.Option(
        help="With --labels: RANK=MEMBER searches as that member for that tier rank (repeatable). Default: a "
        "synthetic member of a tier of that rank, no grants, rolled back.")] = None,
    store: Annotated[bool, typer.Option(
        "--store/--no-store", help="Keep the results in the database (groundkit.quality_results), where "
        "`groundkit serve console` shows them over time.")] = True,
    dsn: DsnOption = None,
) -> None:
    """nDCG@10, recall@10, recall@100 and MRR@10 of groundkit and reference BM25 engines
    (--dataset), or of the current search against labelled samples (--labels)."""
    from groundkit.quality.harness import ALL_ARMS, comparisons, run_quality

    if (bm25_k1 is None) != (bm25_b is None):
        raise InvalidArgument("--bm25-k1 and --bm25-b go together")
    if labels is not None:
        if dataset is not None or arm or reference or bm25_k1 is not None:
            raise InvalidArgument("--labels takes no --dataset, --arm, --reference or --bm25-k1/--bm25-b")
        _labels(labels, _readers(reader or []), as_json, store, dsn)
        return
    if reader:
        raise InvalidArgument("--reader goes with --labels")
    if dataset is None:
        raise InvalidArgument("give --dataset (a collection) or --labels (a labelled samples file)")
    if reference:
        if arm or view or scope or bm25_k1 is not None:
            raise InvalidArgument("--reference runs the reference engines on the documents; it takes no --arm, "
                                  "--view, --scope or --bm25-k1/--bm25-b")
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

        rows = run_quality(dataset, server, arms, progress=progress, skipped=_skipped, views=view, scopes=scope,
                           notify=_notice,
                           bm25_k1_b=None if bm25_k1 is None or bm25_b is None else (bm25_k1, bm25_b))
    if store:
        _store_results(server, lambda gk: store_collection_results(gk, rows))
    compared = comparisons(rows)
    if as_json:
        for line in [*(r.as_json() for r in rows), *(c.as_json() for c in compared)]:
            sys.stdout.write(json.dumps(line) + "\n")
        return
    _quality_tables(rows, compared)


def _quality_tables(rows: list[QualityRow], compared: list[Comparison]) -> None:
    blocks: dict[tuple[str, str, str], list[QualityRow]] = {}
    for row in rows:
        blocks.setdefault((row.dataset, row.view, row.scope), []).append(row)
    for (name, view, scope), block in blocks.items():
        where = "" if (view, scope) == ("documents", "all") else f" ({view}, scope {scope})"
        params = block[0].bm25_k1_b
        set_here = "" if params is None else f", groundkit's BM25 at k1 {params[0]:g}, b {params[1]:g}"
        table = Table(title=f"{name}{where}: {block[0].queries} queries{set_here}")
        for col in ("arm", "nDCG@10", "R@10", "R@100", "MRR@10", "ms/query", "refused"):
            table.add_column(col, justify="left" if col == "arm" else "right")
        for row in block:
            table.add_row(row.arm, f"{row.ndcg_10:.4f}", f"{row.recall_10:.3f}", f"{row.recall_100:.3f}",
                          f"{row.mrr_10:.3f}", f"{row.ms_per_query:.1f}", str(row.refused) if row.refused else "")
        out.print(table)
        for row in block:
            if row.refused:
                codes = Counter(r["code"] for r in row.refusals)
                first = row.refusals[0]
                out.print(f"{row.arm}: {row.refused} of {row.queries} queries refused, scored 0 ("
                          + ", ".join(f"{code} x{n}" for code, n in codes.most_common())
                          + f"); e.g. {first['query_id']}: {first['code']}: {first['reason']}", highlight=False)
    if compared:
        table = Table(title="nDCG@10 differences, paired over the same queries (two-sided paired t-test)")
        for col in ("view", "scope", "arm", "against", "difference", "p"):
            table.add_column(col, justify="right" if col in ("difference", "p") else "left")
        for c in compared:
            table.add_row(c.view, c.scope, f"{c.arm} {c.ndcg_10:.4f}", f"{c.against} {c.against_ndcg_10:.4f}",
                          f"{c.difference:+.4f}", "< 0.001" if c.p_value < 0.001 else f"{c.p_value:.3f}")
        out.print(table)


def _store_results(dsn: str, store: Callable[[Groundkit], uuid.UUID | None]) -> None:
    """Keep a run's results in its database; say where, or why not. A failure to store is a
    warning: the evaluation itself ran and its numbers are printed."""
    from groundkit.client import Groundkit

    try:
        with Groundkit.connect(dsn) as gk:
            eval_id = store(gk)
    except GroundkitError as exc:
        err.print(f"[yellow]results not stored:[/] {escape(exc.message)}", highlight=False)
        return
    if eval_id is None:
        err.print("results not stored: this database has no groundkit.quality_results (run groundkit migrate)",
                  highlight=False)
    else:
        err.print(f"results stored as eval {eval_id} (groundkit serve console, Quality)", highlight=False)


def _skipped(arm: str, why: str) -> None:
    err.print(f"[yellow]skipped arm {arm}:[/] {why}")


def _notice(message: str) -> None:
    err.print(message, markup=False, highlight=False)


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


@app.command()
@handle_errors
def propose(
    labels: Annotated[Path | None, typer.Option(
        help="A labelled file from `groundkit eval export-samples` (relevance filled in), searched in the database "
        "now, per content type of its labelled candidates.", exists=True, dir_okay=False)] = None,
    dataset: Annotated[Path | None, typer.Option(
        help="Or a BEIR folder, loaded into a scratch database on the same server as one content type.",
        exists=True, file_okay=False)] = None,
    content_type: Annotated[str | None, typer.Option(
        help="With --dataset: the content type it stands for (default: the collection's: board_post for the "
        "forum collections, transcript for transcripts, else document).")] = None,
    reader: Annotated[list[str] | None, typer.Option(
        help="With --labels: RANK=MEMBER searches as that member for that tier rank (repeatable). Default: a "
        "synthetic member of a tier of that rank, no grants, rolled back.")] = None,
    alpha: Annotated[float, typer.Option(help="A proposal is applicable when the paired t-test's p is below this.")
                     ] = 0.05,
    apply_them: Annotated[bool, typer.Option("--apply", help="Set the applicable proposals (groundkit config "
                                             "set-search-mode), in one transaction, and carry the gate's "
                                             "certificate over (docs/governance.md). Without it nothing "
                                             "changes.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per content type (kind proposal).")
                       ] = False,
    dsn: DsnOption = None,
) -> None:
    """Propose, per content type, the search mode and hybrid weights `auto` should run, from
    judged queries: the best of bm25, dense and hybrid settings (RRF and score fusion) by nDCG@10,
    with its gain over the current setting and a paired t-test (scipy) on the same queries
    (docs/evals.md)."""
    from groundkit.client import Groundkit
    from groundkit.quality import propose as proposing

    proposing.check_alpha(alpha)
    if (labels is None) == (dataset is None):
        raise InvalidArgument("give --labels (a labelled samples file) or --dataset (a BEIR folder), one of them")
    if labels is not None and content_type is not None:
        raise InvalidArgument("--content-type goes with --dataset (a labelled file's candidates have their own)")
    if dataset is not None and reader:
        raise InvalidArgument("--reader goes with --labels")
    with Groundkit.connect(dsn) as target:
        if labels is not None:
            proposals, skipped = proposing.propose_from_labels(target, labels, _readers(reader or []), alpha)
        else:
            assert dataset is not None
            with Progress(TextColumn("{task.description:>10}"), BarColumn(), MofNCompleteColumn(),
                          TimeElapsedColumn(), console=err, transient=False) as bar:
                tasks: dict[str, TaskID] = {}

                def progress(stage: str, done: int, total: int) -> None:
                    if stage not in tasks:
                        tasks[stage] = bar.add_task(stage, total=total)
                    bar.update(tasks[stage], completed=done)

                proposals, skipped = proposing.propose_from_dataset(dataset, target, resolve_dsn(dsn), content_type,
                                                                    alpha, progress=progress, notify=_notice)
        if apply_them:
            proposals = proposing.apply(target, proposals)
    if any(p.applied for p in proposals):
        from groundkit.cli.config import carry_search_modes

        carry_search_modes(dsn, "groundkit eval propose --apply: " + ", ".join(
            f"{p.content_type} {p.proposed}" for p in proposals if p.applied), err if as_json else out)
    if as_json:
        for p in proposals:
            sys.stdout.write(json.dumps(p.as_json()) + "\n")
    else:
        _proposal_tables(proposals, alpha, apply_them)
    if skipped:
        err.print(f"{len(skipped)} query(ies) not used: " + "; ".join(skipped[:5])
                  + (" ..." if len(skipped) > 5 else ""), highlight=False)


def _proposal_tables(proposals: list[Proposal], alpha: float, applied: bool) -> None:
    if not proposals:
        out.print("no content type has a judged query: nothing to propose")
        return
    table = Table(title="search mode per content type: nDCG@10, paired t-test against the current setting")
    for col in ("content type", "queries", "current", "proposed", "gain", "p", "verdict"):
        table.add_column(col, justify="right" if col in ("queries", "gain", "p") else "left")
    for p in proposals:
        verdict = ("applied" if p.applied else "apply (--apply)") if p.apply else (
            "keep: already the best" if p.proposed == p.current else f"keep: not significant at {alpha:g}")
        table.add_row(p.content_type, str(p.queries), f"{p.current} {p.current_ndcg_10:.4f}",
                      f"{p.proposed} {p.proposed_ndcg_10:.4f}", f"{p.gain:+.4f}",
                      "< 0.001" if p.p_value < 0.001 else f"{p.p_value:.3f}", verdict)
    out.print(table)
    for p in proposals:
        grid = Table(title=f"{p.content_type}: every setting scored ({p.queries} queries)")
        for col in ("setting", "nDCG@10", "R@100"):
            grid.add_column(col, justify="left" if col == "setting" else "right")
        for c in sorted(p.candidates, key=lambda c: -c.ndcg_10):
            grid.add_row(c.setting, f"{c.ndcg_10:.4f}", f"{c.recall_100:.3f}")
        out.print(grid)
    if not applied and any(p.apply for p in proposals):
        out.print("nothing changed: run again with --apply to set the applicable proposals", highlight=False)


@app.command("export-samples")
@handle_errors
def export_samples(
    out_file: Annotated[Path, typer.Option("--out", help="The JSONL file to write (replaced whole; created 0600: it "
                                                         "holds text members were shown).", dir_okay=False)],
    since: Annotated[str, typer.Option(help="Samples taken within this long: 30d, 12h, 2w.")] = "30d",
    dsn: DsnOption = None,
) -> None:
    """Write sampled searches (groundkit config set-sample-rate) as a labelling file: one JSON
    line per search with its query, tier rank and candidates, each with its text at the sampled
    version (null if redacted since), clicks, dwell and an empty `relevance` slot to fill."""
    from groundkit.client import Groundkit
    from groundkit.quality.samples import export_samples as export
    from groundkit.quality.samples import parse_since, private_file

    window = parse_since(since)
    with Groundkit.connect(dsn) as gk, private_file(out_file) as f:
        n = export(gk, window, f)
    out.print(f"wrote {n} sample(s) to {out_file}", highlight=False)


def _readers(pairs: list[str]) -> dict[int, str]:
    readers: dict[int, str] = {}
    for pair in pairs:
        rank, sep, member = pair.partition("=")
        if not sep or not rank.strip().lstrip("-").isdigit() or not member:
            raise InvalidArgument(f"--reader takes RANK=MEMBER, such as 2=alice (got {pair!r})")
        readers[int(rank)] = member
    return readers


def _labels(path: Path, readers: dict[int, str], as_json: bool, store: bool, dsn: str | None) -> None:
    from groundkit.client import Groundkit
    from groundkit.quality.samples import as_json as report_json
    from groundkit.quality.samples import score_labels

    with Groundkit.connect(dsn) as gk:
        report = score_labels(gk, path, readers)
    if store:
        _store_results(resolve_dsn(dsn), lambda gk: store_label_results(gk, path.name, report.ranks))
    if as_json:
        for row in report_json(report):
            sys.stdout.write(json.dumps(row) + "\n")
    else:
        table = Table(title=f"{path.name}: the current search against the labels, per tier rank")
        for col in ("tier rank", "reader", "queries", "nDCG@10", "R@10", "R@100", "MRR@10"):
            table.add_column(col, justify="left" if col == "reader" else "right")
        for r in report.ranks:
            table.add_row(str(r.tier_rank), r.reader, str(r.queries), f"{r.ndcg_10:.3f}", f"{r.recall_10:.3f}",
                          f"{r.recall_100:.3f}", f"{r.mrr_10:.3f}")
        out.print(table)
        for n in report.not_visible:
            what = "RETURNED though not visible" if n.returned else "not visible now, not scored"
            out.print(f"rank {n.tier_rank} sample {n.sample_id}: {n.object_id} {what} ({n.why})", highlight=False)
        if report.skipped:
            err.print(f"{len(report.skipped)} labelled line(s) not scored: " + "; ".join(report.skipped[:5])
                      + (" ..." if len(report.skipped) > 5 else ""), highlight=False)
    if report.leaks:
        err.print(f"[bold red]{len(report.leaks)} hit(s) returned that the check says the reader may not see[/]")
        raise typer.Exit(1)
