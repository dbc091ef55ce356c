"""The outbound gate: the one function every provider call that carries text goes through.

:func:`send` checks the outbound policy (sql/083_outbound.sql decides, from the database's live
rows: which class the endpoint is in, whether each text's provenance may go there), refuses
with :class:`~groundkit.errors.OutboundRefused` (GK023, naming the rule, never the content) or
scrubs what the class's policy names (:mod:`groundkit.outbound.scrub`), opens the span
``groundkit.outbound``, sends through the caller's transport, meters the tokens the provider
reported (priced from the price table) and records the decision in ``groundkit.outbound_calls``.

The transports (:class:`groundkit.embedders.http.JsonClient`, the local model's
``embed_array``) call :func:`require_ticket` before they send: outside :func:`send` they refuse
(rule ``gate.bypass``), and inside it they refuse any other origin than the one the policy
classified (rule ``gate.origin``), as httpx itself parses the URL it is about to use.

Without a database to read the policy from, the default policy applies: the in-process provider
takes anything, every endpoint is closed. A fixed :class:`~groundkit.outbound.policy.OutboundPolicy`
may be given instead, for text that does not come from the database (an eval's documents, a
benchmark's): it decides queries and texts of unknown provenance, never objects or hashes, which
need the database's live rows (only an unrestricted class takes them then).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Generic, Literal, TypeVar

import psycopg
from psycopg import sql
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from groundkit import telemetry
from groundkit.errors import GroundkitError, OutboundRefused, from_psycopg
from groundkit.outbound.policy import OutboundPolicy, default_policy, normalize_origin
from groundkit.outbound.scrub import ScrubberUnavailable, scrubber
from groundkit.session import Session
from groundkit.steps import Op, Query, Step, Transmit, drive

__all__ = ["Decision", "Destination", "GateKind", "Provenance", "Sent", "Ticket", "origin_of", "require_ticket",
           "send"]

GateKind = Literal["embed_documents", "embed_query", "rerank", "complete"]
Target = Session | psycopg.Connection[Any]
T = TypeVar("T")


@dataclass(frozen=True)
class Destination:
    """Where a call goes: the provider (``local``, ``ollama``, ``openai``, ``rerank``), its base
    URL (None in-process) and the model (what the meter prices)."""

    provider: str
    url: str | None
    model: str


@dataclass(frozen=True)
class Provenance:
    """Where a call's texts come from, which is what the policy decides on.

    ``queries``: texts that are the reader's or the app's own words (a search query, a prompt);
    ``object_ids``: objects whose chunks the call carries (decided as ``reader`` may see them);
    ``hashes``: the embedding job's texts, by the hash of the model recipe's text (decided for
    ``Destination.model``, a registered embedding model); ``unattributed``: document texts of
    unknown provenance (only an unrestricted class takes them)."""

    queries: int = 0
    object_ids: tuple[str, ...] = ()
    hashes: tuple[bytes, ...] = ()
    unattributed: int = 0


@dataclass(frozen=True)
class Decision:
    policy_version: int | None  # None: no database, the default policy
    policy_hash: str | None
    provider_class: str
    origin: str | None
    rule: str | None
    refused: int
    scrub: tuple[str, ...]
    phone_regions: tuple[str, ...]


@dataclass(frozen=True)
class Answer(Generic[T]):
    """What a transport returns: the result and the tokens the provider reported."""

    result: T
    tokens_in: int = 0
    tokens_out: int = 0


@dataclass(frozen=True)
class Sent(Generic[T]):
    """A call the gate let through: the result, its decision, what was scrubbed (counts by
    kind), the tokens, the metered call (if recorded) and the texts exactly as sent."""

    result: T
    decision: Decision
    scrubbed: dict[str, int]
    tokens_in: int
    tokens_out: int
    call_id: int | None
    cost: Decimal | None
    currency: str | None
    texts: list[str] = field(repr=False, default_factory=list)


@dataclass(frozen=True)
class Ticket:
    kind: str
    provider_class: str
    origin: str | None


_TICKET: contextvars.ContextVar[Ticket | None] = contextvars.ContextVar("groundkit_outbound_ticket", default=None)


def origin_of(url: str) -> str | None:
    """The origin httpx will connect to for ``url`` (``scheme://host:port``), or None."""
    import httpx

    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, ValueError, TypeError):
        return None
    scheme = parsed.scheme.lower()
    if scheme not in ("http", "https") or not parsed.host:
        return None
    port = parsed.port or (443 if scheme == "https" else 80)
    host = parsed.host.lower()
    return f"{scheme}://{'[' + host + ']' if ':' in host else host}:{port}"


def require_ticket(transport: str, url: str | None) -> None:
    """What every transport calls before it sends (``url``: where, None in-process).
    :class:`OutboundRefused` outside :func:`send` (``gate.bypass``), or to another destination
    than the one the policy decided on (``gate.origin``)."""
    ticket = _TICKET.get()
    if ticket is None:
        raise OutboundRefused(f"{transport} was called around the outbound gate (rule gate.bypass): every call "
                              "that sends text goes through groundkit.outbound.gate.send", rule="gate.bypass")
    if url is None:
        if ticket.provider_class == "local":
            return
    elif ticket.provider_class != "local" and ticket.origin is not None and origin_of(url) == ticket.origin:
        return
    raise OutboundRefused(f"{transport} would send to another destination than the one the outbound policy "
                          f"decided on (rule gate.origin; class {ticket.provider_class})", rule="gate.origin")


# -- deciding --------------------------------------------------------------------------------

def _rows(target: Target, query: str | sql.Composable, params: dict[str, Any]) -> list[dict[str, Any]]:
    conn = target.conn if isinstance(target, Session) else target
    try:
        with conn.cursor(row_factory=dict_row) as cur:
            return cur.execute(query, params).fetchall()  # type: ignore[arg-type]
    except psycopg.Error as exc:
        raise from_psycopg(exc) from None


_DECIDE = ("select * from groundkit.outbound_decide(%(provider)s, %(url)s, %(kind)s, %(reader)s,"
           " %(objects)s::text[], %(queries)s, %(unattributed)s)")
_DECIDE_EMBEDDING = "select * from groundkit.outbound_decide_embedding(%(model)s, %(hashes)s::bytea[])"


PolicySource = Target | OutboundPolicy | None
#: the policy an operation reads: the database's (where its driver runs the statements), a fixed
#: one, or None (the default policy)
DATABASE: Literal["database"] = "database"
Policy = OutboundPolicy | Literal["database"] | None


def decide(kind: GateKind, dest: Destination, provenance: Provenance, policy_from: PolicySource,
           reader: str | None = None) -> Decision:
    """The policy's decision for a call (nothing sent, nothing recorded)."""
    return run_on(decide_steps(kind, dest, provenance, _policy(policy_from), reader), policy_from, None)


def decide_steps(kind: GateKind, dest: Destination, provenance: Provenance, policy: Policy,
                 reader: str | None = None) -> Op[Decision]:
    if policy is None:
        return _fixed_decision(kind, default_policy(), dest, provenance)
    if isinstance(policy, OutboundPolicy):
        return _fixed_decision(kind, policy, dest, provenance)
    if provenance.hashes:
        rows = yield Query(_DECIDE_EMBEDDING, {"model": dest.model, "hashes": list(provenance.hashes)}, role="policy")
        if provenance.queries or provenance.object_ids or provenance.unattributed:
            raise GroundkitError("the gate decides hashed texts alone")  # (groundkit's own callers never mix them)
    else:
        objects = list(dict.fromkeys(provenance.object_ids))
        rows = yield Query(_DECIDE, {
            "provider": dest.provider, "url": dest.url, "kind": kind, "reader": reader,
            "objects": objects or None, "queries": provenance.queries, "unattributed": provenance.unattributed},
            role="policy")
    row = rows[0]
    return Decision(policy_version=row["policy_version"], policy_hash=row["policy_hash"],
                    provider_class=row["class"], origin=row["origin"], rule=row["rule"], refused=row["refused"],
                    scrub=tuple(row["scrub"] or ()), phone_regions=tuple(row["phone_regions"] or ()))


def _policy(policy_from: PolicySource) -> Policy:
    return policy_from if policy_from is None or isinstance(policy_from, OutboundPolicy) else DATABASE


def run_on(op: Op[T], policy_from: PolicySource, record_to: Target | None) -> T:
    """The sync driver of the gate's operations: statements on the policy's target or the
    recording one, as each says; a transmit called here."""
    def run_step(step: Step) -> Any:
        if isinstance(step, Transmit):
            return step.call()
        target = policy_from if step.role == "policy" else record_to
        if target is None or isinstance(target, OutboundPolicy):  # (the operation never asks then)
            raise GroundkitError("the outbound gate has no database to run this on")
        return _rows(target, step.statement, dict(step.params))

    return drive(op, run_step)


def _fixed_decision(kind: GateKind, policy: OutboundPolicy, dest: Destination, provenance: Provenance) -> Decision:
    """A fixed policy's decision, without the database (the same rules as sql/083_outbound.sql
    for what can be decided without rows; objects and hashes only by an unrestricted class)."""
    origin = origin_of(dest.url) if dest.url else None
    cls: Literal["local", "private", "cloud"]
    if dest.provider == "local":
        cls = "local"
    else:
        private = set()
        for o in policy.private_origins:
            with contextlib.suppress(GroundkitError):
                private.add(normalize_origin(o))
        cls = "private" if origin is not None and origin in private else "cloud"
    rules = policy.classes.of(cls)
    allow = rules.allow
    rule: str | None = None
    refused = 0
    documents = len(provenance.object_ids) + len(provenance.hashes) + provenance.unattributed
    if allow is None:
        rule, refused = f"{cls}.closed", provenance.queries + documents
    else:
        if provenance.queries and not allow.queries:
            rule, refused = f"{cls}.queries", provenance.queries
        if documents and not allow.unrestricted:
            rule = rule or (f"{cls}.unknown" if provenance.object_ids or provenance.hashes else f"{cls}.unattributed")
            refused += documents
    return Decision(None, None, cls, origin, rule, refused, tuple(rules.scrub), tuple(policy.phone_regions))



# -- scrubbing -------------------------------------------------------------------------------

# The last names read (the stamp is their digest: the same stamp, the same names, in any database).
_NAMES: list[tuple[str, tuple[str, ...]]] = []


def _member_names() -> Op[tuple[str, tuple[str, ...]]]:
    known = _NAMES[0] if _NAMES else None
    rows = yield Query("select * from groundkit.outbound_member_names(%(known)s)",
                       {"known": None if known is None else known[0]}, role="policy")
    stamp, names = rows[0]["stamp"], rows[0]["names"]
    if names is None and known is not None:
        return known
    _NAMES[:] = [(stamp, tuple(names or ()))]
    return _NAMES[0]


def _scrub(decision: Decision, texts: list[str],
           policy: Policy) -> Op[tuple[list[str], dict[str, int], str | None]]:
    """The texts scrubbed as the class's policy says, the counts; or the rule that refuses
    (a detector that cannot run: the text is not sent unscrubbed)."""
    if not decision.scrub:
        return texts, {}, None
    cls = decision.provider_class
    names: tuple[str, ...] = ()
    stamp = ""
    if "member_names" in decision.scrub:
        if policy != DATABASE:
            return texts, {}, f"{cls}.scrub.member_names"
        try:
            stamp, names = yield from _member_names()
        except GroundkitError:
            return texts, {}, f"{cls}.scrub.member_names"
    try:
        scrub = scrubber(decision.scrub, decision.phone_regions, names, stamp)  # type: ignore[arg-type]
    except ScrubberUnavailable as exc:
        return texts, {}, f"{cls}.scrub.{exc.kind}"
    done, counts = scrub.scrub_all(texts)
    return done, counts, None


# -- recording ------------------------------------------------------------------------------

def _record(record: bool, kind: GateKind, dest: Destination, decision: Decision, *,
            sent: bool, texts: int, scrubbed: dict[str, int], flow: str | None, reader: str | None,
            run_id: str | None, tokens_in: int, tokens_out: int, cost: Decimal | None,
            currency: str | None, meter: bool) -> Op[int | None]:
    if not record:
        return None
    row = {"kind": kind, "provider": dest.provider, "origin": decision.origin, "class": decision.provider_class,
           "model": dest.model, "policy_version": decision.policy_version,
           "decision": "sent" if sent else "refused", "rule": None if sent else decision.rule,
           "texts": texts, "refused": 0 if sent else decision.refused, "scrubbed": scrubbed, "flow": flow,
           "reader": reader, "run_id": run_id, "tokens_in": tokens_in if sent else None,
           "tokens_out": tokens_out if sent else None,
           "cost": None if cost is None else format(cost, "f"), "currency": currency, "meter": meter and sent}
    rows = yield Query("select groundkit.record_outbound(%(d)s) as call_id", {"d": Jsonb(row)}, role="record")
    call_id = rows[0]["call_id"]
    return None if call_id is None else int(call_id)


def _price(model: str, tokens_in: int, tokens_out: int) -> tuple[Decimal | None, str | None]:
    from groundkit.config import Settings

    price = Settings.from_env().price_table().price(model)
    if price is None:
        return None, None
    return price.cost(tokens_in, tokens_out), price.currency


# -- the one function -------------------------------------------------------------------------

def send(kind: GateKind, dest: Destination, texts: Sequence[str], transmit: Callable[[list[str]], Answer[T]], *,
         provenance: Provenance, policy_from: PolicySource = None, record_to: Target | None = None,
         flow: str | None = None, reader: str | None = None, run_id: str | None = None,
         meter: bool = True) -> Sent[T]:
    """Decide, scrub, send through ``transmit`` (which receives the texts as they may go), meter
    and record one provider call. ``policy_from``: where the policy is read (a Groundkit or a
    connection), or a fixed policy; None: the default policy. ``record_to``: where the decision (and, with
    ``flow``, the metered call) is recorded, in that connection's transaction; None: only the
    span and the counters. Refused: :class:`OutboundRefused`, nothing sent."""
    op = send_steps(kind, dest, texts, transmit, provenance=provenance, policy=_policy(policy_from),
                    record=record_to is not None, flow=flow, reader=reader, run_id=run_id, meter=meter)
    return run_on(op, policy_from, record_to)


def send_steps(kind: GateKind, dest: Destination, texts: Sequence[str], transmit: Callable[[list[str]], Answer[T]],
               *, provenance: Provenance, policy: Policy, record: bool, flow: str | None = None,
               reader: str | None = None, run_id: str | None = None, meter: bool = True) -> Op[Sent[T]]:
    """:func:`send` as an operation (:mod:`groundkit.steps`): what both the sync and the async
    client run, the policy read and the decision recorded on the driver's connection
    (``policy`` :data:`DATABASE`, ``record``), ``transmit`` called as a :class:`Transmit` step."""
    texts = list(texts)
    decision = yield from decide_steps(kind, dest, provenance, policy, reader)
    scrubbed: dict[str, int] = {}
    if decision.rule is None:
        texts, scrubbed, refusal = yield from _scrub(decision, texts, policy)
        if refusal is not None:
            decision = _refused(decision, refusal, len(texts))
    attrs: dict[str, Any] = {"kind": kind, "provider": dest.provider, "provider_class": decision.provider_class,
                             "model": dest.model, "policy_version": decision.policy_version,
                             "texts": len(texts), "flow": flow}
    if decision.rule is not None:
        with telemetry.span("outbound", **attrs, decision="refused", rule=decision.rule):
            yield from _record(record, kind, dest, decision, sent=False, texts=len(texts), scrubbed={}, flow=flow,
                               reader=reader, run_id=run_id, tokens_in=0, tokens_out=0, cost=None, currency=None,
                               meter=meter)
        telemetry.add_outbound(decision="refused", provider_class=decision.provider_class, kind=kind)
        raise _refusal(kind, dest, decision, len(texts))
    with telemetry.span("outbound", **attrs, decision="sent", scrubbed=sum(scrubbed.values())) as current:
        ticket = Ticket(kind, decision.provider_class, decision.origin)
        answer: Answer[T] = yield Transmit(functools.partial(_transmit, ticket, transmit, texts))
        telemetry.set_attributes(current, tokens_in=answer.tokens_in, tokens_out=answer.tokens_out)
    cost, currency = _price(dest.model, answer.tokens_in, answer.tokens_out)
    call_id = yield from _record(record, kind, dest, decision, sent=True, texts=len(texts), scrubbed=scrubbed,
                                 flow=flow, reader=reader, run_id=run_id, tokens_in=answer.tokens_in,
                                 tokens_out=answer.tokens_out, cost=cost, currency=currency, meter=meter)
    _count(kind, dest, decision, flow, answer, cost, currency)
    return Sent(answer.result, decision, scrubbed, answer.tokens_in, answer.tokens_out, call_id, cost, currency,
                texts)


def _transmit(ticket: Ticket, transmit: Callable[[list[str]], Answer[T]], texts: list[str]) -> Answer[T]:
    """``transmit`` with the ticket the transports check (in the thread that sends)."""
    token = _TICKET.set(ticket)
    try:
        return transmit(texts)
    finally:
        _TICKET.reset(token)


def _count(kind: GateKind, dest: Destination, decision: Decision, flow: str | None, answer: Answer[Any],
           cost: Decimal | None, currency: str | None) -> None:
    labels: dict[str, str | None] = {"model": dest.model, "flow": flow}
    telemetry.add_outbound(decision="sent", provider_class=decision.provider_class, kind=kind)
    if kind == "complete":
        telemetry.add_tokens(answer.tokens_in, direction="in", **labels)
        telemetry.add_tokens(answer.tokens_out, direction="out", **labels)
    else:
        telemetry.add_tokens(answer.tokens_in, direction="embed" if kind.startswith("embed") else "rerank", **labels)
    if cost is not None and currency is not None:
        telemetry.add_cost(float(cost), currency=currency, **labels)


def _refused(decision: Decision, rule: str, n: int) -> Decision:
    return Decision(decision.policy_version, decision.policy_hash, decision.provider_class, decision.origin, rule,
                    n, decision.scrub, decision.phone_regions)


def _refusal(kind: GateKind, dest: Destination, decision: Decision, texts: int) -> OutboundRefused:
    version = "the default policy" if decision.policy_version is None else f"policy v{decision.policy_version}"
    where = f"the {decision.provider_class} provider {dest.provider!r}"
    if decision.origin:
        where += f" at {decision.origin}"
    what = f"{decision.refused} of {texts} text(s)" if decision.refused else f"{texts} text(s)"
    return OutboundRefused(
        f"the outbound policy refuses this {kind} call to {where}: {what} may not go there "
        f"(rule {decision.rule}, {version}); nothing was sent",
        rule=decision.rule or "", policy_version=decision.policy_version)


def describe(decision: Decision) -> dict[str, Any]:
    """A decision as a JSON-able dict (what a run pins of it)."""
    return {"policy_version": decision.policy_version, "class": decision.provider_class,
            "origin": decision.origin, "rule": decision.rule}
