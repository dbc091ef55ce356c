"""``groundkit worker``: the one long-running process a deployment needs (maintenance passes)."""

from __future__ import annotations

import json
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeRemainingColumn

from groundkit import maintenance
from groundkit import worker as groundkit_worker
from groundkit.cli._common import DsnOption, err, handle_errors, out
from groundkit.client import Groundkit
from groundkit.errors import DatabaseUnavailable, GroundkitError
from groundkit.maintenance import REINDEX_DRIFT
from groundkit.models import IndexStatus, MaintenanceReport

AnalyzeAtOption = Annotated[
    float,
    typer.Option(min=0, help="Analyze the postings once the chunks have grown by this share since the last "
                             "analyze (groundkit.postings_growth()); 0 never."),
]
ReindexAtOption = Annotated[
    float,
    typer.Option(min=0, help="Recompute the postings' stored impacts first (reindex_impacts) once their reference "
                             "length is off from the chunks' average length by this factor or more, either way "
                             "(groundkit.impact_drift()), or k1 or b changed; 0 never."),
]


def progress_bars() -> Progress:
    """Progress bars on stderr, gone when done (and silent when stderr is not a terminal)."""
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                    console=err, transient=True)


def step_progress(progress: Progress) -> maintenance.StepProgress:
    """A maintenance pass's progress(step, done, total) as one bar per step."""
    tasks: dict[str, TaskID] = {}

    def advance(step: str, done: int, total: int) -> None:
        if step not in tasks:
            tasks[step] = progress.add_task(step, total=None)
        progress.update(tasks[step], completed=done, total=total)

    return advance


def describe(report: MaintenanceReport) -> str:
    """One line: each step, what it counted, how long it took."""
    nouns = {"reindex": "recomputed {} postings' impacts", "merge": "merged {} pending posting(s)",
             "analyze": "sketched {} postings list(s)", "vacuum": "vacuumed {} table(s)",
             "embed": "embedded {} chunk(s)", "dense": "merged {} dense index entries",
             "hnsw": "built {} HNSW index(es)"}
    parts = []
    for s in report.steps:
        part = f"{nouns[s.name].format(s.count)} in {s.seconds:.1f} s"
        if s.name in ("reindex", "analyze", "embed", "dense", "hnsw"):
            part += f" ({s.reason})"
        parts.append(part)
    return "; ".join(parts)


@contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """SIGTERM (systemd, docker stop) stops the worker as Ctrl-C does."""
    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@handle_errors
def worker(
    every: Annotated[float, typer.Option(min=0.01, max=86_400, help="Seconds between passes.")]
        = maintenance.WORKER_EVERY_S,
    once: Annotated[bool, typer.Option("--once", help="One pass, then exit (1 if it failed).")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per pass on stdout.")] = False,
    analyze_at: AnalyzeAtOption = maintenance.ANALYZE_GROWTH,
    reindex_at: ReindexAtOption = maintenance.REINDEX_DRIFT,
    embed: Annotated[bool, typer.Option("--embed/--no-embed", help="Run the embedding job too.")] = True,
    dsn: DsnOption = None,
) -> None:
    """Keep search fast: every --every seconds, merge the pending part, analyze the postings after
    growth, recompute the impacts when they drift (resuming an interrupted recompute), and vacuum
    what that rewrote. Runs on its own connection, connects again with backoff when the database
    goes away, and writes a heartbeat that `groundkit status` shows. Ctrl-C or SIGTERM stops it.

    Each pass then embeds what the active embedding model, and any model being reindexed, lacks,
    and builds its buckets' HNSW indexes when due (--no-embed: not). A provider failure is reported and
    recorded in the heartbeat; embedding backs off while the maintenance goes on."""
    passes = 0

    def on_pass(report: MaintenanceReport | None, error: GroundkitError | None) -> None:
        nonlocal passes
        passes += 1
        if as_json:
            body = {"pass": passes, "report": report.model_dump(mode="json") if report is not None else None,
                    "error": error.message if error is not None else None}
            sys.stdout.write(json.dumps(body) + "\n")
            sys.stdout.flush()
            return
        if report is not None and (once or any(s.count for s in report.steps)):
            out.print(f"pass {passes}: {describe(report)}", highlight=False)
        if error is not None:
            what = "embedding failed (backing off; maintenance goes on)" if report is not None else "failed"
            err.print(f"pass {passes} {what}: {error.message}", highlight=False)

    def on_lost(exc: DatabaseUnavailable, wait: float) -> None:
        err.print(f"lost the database: {exc.message}; connecting again in {wait:.1f} s", highlight=False)

    def on_connected(gk: Groundkit, again: bool) -> None:
        if again:
            err.print("connected again", highlight=False)

    started = time.monotonic()
    try:
        with sigterm_interrupts(), progress_bars() as progress:
            groundkit_worker.run_worker(dsn, every=None if once else every, on_pass=on_pass, on_lost=on_lost,
                                   on_connected=on_connected, progress=step_progress(progress),
                                   analyze_growth=analyze_at, reindex_at=reindex_at, embed=embed)
    except GroundkitError as exc:
        if as_json and not isinstance(exc, DatabaseUnavailable):  # (--once: the pass failed)
            sys.stdout.write(json.dumps({"pass": passes + 1, "report": None, "error": exc.message}) + "\n")
        raise
    except KeyboardInterrupt:
        err.print(f"worker stopped after {passes} pass(es) in {time.monotonic() - started:.0f} s", highlight=False)


def analyze_with_progress(gk: Groundkit, progress: Progress, *, min_postings: int | None = None,
             reindex_at: float = REINDEX_DRIFT) -> int:
    """Groundkit.analyze_postings with a progress bar, saying first when it will reindex the
    impacts (reindex_at 0: never)."""
    if reindex_at > 0:
        st = gk.index_status()
        if st.reindex_due(reindex_at):
            reindex_with_progress(gk, progress, st)
    task = progress.add_task("analyze", total=None)

    def advance(done: int, total: int) -> None:
        progress.update(task, completed=done, total=total)

    # (the recompute was decided and run above, with its own progress bar)
    return gk.analyze_postings(min_postings=min_postings, progress=advance, reindex_at=None)


def reindex_with_progress(gk: Groundkit, progress: Progress, st: IndexStatus) -> None:
    """Groundkit.reindex_impacts with a progress bar, saying first why it runs and who waits."""
    if not st.impacts_current:
        why = (f"the impacts were computed with k1 {st.impact_k1:g}, b {st.impact_b:g}, the configuration "
               f"says k1 {st.k1:g}, b {st.b:g} (search is exhaustive until then); in one transaction, "
               "while merges and bulk writes wait for it")
    else:
        why = (f"the chunks average {st.avgdl or 0:.1f} tokens, the impacts' reference length is "
               f"{st.avgdl_ref:.1f} ({st.impact_drift:.2f}x)")
        if st.reindex_unfinished:
            why = f"resuming an interrupted recompute where its steps stopped; {why}"
        why += "; in steps: writers to the postings wait for one step at a time"
    err.print(f"recomputing the postings' impacts: {why}", highlight=False)
    task = progress.add_task("recompute impacts", total=None)

    def advance(done: int, total: int) -> None:
        progress.update(task, completed=done, total=total)

    gk.reindex_impacts(progress=advance)
    progress.remove_task(task)
