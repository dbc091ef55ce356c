"""The gate as a property of the deployment (docs/governance.md).

What the permission gate certifies is a *configuration*: the components
``groundkit.deployment_configuration()`` lists (groundkit's version, the schema revision, the
digest of the schema's functions, triggers and privileges, the PostgreSQL major version, pgvector's
version, the active embedding model's definition, the outbound policy, the search modes per content
type). Every verdict on one is a
row of the gate ledger (``groundkit.gate_ledger``, owner-only, append-only, hash-chained):

- :func:`gated_migrate` runs the gate's :data:`MIGRATE_SECTIONS` on throwaway databases migrated
  to the target revision (on the target's server) before it touches the real database, and refuses
  on a failure (:class:`~groundkit.errors.GateRefused`, GK020);
- :func:`gated_cutover` runs :data:`CUTOVER_SECTIONS` (the golden set, its downgrade and
  stale-metadata steps among them, through dense and hybrid search) embedding with the model it
  switches to, before switching;
- :func:`record_gate_run` records a ``groundkit eval gate`` run against the database it names.

A configuration already certified in the ledger, or by a signed gate bundle for the identical
configuration (:mod:`groundkit.audit`), is reused instead of running the gate again. A bypass
(``skip_reason``) applies the change and records a ``bypassed`` row: the configuration stays
uncertified, so ``groundkit status --check`` fails and ``groundkit serve`` refuses it.
"""

from __future__ import annotations

import contextlib
import getpass
import hashlib
import io
import json
import socket
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TextIO

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from pydantic import BaseModel, ConfigDict

from groundkit import audit
from groundkit.audit import config_hash as config_hash
from groundkit.dsn import connect
from groundkit.errors import CutoverRefused, GateRefused, InvalidArgument, from_psycopg
from groundkit.schema import apply

if TYPE_CHECKING:
    from groundkit.embedders import EmbeddingModel
    from groundkit.gate.runner import GateSummary
    from groundkit.gate.throwaway import GateDatabases
    from groundkit.schema import MigrationState
    from groundkit.session import Session

# The sections each kind of change re-runs (docs/governance.md, "Which sections a change
# re-runs"). A schema migration or a groundkit upgrade changes the SQL that decides visibility:
# the golden set and its planted bugs, concurrent writers, the privilege grid, bad input, side
# channels, the home feed and dense search. The model check, fault injection, the HTTP/MCP
# surfaces and the replicas are the release gate's (`groundkit eval gate`, all twelve sections).
MIGRATE_SECTIONS: tuple[str, ...] = ("golden", "planted", "concurrency", "roles", "bad_input", "side_channels",
                                     "home", "dense")
# An embedding-model swap changes the vectors dense and hybrid search rank: the golden set through
# both, embedding with the new model.
CUTOVER_SECTIONS: tuple[str, ...] = ("dense",)

# Which sections a change of each component needs. A component missing here needs
# MIGRATE_SECTIONS (fail-safe: a new component is never free to change).
TRIGGERS: dict[str, tuple[str, ...]] = {
    "groundkit_version": MIGRATE_SECTIONS,
    "schema_revision": MIGRATE_SECTIONS,
    "sql_digest": MIGRATE_SECTIONS,
    "postgres": MIGRATE_SECTIONS,
    "pgvector": MIGRATE_SECTIONS,
    "embedding_model": CUTOVER_SECTIONS,
    # No gate section tests the outbound policy: the gate's fixture text is not member content, so
    # its sections send it under a policy of their own (groundkit/gate/dense.py). The policy is
    # part of the configuration as evidence (which policy served when); a change of it alone
    # carries the certificate over (:func:`carry_certificate`, docs/governance.md).
    "outbound_policy": (),
    # Nor does one test the search mode each content type runs in auto (config.search_modes): every
    # mode it may name is one the golden and dense sections certify, with the permission predicate
    # inside each leg whatever hybrid's weights, so the setting changes which visible chunks rank
    # first, never which are visible. A change of it alone carries the certificate over too.
    "search_modes": (),
}

Verdict = Literal["certified", "failed", "bypassed", "uncovered"]
Kind = Literal["gate", "migrate", "cutover", "policy"]
Config = dict[str, str | None]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class LedgerRow(_Frozen):
    """A row of ``groundkit.gate_ledger``."""

    id: int
    recorded_at: datetime
    recorded_by: str
    operator: str | None
    kind: str
    command: str
    verdict: str
    config: dict[str, str | None]
    config_hash: str
    fixture_digest: str | None
    dense_model: str | None
    sections_run: tuple[str, ...]
    sections_skipped: tuple[str, ...]
    passed: bool | None
    checks: int | None
    failed: int | None
    failures: tuple[str, ...] | None
    tap_digest: str | None
    duration_ms: int | None
    basis_id: int | None
    bundle_digest: str | None
    reason: str | None


class DeploymentStatus(_Frozen):
    """``groundkit.deployment_status()``: the configuration serving readers and its certificate."""

    certified: bool
    config: dict[str, str | None]
    config_hash: str
    ledger_id: int | None  # the row that decides (or, when none does, the latest for this configuration)
    kind: str | None
    verdict: str | None
    recorded_at: datetime | None
    recorded_by: str | None
    operator: str | None
    certified_by: int | None  # the row whose gate run the certificate rests on
    reason: str | None


class GatedChange(_Frozen):
    """What a gated migrate or cutover did."""

    ledger_id: int | None  # None: the database had no ledger to write to
    verdict: str
    config_hash: str
    reused: int | None = None  # the certified ledger row reused instead of running the gate
    bundle_digest: str | None = None  # the signed bundle reused
    summary: dict[str, Any] | None = None  # the gate's summary, when it ran
    reason: str | None = None


class GateEvidence(_Frozen):
    """A gate run and what it tested: the evidence a ledger row and a gate bundle hold."""

    config: dict[str, str | None]
    config_hash: str
    fixture_digest: str
    dense_model: str | None
    sections_run: tuple[str, ...]
    sections_skipped: tuple[str, ...]
    summary: dict[str, Any]
    tap: str
    tap_digest: str


# -- the configuration -----------------------------------------------------------------------


def fixture_digest() -> str:
    """The sha256 of the gate's fixtures: the golden set, the expected grid, the privilege grid."""
    h = hashlib.sha256()
    data = resources.files("groundkit.gate").joinpath("data")
    for name in ("golden.toml", "grid.txt", "privileges.txt"):
        h.update(name.encode() + b"\0" + data.joinpath(name).read_bytes() + b"\0")
    return h.hexdigest()


def operator() -> str:
    """Who runs this command, as the machine says (user@host); the database records its login too."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def required_sections(config: Mapping[str, str | None], basis: Mapping[str, str | None] | None) -> set[str]:
    """The sections a gate run must have run to certify ``config`` on top of the certified
    ``basis`` (None: nothing certified; every component counts as changed)."""
    keys = set(config) | set(basis or {})
    changed = keys if basis is None else {k for k in keys if config.get(k) != basis.get(k)}
    needed: set[str] = set()
    for key in changed:
        needed.update(TRIGGERS.get(key, MIGRATE_SECTIONS))
    return needed


def _differences(a: Mapping[str, str | None], b: Mapping[str, str | None]) -> list[str]:
    return [f"{k} ({a.get(k)!r} tested, {b.get(k)!r} serving)" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def verdict_of(passed: bool, tested: Mapping[str, str | None], serving: Mapping[str, str | None],
               sections_run: Sequence[str], basis: Mapping[str, str | None] | None) -> tuple[Verdict, str | None]:
    """The verdict on a gate run: failed, certified, or uncovered (passed, but it tested another
    configuration than the one serving, or not every section the changes since ``basis`` need)."""
    if not passed:
        return "failed", None
    if dict(tested) != dict(serving):
        return "uncovered", "the configuration serving differs from the one tested: " + "; ".join(
            _differences(tested, serving))
    missing = sorted(required_sections(serving, basis) - set(sections_run))
    if missing:
        return "uncovered", f"sections not run that these changes need: {', '.join(missing)}"
    return "certified", None


# -- reading the database --------------------------------------------------------------------

Conn = psycopg.Connection[dict[str, Any]]


@contextlib.contextmanager
def _connection(dsn: str) -> Iterator[Conn]:
    conn: Conn = connect(dsn, autocommit=True, row_factory=dict_row)  # ConfigError / DatabaseUnavailable
    with conn:
        yield conn


def _rows(conn: Conn, query: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> list[dict[str, Any]]:
    try:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []
    except psycopg.Error as exc:
        raise from_psycopg(exc) from None


def _has(conn: Conn, regproc_or_class: str, *, function: bool) -> bool:
    q = "select to_regprocedure(%s) is not null as ok" if function else "select to_regclass(%s) is not null as ok"
    return bool(_rows(conn, q, (regproc_or_class,))[0]["ok"])


def has_ledger(conn: Conn) -> bool:
    """Whether this database has the gate ledger (revision 0027 or later)."""
    return _has(conn, "groundkit.record_gate(jsonb)", function=True)


def serving_configuration(conn: Conn) -> Config:
    return dict(_rows(conn, "select groundkit.deployment_configuration() as c")[0]["c"])


def status(conn: Conn) -> DeploymentStatus:
    """``groundkit.deployment_status()``."""
    row = _rows(conn, "select * from groundkit.deployment_status()")[0]
    return DeploymentStatus.model_validate(row)


def serving_status(s: Session) -> DeploymentStatus | None:
    """``groundkit.deployment_status()`` through a client (None: the database has no ledger)."""
    if not s._scalar("select to_regprocedure('groundkit.deployment_status()') is not null as ok", {}):
        return None
    return DeploymentStatus.model_validate(s._fetch("select * from groundkit.deployment_status()", {})[0])


def ledger(conn: Conn, limit: int = 100) -> list[LedgerRow]:
    """The gate ledger, newest first (the auditor's and the owner's)."""
    return [LedgerRow.model_validate(r) for r in
            _rows(conn, "select * from groundkit.gate_ledger_rows(%s)", (limit,))]


def _certified_row(conn: Conn, chash: str | None = None) -> dict[str, Any] | None:
    """The latest certified, intact ledger row (for ``chash`` only, when given) whose
    configuration no later failure revoked."""
    rows = _rows(conn, """
        select g.id, g.config, g.config_hash from groundkit.gate_ledger g
         where g.verdict = 'certified' and (%(h)s::text is null or g.config_hash = %(h)s)
           and groundkit._ledger_row_intact(g.id)
           and not exists (select 1 from groundkit.gate_ledger f
                            where f.config_hash = g.config_hash and f.verdict = 'failed' and f.id > g.id)
         order by g.id desc limit 1""", {"h": chash})
    return rows[0] if rows else None


def _active_model_row(conn: Conn) -> dict[str, Any] | None:
    """The active embedding model's definition, on any revision that has models (else None)."""
    if not _has(conn, "groundkit.embedding_models", function=False):
        return None
    rows = _rows(conn, "select name, provider, dimension, distance, recipe, options from groundkit.embedding_models"
                       " where active")
    return rows[0] if rows else None


def _model_of(row: Mapping[str, Any] | None) -> EmbeddingModel | None:
    if row is None:
        return None
    from groundkit.embedders import EmbeddingModel

    options = row["options"]
    fields = {k: row[k] for k in ("name", "provider", "dimension", "distance", "recipe")}
    return EmbeddingModel.model_validate(
        {**fields, "options": json.loads(options) if isinstance(options, str) else options or {}})


def _model_component(conn: Conn, model: EmbeddingModel | None) -> str | None:
    if model is None:
        return None
    return str(_rows(conn, "select groundkit.model_component(%s, %s, %s, %s, %s, %s::jsonb) as c",
                     (model.name, model.provider, model.dimension, model.distance, model.recipe,
                      json.dumps(model.options)))[0]["c"])


# -- recording --------------------------------------------------------------------------------


def record(conn: Conn, entry: Mapping[str, Any]) -> int:
    """Write one ledger row (``groundkit.record_gate``, the owner's alone); it is chained when
    the transaction commits. Returns its id."""
    return int(_rows(conn, "select groundkit.record_gate(%s) as id", (Jsonb(dict(entry)),))[0]["id"])


def _entry(kind: Kind, command: str, verdict: Verdict, config: Mapping[str, str | None], *,
           evidence: GateEvidence | None = None, skipped: Sequence[str] = (), basis_id: int | None = None,
           bundle_digest: str | None = None, reason: str | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {"operator": operator(), "kind": kind, "command": command, "verdict": verdict,
                             "config": dict(config), "basis_id": basis_id, "bundle_digest": bundle_digest,
                             "reason": reason, "sections_skipped": list(skipped)}
    if evidence is not None:
        s = evidence.summary
        entry.update({
            "fixture_digest": evidence.fixture_digest, "dense_model": evidence.dense_model,
            "sections_run": list(evidence.sections_run), "sections_skipped": list(evidence.sections_skipped),
            "passed": bool(s["ok"]), "checks": s["checks"], "failed": s["failed"],
            "failures": list(s["failures"])[:50], "tap_digest": evidence.tap_digest,
            "duration_ms": round(float(s["duration_s"]) * 1000)})
    return entry


# -- running the gate for a change ----------------------------------------------------------


class _Tee(io.StringIO):
    """TAP kept (its digest goes into the ledger) and passed on to the caller's stream."""

    def __init__(self, stream: TextIO | None) -> None:
        super().__init__()
        self.stream = stream

    def write(self, text: str) -> int:
        if self.stream is not None:
            self.stream.write(text)
        return super().write(text)

    def flush(self) -> None:
        if self.stream is not None:
            self.stream.flush()


def template_code(dbs: GateDatabases) -> Config:
    """The code components of the throwaway template (this groundkit, migrated on that server)."""
    with _connection(dbs.dsn_for(dbs.template)) as conn:
        return dict(_rows(conn, "select groundkit._configuration_code() as c")[0]["c"])


def _data_components(real: Conn | None, template: Conn) -> Config:
    """The data components as the real database holds them; a database from before revision 0027
    (or none) holds the template's defaults, with its active model where it has one, and a
    component its groundkit does not know yet holds the template's default (what the migration
    that adds it leaves there)."""
    data: Config = dict(_rows(template, "select groundkit._configuration_data() as c")[0]["c"])
    if real is None:
        return data
    if _has(real, "groundkit._configuration_data()", function=True):
        return {**data, **dict(_rows(real, "select groundkit._configuration_data() as c")[0]["c"])}
    data["embedding_model"] = _model_component(template, _model_of(_active_model_row(real)))
    return data


def run_sections(dbs: GateDatabases, sections: Sequence[str], *, tested_data: Config,
                 dense_model: EmbeddingModel | None, out: TextIO | None = None,
                 progress: Callable[[str], None] | None = None, options: Any = None) -> GateEvidence:
    """Run ``sections`` of the gate on ``dbs`` (the rest reported as skipped) and return the
    evidence: the configuration tested (the template's code components, ``tested_data`` with the
    dense section's model), the summary and the TAP."""
    from groundkit.gate.runner import SECTIONS, GateOptions, run_gate

    skip = frozenset(s for s in SECTIONS if s not in sections)
    base = options if options is not None else GateOptions()
    opts = base.model_copy(update={"skip": frozenset(base.skip) | skip, "dense_model": dense_model})
    code = template_code(dbs)
    with _connection(dbs.dsn_for(dbs.template)) as template:
        model_component = _model_component(template, dense_model)
    tested = {**code, **tested_data, "embedding_model": model_component}
    tee = _Tee(out)

    def running(section: str) -> None:  # (the sections skipped are no news)
        if progress is not None and section not in opts.skip:
            progress(section)

    summary = run_gate(None, opts, out=tee, progress=running, dbs=dbs)
    tap = tee.getvalue()
    ran = tuple(s for s in SECTIONS if s not in opts.skip)
    return GateEvidence(config=tested, config_hash=config_hash(tested), fixture_digest=fixture_digest(),
                        dense_model=model_component, sections_run=ran,
                        sections_skipped=tuple(s for s in SECTIONS if s in opts.skip),
                        summary=json.loads(summary.model_dump_json()), tap=tap,
                        tap_digest=hashlib.sha256(tap.encode("utf-8")).hexdigest())


def _refusal(what: str, summary: GateSummary | Mapping[str, Any]) -> GateRefused:
    s = summary if isinstance(summary, Mapping) else json.loads(summary.model_dump_json())
    first = "; ".join(list(s.get("failures", ()))[:3])
    return GateRefused(f"{what}: the permission gate failed ({s['failed']} of {s['checks']} checks: {first}); "
                       "nothing was changed")


def _reason(skip_reason: str | None) -> str | None:
    if skip_reason is None:
        return None
    if not isinstance(skip_reason, str) or not skip_reason.strip():
        raise InvalidArgument("skipping the gate needs a reason (--reason TEXT): it is recorded in the ledger")
    return skip_reason.strip()


def _reusable_bundle(certificate: Path | None, public_key: Path | None, target: Config) -> str | None:
    """A signed gate bundle for exactly ``target`` that passed every section a fresh certificate
    needs: returns its digest; raises when it does not certify ``target``."""
    if certificate is None:
        return None
    if public_key is None:
        raise InvalidArgument("reusing a certificate needs the public key that signed it (--public-key FILE)")
    report = audit.verify_bundle_file(certificate, audit.load_public_key(public_key))
    body = report.body
    if report.kind != "gate":
        raise InvalidArgument(f"{certificate} is a {report.kind} bundle, not a gate certificate")
    if body["config_hash"] != config_hash(target):
        raise GateRefused(f"the certificate {certificate} is for another configuration: "
                          + "; ".join(_differences(body["config"], target)))
    missing = required_sections(target, None) - set(body["sections_run"])
    if not body["summary"]["ok"] or missing:
        raise GateRefused(f"the certificate {certificate} does not certify: "
                          + ("its gate failed" if not body["summary"]["ok"] else f"it did not run {sorted(missing)}"))
    return report.digest


def gated_migrate(dsn: str, *, skip_reason: str | None = None, certificate: Path | None = None,
                  public_key: Path | None = None, gate_dsn: str | None = None, out: TextIO | None = None,
                  progress: Callable[[str], None] | None = None, command: str = "groundkit.migrate()",
                  sections: Sequence[str] = MIGRATE_SECTIONS) -> tuple[MigrationState, GatedChange]:
    """Migrate ``dsn`` behind the gate: migrate a throwaway template on the same server (or on
    ``gate_dsn``'s), run :data:`MIGRATE_SECTIONS` there with the database's active embedding
    model, and only when they pass apply the migration; then record the ledger row. Reuses a
    certificate for the identical configuration (in the ledger, or ``certificate``). With
    ``skip_reason``: no gate; applies and records a bypass. A failing gate raises
    :class:`GateRefused` and leaves the database as it was. ``sections``: fewer sections run
    sooner, but a run without every section the change needs does not certify it (``uncovered``)."""
    from groundkit.gate.throwaway import GateDatabases

    bypass = _reason(skip_reason)
    if bypass is not None:
        state = apply(dsn)
        with _connection(dsn) as real:
            serving = serving_configuration(real)
            ledger_id = record(real, _entry("migrate", command, "bypassed", serving, skipped=MIGRATE_SECTIONS,
                                            reason=bypass))
        return state, GatedChange(ledger_id=ledger_id, verdict="bypassed", config_hash=config_hash(serving),
                                  reason=bypass)
    with _connection(dsn) as real, GateDatabases(gate_dsn or dsn) as dbs:
        ledgered = has_ledger(real)
        model = _model_of(_active_model_row(real))
        with _connection(dbs.dsn_for(dbs.template)) as template:
            data = _data_components(real, template)
            target = {**template_code(dbs), **data, "embedding_model": _model_component(template, model)}
        basis = _certified_row(real) if ledgered else None
        reuse = _certified_row(real, config_hash(target)) if ledgered else None
        digest = None if reuse is not None else _reusable_bundle(certificate, public_key, target)
        evidence = None
        if reuse is None and digest is None:
            evidence = run_sections(dbs, sections, tested_data=data, dense_model=model, out=out,
                                    progress=progress)
            if not evidence.summary["ok"]:
                if ledgered:
                    record(real, _entry("migrate", command, "failed", evidence.config, evidence=evidence,
                                        basis_id=basis["id"] if basis else None))
                raise _refusal("migrate refused", evidence.summary)
    state = apply(dsn)
    with _connection(dsn) as real:
        serving = serving_configuration(real)
        return state, _record_change(real, "migrate", command, target, serving, evidence, basis, reuse, digest)


def _record_change(real: Conn, kind: Kind, command: str, target: Config, serving: Config,
                   evidence: GateEvidence | None, basis: Mapping[str, Any] | None, reuse: Mapping[str, Any] | None,
                   digest: str | None) -> GatedChange:
    """The ledger row after a gated change was applied."""
    if evidence is not None:
        verdict, why = verdict_of(True, evidence.config, serving, evidence.sections_run,
                                  basis["config"] if basis else None)
        ledger_id = record(real, _entry(kind, command, verdict, evidence.config, evidence=evidence,
                                        basis_id=basis["id"] if basis else None, reason=why))
        return GatedChange(ledger_id=ledger_id, verdict=verdict, config_hash=evidence.config_hash,
                           summary=evidence.summary, reason=why)
    # reused: the certificate is for target; it certifies only if target is what now serves
    verdict = "certified" if target == serving else "uncovered"
    why = None if verdict == "certified" else "the configuration serving differs from the certified one: " + "; ".join(
        _differences(target, serving))
    if reuse is not None:
        why = why or f"reused the certificate of ledger row {reuse['id']}"
    else:
        why = why or f"reused the signed gate bundle {digest}"
    ledger_id = record(real, _entry(kind, command, verdict, target, basis_id=reuse["id"] if reuse else None,
                                    bundle_digest=digest, reason=why))
    return GatedChange(ledger_id=ledger_id, verdict=verdict, config_hash=config_hash(target),
                       reused=reuse["id"] if reuse else None, bundle_digest=digest, reason=why)


def gated_cutover(dsn: str, model: str, *, force: bool = False, skip_reason: str | None = None,
                  certificate: Path | None = None, public_key: Path | None = None, gate_dsn: str | None = None,
                  out: TextIO | None = None, progress: Callable[[str], None] | None = None,
                  command: str | None = None, sections: Sequence[str] = CUTOVER_SECTIONS,
                  ) -> tuple[str | None, GatedChange]:
    """Cut over to ``model`` behind the gate: run ``sections`` (:data:`CUTOVER_SECTIONS`) embedding with it on
    throwaway databases of this groundkit (which must be the code the database runs: migrate
    first), and switch only when they pass; then record the ledger row. Reuses a certificate for
    the identical configuration (a rollback to a certified model is instant). Returns the model
    replaced and what was recorded. A failing gate raises :class:`GateRefused`; a lagging model
    :class:`CutoverRefused` before any gate runs (unless ``force``)."""
    from groundkit import embedding, model_swap
    from groundkit.client import Groundkit
    from groundkit.gate.throwaway import GateDatabases

    command = command or f"groundkit cutover --model {model}"
    bypass = _reason(skip_reason)
    with Groundkit.connect(dsn) as gk:
        m = embedding.get_model(gk, model)
        missing = sum(lag.missing for lag in embedding.lag(gk, model))
        if missing and not force:
            raise CutoverRefused(f"embedding model '{model}' lacks embeddings for {missing} current chunks (hint: Run "
                                 "groundkit embed --model for it first, or force the cutover.)")
    if bypass is not None:
        with Groundkit.connect(dsn) as gk:
            previous = model_swap.cutover(gk, model, force=force)
        with _connection(dsn) as real:
            serving = serving_configuration(real)
            ledger_id = record(real, _entry("cutover", command, "bypassed", serving, skipped=CUTOVER_SECTIONS,
                                            reason=bypass))
        return previous, GatedChange(ledger_id=ledger_id, verdict="bypassed", config_hash=config_hash(serving),
                                     reason=bypass)
    with _connection(dsn) as real:
        serving = serving_configuration(real)
        target = {**serving, "embedding_model": _model_component(real, m)}
        basis = _certified_row(real)
        reuse = _certified_row(real, config_hash(target))
    digest = None if reuse is not None else _reusable_bundle(certificate, public_key, target)
    evidence = None
    if reuse is None and digest is None:
        with GateDatabases(gate_dsn or dsn) as dbs:
            code = template_code(dbs)
            differs = _differences(code, {k: serving.get(k) for k in code})
            if differs:
                raise GateRefused("cutover refused: the gate runs this groundkit's code, and the database runs "
                                  "other code (run groundkit migrate first): " + "; ".join(differs))
            data = {k: v for k, v in serving.items() if k not in code}
            evidence = run_sections(dbs, sections, tested_data=data, dense_model=m, out=out,
                                    progress=progress)
        if not evidence.summary["ok"]:
            with _connection(dsn) as real:
                record(real, _entry("cutover", command, "failed", evidence.config, evidence=evidence,
                                    basis_id=basis["id"] if basis else None))
            raise _refusal(f"cutover to {model} refused", evidence.summary)
    with Groundkit.connect(dsn) as gk:
        previous = model_swap.cutover(gk, model, force=force)
    with _connection(dsn) as real:
        after = serving_configuration(real)
        return previous, _record_change(real, "cutover", command, target, after, evidence, basis, reuse, digest)


def carry_certificate(dsn: str, command: str) -> GatedChange | None:
    """After a change of components no gate section tests (the outbound policy, the search
    modes): record a certified row for the configuration now serving that rests on the latest
    certificate, when nothing else changed since it. None when there is no ledger or no
    certificate, when the configuration is already certified, or when another change needs a
    gate run (status then shows the configuration uncertified until one certifies it)."""
    with _connection(dsn) as real:
        if not has_ledger(real):
            return None
        serving = serving_configuration(real)
        basis = _certified_row(real)
        if basis is None or basis["config_hash"] == config_hash(serving):
            return None
        if required_sections(serving, basis["config"]):
            return None
        changed = _differences(basis["config"], serving)
        why = f"carries the certificate of ledger row {basis['id']}: only what no gate section tests changed: " + (
            "; ".join(changed))
        ledger_id = record(real, _entry("policy", command, "certified", serving, basis_id=basis["id"], reason=why))
    return GatedChange(ledger_id=ledger_id, verdict="certified", config_hash=config_hash(serving),
                       reused=basis["id"], reason=why)


def record_gate_run(dsn: str, evidence: GateEvidence, command: str = "groundkit eval gate") -> GatedChange:
    """Record a ``groundkit eval gate`` run in the ledger of the database at ``dsn``: certified
    when it passed, tested the configuration that database serves, and ran every section the
    changes since its last certificate need."""
    with _connection(dsn) as real:
        if not has_ledger(real):
            raise InvalidArgument("that database has no gate ledger (groundkit migrate first)")
        serving = serving_configuration(real)
        basis = _certified_row(real)
        verdict, why = verdict_of(bool(evidence.summary["ok"]), evidence.config, serving, evidence.sections_run,
                                  basis["config"] if basis else None)
        ledger_id = record(real, _entry("gate", command, verdict, evidence.config, evidence=evidence,
                                        basis_id=basis["id"] if basis else None, reason=why))
    return GatedChange(ledger_id=ledger_id, verdict=verdict, config_hash=evidence.config_hash,
                       summary=evidence.summary, reason=why)


def gate_target(dsn: str | None, dbs: GateDatabases) -> tuple[Config, EmbeddingModel | None]:
    """For ``groundkit eval gate``: the data components and active model of the database it
    certifies (``dsn``), or the template's defaults and no model when it certifies none."""
    with _connection(dbs.dsn_for(dbs.template)) as template:
        if dsn is None:
            return _data_components(None, template), None
        with _connection(dsn) as real:
            return _data_components(real, template), _model_of(_active_model_row(real))


__all__ = ["CUTOVER_SECTIONS", "MIGRATE_SECTIONS", "TRIGGERS", "DeploymentStatus", "GateEvidence", "GatedChange",
           "LedgerRow", "config_hash", "fixture_digest", "gate_target", "gated_cutover",
           "gated_migrate", "ledger", "record_gate_run", "required_sections", "run_sections", "status",
           "verdict_of"]
