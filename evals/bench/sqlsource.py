"""The CREATE FUNCTION text of one of groundkit's own functions, for benchmark variants.

ab_search.py, single_floor.py and oracle_search.py install edited copies of a function from
sql/ (at a git revision, with a statement cut out, with hooks added). They cut its text out of
the SQL file here and check that the lines they edit are still there, once each; repo_file()
reads a file as it is at a revision (ab_search.py, ab_write.py, pending_replace.py).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterable
from pathlib import Path

END = "\n$$;\n"
ROOT = Path(__file__).resolve().parents[2]


def repo_file(path: str, rev: str | None = None) -> str:
    """The text of the repository's file ``path`` (such as ``sql/040_index.sql``) at git
    revision ``rev``, or in the working tree when ``rev`` is None."""
    if rev is None:
        return (ROOT / path).read_text()
    return subprocess.run(["git", "show", f"{rev}:{path}"], cwd=ROOT, check=True, capture_output=True,
                          text=True).stdout


def function_source(text: str, name: str) -> str:
    """The ``create or replace function groundkit.<name>(`` ... ``$$;`` block of an SQL file's text."""
    start = text.index(f"create or replace function groundkit.{name}(")
    return text[start:text.index(END, start) + len(END)]


def require_once(source: str, markers: Iterable[str], where: str) -> None:
    """Exit with a message naming ``where`` unless every marker occurs exactly once in source."""
    for marker in markers:
        if source.count(marker) != 1:
            raise SystemExit(f"{where} changed: {marker.strip()!r} is not found once; update this script")
