"""Bad input: a clear typed error and nothing changed."""

from __future__ import annotations

import io
from typing import Any

import pytest

from groundkit import Groundkit, InvalidArgument, UnknownContentType
from groundkit.gate import bad_dsns, bad_input
from groundkit.gate.tap import Tap


def test_every_bad_input_is_rejected_clearly_and_changes_nothing(dsn: str) -> None:
    out = io.StringIO()
    tap = Tap(out)
    bad_input._run(dsn, tap)
    assert tap.failed == [], out.getvalue()
    assert tap.tallies["bad_inputs_tried"] >= 120
    dsn_checks = [r for r in tap.results if r.description.startswith("bad input: DSN (")]
    assert len(dsn_checks) == len(bad_dsns.MALFORMED_DSNS) and all(r.ok for r in dsn_checks)


def test_python_api_raises_typed_errors_not_pydantic_ones(gk: Groundkit) -> None:
    """Regression: these used to escape as pydantic ValidationError / TypeError (and as
    tracebacks from the CLI, which shows GroundkitError only)."""
    gk.put_space("s", "T0")
    with pytest.raises(InvalidArgument, match="status"):
        gk.put_member("m", "T1", "admin")
    with pytest.raises(UnknownContentType):
        gk.put_object("o", 1, "bogus", "s", "T0", "t", "b")
    with pytest.raises(InvalidArgument, match="version"):
        gk.put_object("o", 0, "board_post", "s", "T0", "t", "b")
    with pytest.raises(InvalidArgument, match="metadata must be JSON"):
        gk.put_object("o", 1, "board_post", "s", "T0", "t", "b", metadata={"a": {1}})
    with pytest.raises(InvalidArgument, match="segments"):
        gk.put_object("o", 1, "transcript", "s", "T0", "t", "", segments=[{"start_ms": 0, "text": "x"}])


# -- control characters in a new member's or space's id (left open by issue 50, item 6) -----------

@pytest.mark.parametrize("bad", ["m\n1", "m\x1b[2J", "m\t1", "m\u202eexe.txt", "m\u2028x"])
def test_a_new_member_or_space_id_with_control_characters_is_gk005_and_nothing_is_written(
        gk: Groundkit, raw: Any, bad: str) -> None:
    with pytest.raises(InvalidArgument, match="must not contain control, line separator or bidi control"):
        gk.put_member(bad, "T0")
    with pytest.raises(InvalidArgument, match=r"space_id must not contain .*\(found U\+"):
        gk.put_space(bad, "T0")
    row = raw.execute("select (select count(*) from groundkit.members), (select count(*) from groundkit.spaces)"
                      ).fetchone()
    assert row == (0, 0)


def test_a_member_and_a_space_stored_before_the_check_can_still_be_changed(gk: Groundkit, raw: Any) -> None:
    """The check is on creation only: a row an older groundkit stored with such an id can still be
    suspended or made private (as for object ids, which can still be deleted and redacted)."""
    raw.execute("insert into groundkit.members (member_sub, tier, status) values ('old\nmember', 'T1', 'active')")
    raw.execute("insert into groundkit.spaces (space_id, min_tier) values ('old\tspace', 'T0')")
    gk.put_member("old\nmember", "T1", status="suspended")
    gk.put_space("old\tspace", "T0", private=True)
    assert raw.execute("select status from groundkit.members where member_sub = 'old\nmember'").fetchone() == (
        "suspended",)
    assert raw.execute("select private from groundkit.spaces where space_id = 'old\tspace'").fetchone() == (True,)
