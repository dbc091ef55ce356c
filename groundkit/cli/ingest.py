"""``groundkit ingest PATH``: files and directory trees through the loaders, JSON Lines as
they are; progress on stderr, a summary on stderr, ``--json`` on stdout."""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from groundkit import ingest as core
from groundkit import maintenance
from groundkit.cli._common import DsnOption, err, handle_errors
from groundkit.cli.worker import ReindexAtOption
from groundkit.client import Groundkit, resolve_dsn
from groundkit.errors import DatabaseUnavailable, GroundkitError, InvalidArgument
from groundkit.loaders import Skipped
from groundkit.loaders.jsonl import objects_of
from groundkit.maintenance import EARLY_REINDEX_OBJECTS, REINDEX_DRIFT
from groundkit.models import ContentObject, WriteStatus

Numbered = tuple[int, ContentObject]


def _allowed(objects: Iterable[tuple[int, ContentObject, int]], rel: str,
             options: core.IngestOptions) -> Iterator[tuple[int, ContentObject, int]]:
    """The objects of a JSON Lines file, each checked against the options given (checked again
    as it is written: the file may have changed since the check)."""
    for n, obj, size in objects:
        if (why := core.jsonl_conflict(obj, options)) is not None:
            raise InvalidArgument(f"{rel}:{n}: {why}")
        yield n, obj, size


def _batches(objects: Iterable[tuple[int, ContentObject, int]], size: int) -> Iterator[list[Numbered]]:
    """Consecutive (line, object) pairs, at most ``size`` per transaction; an object_id seen
    twice starts a new batch (put_objects takes each object once per call), so the file's
    order of writes is kept."""
    group: list[Numbered] = []
    ids: set[str] = set()
    for n, obj, _size in objects:
        if len(group) >= size or obj.object_id in ids:
            yield group
            group, ids = [], set()
        group.append((n, obj))
        ids.add(obj.object_id)
    if group:
        yield group


class _Run:
    """One ingest's shared state: the report, the server's write statuses, the ids written."""

    def __init__(self, gk: Groundkit, progress: Progress, reindex_at: float) -> None:
        self.gk, self.progress, self.reindex_at = gk, progress, reindex_at
        self.report = core.IngestReport()
        self.statuses: dict[str, int] = {}
        self.written: list[str] = []
        # A load into a (nearly) empty database fixes the impacts' reference length early, while
        # the postings are few: otherwise the whole load is written at the old one and the
        # analyze at the end rewrites every posting (docs/bm25.md, "The impact reference").
        self.chunks_before = gk.index_status().chunks if reindex_at > 0 else None

    def applied(self, ids: Iterable[str]) -> None:
        self.written.extend(ids)
        if self.chunks_before is not None and len(self.written) >= EARLY_REINDEX_OBJECTS:
            from groundkit.cli.worker import reindex_with_progress

            if (st := maintenance.early_reindex(self.gk, self.chunks_before, reindex_at=self.reindex_at)) is not None:
                reindex_with_progress(self.gk, self.progress, st)
            self.chunks_before = None

    def jsonl(self, plan: core.Plan, rel: str, options: core.IngestOptions, max_line: int) -> None:
        """Write one JSON Lines file: every line checked first (a bad line, or an object that
        says other than the options given, fails the file before anything of it is written),
        then written in batches."""
        batch = options.batch
        try:
            n_objects = self._check(plan, rel, options, max_line)
            done = 0
            task = self.progress.add_task(f"write {rel}", total=n_objects)
            with plan.tree.open(rel) as (fd, _size), open(fd, "rb", closefd=False) as f:
                for group in _batches(_allowed(objects_of(f, rel, max_line), rel, options), batch):
                    objs = [obj for _n, obj in group]
                    try:
                        results = [self.gk.put(objs[0])] if batch == 1 else self.gk.put_objects(objs)
                    except DatabaseUnavailable:
                        raise
                    except GroundkitError as exc:
                        code = f"[{exc.sqlstate}] " if exc.sqlstate else ""
                        reason = (f"stopped at object {done + 1} of {n_objects} ({objs[0].object_id!r}); the {done} "
                                  f"before it are written: {code}{exc.message}")
                        self.report.failed.append(core.PathReason(path=rel, reason=reason))
                        return
                    for (n, _obj), result in zip(group, results, strict=True):
                        self._count(rel, n, result.object_id, result.status)
                    self.applied(r.object_id for r in results if r.status is WriteStatus.APPLIED)
                    done += len(group)
                    self.progress.advance(task, len(group))
            self.progress.remove_task(task)
        except Skipped as exc:
            self.report.skipped.append(core.PathReason(path=rel, reason=exc.reason))
        except GroundkitError as exc:
            if isinstance(exc, DatabaseUnavailable):
                raise
            self.report.failed.append(core.PathReason(path=rel, reason=exc.message))

    def _check(self, plan: core.Plan, rel: str, options: core.IngestOptions, max_line: int) -> int:
        n_objects = 0
        with plan.tree.open(rel) as (fd, size), open(fd, "rb", closefd=False) as f:
            task = self.progress.add_task(f"check {rel}", total=size)
            for _n, _obj, line_size in _allowed(objects_of(f, rel, max_line), rel, options):
                n_objects += 1
                self.progress.advance(task, line_size)
            self.progress.remove_task(task)
        return n_objects

    def _count(self, rel: str, n: int, object_id: str, status: WriteStatus) -> None:
        self.statuses[status.value] = self.statuses.get(status.value, 0) + 1
        if status is WriteStatus.APPLIED:
            self.report.loaded += 1
        elif status is WriteStatus.DUPLICATE:
            self.report.unchanged += 1
        else:
            why = "a newer version is stored" if status is WriteStatus.STALE else "the object was deleted"
            reason = f"{object_id!r}: {status.value} ({why})"
            self.report.skipped.append(core.PathReason(path=f"{rel}:{n}", reason=reason))


def _merge(into: core.IngestReport, part: core.IngestReport) -> None:
    for key in ("loaded", "unchanged", "updated", "deleted"):
        setattr(into, key, getattr(into, key) + getattr(part, key))
    into.missing.extend(part.missing)
    into.skipped.extend(part.skipped)
    into.failed.extend(part.failed)


def _summary(report: core.IngestReport, statuses: dict[str, int], delete_missing: bool) -> None:
    for item in report.skipped:
        err.print(f"skipped {escape(item.path)}: {escape(item.reason)}", highlight=False, soft_wrap=True)
    for item in report.failed:
        err.print(f"[red]failed[/] {escape(item.path)}: {escape(item.reason)}", highlight=False, soft_wrap=True)
    for path in report.missing:
        what = "deleted" if delete_missing else "missing (--delete-missing deletes it)"
        err.print(f"{what}: {escape(path)}", highlight=False, soft_wrap=True)
    if statuses:
        err.print("objects from JSON Lines: " + ", ".join(f"{v} {k}" for k, v in sorted(statuses.items())),
                  highlight=False, soft_wrap=True)
    err.print(f"{report.loaded} loaded, {report.unchanged} unchanged, {report.updated} updated, "
              f"{report.deleted} deleted, {len(report.missing)} missing, {len(report.skipped)} skipped, "
              f"{len(report.failed)} failed; {report.chunks} chunks in {report.seconds:.1f} s", highlight=False,
              soft_wrap=True)


@handle_errors
def ingest(
    path: Annotated[Path, typer.Argument(
        help="A file or a directory (walked recursively): Markdown, text, HTML, PDF, WebVTT, SRT, or JSON Lines "
             "of put_object payloads.", exists=False)],
    space: Annotated[str | None, typer.Option("--space", help="The space every loaded file goes into (a JSON Lines "
                                                              "file named as PATH names its own, and must name "
                                                              "this one if given).")] = None,
    tier: Annotated[str | None, typer.Option("--tier", help="The tier every loaded file is visible from (a JSON "
                                                            "Lines object must say the same, if given).")] = None,
    content_type: Annotated[str | None, typer.Option(
        "--content-type", help="Content type of every loaded file (default: transcript for .vtt/.srt, "
                               "document otherwise).")] = None,
    owner: Annotated[str | None, typer.Option("--owner", help="owner_sub of every loaded file.")] = None,
    owner_only: Annotated[bool, typer.Option("--owner-only", help="Only the owner may read them (needs --owner).")]
    = False,
    base: Annotated[Path | None, typer.Option(
        "--base", help="Object ids are paths relative to this directory, and nothing outside it is read "
                       "(default: PATH if a directory, else its directory).")] = None,
    delete_missing: Annotated[bool, typer.Option(
        "--delete-missing", help="Delete the objects ingested before from this base into this space whose "
                                 "files are gone (otherwise they are only reported).")] = False,
    jobs: Annotated[int, typer.Option("--jobs", min=1, max=32, help="Batches of files loaded and written at once, "
                                                                    "each on its own connection.")] = 2,
    max_bytes: Annotated[int, typer.Option(
        "--max-bytes", min=1, help="Skip a file larger than this; for JSON Lines, the longest line.")]
    = core.MAX_BYTES,
    batch: Annotated[int | None, typer.Option(
        "--batch", min=1, max=5000, help=f"Objects per transaction (put_objects). Default: 1 for JSON Lines "
                                         f"(each object alone), {core.FILE_BATCH} for other files.")] = None,
    analyze: Annotated[bool | None, typer.Option(
        "--analyze/--no-analyze",
        help="Sketch the postings lists afterwards (groundkit analyze); by default when an analyze is due "
             "(groundkit status): never analyzed, or the chunks grew by a tenth since the last one.")] = None,
    reindex_at: ReindexAtOption = REINDEX_DRIFT,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object on stdout: what was loaded, "
                                                          "unchanged, updated, deleted, missing, skipped, failed.")]
    = False,
    dsn: DsnOption = None,
) -> None:
    """Load files into objects: one object per file, its id the path under the base, written
    again only when its content changed. Exits 1 if a file failed, 130 if interrupted (run it
    again to finish).

    Nothing outside the base is read: symlinks are never followed and hard-linked files never
    read. Oversize, binary and unreadable files, names with control characters and JSON Lines
    found in a directory walk are skipped with a reason."""
    if owner_only and owner is None:
        raise typer.BadParameter("--owner-only needs --owner")
    options = core.IngestOptions(space_id=space, tier=tier, content_type=content_type, owner_sub=owner,
                                 owner_only=owner_only, max_bytes=max_bytes, jobs=jobs,
                                 delete_missing=delete_missing, batch=batch or core.FILE_BATCH)
    started = time.monotonic()
    # pypdf logs every repair it makes to a damaged PDF; the report says what failed, once.
    logging.getLogger("pypdf").setLevel(logging.ERROR)
    target = resolve_dsn(dsn)
    plan = core.plan(str(path), str(base) if base is not None else None)
    try:
        with Groundkit.connect(target) as gk, Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
            console=err, transient=True,
        ) as progress:
            run = _Run(gk, progress, reindex_at)
            task = progress.add_task("ingest", total=plan.total)

            def advance(rel: str) -> None:
                progress.advance(task)

            report, written = core.run(gk, target, plan, options, advance)
            run.applied(written)
            jsonl_options = dataclasses.replace(options, batch=batch or 1)
            for rel in plan.jsonl:
                run.jsonl(plan, rel, jsonl_options, max_bytes)
                progress.advance(task)
            _merge(report, run.report)
            report.chunks = gk.chunk_count(run.written) if run.written else 0
            if run.written and (analyze or (analyze is None and any(d.job == "analyze" for d in gk.due()))):
                from groundkit.cli.worker import analyze_with_progress

                err.print(f"sketched {analyze_with_progress(gk, progress, reindex_at=reindex_at)} postings list(s)",
                          highlight=False)
    except KeyboardInterrupt:
        err.print("interrupted: every object is written whole or not at all; run the same command again to "
                  "finish", highlight=False)
        raise typer.Exit(130) from None
    finally:
        plan.tree.close()
    report.seconds = round(time.monotonic() - started, 3)
    _summary(report, run.statuses, delete_missing)
    if as_json:
        sys.stdout.write(json.dumps(report.model_dump(mode="json")) + "\n")
    if report.failed:
        raise typer.Exit(1)
