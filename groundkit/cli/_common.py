"""Shared CLI helpers: one DSN option, errors printed to stderr."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Annotated, ParamSpec, TypeVar

import typer
from rich.console import Console

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


def handle_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Show a GroundkitError as one line on stderr and exit 1, instead of a traceback."""

    @wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except GroundkitError as exc:
            code = f" [{exc.sqlstate}]" if exc.sqlstate else ""
            err.print(f"[bold red]error{code}:[/] {exc.message}", highlight=False, markup=True)
            raise typer.Exit(1) from None

    return wrapper
