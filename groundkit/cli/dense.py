"""The dense arm's commands: ``dense enable``, ``embed``, ``models``, ``reindex``,
``shadow-compare``, ``cutover`` (docs/dense.md, docs/embedding-worker.md)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from groundkit import dense_enable as dense_enable_lib
from groundkit import deployment, embedding, model_swap
from groundkit.cli import governance as gov
from groundkit.cli._common import DsnOption, err, handle_errors, out
from groundkit.cli.worker import progress_bars, sigterm_interrupts
from groundkit.client import Groundkit, resolve_dsn
from groundkit.errors import EmbeddingProviderError, InvalidArgument
from groundkit.models import MaintenanceStep

# Exit status of a command interrupted by Ctrl-C or SIGTERM (128 + SIGINT), as shells report it.
INTERRUPTED = 130

models_app = typer.Typer(help="The embedding models: add one, list them with their state and lag.",
                         no_args_is_help=True, rich_markup_mode="markdown")

ModelOption = Annotated[str, typer.Option("--model", help="The embedding model's name (groundkit models list).")]


@handle_errors
def embed(
    model: Annotated[str | None, typer.Option(
        "--model", help="Only this model. Default: the active model and every model being reindexed.")] = None,
    batch: Annotated[int, typer.Option(min=1, max=embedding.MAX_BATCH, help="Chunks per transaction.")]
        = embedding.DEFAULT_BATCH,
    as_json: Annotated[bool, typer.Option(
        "--json", help='One object per model: {"model", "chunks", "seconds", "chunks_per_s"}.')] = False,
    dsn: DsnOption = None,
) -> None:
    """Embed every current chunk that lacks an embedding for the model, batch by batch (one
    transaction each), then build each HNSW index of the model that is due. Safe
    beside other `embed` processes and workers (they take other batches); Ctrl-C keeps every
    batch committed and exits 130, and the next run embeds only what is still missing."""
    from groundkit.embedders import embedder_for

    with Groundkit.connect(dsn) as gk:
        models = [embedding.get_model(gk, model)] if model else embedding.models_to_embed(gk)
        if not models:
            embedding.require_dense(gk)
            raise InvalidArgument("no embedding model is active or being reindexed: "
                                  "groundkit models add, then groundkit embed --model NAME")
        try:
            with sigterm_interrupts(), progress_bars() as progress:
                for m in models:
                    task = progress.add_task(f"embed {m.name}", total=None)

                    def advance(done: int, total: int, task: Any = task) -> None:
                        progress.update(task, completed=done, total=total)

                    report = embedding.embed_pending(gk, m, embedder_for(m), batch=batch, progress=advance)
                    progress.remove_task(task)
                    _say(report, as_json)
                    _say_index_steps(embedding.build_due_indexes(gk, [m.name]))
        except KeyboardInterrupt:
            err.print("interrupted: the batches committed so far are kept; run groundkit embed again to "
                      "embed the rest", highlight=False)
            raise typer.Exit(INTERRUPTED) from None


def _say(report: embedding.EmbedReport, as_json: bool) -> None:
    if as_json:
        sys.stdout.write(report.model_dump_json() + "\n")
        sys.stdout.flush()
    else:
        out.print(f"{report.model}: embedded {report.chunks:,} chunk(s) in {report.seconds:.1f} s "
                  f"({report.chunks_per_s:.1f}/s)", highlight=False)


def _say_index_steps(steps: list[MaintenanceStep]) -> None:
    """The dense index's upkeep after embedding (``embedding.build_due_indexes``), on stderr."""
    for step in steps:
        if step.name == "dense":
            err.print(f"merged {step.count:,} pending entries of {step.reason} into their HNSW indexes "
                      f"in {step.seconds:.1f} s", highlight=False)
        else:
            err.print(f"built {step.count} HNSW index(es) of {step.reason} in {step.seconds:.1f} s", highlight=False)


@models_app.command("add")
@handle_errors
def models_add(
    name: Annotated[str, typer.Argument(help="The model's name in groundkit (letters, digits, _.:/-).")],
    provider: Annotated[str, typer.Option(help="local, ollama or openai (any OpenAI-compatible endpoint).")],
    dimension: Annotated[int | None, typer.Option(
        help="The vectors' dimension (checked on every batch). Not needed for the local provider (384).")] = None,
    distance: Annotated[str, typer.Option(help="cosine, l2 or inner_product.")] = "cosine",
    recipe: Annotated[str, typer.Option(help="The text it embeds: text (the chunk) or titled (title, "
                                             "headings and chunk, as BM25 indexes it).")] = "titled",
    url: Annotated[str | None, typer.Option(help="ollama / openai: the endpoint's base URL.")] = None,
    remote_model: Annotated[str | None, typer.Option(help="ollama / openai: the model's name there.")] = None,
    api_key_env: Annotated[str | None, typer.Option(
        help="openai: the environment variable holding the API key (read at call time, never stored).")] = None,
    dsn: DsnOption = None,
) -> None:
    """Register an embedding model (inactive). Then `groundkit reindex --model NAME` to embed it
    beside the active one, or, for the first model, `groundkit embed --model NAME` and
    `groundkit cutover --model NAME` (for the local model, `groundkit dense enable` does all of it)."""
    options = {key: value for key, value in (("url", url), ("model", remote_model), ("api_key_env", api_key_env))
               if value is not None}
    with Groundkit.connect(dsn) as gk:
        model_swap.add_model(gk, name=name, provider=provider, dimension=dimension, distance=distance,
                             recipe=recipe, options=options)
        added = embedding.get_model(gk, name)
    out.print(f"embedding model {name}: {provider}, {added.dimension} dimensions, {distance}, recipe {recipe}",
              highlight=False)


@models_app.command("list")
@handle_errors
def models_list(
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per model.")] = False,
    dsn: DsnOption = None,
) -> None:
    """The embedding models, the active one first, with their state (active, building,
    inactive) and lag: current chunks they have not embedded, and the oldest one's age."""
    with Groundkit.connect(dsn) as gk:
        models = embedding.list_models(gk)
        lags = {lag.model: lag for lag in embedding.lag(gk)}
    if as_json:
        for m, state in models:
            lag = lags.get(m.name)
            sys.stdout.write(json.dumps({**m.model_dump(mode="json"), "state": state,
                                         "missing": lag.missing if lag else None,
                                         "oldest_age_s": lag.oldest_age_s if lag else None}) + "\n")
        return
    table = Table()
    for col in ("model", "state", "provider", "dimension", "distance", "recipe", "missing", "oldest"):
        table.add_column(col)
    for m, state in models:
        lag = lags.get(m.name)
        table.add_row(m.name, state, m.provider, str(m.dimension), m.distance, m.recipe,
                      f"{lag.missing:,}" if lag else "-", _age(lag.oldest_age_s if lag else None))
    out.print(table)


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


@handle_errors
def reindex(
    model: ModelOption,
    stop: Annotated[bool, typer.Option("--stop", help="No longer keep this model embedded.")] = False,
    dsn: DsnOption = None,
) -> None:
    """Build another embedding model beside the active one: the worker (or `groundkit embed`)
    embeds every chunk with it while search keeps serving the active model. Then
    `groundkit shadow-compare` and `groundkit cutover`."""
    with Groundkit.connect(dsn) as gk:
        if stop:
            model_swap.stop_reindex(gk, model)
            out.print(f"{model}: no longer kept embedded", highlight=False)
            return
        model_swap.start_reindex(gk, model)
        missing = sum(lag.missing for lag in embedding.lag(gk, model))
    out.print(f"{model}: being built; {missing:,} chunk(s) to embed (groundkit worker, or groundkit embed "
              f"--model {model}); search serves the active model until groundkit cutover", highlight=False)


@handle_errors
def cutover(
    model: ModelOption,
    force: Annotated[bool, typer.Option("--force", help="Even while the model's lag is not zero (search "
                                                        "then misses the chunks it has not embedded).")] = False,
    skip_gate: gov.SkipGateOption = False,
    reason: gov.ReasonOption = None,
    certificate: gov.CertificateOption = None,
    public_key: gov.PublicKeyOption = None,
    gate_dsn: gov.GateDsnOption = None,
    tap: gov.TapOption = None,
    dsn: DsnOption = None,
) -> None:
    """Make MODEL the active embedding model, in one transaction, behind the permission gate;
    refused while its lag is not zero, unless --force.

    First the golden set (its downgrade and stale-metadata steps among them) runs through dense
    and hybrid search embedding with MODEL, on a throwaway database; the switch happens only if it
    passes, and the verdict goes into the gate ledger (docs/governance.md). Cutting over to a
    model already certified here (a rollback) reuses its certificate."""
    bypass = gov.skip_reason(skip_gate, reason)
    previous = activate_model(resolve_dsn(dsn), model, force=force, skip_reason=bypass, certificate=certificate,
                              public_key=public_key, gate_dsn=gate_dsn, tap=tap)
    was = f" (was {previous})" if previous and previous != model else ""
    out.print(f"active embedding model: {model}{was}", highlight=False)


def activate_model(dsn: str, model: str, *, force: bool, skip_reason: str | None = None,
                   certificate: Path | None = None, public_key: Path | None = None, gate_dsn: str | None = None,
                   tap: Path | None = None) -> str | None:
    """The one way the command line makes a model active, `groundkit cutover`'s and `groundkit
    dense enable`'s both: behind the gate (deployment.gated_cutover), its verdict said once.
    Returns the model replaced."""
    with gov.gate_output(tap) as buf:
        previous, change = deployment.gated_cutover(
            dsn, model, force=force, skip_reason=skip_reason, certificate=certificate, public_key=public_key,
            gate_dsn=gate_dsn, out=buf, progress=gov.section_progress,
            command=f"groundkit cutover --model {model}" + (" --skip-gate" if skip_reason else ""))
    gov.say_change("cutover", change)
    return previous


dense_app = typer.Typer(help="Dense retrieval in one step: the local model, embedded and made active.",
                        no_args_is_help=True, rich_markup_mode="markdown")


@dense_app.command("enable")
@handle_errors
def dense_enable(
    model: Annotated[str, typer.Option("--model", help="The name to register the local model under.")]
        = dense_enable_lib.DEFAULT_MODEL,
    now: Annotated[bool, typer.Option("--now", help="Make it active at once, before embedding: hybrid search "
                                                    "covers the chunks not embedded yet by BM25 meanwhile.")]
        = False,
    batch: Annotated[int, typer.Option(min=1, max=embedding.MAX_BATCH, help="Chunks per transaction.")]
        = embedding.DEFAULT_BATCH,
    as_json: Annotated[bool, typer.Option(
        "--json", help='One object: {"model", "registered", "chunks", "seconds", "chunks_per_s", "activated"}.')]
        = False,
    skip_gate: gov.SkipGateOption = False,
    reason: gov.ReasonOption = None,
    gate_dsn: gov.GateDsnOption = None,
    tap: gov.TapOption = None,
    dsn: DsnOption = None,
) -> None:
    """Turn on dense and hybrid search with the local model (all-MiniLM-L6-v2, the `embed` extra).

    Registers it (its dimension is known), embeds every current chunk with a progress bar, and
    makes it the active model once none is left (`groundkit cutover`'s path, behind the
    permission gate), so that search's default mode, `auto`, is hybrid from then on. Run again,
    it embeds what the model lacks. Ctrl-C keeps every batch committed; the model stays being
    built and a running worker embeds the rest. Refused while another model is active (swapping:
    `groundkit reindex`)."""
    bypass = gov.skip_reason(skip_gate, reason)
    target = resolve_dsn(dsn)
    with Groundkit.connect(target) as gk:
        embedding.require_dense(gk)
        err.print(f"loading the local model{_first_use_note()}", highlight=False)
        try:
            with sigterm_interrupts(), progress_bars() as progress:
                task = progress.add_task(f"embed {model}", total=None)

                def advance(done: int, total: int) -> None:
                    progress.update(task, completed=done, total=total)

                def activate(name: str, force: bool) -> str | None:
                    return activate_model(target, name, force=force, skip_reason=bypass, gate_dsn=gate_dsn, tap=tap)

                report = dense_enable_lib.enable(gk, activate, name=model, now=now, batch=batch, progress=advance)
                progress.remove_task(task)
                _say_index_steps(embedding.build_due_indexes(gk, [model]))
        except KeyboardInterrupt:
            err.print(f"interrupted: the batches committed so far are kept; {model} stays being built (a running "
                      "worker embeds the rest); run groundkit dense enable again to finish", highlight=False)
            raise typer.Exit(INTERRUPTED) from None
    if as_json:
        sys.stdout.write(report.model_dump_json() + "\n")
        return
    how = {"now": "active from the start (hybrid covered what was not embedded yet by BM25)",
           "caught up": "active now that every chunk is embedded",
           "already": "active already"}[report.activated]
    out.print(f"{model}: {'registered, ' if report.registered else ''}embedded {report.chunks:,} chunk(s) in "
              f"{report.seconds:.1f} s ({report.chunks_per_s:.1f}/s); {how}. Search's default mode (auto) is "
              "hybrid: groundkit search --as MEMBER 'a question'", highlight=False)


def _first_use_note() -> str:
    """What the first use costs, said before it starts: the ONNX export, once per machine."""
    from groundkit.embedders.export import cached_path

    try:
        cached = cached_path().exists()
    except EmbeddingProviderError:  # (the weights package is missing: the embedder says so, right after)
        return ""
    return "" if cached else (" (first use: exporting it to ONNX once, cached under groundkit's data "
                              "directory; a minute or two)")


@handle_errors
def shadow_compare(
    model: ModelOption,
    as_: Annotated[str, typer.Option("--as", help="The member whose searches are compared.")],
    queries: Annotated[Path | None, typer.Option(
        exists=True, dir_okay=False, help="Queries, one per line, or JSON lines with a `query` (a labelled file "
        "from `groundkit eval export-samples`: graded candidates give the nDCG@10 deltas).")] = None,
    sampled: Annotated[int | None, typer.Option(min=1, help="Instead: the latest N distinct sampled queries.")]
        = None,
    mode: Annotated[str, typer.Option(help="dense or hybrid.")] = "dense",
    k: Annotated[int, typer.Option("-k", min=1, max=200, help="Compare the top k.")] = 10,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object.")] = False,
    dsn: DsnOption = None,
) -> None:
    """Run the same queries on the active model and on MODEL: the mean overlap of their top k
    and, over judged queries, nDCG@k of each and the difference. MODEL is searched in a
    transaction that makes it active and is rolled back: nobody else sees it."""
    if (queries is None) == (sampled is None):
        raise InvalidArgument("give --queries FILE or --sampled N")
    if mode not in ("dense", "hybrid"):
        raise InvalidArgument(f"--mode is dense or hybrid (got {mode!r})")
    with Groundkit.connect(dsn) as gk:
        qs = model_swap.read_queries(queries) if queries is not None else model_swap.sampled_queries(gk, sampled or 0)
        report = model_swap.shadow_compare(gk, model, qs, as_, k=k, mode="dense" if mode == "dense" else "hybrid")
    if as_json:
        body = report.model_dump(mode="json")
        body["ndcg_delta"] = report.ndcg_delta
        sys.stdout.write(json.dumps(body) + "\n")
        return
    out.print(f"{report.queries} quer(ies), {report.mode}, as {as_}: overlap@{k} of {report.active} and "
              f"{report.candidate} {report.overlap_at_k:.3f}", highlight=False)
    if report.judged and report.ndcg_delta is not None:
        out.print(f"nDCG@{k} over {report.judged} judged: {report.active} {report.ndcg_active:.4f}, "
                  f"{report.candidate} {report.ndcg_candidate:.4f} ({report.ndcg_delta:+.4f})", highlight=False)
