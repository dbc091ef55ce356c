"""``groundkit``: migrate, manage the embedded server, write, search, demo, eval."""

from __future__ import annotations

import contextlib
import json
import sys
from datetime import UTC, datetime
from typing import Annotated, cast

import typer
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
)

import groundkit
from groundkit import deployment, embedding, replicas
from groundkit import worker as groundkit_worker
from groundkit.cli import citations
from groundkit.cli import config as config_cli
from groundkit.cli import costs as costs_cli
from groundkit.cli import db as db_cli
from groundkit.cli import demo as demo_cli
from groundkit.cli import dense as dense_cli
from groundkit.cli import eval as eval_cli
from groundkit.cli import explain as explain_cli
from groundkit.cli import governance as gov
from groundkit.cli import home as home_cli
from groundkit.cli import ingest as ingest_cli
from groundkit.cli import outbound as outbound_cli
from groundkit.cli import runs as runs_cli
from groundkit.cli import serve as serve_cli
from groundkit.cli import tokens as tokens_cli
from groundkit.cli._common import (
    DsnOption,
    EmbedLagAlertChunksOption,
    EmbedLagAlertSOption,
    FenceAlertOption,
    ReplayLagAlertOption,
    err,
    handle_errors,
    out,
    print_error,
)
from groundkit.cli.worker import (
    ReindexAtOption,
    analyze_with_progress,
    progress_bars,
    sigterm_interrupts,
    step_progress,
    worker,
)
from groundkit.client import Groundkit, resolve_dsn
from groundkit.config import Settings
from groundkit.errors import ConfigError, DatabaseUnavailable, GroundkitError, InvalidArgument
from groundkit.health import FENCE_ALERT, REPLAY_LAG_ALERT_S, Thresholds, health_report
from groundkit.maintenance import ANALYZE_GROWTH, REINDEX_DRIFT
from groundkit.models import (
    DEFAULT_SEARCH_MODE,
    SEARCH_MODES,
    AnalysisState,
    Due,
    IndexStatus,
    MaintenanceReport,
    OutdatedChunks,
    SearchMode,
    WorkerHeartbeat,
)

app = typer.Typer(
    name="groundkit",
    help="Permission-correct retrieval inside one Postgres database.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Markdown joins a docstring's wrapped lines in the command list; "rich" keeps them.
    rich_markup_mode="markdown",
)
app.add_typer(db_cli.app, name="db")
app.add_typer(eval_cli.app, name="eval")
app.add_typer(config_cli.app, name="config")
app.add_typer(serve_cli.app, name="serve")
app.add_typer(tokens_cli.app, name="tokens")
app.add_typer(outbound_cli.app, name="outbound")
app.command("demo")(demo_cli.demo)
app.command("ingest")(ingest_cli.ingest)
app.command("home")(home_cli.home)
app.command("costs")(costs_cli.costs)
app.command("replay")(runs_cli.replay)
app.add_typer(runs_cli.app, name="runs")
app.add_typer(dense_cli.dense_app, name="dense")
app.command("embed")(dense_cli.embed)
app.add_typer(dense_cli.models_app, name="models")
app.command("reindex")(dense_cli.reindex)
app.command("shadow-compare")(dense_cli.shadow_compare)
app.command("cutover")(dense_cli.cutover)
app.add_typer(gov.app, name="audit")
app.command("explain")(explain_cli.explain_command)


@app.callback()
def _startup() -> None:
    """Permission-correct retrieval inside one Postgres database."""
    try:
        Settings.from_env()
    except ConfigError as exc:
        print_error(exc)
        raise typer.Exit(2) from None


@app.command()
@handle_errors
def migrate(
    dsn: DsnOption = None,
    sql: Annotated[bool, typer.Option("--sql", help="Print the DDL instead of applying it.")] = False,
    list_: Annotated[bool, typer.Option("--list", help="Show applied and pending revisions; write nothing.")] = False,
    skip_gate: gov.SkipGateOption = False,
    reason: gov.ReasonOption = None,
    certificate: gov.CertificateOption = None,
    public_key: gov.PublicKeyOption = None,
    gate_dsn: gov.GateDsnOption = None,
    tap: gov.TapOption = None,
) -> None:
    """Create or upgrade the groundkit schema (Alembic upgrade head + replaceable SQL), behind the
    permission gate.

    First the gate's migrate sections run on a throwaway database at the target revision on the
    same server, and only if they pass is the database touched. The verdict goes into the gate
    ledger (docs/governance.md). A configuration already certified is not gated again."""
    if sql:
        sys.stdout.write(groundkit.migration_sql())
        return
    target = resolve_dsn(dsn)
    if list_:
        state = groundkit.migration_state(target)
        for rev in state.applied:
            out.print(f"applied  {rev}")
        for rev in state.pending:
            out.print(f"pending  {rev}")
        out.print(f"replaceable SQL (re-applied by every migrate): {', '.join(state.replaceable_sql)}")
        return
    bypass = gov.skip_reason(skip_gate, reason)
    with gov.gate_output(tap) as buf:
        state, change = deployment.gated_migrate(
            target, skip_reason=bypass, certificate=certificate, public_key=public_key, gate_dsn=gate_dsn,
            out=buf, progress=gov.section_progress, command="groundkit migrate" + (" --skip-gate" if bypass else ""))
    for warning in state.warnings:
        err.print(f"[yellow]warning:[/] {escape(warning)}", highlight=False)
    out.print(f"groundkit schema at revision {state.head}; replaceable SQL applied "
              f"({len(state.replaceable_sql)} files)")
    gov.say_change("migrate", change)


@app.command("put-member")
@handle_errors
def put_member(
    member_sub: Annotated[str, typer.Argument(help="The member's stable subject id.")],
    tier: Annotated[str, typer.Argument(help="A tier from groundkit.tiers, e.g. T2.")],
    status: Annotated[str, typer.Option(help="active, pending, suspended or revoked.")] = "active",
    dsn: DsnOption = None,
) -> None:
    """Create or update a member's live tier and status."""
    with Groundkit.connect(dsn) as gk:
        gk.put_member(member_sub, tier, status)
    out.print(f"member {member_sub}: {tier}, {status}")


@app.command("put-space")
@handle_errors
def put_space(
    space_id: Annotated[str, typer.Argument(help="A board or course id.")],
    min_tier: Annotated[str, typer.Option(help="Lowest tier that may read the space.")] = "T0",
    private: Annotated[bool, typer.Option("--private/--public", help="Private spaces need a grant.")] = False,
    dsn: DsnOption = None,
) -> None:
    """Create or update a space's live policy."""
    with Groundkit.connect(dsn) as gk:
        gk.put_space(space_id, min_tier, private)
    out.print(f"space {space_id}: min tier {min_tier}, {'private' if private else 'public'}")


@app.command()
@handle_errors
def rebuild(dsn: DsnOption = None) -> None:
    """Recompute every derived view (objects, chunks, postings, statistics) from the log, in one
    transaction, with progress. Readers and writers wait for it."""
    with Groundkit.connect(dsn) as gk, Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(), console=err
    ) as progress:
        task = progress.add_task("rebuild", total=None)

        def advance(done: int, total: int) -> None:
            # after the last batch: the postings' indexes, the statistics and the commit
            label = "rebuild: indexes, statistics, sketches, commit" if done >= total else "rebuild"
            progress.update(task, completed=done, total=total, description=label)

        n = gk.rebuild(progress=advance)
    out.print(f"rebuilt {n} object(s) from the log")


@app.command()
@handle_errors
def analyze(
    min_postings: Annotated[
        int | None,
        typer.Option(help="Sketch lists at least this long (default: groundkit.config.sketch_min_postings)."),
    ] = None,
    if_grown: Annotated[
        float | None,
        typer.Option(min=0, help="Only once the chunk ids issued since the last analyze reach this share of "
                                 "the chunks there were then (groundkit.postings_growth()), as groundkit merge "
                                 "--analyze-at does; for a scheduled job."),
    ] = None,
    reindex_at: ReindexAtOption = REINDEX_DRIFT,
    dsn: DsnOption = None,
) -> None:
    """Sketch the long postings lists (planning statistics for search, like ANALYZE), with
    progress, after recomputing the postings' impacts if they no longer fit the chunks'
    average length (--reindex-at). Run it after large loads; searches and writers go on
    meanwhile."""
    with Groundkit.connect(dsn) as gk:
        if if_grown is not None and (growth := gk.postings_growth()) < if_grown:
            out.print(f"the chunks grew {growth:.1%} since the last analyze, less than {if_grown:.1%}: "
                      "nothing to do", highlight=False)
            return
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                      console=err) as progress:
            n = analyze_with_progress(gk, progress, min_postings=min_postings, reindex_at=reindex_at)
    out.print(f"sketched {n} postings list(s)")


@app.command()
@handle_errors
def status(
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object instead of lines.")] = False,
    replica: Annotated[list[str] | None, typer.Option(
        "--replica", help="A read replica's DSN (repeat for more): report its replay lag and its authority "
                          "position against the primary's.")] = None,
    check: Annotated[bool, typer.Option(
        "--check", help="Exit 1 when any alert below is breached (for monitoring): the active embedding model's "
                        "lag, a replica unreachable or lagging, the fence sending too many reads to the "
                        "primary, or a table behind groundkit.reader_authority without the fence's trigger; "
                        "or when no passing gate certifies the configuration serving readers.")] = False,
    embed_lag_alert_s: EmbedLagAlertSOption = None,
    embed_lag_alert_chunks: EmbedLagAlertChunksOption = None,
    replay_lag_alert_s: ReplayLagAlertOption = REPLAY_LAG_ALERT_S,
    fence_alert: FenceAlertOption = FENCE_ALERT,
    dsn: DsnOption = None,
) -> None:
    """Show the search index's state: chunks, pending postings, how old the planning statistics
    are, whether the postings' impacts fit the configuration and the chunks, chunks made by
    another chunker version or other sizes than the configuration's (groundkit rebuild re-chunks
    them), each embedding model's lag, when a worker last ran, and what a maintenance pass would
    do now (due).

    The outbound policy in force, what it withholds from each embedding model (BM25-only
    chunks, not counted as lag), and the outbound gate's decisions of the last 24 hours
    (docs/outbound.md).

    With read replicas: each one's lag, its authority position against the primary's, and how many reads the
    permission fence sent to the primary today (docs/replicas.md)."""
    thresholds = Thresholds.from_settings(embed_lag_alert_s=embed_lag_alert_s,
                                          embed_lag_alert_chunks=embed_lag_alert_chunks,
                                          replay_lag_alert_s=replay_lag_alert_s, fence_alert=fence_alert)
    with Groundkit.connect(dsn) as gk:
        report = health_report(gk, thresholds, tuple(replica or ()))
        outbound = _outbound_status(gk)
    gate = report.deployment
    if as_json:
        # (an infinite drift, k1 or b changed, is null)
        body = json.loads(report.index.model_dump_json())
        body["due"] = [d.model_dump() for d in report.due]
        body["workers"] = [json.loads(w.model_dump_json()) for w in report.workers]
        body["outdated_chunks"] = [o.model_dump() for o in report.outdated]
        body["analysis"] = [a.model_dump() for a in report.analysis]
        body["dense"] = {"available": report.dense, "lag": [json.loads(lag.model_dump_json()) for lag in report.lags],
                         "alerts": list(report.lag_alerts)}
        body["replication"] = {**report.replication.model_dump(), "alerts": list(report.replica_alerts)}
        body["outbound"] = outbound
        body["deployment"] = ({**json.loads(gate.model_dump_json()), "alerts": list(report.gate_alerts)} if gate
                              else None)
        sys.stdout.write(json.dumps(body) + "\n")
    else:
        _print_status(report.index, report.due, report.workers, report.outdated, report.dense, list(report.lags),
                      list(report.lag_alerts))
        _print_analysis(report.analysis)
        _print_replication(report.replication, list(report.replica_alerts))
        _print_outbound(outbound)
        _print_deployment(gate, list(report.gate_alerts))
    if check and report.alerts:
        raise typer.Exit(1)


def _print_deployment(gate: deployment.DeploymentStatus | None, alerts: list[str]) -> None:
    if gate is not None:
        c = gate.config
        model = c.get("embedding_model") or "no embedding model"
        out.print(f"configuration     {gate.config_hash[:16]}: groundkit {c.get('groundkit_version')}, revision "
                  f"{c.get('schema_revision')}, SQL {str(c.get('sql_digest'))[:12]}, PostgreSQL {c.get('postgres')}, "
                  f"pgvector {c.get('pgvector') or 'none'}, {model}, outbound policy "
                  f"{c.get('outbound_policy') or 'none'}", highlight=False, soft_wrap=True)
        if gate.certified:
            basis = f", resting on row {gate.certified_by}" if gate.certified_by != gate.ledger_id else ""
            out.print(f"gate              certified by ledger row {gate.ledger_id} ({gate.kind}, "
                      f"{gate.recorded_at:%Y-%m-%d %H:%M:%S %Z}, {gate.operator or gate.recorded_by}{basis})",
                      highlight=False, soft_wrap=True)
    for alert in alerts:
        err.print(f"[bold red]ALERT[/] gate: {escape(alert)}", highlight=False, soft_wrap=True)


def _print_status(st: IndexStatus, due: tuple[Due, ...], workers: tuple[WorkerHeartbeat, ...],
                  outdated: tuple[OutdatedChunks, ...], dense: bool, lags: list[embedding.EmbeddingLag],
                  alerts: list[str]) -> None:
    analyzed = (f"{st.analyzed_at:%Y-%m-%d %H:%M:%S %Z}; the chunks grew {st.growth:.1%} since"
                if st.analyzed_at is not None else "never")
    avgdl = f"{st.avgdl:.1f}" if st.avgdl is not None else "no shared chunks"
    out.print(f"chunks            {st.chunks:,}", highlight=False)
    out.print(f"pending postings  {st.pending_postings:,}", highlight=False)
    out.print(f"analyzed          {analyzed}", highlight=False)
    out.print(f"sketched lists    {st.sketched_lists:,}; terms with bits {st.bitted_terms:,}", highlight=False)
    out.print(f"BM25              k1 {st.k1:g}, b {st.b:g}; impacts at k1 {st.impact_k1:g}, b {st.impact_b:g}, "
              f"reference length {st.avgdl_ref:.1f}", highlight=False)
    out.print(f"average length    {avgdl} (the reference is off by {st.impact_drift:.2f}x)"
              if st.impacts_current else f"average length    {avgdl}", highlight=False)
    if st.avgdl_ref_min is not None:
        where = (f"under way in backend {st.reindex_pid}" if st.reindex_pid is not None
                 else "interrupted")
        if st.reindex_share is not None:
            where += f" (about {st.reindex_share:.0%} of the postings done)"
        out.print(f"recompute         {where}: some postings may still be at reference length "
                  f"{st.avgdl_ref_min:.1f}, which search bounds them all with", highlight=False)
    for o in outdated:
        made = (f"{o.chunker_version}, {o.chunk_chars}/{o.chunk_overlap} chars" if o.chunker is not None
                else f"{o.chunker_version}, before chunkers recorded their sizes")
        out.print(f"outdated chunks   {o.chunks:,} {o.content_type} chunks made by {made}: "
                  "groundkit rebuild re-chunks them", highlight=False)
    if not dense:
        out.print("embeddings        dense search unavailable: this server has no pgvector (BM25 works)",
                  highlight=False)
    elif not lags:
        out.print("embeddings        no embedding model (groundkit models add)", highlight=False)
    for lag in lags:
        oldest = f", the oldest waiting {dense_cli._age(lag.oldest_age_s)}" if lag.missing else ""
        withheld = (f"; {lag.withheld:,} withheld by the outbound policy (BM25-only)" if lag.withheld else "")
        out.print(f"embeddings        {lag.model} ({lag.state}): {lag.missing:,} chunk(s) unembedded{oldest}"
                  f"{withheld}", highlight=False)
    for alert in alerts:
        err.print(f"[bold red]ALERT[/] embedding lag: {escape(alert)}", highlight=False)
    for w in workers or (None,):
        out.print(f"worker            {_worker_line(w)}", highlight=False)
    for d in due:
        out.print(f"due: {d.reason}: the worker's next pass, or groundkit worker --once", highlight=False)


def _print_analysis(analysis: tuple[AnalysisState, ...]) -> None:
    """One line per language the index holds: current, or why `groundkit rebuild` is needed
    (docs/bm25/analysis.md, "Versioned like a chunker")."""
    for a in analysis:
        accents = ("accents folded" if a.folds_accents
                   else "accents kept: this server has no unaccent" if a.folds_accents is not None
                   else "no configuration on this server")
        if a.current:
            why = "current"
        elif a.built_version is None:
            why = "never recorded: groundkit rebuild analyzes the index again"
        elif a.built_version != a.version:
            why = (f"the index was analyzed by {a.built_version}, this groundkit analyzes with {a.version}: "
                   "groundkit rebuild analyzes it again")
        else:
            why = (f"its configuration's output on the probe words changed since the index was built (on server "
                   f"{a.built_server_version}; a PostgreSQL upgrade or a changed dictionary): groundkit rebuild "
                   "analyzes it again")
        out.print(f"analysis          {a.language} ({a.version}, {accents}): {why}", highlight=False)


def _outbound_status(gk: Groundkit) -> dict[str, object]:
    """The outbound policy in force and the gate's decisions of the last day (docs/outbound.md)."""
    from datetime import timedelta

    from groundkit.cli.outbound import decision_rows
    from groundkit.outbound.policy import current_policy

    version = current_policy(gk)
    rows = decision_rows(gk, datetime.now(UTC) - timedelta(days=1))
    return {"policy": json.loads(version.model_dump_json(exclude={"changed"})),
            "decisions_1d": [{**r, "last_at": r["last_at"].isoformat()} for r in rows]}


def _print_outbound(outbound: dict[str, object]) -> None:
    from groundkit.cli.outbound import print_policy
    from groundkit.outbound.policy import PolicyVersion

    print_policy(PolicyVersion.model_validate(outbound["policy"]))
    rows = cast(list[dict[str, object]], outbound["decisions_1d"])
    sent = sum(cast(int, r["calls"]) for r in rows if r["decision"] == "sent")
    refused = [r for r in rows if r["decision"] == "refused"]
    line = f"outbound calls    last 24 h: {sent:,} sent"
    if refused:
        rules = ", ".join(f"{r['rule']} {r['calls']}" for r in refused)
        line += f", {sum(cast(int, r['calls']) for r in refused):,} refused ({rules})"
    out.print(line, highlight=False, soft_wrap=True)


def _print_replication(rep: replicas.ReplicationStatus, alerts: list[str]) -> None:
    for function in rep.authority_functions:
        out.print(f"note: groundkit.reader_authority calls {function}: status cannot see which tables a function "
                  "reads; any it reads need the fence's trigger too (docs/replicas.md)", highlight=False)
    if not (rep.standbys or rep.replicas or rep.routes or rep.fence_gaps):
        return
    out.print(f"authority         position {rep.authority_position:,} (permission changes committed)", highlight=False)
    for s in rep.standbys:
        lag = f"{s.replay_lag_seconds:.2f} s" if s.replay_lag_seconds is not None else "lag not visible to this role"
        behind = f", {s.replay_behind_bytes:,} bytes to replay" if s.replay_behind_bytes is not None else ""
        out.print(f"standby           {s.name or '(unnamed)'}: {s.state}, {lag}{behind}", highlight=False)
    for r in rep.replicas:
        line = ("unreachable" if not r.reachable else
                f"replay lag {r.lag_seconds:.2f} s; authority "
                + ("replayed" if not r.authority_behind else f"{r.authority_behind:,} changes behind"))
        out.print(f"replica           {r.name}: {line}", highlight=False)
    for c in rep.routes:
        out.print(f"reads today       {c.replica}: {c.replica_reads:,} on the replica, {c.to_primary:,} on the primary "
                  f"({c.fence:,} by the fence, {c.lag:,} by lag, {c.unreachable:,} unreachable)", highlight=False)
    for a in alerts:
        out.print(f"alert: {a}", highlight=False)


def _worker_line(w: WorkerHeartbeat | None) -> str:
    if w is None:
        return "none has run (groundkit worker)"
    now = datetime.now(UTC)
    line = f"{w.worker_id}, started {w.started_at:%Y-%m-%d %H:%M:%S %Z}"
    if w.last_run_at is not None:
        line += f"; last pass {(now - w.last_run_at).total_seconds():.0f} s ago"
    if w.last_error is not None:
        line += f"; last error: {w.last_error}"
    if w.stopped_at is not None:
        line += f"; stopped {w.stopped_at:%Y-%m-%d %H:%M:%S %Z}"
    else:
        line += f"; heard from {(now - w.beat_at).total_seconds():.0f} s ago"
    return line


@app.command()
@handle_errors
def merge(
    every: Annotated[
        float | None,
        typer.Option(min=0.01, max=86_400,
                     help="Deprecated: run `groundkit worker --every SECONDS` instead (this runs it)."),
    ] = None,
    analyze_at: Annotated[
        float,
        typer.Option(min=0, help="Analyze the postings once the chunk ids issued since the last analyze reach "
                                 "this share of the chunks there were then (groundkit.postings_growth()); 0 never."),
    ] = ANALYZE_GROWTH,
    reindex_at: ReindexAtOption = REINDEX_DRIFT,
    dsn: DsnOption = None,
) -> None:
    """Merge the pending part (the postings of objects written one at a time) into the postings
    and the term statistics now: one maintenance pass, as `groundkit worker --once` runs, which
    also analyzes after growth and recomputes drifted impacts. Writers merge it themselves every
    config.pending_merge_chunks chunks.

    --every is deprecated: it runs the worker (`groundkit worker --every`), printing each merge."""

    def on_pass(report: MaintenanceReport | None, error: GroundkitError | None) -> None:
        if error is not None:
            err.print(f"pass failed: {error.message}", highlight=False)
            return
        assert report is not None
        if every is None or report.merged:
            out.print(f"merged {report.merged} pending posting(s)")
        for step in report.steps:
            if step.name in ("reindex", "analyze"):
                what = "recomputed the impacts of" if step.name == "reindex" else "sketched"
                noun = "postings" if step.name == "reindex" else "postings list(s)"
                out.print(f"{step.reason}: {what} {step.count} {noun} in {step.seconds:.1f} s", highlight=False)

    def on_lost(exc: DatabaseUnavailable, wait: float) -> None:
        err.print(f"lost the database: {exc.message}; connecting again in {wait:.1f} s", highlight=False)

    def on_connected(gk: Groundkit, again: bool) -> None:
        if again:
            out.print("connected again", highlight=False)

    if every is not None:
        err.print("note: `groundkit merge --every` is deprecated; it runs `groundkit worker`", highlight=False)
    with contextlib.suppress(KeyboardInterrupt), sigterm_interrupts(), progress_bars() as progress:
        groundkit_worker.run_worker(dsn, every=every, on_pass=on_pass, on_lost=on_lost, on_connected=on_connected,
                               progress=step_progress(progress), analyze_growth=analyze_at, reindex_at=reindex_at)


app.command("worker")(worker)


@app.command()
@handle_errors
def search(
    query: Annotated[str, typer.Argument(help="Plain text; search syntax has no special meaning.")],
    as_: Annotated[str, typer.Option("--as", help="The reader's member_sub.")],
    k: Annotated[int, typer.Option("-k", help="How many chunks (1-200).")] = 10,
    content_type: Annotated[list[str] | None, typer.Option(help="Only these content types.")] = None,
    space: Annotated[list[str] | None, typer.Option(help="Only these spaces.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON lines instead of a table.")] = False,
    mode: Annotated[str, typer.Option(
        help="auto (hybrid with an active embedding model, else bm25), bm25, dense (the active embedding model) "
             "or hybrid (both, fused).")] = DEFAULT_SEARCH_MODE,
    exact: Annotated[bool, typer.Option("--exact", help="Dense: an exact scan, never the HNSW index.")] = False,
    dsn: DsnOption = None,
) -> None:
    """Search as a member: only what that member may see right now."""
    if mode not in SEARCH_MODES:
        raise InvalidArgument(f"--mode is one of {', '.join(SEARCH_MODES)} (got {mode!r})")
    search_mode = cast("SearchMode", mode)
    with Groundkit.connect(dsn) as gk:
        hits = gk.search(as_, query, k=k, content_types=content_type, space_ids=space, mode=search_mode,
                         exact=exact)
    if as_json:
        for hit in hits:
            sys.stdout.write(json.dumps(hit.model_dump()) + "\n")
        return
    out.print(f"[bold]{len(hits)}[/] result(s) for {query!r} as [cyan]{as_}[/]", highlight=False)
    for rank, hit in enumerate(hits, start=1):
        where = f"{hit.content_type} · {hit.space_id} · {hit.object_id} v{hit.object_version} #{hit.chunk_seq}"
        out.print(f"{rank:>2}. [bold]{escape(hit.title)}[/]  [green]{hit.score:.3f}[/]", highlight=False)
        out.print(f"    [dim]{escape(where)}[/]", highlight=False)
        if cited := citations.where(hit):
            out.print(f"    [cyan]{escape(cited)}[/]", highlight=False)
        out.print(f"    {citations.snippet_markup(hit.snippet or '')}", highlight=False)


@app.command()
@handle_errors
def cite(
    object_id: Annotated[str, typer.Argument(help="The hit's object_id.")],
    version: Annotated[int, typer.Argument(help="The hit's object_version.")],
    chunk_seq: Annotated[int, typer.Argument(help="The hit's chunk_seq.")],
    as_: Annotated[str, typer.Option("--as", help="The reader's member_sub.")],
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object instead of text.")] = False,
    dsn: DsnOption = None,
) -> None:
    """Show a search hit's chunk in its context (the section, the post, the stretch of the
    recording), if the member may see it now. Exit 1 when there is none to show."""
    with Groundkit.connect(dsn) as gk:
        found = gk.fetch_citation(as_, object_id, version, chunk_seq)
    if found is None:
        # the same answer for an object the reader may not see and one that does not exist
        err.print(f"no citation {object_id} v{version} #{chunk_seq} for {as_}", highlight=False)
        raise typer.Exit(1)
    if as_json:
        sys.stdout.write(json.dumps(found.model_dump()) + "\n")
        return
    out.print(f"[bold]{escape(found.title)}[/]  [dim]{escape(found.content_type)} · {escape(found.space_id)}[/]",
              highlight=False)
    if cited := citations.where(found):
        out.print(f"[cyan]{escape(cited)}[/]", highlight=False)
    out.print(escape(found.context), highlight=False)
