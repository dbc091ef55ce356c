"""What each console page reads, as plain blocking calls on one :class:`~groundkit.Groundkit`.

Every function here is a call of the library or the SQL API that a CLI command makes too
(``search``, ``explain``, ``status``, ``costs``, ``runs``, ``audit verify``): the console adds no
way around the permission predicate and no second implementation of anything.
:mod:`groundkit.console.reads` runs these off the event loop; a part of a page the console's
database role may not read comes back as :class:`Unreadable` instead of failing the page.
"""

from __future__ import annotations

import html
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Generic, TypeVar

from groundkit import audit, deployment, embedding
from groundkit import explain as explaining
from groundkit.client import Groundkit
from groundkit.deployment import DeploymentStatus, LedgerRow
from groundkit.errors import DatabaseBusy, DatabaseUnavailable, GroundkitError, MigrationError
from groundkit.explain import VisibilityExplanation
from groundkit.health import HealthReport, Thresholds, health_report
from groundkit.metering import CostBy, CostRow, cost_summary
from groundkit.models import Replay, RunDiffRow, RunHeader, RunSummary, SearchHit, SearchMode
from groundkit.quality import results as quality_results
from groundkit.runs import parse_run_id

_T = TypeVar("_T")

#: the modes View as member shows, each in its own column
MODES: tuple[SearchMode, ...] = ("bm25", "dense", "hybrid")
MEMBER_CHOICES = 200  # members offered in the picker
BACKLOG_DAYS = 7
LEDGER_ROWS = 20  # the gate ledger's newest rows on Health


@dataclass(frozen=True)
class Unreadable:
    """A part of a page that could not be read: the role may not, or the schema lacks it."""

    why: str


def attempt(read: Callable[[], _T]) -> _T | Unreadable:
    """``read()``, or :class:`Unreadable` with the database's reason. A database that is down or
    busy is not a part's problem: it fails the page (503)."""
    try:
        return read()
    except (DatabaseUnavailable, DatabaseBusy):
        raise
    except MigrationError as exc:
        return Unreadable(f"not in this database's schema ({exc.message})")
    except GroundkitError as exc:
        if exc.sqlstate == "42501":
            return Unreadable("the console's database role may not read this (it needs the owner's or "
                              "groundkit_auditor's rights: docs/console.md)")
        return Unreadable(exc.message)


# -- View as member -----------------------------------------------------------------------


@dataclass(frozen=True)
class MemberRow:
    member_sub: str
    tier: str | None
    status: str | None


@dataclass(frozen=True)
class SnippetPart:
    text: str
    match: bool


@dataclass(frozen=True)
class Hit:
    rank: int
    hit: SearchHit
    snippet: tuple[SnippetPart, ...]


@dataclass(frozen=True)
class ModeResult:
    mode: SearchMode
    hits: tuple[Hit, ...] | None  # None: the mode did not run (see note)
    note: str | None = None


@dataclass(frozen=True)
class MemberView:
    member_sub: str
    authority: tuple[MemberRow, ...] | Unreadable  # reader_authority's rows for the member
    grants: tuple[str, ...] | Unreadable  # the private spaces granted to the member
    auto_mode: str  # what mode auto resolves to now
    modes: tuple[ModeResult, ...]


def members(gk: Groundkit, limit: int = MEMBER_CHOICES) -> tuple[MemberRow, ...]:
    """The first ``limit`` members by id, for the picker."""
    rows = gk._fetch("select member_sub, tier, status from groundkit.reader_authority"
                     " order by member_sub limit %(n)s", {"n": limit})
    return tuple(MemberRow(str(r["member_sub"]), r["tier"], r["status"]) for r in rows)


def snippet_parts(snippet: str | None, start: str, end: str) -> tuple[SnippetPart, ...]:
    """A snippet made with the markers ``start`` and ``end`` as text pieces, the matches marked.
    The snippet's text is HTML-escaped by search; it is unescaped here and escaped again by the
    template, so nothing in a chunk becomes markup, and the markers (random per request) cannot
    be forged by content."""
    if not snippet:
        return ()
    parts: list[SnippetPart] = []
    for i, piece in enumerate(snippet.split(start)):
        inner, _, after = piece.partition(end) if i else ("", "", piece)
        if inner:
            parts.append(SnippetPart(html.unescape(inner), True))
        if after:
            parts.append(SnippetPart(html.unescape(after), False))
    return tuple(parts)


def _markers() -> tuple[str, str]:
    tag = secrets.token_hex(8)
    return f"\ue000{tag}\ue001", f"\ue002{tag}\ue003"


def _search_mode(gk: Groundkit, member: str, query: str, k: int, mode: SearchMode, runnable: str | None) -> ModeResult:
    if runnable is not None:
        return ModeResult(mode, None, runnable)
    start, end = _markers()
    try:
        hits = gk.search(member, query, k=k, mode=mode, snippet_start=start, snippet_end=end)
    except (DatabaseUnavailable, DatabaseBusy):
        raise
    except GroundkitError as exc:
        return ModeResult(mode, None, exc.message)
    return ModeResult(mode, tuple(Hit(n, h, snippet_parts(h.snippet, start, end)) for n, h in enumerate(hits, 1)))


def _why_no_dense(gk: Groundkit) -> str:
    dense = attempt(lambda: embedding.dense_available(gk))
    if dense is True:
        return "no active embedding model (groundkit models add, then groundkit cutover)"
    if dense is False:
        return "this database has no pgvector: dense search is unavailable (BM25 works)"
    return "no active embedding model, or no pgvector"


def view_as_member(gk: Groundkit, member: str, query: str, k: int) -> MemberView:
    """What ``member`` sees for ``query`` in each mode, through :meth:`Groundkit.search` itself
    (the console's connections are read-only: the sampler records nothing, nothing is metered)."""
    authority = attempt(lambda: tuple(
        MemberRow(str(r["member_sub"]), r["tier"], r["status"]) for r in gk._fetch(
            "select member_sub, tier, status from groundkit.reader_authority where member_sub = %(m)s",
            {"m": member})))
    grants = attempt(lambda: tuple(str(r["space_id"]) for r in gk._fetch(
        "select space_id from groundkit.space_grants where member_sub = %(m)s order by space_id limit 50",
        {"m": member})))
    auto = str(gk._scalar("select groundkit.auto_search_mode() as mode", {}))
    why_not = None if auto == "hybrid" else _why_no_dense(gk)
    modes = tuple(_search_mode(gk, member, query, k, mode, None if mode == "bm25" else why_not) for mode in MODES)
    return MemberView(member, authority, grants, auto, modes)


def explain(gk: Groundkit, member: str, object_id: str, query: str | None) -> VisibilityExplanation:
    """``groundkit explain MEMBER OBJECT [--query Q]``: each clause of the predicate for the pair
    and the one that decides (``groundkit.explain_visibility``, the owner's and the auditor's);
    with ``query``, which of its terms each chunk holds and where each ranks in the member's own
    search (rolled back: nothing sampled)."""
    return explaining.explain(gk, member, object_id, query or None)


# -- Health ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Series(Generic[_T]):
    """A chart's data: x values (times) and one row of values per x, a column per series."""

    names: tuple[str, ...]
    rows: tuple[tuple[datetime, tuple[_T | None, ...]], ...]


@dataclass(frozen=True)
class HealthPage:
    report: HealthReport | Unreadable
    backlog: Series[int] | Unreadable


def backlog_series(gk: Groundkit, days: int = BACKLOG_DAYS) -> Series[int]:
    """Each embedding model's waiting chunks at the end of each hour of the last ``days`` days
    (``groundkit.embedding_backlog``)."""
    since = datetime.now(UTC) - timedelta(days=days)
    names = tuple(str(r["name"]) for r in gk._fetch(
        "select name from groundkit.embedding_models order by active desc, reindexing_at is not null desc, name", {}))
    by_time: dict[datetime, dict[str, int]] = {}
    for name in names:
        for r in gk._fetch("select bucket_end, waiting from groundkit.embedding_backlog(%(m)s, %(s)s, %(b)s)",
                           {"m": name, "s": since, "b": timedelta(hours=1)}):
            by_time.setdefault(r["bucket_end"], {})[name] = int(r["waiting"])
    return Series(names, tuple((at, tuple(v.get(n) for n in names)) for at, v in sorted(by_time.items())))


def status(gk: Groundkit, thresholds: Thresholds, replica_dsns: Sequence[str]) -> HealthReport | Unreadable:
    """``groundkit status``'s report, judged by its thresholds and its code."""
    return attempt(lambda: health_report(gk, thresholds, replica_dsns))


def health(gk: Groundkit, thresholds: Thresholds, replica_dsns: Sequence[str]) -> HealthPage:
    """The report and the embedding backlog over time, one after the other
    (:meth:`groundkit.console.reads.ConsoleReads.health` reads them side by side)."""
    return HealthPage(status(gk, thresholds, replica_dsns), attempt(lambda: backlog_series(gk)))


@dataclass(frozen=True)
class GateLedger:
    """Which configuration serves readers and whether (by which ledger row, when, by whom) a
    passing gate certifies it; None when the database has no ledger. Then the newest rows."""

    deployment: DeploymentStatus | None
    rows: tuple[LedgerRow, ...]


def gate_ledger(gk: Groundkit, limit: int = LEDGER_ROWS) -> GateLedger:
    """``groundkit audit ledger``'s newest rows and ``deployment_status()`` (every role may ask
    the latter; the rows are the auditor's and the owner's)."""
    status = deployment.serving_status(gk)
    if status is None:
        return GateLedger(None, ())
    return GateLedger(status, tuple(deployment.ledger(gk.conn, limit)))


# -- Spend ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SpendPage:
    since: datetime | None
    by_flow: tuple[CostRow, ...]
    by_model: tuple[CostRow, ...]
    by_day: tuple[CostRow, ...]

    @property
    def currencies(self) -> tuple[str, ...]:
        return tuple(sorted({r.currency for r in self.by_day if r.currency is not None}))


SPEND_BY: tuple[CostBy, ...] = ("flow", "model", "day")


def costs(gk: Groundkit, since: datetime | None, by: CostBy) -> tuple[CostRow, ...]:
    """``groundkit costs --by BY`` since ``since``: one of the Spend page's three reads."""
    return tuple(cost_summary(gk, since=since, by=by))


def spend(gk: Groundkit, since: datetime | None) -> SpendPage:
    """``groundkit costs --by flow``, ``--by model`` and ``--by day`` since ``since``, one after
    another (:meth:`groundkit.console.reads.ConsoleReads.spend` runs them side by side)."""
    return SpendPage(since, *(costs(gk, since, by) for by in SPEND_BY))


# -- Quality --------------------------------------------------------------------------------


@dataclass(frozen=True)
class QualityPage:
    latest: tuple[quality_results.StoredQuality, ...]
    collection_history: tuple[quality_results.StoredQuality, ...]
    label_history: tuple[quality_results.StoredQuality, ...]


def quality(gk: Groundkit) -> QualityPage | Unreadable:
    """The stored ``groundkit eval quality`` results (revision 0029)."""
    if not quality_results.has_results_table(gk):
        return Unreadable("this database has no stored quality results (revision 0029: groundkit migrate)")
    return QualityPage(tuple(quality_results.latest_results(gk)), tuple(quality_results.collection_history(gk)),
                       tuple(quality_results.label_history(gk)))


# -- Runs -----------------------------------------------------------------------------------

RUNS_SHOWN = 200


def runs(gk: Groundkit, flow: str | None, reader: str | None, since: datetime | None) -> tuple[RunSummary, ...]:
    """``groundkit runs list``: the newest :data:`RUNS_SHOWN` runs."""
    return tuple(gk.runs(flow=flow, reader=reader, since=since, limit=RUNS_SHOWN))


def replay(gk: Groundkit, run_id: str) -> Replay:
    """``groundkit replay``: the run's pinned set and what became of each item (as the auditor)."""
    return gk.replay(run_id)


def run_header(gk: Groundkit, run_id: str) -> RunHeader:
    """A run's header alone (``groundkit.run_header``, as the auditor)."""
    row = gk._fetch("select * from groundkit.run_header(%(r)s, null)", {"r": parse_run_id(run_id)})[0]
    data = {k: v for k, v in row.items() if k in RunHeader.model_fields}
    return RunHeader.model_validate({**data, "run_id": str(row["run_id"]),
                                     "snapshot": None if row["snapshot"] is None else str(row["snapshot"]),
                                     "cost": None if row["cost"] is None else float(row["cost"])})


@dataclass(frozen=True)
class RunDiff:
    a: RunHeader
    b: RunHeader
    rows: tuple[RunDiffRow, ...]


def diff(gk: Groundkit, run_a: str, run_b: str) -> RunDiff:
    """``groundkit runs diff``, with both runs' headers."""
    return RunDiff(run_header(gk, run_a), run_header(gk, run_b), tuple(gk.diff_runs(run_a, run_b)))


def verify_chain(gk: Groundkit) -> audit.ChainReport:
    """``groundkit audit verify``: the audit chain recomputed from its entries and today's rows."""
    return audit.verify_chain(gk)
