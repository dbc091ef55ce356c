"""The golden permission set: fixtures (TOML), the expected grid, and the runner.

The runner writes the golden world through the real write API, keeps the pure model
(:mod:`groundkit.gate.model`) in step with every write, and asks a :class:`Searcher` (the real
``groundkit.search``, or a planted broken variant) what each reader sees. Every hit of every
search is judged against the model, not only the hits a query names.
"""

from __future__ import annotations

import random
import shlex
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any, Literal, Protocol

import psycopg
from psycopg import sql
from pydantic import BaseModel, ConfigDict, Field, model_validator

from groundkit.client import Groundkit
from groundkit.errors import GroundkitError
from groundkit.gate.model import Model, ModelError
from groundkit.gate.tap import Counts, Tap

# -- fixtures -------------------------------------------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class FMember(_Strict):
    sub: str
    tier: str
    status: Literal["active", "pending", "suspended", "revoked"] = "active"
    note: str = ""


class FSpace(_Strict):
    id: str
    min_tier: str = "T0"
    private: bool = False
    note: str = ""


class FGrant(_Strict):
    space: str
    member: str


class FSegment(_Strict):
    start_ms: int
    end_ms: int
    text: str


class FObject(_Strict):
    id: str
    version: int = 1
    content_type: str
    space: str
    tier: str
    title: str
    body: str | None = None
    owner: str | None = None
    owner_only: bool = False
    segments: tuple[FSegment, ...] | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    probe: str
    secrets: tuple[str, ...] = ()

    def text(self) -> str:
        parts = [self.title, self.body or ""] + [s.text for s in self.segments or ()]
        return "\n".join(parts)

    def put_kwargs(self) -> dict[str, Any]:
        return {
            "object_id": self.id, "version": self.version, "content_type": self.content_type,
            "space_id": self.space, "tier_visibility": self.tier, "title": self.title,
            "body": self.body if self.body is not None else "", "owner_sub": self.owner,
            "owner_only": self.owner_only,
            "segments": None if self.segments is None else [s.model_dump() for s in self.segments],
            "metadata": dict(self.metadata),
        }


class FQuery(_Strict):
    description: str
    reader: str | None = None
    all_readers: bool = False
    text: str
    k: int = 10
    content_types: tuple[str, ...] | None = None
    space_ids: tuple[str, ...] | None = None
    must_return: tuple[str, ...] = ()
    must_not_return: tuple[str, ...] = ()
    expect_empty: bool = False
    versions: dict[str, int] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_reader(self) -> FQuery:
        if (self.reader is None) == (not self.all_readers):
            raise ValueError(f"query {self.description!r}: give exactly one of reader or all_readers")
        return self


class FAction(_Strict):
    op: Literal["put_member", "put_space", "grant_space", "revoke_space", "put_object", "retier_object",
                "delete_object", "redact_object", "retry_history"]
    args: dict[str, Any] = Field(default_factory=dict)
    object: str | None = None  # put_object / retry_history: start from this fixture object
    version: int | None = None
    extra_versions: tuple[int, ...] = ()
    seed: int = 0
    expect: str | None = None


class FStep(_Strict):
    name: str
    actions: tuple[FAction, ...]
    checks: tuple[FQuery, ...] = ()
    redact_check: str | None = None


class Golden(_Strict):
    members: tuple[FMember, ...]
    unknown_readers: tuple[str, ...]
    spaces: tuple[FSpace, ...]
    grants: tuple[FGrant, ...] = ()
    objects: tuple[FObject, ...]
    queries: tuple[FQuery, ...] = ()
    steps: tuple[FStep, ...] = ()

    @model_validator(mode="after")
    def _probes_unique(self) -> Golden:
        for obj in self.objects:
            holders = [o.id for o in self.objects if obj.probe.lower() in o.text().lower()]
            if holders != [obj.id]:
                raise ValueError(f"probe {obj.probe!r} of {obj.id} must occur in that object only (found in {holders})")
        return self

    @property
    def readers(self) -> list[str]:
        return [m.sub for m in self.members] + list(self.unknown_readers)

    def object(self, object_id: str) -> FObject:
        for o in self.objects:
            if o.id == object_id:
                return o
        raise KeyError(object_id)


def load_golden(text: str | None = None) -> Golden:
    if text is None:
        text = resources.files("groundkit.gate").joinpath("data/golden.toml").read_text(encoding="utf-8")
    return Golden.model_validate(tomllib.loads(text))


# -- the expected grid ----------------------------------------------------------------------

Grid = dict[tuple[str, str], bool]


def load_grid(text: str | None = None) -> tuple[list[str], list[str], Grid]:
    """Parse grid.txt: a header ``object <reader>...`` then one row per object of ``x``/``.``."""
    if text is None:
        text = resources.files("groundkit.gate").joinpath("data/grid.txt").read_text(encoding="utf-8")
    rows = [shlex.split(line) for line in text.splitlines() if line.strip() and not line.startswith("#")]
    header, body = rows[0], rows[1:]
    if header[0] != "object":
        raise ValueError("grid.txt: the first row must start with 'object'")
    readers = header[1:]
    grid: Grid = {}
    objects = []
    for row in body:
        if len(row) != len(readers) + 1 or any(c not in ("x", ".") for c in row[1:]):
            raise ValueError(f"grid.txt: bad row {row!r}")
        objects.append(row[0])
        for reader, cell in zip(readers, row[1:], strict=True):
            grid[(reader, row[0])] = cell == "x"
    return readers, objects, grid


def render_grid(readers: Sequence[str], objects: Sequence[str], grid: Grid) -> str:
    cols = [shlex.quote(r) for r in readers]
    width = max(len(o) for o in objects) + 2
    lines = ["object".ljust(width) + " ".join(c.center(max(len(c), 3)) for c in cols)]
    for o in objects:
        cells = (("x" if grid[(r, o)] else ".").center(max(len(c), 3)) for r, c in zip(readers, cols, strict=True))
        lines.append(o.ljust(width) + " ".join(cells))
    return "\n".join(lines) + "\n"


# -- searching ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Hit:
    object_id: str
    object_version: int
    title: str
    content: str
    snippet: str = ""


class Searcher(Protocol):
    def __call__(self, reader_sub: str, query: str, k: int = 10, content_types: Sequence[str] | None = None,
                 space_ids: Sequence[str] | None = None) -> list[Hit]: ...


def real_searcher(gk: Groundkit) -> Searcher:
    """``groundkit.search`` through the Python API."""

    def search(reader_sub: str, query: str, k: int = 10, content_types: Sequence[str] | None = None,
               space_ids: Sequence[str] | None = None) -> list[Hit]:
        hits = gk.search(reader_sub, query, k=k, content_types=content_types, space_ids=space_ids)
        return [Hit(h.object_id, h.object_version, h.title, h.content, h.snippet or "") for h in hits]

    return search


def judge_hits(model: Model, reader: str, hits: Sequence[Hit], counts: Counts) -> list[str]:
    """Every hit must be visible to ``reader`` in the model, at the object's current version."""
    problems: list[str] = []
    for h in hits:
        obj = model.objects.get(h.object_id)
        if obj is None:
            counts.leaks += 1
            problems.append(f"LEAK: {reader!r} got {h.object_id} v{h.object_version}, which the model never saw")
        elif obj.state != "live":
            counts.resurrections += 1
            problems.append(f"RESURRECTION: {reader!r} got {h.object_id} v{h.object_version}, which is {obj.state}")
        elif not (d := model.explain(reader, h.object_id)).visible:
            counts.leaks += 1
            problems.append(f"LEAK: {reader!r} got {h.object_id} v{h.object_version}; rule: {d.rule}")
        elif h.object_version != obj.version:
            counts.stale += 1
            problems.append(f"STALE: {reader!r} got {h.object_id} v{h.object_version}; current is v{obj.version}")
    return problems


def observe_grid(search: Searcher, readers: Sequence[str], probes: dict[str, str]) -> Grid:
    """reader x object -> visible, each cell a search for the object's probe as that reader."""
    grid: Grid = {}
    for r in readers:
        for oid, probe in probes.items():
            grid[(r, oid)] = any(h.object_id == oid for h in search(r, probe, k=200))
    return grid


def compare_grid(model: Model, observed: Grid, expected: Grid | None, counts: Counts) -> list[str]:
    """Cells where search, the model or the expected file disagree, with the deciding rule."""
    problems = []
    for (r, oid), seen in sorted(observed.items()):
        d = model.explain(r, oid)
        want = d.visible if expected is None else expected.get((r, oid))
        if want is None:
            problems.append(f"cell ({r!r}, {oid}) is missing from the expected grid")
            continue
        if expected is not None and expected[(r, oid)] != d.visible:
            problems.append(f"MODEL/GRID: ({r!r}, {oid}) grid says {'visible' if want else 'hidden'}, "
                            f"model says {d.rule}")
        if seen and not want:
            if model.tombstoned(oid):
                counts.resurrections += 1
            else:
                counts.leaks += 1
            problems.append(f"LEAK: ({r!r}, {oid}) visible, expected hidden; rule: {d.rule}")
        elif want and not seen:
            counts.missing += 1
            problems.append(f"MISSING: ({r!r}, {oid}) hidden, expected visible; rule: {d.rule}")
    return problems


# -- the runner -----------------------------------------------------------------------------


class GoldenRun:
    """Load the golden world and run its queries, grid and scenario steps, reporting to ``tap``."""

    def __init__(self, gk: Groundkit, admin: psycopg.Connection[Any], search: Searcher, tap: Tap,
                 golden: Golden | None = None, expected_grid: Grid | None = None, label: str = "",
                 ranking: Literal["bm25", "dense", "hybrid"] = "bm25", explain: bool = False) -> None:
        # ranking: which search the searcher runs. The queries' ranks (must_return at k) are BM25's;
        # a dense or hybrid searcher is asked 200 deep, so must_return means visible and matching.
        # A dense search matches every visible chunk: expect_empty is BM25's and hybrid's only.
        self.ranking = ranking
        # explain: after every grid, groundkit.explain_visibility must give search's answer for
        # every (reader, object) pair, and its clauses must agree with it (the real searcher only)
        self.explain = explain
        self.gk = gk
        self.admin = admin
        self.search = search
        self.tap = tap
        self.golden = golden or load_golden()
        self.expected_grid = expected_grid
        self.label = label
        self.model = Model()
        self.history: dict[str, list[tuple[str, dict[str, Any]]]] = {}

    # writes go to the database and to the model; statuses must agree
    def _write(self, op: str, kwargs: dict[str, Any]) -> tuple[str | None, list[str]]:
        problems: list[str] = []
        try:
            want: str | None = self.model.apply(op, **kwargs)
            want_err = None
        except ModelError as exc:
            want, want_err = None, exc.sqlstate
        got: str | None
        try:
            result = getattr(self.gk, op)(**kwargs)
            got = result.status.value if result is not None else None
            got_err = None
        except GroundkitError as exc:
            got, got_err = None, exc.sqlstate
        if (got, got_err) != (want, want_err):
            problems.append(f"{op}({_brief(kwargs)}) returned {got or got_err}, the rules say {want or want_err}")
        if op in ("put_object", "retier_object", "delete_object"):
            self.history.setdefault(kwargs["object_id"], []).append((op, kwargs))
        return got, problems

    def setup(self) -> bool:
        g = self.golden
        problems: list[str] = []
        for m in g.members:
            problems += self._write("put_member", {"member_sub": m.sub, "tier": m.tier, "status": m.status})[1]
        for s in g.spaces:
            problems += self._write("put_space", {"space_id": s.id, "min_tier": s.min_tier, "private": s.private})[1]
        for gr in g.grants:
            problems += self._write("grant_space", {"space_id": gr.space, "member_sub": gr.member})[1]
        for o in g.objects:
            status, p = self._write("put_object", o.put_kwargs())
            problems += p
            if status != "applied":
                problems.append(f"put_object({o.id}) returned {status}")
        return self.tap.check(not problems, f"{self.label}golden world loads: {len(g.members)} members, "
                              f"{len(g.spaces)} spaces, {len(g.objects)} objects", problems,
                              counts=Counts(wrong_status=len(problems)))

    def probes(self) -> dict[str, str]:
        return {o.id: o.probe for o in self.golden.objects}

    def check_grid(self, description: str, expected: Grid | None) -> bool:
        counts = Counts()
        observed = observe_grid(self.search, self.golden.readers, self.probes())
        problems = compare_grid(self.model, observed, expected, counts)
        if expected is not None:
            missing = set(expected) - set(observed)
            problems += [f"expected grid has a cell ({r!r}, {o}) that is not in the golden set" for r, o in missing]
        ok = self.tap.check(not problems, description, problems, counts=counts)
        if self.explain:
            self.check_explain(observed, description)
        return ok

    def check_explain(self, observed: Grid, after: str) -> bool:
        """groundkit.explain_visibility's answer is search's for every cell of ``observed``, and
        its clauses agree with that answer (all hold exactly when visible)."""
        from groundkit.explain import explain_visibility

        counts = Counts()
        problems: list[str] = []
        for (r, oid), seen in sorted(observed.items()):
            e = explain_visibility(self.gk, r, oid)
            if e.visible != seen:
                counts.leaks += int(e.visible and not seen)
                counts.missing += int(seen and not e.visible)
                problems.append(f"EXPLAIN: ({r!r}, {oid}) explain says {'visible' if e.visible else 'hidden'} "
                                f"(decided by {e.decided_by}), search says {'visible' if seen else 'hidden'}")
            elif not e.consistent:
                failing = [c.clause for c in e.clauses if c.clause != "predicate" and not c.holds]
                problems.append(f"EXPLAIN: ({r!r}, {oid}) {'visible' if e.visible else 'hidden'}, but the clauses "
                                f"say otherwise (not holding: {failing or 'none'})")
        return self.tap.check(not problems, f"{self.label}explain_visibility gives search's answer for every "
                              f"(reader, object) pair, its clauses agreeing ({len(observed)} pairs; {after})",
                              problems, counts=counts)

    def check_query(self, q: FQuery) -> bool:
        counts = Counts()
        problems: list[str] = []
        readers = self.golden.readers if q.all_readers else [q.reader or ""]
        for reader in readers:
            k = q.k if self.ranking == "bm25" else 200
            hits = self.search(reader, q.text, k=k, content_types=q.content_types, space_ids=q.space_ids)
            found = {h.object_id: h for h in hits}
            problems += judge_hits(self.model, reader, hits, counts)
            for oid in q.must_return:
                if not self.model.visible(reader, oid):
                    problems.append(f"FIXTURE: {oid} must_return for {reader!r}, but the model says "
                                    f"{self.model.explain(reader, oid).rule}")
                if oid not in found:
                    counts.missing += 1
                    problems.append(f"MISSING: {reader!r} did not get {oid} (k={q.k}); rule: "
                                    f"{self.model.explain(reader, oid).rule}")
            for oid in q.must_not_return:
                filtered = q.content_types is not None or q.space_ids is not None
                if self.model.visible(reader, oid) and not filtered:
                    problems.append(f"FIXTURE: {oid} must_not_return for {reader!r}, but the model says visible")
                if oid in found and not any(p.startswith(("LEAK", "RESURRECTION")) and f" {oid} " in p
                                            for p in problems):
                    counts.leaks += 1
                    problems.append(f"LEAK: {reader!r} got {oid}; rule: {self.model.explain(reader, oid).rule}")
            if q.expect_empty and hits and self.ranking != "dense":
                if not any(p.startswith(("LEAK", "RESURRECTION")) for p in problems):
                    counts.leaks += len(hits)
                problems.append(f"{reader!r} expected no results, got {sorted(found)}")
            for oid, v in q.versions.items():
                if oid in found and found[oid].object_version != v:
                    counts.stale += 1
                    problems.append(f"STALE: {reader!r} got {oid} v{found[oid].object_version}, want v{v}")
        return self.tap.check(not problems, f"{self.label}{q.description}", problems, counts=counts)

    def run_action(self, a: FAction) -> list[str]:
        problems: list[str] = []
        if a.op == "retry_history":
            assert a.object is not None
            base = self.golden.object(a.object).put_kwargs()
            writes = list(self.history.get(a.object, []))
            for v in a.extra_versions:
                writes.append(("put_object", {**base, "version": v}))
                writes.append(("retier_object", {"object_id": a.object, "version": v, "tier_visibility": "T0"}))
                writes.append(("delete_object", {"object_id": a.object, "version": v}))
            random.Random(a.seed).shuffle(writes)
            for op, kwargs in writes:
                status, p = self._write(op, kwargs)
                problems += p
                if a.expect is not None and status != a.expect:
                    problems.append(f"{op}({_brief(kwargs)}) returned {status}, want {a.expect}")
            return problems
        kwargs = dict(a.args)
        if a.op == "put_object" and a.object is not None:
            kwargs = {**self.golden.object(a.object).put_kwargs(), **kwargs}
            if a.version is not None:
                kwargs["version"] = a.version
        status, p = self._write(a.op, kwargs)
        problems += p
        if a.expect is not None and status != a.expect:
            problems.append(f"{a.op}({_brief(kwargs)}) returned {status}, want {a.expect}")
        return problems

    def check_redaction(self, object_id: str) -> None:
        obj = self.golden.object(object_id)
        needles = [*obj.secrets, obj.title, *(x for x in [obj.body] if x)]
        counts = Counts()
        problems = []
        # 1. search: no reader gets any hit containing the text
        for reader in self.golden.readers:
            for secret in obj.secrets:
                for h in self.search(reader, secret, k=200):
                    if secret.lower() in (h.title + h.content + h.snippet).lower() or h.object_id == object_id:
                        counts.leaks += 1
                        problems.append(f"search as {reader!r} for {secret!r} still returns {h.object_id}")
        # 1b. nor does any reader get a citation of it, at any version or chunk it had
        versions = range(1, self.model.objects[object_id].version + 1)
        for reader in self.golden.readers:
            for version in versions:
                for seq in range(4):
                    if (cited := self.gk.fetch_citation(reader, object_id, version, seq)) is not None:
                        counts.leaks += 1
                        problems.append(f"fetch_citation as {reader!r} of {object_id} v{version} #{seq} "
                                        f"returns {cited.content[:40]!r}")
        # 2. the log keeps the events, never the text
        rows = self.admin.execute(
            "select seq, op, title is not null or body is not null or segments is not null as has_text"
            " from groundkit.content_log where object_id = %s order by seq", (object_id,)).fetchall()
        for row in rows:
            if row["has_text"]:
                counts.leaks += 1
                problems.append(f"content_log seq {row['seq']} ({row['op']}) still holds title/body/segments")
        # 3. no table in the schema holds the text (what replay or debugging could show); the
        #    term statistics are checked for the text's lexemes just below
        residue = [r for r in scan_schema(self.admin, needles) if r[0] != "groundkit.term_stats"]
        problems += [f"{table} still contains {needle!r} ({n} rows)" for table, needle, n in residue]
        counts.leaks += len(residue)
        self.tap.check(not problems, f"{self.label}redacted text of {object_id} is gone from search, the log"
                       " payloads and every groundkit table", problems, counts=counts)
        # 4. nor its lexemes, statistics included
        lexemes = [str(r["lexeme"]) for secret in obj.secrets for r in self.admin.execute(
            "select lexeme from unnest(to_tsvector('groundkit.english', %s))", (secret,)).fetchall()]
        residue = scan_schema(self.admin, list(dict.fromkeys([*lexemes, *obj.secrets])))
        stats_only = bool(residue) and all(t == "groundkit.term_stats" for t, _, _ in residue) and \
            _zero_df_only(self.admin, lexemes)
        problems = [f"{table} still contains {needle!r} ({n} rows)" for table, needle, n in residue]
        todo = ("sql/040_materialize.sql leaves df=0 rows in term_stats for removed terms, so the redacted text's "
                "lexemes stay readable to the schema owner (not to readers); reported to the BM25 rewrite"
                ) if stats_only else None
        self.tap.check(not residue, f"{self.label}no lexeme of the redacted text is left in any groundkit table"
                       " (statistics included)", problems, todo=todo, counts=Counts(leaks=len(residue)))

    def run_steps(self, grid_every_step: bool = True) -> None:
        for step in self.golden.steps:
            self.tap.comment(f"step: {step.name}")
            problems: list[str] = []
            for a in step.actions:
                problems += self.run_action(a)
            self.tap.check(not problems, f"{self.label}step commits as the rules say: {step.name}", problems,
                           counts=Counts(wrong_status=len(problems)))
            for q in step.checks:
                self.check_query(q)
            if step.redact_check is not None:
                self.check_redaction(step.redact_check)
            if grid_every_step:
                self.check_grid(f"{self.label}reader x object grid matches the model after: {step.name}", None)

    def run(self, grid_every_step: bool = True) -> None:
        if not self.setup():
            return
        self.check_grid(f"{self.label}reader x object grid of the golden world matches grid.txt "
                        f"({len(self.golden.readers)} x {len(self.golden.objects)} cells)", self.expected_grid)
        for q in self.golden.queries:
            self.check_query(q)
        self.run_steps(grid_every_step)
        self.check_citations(f"{self.label}fetch_citation of every object as every reader agrees with the model "
                             f"after the steps ({len(self.golden.readers)} x {len(self.golden.objects)} cells)")

    def check_citations(self, description: str) -> bool:
        """A cited chunk comes back to a reader exactly when the model lets the reader see the
        object: an invisible object's citation is no row, as for one that does not exist. Always
        through the real ``groundkit.fetch_citation``, whatever the searcher."""
        counts = Counts()
        problems: list[str] = []
        for reader in self.golden.readers:
            for o in self.golden.objects:
                obj = self.model.objects.get(o.id)
                version = obj.version if obj is not None else o.version
                got = self.gk.fetch_citation(reader, o.id, version, 0) is not None
                want = self.model.visible(reader, o.id)
                if got and not want:
                    counts.leaks += 1
                    problems.append(f"LEAK: fetch_citation as {reader!r} of {o.id} v{version} returns a row; "
                                    f"rule: {self.model.explain(reader, o.id).rule}")
                elif want and not got:
                    counts.missing += 1
                    problems.append(f"MISSING: fetch_citation as {reader!r} of {o.id} v{version} returns no row")
        return self.tap.check(not problems, description, problems, counts=counts)


def scan_schema(conn: psycopg.Connection[Any], needles: Sequence[str]) -> list[tuple[str, str, int]]:
    """(table, needle, rows) for every table in schema groundkit whose rows contain a needle."""
    tables = [r["relname"] for r in conn.execute(
        "select c.relname from pg_catalog.pg_class c join pg_catalog.pg_namespace n on n.oid = c.relnamespace"
        " where n.nspname = 'groundkit' and c.relkind in ('r', 'p', 'm') order by 1").fetchall()]
    found = []
    for table in tables:
        for needle in needles:
            q = sql.SQL("select count(*) as n from {}.{} t where strpos(lower(t::text), lower(%s)) > 0").format(
                sql.Identifier("groundkit"), sql.Identifier(table))
            n = conn.execute(q, (needle,)).fetchone()["n"]  # type: ignore[index]
            if n:
                found.append((f"groundkit.{table}", needle, int(n)))
    return found


def _zero_df_only(conn: psycopg.Connection[Any], lexemes: Sequence[str]) -> bool:
    row = conn.execute("select coalesce(bool_and(s = 0), true) as z from (select sum(df) as s from"
                       " groundkit.term_stats where term = any(%s) group by term, scope) x",
                       (list(lexemes),)).fetchone()
    return bool(row["z"]) if row else True


def _brief(kwargs: dict[str, Any]) -> str:
    keep = ("object_id", "version", "member_sub", "space_id", "tier", "tier_visibility", "status", "private",
            "min_tier")
    return ", ".join(f"{k}={kwargs[k]!r}" for k in keep if k in kwargs)


SearcherFactory = Callable[[Groundkit], Searcher]
