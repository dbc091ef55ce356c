"""A small pure-Python model of groundkit's rules, the oracle every eval compares against.

It knows nothing about chunks, postings or BM25: only who may see which object right now
(the visibility rules of docs/sql-api.md) and what each write returns. It is deliberately
written from the rules, not from the SQL, so that the two can disagree.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Literal

DEFAULT_TIERS: dict[str, int] = {"T0": 0, "T1": 1, "T2": 2, "T3": 3}
STATUSES = ("active", "pending", "suspended", "revoked")
CONTENT_TYPES = ("course_section", "board_post", "transcript", "event", "member_note", "document")

State = Literal["live", "deleted", "redacted"]


class ModelError(Exception):
    """The SQLSTATE the database must raise for this call (e.g. ``GK002`` unknown tier)."""

    def __init__(self, sqlstate: str, message: str) -> None:
        super().__init__(f"{sqlstate}: {message}")
        self.sqlstate = sqlstate


@dataclass(frozen=True)
class Decision:
    """Whether a reader sees an object, and the rule that decided it."""

    visible: bool
    rule: str


@dataclass
class MemberM:
    tier: str
    status: str


@dataclass
class SpaceM:
    min_tier: str
    private: bool


@dataclass
class ObjectM:
    version: int
    state: State
    content_type: str | None = None
    space_id: str | None = None
    tier: str | None = None
    title: str | None = None
    body: str | None = None
    owner_sub: str | None = None
    owner_only: bool = False
    segments: Any = None
    metadata: Any = None

    def content(self) -> tuple[Any, ...]:
        return (self.content_type, self.space_id, self.tier, self.title, self.body, self.owner_sub,
                self.owner_only, _canon(self.segments), _canon(self.metadata))


def _canon(value: Any) -> Any:
    """A hashable, order-insensitive form of JSON (jsonb compares objects without key order)."""
    if isinstance(value, dict):
        return tuple(sorted((k, _canon(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(_canon(v) for v in value)
    return value


@dataclass
class Model:
    tiers: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_TIERS))
    members: dict[str, MemberM] = field(default_factory=dict)
    spaces: dict[str, SpaceM] = field(default_factory=dict)
    grants: set[tuple[str, str]] = field(default_factory=set)
    objects: dict[str, ObjectM] = field(default_factory=dict)

    def copy(self) -> Model:
        return copy.deepcopy(self)

    # -- checks shared by the calls ------------------------------------------------------

    def _tier(self, tier: str | None) -> int:
        if tier is None or tier not in self.tiers:
            raise ModelError("GK002", f"unknown tier {tier!r}")
        return self.tiers[tier]

    @staticmethod
    def _id(kind: str, value: str | None) -> None:
        if value is None or not 1 <= len(value) <= 256:
            raise ModelError("GK005", f"{kind} must be between 1 and 256 characters")

    @staticmethod
    def _version(version: int) -> None:
        if version < 1:
            raise ModelError("GK005", "version must be a positive integer")

    # -- live authority ------------------------------------------------------------------

    def put_member(self, member_sub: str, tier: str, status: str = "active") -> None:
        self._id("member_sub", member_sub)
        self._tier(tier)
        if status not in STATUSES:
            raise ModelError("GK005", f"unknown member status {status!r}")
        self.members[member_sub] = MemberM(tier, status)

    def put_space(self, space_id: str, min_tier: str = "T0", private: bool = False) -> None:
        self._id("space_id", space_id)
        self._tier(min_tier)
        self.spaces[space_id] = SpaceM(min_tier, private)

    def grant_space(self, space_id: str, member_sub: str) -> None:
        self._id("member_sub", member_sub)
        if space_id not in self.spaces:
            raise ModelError("GK003", f"unknown space {space_id!r}")
        self.grants.add((space_id, member_sub))

    def revoke_space(self, space_id: str, member_sub: str) -> None:
        if space_id not in self.spaces:
            raise ModelError("GK003", f"unknown space {space_id!r}")
        self.grants.discard((space_id, member_sub))

    # -- the content log -----------------------------------------------------------------

    def put_object(self, object_id: str, version: int, content_type: str, space_id: str, tier_visibility: str,
                   title: str, body: str | None, owner_sub: str | None = None, owner_only: bool = False,
                   segments: Any = None, metadata: Any = None) -> str:
        self._id("object_id", object_id)
        self._version(version)
        if content_type not in CONTENT_TYPES:
            raise ModelError("GK004", f"unknown content_type {content_type!r}")
        self._tier(tier_visibility)
        if space_id not in self.spaces:
            raise ModelError("GK003", f"unknown space {space_id!r}")
        if owner_only and owner_sub is None:
            raise ModelError("GK005", "an owner_only object needs an owner_sub")
        new = ObjectM(version, "live", content_type, space_id, tier_visibility, title, body, owner_sub,
                      owner_only, segments, {} if metadata is None else metadata)
        cur = self.objects.get(object_id)
        if cur is not None:
            if cur.state != "live":
                return "tombstoned"
            if version < cur.version:
                return "stale"
            if version == cur.version:
                if cur.content() == new.content():
                    return "duplicate"
                raise ModelError("GK001", f"object {object_id} version {version} exists with different content")
        self.objects[object_id] = new
        return "applied"

    def retier_object(self, object_id: str, version: int, tier_visibility: str) -> str:
        self._id("object_id", object_id)
        self._version(version)
        self._tier(tier_visibility)
        cur = self.objects.get(object_id)
        if cur is None:
            raise ModelError("GK009", f"unknown object {object_id!r}")
        if cur.state != "live":
            return "tombstoned"
        if version < cur.version:
            return "stale"
        if version == cur.version:
            if cur.tier == tier_visibility:
                return "duplicate"
            raise ModelError("GK001", f"object {object_id} version {version} exists with a different tier")
        cur.version = version
        cur.tier = tier_visibility
        return "applied"

    def delete_object(self, object_id: str, version: int) -> str:
        self._id("object_id", object_id)
        self._version(version)
        cur = self.objects.get(object_id)
        if cur is not None and cur.state != "live":
            return "tombstoned"
        self.objects[object_id] = ObjectM(max(version, cur.version if cur else 0), "deleted")
        return "applied"

    def redact_object(self, object_id: str, version: int) -> str:
        self._id("object_id", object_id)
        self._version(version)
        cur = self.objects.get(object_id)
        if cur is not None and cur.state == "redacted":
            return "tombstoned"
        self.objects[object_id] = ObjectM(max(version, cur.version if cur else 0), "redacted")
        return "applied"

    def apply(self, op: str, **kwargs: Any) -> str | None:
        """Apply one call by name; returns the write status (None for membership/space calls)."""
        fn = getattr(self, op, None)
        if op not in WRITE_OPS or fn is None:
            raise ValueError(f"unknown operation {op!r}")
        result: str | None = fn(**kwargs)
        return result

    # -- visibility ----------------------------------------------------------------------

    def explain(self, reader_sub: str, object_id: str) -> Decision:
        """Whether ``reader_sub`` sees ``object_id`` now, and the first rule that decided it."""
        obj = self.objects.get(object_id)
        if obj is None:
            return Decision(False, "object does not exist")
        if obj.state != "live":
            return Decision(False, f"object is {obj.state} (tombstones are terminal)")
        m = self.members.get(reader_sub)
        if m is None:
            return Decision(False, "reader is unknown: fail closed")
        if m.status != "active":
            return Decision(False, f"reader status is {m.status!r}, not 'active'")
        if m.tier not in self.tiers:
            return Decision(False, f"reader tier {m.tier!r} is unknown")
        rank = self.tiers[m.tier]
        assert obj.tier is not None and obj.space_id is not None
        if rank < self.tiers[obj.tier]:
            return Decision(False, f"reader tier {m.tier} is below the object's tier_visibility {obj.tier}")
        space = self.spaces[obj.space_id]
        if rank < self.tiers[space.min_tier]:
            return Decision(False, f"reader tier {m.tier} is below space {obj.space_id!r} min_tier {space.min_tier}")
        if space.private and (obj.space_id, reader_sub) not in self.grants:
            return Decision(False, f"space {obj.space_id!r} is private and the reader holds no grant")
        if obj.owner_only and obj.owner_sub != reader_sub:
            return Decision(False, f"object is owner_only and the reader is not its owner {obj.owner_sub!r}")
        why = [f"active {m.tier} reader", f">= object tier {obj.tier}", f">= space min_tier {space.min_tier}"]
        if space.private:
            why.append("holds a grant on the private space")
        if obj.owner_only:
            why.append("is the owner")
        return Decision(True, "visible: " + ", ".join(why))

    def visible(self, reader_sub: str, object_id: str) -> bool:
        return self.explain(reader_sub, object_id).visible

    def visible_objects(self, reader_sub: str) -> set[str]:
        return {oid for oid in self.objects if self.visible(reader_sub, oid)}

    def tombstoned(self, object_id: str) -> bool:
        obj = self.objects.get(object_id)
        return obj is not None and obj.state != "live"


WRITE_OPS = frozenset({
    "put_member", "put_space", "grant_space", "revoke_space",
    "put_object", "retier_object", "delete_object", "redact_object",
})
