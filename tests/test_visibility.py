"""Issue 2, visibility: evaluated inside the query against live rows, failing closed."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

import groundkit
from groundkit import Groundkit, InvalidArgument, UnknownContentType

Raw = psycopg.Connection[tuple[Any, ...]]

Q = "harvest"


def visible(gk: Groundkit, reader: str, query: str = Q, **kw: Any) -> set[str]:
    return {h.object_id for h in gk.search(reader, query, k=200, **kw)}


@pytest.fixture
def world(community: Groundkit) -> Groundkit:
    """One object per rule, every one matching the query ``harvest``."""
    gk = community
    gk.put_object("pub", 1, "board_post", "open", "T0", "Harvest fair", "harvest fair for everyone")
    gk.put_object("t1post", 1, "board_post", "open", "T1", "Harvest plans", "harvest plans, tier one")
    gk.put_object("t2post", 1, "course_section", "open", "T2", "Harvest course", "harvest techniques")
    gk.put_object("t3post", 1, "document", "open", "T3", "Harvest ledger", "harvest ledger")
    gk.put_object("memspace", 1, "board_post", "members", "T0", "Harvest board", "members harvest board")
    gk.put_object("vaultpost", 1, "board_post", "vault", "T0", "Harvest vault", "private harvest notes")
    gk.put_object("note", 1, "member_note", "notes", "T0", "My harvest", "my own harvest diary",
                  owner_sub="t1", owner_only=True)
    gk.put_object("event", 1, "event", "notes", "T0", "Harvest supper", "harvest supper on friday")
    return gk


EVERYONE = {"pub", "event"}


# -- fail-closed readers ---------------------------------------------------------------------


def test_unknown_reader_sees_nothing(world: Groundkit) -> None:
    assert visible(world, "nobody") == set()
    assert visible(world, "") == set()
    assert visible(world, "T3") == set()


@pytest.mark.parametrize("reader", ["pending2", "suspended3", "revoked3"])
def test_inactive_reader_sees_nothing(world: Groundkit, reader: str) -> None:
    assert visible(world, reader) == set()


@pytest.mark.parametrize("status", ["pending", "suspended", "revoked"])
def test_status_change_fails_closed_on_next_search(world: Groundkit, status: str) -> None:
    assert "t3post" in visible(world, "t3")
    world.put_member("t3", "T3", status)
    assert visible(world, "t3") == set()
    world.put_member("t3", "T3", "active")
    assert "t3post" in visible(world, "t3")


def _authority(raw: Raw, extra_rows: str) -> None:
    view = (
        "create or replace view groundkit.reader_authority as"
        " select m.member_sub, m.tier, m.status from groundkit.members m union all "
    )
    raw.execute(view + extra_rows)  # extra_rows: SQL written by the tests themselves


def test_reader_with_a_tier_not_in_tiers_sees_nothing(world: Groundkit, raw: Raw) -> None:
    _authority(raw, "select 'ghost', 'platinum', 'active' union all select 'ghost2', null, 'active'")
    assert visible(world, "ghost") == set()
    assert visible(world, "ghost2") == set()
    assert visible(world, "t0") == EVERYONE  # everyone else unaffected


@pytest.mark.parametrize(
    "duplicate",
    [
        "select 't3', 'T3', 'active'",  # the same row twice
        "select 't3', 'T0', 'active'",  # two tiers
        "select 't3', 'T3', 'suspended'",  # one active, one not
        "select 't3', 'platinum', 'active'",  # one with a known tier, one without
    ],
)
def test_reader_authority_with_two_rows_for_one_member_sees_nothing(
    world: Groundkit, raw: Raw, duplicate: str
) -> None:
    assert "t3post" in visible(world, "t3")
    _authority(raw, duplicate)
    assert visible(world, "t3") == set()
    assert "t2post" in visible(world, "t2")


# -- tiers, spaces, grants, owners -------------------------------------------------------------


def test_tier_rank_against_object_tier_and_space_min_tier(world: Groundkit) -> None:
    assert visible(world, "t0") == EVERYONE
    assert visible(world, "t1") == EVERYONE | {"t1post", "memspace", "note"}
    assert visible(world, "t2") == EVERYONE | {"t1post", "memspace", "t2post", "vaultpost"}
    assert visible(world, "t3") == EVERYONE | {"t1post", "memspace", "t2post", "t3post"}


def test_space_min_tier_applies_to_low_tier_objects(world: Groundkit) -> None:
    # memspace is stamped T0 but lives in a T1 space
    assert "memspace" not in visible(world, "t0")
    world.put_space("members", "T0")
    assert "memspace" in visible(world, "t0")
    world.put_space("members", "T3")
    assert "memspace" not in visible(world, "t2")
    assert "memspace" in visible(world, "t3")


def test_private_space_needs_a_grant(world: Groundkit) -> None:
    # vault: min tier T2, private, granted to t2 only
    assert "vaultpost" in visible(world, "t2")
    assert "vaultpost" not in visible(world, "t3")  # a higher tier is not a grant
    world.grant_space("vault", "t3")
    assert "vaultpost" in visible(world, "t3")
    world.revoke_space("vault", "t3")
    assert "vaultpost" not in visible(world, "t3")
    world.grant_space("vault", "t0")  # a grant does not lift the space's min tier
    assert "vaultpost" not in visible(world, "t0")


def test_owner_only_is_only_for_the_owner(world: Groundkit) -> None:
    assert "note" in visible(world, "t1")
    for reader in ("t0", "t2", "t3"):
        assert "note" not in visible(world, reader)
    world.put_member("t1", "T1", "suspended")
    assert visible(world, "t1") == set()


def test_downgrade_and_upgrade_take_effect_on_the_next_search(world: Groundkit) -> None:
    assert "t2post" in visible(world, "t2")
    world.put_member("t2", "T1")
    assert visible(world, "t2") == EVERYONE | {"t1post", "memspace"}
    world.put_member("t2", "T0")
    assert visible(world, "t2") == EVERYONE
    world.put_member("t2", "T3")
    assert visible(world, "t2") == EVERYONE | {"t1post", "memspace", "t2post", "t3post", "vaultpost"}


def test_retier_takes_effect_on_the_next_search(world: Groundkit) -> None:
    world.retier_object("pub", 2, "T3")
    assert "pub" not in visible(world, "t2")
    assert "pub" in visible(world, "t3")


def test_making_a_space_private_takes_effect_immediately(world: Groundkit) -> None:
    assert "pub" in visible(world, "t3")
    world.put_space("open", "T0", private=True)
    for reader in ("t0", "t1", "t2", "t3"):
        assert not visible(world, reader) & {"pub", "t1post", "t2post", "t3post"}
    world.grant_space("open", "t1")
    assert visible(world, "t1") & {"pub", "t1post", "t2post"} == {"pub", "t1post"}
    world.put_space("open", "T0", private=False)
    assert "pub" in visible(world, "t3")


def test_deleted_object_is_invisible(world: Groundkit) -> None:
    world.delete_object("pub", 2)
    assert visible(world, "t3") & {"pub"} == set()


# -- filters ---------------------------------------------------------------------------------


def test_content_types_filter_filters(world: Groundkit) -> None:
    assert visible(world, "t3", content_types=["board_post"]) == {"pub", "t1post", "memspace"}
    assert visible(world, "t3", content_types=["course_section", "document"]) == {"t2post", "t3post"}
    assert visible(world, "t3", content_types=["event"]) == {"event"}
    assert visible(world, "t3", content_types=["transcript"]) == set()
    assert visible(world, "t3", content_types=[]) == set()
    # a filter never widens visibility
    assert visible(world, "t0", content_types=["document", "member_note"]) == set()
    for h in world.search("t3", Q, content_types=["board_post"]):
        assert h.content_type == "board_post"


def test_space_ids_filter_filters(world: Groundkit) -> None:
    assert visible(world, "t3", space_ids=["members"]) == {"memspace"}
    assert visible(world, "t3", space_ids=["notes", "members"]) == {"event", "memspace"}
    assert visible(world, "t3", space_ids=["vault"]) == set()  # no grant
    assert visible(world, "t2", space_ids=["vault"]) == {"vaultpost"}
    assert visible(world, "t3", space_ids=["nowhere"]) == set()
    assert visible(world, "t3", space_ids=["open"], content_types=["document"]) == {"t3post"}


def test_filters_in_sql_filter(world: Groundkit, raw: Raw) -> None:
    rows = raw.execute(
        "select object_id from groundkit.search(reader_sub => 't3', query => 'harvest', k => 50,"
        " content_types => array['course_section'], space_ids => array['open'])"
    ).fetchall()
    assert rows == [("t2post",)]


def test_unknown_content_type_in_filter_raises(world: Groundkit, raw: Raw) -> None:
    with pytest.raises(UnknownContentType):
        world.search("t3", Q, content_types=["board_post", "podcast"])
    with pytest.raises(InvalidArgument):
        world.search("t3", Q, content_types=["Board_Post"])
    for bad in (["podcast"], ["event", None]):
        with pytest.raises(psycopg.Error) as info:
            raw.execute("select * from groundkit.search(reader_sub => 't3', query => 'x',"
                        " content_types => %s::text[])", (bad,))
        assert info.value.sqlstate == "GK004"


def test_filter_given_a_string_raises(world: Groundkit) -> None:
    with pytest.raises(InvalidArgument):
        world.search("t3", Q, content_types="board_post")
    with pytest.raises(InvalidArgument):
        world.search("t3", Q, space_ids="open")


def test_unknown_keyword_argument_raises_type_error(world: Groundkit) -> None:
    """Regression: a filter argument silently ignored. A misspelt filter must not return
    unfiltered results."""
    for misspelt in ({"content_type": ["event"]}, {"space_id": ["open"]}, {"spaces": ["open"]},
                     {"reader": "t3"}):
        kwargs: dict[str, Any] = misspelt
        with pytest.raises(TypeError):
            world.search("t3", Q, **kwargs)


# -- the app's own membership table --------------------------------------------------------------


def test_reader_authority_can_point_at_the_apps_membership_table(world: Groundkit, raw: Raw, dsn: str) -> None:
    raw.execute("create schema app")
    raw.execute("create table app.accounts (sub text primary key, plan text, state text)")
    raw.execute("insert into app.accounts values ('alice', 'T2', 'active'), ('bob', 'T0', 'active')")
    # search runs as groundkit_owner (SECURITY DEFINER), which reads the view with its rights
    raw.execute("grant usage on schema app to groundkit_owner")
    raw.execute("grant select on app.accounts to groundkit_owner")
    raw.execute(
        "create or replace view groundkit.reader_authority as"
        " select sub as member_sub, plan as tier, state as status from app.accounts"
    )
    gk = world
    # search follows the app's table, and only it
    assert visible(gk, "alice") == EVERYONE | {"t1post", "memspace", "t2post"}
    assert visible(gk, "bob") == EVERYONE
    assert visible(gk, "t3") == set()  # groundkit.members no longer counts
    raw.execute("update app.accounts set plan = 'T0' where sub = 'alice'")
    assert visible(gk, "alice") == EVERYONE
    raw.execute("update app.accounts set state = 'suspended' where sub = 'bob'")
    assert visible(gk, "bob") == set()
    gk.grant_space("vault", "alice")
    raw.execute("update app.accounts set plan = 'T2' where sub = 'alice'")
    assert "vaultpost" in visible(gk, "alice")

    # running migrate again does not overwrite the app's view
    state = groundkit.migrate(dsn, gate=False)
    assert state.pending == ()
    definition = raw.execute("select pg_get_viewdef('groundkit.reader_authority'::regclass)").fetchone()
    assert definition is not None and "app.accounts" in definition[0]
    assert "vaultpost" in visible(gk, "alice")
    assert visible(gk, "t3") == set()
    raw.execute("update app.accounts set plan = 'T0' where sub = 'alice'")
    assert visible(gk, "alice") == EVERYONE
