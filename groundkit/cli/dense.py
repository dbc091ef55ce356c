"""The dense arm's commands: ``embed``, ``models``, ``reindex``, ``shadow-compare``, ``cutover``
(docs/embedding-worker.md)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from groundkit import embedding, model_swap
from groundkit.cli._common import DsnOption, err, handle_errors, out
from groundkit.cli.worker import progress_bars, sigterm_interrupts
from groundkit.client import Groundkit
from groundkit.errors import InvalidArgument

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
                    for step in embedding.build_due_indexes(gk, [m.name]):
                        err.print(f"built {step.count} HNSW index(es) of {step.reason} in {step.seconds:.1f} s",
                                  highlight=False)
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


@models_app.command("add")
@handle_errors
def models_add(
    name: Annotated[str, typer.Argument(help="The model's name in groundkit (letters, digits, _.:/-).")],
    provider: Annotated[str, typer.Option(help="local, ollama or openai (any OpenAI-compatible endpoint).")],
    dimension: Annotated[int, typer.Option(help="The vectors' dimension (checked on every batch).")],
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
    `groundkit cutover --model NAME`."""
    options = {key: value for key, value in (("url", url), ("model", remote_model), ("api_key_env", api_key_env))
               if value is not None}
    with Groundkit.connect(dsn) as gk:
        model_swap.add_model(gk, name=name, provider=provider, dimension=dimension, distance=distance,
                             recipe=recipe, options=options)
    out.print(f"embedding model {name}: {provider}, {dimension} dimensions, {distance}, recipe {recipe}",
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
    dsn: DsnOption = None,
) -> None:
    """Make MODEL the active embedding model, in one transaction; refused while its lag is not
    zero, unless --force. Cutting over to the previous model rolls back (it is kept embedded).
    Run the permission gate again afterwards (`groundkit eval gate`)."""
    with Groundkit.connect(dsn) as gk:
        previous = model_swap.cutover(gk, model, force=force)
    was = f" (was {previous})" if previous and previous != model else ""
    out.print(f"active embedding model: {model}{was}", highlight=False)
    err.print(f"note: {model_swap.GATE_REMINDER}", highlight=False, soft_wrap=True)


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
