"""``groundkit outbound``: the outbound policy (what may leave the database, to which class of
provider, scrubbed of what) and the gate's decisions (docs/outbound.md)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from groundkit import deployment
from groundkit.cli._common import DsnOption, handle_errors, out
from groundkit.cli.costs import parse_since
from groundkit.client import Groundkit, resolve_dsn
from groundkit.errors import InvalidArgument, OutboundPolicyInvalid
from groundkit.outbound.policy import (
    CLASSES,
    SCRUB_KINDS,
    Allowance,
    ClassPolicy,
    OutboundPolicy,
    PolicyVersion,
    ProviderClass,
    ScrubKind,
    current_policy,
    normalize_origin,
    policy_history,
    set_policy,
)

app = typer.Typer(help="The outbound policy: what may be sent to which provider class, and what is scrubbed.",
                  no_args_is_help=True)
origins_app = typer.Typer(help="Origins the operator marks as inside their network (class private).",
                          no_args_is_help=True)
app.add_typer(origins_app, name="private-origin")

ReasonOption = Annotated[str, typer.Option("--reason", help="Why (kept with the version; required).")]
JsonOption = Annotated[bool, typer.Option("--json", help="JSON instead of lines.")]


def _class(name: str) -> ProviderClass:
    if name not in CLASSES:
        raise InvalidArgument(f"class must be local, private or cloud (got {name!r})")
    return name


def _allow_line(allow: Allowance | None) -> str:
    if allow is None:
        return "closed: nothing may go"
    if allow.unrestricted and allow.queries:
        return "anything"
    parts = [f"spaces {', '.join(allow.spaces)}" if allow.spaces is not None else "any space",
             f"content types {', '.join(allow.content_types)}" if allow.content_types is not None
             else "any content type",
             f"tiers up to {allow.max_tier}" if allow.max_tier is not None else "any tier",
             "private boards too" if allow.private_spaces else "no private boards",
             "owner-only notes too" if allow.owner_only else "no owner-only notes",
             "queries too" if allow.queries else "no queries"]
    return "; ".join(parts)


def print_policy(v: PolicyVersion) -> None:
    """The version in force as lines (also what `groundkit status` shows)."""
    out.print(f"outbound policy   v{v.version} ({v.policy_hash[:16]}), set {v.set_at:%Y-%m-%d %H:%M} by "
              f"{v.set_by}: {v.reason}", highlight=False, soft_wrap=True)
    for cls in CLASSES:
        rules = v.policy.classes.of(cls)
        scrub = f"; scrubs {', '.join(rules.scrub)}" if rules.scrub else ""
        out.print(f"  {cls:<8}        {_allow_line(rules.allow)}{scrub}", highlight=False, soft_wrap=True)
    origins = ", ".join(v.policy.private_origins) or "none"
    out.print(f"  private origins {origins}", highlight=False, soft_wrap=True)


def _dump(v: PolicyVersion) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(v.model_dump_json(exclude={"changed"}))
    return data


@app.command("show")
@handle_errors
def show(as_json: JsonOption = False, dsn: DsnOption = None) -> None:
    """The policy in force: its version and hash, each class's allowance and scrub list, the
    private origins."""
    with Groundkit.connect(dsn) as gk:
        v = current_policy(gk)
    if as_json:
        sys.stdout.write(json.dumps(_dump(v)) + "\n")
    else:
        print_policy(v)


@app.command("history")
@handle_errors
def history(as_json: JsonOption = False, dsn: DsnOption = None) -> None:
    """Every version, newest first (the history is append-only)."""
    with Groundkit.connect(dsn) as gk:
        versions = policy_history(gk)
    if as_json:
        for v in versions:
            sys.stdout.write(json.dumps(_dump(v)) + "\n")
        return
    table = Table("version", "hash", "set at", "by", "reason")
    for v in versions:
        table.add_row(str(v.version), v.policy_hash[:16], f"{v.set_at:%Y-%m-%d %H:%M:%S}", v.set_by, v.reason)
    out.print(table)


def _apply(dsn: str | None, change: Any, reason: str) -> None:
    with Groundkit.connect(dsn) as gk:
        policy = change(current_policy(gk).policy)
        v = set_policy(gk, policy, reason)
    if v.changed:
        out.print(f"outbound policy v{v.version} in force from the next call", highlight=False)
        carried = deployment.carry_certificate(resolve_dsn(dsn), f"groundkit outbound (v{v.version}: {reason})")
        if carried is not None:
            out.print(f"gate ledger row {carried.ledger_id}: {carried.reason}", highlight=False)
    else:
        out.print(f"outbound policy unchanged (v{v.version})", highlight=False)
    print_policy(v)


@app.command("set")
@handle_errors
def set_(file: Annotated[Path, typer.Argument(help="A JSON policy document (as `show --json` prints its "
                                                   "policy); - reads stdin.")],
         reason: ReasonOption, dsn: DsnOption = None) -> None:
    """Replace the whole policy with a document."""
    text = sys.stdin.read() if str(file) == "-" else file.read_text(encoding="utf-8")
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise OutboundPolicyInvalid(f"{file}: not JSON ({exc})") from None
    if isinstance(document, dict) and "policy" in document and "version" in document:
        document = document["policy"]  # (show --json's whole output)
    _apply(dsn, lambda _: document, reason)


@app.command("allow")
@handle_errors
def allow(
    cls: Annotated[str, typer.Argument(help="local, private or cloud.")],
    reason: ReasonOption,
    space: Annotated[list[str] | None, typer.Option(help="A space whose content may go (repeat; default any).")]
    = None,
    content_type: Annotated[list[str] | None, typer.Option(
        help="A content type that may go (repeat; default any).")] = None,
    max_tier: Annotated[str | None, typer.Option(
        help="The highest tier (the object's or its space's minimum) that may go. Default: any.")] = None,
    private_spaces: Annotated[bool, typer.Option(help="Private boards' text may go too.")] = False,
    owner_only: Annotated[bool, typer.Option(help="Owner-only notes may go too.")] = False,
    queries: Annotated[bool, typer.Option(
        help="Queries may go too: search queries (query embeddings) and LLM prompts.")] = False,
    dsn: DsnOption = None,
) -> None:
    """Open a class: what it may receive from now on (replaces its allowance; its scrub list stays)."""
    name = _class(cls)
    grant = Allowance(spaces=tuple(space) if space else None,
                      content_types=tuple(content_type) if content_type else None, max_tier=max_tier,
                      private_spaces=private_spaces, owner_only=owner_only, queries=queries)

    def change(p: OutboundPolicy) -> OutboundPolicy:
        return p.with_class(name, ClassPolicy(allow=grant, scrub=p.classes.of(name).scrub))

    _apply(dsn, change, reason)


@app.command("close")
@handle_errors
def close(cls: Annotated[str, typer.Argument(help="local, private or cloud.")], reason: ReasonOption,
          dsn: DsnOption = None) -> None:
    """Close a class: nothing may go to it from the next call."""
    name = _class(cls)
    _apply(dsn, lambda p: p.with_class(name, ClassPolicy(allow=None, scrub=p.classes.of(name).scrub)), reason)


@app.command("scrub")
@handle_errors
def scrub(cls: Annotated[str, typer.Argument(help="local, private or cloud.")],
          kinds: Annotated[list[str] | None, typer.Argument(
              help=f"What to remove before text goes: {', '.join(SCRUB_KINDS)} (none: nothing).")] = None,
          reason: ReasonOption = "", dsn: DsnOption = None) -> None:
    """Set what the redaction boundary removes from text sent to a class."""
    name = _class(cls)
    chosen = [k for k in (kinds or []) if k != "none"]
    unknown = sorted(set(chosen) - set(SCRUB_KINDS))
    if unknown:
        raise InvalidArgument(f"unknown scrub kind(s) {', '.join(unknown)}: {', '.join(SCRUB_KINDS)}")
    listed: tuple[ScrubKind, ...] = tuple(dict.fromkeys(chosen))  # type: ignore[arg-type]
    _apply(dsn, lambda p: p.with_class(name, ClassPolicy(allow=p.classes.of(name).allow, scrub=listed)), reason)


@origins_app.command("add")
@handle_errors
def origin_add(url: Annotated[str, typer.Argument(help="A URL of the endpoint; its origin is kept.")],
               reason: ReasonOption, dsn: DsnOption = None) -> None:
    """Mark an endpoint's origin (scheme, host, port) as inside the operator's network."""
    origin = normalize_origin(url)
    _apply(dsn, lambda p: p.model_copy(update={"private_origins": (*p.private_origins, origin)}), reason)


@origins_app.command("remove")
@handle_errors
def origin_remove(url: Annotated[str, typer.Argument(help="A URL of the endpoint.")], reason: ReasonOption,
                  dsn: DsnOption = None) -> None:
    """Unmark an origin: it is cloud again from the next call."""
    origin = normalize_origin(url)
    _apply(dsn, lambda p: p.model_copy(update={"private_origins": tuple(o for o in p.private_origins
                                                                         if o != origin)}), reason)


def decision_rows(gk: Groundkit, since: Any) -> list[dict[str, Any]]:
    return gk._fetch("select * from groundkit.outbound_summary(%(since)s)", {"since": since})


@app.command("decisions")
@handle_errors
def decisions(since: Annotated[str | None, typer.Option(
                  help="Only decisions since: 7d, 12h, 30m, 2w or an ISO date. Default: 1d.")] = "1d",
              as_json: JsonOption = False, dsn: DsnOption = None) -> None:
    """The gate's recorded decisions, by class, kind of call, decision and rule: how many calls,
    texts, refused texts and scrubbed items."""
    start = parse_since(since)
    with Groundkit.connect(dsn) as gk:
        rows = decision_rows(gk, start)
    if as_json:
        for r in rows:
            sys.stdout.write(json.dumps({**r, "last_at": r["last_at"].isoformat()}) + "\n")
        return
    table = Table("class", "kind", "decision", "rule", "calls", "texts", "refused", "scrubbed", "last")
    for r in rows:
        table.add_row(r["class"], r["kind"], r["decision"], r["rule"] or "-", str(r["calls"]), str(r["texts"]),
                      str(r["refused"]), str(r["scrubbed"]), f"{r['last_at']:%Y-%m-%d %H:%M:%S}")
    out.print(table)
