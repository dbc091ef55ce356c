"""Concurrency: writers change content, tiers and membership while readers search.

How the check is made exact
---------------------------
Every reader runs ONE statement::

    with s as materialized (select pg_current_snapshot()::text as snap)
    select s.snap, r.object_id, r.object_version
      from s left join lateral groundkit.search(...) r on true

``groundkit.search`` is STABLE, so its queries run on the statement's snapshot, and
``pg_current_snapshot()`` returns that very snapshot (xmin, xmax, in-progress xids). The reader
therefore records exactly which transactions its answer could see.

Every write is its own transaction, and the writer records its ``pg_current_xact_id()`` after
the commit returns. A committed transaction X is in a snapshot iff ``X < xmin`` or
(``X < xmax`` and X is not in the in-progress list), which is ``pg_visible_in_snapshot``.

Each writer owns a disjoint set of keys (one owns members and grants, one owns the spaces, two
own four objects each) and issues its writes one after another, so for every key the commit
order is that writer's program order, and the writes a snapshot sees are a prefix of each
writer's sequence (this is checked, not assumed). The model state "as of the moment the
reader's statement started" is then the setup state plus each writer's visible prefix, applied
in program order; it is exact, not an approximation by wall-clock time.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from groundkit.client import Groundkit
from groundkit.gate.integrity import derived_lines, diff_lines
from groundkit.gate.model import Model, ModelError
from groundkit.gate.tap import Counts, Tap
from groundkit.gate.throwaway import GateDatabases, connect_dict

MEMBERS = ("c0", "c1", "c2", "c3", "c4")
READERS = (*MEMBERS, "ghost")
SPACES = ("sp-open", "sp-mid", "sp-priv")
TIERS = ("T0", "T1", "T2", "T3")
COMMON = "common"


@dataclass
class Write:
    op: str
    kwargs: dict[str, Any]
    xid: int
    status: str | None


@dataclass
class Read:
    reader: str
    xmin: int
    xmax: int
    xip: frozenset[int]
    hits: list[tuple[str, int]]

    def sees(self, xid: int) -> bool:
        return xid < self.xmin or (xid < self.xmax and xid not in self.xip)


@dataclass
class Writer:
    name: str
    rng: random.Random
    writes: list[Write] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


_CALLS = {
    "put_member": "select groundkit.put_member(member_sub => %(member_sub)s, tier => %(tier)s,"
                  " status => %(status)s)::text as status",
    "put_space": "select groundkit.put_space(space_id => %(space_id)s, min_tier => %(min_tier)s,"
                 " private => %(private)s)::text as status",
    "grant_space": "select groundkit.grant_space(space_id => %(space_id)s, member_sub => %(member_sub)s)::text"
                   " as status",
    "revoke_space": "select groundkit.revoke_space(space_id => %(space_id)s, member_sub => %(member_sub)s)::text"
                    " as status",
    "put_object": "select groundkit.put_object(object_id => %(object_id)s, version => %(version)s,"
                  " content_type => %(content_type)s, space_id => %(space_id)s,"
                  " tier_visibility => %(tier_visibility)s, title => %(title)s, body => %(body)s,"
                  " owner_sub => %(owner_sub)s, owner_only => %(owner_only)s, segments => %(segments)s,"
                  " metadata => %(metadata)s) as status",
    "retier_object": "select groundkit.retier_object(object_id => %(object_id)s, version => %(version)s,"
                     " tier_visibility => %(tier_visibility)s) as status",
    "delete_object": "select groundkit.delete_object(object_id => %(object_id)s, version => %(version)s) as status",
    "redact_object": "select groundkit.redact_object(object_id => %(object_id)s, version => %(version)s) as status",
}

_READ = """
with s as materialized (select pg_current_snapshot()::text as snap)
select s.snap, r.object_id, r.object_version
  from s left join lateral groundkit.search(reader_sub => %s, query => %s, k => 200) r on true
"""


def _params(kwargs: dict[str, Any]) -> dict[str, Any]:
    p = dict(kwargs)
    if "metadata" in p:
        p["metadata"] = Jsonb(p["metadata"])
    if "segments" in p:
        p["segments"] = None if p["segments"] is None else Jsonb(p["segments"])
    return p


def _object_kwargs(oid: str, version: int, rng: random.Random) -> dict[str, Any]:
    owner = rng.choice((None, *MEMBERS))
    return {
        "object_id": oid, "version": version, "content_type": rng.choice(("board_post", "document", "event")),
        "space_id": rng.choice(SPACES), "tier_visibility": rng.choice(TIERS), "title": f"{oid} v{version}",
        "body": f"{COMMON} probe{oid[1:]} version {version}", "owner_sub": owner,
        "owner_only": owner is not None and rng.random() < 0.3, "segments": None, "metadata": {"v": version},
    }


def _setup(gk: Groundkit, model: Model) -> None:
    for i, m in enumerate(MEMBERS):
        for target in (gk, model):
            target.put_member(m, TIERS[i % 4], "pending" if m == "c4" else "active")
    for target in (gk, model):
        target.put_space("sp-open", "T0", False)
        target.put_space("sp-mid", "T1", False)
        target.put_space("sp-priv", "T1", True)
        target.grant_space("sp-priv", "c2")
        target.grant_space("sp-priv", "c3")
    rng = random.Random(7)
    for i in range(8):
        kw = _object_kwargs(f"o{i}", 1, rng)
        gk.put_object(**kw)
        model.put_object(**kw)


def _next_op(w: Writer, versions: dict[str, int], dead: set[str]) -> tuple[str, dict[str, Any]]:
    rng = w.rng
    if w.name == "members":
        r = rng.random()
        m = rng.choice(MEMBERS)
        if r < 0.6:
            return "put_member", {"member_sub": m, "tier": rng.choice(TIERS),
                                  "status": rng.choice(("active", "active", "pending", "suspended", "revoked"))}
        return ("grant_space" if r < 0.8 else "revoke_space"), {"space_id": "sp-priv", "member_sub": m}
    if w.name == "spaces":
        return "put_space", {"space_id": rng.choice(SPACES), "min_tier": rng.choice(TIERS),
                             "private": rng.random() < 0.3}
    oid = rng.choice(sorted(versions))
    v = versions[oid]
    r = rng.random()
    if r < 0.45:
        return "put_object", _object_kwargs(oid, v + 1, rng)
    if r < 0.75:
        return "retier_object", {"object_id": oid, "version": v + 1, "tier_visibility": rng.choice(TIERS)}
    if r < 0.85 and v > 1:
        return "put_object", _object_kwargs(oid, v - 1, rng)  # a stale retry
    if r < 0.95 or oid in dead:
        return "delete_object", {"object_id": oid, "version": v + 1}
    return "redact_object", {"object_id": oid, "version": v + 1}


def _write_loop(dsn: str, w: Writer, n_ops: int, deadline: float, owned: list[str]) -> None:
    versions = dict.fromkeys(owned, 1)
    dead: set[str] = set()
    with connect_dict(dsn) as conn:
        for _ in range(n_ops):
            if time.monotonic() > deadline:
                break
            op, kwargs = _next_op(w, versions, dead)
            try:
                with conn.transaction():
                    row = conn.execute(_CALLS[op], _params(kwargs)).fetchone()
                    xid_row = conn.execute("select pg_current_xact_id()::text as xid").fetchone()
                assert row is not None and xid_row is not None
                w.writes.append(Write(op, kwargs, int(xid_row["xid"]), row["status"] or None))
            except psycopg.Error as exc:
                w.errors.append(f"{op}({kwargs.get('object_id') or kwargs.get('member_sub') or kwargs.get('space_id')})"
                                f": {exc.sqlstate} {str(exc).strip().splitlines()[0]}")
                continue
            if "object_id" in kwargs:
                versions[kwargs["object_id"]] = max(versions[kwargs["object_id"]], kwargs["version"])
                if op in ("delete_object", "redact_object"):
                    dead.add(kwargs["object_id"])


def _read_loop(dsn: str, rng: random.Random, stop: threading.Event, deadline: float, reads: list[Read],
               errors: list[str]) -> None:
    with connect_dict(dsn) as conn:
        while not stop.is_set() and time.monotonic() < deadline:
            reader = rng.choice(READERS)
            try:
                rows = conn.execute(_READ, (reader, COMMON)).fetchall()
            except psycopg.Error as exc:
                errors.append(f"search as {reader}: {exc.sqlstate} {exc}")
                continue
            xmin, xmax, xip = str(rows[0]["snap"]).split(":")
            reads.append(Read(reader, int(xmin), int(xmax), frozenset(int(x) for x in xip.split(",") if x),
                              [(r["object_id"], int(r["object_version"])) for r in rows if r["object_id"]]))


def _apply(model: Model, write: Write) -> str | None:
    try:
        return model.apply(write.op, **write.kwargs)
    except ModelError as exc:
        return exc.sqlstate


def run_section(dbs: GateDatabases, tap: Tap, opts: Any) -> None:
    dsn = dbs.clone()
    try:
        _run(dsn, tap, ops=opts.concurrency_ops, seconds=opts.concurrency_seconds, seed=opts.seed)
    finally:
        dbs.drop(dsn)


def _run(dsn: str, tap: Tap, *, ops: int, seconds: float, seed: int = 0, n_readers: int = 2) -> None:
    base = Model()
    with Groundkit.connect(dsn) as gk:
        _setup(gk, base)
    master = random.Random(seed)
    writers = [Writer(name, random.Random(master.random())) for name in ("members", "spaces", "objects-a", "objects-b")]
    owned = {"objects-a": [f"o{i}" for i in range(4)], "objects-b": [f"o{i}" for i in range(4, 8)]}
    deadline = time.monotonic() + seconds
    stop = threading.Event()
    reads: list[Read] = []
    read_errors: list[str] = []
    wthreads = [threading.Thread(target=_write_loop, args=(dsn, w, max(1, ops // len(writers)), deadline,
                                                          owned.get(w.name, [])))
                for w in writers]
    rthreads = [threading.Thread(target=_read_loop, args=(dsn, random.Random(master.random()), stop, deadline,
                                                         reads, read_errors)) for _ in range(n_readers)]
    for t in [*rthreads, *wthreads]:
        t.start()
    for t in wthreads:
        t.join()
    stop.set()
    for t in rthreads:
        t.join()

    n_writes = sum(len(w.writes) for w in writers)
    errors = [f"{w.name}: {e}" for w in writers for e in w.errors] + read_errors
    tap.check(not errors, f"concurrency: {n_writes} writes by {len(writers)} writers and {len(reads)} searches "
              f"by {n_readers} readers ran without errors or deadlocks", errors, counts=Counts(integrity=len(errors)))

    # statuses: each writer's sequence replayed through the model in commit (= program) order
    status_problems = []
    final = base.copy()
    for w in writers:
        for wr in w.writes:
            want = _apply(final, wr)
            if want != wr.status and not (want is None and wr.status in (None, "")):
                status_problems.append(f"{w.name}: {wr.op}({wr.kwargs.get('object_id', '')} v"
                                       f"{wr.kwargs.get('version', '')}) returned {wr.status}, model says {want}")
    tap.check(not status_problems, "concurrency: every write returned the status the rules give in commit order",
              status_problems, counts=Counts(wrong_status=len(status_problems)))

    # each reader judged at its exact snapshot
    prefix_problems: list[str] = []
    leak_problems: list[str] = []
    missing_problems: list[str] = []
    counts = Counts()
    cache: dict[tuple[int, ...], Model] = {}
    for rd in reads:
        key = []
        for w in writers:
            seen = [rd.sees(x.xid) for x in w.writes]
            n = sum(seen)
            if seen != [True] * n + [False] * (len(seen) - n):
                prefix_problems.append(f"{w.name}: snapshot {rd.xmin}:{rd.xmax} sees a write but not an earlier one")
            key.append(n)
        k = tuple(key)
        if k not in cache:
            m = base.copy()
            for w, n in zip(writers, k, strict=True):
                for wr in w.writes[:n]:
                    _apply(m, wr)
            cache[k] = m
        m = cache[k]
        got = dict(rd.hits)
        for oid, v in rd.hits:
            obj = m.objects.get(oid)
            if obj is None or obj.state != "live":
                counts.resurrections += 1
                leak_problems.append(f"RESURRECTION: {rd.reader} got {oid} v{v} at snapshot {k}")
            elif not (d := m.explain(rd.reader, oid)).visible:
                counts.leaks += 1
                leak_problems.append(f"LEAK: {rd.reader} got {oid} v{v} at snapshot {k}; rule: {d.rule}")
            elif obj.version != v:
                counts.stale += 1
                leak_problems.append(f"STALE: {rd.reader} got {oid} v{v} at snapshot {k}; model has v{obj.version}")
        for oid in sorted(m.visible_objects(rd.reader) - set(got)):
            counts.missing += 1
            missing_problems.append(f"MISSING: {rd.reader} did not get {oid} at snapshot {k}")
    tap.check(not prefix_problems, "concurrency: every snapshot sees a prefix of each writer's commit order "
              "(the exactness assumption holds)", prefix_problems, counts=Counts(integrity=len(prefix_problems)))
    tap.check(not leak_problems, f"concurrency: no reader saw a hit the model forbids as of its statement's snapshot "
              f"({len(reads)} reads, {len(cache)} distinct states)", leak_problems,
              counts=Counts(leaks=counts.leaks, resurrections=counts.resurrections, stale=counts.stale))
    tap.check(not missing_problems, "concurrency: every reader got everything visible at its snapshot",
              missing_problems, counts=Counts(missing=counts.missing))

    with Groundkit.connect(dsn) as gk:
        before = gk.state_checksum()
        lines_before = derived_lines(gk.conn)
        gk.rebuild()
        after = gk.state_checksum()
        final_problems = [] if before == after else [
            "state_checksum changed across rebuild()", *diff_lines(lines_before, derived_lines(gk.conn))]
        for reader in READERS:
            got_ids = {h.object_id for h in gk.search(reader, COMMON, k=200)}
            want_ids = final.visible_objects(reader)
            if got_ids != want_ids:
                final_problems.append(f"{reader}: search {sorted(got_ids)} != model {sorted(want_ids)}")
    tap.check(not final_problems, "concurrency: after the storm the derived state equals a rebuild from the log, "
              "and search equals the model", final_problems, counts=Counts(integrity=len(final_problems)))
