"""API tokens: shown once, stored as a hash, revoked per member, resolved only while live."""

from __future__ import annotations

from datetime import timedelta

import psycopg
import pytest
from typer.testing import CliRunner

from groundkit import Groundkit, tokens
from groundkit.cli import app
from groundkit.errors import InvalidArgument


def test_a_token_resolves_to_its_member_until_revoked(gk: Groundkit) -> None:
    gk.put_member("ana", "T1")
    first, second = tokens.create_token(gk, "ana"), tokens.create_token(gk, "ana", timedelta(days=30))
    other = tokens.create_token(gk, "bo")
    assert first != second and first.startswith("gk_")
    assert tokens.token_member(gk, first) == tokens.token_member(gk, second) == "ana"
    assert tokens.token_member(gk, "gk_" + "x" * 43) is None
    assert tokens.token_member(gk, first[:-1]) is None
    assert tokens.revoke_tokens(gk, "ana") == 2
    assert tokens.token_member(gk, first) is None and tokens.token_member(gk, second) is None
    assert tokens.token_member(gk, other) == "bo"  # only that member's tokens
    assert tokens.revoke_tokens(gk, "ana") == 0


def test_only_a_hash_is_stored(gk: Groundkit, raw: psycopg.Connection[tuple[object, ...]]) -> None:
    token = tokens.create_token(gk, "ana")
    rows = raw.execute("select t::text from groundkit.api_tokens t").fetchall()
    assert len(rows) == 1 and token not in str(rows[0]) and token[3:] not in str(rows[0])
    assert raw.execute("select token_hash = %s from groundkit.api_tokens", (tokens.token_hash(token),)).fetchone() == (
        True,)


def test_an_expired_token_resolves_to_nobody(gk: Groundkit, raw: psycopg.Connection[tuple[object, ...]]) -> None:
    token = tokens.create_token(gk, "ana", timedelta(minutes=5))
    assert tokens.token_member(gk, token) == "ana"
    raw.execute("update groundkit.api_tokens set expires_at = now() - interval '1 second'")
    assert tokens.token_member(gk, token) is None


@pytest.mark.parametrize("text", ["30", "0d", "-1d", "3w", "d", ""])
def test_bad_durations_are_refused(text: str) -> None:
    with pytest.raises(InvalidArgument):
        tokens.parse_duration(text)
    assert tokens.parse_duration("30d") == timedelta(days=30)
    assert tokens.parse_duration("90m") == timedelta(minutes=90)


def test_cli_prints_the_token_last_and_revokes(dsn: str) -> None:
    runner = CliRunner()
    created = runner.invoke(app, ["tokens", "create", "ana", "--expires", "30d", "--dsn", dsn])
    assert created.exit_code == 0, created.output
    assert "ana is not an active member now" in created.stderr
    with Groundkit.connect(dsn) as gk:
        gk.put_member("ana", "T1")
    again = runner.invoke(app, ["tokens", "create", "ana", "--dsn", dsn])
    assert again.exit_code == 0 and "not an active member" not in again.stderr
    token = created.stdout.strip().splitlines()[-1]
    with Groundkit.connect(dsn) as gk:
        assert tokens.token_member(gk, token) == "ana"
    revoked = runner.invoke(app, ["tokens", "revoke", "ana", "--dsn", dsn])
    assert revoked.exit_code == 0 and "revoked 2 token(s) of ana" in revoked.stdout
    with Groundkit.connect(dsn) as gk:
        assert tokens.token_member(gk, token) is None
    bad = runner.invoke(app, ["tokens", "create", "ana", "--expires", "soon", "--dsn", dsn])
    assert bad.exit_code == 1 and "GK005" in bad.stderr
