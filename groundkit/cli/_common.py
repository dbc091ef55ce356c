"""Shared CLI helpers: one DSN option, errors printed to stderr."""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import wraps
from typing import Annotated, ParamSpec, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from groundkit.errors import GroundkitError

P = ParamSpec("P")
R = TypeVar("R")

out = Console()
err = Console(stderr=True)

DsnOption = Annotated[
    str | None,
    typer.Option(
        "--dsn",
        help="PostgreSQL connection string. Default: $GROUNDKIT_DSN, else the embedded server.",
        show_default=False,
    ),
]


def print_error(exc: GroundkitError) -> None:
    """``error [SQLSTATE]: message`` on stderr, one line however long (the message is not markup)."""
    code = f" \\[{exc.sqlstate}]" if exc.sqlstate else ""
    message = re.sub(r"\s*\n\s*", " ", exc.message.strip())  # libpq's messages span lines
    err.print(f"[bold red]error{code}:[/] {escape(message)}", highlight=False, soft_wrap=True)


def handle_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Show a GroundkitError as one line on stderr and exit 1, instead of a traceback."""

    @wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except GroundkitError as exc:
            print_error(exc)
            raise typer.Exit(1) from None

    return wrapper

# The thresholds of `groundkit status --check`, which `groundkit serve console` shows with the same
# defaults (groundkit.health.Thresholds).
EmbedLagAlertSOption = Annotated[float | None, typer.Option(
    help="Alert when the active model's oldest unembedded chunk is older than this (seconds; 0 never). "
         "Default: $GROUNDKIT_EMBEDDING_LAG_ALERT_S, else 600.")]
EmbedLagAlertChunksOption = Annotated[int | None, typer.Option(
    min=0, help="Alert when more chunks than this lack the active model's embedding. "
                "Default: $GROUNDKIT_EMBEDDING_LAG_ALERT_CHUNKS, else no limit.")]
ReplayLagAlertOption = Annotated[float, typer.Option(
    min=0, help="Alert when a replica's replay lag exceeds this (seconds).")]
FenceAlertOption = Annotated[float, typer.Option(
    min=0, max=1, help="Alert when the fence sent more than this share of a replica's reads today to the primary.")]
