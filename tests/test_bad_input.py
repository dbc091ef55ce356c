"""Bad input: a clear typed error and nothing changed."""

from __future__ import annotations

import io

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
