"""groundkit's replaceable SQL (sql/*.sql) as it is in the working tree or at a git revision, for
the paired comparison of two revisions (evals/bench/ab.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORKTREE = "worktree"
"""The revision name that means the working tree, uncommitted changes included."""


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True, text=True).stdout


def replaceable_sql(rev: str = WORKTREE) -> list[tuple[str, str]]:
    """The replaceable SQL files (name, text) at git revision ``rev``, in the order migrate applies
    them (by name), or those of the working tree for WORKTREE."""
    if rev == WORKTREE:
        return [(p.name, p.read_text()) for p in sorted((ROOT / "sql").glob("*.sql"))]
    names = sorted(n for n in _git("ls-tree", "--name-only", rev, "sql/").split() if n.endswith(".sql"))
    return [(Path(n).name, _git("show", f"{rev}:{n}")) for n in names]


def describe(rev: str) -> str:
    """``rev`` as a short commit hash (WORKTREE as itself), for the tables' headings."""
    return rev if rev == WORKTREE else _git("rev-parse", "--short", rev).strip()
