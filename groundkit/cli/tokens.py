"""``groundkit tokens``: the bearer tokens of the MCP and HTTP servers, and the operator
tokens of the console."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from groundkit import tokens
from groundkit.cli._common import DsnOption, err, handle_errors, out
from groundkit.client import Groundkit
from groundkit.errors import GroundkitError

app = typer.Typer(help="Create and revoke the bearer tokens `groundkit serve` maps to members, and the operator "
                       "tokens of `groundkit serve console`.",
                  no_args_is_help=True, rich_markup_mode="markdown")


ConsoleOption = Annotated[bool, typer.Option(
    "--console", help="An operator token for `groundkit serve console` (the schema owner's to make): NAME is the "
                      "operator, not a member; the token opens the console and reads as no member anywhere.")]


@app.command()
@handle_errors
def create(
    member_sub: Annotated[str, typer.Argument(help="The member the token reads as (with --console: the operator).")],
    expires: Annotated[str | None, typer.Option(help="Lifetime, e.g. 30d, 12h, 90m. Default: never.")] = None,
    console: ConsoleOption = False,
    dsn: DsnOption = None,
) -> None:
    """Make a token for a member and print it once, as the last line on stdout (only its hash is
    stored). It reads as that member, with whatever the member may see at each call. With
    --console, an operator token for the console instead."""
    lifetime = tokens.parse_duration(expires) if expires is not None else None
    if console:
        with Groundkit.connect(dsn) as gk:
            token = tokens.create_console_token(gk, member_sub, lifetime)
        err.print(f"console token for operator {member_sub}, {'expires in ' + expires if expires else 'never expires'}"
                  "; shown once:", highlight=False)
        sys.stdout.write(token + "\n")
        return
    with Groundkit.connect(dsn) as gk:
        token = tokens.create_token(gk, member_sub, lifetime)
        try:
            statuses = [r["status"] for r in gk._fetch(
                "select status from groundkit.reader_authority where member_sub = %(m)s", {"m": member_sub})]
        except GroundkitError:  # a groundkit_writer login may not read the authority: no note then
            statuses = ["active"]
    if statuses != ["active"]:
        # (a typo makes a token that sees nothing; say so rather than fail: the member may come later)
        err.print(f"note: {member_sub} is not an active member now; the token sees nothing until they are",
                  highlight=False)
    err.print(f"token for {member_sub}, {'expires in ' + expires if expires else 'never expires'}; "
              "shown once:", highlight=False)
    sys.stdout.write(token + "\n")


@app.command()
@handle_errors
def revoke(
    member_sub: Annotated[str, typer.Argument(help="Every token of this member (with --console: operator) is "
                                                   "revoked.")],
    console: Annotated[bool, typer.Option("--console", help="Revoke the operator's console tokens; their open "
                                                            "console sessions end at the next request.")] = False,
    dsn: DsnOption = None,
) -> None:
    """Revoke every token of a member (or, with --console, of an operator), from the next request on."""
    with Groundkit.connect(dsn) as gk:
        n = tokens.revoke_console_tokens(gk, member_sub) if console else tokens.revoke_tokens(gk, member_sub)
    what = "console token(s) of operator" if console else "token(s) of"
    out.print(f"revoked {n} {what} {member_sub}", highlight=False)
