"""The pure rule model, and the hypothesis state machine that checks groundkit against it."""

from __future__ import annotations

import itertools
import os
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from groundkit.gate import stateful
from groundkit.gate.model import Model, ModelError

_n = itertools.count()


def test_model_statuses() -> None:
    m = Model()
    m.put_space("s", "T0")
    kw: dict[str, Any] = {"content_type": "board_post", "space_id": "s", "tier_visibility": "T1", "title": "t",
                          "body": "b"}
    assert m.put_object("o", 2, **kw) == "applied"
    assert m.put_object("o", 2, **kw) == "duplicate"
    assert m.put_object("o", 1, **kw) == "stale"
    with pytest.raises(ModelError) as e:
        m.put_object("o", 2, **{**kw, "body": "other"})
    assert e.value.sqlstate == "GK001"
    assert m.retier_object("o", 3, "T2") == "applied"
    assert m.delete_object("o", 1) == "applied"  # deletes win whatever their version
    assert m.put_object("o", 99, **kw) == "tombstoned"
    assert m.redact_object("o", 1) == "applied"  # redaction upgrades a deletion
    assert m.redact_object("o", 5) == "tombstoned"
    assert m.delete_object("never", 1) == "applied"
    assert m.put_object("never", 1, **kw) == "tombstoned"


def test_model_explains_each_rule() -> None:
    m = Model()
    m.put_member("a", "T1")
    m.put_member("p", "T3", "pending")
    m.put_space("open", "T0")
    m.put_space("hi", "T2")
    m.put_space("priv", "T0", private=True)
    base: dict[str, Any] = {"content_type": "board_post", "title": "t", "body": "b"}
    m.put_object("o1", 1, space_id="open", tier_visibility="T2", **base)
    m.put_object("o2", 1, space_id="hi", tier_visibility="T0", **base)
    m.put_object("o3", 1, space_id="priv", tier_visibility="T0", **base)
    m.put_object("o4", 1, space_id="open", tier_visibility="T0", owner_sub="b", owner_only=True, **base)
    m.put_object("o5", 1, space_id="open", tier_visibility="T0", **base)
    assert "tier_visibility" in m.explain("a", "o1").rule
    assert "min_tier" in m.explain("a", "o2").rule
    assert "private" in m.explain("a", "o3").rule
    assert "owner_only" in m.explain("a", "o4").rule
    assert m.explain("a", "o5").visible
    assert "pending" in m.explain("p", "o5").rule
    assert "unknown" in m.explain("nobody", "o5").rule
    m.grant_space("priv", "a")
    assert m.visible("a", "o3")


def test_state_machine_against_the_database(server_dsn: str, template_db: str) -> None:
    """Few examples here; `groundkit eval gate` runs many."""
    def new_db() -> str:
        name = f"gk_sm_{os.getpid()}_{next(_n)}"
        with psycopg.connect(server_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("create database {} template {} strategy file_copy").format(
                sql.Identifier(name), sql.Identifier(template_db)))
        return make_conninfo(server_dsn, dbname=name)

    def drop_db(dsn: str) -> None:
        with psycopg.connect(server_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("drop database if exists {} with (force)").format(
                sql.Identifier(str(conninfo_to_dict(dsn)["dbname"]))))

    stats, failure = stateful.run(new_db, drop_db, examples=6, max_steps=15)
    assert failure is None, failure
    assert stats.examples >= 6 and stats.searches > 0
