"""The production-traffic sampler: config.sample_rate, the sample tables, engagement on samples."""

from __future__ import annotations

import math
import uuid

import psycopg
import pytest
from psycopg.rows import dict_row

from groundkit import Groundkit, InvalidArgument
from groundkit.gate import roles


def _samples(gk: Groundkit) -> list[dict[str, object]]:
    return gk._fetch("select * from groundkit.search_samples order by sampled_at", {})


def _hits(gk: Groundkit, sample_id: uuid.UUID) -> list[dict[str, object]]:
    return gk._fetch("select * from groundkit.search_sample_hits where sample_id = %(s)s order by position",
                     {"s": sample_id})


@pytest.fixture
def world(community: Groundkit) -> Groundkit:
    gk = community
    gk.put_object("a", 1, "board_post", "open", "T0", "Pricing", "How to price a commission")
    gk.put_object("b", 1, "document", "members", "T1", "Pricing guide", "Pricing for members: price by the hour")
    gk.put_object("c", 1, "document", "vault", "T2", "Vault", "private pricing notes")
    return gk


def test_sample_rate_defaults_to_zero_and_records_nothing(world: Groundkit) -> None:
    assert world._scalar("select sample_rate from groundkit.config", {}) == 0
    for _ in range(20):
        world.search("t1", "pricing")
    assert world.last_sample_id is None
    assert _samples(world) == []


def test_sampled_search_records_query_mode_hits_and_tier_rank_not_the_reader(world: Groundkit) -> None:
    gk = world
    assert gk.set_sample_rate(1.0) == 1.0
    hits = gk.search("t1", "pricing", k=5)
    assert gk.last_sample_id is not None
    (sample,) = _samples(gk)
    assert sample["sample_id"] == gk.last_sample_id
    assert (sample["query"], sample["mode"], sample["k"], sample["tier_rank"]) == ("pricing", "bm25", 5, 1)
    assert "t1" not in {str(v) for v in sample.values()}  # no column holds the reader
    recorded = _hits(gk, gk.last_sample_id)
    assert [(r["object_id"], r["object_version"], r["chunk_seq"], r["score"]) for r in recorded] == [
        (h.object_id, h.object_version, h.chunk_seq, h.score) for h in hits]
    assert [r["position"] for r in recorded] == list(range(1, len(hits) + 1))


def test_sample_columns_never_name_the_reader(world: Groundkit) -> None:
    cols = {r["column_name"] for r in world._fetch(
        "select column_name from information_schema.columns where table_schema = 'groundkit'"
        " and table_name in ('search_samples', 'search_sample_hits', 'sample_engagement')", {})}
    assert not {"reader_sub", "member_sub", "reader"} & cols


def test_sampled_search_with_no_hits_and_unknown_reader(world: Groundkit) -> None:
    world.set_sample_rate(1)
    assert world.search("nobody", "pricing") == []
    (sample,) = _samples(world)
    assert sample["tier_rank"] is None
    assert _hits(world, world.last_sample_id) == []  # type: ignore[arg-type]


def test_sample_rate_is_a_fraction(world: Groundkit) -> None:
    world.set_sample_rate(0.5)
    for _ in range(200):
        world.search("t1", "pricing")
    n = len(_samples(world))
    assert 50 < n < 150  # binomial(200, 0.5): outside this about once in 10^12


@pytest.mark.parametrize("rate", [-0.1, 1.5, math.nan, math.inf])
def test_sample_rate_out_of_range_is_refused(world: Groundkit, rate: float) -> None:
    with pytest.raises(InvalidArgument):
        world.set_sample_rate(rate)
    assert world._scalar("select sample_rate from groundkit.config", {}) == 0
    with pytest.raises(psycopg.errors.CheckViolation):
        world.conn.execute("update groundkit.config set sample_rate = 2")


def test_sample_rolls_back_with_the_callers_transaction(world: Groundkit) -> None:
    world.set_sample_rate(1)
    with world.conn.transaction(force_rollback=True):
        world.search("t1", "pricing")
        assert len(_samples(world)) == 1
    assert _samples(world) == []


def test_read_only_transaction_searches_without_a_sample(world: Groundkit) -> None:
    world.set_sample_rate(1)
    with world.conn.transaction():
        world.conn.execute("set transaction read only")
        hits = world.search("t1", "pricing")
        # the transaction is still usable after the refused sample (a savepoint took it)
        assert world._scalar("select 1 as one", {}) == 1
    assert hits and world.last_sample_id is None
    assert _samples(world) == []


def test_engagement_click_and_dwell_on_a_sampled_hit(world: Groundkit) -> None:
    world.set_sample_rate(1)
    hits = world.search("t1", "pricing")
    sid = world.last_sample_id
    assert sid is not None
    world.record_sample_engagement(sid, hits[0].object_id, "click")
    world.record_sample_engagement(str(sid), hits[0].object_id, "dwell_ms", 1200)
    rows = world._fetch("select object_id, kind, value from groundkit.sample_engagement order by at, kind", {})
    assert [(r["object_id"], r["kind"], r["value"]) for r in rows] == [
        (hits[0].object_id, "click", None), (hits[0].object_id, "dwell_ms", 1200.0)]


def test_engagement_outside_the_retrieved_set_is_refused(world: Groundkit) -> None:
    world.set_sample_rate(1)
    hits = world.search("t1", "pricing")
    assert "c" not in {h.object_id for h in hits}  # the vault's object: not in t1's set
    sid = world.last_sample_id
    assert sid is not None
    with pytest.raises(InvalidArgument, match="not among the hits") as raised:
        world.record_sample_engagement(sid, "c", "click")
    assert raised.value.sqlstate == "GK005"
    assert world._fetch("select * from groundkit.sample_engagement", {}) == []


@pytest.mark.parametrize(("sample", "kind", "value", "message"), [
    ("unknown", "click", None, "no sample"),
    ("known", "like", None, "kind must be"),
    ("known", "click", 3.0, "takes no value"),
    ("known", "dwell_ms", None, "needs a finite value"),
    ("known", "dwell_ms", -1.0, "needs a finite value"),
    ("known", "dwell_ms", math.inf, "needs a finite value"),
])
def test_bad_engagement_is_gk005_and_records_nothing(world: Groundkit, sample: str, kind: str,
                                                     value: float | None, message: str) -> None:
    world.set_sample_rate(1)
    world.search("t1", "pricing")
    sid = world.last_sample_id if sample == "known" else uuid.uuid4()
    assert sid is not None
    with pytest.raises(InvalidArgument, match=message):
        world.record_sample_engagement(sid, "a", kind, value)
    assert world._fetch("select * from groundkit.sample_engagement", {}) == []


def test_engagement_sample_id_that_is_not_a_uuid(world: Groundkit) -> None:
    with pytest.raises(InvalidArgument, match="UUID"):
        world.record_sample_engagement("not-a-uuid", "a", "click")


def test_reader_role_login_searches_sampled_and_records_engagement(server_dsn: str, dsn: str) -> None:
    roles._world(dsn)
    with Groundkit.connect(dsn) as owner:
        owner.set_sample_rate(1)
    with roles.login_roles(server_dsn, dsn) as who:
        with Groundkit.connect(who.reader) as reader:
            hits = reader.search("alice", "kiln")
            assert [h.object_id for h in hits] == ["p1"]
            assert reader.last_sample_id is not None
            reader.record_sample_engagement(reader.last_sample_id, "p1", "click")
        with psycopg.connect(who.reader, autocommit=True) as conn, pytest.raises(
                psycopg.errors.InsufficientPrivilege):
            conn.execute("select * from groundkit.search_samples")
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        assert conn.execute("select count(*) as n from groundkit.sample_engagement").fetchone() == {"n": 1}
