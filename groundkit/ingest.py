"""Ingest a file or a directory tree: each file through its loader into one object, written
idempotently, with the files that disappeared since the last ingest reported (and deleted on
request). The CLI (``groundkit ingest``) is a thin layer over :func:`plan` and :func:`run`.

An object's id is its file's path relative to the base directory; ``metadata.source`` records
the base, the path, the loader's version and a digest of the object's content, so a re-run
writes the current version again (``duplicate``: unchanged) or the next one (updated), and
knows which objects of the space came from that base. A JSON Lines file named as PATH is
written as it says (:mod:`groundkit.loaders.jsonl`), without a source; one found in a
directory walk is skipped (its lines would name their own ids, spaces and tiers, and replace
objects the app wrote). A file whose name an object id may not hold (control characters) is
skipped, and every path in the report is printable (:func:`groundkit.models.escaped`).

Every write is one ``put_object`` statement in its own transaction: an interruption leaves
each object written whole or not at all, and the next run finishes the job.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, field_validator

from groundkit import telemetry
from groundkit.client import Groundkit
from groundkit.errors import (
    DatabaseUnavailable,
    GroundkitError,
    InvalidArgument,
    UnknownContentType,
    UnknownSpace,
    UnknownTier,
)
from groundkit.loaders import DEFAULT_CONTENT_TYPES, LOADER_VERSION, Failed, Skipped, kind_of, load
from groundkit.loaders.tree import Tree
from groundkit.models import CONTENT_TYPES, ContentObject, StoredObject, WriteStatus, escaped, unsafe_id_char

MAX_BYTES = 20_000_000
MAX_PAGES = 2_000
# Files written per statement (put_objects): a fifth of the time of one statement per file on
# small files, and a Ctrl-C still leaves each object whole (evals/bench ingest-dir).
FILE_BATCH = 32
_MAX_REASON = 300
# Errors that would fail every file alike: the run stops on them instead.
_FATAL = (UnknownSpace, UnknownTier, UnknownContentType, DatabaseUnavailable)

JSONL_IN_WALK = ("JSON Lines found in a directory walk are not written (their lines name their own ids, "
                 "spaces and tiers); name the file itself as PATH to write it")

Outcome = Literal["loaded", "unchanged", "updated", "skipped", "failed"]


class PathReason(BaseModel):
    """A file and why it was skipped or failed; both printable: control characters (a file
    name's ESC, newline or tab) are stored escaped (``\\x1b``), so that a terminal shows them
    as text."""

    path: str
    reason: str

    @field_validator("path", "reason")
    @classmethod
    def _printable(cls, value: str) -> str:
        return escaped(value)


class IngestReport(BaseModel):
    """What an ingest did (``groundkit ingest --json``)."""

    loaded: int = 0
    unchanged: int = 0
    updated: int = 0
    deleted: int = 0
    missing: list[str] = []
    skipped: list[PathReason] = []
    failed: list[PathReason] = []
    chunks: int = 0
    seconds: float = 0.0


@dataclass(frozen=True)
class IngestOptions:
    space_id: str | None = None
    tier: str | None = None
    content_type: str | None = None
    owner_sub: str | None = None
    owner_only: bool = False
    max_bytes: int = MAX_BYTES
    max_pages: int = MAX_PAGES
    jobs: int = 2
    batch: int = FILE_BATCH
    delete_missing: bool = False


@dataclass
class Plan:
    """What an ingest will read: the files for the loaders, the JSON Lines files, and what it
    passes over (with why), all relative to ``tree.base``; ``start`` is PATH relative to it."""

    tree: Tree
    start: str
    files: list[str] = field(default_factory=list)
    jsonl: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)

    @property
    def total(self) -> int:
        return len(self.files) + len(self.jsonl)


def plan(path: str, base: str | None = None) -> Plan:
    """List what ingesting ``path`` reads. The base defaults to ``path`` (a directory, even
    through a symlink: the user named it) or its directory (a file); ``path`` must lie inside it."""
    if base is None:
        base = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    tree = Tree(base)
    try:
        start = tree.relative(path)
        try:
            listing = tree.walk(start)
        except InvalidArgument as exc:
            raise InvalidArgument(f"{path}: {exc.message}") from None
    except BaseException:
        tree.close()
        raise
    result = Plan(tree=tree, start=start, skipped=list(listing.skipped))
    for rel in listing.files:
        kind = kind_of(rel)
        if (bad := unsafe_id_char(rel)) is not None:
            result.skipped.append((rel, f"the file name has a control, line separator or bidi control character "
                                        f"({bad}, shown escaped), which an object id may not hold (GK005)"))
        elif kind is None:
            result.skipped.append((rel, "unsupported file type"))
        elif kind == "jsonl" and rel != start:
            result.skipped.append((rel, JSONL_IN_WALK))
        elif kind == "jsonl":
            result.jsonl.append(rel)
        else:
            result.files.append(rel)
    return result


def jsonl_conflict(obj: ContentObject, options: IngestOptions) -> str | None:
    """Why a JSON Lines object may not be written under ``options``, or ``None``: the options a
    user gives (--space, --tier, --content-type, --owner, --owner-only) are never overridden by
    what a file says, so an object that says otherwise is refused, not written elsewhere."""
    given = {"space_id": ("--space", options.space_id), "tier_visibility": ("--tier", options.tier),
             "content_type": ("--content-type", options.content_type), "owner_sub": ("--owner", options.owner_sub),
             "owner_only": ("--owner-only", True if options.owner_only else None)}
    for name, (flag, value) in given.items():
        if value is not None and getattr(obj, name) != value:
            return (f"{obj.object_id!r} has {name} {getattr(obj, name)!r}, not {flag} {value!r} (a file never "
                    f"overrides the options given)")
    return None


def _reason(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MAX_REASON else text[: _MAX_REASON - 3] + "..."


def _digest(obj: ContentObject) -> str:
    """A digest of everything the object says but its version (the source's digest not yet in)."""
    return hashlib.sha256(obj.model_dump_json(exclude={"version"}).encode()).hexdigest()


class _Writer:
    """Loads and writes one batch of files at a time, on a connection per worker thread."""

    def __init__(self, dsn: str | None, plan: Plan, options: IngestOptions, stored: dict[str, StoredObject]) -> None:
        self.dsn, self.plan, self.options, self.stored = dsn, plan, options, stored
        self._local = threading.local()
        self._conns: list[Groundkit] = []
        self._lock = threading.Lock()

    def _gk(self) -> Groundkit:
        gk: Groundkit | None = getattr(self._local, "gk", None)
        if gk is None:
            gk = Groundkit.connect(self.dsn)
            self._local.gk = gk
            with self._lock:
                self._conns.append(gk)
        return gk

    def close(self) -> None:
        for gk in self._conns:
            gk.close()

    def _object(self, rel: str) -> tuple[ContentObject, StoredObject | None]:
        o = self.options
        if len(rel) > 256:
            raise Skipped("path longer than 256 characters (an object id's limit)")
        kind = kind_of(rel)
        assert kind is not None and o.space_id is not None and o.tier is not None
        current = self.stored.get(rel)
        if current is not None:  # before the file is read: what cannot be written costs nothing
            if current.state != "live":
                raise Skipped(f"object {rel!r} was {current.state}; a deleted object id is never written again")
            if (current.space_id != o.space_id or not current.source
                    or current.source.get("base") != self.plan.tree.base):
                raise Skipped(f"object id {rel!r} is taken by an object not ingested from this base into this space")
        data = self.plan.tree.read(rel, o.max_bytes)
        loaded = load(kind, data, os.path.splitext(os.path.basename(rel))[0], max_pages=o.max_pages)
        content_type = o.content_type or DEFAULT_CONTENT_TYPES.get(kind, "document")
        source: dict[str, Any] = {"base": self.plan.tree.base, "path": rel, "loader": LOADER_VERSION}
        fields: dict[str, Any] = {
            "object_id": rel, "version": 1, "content_type": content_type, "space_id": o.space_id,
            "tier_visibility": o.tier, "title": loaded.title, "body": loaded.body, "owner_sub": o.owner_sub,
            "owner_only": o.owner_only, "segments": loaded.segments if content_type == "transcript" else None,
            "metadata": {"source": source},
        }
        try:
            draft = ContentObject.model_validate(fields)
        except ValueError as exc:
            raise Failed(str(exc)) from None
        source["sha256"] = _digest(draft)
        version = 1
        if current is not None and current.source is not None:
            version = current.version if current.source.get("sha256") == source["sha256"] else current.version + 1
        return ContentObject.model_validate({**fields, "version": version}), current

    def write(self, rels: list[str]) -> list[tuple[str, Outcome, str]]:
        """Load ``rels`` and write what loaded in one statement (``put_objects``); (file, what
        happened, why for skipped and failed) for each, in order."""
        outcomes: dict[str, tuple[Outcome, str]] = {}
        ready: list[tuple[str, ContentObject, StoredObject | None]] = []
        for rel in rels:
            try:
                obj, current = self._object(rel)
            except (Skipped, Failed) as exc:
                outcomes[rel] = ("skipped" if isinstance(exc, Skipped) else "failed", exc.reason)
            else:
                ready.append((rel, obj, current))
        if len(ready) > 1:
            try:
                results = {r.object_id: r.status for r in self._gk().put_objects([obj for _, obj, _ in ready])}
            except _FATAL:
                raise
            except GroundkitError:
                pass  # one object failed the statement: each is written alone below, to say which
            else:
                for rel, _obj, current in ready:
                    outcomes[rel] = _outcome(rel, current, results[rel])
                ready = []
        for rel, obj, current in ready:
            outcomes[rel] = self._write_one(rel, obj, current)
        return [(rel, *outcomes[rel]) for rel in rels]

    def _write_one(self, rel: str, obj: ContentObject, current: StoredObject | None) -> tuple[Outcome, str]:
        try:
            return _outcome(rel, current, self._gk().put(obj).status)
        except _FATAL:
            raise
        except GroundkitError as exc:
            code = f"[{exc.sqlstate}] " if exc.sqlstate else ""
            return "failed", code + exc.message


def _outcome(rel: str, current: StoredObject | None, status: WriteStatus) -> tuple[Outcome, str]:
    if status is WriteStatus.APPLIED:
        return ("loaded" if current is None else "updated"), ""
    if status is WriteStatus.DUPLICATE:
        return "unchanged", ""
    if status is WriteStatus.TOMBSTONED:
        return "skipped", f"object {rel!r} was deleted; a deleted object id is never written again"
    return "failed", f"a newer version of {rel!r} was written meanwhile ({status.value})"


def run(gk: Groundkit, dsn: str | None, plan: Plan, options: IngestOptions,
        advance: Callable[[str], None] | None = None) -> tuple[IngestReport, list[str]]:
    """Load and write ``plan.files`` on ``options.jobs`` connections of their own; find the
    objects whose files are gone (deleting them with ``options.delete_missing``). Returns the
    report (JSON Lines files not included) and the ids this run wrote."""
    with telemetry.span("ingest.run", files=len(plan.files), jobs=options.jobs) as current:
        report, written = _run(gk, dsn, plan, options, advance)
        telemetry.set_attributes(current, written=len(written), failed=len(report.failed))
    return report, written


def _run(gk: Groundkit, dsn: str | None, plan: Plan, options: IngestOptions,
         advance: Callable[[str], None] | None) -> tuple[IngestReport, list[str]]:
    started = time.monotonic()
    report = IngestReport(skipped=[PathReason(path=p, reason=r) for p, r in plan.skipped])
    if plan.files and (options.space_id is None or options.tier is None):
        raise InvalidArgument("--space and --tier are needed to ingest files other than .jsonl")
    if options.content_type is not None and options.content_type not in CONTENT_TYPES:
        raise UnknownContentType(f"unknown content type {options.content_type!r}; one of {', '.join(CONTENT_TYPES)}")
    stored = gk.stored_objects(plan.files) if plan.files else {}
    writer = _Writer(dsn, plan, options, stored)
    written: list[str] = []
    try:
        for rel, outcome, reason in _in_parallel(writer, plan.files, options.jobs, options.batch):
            if outcome in ("skipped", "failed"):
                getattr(report, outcome).append(PathReason(path=rel, reason=_reason(reason)))
            else:
                setattr(report, outcome, getattr(report, outcome) + 1)
                if outcome != "unchanged":
                    written.append(rel)
            if advance is not None:
                advance(rel)
    finally:
        writer.close()
    if options.space_id is not None:
        _missing(gk, plan, options, report)
    report.skipped.sort(key=lambda item: item.path)
    report.failed.sort(key=lambda item: item.path)
    report.seconds = time.monotonic() - started
    return report, written


def _in_parallel(writer: _Writer, files: list[str], jobs: int,
                 batch: int) -> Iterator[tuple[str, Outcome, str]]:
    """(file, outcome, reason) as the writes finish, ``batch`` files per statement, at most
    ``jobs`` statements at a time, submitted lazily so a Ctrl-C cancels what has not started;
    what has started finishes (each statement writes its objects whole or not at all)."""
    pending: set[Future[list[tuple[str, Outcome, str]]]] = set()
    batches = (files[i:i + batch] for i in range(0, len(files), batch))
    with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="groundkit-ingest") as pool:
        try:
            while True:
                while len(pending) < jobs * 2 and (group := next(batches, None)) is not None:
                    pending.add(pool.submit(writer.write, group))
                if not pending:
                    return
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    yield from fut.result()
        except BaseException:
            for fut in pending:
                fut.cancel()
            raise


def _missing(gk: Groundkit, plan: Plan, options: IngestOptions, report: IngestReport) -> None:
    """The objects ingested from this base into this space under PATH whose files are no
    longer there (a file skipped or failed this time is there: not missing)."""
    assert options.space_id is not None
    seen = {*plan.files, *plan.jsonl, *(p for p, _ in plan.skipped)}
    prefix = plan.start + "/" if plan.start else ""
    for object_id, obj in sorted(gk.sourced_objects(options.space_id, plan.tree.base).items()):
        path = str((obj.source or {}).get("path", object_id))
        if path in seen or not (path.startswith(prefix) or path == plan.start):
            continue
        report.missing.append(escaped(path))  # an id written before GK005 refused such names
        if options.delete_missing:
            if gk.delete_object(object_id, obj.version + 1).status is WriteStatus.APPLIED:
                report.deleted += 1
