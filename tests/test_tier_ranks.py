"""A tier's rank is stamped into derived rows; changing it goes through set_tier_rank()."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest

from groundkit import Groundkit, GroundkitError, InvalidArgument, UnknownTier

Raw = psycopg.Connection[tuple[Any, ...]]


def visible(gk: Groundkit, reader: str) -> set[str]:
    return {h.object_id for h in gk.search(reader, "harvest", k=50)}


@pytest.fixture
def tiered(community: Groundkit) -> Groundkit:
    gk = community
    gk.put_object("t1post", 1, "board_post", "open", "T1", "Harvest plans", "harvest plans, tier one")
    gk.put_object("t2post", 1, "course_section", "open", "T2", "Harvest course", "harvest techniques")
    gk.put_object("t3post", 1, "document", "open", "T3", "Harvest ledger", "harvest ledger")
    return gk


def rank(raw: Raw, tier: str) -> int:
    row = raw.execute("select rank from groundkit.tiers where name = %s", (tier,)).fetchone()
    assert row is not None
    return int(row[0])


def test_rank_of_a_tier_in_use_cannot_change_underneath_the_derived_rows(tiered: Groundkit, raw: Raw) -> None:
    before = tiered.state_checksum()
    with pytest.raises(psycopg.Error) as err:
        raw.execute("update groundkit.tiers set rank = 5 where name = 'T2'")
    assert err.value.sqlstate == "GK007"
    assert "set_tier_rank" in (err.value.diag.message_hint or "")
    assert rank(raw, "T2") == 2
    assert tiered.state_checksum() == before
    assert visible(tiered, "t2") == {"t1post", "t2post"}


def test_min_tier_of_a_space_counts_as_in_use(community: Groundkit, raw: Raw) -> None:
    # no object names T2, but the private space 'vault' has min_tier T2
    with pytest.raises(psycopg.Error) as err:
        raw.execute("update groundkit.tiers set rank = 5 where name = 'T2'")
    assert err.value.sqlstate == "GK007"


def test_unused_tier_rank_can_change(tiered: Groundkit, raw: Raw) -> None:
    raw.execute("insert into groundkit.tiers (name, rank) values ('T4', 4)")
    raw.execute("update groundkit.tiers set rank = 9 where name = 'T4'")
    assert rank(raw, "T4") == 9


def test_tier_of_stored_objects_cannot_be_renamed_or_deleted(tiered: Groundkit, raw: Raw) -> None:
    for stmt in ("update groundkit.tiers set name = 'Gold' where name = 'T3'",
                 "delete from groundkit.tiers where name = 'T3'"):
        with pytest.raises(psycopg.Error) as err:
            raw.execute(stmt)
        assert err.value.sqlstate == "GK007", stmt
    assert rank(raw, "T3") == 3


def test_set_tier_rank_moves_scopes_so_nothing_goes_missing(tiered: Groundkit, raw: Raw) -> None:
    # Without moving the chunks, a T2 reader would read bucket 5 and 6 lists that hold nothing
    # and miss t2post (measured before the guard existed).
    assert raw.execute("select groundkit.set_tier_rank('T3', 6)").fetchone() == (1,)  # t3post's chunk
    calls: list[tuple[int, int]] = []
    # T2 is named by t2post (space 'open') and is the minimum tier of 'vault' (private: no scope)
    assert tiered.set_tier_rank("T2", 5, progress=lambda done, total: calls.append((done, total))) == 1
    assert calls == [(1, 2), (2, 2)]
    assert (rank(raw, "T2"), rank(raw, "T3")) == (5, 6)
    assert visible(tiered, "t1") == {"t1post"}
    assert visible(tiered, "t2") == {"t1post", "t2post"}
    assert visible(tiered, "t3") == {"t1post", "t2post", "t3post"}
    # the derived rows are what a rebuild from the log gives
    after = tiered.state_checksum()
    tiered.rebuild()
    assert tiered.state_checksum() == after


def test_set_tier_rank_equals_a_rebuild_in_a_mixed_world(community: Groundkit, raw: Raw) -> None:
    """Content of the tier in spaces of lower, equal and higher minimum tiers, a public space
    whose minimum tier it is, private spaces, owner-only notes, deleted and retiered objects:
    after each rank change (up past other tiers, down below them) the state equals a rebuild."""
    gk = community
    gk.put_space("guild", "T2")  # public, minimum tier T2
    gk.put_space("elders", "T3")
    texts = ["harvest loom", "harvest dye vat", "loom warp weft", "harvest ledger loom"]
    n = 0
    for space in ("open", "members", "vault", "guild", "elders", "notes"):
        for tier in ("T0", "T1", "T2", "T3"):
            n += 1
            note = space == "notes" and tier in ("T1", "T2")
            gk.put_object(f"x{n}", 1, "member_note" if note else "board_post", space, tier, f"post {n}",
                          texts[n % 4], owner_sub="t2" if note else None, owner_only=note)
    gk.delete_object("x3", 2)
    gk.retier_object("x6", 2, "T2")
    for tier, new_rank in [("T2", 7), ("T1", 8), ("T2", 2), ("T1", 1), ("T0", 9), ("T0", 0)]:
        moved = gk.set_tier_rank(tier, new_rank)
        assert moved > 0, (tier, new_rank)
        checksum = gk.state_checksum()
        results = {r: {(h.object_id, round(h.score, 9)) for h in gk.search(r, "harvest loom", k=50)}
                   for r in ("t0", "t1", "t2", "t3")}
        gk.rebuild()
        assert gk.state_checksum() == checksum, (tier, new_rank)
        assert results == {r: {(h.object_id, round(h.score, 9)) for h in gk.search(r, "harvest loom", k=50)}
                           for r in ("t0", "t1", "t2", "t3")}


def test_set_tier_rank_lets_searches_run_and_holds_writers(tiered: Groundkit, dsn: str) -> None:
    """While a rank change is uncommitted, a search runs (on the old ranks); a writer of a T2
    object waits, and after the commit its chunk lands in the new scope (state = a rebuild)."""
    admin = psycopg.connect(dsn)
    try:
        admin.execute("select groundkit.set_tier_rank('T3', 6)")
        admin.execute("select groundkit.set_tier_rank('T2', 5)")  # uncommitted: locks held
        with Groundkit.connect(dsn) as reader:
            reader.conn.execute("set lock_timeout = '5s'")
            assert visible(reader, "t2") == {"t1post", "t2post"}  # not blocked, old ranks
        with Groundkit.connect(dsn) as writer:
            writer.conn.execute("set lock_timeout = '500ms'")
            with pytest.raises(GroundkitError) as held:
                writer.put_object("late", 1, "board_post", "open", "T2", "Harvest late", "harvest late")
            assert held.value.sqlstate == "55P03"  # lock_not_available: it waited on set_tier_rank
            with pytest.raises(GroundkitError) as held:  # so does a space policy change
                writer.put_space("open", "T1")
            assert held.value.sqlstate == "55P03"
        result: dict[str, Any] = {}

        def write() -> None:
            with Groundkit.connect(dsn) as w:
                result["status"] = w.put_object("late", 1, "board_post", "open", "T2", "Harvest late", "harvest late")

        thread = threading.Thread(target=write)
        thread.start()
        thread.join(0.5)
        assert thread.is_alive()  # waiting for the rank change
        admin.commit()
        thread.join(30)
        assert not thread.is_alive() and result["status"].status.value == "applied"
    finally:
        admin.close()
    assert visible(tiered, "t2") == {"t1post", "t2post", "late"}
    assert visible(tiered, "t1") == {"t1post"}
    after = tiered.state_checksum()
    tiered.rebuild()
    assert tiered.state_checksum() == after


@pytest.mark.parametrize(("tier", "new_rank", "sqlstate"), [
    ("T9", 5, "GK002"),      # unknown tier
    ("T2", None, "GK005"),   # no rank
    ("T2", -1, "GK005"),     # negative
    ("T2", 1, "GK005"),      # T1's rank
])
def test_set_tier_rank_rejects_bad_input_and_changes_nothing(tiered: Groundkit, raw: Raw, tier: str,
                                                             new_rank: int | None, sqlstate: str) -> None:
    before = tiered.state_checksum()
    with pytest.raises(psycopg.Error) as err:
        raw.execute("select groundkit.set_tier_rank(%s, %s)", (tier, new_rank))
    assert err.value.sqlstate == sqlstate
    assert rank(raw, "T2") == 2
    assert tiered.state_checksum() == before


def test_python_api_maps_set_tier_rank_errors(tiered: Groundkit) -> None:
    with pytest.raises(UnknownTier):
        tiered.set_tier_rank("T9", 5)
    level = tiered.conn.execute("show client_min_messages").fetchone()
    with pytest.raises(UnknownTier):  # with progress: the same error, the session's level kept
        tiered.set_tier_rank("T9", 5, progress=lambda done, total: None)
    assert tiered.conn.execute("show client_min_messages").fetchone() == level
    with pytest.raises(InvalidArgument):
        tiered.set_tier_rank("T2", -1)
    with pytest.raises(InvalidArgument):
        tiered.set_tier_rank("T\x002", 5)
