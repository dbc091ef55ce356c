"""Side channels: can a reader learn, from how search runs, what it may not see?

A reader of tier T1 searches a world in which each *invisible kind* of content holds a word of
its own, merged into ``postings`` and pending: shared content above the reader's tier, a private
space without a grant, a granted private space whose policy needs a higher tier, another
member's owner-only note. For each such word search must behave as for a word nobody holds:

- the branches it takes, and the figures it computes, are those of an absent word (checked from
  the owner's side, whose session is shown search's DEBUG lines, with the word written out of
  them);
- a reader's login is told nothing at ``client_min_messages = debug1``, and what it gets (rows
  and notices) is the same before and after the invisible content is written.

Time is the third channel; ``python -m evals.bench sidechannel`` measures it on this world
(a benchmark, not a check: docs/performance.md).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.rows import tuple_row

from groundkit.client import Groundkit
from groundkit.gate import roles
from groundkit.gate.tap import Counts, Tap
from groundkit.gate.throwaway import GateDatabases
from groundkit.models import ContentObject

READER = "sc_reader"  # tier T1
OTHER = "sc_other"  # tier T3, granted every private space
KINDS: dict[str, str] = {
    "higher_tier": "shared content above the reader's tier",
    "ungranted_space": "a private space the reader has no grant to",
    "granted_space_above_tier": "a private space granted to the reader whose policy needs a higher tier",
    "others_note": "another member's owner-only note",
}
STATES = ("merged", "pending")
ABSENT = "scabsentword"  # held by nothing
COMMON = "scommonword"  # held by visible content (for queries of two terms)
VOCAB = tuple(f"scfill{chr(97 + i % 20)}{chr(97 + i // 20)}" for i in range(200))


def word(kind: str, state: str) -> str:
    """The word only content of ``kind`` in ``state`` holds (letters only: one lexeme)."""
    return "sc" + kind.replace("_", "") + state


def _obj(object_id: str, space_id: str, tier: str, body: str, owner: str | None = None,
         owner_only: bool = False) -> ContentObject:
    return ContentObject(object_id=object_id, version=1, content_type="board_post", space_id=space_id,
                         tier_visibility=tier, title="", body=body, owner_sub=owner, owner_only=owner_only)


def build_visible(gk: Groundkit, filler: int) -> None:
    """The members, spaces and grants, and ``filler`` objects the reader may see (merged), among
    them its own note and a granted private space it may see."""
    gk.put_member(READER, "T1")
    gk.put_member(OTHER, "T3")
    gk.put_space("sc_open", "T0")
    gk.put_space("sc_granted_ok", "T0", private=True)
    gk.put_space("sc_closed", "T0", private=True)
    gk.put_space("sc_high", "T2", private=True)
    for space in ("sc_granted_ok", "sc_closed", "sc_high"):
        gk.grant_space(space, OTHER)
    gk.grant_space("sc_granted_ok", READER)
    gk.grant_space("sc_high", READER)
    objs = [_obj(f"scv{i}", "sc_granted_ok" if i % 10 == 0 else "sc_open", "T0" if i % 3 else "T1",
                 " ".join(VOCAB[(i * 7 + j * 13) % len(VOCAB)] for j in range(12))
                 + (f" {COMMON}" if i % 4 == 0 else ""))
            for i in range(filler)]
    objs.append(_obj("scv_note", "sc_open", "T0", f"my own note {COMMON}", owner=READER, owner_only=True))
    for start in range(0, len(objs), 500):
        gk.put_objects(objs[start:start + 500])
    gk.merge_pending()


def _invisible(kind: str, object_id: str, body: str) -> ContentObject:
    if kind == "higher_tier":
        return _obj(object_id, "sc_open", "T2", body)
    if kind == "ungranted_space":
        return _obj(object_id, "sc_closed", "T0", body)
    if kind == "granted_space_above_tier":
        return _obj(object_id, "sc_high", "T0", body)
    return _obj(object_id, "sc_open", "T0", body, owner=OTHER, owner_only=True)


def add_invisible(gk: Groundkit, copies: int) -> None:
    """For every kind and state, ``copies`` objects holding that kind's word (and COMMON): the
    merged ones written and merged, then the pending ones written one at a time, with the
    writers' inline merges held off so that they stay pending."""
    merged = [_invisible(kind, f"sci_{kind}_merged_{i}", f"{word(kind, 'merged')} {COMMON} {VOCAB[i % 50]}")
              for kind in KINDS for i in range(copies)]
    for start in range(0, len(merged), 500):
        gk.put_objects(merged[start:start + 500])
    gk.merge_pending()
    gk.conn.execute("update groundkit.config set pending_merge_chunks = 2000000000")
    for kind in KINDS:
        for i in range(copies):
            gk.put(_invisible(kind, f"sci_{kind}_pending_{i}", f"{word(kind, 'pending')} {COMMON} {VOCAB[i % 50]}"))


def queries() -> Iterator[tuple[str, str, str]]:
    """(kind, state, query) for every invisible word alone and with COMMON."""
    for kind in KINDS:
        for state in STATES:
            yield kind, state, word(kind, state)
            yield kind, state, f"{word(kind, state)} {COMMON}"


@contextmanager
def debug_notices(conn: psycopg.Connection[Any]) -> Iterator[list[str]]:
    """The groundkit DEBUG lines ``conn`` is sent inside the block."""
    lines: list[str] = []

    def keep(d: psycopg.errors.Diagnostic) -> None:
        if (d.message_primary or "").startswith("groundkit"):
            lines.append(d.message_primary or "")

    conn.add_notice_handler(keep)
    conn.execute("set client_min_messages = debug1")
    try:
        yield lines
    finally:
        conn.execute("reset client_min_messages")
        conn.remove_notice_handler(keep)


def owner_view(conn: psycopg.Connection[Any], query: str, hide: str) -> tuple[list[Any], list[str]]:
    """The reader's rows and the DEBUG lines of one search, as the owner sees them, with ``hide``
    written as ABSENT in the lines."""
    with debug_notices(conn) as lines:
        rows = conn.cursor(row_factory=tuple_row).execute(
            "select chunk_id, score from groundkit._search_pruned(%s, %s, 10)", (READER, query)).fetchall()
    return rows, [line.replace(hide, ABSENT) for line in lines]


def reader_view(conn: psycopg.Connection[Any], texts: list[str]) -> list[Any]:
    """What a reader's login gets for each query: its rows and every groundkit notice."""
    out: list[Any] = []
    for text in texts:
        with debug_notices(conn) as lines:
            rows = conn.cursor(row_factory=tuple_row).execute(
                "select object_id, chunk_seq, score from groundkit.search(%s, %s, 10)", (READER, text)).fetchall()
        out.append((text, rows, list(lines)))
    return out


def branch_differences(conn: psycopg.Connection[Any]) -> list[str]:
    """Where search for the reader ran differently for an invisible word than for an absent one."""
    bad = []
    for kind, state, text in queries():
        want = owner_view(conn, text.replace(word(kind, state), ABSENT), ABSENT)
        got = owner_view(conn, text, word(kind, state))
        if got != want:
            bad.append(f"{kind} ({state}) {text!r}: {got} != absent word's {want}")
    return bad


def run_section(dbs: GateDatabases, tap: Tap, opts: Any) -> None:
    dsn = dbs.clone()
    try:
        _run(dbs.admin_dsn, dsn, tap)
    finally:
        dbs.drop(dsn)


def _run(admin_dsn: str, dsn: str, tap: Tap) -> None:
    texts = [text for _k, _s, text in queries()] + [COMMON, ABSENT, f"{VOCAB[0]} {VOCAB[7]} {COMMON}"]
    with Groundkit.connect(dsn) as gk, roles.login_roles(admin_dsn, dsn) as who, \
            psycopg.connect(who.reader, autocommit=True) as login:
        build_visible(gk, filler=60)
        before = reader_view(login, texts)
        add_invisible(gk, copies=80)
        after = reader_view(login, texts)
        told = [f"{text!r}: {lines}" for text, _rows, lines in after if lines]
        tap.check(not told, "reader login at client_min_messages = debug1: search sends no groundkit DEBUG line",
                  told, counts=Counts(leaks=len(told)))
        changed = [f"{b[0]!r}: {b[1:]} -> {a[1:]}" for b, a in zip(before, after, strict=True) if a != b]
        tap.check(not changed, "reader login: rows and notices are the same before and after invisible content "
                  f"of {len(KINDS)} kinds, merged and pending, is written", changed, counts=Counts(leaks=len(changed)))
        bad = branch_differences(gk.conn)
        tap.check(not bad, "search for a reader runs the same branches with the same figures (its DEBUG lines, "
                  "seen by the owner) for a word only invisible content holds as for an absent word "
                  f"({', '.join(KINDS)}; merged and pending)", bad, counts=Counts(leaks=len(bad)))
