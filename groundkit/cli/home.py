"""``groundkit home``: a member's home feed, latest or top this week."""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from typing import Annotated

import typer
from rich.markup import escape

from groundkit.cli._common import DsnOption, handle_errors, out
from groundkit.client import Groundkit


class Mode(StrEnum):
    latest = "latest"
    top = "top"


@handle_errors
def home(
    reader: Annotated[str, typer.Option("--reader", help="The reader's member_sub.")],
    mode: Annotated[Mode, typer.Option(help="latest: newest first; top: most engaged with this week.")] = Mode.latest,
    k: Annotated[int, typer.Option("-k", help="How many objects (1-200).")] = 20,
    content_type: Annotated[list[str] | None, typer.Option(help="Only these content types.")] = None,
    space: Annotated[list[str] | None, typer.Option(help="Only these spaces.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON lines instead of a list.")] = False,
    dsn: DsnOption = None,
) -> None:
    """A member's home feed: only the objects that member may see right now."""
    with Groundkit.connect(dsn) as gk:
        items = gk.home(reader, mode.value, k=k, content_types=content_type, space_ids=space)
    if as_json:
        for item in items:
            sys.stdout.write(json.dumps(item.model_dump(mode="json")) + "\n")
        return
    out.print(f"[bold]{len(items)}[/] object(s), {mode.value}, as [cyan]{escape(reader)}[/]", highlight=False)
    for n, item in enumerate(items, start=1):
        score = f"  [green]{item.score:g}[/]" if item.score is not None else ""
        out.print(f"{n:>2}. [bold]{escape(item.title)}[/]{score}", highlight=False)
        where = (f"{item.content_type} · {item.space_id} · {item.object_id} v{item.version}"
                 f" · {item.updated_at:%Y-%m-%d %H:%M}")
        out.print(f"    [dim]{escape(where)}[/]", highlight=False)
