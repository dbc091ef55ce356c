"""``groundkit explain``: why a member can or cannot see an object (docs/explain.md)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from rich.markup import escape

from groundkit.cli._common import DsnOption, handle_errors, out
from groundkit.client import Groundkit
from groundkit.errors import InvalidArgument
from groundkit.explain import VisibilityExplanation, explain
from groundkit.models import MAX_K, SEARCH_MODES, SearchMode


@handle_errors
def explain_command(
    reader: Annotated[str, typer.Option("--reader", help="The member (reader_sub).")],
    object_id: Annotated[str, typer.Option("--object", help="The object's id.")],
    query: Annotated[str | None, typer.Option(
        "--query", help="Also: which of its terms the object's chunks hold, and where they rank in this "
                        "reader's search for it.")] = None,
    mode: Annotated[str, typer.Option(help="With --query: the search mode (auto, bm25, dense, hybrid).")] = "auto",
    depth: Annotated[int, typer.Option(min=1, max=MAX_K, help="With --query: how deep to look for its chunks.")]
        = MAX_K,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object.")] = False,
    dsn: DsnOption = None,
) -> None:
    """Why a member can or cannot see an object right now, clause by clause.

    Each clause of the permission predicate (the reader's status and tier, the object's current
    version and its tier, tombstone, the space's minimum tier and privacy, the grant, owner-only)
    with its value, and the clause that decides. The answer is search's own (the functions search
    applies), not a second opinion. The owner's and groundkit_auditor's only
    (groundkit.explain_visibility): it says what exists."""
    if mode not in SEARCH_MODES:
        raise InvalidArgument(f"--mode is one of {', '.join(SEARCH_MODES)} (got {mode!r})")
    search_mode: SearchMode = mode  # type: ignore[assignment]
    with Groundkit.connect(dsn) as gk:
        e = explain(gk, reader, object_id, query, mode=search_mode, depth=depth)
    if as_json:
        sys.stdout.write(e.model_dump_json() + "\n")
        return
    _print(e)


def _print(e: VisibilityExplanation) -> None:
    verdict = "visible" if e.visible else f"hidden (decided by: {e.decided_by})"
    out.print(f"{escape(e.reader_sub)} / {escape(e.object_id)}: {verdict}", highlight=False)
    width = max(len(c.clause) for c in e.clauses)
    for c in e.clauses:
        holds = "-" if c.holds is None else ("yes" if c.holds else "no")
        out.print(f"  {holds:<3} {c.clause:<{width}}  {escape(c.value or '-')}{'   <- decides' if c.decides else ''}",
                  highlight=False, soft_wrap=True)
    q = e.query
    if q is None:
        return
    out.print(f"query {escape(q.query)!r} ({q.mode}; terms: {', '.join(q.terms) or 'none'}): "
              + (f"best rank {q.best_rank}" if q.best_rank is not None
                 else f"not among this reader's first {q.depth} hits"), highlight=False)
    for m in q.chunks:
        where = f"rank {m.rank} (score {m.score:.4f})" if m.rank is not None and m.score is not None else "not ranked"
        out.print(f"  chunk {m.chunk_seq} (v{m.object_version}): matches {', '.join(m.matched) or 'no term'}; "
                  f"{where}", highlight=False)
