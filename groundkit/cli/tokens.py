"""``groundkit tokens``: the bearer tokens of the MCP and HTTP servers."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from groundkit import tokens
from groundkit.cli._common import DsnOption, err, handle_errors, out
from groundkit.client import Groundkit
from groundkit.errors import GroundkitError

app = typer.Typer(help="Create and revoke the bearer tokens `groundkit serve` maps to members.",
                  no_args_is_help=True, rich_markup_mode="markdown")


@app.command()
@handle_errors
def create(
    member_sub: Annotated[str, typer.Argument(help="The member the token reads as.")],
    expires: Annotated[str | None, typer.Option(help="Lifetime, e.g. 30d, 12h, 90m. Default: never.")] = None,
    dsn: DsnOption = None,
) -> None:
    """Make a token for a member and print it once, as the last line on stdout (only its hash is
    stored). It reads as that member, with whatever the member may see at each call."""
    lifetime = tokens.parse_duration(expires) if expires is not None else None
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
    member_sub: Annotated[str, typer.Argument(help="Every token of this member is revoked.")],
    dsn: DsnOption = None,
) -> None:
    """Revoke every token of a member, from the next request on."""
    with Groundkit.connect(dsn) as gk:
        n = tokens.revoke_tokens(gk, member_sub)
    out.print(f"revoked {n} token(s) of {member_sub}", highlight=False)
