"""How many examples the long property-based tests draw.

The README's test command runs every test, the long property runs with the ``quick`` count, so it
stays inside ten minutes on a 2-core machine. CI (``.ci/run``) sets ``GK_TEST_FULL=1``
and draws the ``full`` count: more random worlds, the same assertions. Hypothesis keeps a failing
example in ``.hypothesis/`` and replays it first on the next run, whatever the count.
"""

from __future__ import annotations

import os

# Not GROUNDKIT_TEST_FULL: groundkit refuses every GROUNDKIT_* variable it does not know (a typo in
# a setting fails at startup, groundkit/config.py), and this one is the tests', not groundkit's.
FULL = os.environ.get("GK_TEST_FULL") == "1"


def examples(full: int, quick: int) -> int:
    """``full`` under CI's ``GK_TEST_FULL=1``, else ``quick``."""
    return full if FULL else quick
