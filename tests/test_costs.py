"""Cost per flow: the price table, metered calls (groundkit.record_call, metering.meter) and
the spend (groundkit.cost_summary, ``groundkit costs``), on a real PostgreSQL."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import psycopg
import pytest
from psycopg.rows import dict_row
from typer.testing import CliRunner

from groundkit.cli import app
from groundkit.cli.costs import parse_since
from groundkit.client import Groundkit
from groundkit.config import Settings
from groundkit.errors import ConfigError, InvalidArgument, InvariantViolation, UnknownFlow, from_psycopg
from groundkit.gate import roles
from groundkit.metering import cost_summary, meter
from groundkit.prices import PriceTable, parse_price_table

PRICES = parse_price_table("""
[models."m-1"]
input_per_1k = 0.003
output_per_1k = 0.015
currency = "USD"

[models."emb-1"]
input_per_1k = 0.0001
output_per_1k = 0
currency = "EUR"
""")

runner = CliRunner()


def calls(gk: Groundkit) -> int:
    return int(gk.conn.execute("select count(*) as n from groundkit.calls").fetchone()["n"])  # type: ignore[index]


def run_sql(gk: Groundkit, statement: str) -> list[dict[str, object]]:
    """``statement`` on gk's connection, database errors mapped to groundkit's classes."""
    try:
        cur = gk.conn.execute(statement)
        return cur.fetchall() if cur.description else []
    except psycopg.Error as exc:
        raise from_psycopg(exc) from exc


def write_prices(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "prices.toml"
    path.write_text(text, encoding="utf-8")
    return path


# --- the price table ------------------------------------------------------------------------


def test_price_table_is_validated_at_startup(tmp_path: Path) -> None:
    good = write_prices(tmp_path, '[models.m]\ninput_per_1k = 0.5\noutput_per_1k = 1\ncurrency = "USD"\n')
    table = Settings.from_env({"GROUNDKIT_PRICES": str(good)}).price_table()
    assert table.price("m") is not None and table.price("m").input_per_1k == Decimal("0.5")  # type: ignore[union-attr]


@pytest.mark.parametrize("text", [
    '[models.m]\ninput_per_1k = 0.5\noutput_per_1k = 1\ncurrency = "USD"\nbatch = 1\n',  # unknown key
    '[models.m]\ninput_per_1k = 0.5\noutput_per_1k = 1\ncurrency = "USD"\n[extra]\n',  # unknown table
    '[models.m]\ninput_per_1k = -0.5\noutput_per_1k = 1\ncurrency = "USD"\n',  # negative price
    '[models.m]\ninput_per_1k = 0.5\noutput_per_1k = 1\ncurrency = "usd"\n',  # not a currency code
    '[models.m]\ninput_per_1k = nan\noutput_per_1k = 1\ncurrency = "USD"\n',
    '[models.m]\ninput_per_1k = 0.5\ncurrency = "USD"\n',  # a price missing
    "[models.m\n",  # not TOML
])
def test_a_bad_price_table_fails_at_startup(tmp_path: Path, text: str) -> None:
    path = write_prices(tmp_path, text)
    with pytest.raises(ConfigError):
        Settings.from_env({"GROUNDKIT_PRICES": str(path)})


def test_a_negative_price_stops_the_cli_before_any_command(tmp_path: Path, dsn: str) -> None:
    path = write_prices(tmp_path, '[models.m]\ninput_per_1k = -1\noutput_per_1k = 1\ncurrency = "USD"\n')
    result = runner.invoke(app, ["costs", "--dsn", dsn], env={"GROUNDKIT_PRICES": str(path)})
    assert result.exit_code == 2 and "input_per_1k" in result.stderr


def test_a_missing_price_file_fails_at_startup(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        Settings.from_env({"GROUNDKIT_PRICES": str(tmp_path / "nope.toml")})


# --- metered calls ---------------------------------------------------------------------------


def test_a_priced_call_is_recorded_with_its_exact_cost(gk: Groundkit) -> None:
    run_id = uuid.uuid4()
    got = meter(gk, flow="tutor", model="m-1", kind="llm", tokens_in=1800, tokens_out=240,
                run_id=run_id, reader="alice", prices=PRICES)
    assert (got.cost, got.currency) == (Decimal("0.009"), "USD")  # 1.8 * 0.003 + 0.24 * 0.015
    row = gk.conn.execute("select * from groundkit.calls where call_id = %s", (got.call_id,)).fetchone()
    assert row is not None
    assert (row["run_id"], row["flow"], row["reader"], row["model"], row["kind"], row["tokens_in"],
            row["tokens_out"], row["cost"], row["currency"]) == (
        run_id, "tutor", "alice", "m-1", "llm", 1800, 240, Decimal("0.009"), "USD")


def test_a_call_for_a_model_without_a_price_has_a_null_cost_never_zero(gk: Groundkit) -> None:
    got = meter(gk, flow="home", model="unknown-model", kind="embedding", tokens_in=500, tokens_out=0,
                prices=PRICES)
    assert got.cost is None and got.currency is None
    [row] = cost_summary(gk, by="model")
    assert (row.key, row.cost, row.unpriced, row.calls) == ("unknown-model", None, 1, 1)


def test_without_a_price_table_every_call_is_unpriced(gk: Groundkit, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GROUNDKIT_PRICES", raising=False)
    assert meter(gk, flow="home", model="m-1", kind="llm", tokens_in=1, tokens_out=1).cost is None


@pytest.mark.parametrize(("tokens_in", "tokens_out"), [(-1, 0), (0, -1), (-5, -5)])
def test_negative_tokens_are_refused_and_nothing_is_recorded(gk: Groundkit, tokens_in: int, tokens_out: int) -> None:
    with pytest.raises(InvalidArgument) as err:
        meter(gk, flow="tutor", model="m-1", kind="llm", tokens_in=tokens_in, tokens_out=tokens_out, prices=PRICES)
    assert err.value.sqlstate == "GK005"
    assert calls(gk) == 0


def test_an_unknown_flow_is_refused_and_nothing_is_recorded(gk: Groundkit) -> None:
    with pytest.raises(UnknownFlow) as err:
        meter(gk, flow="marketing", model="m-1", kind="llm", tokens_in=1, tokens_out=1, prices=PRICES)
    assert err.value.sqlstate == "GK011" and "marketing" in err.value.message
    with pytest.raises(UnknownFlow):
        run_sql(gk, "select groundkit.record_call(null, 'm', 'llm', 1, 1)")
    assert calls(gk) == 0


def test_a_configured_flow_is_accepted(gk: Groundkit) -> None:
    assert run_sql(gk, "select groundkit.add_flow('onboarding') as added") == [{"added": True}]
    assert run_sql(gk, "select groundkit.add_flow('onboarding') as added") == [{"added": False}]
    meter(gk, flow="onboarding", model="m-1", kind="llm", tokens_in=1, tokens_out=1, prices=PRICES)
    with pytest.raises(InvalidArgument):
        run_sql(gk, "select groundkit.add_flow('Bad Flow')")
    assert calls(gk) == 1


def test_the_built_in_flows(gk: Groundkit) -> None:
    for flow in ("home", "tutor", "authoring", "conversational"):
        meter(gk, flow=flow, model="m-1", kind="llm", tokens_in=1, tokens_out=1, prices=PRICES)
    assert {r.key for r in cost_summary(gk)} == {"home", "tutor", "authoring", "conversational"}


@pytest.mark.parametrize("bad", [
    "select groundkit.record_call('tutor', 'm', 'chat', 1, 1)",  # unknown kind
    "select groundkit.record_call('tutor', '', 'llm', 1, 1)",  # empty model
    "select groundkit.record_call('tutor', 'm', 'llm', 1, 1, -0.1, 'USD')",  # negative cost
    "select groundkit.record_call('tutor', 'm', 'llm', 1, 1, 0.1, null)",  # cost without currency
    "select groundkit.record_call('tutor', 'm', 'llm', 1, 1, null, 'USD')",  # currency without cost
    "select groundkit.record_call('tutor', 'm', 'llm', 1, 1, 0.1, 'dollars')",
    "select groundkit.record_call('tutor', 'm', 'llm', 1, 1, p_reader => '')",
])
def test_record_call_refuses_bad_input_with_gk005(gk: Groundkit, bad: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        run_sql(gk, bad)
    assert err.value.sqlstate == "GK005"
    assert calls(gk) == 0


def test_a_run_id_that_is_not_a_uuid_is_refused(gk: Groundkit) -> None:
    with pytest.raises(InvalidArgument):
        meter(gk, flow="tutor", model="m-1", kind="llm", tokens_in=1, tokens_out=1, run_id="run-7", prices=PRICES)
    assert calls(gk) == 0


def test_a_call_metered_inside_a_transaction_rolls_back_with_it(gk: Groundkit) -> None:
    with pytest.raises(RuntimeError), gk.conn.transaction():
        meter(gk, flow="tutor", model="m-1", kind="llm", tokens_in=1, tokens_out=1, prices=PRICES)
        raise RuntimeError("the app failed after the call")
    assert calls(gk) == 0


def test_meter_takes_a_plain_psycopg_connection(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:  # tuple rows
        got = meter(conn, flow="tutor", model="m-1", kind="llm", tokens_in=1000, tokens_out=0, prices=PRICES)
        assert got.call_id > 0 and got.cost == Decimal("0.003")


def test_the_ledger_is_append_only(gk: Groundkit) -> None:
    meter(gk, flow="tutor", model="m-1", kind="llm", tokens_in=1, tokens_out=1, prices=PRICES)
    for statement in ("update groundkit.calls set cost = 0", "delete from groundkit.calls",
                      "truncate groundkit.calls"):
        with pytest.raises(InvariantViolation):
            run_sql(gk, statement)
    assert calls(gk) == 1


# --- the spend -------------------------------------------------------------------------------


@pytest.fixture
def spent(gk: Groundkit) -> Iterator[Groundkit]:
    meter(gk, flow="tutor", model="m-1", kind="llm", tokens_in=1000, tokens_out=1000, reader="alice", prices=PRICES)
    meter(gk, flow="tutor", model="m-1", kind="llm", tokens_in=2000, tokens_out=0, reader="bob", prices=PRICES)
    meter(gk, flow="home", model="emb-1", kind="embedding", tokens_in=10000, tokens_out=0, prices=PRICES)
    meter(gk, flow="home", model="m-2", kind="llm", tokens_in=7, tokens_out=3, reader="alice", prices=PRICES)
    yield gk


def test_cost_summary_by_flow_counts_unpriced_and_keeps_currencies_apart(spent: Groundkit) -> None:
    rows = [(r.key, r.currency, r.calls, r.tokens_in, r.tokens_out, r.cost, r.unpriced)
            for r in cost_summary(spent, by="flow")]
    assert rows == [("home", "EUR", 1, 10000, 0, Decimal("0.001"), 0),
                    ("home", None, 1, 7, 3, None, 1),
                    ("tutor", "USD", 2, 3000, 1000, Decimal("0.024"), 0)]


def test_cost_summary_by_model_reader_and_day(spent: Groundkit) -> None:
    assert [(r.key, r.calls) for r in cost_summary(spent, by="model")] == [("emb-1", 1), ("m-1", 2), ("m-2", 1)]
    by_reader = {(r.key, r.currency): (r.calls, r.cost, r.unpriced) for r in cost_summary(spent, by="reader")}
    assert by_reader == {("alice", "USD"): (1, Decimal("0.018"), 0), ("alice", None): (1, None, 1),
                         ("bob", "USD"): (1, Decimal("0.006"), 0), (None, "EUR"): (1, Decimal("0.001"), 0)}
    today = datetime.now(UTC).strftime("%Y-%m-%d")
    assert {r.key for r in cost_summary(spent, by="day")} == {today}


def test_cost_summary_since_leaves_older_calls_out(spent: Groundkit) -> None:
    assert cost_summary(spent, since=datetime.now(UTC) + timedelta(minutes=1)) == []
    assert sum(r.calls for r in cost_summary(spent, since=datetime.now(UTC) - timedelta(days=7))) == 4


def test_cost_summary_refuses_an_unknown_grouping(gk: Groundkit) -> None:
    with pytest.raises(InvalidArgument):
        cost_summary(gk, by="team")  # type: ignore[arg-type]


def test_costs_cli_json_and_table(spent: Groundkit, dsn: str) -> None:
    result = runner.invoke(app, ["costs", "--since", "7d", "--by", "flow", "--json", "--dsn", dsn], env={})
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert lines[0] == {"flow": "home", "currency": "EUR", "calls": 1, "tokens_in": 10000, "tokens_out": 0,
                        "cost": "0.001", "unpriced": 0}
    assert [(row["flow"], row["unpriced"], row["cost"]) for row in lines[1:]] == [
        ("home", 1, None), ("tutor", 0, "0.024")]
    table = runner.invoke(app, ["costs", "--by", "reader", "--dsn", dsn], env={})
    assert table.exit_code == 0 and "unpriced" in table.stdout and "alice" in table.stdout
    bad = runner.invoke(app, ["costs", "--by", "team", "--dsn", dsn], env={})
    assert bad.exit_code == 1 and "GK005" in bad.stderr
    bad = runner.invoke(app, ["costs", "--since", "yesterday", "--dsn", dsn], env={})
    assert bad.exit_code == 1 and "--since" in bad.stderr


def test_parse_since() -> None:
    now = datetime(2026, 12, 3, 12, tzinfo=UTC)
    assert parse_since("7d", now) == now - timedelta(days=7)
    assert parse_since("12h", now) == now - timedelta(hours=12)
    assert parse_since("2026-11-01") == datetime(2026, 11, 1, tzinfo=UTC)
    assert parse_since(None) is None


# --- who may record and who may read -----------------------------------------------------------


def test_the_writer_records_calls_and_nobody_but_the_owner_reads_the_spend(server_dsn: str, dsn: str) -> None:
    with roles.login_roles(server_dsn, dsn) as who:
        with psycopg.connect(who.writer, autocommit=True, row_factory=dict_row) as conn:
            assert meter(conn, flow="tutor", model="m-1", kind="llm", tokens_in=1, tokens_out=1,
                         prices=PRICES).call_id > 0
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("select * from groundkit.cost_summary()")
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("select * from groundkit.calls")
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("select groundkit.add_flow('x')")
        for login in (who.reader, who.nobody):
            with psycopg.connect(login, autocommit=True) as conn:
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute("select groundkit.record_call('tutor', 'm', 'llm', 1, 1)")
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute("select * from groundkit.cost_summary()")


def test_the_price_table_model_forbids_extra_keys() -> None:
    with pytest.raises(ValueError):
        PriceTable.model_validate({"models": {}, "currency": "USD"})


def test_days_are_utc_days_whatever_the_session_time_zone(gk: Groundkit) -> None:
    run_sql(gk, "set timezone = 'America/New_York'")
    run_sql(gk, "insert into groundkit.calls (flow, model, kind, tokens_in, tokens_out, at) values"
                " ('home', 'm', 'llm', 1, 1, '2026-01-01 23:30:00-05'),"  # 04:30 UTC on the 2nd
                " ('home', 'm', 'llm', 1, 1, '2026-01-01 18:59:00-05')")  # 23:59 UTC on the 1st
    assert [(r.key, r.calls) for r in cost_summary(gk, by="day")] == [("2026-01-01", 1), ("2026-01-02", 1)]


def test_groundkit_config_add_flow(gk: Groundkit, dsn: str) -> None:
    first = runner.invoke(app, ["config", "add-flow", "onboarding", "--dsn", dsn], env={})
    again = runner.invoke(app, ["config", "add-flow", "onboarding", "--dsn", dsn], env={})
    assert (first.exit_code, again.exit_code) == (0, 0)
    assert "added" in first.stdout and "there already" in again.stdout
    meter(gk, flow="onboarding", model="m-1", kind="llm", tokens_in=1, tokens_out=1, prices=PRICES)
    bad = runner.invoke(app, ["config", "add-flow", "Bad Flow", "--dsn", dsn], env={})
    assert bad.exit_code == 1 and "GK005" in bad.stderr
