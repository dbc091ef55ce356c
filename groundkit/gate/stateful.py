"""Model-checked invariants: a hypothesis state machine against the real database.

Random sequences of every write, membership and space call go to groundkit (a fresh database
per example) and to the pure model at the same time. The statuses and error codes must agree,
and after every step:

1. every search hit is visible to that reader in the model, at the object's current version;
2. every visible object is found: a search for the term all objects share returns exactly the
   reader's visible set, and a search for the unique probe term of each object the step
   touched finds it exactly when it is visible;
3. no tombstoned object ever returns;
4. ``groundkit.state_checksum()`` is unchanged by ``groundkit.rebuild()``.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from groundkit.client import Groundkit
from groundkit.errors import GroundkitError
from groundkit.gate.model import CONTENT_TYPES, STATUSES, Model, ModelError

MEMBERS = ("m0", "m1", "m2", "m3")
READERS = (*MEMBERS, "ghost")
SPACES = ("s0", "s1", "s2")
OBJECTS = tuple(f"o{i}" for i in range(8))
TIERS = ("T0", "T1", "T2", "T3")
COMMON = "common"

members = st.sampled_from(MEMBERS)
spaces = st.sampled_from((*SPACES, "s-unknown"))
tiers = st.sampled_from((*TIERS, "T9"))  # T9: an unknown tier, must be rejected with nothing changed
objects = st.sampled_from(OBJECTS)
# version relative to the object's current one: newer, same (retry), older (stale), far ahead
dversions = st.sampled_from((1, 1, 1, 2, 0, -1, 50))


def probe(object_id: str) -> str:
    """A word found in that object only: letters alone, because the analysis splits a token that
    mixes letters and digits (``pq3z``) into parts (``pq``, ``3``, ``z``) that other probes share."""
    return "pq" + "".join(chr(ord("a") + int(d)) for d in object_id[1:]) + "z"


class Stats:
    def __init__(self) -> None:
        self.examples = 0
        self.steps = 0
        self.searches = 0


def make_machine(new_db: Callable[[], str], drop_db: Callable[[str], None],
                 stats: Stats | None = None) -> type[RuleBasedStateMachine]:
    """A state machine class whose every example runs on a database from ``new_db``."""
    counters = stats or Stats()

    class GroundkitMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.dsn = new_db()
            self.gk = Groundkit.connect(self.dsn)
            self.model = Model()
            self.touched: set[str] = set()
            counters.examples += 1

        def teardown(self) -> None:
            self.gk.close()
            drop_db(self.dsn)

        def _do(self, op: str, **kwargs: Any) -> None:
            counters.steps += 1
            before = self.model.copy()
            try:
                want: Any = self.model.apply(op, **kwargs)
                want_err = None
            except ModelError as exc:
                want, want_err = None, exc.sqlstate
                self.model = before  # a rejected call changes nothing
            try:
                result = getattr(self.gk, op)(**kwargs)
                got, got_err = (result.status.value if result is not None else None), None
            except GroundkitError as exc:
                got, got_err = None, exc.sqlstate
            assert (got, got_err) == (want, want_err), (
                f"{op}({kwargs}) returned {got or got_err}; the rules say {want or want_err}")
            if "object_id" in kwargs:
                self.touched.add(kwargs["object_id"])

        def _version(self, object_id: str, dv: int) -> int:
            cur = self.model.objects.get(object_id)
            return max(1, (cur.version if cur else 0) + dv)

        @rule(member=members, tier=tiers, status=st.sampled_from(STATUSES))
        def put_member(self, member: str, tier: str, status: str) -> None:
            self._do("put_member", member_sub=member, tier=tier, status=status)

        @rule(space=spaces, min_tier=tiers, private=st.booleans())
        def put_space(self, space: str, min_tier: str, private: bool) -> None:
            self._do("put_space", space_id=space, min_tier=min_tier, private=private)

        @rule(space=spaces, member=members)
        def grant_space(self, space: str, member: str) -> None:
            self._do("grant_space", space_id=space, member_sub=member)

        @rule(space=spaces, member=members)
        def revoke_space(self, space: str, member: str) -> None:
            self._do("revoke_space", space_id=space, member_sub=member)

        @rule(obj=objects, dv=dversions, content_type=st.sampled_from(CONTENT_TYPES), space=spaces, tier=tiers,
              owner=st.sampled_from((None, *MEMBERS)), owner_only=st.booleans(), variant=st.integers(0, 2))
        def put_object(self, obj: str, dv: int, content_type: str, space: str, tier: str, owner: str | None,
                       owner_only: bool, variant: int) -> None:
            text = f"{COMMON} {probe(obj)} variant{variant} of a note about joinery"
            segments = None
            body = text
            if content_type == "transcript" and variant:
                segments = [{"start_ms": 0, "end_ms": 1000, "text": text}]
                body = ""
            if owner_only and owner is None:
                return  # the Python API rejects this before SQL (pydantic); covered by bad_input
            self._do("put_object", object_id=obj, version=self._version(obj, dv), content_type=content_type,
                     space_id=space, tier_visibility=tier, title=f"title {variant}", body=body, owner_sub=owner,
                     owner_only=owner_only, segments=segments, metadata={"variant": variant})

        @rule(obj=objects, dv=dversions, tier=tiers)
        def retier_object(self, obj: str, dv: int, tier: str) -> None:
            self._do("retier_object", object_id=obj, version=self._version(obj, dv), tier_visibility=tier)

        @rule(obj=objects, dv=dversions)
        def delete_object(self, obj: str, dv: int) -> None:
            self._do("delete_object", object_id=obj, version=self._version(obj, dv))

        @rule(obj=objects, dv=dversions)
        def redact_object(self, obj: str, dv: int) -> None:
            self._do("redact_object", object_id=obj, version=self._version(obj, dv))

        @invariant()
        def search_agrees_with_model(self) -> None:
            for reader in READERS:
                hits = self.gk.search(reader, COMMON, k=200)
                counters.searches += 1
                got = {h.object_id: h.object_version for h in hits}
                for oid, v in got.items():
                    obj = self.model.objects.get(oid)
                    assert obj is not None and obj.state == "live", (
                        f"RESURRECTION: {reader} got {oid} v{v}, which is {obj.state if obj else 'unknown'}")
                    d = self.model.explain(reader, oid)
                    assert d.visible, f"LEAK: {reader} got {oid} v{v}; rule: {d.rule}"
                    assert v == obj.version, f"STALE: {reader} got {oid} v{v}; current is v{obj.version}"
                missing = self.model.visible_objects(reader) - set(got)
                assert not missing, f"MISSING: {reader} did not get {sorted(missing)} for {COMMON!r}"
                for oid in sorted(self.touched):
                    hits = self.gk.search(reader, probe(oid), k=200)
                    counters.searches += 1
                    seen = any(h.object_id == oid for h in hits)
                    d = self.model.explain(reader, oid)
                    assert seen == d.visible, (
                        f"{'LEAK' if seen else 'MISSING'}: probe {probe(oid)!r} as {reader}; rule: {d.rule}")
                    assert all(h.object_id == oid for h in hits), f"probe {probe(oid)!r} matched other objects"
            self.touched.clear()

        @invariant()
        def rebuild_keeps_checksum(self) -> None:
            before = self.gk.state_checksum()
            self.gk.rebuild()
            assert self.gk.state_checksum() == before, "state_checksum changed across rebuild()"

    return GroundkitMachine


def run(new_db: Callable[[], str], drop_db: Callable[[str], None], *, examples: int, max_steps: int,
        shrink: bool = True, derandomize: bool = False) -> tuple[Stats, str | None]:
    """Run the machine; returns the counters and, on failure, the falsifying steps."""
    stats = Stats()
    machine = make_machine(new_db, drop_db, stats)
    phases = [Phase.explicit, Phase.reuse, Phase.generate] + ([Phase.shrink] if shrink else [])
    cfg = settings(max_examples=examples, stateful_step_count=max_steps, deadline=None, database=None,
                   derandomize=derandomize, phases=phases, suppress_health_check=list(HealthCheck),
                   print_blob=False)
    try:
        run_state_machine_as_test(machine, settings=cfg)
    except Exception as exc:
        notes = getattr(exc, "__notes__", [])
        text = "\n".join([f"{type(exc).__name__}: {exc}", *notes]) or traceback.format_exc()
        return stats, text
    return stats, None


def run_section(dbs: Any, tap: Any, opts: Any) -> None:
    """The gate's ``model`` section (dbs: GateDatabases, tap: Tap, opts: GateOptions)."""
    from groundkit.gate.tap import Counts

    stats, failure = run(dbs.clone, dbs.drop, examples=opts.examples, max_steps=opts.max_steps, shrink=False)
    counts = Counts()
    if failure:
        for kind, attr in (("LEAK", "leaks"), ("RESURRECTION", "resurrections"), ("MISSING", "missing"),
                           ("STALE", "stale"), ("returned", "wrong_status"), ("state_checksum", "integrity")):
            if kind in failure:
                setattr(counts, attr, 1)
                break
        else:
            counts.integrity = 1
    tap.check(failure is None,
              f"model check: {stats.examples} random sequences, {stats.steps} calls, {stats.searches} searches: "
              "statuses agree, no leak, nothing missing, no resurrection, checksum stable across rebuild",
              (failure or "").splitlines(), counts=counts)
