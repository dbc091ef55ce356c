"""Released Alembic revisions never change: their hashes are pinned in migrations/frozen.txt."""

from __future__ import annotations

import hashlib
from pathlib import Path

VERSIONS = Path(__file__).resolve().parent.parent / "migrations" / "versions"


def test_released_revisions_are_unchanged() -> None:
    frozen = {}
    for line in (VERSIONS.parent / "frozen.txt").read_text(encoding="utf-8").splitlines():
        digest, name = line.split()
        frozen[name] = digest
    assert frozen, "frozen.txt lists no revisions"
    for name, digest in frozen.items():
        actual = hashlib.sha256((VERSIONS / name).read_bytes()).hexdigest()
        assert actual == digest, f"released revision {name} was edited; add a new revision instead"
