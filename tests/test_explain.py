"""groundkit explain and groundkit.explain_visibility: every clause of the permission predicate
with its value for a (reader, object) pair, the clause that decides, and an answer that is
search's own (the same functions), on a real PostgreSQL; the owner's and the auditor's only."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row
from typer.testing import CliRunner

from groundkit import Groundkit, InvalidArgument
from groundkit.cli import app
from groundkit.explain import explain, explain_visibility
from groundkit.gate.roles import login_roles

runner = CliRunner()

CLAUSES = ["reader", "object", "tombstone", "object tier", "space min tier", "space grant", "owner only",
           "current version", "predicate"]


@pytest.fixture
def world(community: Groundkit) -> Groundkit:
    gk = community
    gk.put_object("open-post", 1, "board_post", "open", "T0", "Kiln", "kiln schedule for saturday")
    gk.put_object("t2-post", 1, "board_post", "open", "T2", "Kiln", "kiln glaze secrets")
    gk.put_object("members-post", 1, "board_post", "members", "T0", "Kiln", "kiln members corner")
    gk.put_object("vault-post", 1, "board_post", "vault", "T0", "Kiln", "kiln vault plans")
    gk.put_object("note", 1, "member_note", "notes", "T0", "Kiln", "my kiln notes", owner_sub="t1", owner_only=True)
    gk.put_object("gone", 1, "board_post", "open", "T0", "Kiln", "kiln sale")
    gk.delete_object("gone", 2)
    gk.put_object("scrubbed", 1, "board_post", "open", "T0", "Kiln", "kiln phone number")
    gk.redact_object("scrubbed", 2)
    return gk


def _decided(gk: Groundkit, reader: str, object_id: str) -> tuple[bool, str]:
    e = explain_visibility(gk, reader, object_id)
    return e.visible, e.decided_by


def test_explain_lists_every_clause_with_its_value(world: Groundkit) -> None:
    e = explain_visibility(world, "t2", "t2-post")
    assert [c.clause for c in e.clauses] == CLAUSES
    assert e.visible and e.decided_by == "predicate" and e.consistent
    values = {c.clause: c.value for c in e.clauses}
    assert values["reader"] == "status active, tier T2 (rank 2)"
    assert values["object"] == "board_post, version 1"
    assert values["tombstone"] == "live"
    assert values["object tier"] == "version 1 is stamped T2 (rank 2); the reader's rank is 2"
    assert values["space min tier"] == "space open needs T0 (rank 0)"
    assert values["space grant"] == "space open is not private: no grant needed"
    assert values["owner only"] == "not owner-only"
    assert values["current version"] == "version 1 is current; 1 chunk(s) of it to search"
    assert all(c.holds for c in e.clauses)


@pytest.mark.parametrize(("reader", "object_id", "clause", "value"), [
    ("ghost", "open-post", "reader", "no row in reader_authority"),
    ("pending2", "open-post", "reader", "status pending, tier T2 (rank 2)"),
    ("suspended3", "open-post", "reader", "status suspended, tier T3 (rank 3)"),
    ("revoked3", "open-post", "reader", "status revoked, tier T3 (rank 3)"),
    ("t1", "t2-post", "object tier", "version 1 is stamped T2 (rank 2); the reader's rank is 1"),
    ("t0", "members-post", "space min tier", "space members needs T1 (rank 1)"),
    ("t3", "vault-post", "space grant", "space vault is private; the reader has no grant"),
    ("t2", "note", "owner only", "owner-only, owner t1"),
    ("t2", "gone", "tombstone", "deleted (a tombstone: terminal)"),
    ("t2", "scrubbed", "tombstone", "redacted (a tombstone: terminal)"),
    ("t2", "nothing-here", "object", "no such object"),
])
def test_explain_names_the_clause_that_decides(world: Groundkit, reader: str, object_id: str, clause: str,
                                               value: str) -> None:
    e = explain_visibility(world, reader, object_id)
    assert not e.visible and e.decided_by == clause and e.consistent
    [decider] = [c for c in e.clauses if c.decides]
    assert decider.holds is False and decider.value == value
    assert next(c for c in e.clauses if c.clause == "predicate").holds is False


def test_explain_lists_every_reason_against_not_only_the_first(world: Groundkit) -> None:
    """A suspended T3 member and a T2 object in a private space without a grant: the reader
    decides, and the grant clause says no too (judged with the tier reader_authority states)."""
    world.put_object("vault-t2", 1, "board_post", "vault", "T2", "Kiln", "kiln vault t2")
    e = explain_visibility(world, "suspended3", "vault-t2")
    holds = {c.clause: c.holds for c in e.clauses}
    assert e.decided_by == "reader"
    assert holds["object tier"] is True and holds["space grant"] is False
    e = explain_visibility(world, "ghost", "vault-t2")
    assert {c.clause: c.holds for c in e.clauses}["object tier"] is None  # no tier to judge by


def test_explain_agrees_with_search_for_every_pair(world: Groundkit) -> None:
    """For every reader of the community and every object: explain's answer is what search and
    fetch_citation say, and the clauses agree with it."""
    readers = ["t0", "t1", "t2", "t3", "pending2", "suspended3", "revoked3", "ghost"]
    objects = ["open-post", "t2-post", "members-post", "vault-post", "note", "gone", "scrubbed", "nothing-here"]
    for reader in readers:
        seen = {h.object_id for h in world.search(reader, "kiln", k=200)}
        for object_id in objects:
            e = explain_visibility(world, reader, object_id)
            assert e.visible == (object_id in seen), (reader, object_id, e)
            assert e.visible == (world.fetch_citation(reader, object_id, 1, 0) is not None)
            assert e.consistent, e


def test_explain_follows_a_change_at_once(world: Groundkit) -> None:
    assert _decided(world, "t2", "t2-post") == (True, "predicate")
    world.put_member("t2", "T1")
    assert _decided(world, "t2", "t2-post") == (False, "object tier")
    world.put_member("t2", "T3")
    world.grant_space("vault", "t3")
    assert _decided(world, "t3", "vault-post") == (True, "predicate")
    world.revoke_space("vault", "t3")
    assert _decided(world, "t3", "vault-post") == (False, "space grant")
    world.retier_object("t2-post", 2, "T0")
    assert _decided(world, "t0", "t2-post") == (True, "predicate")


def _authority(raw: Any, extra_rows: str) -> None:
    view = ("create or replace view groundkit.reader_authority as"
            " select m.member_sub, m.tier, m.status from groundkit.members m union all ")
    raw.execute(view + extra_rows)  # extra_rows: SQL written by the tests themselves


def test_explain_of_an_ambiguous_or_unknown_tier_reader(world: Groundkit, raw: Any) -> None:
    _authority(raw, "select 't3', 'T3', 'active' union all select 'ghost', 'platinum', 'active'")
    e = explain_visibility(world, "t3", "open-post")
    assert (e.visible, e.decided_by, e.clauses[0].value) == (
        False, "reader", "2 rows in reader_authority (ambiguous: fail closed)")
    e = explain_visibility(world, "ghost", "open-post")
    assert (e.visible, e.decided_by, e.clauses[0].value) == (
        False, "reader", "status active, tier platinum (unknown to groundkit.tiers)")


@pytest.mark.parametrize(("reader", "object_id"), [("", "x"), ("x", ""), ("x" * 257, "x"), ("a\x00", "x")])
def test_explain_refuses_bad_ids(world: Groundkit, reader: str, object_id: str) -> None:
    with pytest.raises(InvalidArgument):
        explain_visibility(world, reader, object_id)


# -- with a query ---------------------------------------------------------------------------


def test_explain_query_says_which_terms_match_and_where_the_chunks_rank(world: Groundkit) -> None:
    world.put_object("long", 1, "event", "open", "T0", "Firing day",
                     "Kiln firing starts at nine.\n\n" + "Bring water and a hat. " * 400
                     + "\n\nThe kiln cools overnight: wear gloves.")
    e = explain(world, "t0", "long", "kiln gloves")
    q = e.query
    assert q is not None and q.mode == "bm25" and q.terms == ("glove", "kiln")
    by_seq = {c.chunk_seq: c for c in q.chunks}
    assert len(by_seq) > 2
    assert by_seq[0].matched == ("kiln",) and by_seq[max(by_seq)].matched == ("glove", "kiln")
    assert by_seq[1].matched == () and by_seq[1].rank is None
    hits = world.search("t0", "kiln gloves", k=200)
    want = {h.chunk_seq: n for n, h in enumerate(hits, start=1) if h.object_id == "long"}
    assert {s: c.rank for s, c in by_seq.items() if c.rank is not None} == want
    assert q.best_rank == min(want.values())
    assert all(c.rank is None for c in q.chunks if not c.matched)  # BM25 ranks only what matches


def test_explain_query_of_a_hidden_object_ranks_nothing(world: Groundkit) -> None:
    e = explain(world, "t1", "t2-post", "glaze")
    assert not e.visible and e.decided_by == "object tier"
    assert e.query is not None and e.query.best_rank is None
    assert [c.matched for c in e.query.chunks] == [("glaze",)]  # its chunk matches; the reader may not see it


def test_explain_query_records_no_sample(world: Groundkit) -> None:
    world.set_sample_rate(1.0)
    explain(world, "t0", "open-post", "kiln")
    assert world._scalar("select count(*) from groundkit.search_samples", {}) == 0
    world.search("t0", "kiln")
    assert world._scalar("select count(*) from groundkit.search_samples", {}) == 1


# -- the CLI ------------------------------------------------------------------------------------


def test_cli_explain_prints_the_clauses_and_the_decider(world: Groundkit, dsn: str) -> None:
    result = runner.invoke(app, ["explain", "--reader", "t1", "--object", "t2-post", "--dsn", dsn])
    assert result.exit_code == 0, result.output
    assert "hidden" in result.stdout and "object tier" in result.stdout
    assert "version 1 is stamped T2 (rank 2); the reader's rank is 1" in result.stdout
    result = runner.invoke(app, ["explain", "--reader", "t0", "--object", "open-post", "--query", "kiln", "--json",
                                 "--dsn", dsn])
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    assert body["visible"] is True and body["decided_by"] == "predicate"
    assert [c["clause"] for c in body["clauses"]] == CLAUSES
    assert body["query"]["best_rank"] == 1 and body["query"]["chunks"][0]["matched"] == ["kiln"]


# -- who may call it ----------------------------------------------------------------------------


@pytest.fixture
def logins(server_dsn: str, dsn: str) -> Iterator[Any]:
    with login_roles(server_dsn, dsn) as who:
        yield who


def _call(login_dsn: str) -> str:
    try:
        with psycopg.connect(login_dsn, autocommit=True, row_factory=dict_row) as conn:
            conn.execute("select * from groundkit.explain_visibility('t0', 'open-post')").fetchall()
            conn.execute("select * from groundkit.explain_match('open-post', 'kiln')").fetchall()
    except psycopg.Error as exc:
        return exc.sqlstate or "error"
    return "ok"


def test_only_the_owner_and_the_auditor_may_explain(world: Groundkit, logins: Any) -> None:
    assert _call(logins.reader) == "42501"
    assert _call(logins.writer) == "42501"
    assert _call(logins.nobody) == "42501"
    assert _call(logins.auditor) == "ok"


# -- the gate ---------------------------------------------------------------------------------


def test_gate_golden_checks_explain_against_search_for_every_pair(dsn: str) -> None:
    """The golden section with explain: after the initial grid and every scenario step, explain's
    answer equals search's for every (reader, object) pair, and its clauses agree."""
    from groundkit.gate.golden import GoldenRun, load_golden, load_grid, real_searcher
    from groundkit.gate.tap import Tap

    out = io.StringIO()
    tap = Tap(out)
    golden = load_golden()
    with Groundkit.connect(dsn) as gk, psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as admin:
        GoldenRun(gk, admin, real_searcher(gk), tap, golden, load_grid()[2], explain=True).run()
    assert tap.failed == [], out.getvalue()
    checks = [r for r in tap.results if "explain_visibility gives search's answer" in r.description]
    assert len(checks) == 1 + len(golden.steps)
    assert f"({len(golden.readers) * len(golden.objects)} pairs;" in checks[0].description


def test_gate_explain_check_fails_when_search_and_explain_disagree(dsn: str) -> None:
    """A search that answers every reader as the top-tier member: explain (search's predicate)
    disagrees with it on the cells it leaks, and the check says which."""
    from groundkit.gate.golden import GoldenRun, Hit, load_golden, load_grid, real_searcher
    from groundkit.gate.tap import Tap

    out = io.StringIO()
    tap = Tap(out)
    with Groundkit.connect(dsn) as gk, psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as admin:
        real = real_searcher(gk)

        def leaky(reader_sub: str, query: str, k: int = 10, content_types: Any = None,
                  space_ids: Any = None) -> list[Hit]:
            return real("eli", query, k)

        run = GoldenRun(gk, admin, leaky, tap, load_golden(), load_grid()[2], explain=True)
        assert run.setup()
        run.check_grid("grid", None)
    [check] = [r for r in tap.results if "explain_visibility" in r.description]
    assert not check.ok
    assert "explain says hidden (decided by reader), search says visible" in out.getvalue()
    assert check.diagnostics and all(d.startswith(("EXPLAIN:", "...")) for d in check.diagnostics)
