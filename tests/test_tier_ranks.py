"""A tier's rank is stamped into derived rows; changing it goes through set_tier_rank()."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from groundkit import Groundkit, InvalidArgument, UnknownTier

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


def test_set_tier_rank_rebuilds_so_nothing_goes_missing(tiered: Groundkit, raw: Raw) -> None:
    # Without the rebuild, a T2 reader would read bucket 5 and 6 lists that hold nothing and miss
    # t2post (measured before the guard existed).
    assert raw.execute("select groundkit.set_tier_rank('T3', 6)").fetchone() == (3,)
    calls: list[tuple[int, int]] = []
    assert tiered.set_tier_rank("T2", 5, progress=lambda done, total: calls.append((done, total))) == 3
    assert calls == [(3, 3)]
    assert (rank(raw, "T2"), rank(raw, "T3")) == (5, 6)
    assert visible(tiered, "t1") == {"t1post"}
    assert visible(tiered, "t2") == {"t1post", "t2post"}
    assert visible(tiered, "t3") == {"t1post", "t2post", "t3post"}
    # the derived rows are what a rebuild from the log gives
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
