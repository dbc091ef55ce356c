"""Runs that pin what they read (issue 40, docs/runs.md), on a real PostgreSQL."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from typer.testing import CliRunner

from groundkit import Groundkit
from groundkit.cli.main import app
from groundkit.errors import (
    GroundkitError,
    InvalidArgument,
    InvariantViolation,
    ReaderNotAllowed,
    UnknownFlow,
    UnknownRun,
)
from groundkit.gate import roles
from groundkit.gate.roles import login_roles
from groundkit.gate.tap import Tap

SECTION = "# Pricing\n\n" + " ".join(f"commission pricing rule {i} applies to every sale." for i in range(60))


@pytest.fixture
def world(community: Groundkit) -> Groundkit:
    gk = community
    gk.put_object("course-1", 1, "course_section", "open", "T0", "Commissions", SECTION)
    gk.put_object("post-1", 1, "board_post", "open", "T0", "How I price a commission",
                  "I price a commission by the hour, plus materials.")
    gk.put_object("post-2", 1, "board_post", "members", "T1", "Commission tiers",
                  "Members price a commission in three tiers.")
    return gk


def _counts(gk: Groundkit, run_id: uuid.UUID | str) -> tuple[int, int]:
    row = gk.conn.execute(
        "select (select count(*) from groundkit.runs where run_id = %(r)s) as runs,"
        " (select count(*) from groundkit.run_searches where run_id = %(r)s) as searches", {"r": str(run_id)},
    ).fetchone()
    assert row is not None
    return int(row["runs"]), int(row["searches"])


def test_run_records_every_search_with_its_pins(world: Groundkit) -> None:
    gk = world
    with gk.run(flow="tutor", reader="t1", model="m-1", prompt_version="tutor@7") as run:
        hits = run.search("price a commission", k=8)
        more = run.search("materials", k=3, content_types=["board_post"])
    assert isinstance(run.id, uuid.UUID)
    assert hits and more
    header = gk.conn.execute("select * from groundkit.runs where run_id = %s", (run.id,)).fetchone()
    assert header is not None
    assert (header["flow"], header["reader_sub"], header["reader_tier"], header["reader_status"]) == \
        ("tutor", "t1", "T1", "active")
    assert (header["model"], header["prompt_version"], header["error_class"]) == ("m-1", "tutor@7", None)
    assert header["log_marker"] == gk.snapshot_marker() and header["snapshot"] is not None
    searches = gk.conn.execute("select * from groundkit.run_searches where run_id = %s order by search_no",
                               (run.id,)).fetchall()
    assert [s["query"] for s in searches] == ["price a commission", "materials"]
    first = searches[0]
    assert first["mode"] == "bm25" and first["params"] == {"k": 8, "content_types": None, "space_ids": None}
    assert searches[1]["params"]["content_types"] == ["board_post"]
    assert (first["reader_tier"], first["reader_status"], first["reader_rank"]) == ("T1", "active", 1)
    assert first["log_marker"] == gk.snapshot_marker() and first["snapshot"] is not None
    # exactly the hits the search returned, in its order, each pinned
    assert [(h["object_id"], h["object_version"], h["chunk_seq"], h["score"]) for h in first["hits"]] == \
        [(h.object_id, h.object_version, h.chunk_seq, h.score) for h in hits]
    chunk = gk.conn.execute("select chunker_version, chunk_chars from groundkit.chunks where object_id = %s"
                            " and chunk_seq = %s", (hits[0].object_id, hits[0].chunk_seq)).fetchone()
    assert chunk is not None
    assert first["hits"][0]["chunker_version"] == chunk["chunker_version"]
    assert first["hits"][0]["chunk_chars"] == chunk["chunk_chars"]


def test_run_search_returns_what_search_returns(world: Groundkit) -> None:
    with world.run(flow="home", reader="t2") as run:
        hits = run.search("commission", k=10)
    assert hits == world.search("t2", "commission", k=10)


def test_run_search_and_its_record_are_one_statement(world: Groundkit, dsn: str) -> None:
    """The SQL function itself writes the hits it returns: no client in between."""
    rid = uuid.uuid4()
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("select object_id, chunk_seq from groundkit.run_search(%s, 1, 'home', 't1',"
                            " 'commission', 5)", (rid,)).fetchall()
        recorded = conn.execute("select hits from groundkit.run_searches where run_id = %s", (rid,)).fetchone()
        assert recorded is not None
        assert [(h["object_id"], h["chunk_seq"]) for h in recorded[0]] == [tuple(r) for r in rows]
        conn.execute("select groundkit.record_run(%s, 'home', 't1')", (rid,))
        conn.commit()
    assert _counts(world, rid) == (1, 1)


def test_searches_without_a_header_cannot_commit(world: Groundkit, dsn: str) -> None:
    rid = uuid.uuid4()
    with psycopg.connect(dsn) as conn:
        conn.execute("select * from groundkit.run_search(%s, 1, 'home', 't1', 'commission', 5)", (rid,))
        with pytest.raises(psycopg.errors.ForeignKeyViolation):
            conn.commit()
    assert _counts(world, rid) == (0, 0)


def test_run_that_raises_is_recorded_with_its_error_class(world: Groundkit) -> None:
    with pytest.raises(KeyError), world.run(flow="tutor", reader="t1") as run:
        run.search("commission", k=3)
        raise KeyError("the app failed")
    row = world.conn.execute("select error_class from groundkit.runs where run_id = %s", (run.id,)).fetchone()
    assert row == {"error_class": "KeyError"}
    assert _counts(world, run.id) == (1, 1)


def test_run_whose_search_fails_keeps_its_earlier_searches(world: Groundkit) -> None:
    with pytest.raises(InvalidArgument), world.run(flow="tutor", reader="t1") as run:
        run.search("commission", k=3)
        run.search("commission", k=3, snippet_start="\x01")  # refused by the database (GK005)
    row = world.conn.execute("select error_class from groundkit.runs where run_id = %s", (run.id,)).fetchone()
    assert row == {"error_class": "groundkit.errors.InvalidArgument"}
    assert _counts(world, run.id) == (1, 1)


def test_unknown_flow_is_a_typed_error_and_records_nothing(world: Groundkit) -> None:
    with pytest.raises(UnknownFlow), world.run(flow="nonsense", reader="t1") as run:
        run.search("commission", k=3)
    assert _counts(world, run.id) == (0, 0)
    with pytest.raises(UnknownFlow), world.run(flow="nonsense", reader="t1") as quiet:
        pass
    assert _counts(world, quiet.id) == (0, 0)


def test_configured_flow_is_accepted(world: Groundkit) -> None:
    world.conn.execute("select groundkit.add_flow('support')")
    with world.run(flow="support", reader="t1") as run:
        run.search("commission")
    assert _counts(world, run.id) == (1, 1)


def test_negative_tokens_are_a_typed_error_and_not_recorded(world: Groundkit) -> None:
    with pytest.raises(InvalidArgument), world.run(flow="tutor", reader="t1") as run:
        run.record_llm(model="m-1", tokens_in=-1, tokens_out=2, meter=False)
    row = world.conn.execute("select llm_calls, tokens_in from groundkit.runs where run_id = %s", (run.id,)).fetchone()
    assert row == {"llm_calls": [], "tokens_in": 0}
    with pytest.raises(InvalidArgument):
        world._fetch("select groundkit.record_run(gen_random_uuid(), 'home', 't1', llm_calls =>"
                     " '[{\"model\": \"m\", \"tokens_in\": -5, \"tokens_out\": 0}]')", {})


def test_record_llm_counts_tokens_and_cost(world: Groundkit) -> None:
    with world.run(flow="tutor", reader="t1", model="m-1") as run:
        run.record_llm(model="m-1", tokens_in=1800, tokens_out=240, cost=0.5, meter=False)
        run.record_llm(model="m-2", tokens_in=10, tokens_out=5, meter=False)  # unpriced
    row = world.conn.execute("select tokens_in, tokens_out, cost, unpriced from groundkit.runs where run_id = %s",
                             (run.id,)).fetchone()
    assert row is not None
    assert (row["tokens_in"], row["tokens_out"], float(row["cost"]), row["unpriced"]) == (1810, 245, 0.5, 1)


def test_record_llm_meters_the_call_with_the_run_id(world: Groundkit) -> None:
    with world.run(flow="tutor", reader="t1") as run:
        run.record_llm(model="m-1", tokens_in=100, tokens_out=20)
    calls = world.conn.execute("select flow, reader, tokens_in from groundkit.calls where run_id = %s",
                               (run.id,)).fetchall()
    assert calls == [{"flow": "tutor", "reader": "t1", "tokens_in": 100}]


def test_run_context_records_its_citation_ids(world: Groundkit) -> None:
    with world.run(flow="tutor", reader="t1") as run:
        hits = run.search("price a commission", k=3)
        ctx = run.context(hits, budget_tokens=4000)
    assert "<retrieved_context>" in ctx.text
    header = world.replay(run.id).run
    assert [(c["id"], c["object_id"], c["chunk_seq"]) for c in header.context] == \
        [(c.id, c.object_id, c.chunk_seq) for c in ctx.citations]


def test_run_ids_are_not_reused(world: Groundkit) -> None:
    with world.run(flow="home", reader="t1") as run:
        run.search("commission")
    with pytest.raises(InvalidArgument), world.run(flow="home", reader="t1", run_id=run.id) as again:
        again.search("commission")
    assert _counts(world, run.id) == (1, 1)


def test_run_table_is_append_only(world: Groundkit) -> None:
    with world.run(flow="home", reader="t1") as run:
        run.search("commission")
    for stmt in ("update groundkit.runs set flow = 'home'", "delete from groundkit.runs",
                 "truncate groundkit.runs cascade", "update groundkit.run_searches set query = 'x'",
                 "delete from groundkit.run_searches", "truncate groundkit.run_searches"):
        with pytest.raises(InvariantViolation), world.conn.transaction():
            world._fetch(stmt, {})
    assert _counts(world, run.id) == (1, 1)


# -- replay --------------------------------------------------------------------------------


def test_replay_returns_the_exact_chunks_after_edits_retiers_deletes_and_rebuild(world: Groundkit) -> None:
    gk = world
    with gk.run(flow="tutor", reader="t1") as run:
        hits = run.search("price a commission", k=10)
    assert {h.object_id for h in hits} >= {"course-1", "post-1", "post-2"}
    gk.put_object("course-1", 2, "course_section", "open", "T0", "Commissions", "# Pricing\n\nRewritten.")
    gk.retier_object("post-2", 2, "T3")
    gk.delete_object("post-1", 2)
    gk.conn.execute("select groundkit.rebuild()")
    replay = gk.replay(run.id)
    assert [(h.object_id, h.object_version, h.chunk_seq, h.score) for h in replay.hits] == \
        [(h.object_id, h.object_version, h.chunk_seq, h.score) for h in hits]
    assert [h.content for h in replay.hits] == [h.content for h in hits]
    assert [(h.char_start, h.char_end, h.chunker) for h in replay.hits] == \
        [(h.char_start, h.char_end, h.chunker) for h in hits]
    assert all(h.verified and not h.redacted for h in replay.hits)
    now = {h.object_id: h.now for h in replay.hits}
    assert now == {"course-1": "newer version", "post-2": "retiered", "post-1": "deleted"}


def test_replay_says_current_for_untouched_objects(world: Groundkit) -> None:
    with world.run(flow="tutor", reader="t0") as run:
        run.search("materials", k=3)
    assert [h.now for h in world.replay(run.id).hits] == ["current"]


def test_replay_of_a_redacted_object_returns_the_marker_never_the_text(world: Groundkit) -> None:
    with world.run(flow="tutor", reader="t1") as run:
        hits = run.search("materials hour", k=3)
    assert hits[0].object_id == "post-1"
    world.redact_object("post-1", 2)
    hit = world.replay(run.id).hits[0]
    assert (hit.object_id, hit.redacted, hit.content, hit.title, hit.now) == ("post-1", True, None, None, "redacted")
    assert "plus materials" not in hit.model_dump_json()


def test_replay_of_an_unknown_run_and_a_malformed_id(world: Groundkit) -> None:
    with pytest.raises(UnknownRun):
        world.replay(uuid.uuid4())
    with pytest.raises(InvalidArgument):
        world.replay("not-a-uuid")
    with pytest.raises(InvalidArgument):  # the database's answer too
        world._fetch("select * from groundkit.replay_run('not-a-uuid')", {})


def test_replay_permissions_own_runs_other_readers_and_the_auditor(world: Groundkit, server_dsn: str,
                                                                     dsn: str) -> None:
    with world.run(flow="tutor", reader="t1") as mine:
        mine.search("commission")
    with world.run(flow="tutor", reader="t2") as theirs:
        theirs.search("commission")
    name = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
    with login_roles(server_dsn, make_conninfo(server_dsn, dbname=name)) as who:
        login = str(psycopg.conninfo.conninfo_to_dict(who.reader)["user"])
        world.conn.execute("insert into groundkit.login_members (login, member_sub) values (%s, 't1')", (login,))
        with Groundkit.connect(who.reader) as reader:
            assert len(reader.replay(mine.id, reader="t1").hits) == len(world.replay(mine.id).hits)
            with pytest.raises(ReaderNotAllowed):
                reader.replay(theirs.id, reader="t1")
            with pytest.raises(ReaderNotAllowed):  # the login binding: not as t2 either
                reader.replay(theirs.id, reader="t2")
            with pytest.raises(GroundkitError) as denied:
                reader.runs()
            assert denied.value.sqlstate == "42501"
        # an auditor login replays anyone's run
        with Groundkit.connect(who.auditor) as aud:
            assert aud.replay(theirs.id).run.reader_sub == "t2"
            assert {r.run_id for r in aud.runs()} == {str(mine.id), str(theirs.id)}


# -- a client killed mid-run ---------------------------------------------------------------

CHILD = textwrap.dedent("""
    import sys, time
    from groundkit import Groundkit
    gk = Groundkit.connect(sys.argv[1])
    with gk.run(flow="tutor", reader="t1") as run:
        run.search("commission", k=5)
        print(run.id, flush=True)
        if sys.argv[2] == "hang":
            time.sleep(120)
    print("done", flush=True)
""")


def _child(dsn: str, mode: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-c", CHILD, dsn, mode], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


def test_client_killed_mid_run_leaves_none_of_it(world: Groundkit, dsn: str) -> None:
    proc, run_id = _child(dsn, "hang")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 30
    while world.conn.execute("select count(*) as n from pg_stat_activity where datname = current_database()"
                             " and pid <> pg_backend_pid() and state like 'idle in transaction%%'").fetchone() \
            != {"n": 0} and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _counts(world, run_id) == (0, 0)


def test_client_that_finishes_leaves_the_whole_run(world: Groundkit, dsn: str) -> None:
    proc, run_id = _child(dsn, "finish")
    assert proc.wait(timeout=60) == 0
    assert _counts(world, run_id) == (1, 1)


# -- list, diff, prune, the CLI ------------------------------------------------------------


def test_runs_list_filters_by_flow_reader_and_since(world: Groundkit) -> None:
    ids = {}
    for flow, reader in (("tutor", "t1"), ("home", "t1"), ("tutor", "t2")):
        with world.run(flow=flow, reader=reader) as run:
            run.search("commission")
        ids[(flow, reader)] = str(run.id)
    assert {r.run_id for r in world.runs(flow="tutor")} == {ids[("tutor", "t1")], ids[("tutor", "t2")]}
    assert {r.run_id for r in world.runs(reader="t1")} == {ids[("tutor", "t1")], ids[("home", "t1")]}
    assert world.runs(since=datetime.now(UTC) + timedelta(minutes=1)) == []
    assert all(r.searches == 1 and r.hits >= 1 for r in world.runs())


def test_runs_diff_says_what_entered_left_moved_and_why(world: Groundkit) -> None:
    gk = world
    with gk.run(flow="tutor", reader="t1") as a:
        before = a.search("price a commission", k=10)
    gk.retier_object("post-2", 2, "T3")                    # leaves: re-tier
    gk.put_object("post-3", 1, "board_post", "open", "T0", "Price", "price a commission price commission")
    gk.delete_object("post-1", 2)                           # leaves: delete
    with gk.run(flow="tutor", reader="t1") as b:
        after = b.search("price a commission", k=10)
    rows = {r.object_id: r for r in gk.diff_runs(a.id, b.id)}
    assert rows["post-2"].change == "left" and rows["post-2"].why == "re-tier"
    assert rows["post-1"].change == "left" and rows["post-1"].why == "delete"
    assert rows["post-3"].change == "entered" and rows["post-3"].why == "new version"
    assert {h.object_id for h in before} - {h.object_id for h in after} == {"post-1", "post-2"}


def test_prune_is_the_owners_alone_and_leaves_a_tombstone(world: Groundkit, server_dsn: str, dsn: str) -> None:
    with world.run(flow="tutor", reader="t1") as run:
        run.search("commission")
    name = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
    with login_roles(server_dsn, make_conninfo(server_dsn, dbname=name)) as who:
        for login in (who.reader, who.writer, who.nobody, who.auditor):
            with psycopg.connect(login) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("select groundkit.prune_runs(now())")
    assert world.prune_runs(datetime.now(UTC) + timedelta(seconds=5)) == 1
    assert _counts(world, run.id) == (0, 0)
    tomb = world.conn.execute("select kind, pruned_runs, pruned_searches from groundkit.runs").fetchall()
    assert tomb == [{"kind": "pruned", "pruned_runs": 1, "pruned_searches": 1}]
    with pytest.raises(UnknownRun):
        world.replay(run.id)


def test_cli_replay_json_one_object_per_hit(world: Groundkit, dsn: str) -> None:
    with world.run(flow="tutor", reader="t1") as run:
        hits = run.search("price a commission", k=5)
    world.redact_object("post-1", 2)
    out = CliRunner().invoke(app, ["replay", str(run.id), "--json", "--dsn", dsn])
    assert out.exit_code == 0, out.output
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    assert [(x["object_id"], x["object_version"], x["chunk_seq"], x["score"]) for x in lines] == \
        [(h.object_id, h.object_version, h.chunk_seq, h.score) for h in hits]
    for x, h in zip(lines, hits, strict=True):
        assert x["redacted"] is (h.object_id == "post-1")
        assert x["content"] == (None if h.object_id == "post-1" else h.content)
        assert x["now"] == ("redacted" if h.object_id == "post-1" else "current")


def test_cli_replay_errors(world: Groundkit, dsn: str) -> None:
    bad = CliRunner().invoke(app, ["replay", "not-a-uuid", "--dsn", dsn])
    assert bad.exit_code != 0 and "UUID" in bad.output
    unknown = CliRunner().invoke(app, ["replay", str(uuid.uuid4()), "--dsn", dsn])
    assert unknown.exit_code != 0 and "unknown run" in unknown.output


def test_cli_runs_list_json_and_diff(world: Groundkit, dsn: str) -> None:
    runs: list[Any] = []
    for _ in range(2):
        with world.run(flow="tutor", reader="t1") as run:
            run.search("price a commission")
        runs.append(run)
    world.retier_object("post-2", 2, "T3")
    with world.run(flow="home", reader="t1") as last:
        last.search("price a commission")
    out = CliRunner().invoke(app, ["runs", "list", "--flow", "tutor", "--since", "7d", "--json", "--dsn", dsn])
    assert out.exit_code == 0, out.output
    listed = [json.loads(line) for line in out.stdout.splitlines()]
    assert {x["run_id"] for x in listed} == {str(r.id) for r in runs}
    diff = CliRunner().invoke(app, ["runs", "diff", str(runs[0].id), str(last.id), "--json", "--dsn", dsn])
    assert diff.exit_code == 0, diff.output
    rows = {x["object_id"]: x for x in map(json.loads, diff.stdout.splitlines())}
    assert (rows["post-2"]["change"], rows["post-2"]["why"]) == ("left", "re-tier")


def test_gate_roles_section_checks_replay_permissions_and_replay_after_redaction(server_dsn: str, dsn: str) -> None:
    out = io.StringIO()
    tap = Tap(out)
    name = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
    roles._run(server_dsn, make_conninfo(server_dsn, dbname=name), tap)
    assert tap.failed == [], out.getvalue()
    assert "runs: a reader login replays its own member's runs only" in out.getvalue()
    assert "replay after a redaction: the redaction marker" in out.getvalue()


def test_cli_runs_prune_and_list_table(world: Groundkit, dsn: str) -> None:
    with world.run(flow="tutor", reader="t1") as run:
        run.search("commission")
    table = CliRunner().invoke(app, ["runs", "list", "--dsn", dsn])
    assert table.exit_code == 0 and "tutor" in table.stdout
    bad = CliRunner().invoke(app, ["runs", "prune", "--before", "yesterday", "--dsn", dsn])
    assert bad.exit_code != 0 and "ISO date" in bad.output
    later = (datetime.now(UTC) + timedelta(minutes=1)).isoformat()
    pruned = CliRunner().invoke(app, ["runs", "prune", "--before", later, "--dsn", dsn])
    assert pruned.exit_code == 0 and "pruned 1 runs" in pruned.stdout
    assert _counts(world, run.id) == (0, 0)


def test_run_inside_the_callers_transaction_is_a_savepoint(world: Groundkit) -> None:
    """On a connection already in a transaction the run commits or rolls back with it."""
    with world.conn.transaction():
        with world.run(flow="home", reader="t1") as kept:
            kept.search("commission")
        assert _counts(world, kept.id) == (1, 1)
    assert _counts(world, kept.id) == (1, 1)
    with pytest.raises(RuntimeError), world.conn.transaction():
        with world.run(flow="home", reader="t1") as undone:
            undone.search("commission")
        raise RuntimeError("the caller's transaction fails")
    assert _counts(world, undone.id) == (0, 0)


def test_run_search_checks_before_writing_even_without_hits(world: Groundkit) -> None:
    rid = uuid.uuid4()
    with pytest.raises(UnknownFlow), world.conn.transaction():
        world._fetch("select * from groundkit.run_search(%(r)s, 1, 'nonsense', 't1', 'zzzqqqxx')", {"r": rid})
    assert _counts(world, rid) == (0, 0)
