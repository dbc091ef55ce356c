"""The gate's ``home`` section: the surfaces that read through the predicate outside search.

- ``groundkit.home``, both modes: a downgrade, a board made private and a delete each remove the
  object at the next statement.
- ``groundkit.record_engagement``: an object the member may not see is refused exactly as a
  missing one (same SQLSTATE, same message) and counts nothing.
- The LangChain and LlamaIndex retrievers, when their libraries are installed (else a SKIP; the
  test suite runs them): the same retriever object, called again after a downgrade, returns
  nothing the reader lost.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg

from groundkit.client import Groundkit
from groundkit.gate.tap import Counts, Tap
from groundkit.gate.throwaway import GateDatabases, connect_dict

LEAK = Counts(leaks=1)
QUERY = "compost"


def _world(gk: Groundkit) -> None:
    gk.put_member("mia", "T2")
    gk.put_space("open", "T0")
    gk.put_space("board", "T0")
    gk.put_object("tiered", 1, "course_section", "open", "T2", "Compost course", "compost for tier two")
    gk.put_object("boarded", 1, "board_post", "board", "T0", "Compost board", "compost on the board")
    gk.put_object("deleted", 1, "board_post", "open", "T0", "Compost sale", "compost sale on friday")
    gk.put_object("kept", 1, "board_post", "open", "T0", "Compost tips", "compost tips for all")
    for object_id in ("tiered", "boarded", "deleted", "kept"):
        gk.record_engagement(object_id, "mia", "view")


# Each step, then the object it must have removed from the reader's view.
STEPS: tuple[tuple[str, Callable[[Groundkit], object], str], ...] = (
    ("a downgrade", lambda gk: gk.put_member("mia", "T1"), "tiered"),
    ("a board made private", lambda gk: gk.put_space("board", "T0", private=True), "boarded"),
    ("a delete", lambda gk: gk.delete_object("deleted", 2), "deleted"),
)


def run_section(dbs: GateDatabases, tap: Tap, opts: Any) -> None:
    for mode in ("latest", "top"):
        dsn = dbs.clone()
        try:
            with Groundkit.connect(dsn) as gk:
                _home_steps(gk, tap, mode)
        finally:
            dbs.drop(dsn)
    dsn = dbs.clone()
    try:
        with Groundkit.connect(dsn) as gk, connect_dict(dsn) as conn:
            _world(gk)
            _engagement_refusal(gk, conn, tap)
            _retrievers(gk, tap)
    finally:
        dbs.drop(dsn)


def _home_steps(gk: Groundkit, tap: Tap, mode: str) -> None:
    _world(gk)
    seen = {i.object_id for i in gk.home("mia", mode)}  # type: ignore[arg-type]
    tap.check(seen == {"tiered", "boarded", "deleted", "kept"}, f"home {mode}: the reader sees the world",
              [f"saw {sorted(seen)}"], counts=Counts(missing=1))
    for what, step, gone in STEPS:
        step(gk)
        seen = {i.object_id for i in gk.home("mia", mode)}  # type: ignore[arg-type]
        tap.check(gone not in seen, f"home {mode}: {what} removes the object at the next statement",
                  [f"LEAK: {gone} still in {sorted(seen)}"], counts=LEAK)
    tap.check("kept" in seen, f"home {mode}: the object nothing touched is still there",
              [f"saw {sorted(seen)}"], counts=Counts(missing=1))


def _refusal(conn: psycopg.Connection[Any], object_id: str, member: str) -> tuple[str | None, str]:
    try:
        conn.execute("select groundkit.record_engagement(%s, %s, 'view')", (object_id, member))
    except psycopg.Error as exc:
        return exc.sqlstate, (exc.diag.message_primary or "").replace(object_id, "<id>")
    return None, "accepted"


def _engagement_refusal(gk: Groundkit, conn: psycopg.Connection[Any], tap: Tap) -> None:
    gk.put_member("low", "T0")
    before = conn.execute("select coalesce(sum(score), 0) as s from groundkit.engagement_daily").fetchone()
    invisible = _refusal(conn, "tiered", "low")
    missing = _refusal(conn, "no-such-object", "low")
    after = conn.execute("select coalesce(sum(score), 0) as s from groundkit.engagement_daily").fetchone()
    tap.check(invisible == missing and missing[0] == "GK009" and before == after,
              "record_engagement: an invisible object is refused exactly as a missing one, and counts nothing",
              [f"invisible: {invisible}", f"missing: {missing}", f"counted before {before}, after {after}"],
              counts=LEAK)


def _retrievers(gk: Groundkit, tap: Tap) -> None:
    gk.put_member("mia", "T2")
    adapters: list[tuple[str, Callable[[], Callable[[], set[str]]]]] = [
        ("LangChain", lambda: _langchain(gk)), ("LlamaIndex", lambda: _llamaindex(gk))]
    for name, make in adapters:
        try:
            call = make()
        except ImportError as exc:
            tap.skip(f"{name} retriever: a downgrade counts at the next call", f"not installed ({exc})")
            continue
        first = call()
        gk.put_member("mia", "T1")
        second = call()
        gk.put_member("mia", "T2")
        tap.check("tiered" in first and "tiered" not in second,
                  f"{name} retriever: a downgrade between two calls of one retriever removes the hit",
                  [f"LEAK: first call {sorted(first)}, after the downgrade {sorted(second)}"], counts=LEAK)


def _langchain(gk: Groundkit) -> Callable[[], set[str]]:
    from groundkit.integrations.langchain import GroundkitRetriever

    retriever = GroundkitRetriever(client=gk, reader_sub="mia", k=10)
    return lambda: {str(d.metadata["object_id"]) for d in retriever.invoke(QUERY)}


def _llamaindex(gk: Groundkit) -> Callable[[], set[str]]:
    from groundkit.integrations.llamaindex import GroundkitRetriever

    retriever = GroundkitRetriever(gk, reader_sub="mia", k=10)
    return lambda: {str(n.node.metadata["object_id"]) for n in retriever.retrieve(QUERY)}
