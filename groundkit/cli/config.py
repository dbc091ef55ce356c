"""``groundkit config``: settings that change more than a row (BM25's k1 and b), the chunk
sizes of one content type, and flows."""

from __future__ import annotations

from typing import Annotated

import typer

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
