"""Issue 2, tombstones: deletes and redactions always win, whatever their version, and are
terminal, whatever order the writes and their retries arrive in."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from groundkit import Groundkit, WriteResult, WriteStatus

Rollback = Callable[[], AbstractContextManager[Groundkit]]

APPLIED, DUPLICATE, STALE, TOMBSTONED = (
    WriteStatus.APPLIED, WriteStatus.DUPLICATE, WriteStatus.STALE, WriteStatus.TOMBSTONED,
)


def put(gk: Groundkit, oid: str, version: int) -> WriteResult:
    # the content depends only on the version, so a retry is a duplicate, not a conflict
    return gk.put_object(oid, version, "board_post", "open", "T0", "Quilting", f"quilting pattern {version}")


def state(gk: Groundkit, oid: str) -> str | None:
    row = gk.conn.execute("select state from groundkit.objects where object_id = %s", (oid,)).fetchone()
    return None if row is None else str(row["state"])


def log_ops(gk: Groundkit, oid: str) -> list[tuple[str, int]]:
    rows = gk.conn.execute(
        "select op, version from groundkit.content_log where object_id = %s order by seq", (oid,)
    ).fetchall()
    return [(r["op"], r["version"]) for r in rows]


def assert_gone_for_good(gk: Groundkit, oid: str, top_version: int) -> None:
    for reader in ("t0", "t1", "t2", "t3"):
        assert all(h.object_id != oid for h in gk.search(reader, "quilting pattern", k=200))
    for version in range(1, top_version + 2):
        assert put(gk, oid, version).status is TOMBSTONED
        assert gk.retier_object(oid, version, "T0").status is TOMBSTONED
        assert gk.delete_object(oid, version).status is TOMBSTONED
    assert state(gk, oid) in ("deleted", "redacted")


@st.composite
def write_orders(draw: st.DrawFn) -> tuple[int, list[tuple[str, int]]]:
    """Puts of versions 1..n, one delete at some version, and retries of any of them, shuffled."""
    n = draw(st.integers(1, 6))
    delete_version = draw(st.integers(1, n + 2))
    ops: list[tuple[str, int]] = [("put", v) for v in range(1, n + 1)] + [("delete", delete_version)]
    retries = draw(st.lists(st.sampled_from(ops), max_size=6))
    return n, draw(st.permutations(ops + retries))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=write_orders())
def test_tombstone_durability_under_retries_in_any_order(
    community: Groundkit, rolled_back: Rollback, case: tuple[int, list[tuple[str, int]]]
) -> None:
    n, order = case
    with rolled_back() as gk:
        deleted = False
        applied_puts: list[int] = []
        delete_results: list[WriteStatus] = []
        for op, version in order:
            if op == "put":
                status = put(gk, "obj", version).status
                if deleted:
                    assert status is TOMBSTONED
                else:
                    assert status in (APPLIED, DUPLICATE, STALE)
                    if status is APPLIED:
                        assert not applied_puts or version > applied_puts[-1]
                        applied_puts.append(version)
            else:
                status = gk.delete_object("obj", version).status
                delete_results.append(status)
                deleted = True
        # the first delete applies and every retry of it finds the tombstone
        assert delete_results[0] is APPLIED
        assert all(s is TOMBSTONED for s in delete_results[1:])
        ops = log_ops(gk, "obj")
        assert [op for op, _ in ops].count("delete") == 1
        assert ops[-1][0] == "delete"  # nothing was appended after the delete
        assert state(gk, "obj") == "deleted"
        assert_gone_for_good(gk, "obj", n + 2)
        # the tombstone is part of the log, so a rebuild keeps it. (rebuild() truncates, which
        # Postgres refuses while deferred FK checks are pending in the same transaction.)
        gk.conn.execute("set constraints all immediate")
        gk.rebuild()
        assert_gone_for_good(gk, "obj", n + 2)


def test_delete_before_first_insert_leaves_a_tombstone(community: Groundkit) -> None:
    gk = community
    assert gk.delete_object("late", 3).status is APPLIED
    assert state(gk, "late") == "deleted"
    for version in (1, 3, 4):
        assert put(gk, "late", version).status is TOMBSTONED
    assert log_ops(gk, "late") == [("delete", 3)]
    assert_gone_for_good(gk, "late", 5)


def test_redact_before_first_insert_leaves_a_tombstone(community: Groundkit) -> None:
    gk = community
    assert gk.redact_object("late", 1).status is APPLIED
    assert state(gk, "late") == "redacted"
    assert put(gk, "late", 2).status is TOMBSTONED
    assert_gone_for_good(gk, "late", 3)


def test_redact_after_delete_upgrades_the_tombstone(community: Groundkit) -> None:
    gk = community
    put(gk, "obj", 1)
    gk.delete_object("obj", 2)
    assert state(gk, "obj") == "deleted"
    assert gk.redact_object("obj", 1).status is APPLIED
    assert state(gk, "obj") == "redacted"
    assert gk.redact_object("obj", 3).status is TOMBSTONED
    assert log_ops(gk, "obj") == [("put", 1), ("delete", 2), ("redact", 1)]
    scrubbed = gk.conn.execute(
        "select bool_and(body is null and title is null) as gone from groundkit.content_log"
        " where object_id = 'obj'"
    ).fetchone()
    assert scrubbed is not None and scrubbed["gone"] is True
    assert_gone_for_good(gk, "obj", 3)


def test_delete_after_redact_is_tombstoned(community: Groundkit) -> None:
    gk = community
    put(gk, "obj", 1)
    gk.redact_object("obj", 2)
    assert gk.delete_object("obj", 3).status is TOMBSTONED
    assert state(gk, "obj") == "redacted"  # a delete does not downgrade a redaction
    assert log_ops(gk, "obj") == [("put", 1), ("redact", 2)]
    assert_gone_for_good(gk, "obj", 3)


def test_tombstone_is_per_object(community: Groundkit) -> None:
    gk = community
    put(gk, "a", 1)
    put(gk, "b", 1)
    gk.delete_object("a", 1)
    assert put(gk, "b", 2).status is APPLIED
    assert [h.object_id for h in gk.search("t0", "quilting")] == ["b"]
