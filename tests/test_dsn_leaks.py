"""A DSN's password never reaches the screen (issue 39, item 9).

Every CLI command that takes a DSN is run against a catalogue of malformed (and a few merely
unreachable) DSNs, given by ``--dsn`` and by ``GROUNDKIT_DSN``: the password appears on neither
stdout nor stderr, the run ends in exactly one ``error`` line with a non-zero exit code and no
traceback. The commands are enumerated from the typer app, so a new command fails here until it
is given its arguments below. The library calls behind them keep the password out of the
exception chain (``__cause__``, ``__context__``) too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from groundkit.cli import app
from groundkit.client import connect
from groundkit.dsn import parse
from groundkit.errors import ConfigError
from groundkit.gate.bad_dsns import MALFORMED_DSNS, leaks, problems_of

runner = CliRunner()

# The gate's catalogue (each password made of SECRETS' pieces); the last two are well formed.
MALFORMED = tuple(dsn for _label, dsn in MALFORMED_DSNS)

# Commands that do not connect to the configured DSN: with GROUNDKIT_DSN set they must not
# print it either. `db url` starts the embedded server, which the test of item 12 covers.
NO_DSN: dict[str, list[str]] = {"db status": [], "db stop": []}
NOT_RUN = {"db url", "audit keygen", "audit verify-bundle"}  # (no database: keys and bundles are files)
# The servers run here only with the DSNs libpq cannot read, which must stop them at once (a
# readable DSN's database that is down stops them too, at the gate's check; started with
# --allow-ungated they start and answer 503: docs/governance.md).
SERVERS: dict[str, list[str]] = {"serve mcp": ["--reader", "m1"], "serve http": ["--port", "18765"],
                               "serve console": ["--port", "18766"]}


def _unreadable(dsn: str) -> bool:
    try:
        parse(dsn)
    except ConfigError:
        return True
    return False


def _dataset(root: Path) -> Path:
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text(json.dumps({"_id": "d1", "title": "t", "text": "kiln"}) + "\n")
    (root / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "kiln"}) + "\n")
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    return root


def _objects(path: Path) -> Path:
    path.write_text(json.dumps({"object_id": "o1", "version": 1, "content_type": "board_post", "space_id": "s",
                                "tier_visibility": "T0", "title": "t", "body": "kiln"}) + "\n")
    return path


def _labels(path: Path) -> Path:
    path.write_text(json.dumps({"sample_id": "s1", "query": "kiln", "tier_rank": 0,
                                "candidates": [{"object_id": "o1", "relevance": 1}]}) + "\n")
    return path


def _policy(path: Path) -> Path:
    from groundkit.outbound.policy import default_policy

    path.write_text(json.dumps(default_policy().document()))
    return path


RUN_ID = "3f0c7c2e-8d5b-4c61-9a4e-0d6f5b1e2a11"


@pytest.fixture(scope="module")
def invocations(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[list[str]]]:
    """Each command that takes a DSN: the argument lists to run it with (without the DSN)."""
    tmp = tmp_path_factory.mktemp("dsn")
    return {
        "migrate": [[], ["--list"]],
        "put-member": [["m1", "T1"]],
        "put-space": [["s1"]],
        "ingest": [[str(_objects(tmp / "objects.jsonl"))]],
        "rebuild": [[]],
        "analyze": [[]],
        "status": [[], ["--json"]],
        "merge": [[]],
        "worker": [["--once"]],
        "search": [["kiln", "--as", "m1"]],
        "demo": [[]],
        "eval quality": [["--dataset", str(_dataset(tmp / "tiny")), "--arm", "groundkit"]],
        "eval gate": [[]],
        "config set-bm25": [["1.2", "0.5"]],
        "config set-chunk-sizes": [["document", "--chars", "1200"]],
        "config set-search-mode": [["transcript", "hybrid", "--dense-weight", "2"]],
        "config search-modes": [[], ["--json"]],
        "eval propose": [["--labels", str(_labels(tmp / "labels.jsonl"))]],
        "cite": [["o1", "1", "0", "--as", "m1"]],
        "home": [["--reader", "m1"]],
        "tokens create": [["m1"]],
        "tokens revoke": [["m1"]],
        "costs": [[], ["--json"]],
        "config add-flow": [["support"]],
        "config set-sample-rate": [["0.1"]],
        "config set-sample-limit": [["100", "--per", "1h"]],
        "eval export-samples": [["--out", str(tmp / "samples.jsonl")]],
        "replay": [[RUN_ID], [RUN_ID, "--json"]],
        "runs list": [[], ["--json"]],
        "runs diff": [[RUN_ID, RUN_ID]],
        "runs prune": [["--before", "2026-01-01"]],
        "embed": [[], ["--model", "m1", "--json"]],
        "models add": [["m1", "--provider", "openai", "--dimension", "8", "--url", "http://127.0.0.1:1",
                        "--remote-model", "x"]],
        "models list": [[]],
        "reindex": [["--model", "m1"]],
        "shadow-compare": [["--model", "m1", "--as", "m1", "--sampled", "5"]],
        "cutover": [["--model", "m1"]],
        "outbound show": [[], ["--json"]],
        "outbound history": [[]],
        "outbound set": [[str(_policy(tmp / "policy.json")), "--reason", "r"]],
        "outbound allow": [["cloud", "--max-tier", "T1", "--reason", "r"]],
        "outbound close": [["cloud", "--reason", "r"]],
        "outbound scrub": [["cloud", "email", "--reason", "r"]],
        "outbound private-origin add": [["http://10.0.0.5:11434", "--reason", "r"]],
        "outbound private-origin remove": [["http://10.0.0.5:11434", "--reason", "r"]],
        "outbound decisions": [[], ["--json"]],
        "audit checkpoint": [["--key", str(_key(tmp / "key.pem"))]],
        "audit verify": [[]],
        "audit ledger": [[]],
        "runs export": [[RUN_ID, "--bundle", str(tmp / "run.json"), "--key", str(_key(tmp / "key2.pem"))]],
        "dense enable": [[], ["--now", "--json"]],
        "explain": [["--reader", "m1", "--object", "o1"], ["--reader", "m1", "--object", "o1", "--query", "kiln"]],
    }


def _key(path: Path) -> Path:
    from groundkit.audit import generate_key

    path.write_bytes(generate_key()[0])
    return path


def _commands(group: typer.Typer, prefix: str = "") -> list[str]:
    names = []
    for info in group.registered_commands:
        assert info.callback is not None
        names.append(prefix + (info.name or info.callback.__name__.replace("_", "-")))
    for sub in group.registered_groups:
        assert sub.typer_instance is not None
        names += _commands(sub.typer_instance, f"{prefix}{sub.name} ")
    return names


def test_every_command_is_in_the_catalogue(invocations: dict[str, list[list[str]]]) -> None:
    assert sorted(_commands(app)) == sorted([*invocations, *NO_DSN, *NOT_RUN, *SERVERS])


def _check(result: object, what: str, *, fails: bool = True) -> None:
    from typer.testing import Result

    assert isinstance(result, Result)
    shown = f"{what}\nstdout: {result.stdout}\nstderr: {result.stderr}\nexception: {result.exception!r}"
    assert not leaks(result.stdout + result.stderr), shown
    if not fails:
        return
    # no traceback: the command ended by exiting, not by an exception
    assert result.exception is None or isinstance(result.exception, SystemExit), shown
    assert result.exit_code != 0, shown
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines and lines[-1].startswith("error"), shown
    assert sum(line.startswith("error") for line in lines) == 1, shown
    assert "Traceback" not in result.stderr, shown


@pytest.mark.parametrize("dsn", MALFORMED)
def test_no_command_prints_the_password(dsn: str, invocations: dict[str, list[list[str]]],
                                        tmp_path: Path) -> None:
    env = {"GROUNDKIT_HOME": str(tmp_path / "home"), "GROUNDKIT_TEST_DSN": None, "COLUMNS": "80"}
    for name, arg_lists in invocations.items():
        for args in arg_lists:
            by_option = runner.invoke(app, [*name.split(), *args, "--dsn", dsn], env={**env, "GROUNDKIT_DSN": None})
            _check(by_option, f"groundkit {name} {' '.join(args)} --dsn {dsn!r}")
            by_env = runner.invoke(app, [*name.split(), *args], env={**env, "GROUNDKIT_DSN": dsn})
            _check(by_env, f"GROUNDKIT_DSN={dsn!r} groundkit {name} {' '.join(args)}")
    for name, args in NO_DSN.items():
        result = runner.invoke(app, [*name.split(), *args], env={**env, "GROUNDKIT_DSN": dsn})
        _check(result, f"GROUNDKIT_DSN={dsn!r} groundkit {name}", fails=False)
    if _unreadable(dsn):
        for name, args in SERVERS.items():
            result = runner.invoke(app, [*name.split(), *args, "--dsn", dsn], env={**env, "GROUNDKIT_DSN": None})
            _check(result, f"groundkit {name} {' '.join(args)} --dsn {dsn!r}")


@pytest.mark.parametrize("dsn", MALFORMED)
def test_library_errors_carry_no_password(dsn: str) -> None:
    """connect, migrate, migration_state and fresh_database raise a GroundkitError whose
    traceback and chain hold no piece of the password (the gate's bad-input section checks the
    same)."""
    assert problems_of(dsn) == []


def test_a_malformed_dsn_is_a_configuration_error() -> None:
    """Not DatabaseUnavailable: the worker would connect again forever."""
    malformed = r'^the DSN is malformed \(invalid percent-encoded token: "…"\); it is not shown\b'
    with pytest.raises(ConfigError, match=malformed):
        connect(MALFORMED[0])


def test_the_worker_stops_on_a_malformed_dsn() -> None:
    """It connects again after losing the database; a DSN that cannot be read ends it."""
    proc = _cli(["worker", "--every", "0.01", "--dsn", MALFORMED[0]])
    assert proc.returncode == 1 and proc.stderr.decode().strip().startswith("error: the DSN is malformed"), proc.stderr


def _cli(args: list[str | bytes], dsn_env: str | bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GROUNDKIT_")}
    envb = {k.encode(): v.encode() for k, v in env.items()}
    if dsn_env is not None:
        envb[b"GROUNDKIT_DSN"] = dsn_env if isinstance(dsn_env, bytes) else dsn_env.encode()
    groundkit_cli = Path(sys.executable).parent / "groundkit"
    return subprocess.run([groundkit_cli, *args], env=envb, capture_output=True, timeout=60)


@pytest.mark.parametrize(("args", "dsn_env"), [
    (["status", "--dsn", MALFORMED[0]], None),
    (["migrate"], MALFORMED[2]),
    (["search", "kiln", "--as", "m1", "--dsn", b"postgresql://postgres:Zx9SECRET\xff@127.0.0.1:1/groundkit"], None),
    (["migrate"], b"postgresql://postgres:Zx9SECRET\xff%zz@127.0.0.1:1/groundkit"),
])
def test_the_real_cli_prints_one_error_line(args: list[str | bytes], dsn_env: str | bytes | None) -> None:
    proc = _cli(args, dsn_env)
    out, err = proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace")
    assert not leaks(out + err), err
    assert proc.returncode == 1, err
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error"), err
