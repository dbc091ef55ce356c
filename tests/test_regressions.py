"""Regression tests for the known defects of the library groundkit replaces."""

from __future__ import annotations

import inspect
import traceback
from typing import Any

import psycopg
import pydantic
import pytest

import groundkit
from groundkit import DatabaseUnavailable, Groundkit, GroundkitError, SearchHit
from groundkit.protocols import Retriever

Raw = psycopg.Connection[tuple[Any, ...]]

TRICKY_IDS = ["x' OR '1'='1", "%", "_", "\\", "a%", "a_c", "abc", "x", "'; delete from groundkit.objects; --",
              "\\%", "*", ".*", "$1", "%s", "%(object_id)s"]


def test_unescaped_delete_predicate(community: Groundkit, raw: Raw) -> None:
    """delete_object deletes exactly the object named, whatever characters its id holds."""
    gk = community
    for i, oid in enumerate(TRICKY_IDS):
        gk.put_object(oid, 1, "board_post", "open", "T0", f"post {i}", f"ceramics note {i}")
    for victim in ("x' OR '1'='1", "%", "_", "\\", "'; delete from groundkit.objects; --", "%s"):
        live_before = {r[0] for r in raw.execute(
            "select object_id from groundkit.objects where state = 'live'").fetchall()}
        assert gk.delete_object(victim, 2).status.value == "applied"
        live_after = {r[0] for r in raw.execute(
            "select object_id from groundkit.objects where state = 'live'").fetchall()}
        assert live_before - live_after == {victim}
        assert live_after == live_before - {victim}
    remaining = {h.object_id for h in gk.search("t0", "ceramics note", k=100)}
    assert remaining == set(TRICKY_IDS) - {"x' OR '1'='1", "%", "_", "\\", "'; delete from groundkit.objects; --",
                                           "%s"}
    for oid in remaining:
        assert gk.retier_object(oid, 2, "T0").status.value == "applied"


SECRET = "s3cret-pw"
BAD_DSN = f"postgresql://user:{SECRET}@127.0.0.1:1/db"


def _chain(err: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    todo: list[BaseException | None] = [err]
    while todo:
        e = todo.pop()
        if e is None or any(e is s for s in seen):
            continue
        seen.append(e)
        todo += [e.__cause__, e.__context__]
    return seen


def _assert_no_secret(err: BaseException) -> None:
    assert SECRET not in str(err)
    assert SECRET not in repr(err)
    assert SECRET not in "".join(traceback.format_exception(err))
    assert SECRET not in str(err.__cause__) and SECRET not in repr(err.__cause__)
    assert SECRET not in str(err.__context__) and SECRET not in repr(err.__context__)
    # nor anywhere down the chain, attributes included: psycopg's connection errors keep the
    # failed connection, password and all, in ``pgconn``
    for e in _chain(err):
        assert SECRET not in repr(e)
        assert SECRET not in repr(vars(e))
        pgconn = getattr(e, "pgconn", None)
        assert pgconn is None or SECRET.encode() not in (pgconn.password or b"")


def test_credential_not_leaked_through_exception_cause() -> None:
    with pytest.raises(DatabaseUnavailable) as info:
        Groundkit.connect(BAD_DSN)
    _assert_no_secret(info.value)
    with pytest.raises(DatabaseUnavailable) as info2:
        groundkit.connect(BAD_DSN)
    _assert_no_secret(info2.value)


def test_credential_not_leaked_through_migrate() -> None:
    for call in (groundkit.migrate, groundkit.migration_state):
        with pytest.raises(GroundkitError) as info:
            call(BAD_DSN)
        _assert_no_secret(info.value)


def test_in_process_state_does_not_shadow_persisted_state(community: Groundkit, dsn: str) -> None:
    """Two clients on two connections: what B commits counts in A's very next call."""
    a = community
    a.put_object("post", 1, "course_section", "open", "T2", "Glaze chemistry", "glaze chemistry")
    a.put_object("other", 1, "board_post", "open", "T0", "Glaze", "glaze swap")
    assert {h.object_id for h in a.search("t2", "glaze")} == {"post", "other"}
    with Groundkit.connect(dsn) as b:
        b.put_member("t2", "T1")
        assert {h.object_id for h in a.search("t2", "glaze")} == {"other"}
        b.put_member("t2", "T2")
        assert {h.object_id for h in a.search("t2", "glaze")} == {"post", "other"}
        b.delete_object("other", 2)
        assert {h.object_id for h in a.search("t2", "glaze")} == {"post"}
        assert a.put_object("other", 3, "board_post", "open", "T0", "Glaze", "glaze swap").status.value \
            == "tombstoned"
        b.put_space("open", "T0", private=True)
        assert a.search("t2", "glaze") == []
        b.retier_object("post", 2, "T3")
        b.grant_space("open", "t3")
        assert [h.object_version for h in a.search("t3", "glaze")] == [2]


SQL_FUNCTIONS = ["put_member", "put_space", "grant_space", "revoke_space", "put_object", "retier_object",
                 "delete_object", "redact_object", "search"]


def test_parameter_names_match_the_sql_functions(raw: Raw) -> None:
    """A parameter named differently from its protocol: every public method's parameters are
    the SQL function's input parameters, by name and in order (then keyword-only ones that
    choose among SQL functions, such as search's mode)."""
    for name in SQL_FUNCTIONS:
        rows = raw.execute(
            "select p.proargnames, p.proargmodes from pg_proc p join pg_namespace n on n.oid = p.pronamespace"
            " where n.nspname = 'groundkit' and p.proname = %s",
            (name,),
        ).fetchall()
        assert len(rows) == 1, f"groundkit.{name} is overloaded or missing"
        names, modes = rows[0]
        sql_params = [n for i, n in enumerate(names) if modes is None or modes[i] in ("i", "b")]
        py_params = [p.name for p in list(inspect.signature(getattr(Groundkit, name)).parameters.values())[1:]
                     if p.kind is not inspect.Parameter.KEYWORD_ONLY]  # without self
        assert py_params == sql_params, name


def test_search_signature_matches_the_retriever_protocol(gk: Groundkit) -> None:
    impl = inspect.signature(Groundkit.search)
    proto = inspect.signature(Retriever.search)
    assert [(p.name, p.kind, p.default) for p in impl.parameters.values()] == [
        (p.name, p.kind, p.default) for p in proto.parameters.values()
    ]
    assert isinstance(gk, Retriever)


def test_search_hit_rejects_a_negative_score() -> None:
    """The cross-encoder score contract: a score is never negative."""
    fields: dict[str, Any] = {"object_id": "a", "object_version": 1, "chunk_seq": 0, "content_type": "event",
                              "space_id": "s", "title": "t", "content": "c"}
    with pytest.raises(pydantic.ValidationError):
        SearchHit(**fields, score=-0.01)
    with pytest.raises(pydantic.ValidationError):
        SearchHit(**fields, score=float("-inf"))
    assert SearchHit(**fields, score=0.0).score == 0.0


def test_bm25_never_produces_a_negative_score(community: Groundkit, raw: Raw) -> None:
    gk = community
    # a term in every document, and in nearly none; long and short documents
    for i in range(12):
        gk.put_object(f"p{i}", 1, "board_post", "open", "T0", "Glaze", "glaze " * (1 + 10 * i) + f"item{i}")
    for query in ("glaze", "glaze glaze glaze", "item3 glaze", "item11"):
        rows = raw.execute("select score from groundkit.search(reader_sub => 't0', query => %s, k => 200)",
                           (query,)).fetchall()
        assert rows and all(r[0] >= 0 for r in rows)
        assert all(h.score >= 0 for h in gk.search("t0", query, k=200))


def test_scratch_database_errors_carry_no_password() -> None:
    """The demo and the evals create scratch databases; a failure there must not leak either."""
    import traceback

    from groundkit.databases import fresh_database
    from groundkit.errors import DatabaseUnavailable

    secret = "s3cret-scratch-pw"
    try:
        fresh_database(f"postgresql://user:{secret}@127.0.0.1:1/db", "groundkit_demo")
    except DatabaseUnavailable as err:
        assert err.__cause__ is None and err.__context__ is None
        assert secret not in "".join(traceback.format_exception(err))
    else:  # pragma: no cover - nothing listens on port 1
        raise AssertionError("expected DatabaseUnavailable")
