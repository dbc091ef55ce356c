"""Reads on a streaming standby behind the permission fence (docs/replicas.md).

A real primary and standby from the embedded PostgreSQL's binaries (groundkit.replica_pair);
skipped only where those binaries are missing. And, on the ordinary test server, every write path
that changes authority or visibility advances the authority position, and content does not.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator

import pytest

import groundkit
from groundkit import Groundkit, replica_pair, tokens
from groundkit.errors import NoFreshServer
from groundkit.models import SearchMode
from groundkit.replicas import FencedPool, connect_pool, covers
from tests.governance_helpers import certify

SECRET = "the members' price list for commissions"


@pytest.fixture(scope="module")
def pair() -> Iterator[replica_pair.ReplicaPair]:
    try:
        made = replica_pair.ReplicaPair()
    except replica_pair.Unavailable as exc:
        pytest.skip(f"no server binaries for a primary and standby: {exc}")
    with made:
        groundkit.migrate(made.primary_dsn, gate=False)
        with Groundkit.connect(made.primary_dsn) as gk:
            gk.put_member("ana", "T1")
            gk.put_space("commons", "T0")
            gk.put_object("price", 1, "board_post", "commons", "T1", "Prices", SECRET)
        made.wait_replayed()
        yield made


@pytest.fixture
def primary(pair: replica_pair.ReplicaPair) -> Iterator[Groundkit]:
    with Groundkit.connect(pair.primary_dsn) as gk:
        gk.put_member("ana", "T1")  # each test starts from ana at T1, replayed
        pair.wait_replayed()
        yield gk


@pytest.fixture
def pool(pair: replica_pair.ReplicaPair) -> Iterator[FencedPool]:
    with connect_pool(pair.primary_dsn, [pair.standby_dsn], max_lag=1.0, pool_size=2, pool_timeout=2.0) as p:
        yield p
    pair.resume_replay()


def _ids(pool: FencedPool) -> set[str]:
    return {h.object_id for h in pool.search("ana", "price list commissions")}


def _route(pool: FencedPool, route: str) -> int:
    return sum(counts.get(route, 0) for counts in pool.routes().values())


def test_a_downgrade_during_paused_replay_is_never_served_by_the_standby(
        pair: replica_pair.ReplicaPair, primary: Groundkit, pool: FencedPool) -> None:
    assert _ids(pool) == {"price"}
    assert _route(pool, "replica") == 1
    pair.pause_replay()
    primary.put_member("ana", "T0")
    # the standby has not replayed the downgrade: asked directly, it would still show the post
    with Groundkit.connect(pair.standby_dsn) as standby:
        assert {h.object_id for h in standby.search("ana", "price list commissions")} == {"price"}
    for _ in range(3):
        assert _ids(pool) == set()  # the fence sent it to the primary, which has the downgrade
    assert _route(pool, "fence") == 3
    assert _route(pool, "replica") == 1
    pair.resume_replay()
    pair.wait_replayed()
    assert _ids(pool) == set()
    assert _route(pool, "replica") == 2  # caught up: reads return to the standby


def test_new_content_during_a_pause_is_served_within_max_lag(
        pair: replica_pair.ReplicaPair, primary: Groundkit, pool: FencedPool) -> None:
    assert _ids(pool) == {"price"}
    pair.pause_replay()
    primary.put_object("news", 1, "board_post", "commons", "T0", "News", "a new price list for commissions")
    began = time.monotonic()
    seen_at = None
    while time.monotonic() - began < 5:
        if "news" in _ids(pool):
            seen_at = time.monotonic() - began
            break
        time.sleep(0.05)
    # (the bound runs from the last transaction the standby replayed; a second of slack for a loaded machine)
    assert seen_at is not None and seen_at <= pool.max_lag + 1.0
    # the paused standby, now beyond max_lag, receives no searches
    replica_before = _route(pool, "replica")
    assert _ids(pool) == {"price", "news"}
    assert _route(pool, "replica") == replica_before
    assert _route(pool, "lag") >= 1
    pair.resume_replay()
    pair.wait_replayed()
    assert _ids(pool) == {"price", "news"}
    assert _route(pool, "replica") == replica_before + 1


def test_dense_and_hybrid_searches_are_fenced_too(pair: replica_pair.ReplicaPair, primary: Groundkit,
                                                 pool: FencedPool) -> None:
    """Every search mode goes through the fence: dense and hybrid run on the standby while it is
    fresh, and go to the primary after a downgrade it has not replayed."""
    from groundkit import embedding, model_swap
    from groundkit.embedders import embedder_for
    from tests.dense_fakes import add_fake_model, fake_openai_server

    with fake_openai_server() as fake:
        add_fake_model(primary, "fake", fake)
        model = embedding.get_model(primary, "fake")
        embedding.embed_pending(primary, model, embedder_for(model))
        model_swap.cutover(primary, "fake")
        try:
            pair.wait_replayed()
            modes: tuple[SearchMode | None, ...] = ("dense", "hybrid", None)  # None: auto, now hybrid
            for mode in modes:
                assert "price" in {h.object_id for h in pool.search("ana", "price list commissions", mode=mode)}
            assert _route(pool, "replica") == 3
            pair.pause_replay()
            primary.put_member("ana", "T0")
            for mode in modes:
                assert "price" not in {h.object_id for h in pool.search("ana", "price list commissions", mode=mode)}
            assert _route(pool, "fence") == 3
        finally:  # the module's other tests search in the default mode, with no model
            pair.resume_replay()
            primary.conn.execute("update groundkit.embedding_models set active = false")
            pair.wait_replayed()


def test_with_the_primary_down_and_the_standby_paused_searches_fail_closed(
        pair: replica_pair.ReplicaPair, primary: Groundkit) -> None:
    with connect_pool(pair.primary_dsn, [pair.standby_dsn], max_lag=1.0, pool_timeout=1.0) as pool:
        assert "price" in _ids(pool)
        pair.pause_replay()
        primary.close()
        pair.stop_primary()
        try:
            with pytest.raises(NoFreshServer) as caught:
                pool.search("ana", "price list commissions")
            assert caught.value.sqlstate == "GK018"
            assert str(pair.root) not in str(caught.value)
        finally:
            pair.start_primary()
            pair.resume_replay()


def test_the_http_api_reads_behind_the_fence(pair: replica_pair.ReplicaPair, primary: Groundkit) -> None:
    """`groundkit serve http --replica DSN`: the service's reads go through the fence too."""
    httpx = pytest.importorskip("httpx")
    from groundkit.serve.background import serving
    from groundkit.serve.http import create_app
    from groundkit.serve.service import ReadService

    token = tokens.create_token(primary, "ana")
    pair.wait_replayed()
    service = ReadService(pair.primary_dsn, pool_size=2, pool_timeout=2.0, replicas=[pair.standby_dsn],
                          max_lag=1.0)
    body = {"query": "price list commissions"}
    headers = {"Authorization": f"Bearer {token}"}
    try:
        with serving(create_app(service)) as url:
            r = httpx.post(f"{url}/v1/search", json=body, headers=headers, timeout=30)
            assert {h["object_id"] for h in r.json()["hits"]} >= {"price"}
            pair.pause_replay()
            primary.put_member("ana", "T0")
            r = httpx.post(f"{url}/v1/search", json=body, headers=headers, timeout=30)
            assert r.status_code == 200 and "price" not in {h["object_id"] for h in r.json()["hits"]}
            assert service.fenced is not None
            assert sum(c.get("fence", 0) for c in service.fenced.routes().values()) == 1
    finally:
        pair.resume_replay()


def test_a_replica_that_is_down_is_skipped(pair: replica_pair.ReplicaPair, primary: Groundkit) -> None:
    gone = pair.dsn(5499)  # nothing listens there
    with connect_pool(pair.primary_dsn, [gone, pair.standby_dsn], max_lag=1.0, pool_timeout=2.0) as pool:
        for _ in range(2):
            assert "price" in _ids(pool)
        assert _route(pool, "unreachable") >= 1
        assert _route(pool, "replica") == 2


def test_the_route_counts_reach_the_primary(pair: replica_pair.ReplicaPair, primary: Groundkit) -> None:
    with connect_pool(pair.primary_dsn, [pair.standby_dsn]) as pool:
        for _ in range(3):
            pool.search("ana", "price list commissions")
        counted = pool.routes()
    rows = primary.conn.execute("select replica, route, n from groundkit.replica_routes").fetchall()
    stored = {(r["replica"], r["route"]): r["n"] for r in rows}
    for name, routes in counted.items():
        for route, n in routes.items():
            assert stored.get((name, route), 0) >= n


def test_covers_compares_every_shard() -> None:
    assert covers((1, 2, 3), (1, 2, 3))
    assert covers((2, 2, 3), (1, 2, 3))
    assert not covers((9, 9, 2), (1, 2, 3))  # one shard behind is behind, whatever the sum
    assert not covers((1, 2), (1, 2, 3))


# -- every authority write path advances the position; content does not -----------------------


def _position(gk: Groundkit) -> int:
    return int(gk._scalar("select sum(n) from groundkit.authority_position", {}))


def _world(gk: Groundkit) -> Groundkit:
    gk.put_member("bo", "T1")
    gk.put_space("board", "T0")
    gk.put_space("b2", "T0")
    gk.put_object("p", 1, "board_post", "board", "T0", "Post", "body text")
    return gk


def _move(gk: Groundkit) -> None:
    gk.put_object("p", 2, "board_post", "b2", "T0", "Post", "x")


AUTHORITY_WRITES: dict[str, Callable[[Groundkit], object]] = {
    "new member": lambda gk: gk.put_member("cy", "T0"),
    "member tier": lambda gk: gk.put_member("bo", "T0"),
    "member status": lambda gk: gk.put_member("bo", "T1", "suspended"),
    "new space": lambda gk: gk.put_space("other", "T0"),
    "space policy": lambda gk: gk.put_space("board", "T2"),
    "space made private": lambda gk: gk.put_space("board", "T0", private=True),
    "grant": lambda gk: gk.grant_space("board", "bo"),
    "re-tier": lambda gk: gk.retier_object("p", 2, "T1"),
    "new version with another tier": lambda gk: gk.put_object("p", 2, "board_post", "board", "T2", "Post", "x"),
    "move to another space": lambda gk: _move(gk),
    "delete": lambda gk: gk.delete_object("p", 2),
    "redact": lambda gk: gk.redact_object("p", 2),
    "tier rank": lambda gk: gk.set_tier_rank("T3", 7),
    "login binding": lambda gk: gk.conn.execute(
        "insert into groundkit.login_members (login, member_sub) values ('app_login', 'bo')"),
}


@pytest.mark.parametrize("path", sorted(AUTHORITY_WRITES))
def test_each_authority_write_path_advances_the_position(gk: Groundkit, path: str) -> None:
    _world(gk)
    before = _position(gk)
    AUTHORITY_WRITES[path](gk)
    assert _position(gk) > before


def test_a_revoke_advances_the_position(gk: Groundkit) -> None:
    _world(gk).grant_space("board", "bo")
    before = _position(gk)
    gk.revoke_space("board", "bo")
    assert _position(gk) > before


def test_new_content_leaves_the_position_alone(gk: Groundkit) -> None:
    _world(gk)
    before = _position(gk)
    gk.put_object("q", 1, "board_post", "board", "T0", "New", "a new post")
    gk.put_object("p", 2, "board_post", "board", "T0", "Post", "an edit, same visibility")
    assert _position(gk) == before


def test_one_transaction_advances_one_shard_once(gk: Groundkit) -> None:
    _world(gk)
    before = _position(gk)
    with gk.conn.transaction():
        gk.put_member("bo", "T0")
        gk.put_member("bo", "T2")
        gk.put_space("board", "T1")
    assert _position(gk) == before + 1


def test_status_reports_the_replica_and_check_alerts_past_the_threshold(
        pair: replica_pair.ReplicaPair, primary: Groundkit) -> None:
    from typer.testing import CliRunner

    from groundkit.cli.main import app

    with connect_pool(pair.primary_dsn, [pair.standby_dsn]) as pool:
        pool.search("ana", "price list commissions")
    certify(pair.primary_dsn)  # (status --check also alerts on an uncertified configuration)
    args = ["status", "--dsn", pair.primary_dsn, "--replica", pair.standby_dsn, "--check",
            "--replay-lag-alert-s", "0.5"]
    runner = CliRunner()
    fine = runner.invoke(app, args)
    assert fine.exit_code == 0, fine.output
    assert "replica " in fine.output and "authority replayed" in fine.output and "reads today" in fine.output
    pair.pause_replay()
    try:
        primary.put_member("ana", "T0")
        primary.put_object("late", 1, "board_post", "commons", "T0", "Late", "written while replay is paused")
        time.sleep(1.0)
        late = runner.invoke(app, [*args, "--json"])
        assert late.exit_code == 1, late.output
        body = json.loads(late.output)["replication"]
        assert body["replicas"][0]["authority_behind"] >= 1 and body["replicas"][0]["lag_seconds"] > 0.5
        assert any("behind" in a for a in body["alerts"])
    finally:
        pair.resume_replay()


def _status(dsn: str, *extra: str) -> tuple[int, str]:
    from typer.testing import CliRunner

    from groundkit.cli.main import app

    got = CliRunner().invoke(app, ["status", "--dsn", dsn, "--check", *extra])
    return got.exit_code, got.output


def test_status_check_fails_while_an_app_table_behind_reader_authority_lacks_the_fence_trigger(
        gk: Groundkit, dsn: str) -> None:
    """An app maps reader_authority over its own tables, through a view of its own: until each
    table carries the authority_changed() trigger, the fence cannot see a revocation there, and
    `status --check` fails naming the table and the statement that fixes it."""
    certify(dsn)  # a certified configuration: the gate ledger's own check passes
    assert _status(dsn)[0] == 0  # the default mapping reads groundkit.members, which has it
    raw = gk.conn
    raw.execute("create schema app")
    raw.execute("create table app.accounts (sub text primary key, plan_id int, state text)")
    raw.execute("create table app.plans (id int primary key, tier text)")
    raw.execute("create view app.memberships as select a.sub, p.tier, a.state"
                " from app.accounts a join app.plans p on p.id = a.plan_id")
    raw.execute("insert into app.plans values (1, 'T0'), (2, 'T2')")
    raw.execute("insert into app.accounts values ('ana', 2, 'active')")
    raw.execute("grant usage on schema app to groundkit_owner")
    raw.execute("grant select on app.accounts, app.plans, app.memberships to groundkit_owner")
    raw.execute("create or replace view groundkit.reader_authority as"
                " select sub as member_sub, tier, state as status from app.memberships")
    raw.commit()

    code, output = _status(dsn)
    assert code == 1, output
    assert "app.accounts" in output and "app.plans" in output and "app.memberships" not in output
    assert ("create constraint trigger accounts_authority after insert or update or delete on app.accounts"
            in " ".join(output.split()))
    code, output = _status(dsn, "--json")
    gaps = json.loads(output)["replication"]["fence_gaps"]
    assert code == 1 and [g["relation"] for g in gaps] == ["app.accounts", "app.plans"]

    # one table fixed: still failing, for the other one only
    raw.execute(gaps[0]["fix"])
    raw.commit()
    code, output = _status(dsn, "--json")
    assert code == 1 and [g["relation"] for g in json.loads(output)["replication"]["fence_gaps"]] == ["app.plans"]
    # a trigger for inserts alone does not cover a revocation (an update or a delete)
    raw.execute("create constraint trigger plans_inserts after insert on app.plans deferrable initially deferred"
                " for each row execute function groundkit.authority_changed()")
    raw.commit()
    assert _status(dsn)[0] == 1
    raw.execute(gaps[1]["fix"])
    raw.commit()
    code, output = _status(dsn)
    assert code == 0, output
    # and the statement works: a revocation in the app's table now advances the position
    before = _position(gk)
    raw.execute("update app.accounts set state = 'suspended' where sub = 'ana'")
    raw.commit()
    assert _position(gk) > before
    # a disabled trigger is no trigger
    raw.execute("alter table app.accounts disable trigger accounts_authority")
    raw.commit()
    assert _status(dsn)[0] == 1


def test_no_password_in_the_errors_of_an_unreachable_primary(pair: replica_pair.ReplicaPair) -> None:
    secret = "pw-9f3c2e1d"
    dead = f"host={pair.root} port=5498 user=postgres dbname=groundkit password={secret}"
    with pytest.raises(groundkit.DatabaseUnavailable) as opening:
        connect_pool(dead, [pair.standby_dsn], pool_timeout=0.5)
    pool = FencedPool(dead, [pair.standby_dsn], pool_timeout=0.5, open_wait=False)
    try:
        with pytest.raises(NoFreshServer) as reading:
            pool.search("ana", "price")
    finally:
        pool.close()
    for exc in (opening.value, reading.value):
        chain = [exc, exc.__cause__, exc.__context__]
        assert not any(secret in str(e) for e in chain if e is not None)
