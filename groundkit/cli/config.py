"""``groundkit config``: settings that change more than a row (BM25's k1 and b), and flows."""

from __future__ import annotations

from typing import Annotated

import typer

from groundkit.cli._common import DsnOption, handle_errors, out
from groundkit.client import Groundkit
from groundkit.metering import add_flow as _add_flow

app = typer.Typer(help="Change settings that need more than an update of groundkit.config.",
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
