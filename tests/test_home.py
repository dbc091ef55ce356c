"""Home v1: groundkit.home (latest and top) and groundkit.record_engagement, on a real
PostgreSQL, through the Python client and through SQL."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from groundkit import Groundkit, InvalidArgument, UnknownContentType, UnknownObject
from groundkit.models import EngagementKind

Raw = psycopg.Connection[tuple[Any, ...]]


def ids(gk: Groundkit, reader: str, mode: str = "latest", **kw: Any) -> list[str]:
    return [item.object_id for item in gk.home(reader, mode, **kw)]  # type: ignore[arg-type]


@pytest.fixture
def world(community: Groundkit) -> Groundkit:
    """Objects written in this order (so newest last): one per visibility rule."""
    gk = community
    gk.put_object("pub", 1, "board_post", "open", "T0", "Fair", "a fair for everyone")
    gk.put_object("t1post", 1, "board_post", "open", "T1", "Plans", "plans, tier one")
    gk.put_object("t2post", 1, "course_section", "open", "T2", "Course", "techniques")
    gk.put_object("memspace", 1, "board_post", "members", "T0", "Board", "members board")
    gk.put_object("vaultpost", 1, "board_post", "vault", "T0", "Vault", "private notes")
    gk.put_object("note", 1, "member_note", "notes", "T0", "Diary", "my own diary",
                  owner_sub="t1", owner_only=True)
    gk.put_object("event", 1, "event", "notes", "T0", "Supper", "supper on friday")
    return gk


# -- latest ------------------------------------------------------------------------------------


def test_latest_is_the_visible_objects_newest_first(world: Groundkit) -> None:
    assert ids(world, "t0") == ["event", "pub"]
    assert ids(world, "t1") == ["event", "note", "memspace", "t1post", "pub"]
    assert ids(world, "t2") == ["event", "vaultpost", "memspace", "t2post", "t1post", "pub"]


def test_latest_is_one_row_per_object_at_its_current_version(world: Groundkit) -> None:
    world.put_object("pub", 2, "board_post", "open", "T0", "Fair, moved", "a fair for everyone, moved")
    items = world.home("t0")
    assert [(i.object_id, i.version, i.title) for i in items] == [("pub", 2, "Fair, moved"), ("event", 1, "Supper")]
    assert items[0].updated_at > items[1].updated_at
    assert all(i.score is None for i in items)


def test_latest_filters_and_k(world: Groundkit) -> None:
    assert ids(world, "t2", k=2) == ["event", "vaultpost"]
    assert ids(world, "t2", space_ids=["open", "members"]) == ["memspace", "t2post", "t1post", "pub"]
    assert ids(world, "t2", space_ids=["open"], k=2) == ["t2post", "t1post"]
    assert ids(world, "t2", content_types=["board_post"]) == ["vaultpost", "memspace", "t1post", "pub"]
    assert ids(world, "t2", space_ids=["open"], content_types=["course_section"]) == ["t2post"]
    assert ids(world, "t2", space_ids=["nowhere"]) == []


@pytest.mark.parametrize("reader", ["nobody", "", "pending2", "suspended3", "revoked3"])
def test_a_reader_who_is_not_one_active_member_gets_nothing(world: Groundkit, reader: str) -> None:
    assert ids(world, reader) == []
    assert ids(world, reader, "top") == []


# -- the live predicate: the next statement -----------------------------------------------------


@pytest.mark.parametrize("mode", ["latest", "top"])
def test_downgrade_private_board_and_delete_remove_at_the_next_call(world: Groundkit, mode: str) -> None:
    for oid in ("t2post", "memspace", "event", "vaultpost"):
        world.record_engagement(oid, "t2", "view")
    assert {"t2post", "memspace", "event", "vaultpost"} <= set(ids(world, "t2", mode))
    world.put_member("t2", "T1")  # downgrade: the T2 object goes
    assert "t2post" not in ids(world, "t2", mode)
    world.put_space("members", "T1", private=True)  # a board made private, no grant
    assert "memspace" not in ids(world, "t2", mode)
    world.delete_object("event", 2)
    assert "event" not in ids(world, "t2", mode)
    world.revoke_space("vault", "t2")
    assert "vaultpost" not in ids(world, "t2", mode)


def test_a_retier_downgrade_of_the_object_removes_it(world: Groundkit) -> None:
    world.record_engagement("pub", "t0", "click")
    world.retier_object("pub", 2, "T1")
    assert "pub" not in ids(world, "t0") and "pub" not in ids(world, "t0", "top")
    assert "pub" in ids(world, "t1", "top")


# -- top ---------------------------------------------------------------------------------------


def test_top_ranks_by_engagement_and_ties_by_recency(world: Groundkit) -> None:
    for _ in range(3):
        world.record_engagement("pub", "t1", "view")  # 3 x 1, the oldest object
    world.record_engagement("t1post", "t1", "reaction")  # 3
    world.record_engagement("memspace", "t1", "click")  # 2
    world.record_engagement("memspace", "t1", "dwell_ms", value=30_000)  # + 1 = 3, the newest of the three
    world.record_engagement("note", "t1", "dwell_ms", value=59_999)  # 1 (whole 30 s)
    world.record_engagement("event", "t1", "dwell_ms", value=29_999)  # 0: counted, scores nothing
    items = world.home("t1", "top")
    assert [(i.object_id, i.score) for i in items] == [
        ("memspace", 3.0), ("t1post", 3.0), ("pub", 3.0), ("note", 1.0), ("event", 0.0),
    ]


def test_top_counts_only_the_window(world: Groundkit, raw: Raw) -> None:
    now = datetime.now(UTC)
    world.record_engagement("pub", "t0", "reaction", at=now - timedelta(days=8))
    world.record_engagement("event", "t0", "view", at=now - timedelta(days=5))
    assert [(i.object_id, i.score) for i in world.home("t0", "top")] == [("event", 1.0), ("pub", 0.0)]
    # A longer window: "top" sums the days itself until an event moves engagement_window ...
    raw.execute("update groundkit.config set home_top_days = 30")
    assert [(i.object_id, i.score) for i in world.home("t0", "top")] == [("pub", 3.0), ("event", 1.0)]
    world.record_engagement("t1post", "t1", "view")
    assert window_is_the_sum_of_its_days(raw)
    assert [(i.object_id, i.score) for i in world.home("t0", "top")] == [("pub", 3.0), ("event", 1.0)]
    # ... and a shorter one, both ways.
    raw.execute("update groundkit.config set home_top_days = 1")
    assert [(i.object_id, i.score) for i in world.home("t0", "top")] == [("event", 0.0), ("pub", 0.0)]
    world.record_engagement("t1post", "t1", "view")
    assert window_is_the_sum_of_its_days(raw)
    assert [(i.object_id, i.score) for i in world.home("t0", "top")] == [("event", 0.0), ("pub", 0.0)]
    assert [(i.object_id, i.score) for i in world.home("t1", "top", k=2)] == [("t1post", 2.0), ("event", 0.0)]


def window_is_the_sum_of_its_days(raw: Raw) -> bool:
    """engagement_window holds, per object, the score of its days since engagement_window_since."""
    window = raw.execute("select object_id, score from groundkit.engagement_window order by 1").fetchall()
    summed = raw.execute(
        "select e.object_id, sum(e.score) from groundkit.engagement_daily e, groundkit.engagement_window_since s"
        " where e.day >= s.since group by 1 having sum(e.score) > 0 order by 1").fetchall()
    return window == summed


def test_the_window_stays_the_sum_of_its_days(world: Groundkit, raw: Raw) -> None:
    rng = random.Random(41)
    now = datetime.now(UTC)
    for step in range(120):
        if step % 40 == 39:
            raw.execute("update groundkit.config set home_top_days = %s", (rng.choice((1, 3, 7, 30)),))
        kind: EngagementKind = rng.choice(("view", "click", "reaction", "dwell_ms"))
        world.record_engagement(rng.choice(("pub", "t1post", "memspace", "event")), "t1", kind,
                                at=now - timedelta(days=rng.uniform(0, 12)),
                                value=rng.randrange(0, 900_000) if kind == "dwell_ms" else None)
        assert window_is_the_sum_of_its_days(raw)
    window_path = [(i.object_id, i.score) for i in world.home("t1", "top")]
    assert any(score for _, score in window_path)
    # engagement_window not at today's window: "top" sums the days itself, to the same answer
    raw.execute("update groundkit.engagement_window_since set since = since - 1")
    assert [(i.object_id, i.score) for i in world.home("t1", "top")] == window_path


def test_top_k_is_the_best_k_among_the_visible(world: Groundkit) -> None:
    for oid, n in (("vaultpost", 9), ("t2post", 8), ("pub", 1), ("event", 2)):
        for _ in range(n):
            world.record_engagement(oid, "t2", "view")
    assert ids(world, "t2", "top", k=2) == ["vaultpost", "t2post"]
    assert ids(world, "t1", "top", k=2) == ["event", "pub"]  # the two invisible best are skipped
    assert ids(world, "t2", "top", k=2, content_types=["board_post"]) == ["vaultpost", "pub"]
    # filters the reader can see nothing under: nothing, whatever the engagement
    assert ids(world, "t1", "top", space_ids=["vault"]) == []
    assert ids(world, "t0", "top", content_types=["course_section"]) == []
    assert ids(world, "t2", "top", space_ids=["open"], content_types=["course_section"]) == ["t2post"]


# -- record_engagement -------------------------------------------------------------------------


def _sqlstate_and_message(raw: Raw, object_id: str, member: str) -> tuple[str | None, str]:
    with pytest.raises(psycopg.Error) as err:
        raw.execute("select groundkit.record_engagement(%s, %s, 'view')", (object_id, member))
    return err.value.sqlstate, err.value.diag.message_primary or ""


@pytest.mark.parametrize("object_id,member", [
    ("t2post", "t1"),  # a tier too low
    ("vaultpost", "t1"),  # a private space without a grant
    ("note", "t2"),  # someone else's owner-only note
    ("pub", "suspended3"),  # a member who is not active
    ("pub", "nobody"),  # no member at all
])
def test_engagement_with_an_invisible_object_is_refused_as_a_missing_one(
        world: Groundkit, raw: Raw, object_id: str, member: str) -> None:
    missing = _sqlstate_and_message(raw, object_id + "-missing", "t3")
    refused = _sqlstate_and_message(raw, object_id, member)
    assert missing[0] == refused[0] == "GK009"
    assert refused[1] == missing[1].replace("-missing", "")
    with pytest.raises(UnknownObject):
        world.record_engagement(object_id, member, "view")
    assert raw.execute("select count(*) from groundkit.engagement_daily").fetchone() == (0,)


def test_engagement_with_a_deleted_object_is_refused(world: Groundkit, raw: Raw) -> None:
    world.delete_object("pub", 2)
    with pytest.raises(UnknownObject, match="unknown object 'pub'"):
        world.record_engagement("pub", "t0", "view")
    assert raw.execute("select count(*) from groundkit.engagement_daily").fetchone() == (0,)


def test_engagement_counts_per_object_and_day(world: Groundkit, raw: Raw) -> None:
    world.record_engagement("pub", "t0", "view")
    world.record_engagement("pub", "t1", "view")
    world.record_engagement("pub", "t1", "click")
    world.record_engagement("pub", "t1", "dwell_ms", value=3_600_000)  # ten minutes score: 20
    world.record_engagement("pub", "t1", "reaction", at=datetime.now(UTC) - timedelta(days=2))
    rows = raw.execute("select views, clicks, reactions, dwell_ms, score from groundkit.engagement_daily"
                       " where object_id = 'pub' order by day").fetchall()
    assert rows == [(0, 0, 1, 0, 3), (2, 1, 0, 3_600_000, 24)]
    assert window_is_the_sum_of_its_days(raw)


@pytest.mark.parametrize("kw,err", [
    ({"kind": "like"}, InvalidArgument),
    ({"kind": "dwell_ms"}, InvalidArgument),
    ({"kind": "dwell_ms", "value": -1}, InvalidArgument),
    ({"kind": "dwell_ms", "value": 86_400_001}, InvalidArgument),
    ({"kind": "view", "value": 5}, InvalidArgument),
    ({"kind": "view", "at": datetime.now(UTC) + timedelta(hours=1)}, InvalidArgument),
    ({"kind": "view", "at": datetime(2026, 1, 1)}, InvalidArgument),  # naive
])
def test_bad_engagement_is_a_typed_error_and_counts_nothing(
        world: Groundkit, raw: Raw, kw: dict[str, Any], err: type[Exception]) -> None:
    with pytest.raises(err):
        world.record_engagement("pub", "t0", **kw)
    assert raw.execute("select count(*) from groundkit.engagement_daily").fetchone() == (0,)


@pytest.mark.parametrize("kw,err", [
    ({"mode": "best"}, InvalidArgument),
    ({"k": 0}, InvalidArgument),
    ({"k": 201}, InvalidArgument),
    ({"content_types": ["tweet"]}, UnknownContentType),
    ({"space_ids": "open"}, InvalidArgument),
])
def test_bad_home_arguments_are_typed_errors(world: Groundkit, kw: dict[str, Any], err: type[Exception]) -> None:
    with pytest.raises(err):
        world.home("t0", **kw)


@pytest.mark.parametrize("params,state", [
    (("t0", "best", 20, None), "GK005"),
    (("t0", "latest", 0, None), "GK005"),
    (("t0", "top", 20, ["tweet"]), "GK004"),
])
def test_bad_home_arguments_in_sql(world: Groundkit, raw: Raw, params: tuple[Any, ...], state: str) -> None:
    with pytest.raises(psycopg.Error) as err:
        raw.execute("select * from groundkit.home(%s, %s, %s, null, %s::text[])", params)
    assert err.value.sqlstate == state


def test_cli_home_json(world: Groundkit, dsn: str) -> None:
    from typer.testing import CliRunner

    from groundkit.cli import app

    world.record_engagement("pub", "t1", "click")
    result = CliRunner().invoke(app, ["home", "--reader", "t1", "--mode", "top", "-k", "2", "--json", "--dsn", dsn])
    assert result.exit_code == 0, result.output
    items = [json.loads(line) for line in result.output.splitlines()]
    assert [(i["object_id"], i["score"]) for i in items] == [("pub", 2.0), ("event", 0.0)]
    result = CliRunner().invoke(app, ["home", "--reader", "t1", "--dsn", dsn])
    assert result.exit_code == 0 and "5 object(s), latest, as t1" in result.output
    result = CliRunner().invoke(app, ["home", "--reader", "t1", "-k", "0", "--dsn", dsn])
    assert result.exit_code == 1 and "k must be between 1 and 200" in result.output


@pytest.mark.parametrize("cap", ["1", "2", "3", "100"])
def test_filtered_top_is_the_same_whether_the_walk_settles_it_or_not(world: Groundkit, dsn: str, cap: str) -> None:
    """Under filters, top walks the window's best rows first (groundkit.home_walk_cap of them) and
    falls back to _home_top when that does not settle the answer: the same answer either way."""
    for oid, n in (("vaultpost", 5), ("t2post", 4), ("memspace", 4), ("pub", 2), ("event", 1), ("t1post", 3)):
        for _ in range(n):
            world.record_engagement(oid, "t2", "view")
    filters: list[dict[str, Any]] = [
        {"space_ids": ["open"]}, {"content_types": ["board_post"]}, {"space_ids": ["open", "members"], "k": 2},
        {"content_types": ["event", "course_section"], "k": 1}, {"space_ids": ["vault"]},
    ]
    want = {i: ids(world, "t2", "top", **f) for i, f in enumerate(filters)}
    assert want[0] == ["t2post", "t1post", "pub"] and want[2] == ["memspace", "t2post"]
    with Groundkit.connect(dsn) as capped:
        capped.conn.execute(f"set groundkit.home_walk_cap = {int(cap)}")  # an integer, not interpolated input
        for i, f in enumerate(filters):
            assert ids(capped, "t2", "top", **f) == want[i], f
