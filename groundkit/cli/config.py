"""``groundkit config``: settings that change more than a row (BM25's k1 and b), the chunk
sizes and the search mode of one content type, and flows."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console

from groundkit.cli._common import DsnOption, handle_errors, out
from groundkit.client import Groundkit
from groundkit.metering import add_flow as _add_flow

app = typer.Typer(help="Change settings that need more than an update of groundkit.config, and chunk sizes.",
                  no_args_is_help=True, rich_markup_mode="markdown")


@app.command("set-bm25")
@handle_errors
def set_bm25(
    k1: Annotated[float, typer.Argument(help="Term-frequency saturation, in (0, 10]; default 0.9.")],
    b: Annotated[float, typer.Argument(help="Length normalisation, in [0, 1]; default 0.4.")],
    dsn: DsnOption = None,
) -> None:
    """Set BM25's k1 and b and recompute every posting's stored impact with them, in one
    transaction (groundkit.set_bm25); writers to the postings wait for it, searches go on."""
    with Groundkit.connect(dsn) as gk:
        n = gk.set_bm25(k1, b)
    out.print(f"BM25 k1 {k1:g}, b {b:g}; recomputed {n} postings' impacts" if n
              else f"BM25 k1 {k1:g}, b {b:g} already; nothing to recompute", highlight=False)


@app.command("set-chunk-sizes")
@handle_errors
def set_chunk_sizes(
    content_type: Annotated[str, typer.Argument(help="course_section, board_post, transcript, event, member_note "
                                                     "or document.")],
    chars: Annotated[int | None, typer.Option(help="Longest chunk, in characters (200-1000000); "
                                                   "default: config.chunk_chars.")] = None,
    overlap: Annotated[int | None, typer.Option(help="Overlap between chunks, in characters (under half of "
                                                     "--chars); default: config.chunk_overlap.")] = None,
    dsn: DsnOption = None,
) -> None:
    """Set one content type's chunk sizes (groundkit.config.chunk_sizes; neither option: back to
    the defaults). Objects written afterwards use them; chunks made otherwise are listed by
    `groundkit status` and re-chunked by `groundkit rebuild`."""
    with Groundkit.connect(dsn) as gk:
        size, over = gk.set_chunk_sizes(content_type, chars, overlap)
        outdated = sum(o.chunks for o in gk.outdated_chunks() if o.content_type == content_type)
    out.print(f"{content_type}: chunks of at most {size} characters, {over} of overlap; "
              + (f"{outdated:,} chunks made otherwise: groundkit rebuild re-chunks them" if outdated
                 else "no chunk made otherwise"), highlight=False)


@app.command("set-search-mode")
@handle_errors
def set_search_mode(
    content_type: Annotated[str, typer.Argument(help="course_section, board_post, transcript, event, member_note "
                                                     "or document.")],
    mode: Annotated[str, typer.Argument(help="bm25, dense or hybrid; auto clears the setting (back to the built-in "
                                             "rule: hybrid once a model is active, else bm25).")],
    fusion: Annotated[str | None, typer.Option(help="Hybrid: rrf or score (default rrf).")] = None,
    rrf_k: Annotated[int | None, typer.Option(help="Hybrid, rrf: the rank constant, 0-100000 (default 20).")] = None,
    bm25_weight: Annotated[float | None, typer.Option(help="Hybrid: the BM25 leg's weight (default 1).")] = None,
    dense_weight: Annotated[float | None, typer.Option(help="Hybrid: the dense leg's weight (default 1).")] = None,
    depth: Annotated[int | None, typer.Option(help="Hybrid: how deep each leg is read, 1-200 (default 100).")] = None,
    dsn: DsnOption = None,
) -> None:
    """Set what a search in mode auto runs over one content type (groundkit.config.search_modes;
    `groundkit eval propose` measures which to choose). Searches from the next statement on use it."""
    with Groundkit.connect(dsn) as gk:
        entry = gk.set_search_mode(content_type, mode, fusion=fusion, rrf_k=rrf_k, bm25_weight=bm25_weight,
                                   dense_weight=dense_weight, depth=depth)
        now = gk.auto_search_settings([content_type])
    if entry is None:
        out.print(f"{content_type}: no setting; auto runs {now.mode} (the built-in rule)", highlight=False)
    else:
        knobs = ", ".join(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}"
                          for k, v in entry.model_dump(exclude={"mode", "source"}, exclude_none=True).items())
        out.print(f"{content_type}: auto runs {entry.mode}" + (f" ({knobs})" if knobs else "")
                  + ("" if now.mode == entry.mode else f"; here it runs {now.mode} ({now.source}: no model that "
                     "can run it)"), highlight=False)
    carry_search_modes(dsn, f"groundkit config set-search-mode {content_type} {mode}")


def carry_search_modes(dsn: str | None, command: str, console: Console = out) -> None:
    """The gate's certificate carried over a search mode change (no gate section tests it:
    groundkit.deployment.TRIGGERS), said on ``console`` when there was one to carry."""
    from groundkit import deployment
    from groundkit.client import resolve_dsn

    carried = deployment.carry_certificate(resolve_dsn(dsn), command)
    if carried is not None:
        console.print(f"gate ledger row {carried.ledger_id}: {carried.reason}", highlight=False)


@app.command("search-modes")
@handle_errors
def search_modes(
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per content type.")] = False,
    dsn: DsnOption = None,
) -> None:
    """Each content type's search mode setting, and what a search in mode auto over it runs now."""
    import json
    import sys

    from rich.table import Table

    from groundkit.models import CONTENT_TYPES

    with Groundkit.connect(dsn) as gk:
        settings = gk.search_modes()
        runs = {t: gk.auto_search_settings([t]) for t in CONTENT_TYPES}
    rows = []
    for t in CONTENT_TYPES:
        entry = settings.get(t)
        rows.append({"content_type": t, **(entry.model_dump(exclude={"source"}) if entry else
                                           dict.fromkeys(("mode", "fusion", "rrf_k", "bm25_weight", "dense_weight",
                                                          "depth"))),
                     "runs": runs[t].mode, "source": runs[t].source})
    if as_json:
        for row in rows:
            sys.stdout.write(json.dumps(row) + "\n")
        return
    table = Table(title="search in mode auto, per content type")
    for col in ("content type", "setting", "runs now", "why"):
        table.add_column(col)
    for row in rows:
        setting = "" if row["mode"] is None else " ".join(
            [str(row["mode"]), *(f"{k}={row[k]:g}" if isinstance(row[k], float) else f"{k}={row[k]}"
                                 for k in ("fusion", "rrf_k", "bm25_weight", "dense_weight", "depth")
                                 if row[k] is not None)])
        table.add_row(str(row["content_type"]), setting, str(row["runs"]), str(row["source"]))
    out.print(table)


@app.command("add-flow")
@handle_errors
def add_flow(
    flow: Annotated[str, typer.Argument(help="1-63 of a-z, 0-9, _ and -, starting with a letter.")],
    dsn: DsnOption = None,
) -> None:
    """Add a flow that metered calls and runs may name, besides home, tutor, authoring and
    conversational (groundkit.add_flow; the owner's). Flows are never removed."""
    with Groundkit.connect(dsn) as gk:
        added = _add_flow(gk, flow)
    out.print(f"flow {flow} added" if added else f"flow {flow} was there already", highlight=False)


@app.command("set-sample-limit")
@handle_errors
def set_sample_limit(
    per_reader: Annotated[int, typer.Argument(help="Samples recorded per reader per window, at least 1 "
                                                   "(default 100).", min=1)],
    per: Annotated[str, typer.Option(help="The window: 30m, 1h, 1d (1 second to 31 days; default 1h).")] = "1h",
    dsn: DsnOption = None,
) -> None:
    """Record at most this many samples per reader in each window; a reader's searches past it
    are not sampled (their answers are unchanged)."""
    from groundkit.quality.samples import parse_since

    window = parse_since(per, "--per")
    with Groundkit.connect(dsn) as gk:
        gk.set_sample_limit(per_reader, window)
    out.print(f"sample_limit {per_reader} per reader per {per}", highlight=False)


@app.command("set-sample-rate")
@handle_errors
def set_sample_rate(
    rate: Annotated[float, typer.Argument(help="The fraction of searches to record, 0 to 1 (0: none, the default).")],
    dsn: DsnOption = None,
) -> None:
    """Record this fraction of searches in groundkit.search_samples (query, mode, hits, the
    reader's tier rank, never the reader), for `groundkit eval export-samples`."""
    with Groundkit.connect(dsn) as gk:
        now = gk.set_sample_rate(rate)
    out.print(f"sample_rate {now:g}" + ("" if now else ": no search is recorded"), highlight=False)
