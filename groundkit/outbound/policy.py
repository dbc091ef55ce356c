"""The outbound policy: what may leave the database, to which class of provider (docs/outbound.md).

The policy is data in the database (``groundkit.outbound_policies``, one row per version,
append-only; the newest is in force from the next call). This module is its typed form and its
reads and writes; the decisions themselves are made in SQL (sql/083_outbound.sql), by the one
predicate the embedding job's claim also uses.

Provider classes: ``local`` (the in-process provider), ``private`` (an origin the operator marks
as inside their network: ``private_origins``), ``cloud`` (any other endpoint). Per class an
``allow`` (``None``: nothing may go) says which spaces, content types and tiers may be sent,
whether private boards' and owner-only notes' text may, and whether queries (the reader's or the
app's own words: search queries, prompts) may; ``scrub`` names what the redaction boundary
removes before a text goes.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Any, Literal
from urllib.parse import urlsplit

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from pydantic import BaseModel, ConfigDict, ValidationError

from groundkit.errors import OutboundPolicyInvalid, from_psycopg
from groundkit.session import Session

__all__ = [
    "CLASSES", "SCRUB_KINDS", "Allowance", "ClassPolicy", "Classes", "OutboundPolicy", "PolicyVersion",
    "ProviderClass", "ScrubKind", "canonical_json", "current_policy", "default_policy", "normalize_origin",
    "policy_hash", "policy_history", "set_policy",
]

ProviderClass = Literal["local", "private", "cloud"]
CLASSES: tuple[ProviderClass, ...] = ("local", "private", "cloud")
ScrubKind = Literal["email", "phone", "url_credentials", "secrets", "member_names"]
SCRUB_KINDS: tuple[ScrubKind, ...] = ("email", "phone", "url_credentials", "secrets", "member_names")
# What the redaction boundary removes before text goes to a cloud provider, unless the owner says otherwise.
DEFAULT_CLOUD_SCRUB: tuple[ScrubKind, ...] = ("email", "phone", "url_credentials", "secrets")

Target = Session | psycopg.Connection[Any]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Allowance(_Frozen):
    """What one class may receive. ``None`` in a list field means any."""

    spaces: tuple[str, ...] | None = None
    content_types: tuple[str, ...] | None = None
    # the highest tier (the object's, or its space's minimum, whichever is higher) that may go
    max_tier: str | None = None
    private_spaces: bool = False
    owner_only: bool = False
    queries: bool = False

    @property
    def unrestricted(self) -> bool:
        return (self.spaces is None and self.content_types is None and self.max_tier is None
                and self.private_spaces and self.owner_only)


class ClassPolicy(_Frozen):
    allow: Allowance | None = None
    scrub: tuple[ScrubKind, ...] = ()


class Classes(_Frozen):
    local: ClassPolicy
    private: ClassPolicy
    cloud: ClassPolicy

    def of(self, cls: ProviderClass) -> ClassPolicy:
        return {"local": self.local, "private": self.private, "cloud": self.cloud}[cls]


class OutboundPolicy(_Frozen):
    """One version's content (what ``groundkit.set_outbound_policy`` stores)."""

    private_origins: tuple[str, ...] = ()
    phone_regions: tuple[str, ...] = ("US",)
    classes: Classes

    def document(self) -> dict[str, Any]:
        """The JSON document stored in the database: every key present, lists for tuples."""
        document: dict[str, Any] = json.loads(self.model_dump_json())
        return document

    def with_class(self, cls: ProviderClass, policy: ClassPolicy) -> OutboundPolicy:
        classes = self.classes.model_copy(update={cls: policy})
        return self.model_copy(update={"classes": classes})


def default_policy() -> OutboundPolicy:
    """Version 1: the in-process provider takes anything; nothing goes to private or cloud."""
    return OutboundPolicy(classes=Classes(
        local=ClassPolicy(allow=Allowance(private_spaces=True, owner_only=True, queries=True)),
        private=ClassPolicy(),
        cloud=ClassPolicy(scrub=DEFAULT_CLOUD_SCRUB),
    ))


class PolicyVersion(_Frozen):
    """A stored version: its number, content, hash, when, by whom and why."""

    version: int
    policy: OutboundPolicy
    policy_hash: str
    set_at: datetime
    set_by: str
    reason: str
    changed: bool | None = None  # set_policy: whether this call added the version


def _key(k: str) -> tuple[int, bytes]:
    encoded = k.encode("utf-8")
    return (len(encoded), encoded)


def _canon(value: Any) -> str:
    if isinstance(value, dict):
        items = sorted(value.items(), key=lambda kv: _key(kv[0]))
        return "{" + ", ".join(f"{_canon(k)}: {_canon(v)}" for k, v in items) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_canon(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)


def canonical_json(document: dict[str, Any]) -> str:
    """The text PostgreSQL's ``jsonb`` prints for ``document`` (keys by length, then bytes;
    ``", "`` and ``": "``): what ``policy_hash`` is the SHA-256 of, so that the hash can be
    checked without the database."""
    return _canon(document)


def policy_hash(policy: OutboundPolicy) -> str:
    """The policy's SHA-256 (hex), as ``groundkit.outbound_policy_hash()`` gives it."""
    return hashlib.sha256(canonical_json(policy.document()).encode("utf-8")).hexdigest()


def normalize_origin(url: str) -> str:
    """``scheme://host:port`` of an http(s) URL, lower case, the default port filled in: how
    ``private_origins`` are written (and how sql/083_outbound.sql reads a provider's URL).
    :class:`OutboundPolicyInvalid` for anything else."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
        host = parts.hostname
    except ValueError:
        raise OutboundPolicyInvalid(f"not a URL: {url[:200]!r}") from None
    if parts.scheme.lower() not in ("http", "https") or not host:
        raise OutboundPolicyInvalid(f"a private origin is an http(s) URL with a host (got {url[:200]!r})")
    if "\\" in url or any(c.isspace() for c in url.strip()):
        raise OutboundPolicyInvalid(f"not a URL: {url[:200]!r}")
    scheme = parts.scheme.lower()
    if port is None:
        port = 443 if scheme == "https" else 80
    shown = f"[{host}]" if ":" in host else host
    return f"{scheme}://{shown.lower()}:{port}"


def _rows(target: Target, query: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    conn = target.conn if isinstance(target, Session) else target
    try:
        with conn.cursor(row_factory=dict_row) as cur:
            return cur.execute(query, params).fetchall()
    except psycopg.Error as exc:
        raise from_psycopg(exc) from None


def _version(row: dict[str, Any], changed: bool | None = None) -> PolicyVersion:
    return PolicyVersion(version=row["version"], policy=OutboundPolicy.model_validate(row["policy"]),
                         policy_hash=row["policy_hash"], set_at=row["set_at"], set_by=row["set_by"],
                         reason=row["reason"], changed=changed)


def current_policy(target: Target) -> PolicyVersion:
    """The version in force (``groundkit.outbound_policy()``)."""
    rows = _rows(target, "select * from groundkit.outbound_policy()", {})
    return _version(rows[0])


def policy_history(target: Target) -> list[PolicyVersion]:
    """Every version, newest first (``groundkit.outbound_policy_history()``: owner and auditor)."""
    return [_version(r) for r in _rows(target, "select * from groundkit.outbound_policy_history()", {})]


def set_policy(target: Target, policy: OutboundPolicy | dict[str, Any], reason: str) -> PolicyVersion:
    """Make ``policy`` the one in force from the next call (the owner's alone); a policy equal to
    the one in force adds no version. :class:`OutboundPolicyInvalid` (GK025) for a document of
    another shape, an unknown tier, or no reason."""
    if isinstance(policy, dict):
        try:
            policy = OutboundPolicy.model_validate(policy)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
            raise OutboundPolicyInvalid(f"invalid outbound policy: {problems}") from None
    origins = tuple(normalize_origin(o) for o in policy.private_origins)
    policy = policy.model_copy(update={"private_origins": tuple(dict.fromkeys(origins))})
    rows = _rows(target, "select * from groundkit.set_outbound_policy(%(p)s, %(reason)s)",
                 {"p": Jsonb(policy.document()), "reason": reason})
    changed = bool(rows[0]["changed"])
    stored = _rows(target, "select * from groundkit.outbound_policy_history() where version = %(v)s",
                   {"v": rows[0]["version"]})
    return _version(stored[0], changed)
