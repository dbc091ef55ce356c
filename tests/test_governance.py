"""Governance by construction (issue 51, docs/governance.md): the gate as a property of the
deployment, and runs and gate results an auditor can verify without the database.

Every test runs against the real embedded PostgreSQL; the embedding providers the gate certifies
are the real ``openai`` provider talking to an HTTP server on loopback (tests/dense_fakes.py);
``groundkit serve`` is started as a process and asked over HTTP.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from psycopg.rows import dict_row
from typer.testing import CliRunner

import groundkit
from groundkit import Groundkit, audit, deployment, embedding, model_swap
from groundkit.cli.main import app
from groundkit.embedders import embedder_for
from groundkit.errors import AuditFailure, CutoverRefused, GateRefused, InvariantViolation
from groundkit.gate import runner as gate_runner
from groundkit.gate.golden import Hit, Searcher, load_golden, real_searcher
from tests.dense_fakes import FakeEmbeddings, add_fake_model, fake_openai_server
from tests.governance_helpers import certify

CLI = [str(Path(sys.executable).parent / "groundkit")]
runner = CliRunner()


def _owner(dsn: str) -> psycopg.Connection[dict[str, Any]]:
    return psycopg.connect(dsn, autocommit=True, row_factory=dict_row)


def _status(dsn: str) -> deployment.DeploymentStatus:
    with _owner(dsn) as conn:
        return deployment.status(conn)


def _ledger(dsn: str) -> list[deployment.LedgerRow]:
    with _owner(dsn) as conn:
        return deployment.ledger(conn)


@pytest.fixture
def keys(tmp_path: Path) -> tuple[Path, Path]:
    private, public = audit.generate_key()
    (tmp_path / "key.pem").write_bytes(private)
    (tmp_path / "key.pub").write_bytes(public)
    return tmp_path / "key.pem", tmp_path / "key.pub"


def _world(gk: Groundkit) -> None:
    gk.put_member("t0", "T0")
    gk.put_member("t2", "T2")
    gk.put_space("open", "T0")
    gk.put_space("members", "T2")
    gk.put_object("open-1", 1, "board_post", "open", "T0", "Kilns", "kiln firing schedules for stoneware")
    gk.put_object("members-1", 1, "board_post", "members", "T2", "Glazes", "iron glaze recipes for the kiln")


def _runs(gk: Groundkit, n: int, reader: str = "t2") -> list[uuid.UUID]:
    ids = []
    for i in range(n):
        with gk.run(flow="tutor", reader=reader, model="m-1", prompt_version=f"p@{i}") as run:
            run.search("kiln")
            run.search("glaze")
        ids.append(run.id)
    return ids


# -- the configuration -------------------------------------------------------------------------


def test_configuration_hash_in_python_is_the_sql_one(dsn: str) -> None:
    """The hash a bundle is checked against offline (Python) is the one the ledger keys on (SQL),
    for odd values too: quotes, backslashes, control characters, non-ASCII, nulls."""
    configs: list[dict[str, str | None]] = [{"a": "1", "b": None},
                                            {"z": "x", "a": "y\"q\\", "m": "tab\tnl\n\x01", "é": "日本"}, {}]
    with _owner(dsn) as conn:
        for config in configs:
            sql_hash = conn.execute("select groundkit.configuration_hash(%s::jsonb) as h",
                                    (json.dumps(config),)).fetchone()
            assert sql_hash is not None and sql_hash["h"] == deployment.config_hash(config), config
        serving = deployment.serving_configuration(conn)
    assert set(serving) >= {"groundkit_version", "schema_revision", "sql_digest", "postgres", "pgvector",
                            "embedding_model", "outbound_policy"}
    assert serving["groundkit_version"] == groundkit.__version__ and serving["embedding_model"] is None


def test_the_sql_digest_changes_when_the_owner_replaces_a_function_or_disables_a_trigger(dsn: str) -> None:
    """A function replaced by hand, a trigger disabled or a privilege granted outside migrate is
    another configuration: what the gate certified is no longer what serves."""
    with _owner(dsn) as conn:
        before = deployment.serving_configuration(conn)["sql_digest"]
        conn.execute("alter table groundkit.runs disable trigger runs_append_only")
        disabled = deployment.serving_configuration(conn)["sql_digest"]
        conn.execute("alter table groundkit.runs enable trigger runs_append_only")
        assert deployment.serving_configuration(conn)["sql_digest"] == before
        conn.execute("grant select on groundkit.chunks to groundkit_reader")
        granted = deployment.serving_configuration(conn)["sql_digest"]
    assert len({before, disabled, granted}) == 3


def test_which_sections_a_change_needs() -> None:
    base = {"groundkit_version": "1", "schema_revision": "0025", "sql_digest": "s", "postgres": "18",
            "pgvector": "0.8", "embedding_model": None, "outbound_policy": None}
    assert deployment.required_sections(base, base) == set()
    assert deployment.required_sections({**base, "embedding_model": "m@1"}, base) == {"dense"}
    assert deployment.required_sections({**base, "schema_revision": "0026"}, base) == set(deployment.MIGRATE_SECTIONS)
    assert deployment.required_sections(base, None) == set(deployment.MIGRATE_SECTIONS)
    # a component nobody listed needs the whole migrate set (fail-safe)
    assert deployment.required_sections({**base, "new": "x"}, base) == set(deployment.MIGRATE_SECTIONS)
    assert deployment.verdict_of(True, base, base, ["dense"], base) == ("certified", None)
    verdict, why = deployment.verdict_of(True, {**base, "embedding_model": "m@1"}, {**base, "embedding_model": "m@1"},
                                         ["golden"], base)
    assert verdict == "uncovered" and why is not None and "dense" in why
    verdict, why = deployment.verdict_of(True, base, {**base, "postgres": "15"}, deployment.MIGRATE_SECTIONS, None)
    assert verdict == "uncovered" and why is not None and "postgres" in why
    assert deployment.verdict_of(False, base, base, deployment.MIGRATE_SECTIONS, None)[0] == "failed"


# -- the ledger and the deployment status -----------------------------------------------------


def test_a_fresh_database_is_uncertified_and_status_check_fails(dsn: str) -> None:
    st = _status(dsn)
    assert not st.certified and st.ledger_id is None and st.reason == "no gate run has certified this configuration"
    result = runner.invoke(app, ["status", "--check", "--dsn", dsn])
    assert result.exit_code == 1
    assert "ALERT gate: the configuration serving readers is not certified" in result.stderr
    shown = runner.invoke(app, ["status", "--json", "--dsn", dsn])
    body = json.loads(shown.stdout)["deployment"]
    assert body["certified"] is False and body["alerts"] and body["config"]["schema_revision"]
    certify(dsn)
    fine = runner.invoke(app, ["status", "--check", "--dsn", dsn])
    assert fine.exit_code == 0, fine.output
    assert "gate              certified by ledger row" in fine.stdout


def test_an_outbound_policy_change_alone_carries_the_certificate_over(dsn: str) -> None:
    """No gate section tests the outbound policy (TRIGGERS): changing it through the CLI records a
    certified row of kind 'policy' naming the new configuration and resting on the certificate;
    a change made around the CLI (SQL) leaves the configuration uncertified until one is recorded,
    and without a certificate there is nothing to carry."""
    uncertified = runner.invoke(app, ["outbound", "allow", "cloud", "--max-tier", "T0", "--reason", "try",
                                      "--dsn", dsn])
    assert uncertified.exit_code == 0, uncertified.output
    assert "gate ledger row" not in uncertified.stdout and not _status(dsn).certified
    basis = certify(dsn)
    changed = runner.invoke(app, ["outbound", "allow", "cloud", "--max-tier", "T1", "--reason", "widen",
                                  "--dsn", dsn])
    assert changed.exit_code == 0, changed.output
    assert f"carries the certificate of ledger row {basis}" in changed.stdout
    st = _status(dsn)
    assert st.certified and st.kind == "policy" and st.ledger_id is not None and st.ledger_id > basis
    with psycopg.connect(dsn, autocommit=True) as conn:  # around the CLI: the hash moves, nothing is recorded
        conn.execute("select groundkit.set_outbound_policy((select p.policy from groundkit.outbound_policy() p)"
                     " || '{\"phone_regions\": [\"GB\"]}', 'by hand')")
    assert not _status(dsn).certified
    assert deployment.carry_certificate(dsn, "test") is not None and _status(dsn).certified


def test_a_reader_login_may_ask_deployment_status(server_dsn: str, dsn: str) -> None:
    """Apps check the certificate through the SQL API: the reader, writer and auditor roles may
    call deployment_status(); none may read the ledger table or write a row."""
    certify(dsn)
    from groundkit.gate.roles import login_roles

    with login_roles(server_dsn, dsn) as who, psycopg.connect(who.reader, autocommit=True) as reader:
        row = reader.execute("select certified, config_hash from groundkit.deployment_status()").fetchone()
        assert row is not None and row[0] is True
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            reader.execute("select * from groundkit.gate_ledger")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            reader.execute("select groundkit.record_gate('{}'::jsonb)")
    # a reader login's run is chained at its commit, though the reader may not touch the chain
    with Groundkit.connect(dsn) as gk:
        _world(gk)
    with login_roles(server_dsn, dsn) as who, Groundkit.connect(who.reader) as reader_gk:
        with reader_gk.run(flow="tutor", reader="t2") as run:
            run.search("kiln")
    assert [e["kind"] for e in _entries(dsn)][-2:] == ["search", "run"] and _verify(dsn).ok


def test_the_ledger_is_append_only(dsn: str) -> None:
    ledger_id = certify(dsn)
    with _owner(dsn) as conn:
        for statement in ("update groundkit.gate_ledger set verdict = 'failed' where id = %s",
                          "delete from groundkit.gate_ledger where id = %s", "truncate groundkit.gate_ledger"):
            with pytest.raises(InvariantViolation, match="append-only"):
                try:
                    conn.execute(statement, (ledger_id,) if "%s" in statement else ())
                except psycopg.Error as exc:
                    raise groundkit.errors.from_psycopg(exc) from None


def test_a_failure_revokes_a_certificate_and_a_forged_row_does_not_certify(dsn: str) -> None:
    certify(dsn)
    assert _status(dsn).certified
    with _owner(dsn) as conn:
        config = deployment.serving_configuration(conn)
        failed = deployment.record(conn, {"kind": "gate", "command": "test", "verdict": "failed", "config": config,
                                          "passed": False, "checks": 1, "failed": 1, "failures": ["1 - leak"]})
    st = _status(dsn)
    assert not st.certified and st.ledger_id == failed and "the gate failed" in (st.reason or "")
    # an owner writing a certificate around the chain (triggers off): not the row the chain recorded
    with _owner(dsn) as conn:
        conn.execute("set session_replication_role = replica")
        forged = deployment.record(conn, {"kind": "gate", "command": "forged", "verdict": "certified",
                                          "config": config, "sections_run": list(gate_runner.SECTIONS)})
    st = _status(dsn)
    assert not st.certified and st.ledger_id == forged
    assert st.reason == f"ledger row {forged} is not the row the audit chain recorded"


# -- migrate behind the gate --------------------------------------------------------------------


def _leaky(gk: Groundkit) -> Searcher:
    """groundkit.search answering every reader as the golden set's T3 member: a leak."""
    real = real_searcher(gk)

    def search(reader_sub: str, query: str, k: int = 10, content_types: Any = None, space_ids: Any = None
               ) -> list[Hit]:
        return real("eli", query, k, content_types, space_ids)

    return search


def test_migrate_refuses_on_a_failing_gate_and_leaves_the_database_untouched(
        empty_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gate_runner, "real_searcher", _leaky)
    with pytest.raises(GateRefused, match=r"the permission gate failed .*LEAK|the permission gate failed"):
        deployment.gated_migrate(empty_dsn, sections=("golden",))
    with _owner(empty_dsn) as conn:
        row = conn.execute("select to_regnamespace('groundkit') is null as untouched").fetchone()
        assert row is not None and row["untouched"], "the database was touched before the gate passed"


def test_a_gate_run_without_every_section_a_change_needs_does_not_certify(empty_dsn: str) -> None:
    _, change = deployment.gated_migrate(empty_dsn, sections=("golden",))
    assert change.verdict == "uncovered" and change.summary is not None and change.summary["ok"]
    assert change.reason is not None and "planted" in change.reason and "dense" in change.reason
    (row,) = _ledger(empty_dsn)
    assert row.kind == "migrate" and row.verdict == "uncovered" and row.sections_run == ("golden",)
    assert row.passed is True and row.tap_digest and row.fixture_digest == deployment.fixture_digest()
    assert not _status(empty_dsn).certified


def test_cli_migrate_gates_certifies_reuses_and_serve_accepts_it(empty_dsn: str, tmp_path: Path) -> None:
    """The whole path: `groundkit migrate` runs the migrate sections on a throwaway database at the
    target revision, applies, records the certificate; status --check passes; a second migrate
    reuses the certificate without running the gate; the serve startup check accepts it."""
    tap = tmp_path / "gate.tap"
    first = subprocess.run([*CLI, "migrate", "--dsn", empty_dsn, "--tap", str(tap)], capture_output=True, text=True,
                           timeout=1200)
    assert first.returncode == 0, first.stderr
    assert "gate: section golden" in first.stderr and "gate: section dense" in first.stderr
    assert "gate: section model" not in first.stderr  # the release gate's, not migrate's
    assert "migrate: certified (ledger row 1; the gate passed" in first.stderr
    (row,) = _ledger(empty_dsn)
    assert row.verdict == "certified" and row.sections_run == deployment.MIGRATE_SECTIONS
    assert set(row.sections_skipped) == set(gate_runner.SECTIONS) - set(deployment.MIGRATE_SECTIONS)
    assert row.tap_digest == hashlib.sha256(tap.read_bytes()).hexdigest() and row.failed == 0
    assert _status(empty_dsn).certified
    again = subprocess.run([*CLI, "migrate", "--dsn", empty_dsn], capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    assert "gate: section" not in again.stderr and "reusing the certificate of ledger row 1" in again.stderr
    assert _ledger(empty_dsn)[0].basis_id == 1
    from groundkit.cli.serve import gate_check

    health = gate_check(empty_dsn, allow_ungated=False)
    assert health.certified and health.ledger_id == 2 and not health.allowed_ungated


def test_skip_gate_needs_a_reason_and_records_a_bypass(dsn: str) -> None:
    no_reason = runner.invoke(app, ["migrate", "--skip-gate", "--dsn", dsn])
    assert no_reason.exit_code == 1 and "--skip-gate needs --reason" in no_reason.stderr
    done = runner.invoke(app, ["migrate", "--skip-gate", "--reason", "hotfix 4711, gate run in CI", "--dsn", dsn])
    assert done.exit_code == 0, done.output
    assert "the gate was bypassed" in done.stderr and "NOT certified" in done.stderr
    (row,) = _ledger(dsn)
    assert (row.kind, row.verdict, row.reason, row.passed) == ("migrate", "bypassed", "hotfix 4711, gate run in CI",
                                                               None)
    assert row.command == "groundkit migrate --skip-gate" and row.operator and "@" in row.operator
    st = _status(dsn)
    assert not st.certified and st.reason == "the gate was bypassed: hotfix 4711, gate run in CI"
    check = runner.invoke(app, ["status", "--check", "--dsn", dsn])
    assert check.exit_code == 1 and "bypassed: hotfix 4711" in check.stderr


# -- serve refuses an uncertified configuration --------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_serve_refuses_an_uncertified_configuration_unless_allowed_ungated(dsn: str) -> None:
    refused = subprocess.run([*CLI, "serve", "http", "--port", str(_free_port()), "--dsn", dsn],
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode == 1
    assert "error [GK021]: refusing to serve: no gate run has certified this configuration" in refused.stderr
    port = _free_port()
    proc = subprocess.Popen([*CLI, "serve", "http", "--port", str(port), "--allow-ungated", "--dsn", dsn],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        health = None
        for _ in range(300):
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).json()
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        assert health is not None, "the server did not answer"
        assert health["gate"]["certified"] is False and health["gate"]["allowed_ungated"] is True
        assert health["gate"]["reason"] == "no gate run has certified this configuration"
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert "serving ungated (--allow-ungated)" in err


def test_serve_starts_on_a_certified_configuration_and_refuses_once_it_changes(dsn: str) -> None:
    from groundkit.cli.serve import gate_check
    from groundkit.errors import Uncertified

    ledger_id = certify(dsn)
    assert gate_check(dsn, allow_ungated=False).ledger_id == ledger_id
    with _owner(dsn) as conn:  # an owner grants a reader the chunks by hand: another configuration
        conn.execute("grant select on groundkit.chunks to groundkit_reader")
    with pytest.raises(Uncertified, match="refusing to serve: no gate run has certified this configuration"):
        gate_check(dsn, allow_ungated=False)


# -- cutover behind the gate -------------------------------------------------------------------


@pytest.fixture
def dense(dsn: str, fake: FakeEmbeddings) -> Iterator[Groundkit]:
    """A world embedded by the active model ``fake``, its configuration certified."""
    with Groundkit.connect(dsn) as gk:
        _world(gk)
        add_fake_model(gk, "fake", fake)
        m = embedding.get_model(gk, "fake")
        embedding.embed_pending(gk, m, embedder_for(m))
        model_swap.cutover(gk, "fake")
        certify(dsn)
        yield gk


def test_cutover_gates_the_new_model_through_dense_and_hybrid_then_rolls_back_on_the_certificate(
        dense: Groundkit, dsn: str, fake: FakeEmbeddings) -> None:
    gk = dense
    add_fake_model(gk, "fake2", fake, recipe="text")
    m2 = embedding.get_model(gk, "fake2")
    embedding.embed_pending(gk, m2, embedder_for(m2))
    requests, sent = fake.requests, len(fake.texts)
    done = runner.invoke(app, ["cutover", "--model", "fake2", "--dsn", dsn])
    assert done.exit_code == 0, done.output
    assert "active embedding model: fake2 (was fake)" in done.stdout
    assert "cutover: certified" in done.stderr and "the gate passed" in done.stderr
    assert fake.requests > requests, "the gate did not embed with the model it certifies"
    probe = load_golden().objects[0].probe
    assert any(probe.lower() in t.lower() for t in fake.texts[sent:]), "the golden world was not embedded with it"
    row = _ledger(dsn)[0]
    assert row.kind == "cutover" and row.verdict == "certified" and row.sections_run == ("dense",)
    assert row.dense_model is not None and row.dense_model.startswith("fake2@")
    assert row.config["embedding_model"] == row.dense_model and row.basis_id is not None
    assert _status(dsn).certified and embedding.active_model(gk).name == "fake2"
    requests = fake.requests
    back = runner.invoke(app, ["cutover", "--model", "fake", "--dsn", dsn])  # the rollback
    assert back.exit_code == 0, back.output
    assert "reusing the certificate of ledger row" in back.stderr and fake.requests == requests
    assert _status(dsn).certified and embedding.active_model(gk).name == "fake"


def test_cutover_is_refused_when_the_gate_fails_and_the_model_stays(
        dense: Groundkit, dsn: str, fake: FakeEmbeddings) -> None:
    gk = dense
    with fake_openai_server() as other:
        add_fake_model(gk, "down", other)  # (its origin marked private: the certificate carries over)
        assert deployment.carry_certificate(dsn, "tests: the fake's origin marked private") is not None
        m = embedding.get_model(gk, "down")
        embedding.embed_pending(gk, m, embedder_for(m))
        other.down = True  # the provider fails: the gate cannot embed the golden world with it
        with pytest.raises(GateRefused, match="cutover to down refused: the permission gate failed"):
            deployment.gated_cutover(dsn, "down")
    assert embedding.active_model(gk).name == "fake"
    row = _ledger(dsn)[0]
    assert row.kind == "cutover" and row.verdict == "failed" and row.passed is False
    assert row.config["embedding_model"] is not None and row.config["embedding_model"].startswith("down@")
    assert _status(dsn).certified  # the serving configuration (fake) is still the certified one


def test_a_lagging_model_is_refused_before_any_gate_runs(dense: Groundkit, dsn: str, fake: FakeEmbeddings) -> None:
    add_fake_model(dense, "lagging", fake)
    requests = fake.requests
    with pytest.raises(CutoverRefused, match="lacks embeddings for 2 current chunks"):
        deployment.gated_cutover(dsn, "lagging")
    assert fake.requests == requests and len(_ledger(dsn)) == 1


def test_a_signed_certificate_for_the_identical_configuration_is_reused(
        dense: Groundkit, dsn: str, fake: FakeEmbeddings, keys: tuple[Path, Path], tmp_path: Path) -> None:
    """A gate bundle signed elsewhere (CI, staging) for exactly the configuration a cutover makes
    is reused instead of running the gate; one for another configuration, or changed, is refused."""
    gk = dense
    add_fake_model(gk, "fake2", fake, recipe="text")
    m2 = embedding.get_model(gk, "fake2")
    embedding.embed_pending(gk, m2, embedder_for(m2))
    with _owner(dsn) as conn:
        serving = deployment.serving_configuration(conn)
        target = {**serving, "embedding_model": deployment._model_component(conn, m2)}
    private, public = keys
    signing = audit.load_private_key(private)

    def bundle(config: dict[str, Any], name: str) -> Path:
        tap = "TAP version 13\nok 1 - golden set through dense and hybrid\n1..1\n"
        evidence = deployment.GateEvidence(
            config=config, config_hash=deployment.config_hash(config), fixture_digest=deployment.fixture_digest(),
            dense_model=config["embedding_model"], sections_run=tuple(gate_runner.SECTIONS), sections_skipped=(),
            summary={"ok": True, "checks": 1, "passed": 1, "failed": 0, "failures": [], "duration_s": 1.0},
            tap=tap, tap_digest=hashlib.sha256(tap.encode()).hexdigest())
        path = tmp_path / name
        audit.write_json(path, audit.gate_bundle(evidence, signing))
        return path

    other = bundle({**target, "postgres": "17"}, "other.json")
    refused = runner.invoke(app, ["cutover", "--model", "fake2", "--certificate", str(other), "--public-key",
                                  str(public), "--dsn", dsn])
    assert refused.exit_code == 1 and "is for another configuration: postgres" in refused.stderr
    good = bundle(target, "good.json")
    requests = fake.requests
    done = runner.invoke(app, ["cutover", "--model", "fake2", "--certificate", str(good), "--public-key", str(public),
                               "--dsn", dsn])
    assert done.exit_code == 0, done.output
    assert "reusing the signed bundle" in done.stderr and fake.requests == requests
    row = _ledger(dsn)[0]
    assert row.verdict == "certified" and row.bundle_digest == audit.read_json(good)[1]
    assert _status(dsn).certified


# -- the audit chain -----------------------------------------------------------------------------


def _entries(dsn: str) -> list[dict[str, Any]]:
    with _owner(dsn) as conn:
        return conn.execute("select seq, kind, run_id, search_no, ledger_id from groundkit.audit_chain"
                            " order by seq").fetchall()


def _verify(dsn: str, *checkpoints: tuple[str, dict[str, Any]], key: Any = None) -> audit.ChainReport:
    with Groundkit.connect(dsn) as gk:
        return audit.verify_chain(gk, checkpoints, key)


def test_runs_searches_and_ledger_rows_are_chained_in_commit_order(gk: Groundkit, dsn: str) -> None:
    _world(gk)
    (first,) = _runs(gk, 1)
    ledger_id = certify(dsn)
    (second,) = _runs(gk, 1)
    kinds = [(e["kind"], e["run_id"], e["search_no"], e["ledger_id"]) for e in _entries(dsn)]
    assert kinds == [("genesis", None, None, None),
                     ("search", first, 1, None), ("search", first, 2, None), ("run", first, None, None),
                     ("gate", None, None, ledger_id),
                     ("search", second, 1, None), ("search", second, 2, None), ("run", second, None, None)]
    report = _verify(dsn)
    assert report.ok and report.entries == 8 and report.head_seq == 7
    with _owner(dsn) as conn, pytest.raises(psycopg.Error, match="append-only"):
        conn.execute("delete from groundkit.audit_chain where seq = 3")
    # a run rolled back with its transaction leaves no entry and takes no seq
    with gk.conn.transaction(force_rollback=True), gk.run(flow="tutor", reader="t2") as run:
        run.search("kiln")
    (third,) = _runs(gk, 1)
    assert [e["seq"] for e in _entries(dsn)] == list(range(11)) and _entries(dsn)[-1]["run_id"] == third
    assert _verify(dsn).ok


def test_concurrent_runs_take_turns_at_the_head_and_the_chain_holds(dsn: str) -> None:
    with Groundkit.connect(dsn) as gk:
        _world(gk)
    errors: list[BaseException] = []

    def work() -> None:
        try:
            with Groundkit.connect(dsn) as mine:
                _runs(mine, 10)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors
    report = _verify(dsn)
    assert report.ok, report.problems
    assert report.entries == 1 + 6 * 10 * 3


@pytest.fixture
def chained(gk: Groundkit, dsn: str) -> list[uuid.UUID]:
    _world(gk)
    ids = _runs(gk, 4)
    certify(dsn)
    return ids


def _tamper(dsn: str, statement: str, params: tuple[Any, ...] = ()) -> None:
    """As the owner, with every trigger off (the append-only guards and the chain's included)."""
    with _owner(dsn) as conn:
        conn.execute("set session_replication_role = replica")
        conn.execute(statement, params)


def _seq_of(dsn: str, kind: str, run_id: uuid.UUID, search_no: int | None = None) -> int:
    with _owner(dsn) as conn:
        row = conn.execute("select seq from groundkit.audit_chain where kind = %s and run_id = %s"
                           " and search_no is not distinct from %s", (kind, run_id, search_no)).fetchone()
        assert row is not None
        return int(row["seq"])


def test_audit_verify_names_an_edited_pinned_version(chained: list[uuid.UUID], dsn: str) -> None:
    run_id = chained[1]
    _tamper(dsn, "update groundkit.run_searches set hits = jsonb_set(hits, '{0,object_version}', '7')"
                 " where run_id = %s and search_no = 1", (run_id,))
    seq = _seq_of(dsn, "search", run_id, 1)
    report = _verify(dsn)
    assert not report.ok and report.first_break is not None and report.first_break.seq == seq
    assert report.first_break.what == f"entry #{seq} (search:{run_id}/1): the row was changed after it was chained"
    result = runner.invoke(app, ["audit", "verify", "--dsn", dsn])
    assert result.exit_code == 1
    assert f"BROKEN first broken link: entry #{seq} (search:{run_id}/1)" in result.stderr


def test_audit_verify_names_a_deleted_run_search(chained: list[uuid.UUID], dsn: str) -> None:
    run_id = chained[2]
    seq = _seq_of(dsn, "search", run_id, 2)
    _tamper(dsn, "delete from groundkit.run_searches where run_id = %s and search_no = 2", (run_id,))
    report = _verify(dsn)
    assert report.first_break is not None and report.first_break.seq == seq
    assert "its row was deleted, and no prune tombstone accounts for it" in report.first_break.what


def test_audit_verify_names_a_reordering(chained: list[uuid.UUID], dsn: str) -> None:
    """Rewriting ids: two searches of a run swap their numbers (the order a run searched in), and,
    separately, two chain entries swap their places."""
    run_id = chained[0]

    def swap() -> None:
        for a, b in ((1, 100), (2, 1), (100, 2)):
            _tamper(dsn, "update groundkit.run_searches set search_no = %s where run_id = %s and search_no = %s",
                    (b, run_id, a))

    swap()
    report = _verify(dsn)
    assert report.first_break is not None and report.first_break.seq == _seq_of(dsn, "search", run_id, 1)
    swap()
    assert _verify(dsn).ok
    a, b = _seq_of(dsn, "run", chained[1]), _seq_of(dsn, "run", chained[2])
    for old, new in ((a, 10**9), (b, a), (10**9, b)):
        _tamper(dsn, "update groundkit.audit_chain set seq = %s where seq = %s", (new, old))
    report = _verify(dsn)
    assert report.first_break is not None and report.first_break.seq == a
    assert "does not follow the entry before it" in report.first_break.what


def test_rows_written_around_the_chain_are_named(chained: list[uuid.UUID], dsn: str) -> None:
    ghost = uuid.uuid4()
    _tamper(dsn, "insert into groundkit.runs (run_id, flow, reader_sub) values (%s, 'tutor', 't2')", (ghost,))
    report = _verify(dsn)
    assert not report.ok and any(p.what == f"run:{ghost} is in no chain entry: written around the chain"
                                 for p in report.problems)


def _rewrite_from(dsn: str, seq: int) -> None:
    """The owner's full cover-up: recompute every row hash and link from ``seq`` on, so the chain
    is consistent with the edited rows again. Only a checkpoint kept outside can tell."""
    with _owner(dsn) as conn:
        conn.execute("set session_replication_role = replica")
        rows = conn.execute("select * from groundkit.audit_entries(%s, 100000)", (seq - 1,)).fetchall()
        prev = conn.execute("select hash from groundkit.audit_chain where seq = %s", (seq - 1,)).fetchone()
        assert prev is not None
        prev_hash = bytes(prev["hash"])
        for e in rows:
            row_hash = bytes(e["current_hash"])
            ref = audit.ref_of(e["kind"], None if e["run_id"] is None else str(e["run_id"]), e["search_no"],
                               e["ledger_id"])
            new = audit.entry_hash(prev_hash, int(e["seq"]), ref, row_hash)
            conn.execute("update groundkit.audit_chain set row_hash = %s, prev_hash = %s, hash = %s where seq = %s",
                         (row_hash, prev_hash, new, e["seq"]))
            prev_hash = new


def test_a_checkpoint_is_a_prefix_until_the_history_before_it_is_rewritten(
        chained: list[uuid.UUID], gk: Groundkit, dsn: str, keys: tuple[Path, Path], tmp_path: Path) -> None:
    private, public = keys
    made = subprocess.run([*CLI, "audit", "checkpoint", "--key-env", "GK_TEST_KEY", "--dsn", dsn],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "GK_TEST_KEY": private.read_text()})
    assert made.returncode == 0, made.stderr
    cp = tmp_path / "cp1.json"
    cp.write_text(made.stdout)
    doc = json.loads(made.stdout)
    assert doc["seq"] == _entries(dsn)[-1]["seq"] and doc["signature"]["algorithm"] == "ed25519"
    assert private.read_text() not in made.stdout
    _runs(gk, 2)  # the history goes on: the checkpoint stays a prefix of it
    fine = runner.invoke(app, ["audit", "verify", "--checkpoint", str(cp), "--public-key", str(public), "--dsn", dsn])
    assert fine.exit_code == 0, fine.output
    assert f"checkpoint {cp}: #{doc['seq']}" in fine.stdout and "is a prefix of today's history" in fine.stdout
    # the owner edits a run from before the checkpoint and recomputes the whole chain after it
    seq = _seq_of(dsn, "search", chained[0], 1)
    _tamper(dsn, "update groundkit.run_searches set query = 'something else' where run_id = %s and search_no = 1",
            (chained[0],))
    _rewrite_from(dsn, seq)
    assert _verify(dsn).ok  # internally consistent again
    broken = runner.invoke(app, ["audit", "verify", "--checkpoint", str(cp), "--public-key", str(public),
                                 "--dsn", dsn])
    assert broken.exit_code == 1
    assert f"checkpoint {cp} (#{doc['seq']}" in broken.stderr and "is not a prefix of today's history" in broken.stderr
    # a checkpoint changed after signing, or signed by another key, proves nothing
    doc["head"] = "0" * 64
    forged = tmp_path / "forged.json"
    audit.write_json(forged, doc)
    report = _verify(dsn, (str(forged), doc), key=audit.load_public_key(public))
    assert any("the signature does not match" in p.what for p in report.problems)


def test_prune_leaves_a_tombstone_the_chain_accounts_for(chained: list[uuid.UUID], gk: Groundkit, dsn: str) -> None:
    assert gk.prune_runs(datetime.now(UTC) + timedelta(minutes=1)) == 4
    report = _verify(dsn)
    assert report.ok, report.problems
    assert report.pruned == 12  # four headers, eight searches
    (tomb,) = [e for e in _entries(dsn) if e["kind"] == "prune"]
    with _owner(dsn) as conn:
        row = conn.execute("select pruned_runs, pruned_searches, pruned_seqs::text as seqs from groundkit.runs"
                           " where run_id = %s", (tomb["run_id"],)).fetchone()
    assert row is not None and (row["pruned_runs"], row["pruned_searches"]) == (4, 8) and row["seqs"].startswith("{[1,")
    # a run deleted outside prune, later, is named; so is a tombstone whose range is stretched
    (later,) = _runs(gk, 1)
    seq = _seq_of(dsn, "run", later)
    _tamper(dsn, "delete from groundkit.runs where run_id = %s", (later,))
    report = _verify(dsn)
    assert report.first_break is not None and report.first_break.seq == seq
    assert "no prune tombstone accounts for it" in report.first_break.what


# -- evidence bundles ----------------------------------------------------------------------------


def test_a_run_bundle_verifies_offline_and_any_changed_byte_fails(
        chained: list[uuid.UUID], dsn: str, keys: tuple[Path, Path], tmp_path: Path) -> None:
    private, public = keys
    bundle = tmp_path / "run.json"
    done = runner.invoke(app, ["runs", "export", str(chained[1]), "--bundle", str(bundle), "--key", str(private),
                               "--dsn", dsn])
    assert done.exit_code == 0, done.output
    doc = json.loads(bundle.read_bytes())
    body = doc["body"]
    assert body["run_id"] == str(chained[1]) and [p["query"] for p in body["pinned"]] == ["kiln", "glaze"]
    assert [e["kind"] for e in body["entries"]] == ["search", "search", "run"]
    assert body["replay"] and all(r["now"] == "current" for r in body["replay"])
    assert "kiln firing schedules" not in bundle.read_text()  # no chunk text
    # offline: no database is reachable, nothing listens
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("GROUNDKIT_")},
           "GROUNDKIT_DSN": "postgresql://nobody@127.0.0.1:1/none", "GROUNDKIT_HOME": str(tmp_path / "nohome")}
    ok = subprocess.run([*CLI, "audit", "verify-bundle", str(bundle), "--public-key", str(public)],
                        capture_output=True, text=True, timeout=60, env=env)
    assert ok.returncode == 0, ok.stderr
    assert "verified run bundle" in ok.stdout and "3 chain entries" in ok.stdout
    assert not (tmp_path / "nohome").exists()
    raw = bundle.read_bytes()
    key = audit.load_public_key(public)
    for position in range(0, len(raw) - 1, max(1, len(raw) // 97)):
        changed = bytearray(raw)
        changed[position] = changed[position] ^ 0x01
        bundle.write_bytes(bytes(changed))
        with pytest.raises(AuditFailure):
            audit.verify_bundle_file(bundle, key)
    bundle.write_bytes(raw[:100] + b"2" + raw[101:] if raw[100:101] != b"2" else raw[:100] + b"3" + raw[101:])
    failed = subprocess.run([*CLI, "audit", "verify-bundle", str(bundle), "--public-key", str(public)],
                            capture_output=True, text=True, timeout=60, env=env)
    assert failed.returncode == 1 and "error [GK022]" in failed.stderr


def test_a_gate_bundle_from_eval_gate_verifies_offline(
        dsn: str, keys: tuple[Path, Path], tmp_path: Path) -> None:
    private, public = keys
    bundle = tmp_path / "gate.json"
    skip = [x for s in gate_runner.SECTIONS if s != "golden" for x in ("--skip", s)]
    result = runner.invoke(app, ["eval", "gate", "--dsn", dsn, "--json", "--bundle", str(bundle), "--key",
                                 str(private), *skip])
    assert result.exit_code == 0, result.output
    assert "eval gate: not certified" in result.stderr and "sections not run that these changes need" in result.stderr
    row = _ledger(dsn)[0]
    assert row.kind == "gate" and row.verdict == "uncovered" and row.sections_run == ("golden",)
    report = audit.verify_bundle_file(bundle, audit.load_public_key(public))
    assert report.kind == "gate" and report.body["config_hash"] == row.config_hash
    assert any(line.startswith(f"ledger row {row.id}: uncovered") for line in report.checked)
    doc = json.loads(bundle.read_bytes())
    doc["body"]["summary"]["failed"] = 0
    doc["body"]["tap"] = doc["body"]["tap"].replace("ok 2 -", "not ok 2 -", 1)
    audit.write_json(bundle, doc)
    with pytest.raises(AuditFailure, match="the signature does not match"):
        audit.verify_bundle_file(bundle, audit.load_public_key(public))


def test_an_upgrade_chains_the_runs_recorded_before_the_chain_existed(empty_dsn: str) -> None:
    """A database at revision 0024 with runs, searches and a prune tombstone: the migration to the
    chain adopts them after the genesis entry, each run's searches before its header, and verify
    holds (the old tombstone names no entries: what it pruned was never chained)."""
    from tests.conftest import upgrade_revisions_only

    upgrade_revisions_only(empty_dsn, "0024")
    old = [uuid.uuid4(), uuid.uuid4()]
    with _owner(empty_dsn) as conn:
        for i, run_id in enumerate(old):
            conn.execute("insert into groundkit.runs (run_id, flow, reader_sub, recorded_at) values"
                         " (%s, 'tutor', 't2', now() - make_interval(days => %s))", (run_id, 10 - i))
            conn.execute("insert into groundkit.run_searches (run_id, search_no, reader_sub, query, mode, params,"
                         " log_marker, snapshot, hits) values (%s, 1, 't2', 'kiln', 'bm25', '{}', 0,"
                         " pg_current_snapshot(), '[]')", (run_id,))
        conn.execute("insert into groundkit.runs (run_id, kind, pruned_runs, pruned_searches, pruned_before)"
                     " values (%s, 'pruned', 3, 5, now() - interval '30 days')", (uuid.uuid4(),))
    groundkit.migrate(empty_dsn, gate=False)
    kinds = [(e["kind"], e["run_id"]) for e in _entries(empty_dsn)]
    assert kinds[0][0] == "genesis" and [k for k, _ in kinds[1:]] == ["search", "run", "search", "run", "prune"]
    assert [r for _, r in kinds[1:5]] == [old[0], old[0], old[1], old[1]]
    report = _verify(empty_dsn)
    assert report.ok, report.problems
    groundkit.migrate(empty_dsn, gate=False)  # once: a second migrate adopts nothing again
    assert len(_entries(empty_dsn)) == 6
