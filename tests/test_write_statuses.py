"""Issue 2, write statuses: every write returns applied, duplicate, stale or tombstoned; only
applied writes reach the log; conflicting and malformed writes raise the documented errors."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from groundkit import (
    Groundkit,
    InvalidArgument,
    UnknownContentType,
    UnknownObject,
    UnknownSpace,
    UnknownTier,
    VersionConflict,
    WriteResult,
    WriteStatus,
)

Raw = psycopg.Connection[tuple[Any, ...]]

APPLIED, DUPLICATE, STALE, TOMBSTONED = (
    WriteStatus.APPLIED, WriteStatus.DUPLICATE, WriteStatus.STALE, WriteStatus.TOMBSTONED,
)


def put(gk: Groundkit, oid: str, version: int, body: str | None = None, tier: str = "T0",
        space: str = "open", **kw: Any) -> WriteResult:
    return gk.put_object(oid, version, "board_post", space, tier, f"title {oid}",
                         body if body is not None else f"{oid} body at version {version}", **kw)


def log(raw: Raw, oid: str | None = None) -> list[tuple[str, int, str]]:
    rows = raw.execute(
        "select object_id, version, op from groundkit.content_log"
        " where %(oid)s::text is null or object_id = %(oid)s order by seq",
        {"oid": oid},
    ).fetchall()
    return [(r[0], r[1], r[2]) for r in rows]


def current(raw: Raw, oid: str) -> tuple[int, str] | None:
    row = raw.execute("select version, state from groundkit.objects where object_id = %s", (oid,)).fetchone()
    return None if row is None else (row[0], row[1])


# -- put_object ----------------------------------------------------------------------------


def test_put_object_applied(community: Groundkit, raw: Raw) -> None:
    r = put(community, "a", 1, "the lantern festival")
    assert r == WriteResult(object_id="a", version=1, status=APPLIED)
    assert log(raw) == [("a", 1, "put")]
    assert current(raw, "a") == (1, "live")
    assert [h.object_id for h in community.search("t0", "lantern")] == ["a"]


def test_put_object_applied_for_higher_version(community: Groundkit, raw: Raw) -> None:
    put(community, "a", 1, "the lantern festival")
    assert put(community, "a", 5, "the kite festival").status is APPLIED
    assert current(raw, "a") == (5, "live")
    assert community.search("t0", "lantern") == []
    assert [(h.object_id, h.object_version) for h in community.search("t0", "kite")] == [("a", 5)]
    assert log(raw) == [("a", 1, "put"), ("a", 5, "put")]


def test_put_object_duplicate(community: Groundkit, raw: Raw) -> None:
    put(community, "a", 1, "lantern", metadata={"k": 1})
    before = community.state_checksum()
    assert put(community, "a", 1, "lantern", metadata={"k": 1}).status is DUPLICATE
    assert log(raw) == [("a", 1, "put")]
    assert community.state_checksum() == before


def test_put_object_stale(community: Groundkit, raw: Raw) -> None:
    put(community, "a", 3, "kite")
    before = community.state_checksum()
    assert put(community, "a", 2, "lantern").status is STALE
    assert put(community, "a", 1, "kite").status is STALE
    assert current(raw, "a") == (3, "live")
    assert community.search("t0", "lantern") == []
    assert log(raw) == [("a", 3, "put")]
    assert community.state_checksum() == before


def test_put_object_tombstoned(community: Groundkit, raw: Raw) -> None:
    put(community, "a", 1, "lantern")
    assert community.delete_object("a", 2).status is APPLIED
    for version in (1, 2, 3, 10**12):
        assert put(community, "a", version, "lantern").status is TOMBSTONED
    assert log(raw) == [("a", 1, "put"), ("a", 2, "delete")]
    assert current(raw, "a") == (2, "deleted")
    assert community.search("t3", "lantern") == []


def test_put_object_tombstoned_after_redaction(community: Groundkit, raw: Raw) -> None:
    put(community, "a", 1, "lantern")
    assert community.redact_object("a", 1).status is APPLIED
    assert put(community, "a", 2, "lantern").status is TOMBSTONED
    assert log(raw) == [("a", 1, "put"), ("a", 1, "redact")]


def test_same_version_different_content_raises_version_conflict(community: Groundkit, raw: Raw) -> None:
    put(community, "a", 1, "lantern")
    variants: list[dict[str, Any]] = [
        {"body": "kite"},
        {"tier": "T1"},
        {"space": "members"},
        {"metadata": {"k": 2}},
        {"owner_sub": "t1"},
    ]
    for kw in variants:
        with pytest.raises(VersionConflict) as info:
            put(community, "a", 1, **({"body": "lantern"} | kw))
        assert info.value.sqlstate == "GK001"
    # the SQLSTATE is the contract for apps calling the SQL function directly
    with pytest.raises(psycopg.Error) as sql_info:
        raw.execute(
            "select groundkit.put_object(object_id => 'a', version => 1, content_type => 'board_post',"
            " space_id => 'open', tier_visibility => 'T0', title => 'title a', body => 'changed')"
        )
    assert sql_info.value.sqlstate == "GK001"
    assert log(raw) == [("a", 1, "put")]
    assert [h.content for h in community.search("t0", "lantern")] == ["lantern"]


# -- retier_object -------------------------------------------------------------------------


def test_retier_object_applied(community: Groundkit, raw: Raw) -> None:
    put(community, "a", 1, "lantern")
    assert community.retier_object("a", 2, "T2") == WriteResult(object_id="a", version=2, status=APPLIED)
    assert log(raw) == [("a", 1, "put"), ("a", 2, "retier")]
    assert community.search("t1", "lantern") == []
    hits = community.search("t2", "lantern")
    assert [(h.object_id, h.object_version, h.content) for h in hits] == [("a", 2, "lantern")]


def test_retier_object_duplicate(community: Groundkit, raw: Raw) -> None:
    put(community, "a", 1, "lantern")
    community.retier_object("a", 2, "T2")
    assert community.retier_object("a", 2, "T2").status is DUPLICATE
    # a put at the current version with the current tier is also a no-op retry
    assert log(raw) == [("a", 1, "put"), ("a", 2, "retier")]


def test_retier_object_stale(community: Groundkit, raw: Raw) -> None:
    put(community, "a", 5, "lantern")
    assert community.retier_object("a", 4, "T3").status is STALE
    assert community.retier_object("a", 1, "T0").status is STALE
    assert log(raw) == [("a", 5, "put")]
    assert [h.object_id for h in community.search("t0", "lantern")] == ["a"]


def test_retier_object_tombstoned(community: Groundkit, raw: Raw) -> None:
    put(community, "a", 1, "lantern")
    community.delete_object("a", 2)
    assert community.retier_object("a", 3, "T0").status is TOMBSTONED
    put(community, "b", 1, "kite")
    community.redact_object("b", 2)
    assert community.retier_object("b", 3, "T0").status is TOMBSTONED
    assert [op for _, _, op in log(raw)] == ["put", "delete", "put", "redact"]


def test_retier_object_same_version_different_tier_raises_version_conflict(
    community: Groundkit, raw: Raw
) -> None:
    put(community, "a", 1, "lantern")
    with pytest.raises(VersionConflict) as info:
        community.retier_object("a", 1, "T2")
    assert info.value.sqlstate == "GK001"
    assert log(raw) == [("a", 1, "put")]


def test_retier_unknown_object_raises_unknown_object(community: Groundkit, raw: Raw) -> None:
    with pytest.raises(UnknownObject) as info:
        community.retier_object("nope", 1, "T1")
    assert info.value.sqlstate == "GK009"
    assert log(raw) == []


# -- delete_object -------------------------------------------------------------------------


def test_delete_object_applied(community: Groundkit, raw: Raw) -> None:
    put(community, "a", 1, "lantern")
    assert community.delete_object("a", 2) == WriteResult(object_id="a", version=2, status=APPLIED)
    assert current(raw, "a") == (2, "deleted")
    assert community.search("t3", "lantern") == []
    assert log(raw) == [("a", 1, "put"), ("a", 2, "delete")]


def test_delete_object_applied_whatever_its_version(community: Groundkit, raw: Raw) -> None:
    """Deletes always win: a delete with a lower version than the current one is not stale."""
    put(community, "a", 7, "lantern")
    assert community.delete_object("a", 1).status is APPLIED
    assert current(raw, "a") == (7, "deleted")  # the derived version never moves down
    assert community.search("t3", "lantern") == []


def test_delete_object_tombstoned(community: Groundkit, raw: Raw) -> None:
    put(community, "a", 1, "lantern")
    community.delete_object("a", 2)
    for version in (2, 1, 3):  # a retry, a lower and a higher version
        assert community.delete_object("a", version).status is TOMBSTONED
    assert log(raw) == [("a", 1, "put"), ("a", 2, "delete")]


def test_delete_object_tombstoned_after_redaction(community: Groundkit, raw: Raw) -> None:
    put(community, "a", 1, "lantern")
    community.redact_object("a", 2)
    assert community.delete_object("a", 3).status is TOMBSTONED
    assert current(raw, "a") == (2, "redacted")


# -- redact_object -------------------------------------------------------------------------


def test_redact_object_applied(community: Groundkit, raw: Raw) -> None:
    put(community, "a", 1, "lantern")
    assert community.redact_object("a", 2) == WriteResult(object_id="a", version=2, status=APPLIED)
    assert current(raw, "a") == (2, "redacted")
    assert community.search("t3", "lantern") == []
    assert log(raw) == [("a", 1, "put"), ("a", 2, "redact")]


def test_redact_object_applied_after_delete(community: Groundkit, raw: Raw) -> None:
    put(community, "a", 1, "lantern")
    community.delete_object("a", 2)
    assert community.redact_object("a", 2).status is APPLIED
    assert current(raw, "a") == (2, "redacted")


def test_redact_object_tombstoned(community: Groundkit, raw: Raw) -> None:
    put(community, "a", 1, "lantern")
    community.redact_object("a", 2)
    for version in (2, 1, 9):
        assert community.redact_object("a", version).status is TOMBSTONED
    assert log(raw) == [("a", 1, "put"), ("a", 2, "redact")]


# -- unknown references and bad arguments --------------------------------------------------


def test_unknown_tier_raises_unknown_tier(community: Groundkit, raw: Raw) -> None:
    with pytest.raises(UnknownTier) as info:
        put(community, "a", 1, tier="T9")
    assert info.value.sqlstate == "GK002"
    put(community, "b", 1)
    with pytest.raises(UnknownTier):
        community.retier_object("b", 2, "gold")
    with pytest.raises(UnknownTier):
        community.put_member("m", "T9")
    with pytest.raises(UnknownTier):
        community.put_space("s", "T9")
    assert log(raw) == [("b", 1, "put")]


def test_unknown_space_raises_unknown_space(community: Groundkit, raw: Raw) -> None:
    with pytest.raises(UnknownSpace) as info:
        put(community, "a", 1, space="nowhere")
    assert info.value.sqlstate == "GK003"
    with pytest.raises(UnknownSpace):
        community.grant_space("nowhere", "t1")
    with pytest.raises(UnknownSpace):
        community.revoke_space("nowhere", "t1")
    assert log(raw) == []


def test_unknown_content_type_raises_unknown_content_type(community: Groundkit, raw: Raw) -> None:
    with pytest.raises(UnknownContentType) as info:
        community.put_object("a", 1, "podcast", "open", "T0", "t", "b")
    assert "podcast" in str(info.value)
    with pytest.raises(psycopg.Error) as sql_info:
        raw.execute(
            "select groundkit.put_object(object_id => 'a', version => 1, content_type => 'podcast',"
            " space_id => 'open', tier_visibility => 'T0', title => 't', body => 'b')"
        )
    assert sql_info.value.sqlstate == "GK004"
    assert log(raw) == []


@pytest.mark.parametrize("version", [0, -1, -(2**40)])
def test_bad_version_raises_invalid_argument(community: Groundkit, raw: Raw, version: int) -> None:
    put(community, "a", 1)
    with pytest.raises(InvalidArgument):
        put(community, "b", version)
    with pytest.raises(InvalidArgument):
        community.retier_object("a", version, "T1")
    with pytest.raises(InvalidArgument):
        community.delete_object("a", version)
    with pytest.raises(InvalidArgument):
        community.redact_object("a", version)
    for call in (
        "select groundkit.delete_object(object_id => 'a', version => %(v)s)",
        "select groundkit.redact_object(object_id => 'a', version => %(v)s)",
        "select groundkit.retier_object(object_id => 'a', version => %(v)s, tier_visibility => 'T1')",
        "select groundkit.put_object(object_id => 'b', version => %(v)s, content_type => 'board_post',"
        " space_id => 'open', tier_visibility => 'T0', title => 't', body => 'b')",
    ):
        with pytest.raises(psycopg.Error) as info:
            raw.execute(call, {"v": version})
        assert info.value.sqlstate == "GK005"
    assert log(raw) == [("a", 1, "put")]
    assert current(raw, "a") == (1, "live")


def test_log_gets_a_row_only_for_applied_writes(community: Groundkit, raw: Raw) -> None:
    gk = community
    expected: list[tuple[str, int, str]] = []
    marker = gk.snapshot_marker()

    def step(result: WriteResult, op: str) -> None:
        nonlocal marker
        new_marker = gk.snapshot_marker()
        if result.status is APPLIED:
            expected.append((result.object_id, result.version, op))
            assert new_marker > marker
        else:
            assert new_marker == marker
        marker = new_marker
        assert log(raw) == expected

    step(put(gk, "a", 2), "put")  # applied
    step(put(gk, "a", 2), "put")  # duplicate
    step(put(gk, "a", 1), "put")  # stale
    step(gk.retier_object("a", 3, "T1"), "retier")  # applied
    step(gk.retier_object("a", 3, "T1"), "retier")  # duplicate
    step(gk.retier_object("a", 2, "T2"), "retier")  # stale
    step(gk.delete_object("a", 4), "delete")  # applied
    step(gk.delete_object("a", 4), "delete")  # tombstoned
    step(put(gk, "a", 5), "put")  # tombstoned
    step(gk.redact_object("a", 5), "redact")  # applied (upgrades the tombstone)
    step(gk.redact_object("a", 5), "redact")  # tombstoned
    step(gk.delete_object("never-written", 1), "delete")  # applied: leaves a tombstone
    step(put(gk, "never-written", 1), "put")  # tombstoned
    statuses = [r[2] for r in expected]
    assert statuses == ["put", "retier", "delete", "redact", "delete"]
    with pytest.raises(VersionConflict):
        put(gk, "b", 1, "one")
        put(gk, "b", 1, "two")
    assert log(raw, "b") == [("b", 1, "put")]


def test_put_objects_bulk_returns_put_object_statuses(gk: Groundkit) -> None:
    """The bulk path: the same statuses, in input order, and the same derived state as one by one."""
    from groundkit.models import ContentObject

    gk.put_space("bulk")
    objs = [ContentObject(object_id=f"b{i}", version=1, content_type="document", space_id="bulk",
                          tier_visibility="T0", title=f"Doc {i}", body=f"bulk body number {i}") for i in range(5)]
    first = gk.put_objects(objs)
    assert [r.status.value for r in first] == ["applied"] * 5
    again = gk.put_objects([objs[0], objs[1].model_copy(update={"version": 2, "body": "changed"})])
    assert [r.status.value for r in again] == ["duplicate", "applied"]
    gk.delete_object("b2", 1)
    assert [r.status.value for r in gk.put_objects([objs[2]])] == ["tombstoned"]
    before = gk.state_checksum()
    gk.rebuild()
    assert gk.state_checksum() == before
    with pytest.raises(VersionConflict):
        gk.put_objects([objs[3].model_copy(update={"body": "other text, same version"})])
