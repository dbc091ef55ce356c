"""What a reader's search tells it about content it may not see (issue 39, items 1-5 and 13).

The world is the gate's (groundkit/gate/side_channels.py): a T1 reader, and for each invisible
kind (higher tier, ungranted private space, granted private space above the reader's tier,
another member's owner-only note) a word of its own, merged and pending.
"""

from __future__ import annotations

import io
from typing import Any

import psycopg
import pytest
from psycopg.rows import tuple_row

import groundkit
from evals.bench.__main__ import main as bench_main
from groundkit import Groundkit
from groundkit.gate import roles, side_channels
from groundkit.gate.side_channels import ABSENT, COMMON, KINDS, READER, owner_view, word
from groundkit.gate.tap import Tap
from tests.conftest import upgrade_revisions_only


def _differences(gk: Groundkit, state: str) -> list[str]:
    bad = []
    for kind in KINDS:
        for text in (word(kind, state), f"{word(kind, state)} {COMMON}"):
            want = owner_view(gk.conn, text.replace(word(kind, state), ABSENT), ABSENT)
            got = owner_view(gk.conn, text, word(kind, state))
            if got != want:
                bad.append(f"{kind} {text!r}: {got} != {want}")
    return bad


def test_pending_part_is_not_scored_for_a_word_only_invisible_pending_content_holds(gk: Groundkit) -> None:
    """Item 1: whether the pending part is scored (and what the planner says of it) depends on
    the reader's buckets only; it used to count every pending posting of the term."""
    side_channels.build_visible(gk, filler=30)
    side_channels.add_invisible(gk, copies=3)
    assert _differences(gk, "pending") == []
    # and the pending part still counts where the reader may see it
    gk.put_object("mine", 1, "board_post", "sc_open", "T0", "", f"{word('higher_tier', 'pending')} visible")
    _rows, lines = owner_view(gk.conn, word("higher_tier", "pending"), "-")
    assert "groundkit pruned: 1 pending chunks in the top k of the pending part" in lines


def test_granted_private_space_above_the_readers_tier_is_not_read(gk: Groundkit) -> None:
    """Item 2: a granted private space whose policy needs a higher tier is not among the
    reader's buckets; its lists used to be read (100 postings: a second, deeper round)."""
    side_channels.build_visible(gk, filler=30)
    side_channels.add_invisible(gk, copies=100)
    assert _differences(gk, "merged") == []
    # a member raised to the space's tier reads it again
    gk.put_member(READER, "T2")
    rows, _lines = owner_view(gk.conn, word("granted_space_above_tier", "merged"), "-")
    assert len(rows) == 10


def test_reader_login_is_told_nothing_and_gets_the_same_before_and_after_invisible_content(
        server_dsn: str, dsn: str) -> None:
    """Item 3: a reader's login at client_min_messages = debug1 gets no groundkit DEBUG line,
    and the same rows, with or without invisible content (it used to get the rounds' depths,
    candidates and bounds, and the pending part's line)."""
    texts = [text for _k, _s, text in side_channels.queries()] + [COMMON, ABSENT]
    with Groundkit.connect(dsn) as gk, roles.login_roles(server_dsn, dsn) as who, \
            psycopg.connect(who.reader, autocommit=True) as login:
        side_channels.build_visible(gk, filler=30)
        before = side_channels.reader_view(login, texts)
        side_channels.add_invisible(gk, copies=70)
        after = side_channels.reader_view(login, texts)
        # the owner's session still sees how search ran
        _rows, lines = owner_view(gk.conn, COMMON, "-")
    assert after == before
    assert all(not notices for _text, _rows, notices in after), after
    assert lines and all(line.startswith("groundkit pruned: ") for line in lines)


def test_gate_section_passes(server_dsn: str, dsn: str) -> None:
    tap = Tap(io.StringIO())
    side_channels._run(server_dsn, dsn, tap)
    assert tap.failed == [] and len(tap.results) == 3


def test_timing_benchmark_runs_every_kind(server_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Item 4: the benchmark runs and prints a ratio for every kind and state (timings are its
    output, never asserted)."""
    assert bench_main(["sidechannel", "--dsn", server_dsn, "--runs", "3", "--filler", "40", "--copies", "5"]) == 0
    out = capsys.readouterr().out
    for kind in KINDS:
        for state in side_channels.STATES:
            assert f"| {kind} | {state} |" in out, out
    assert "| visible (control) |" in out


PLAN_SETTINGS = ("enable_nestloop = off", "enable_hashagg = off", "cpu_tuple_cost = 0.5",
                 "enable_hashjoin = off", "enable_mergejoin = off", "enable_sort = off", "work_mem = '64kB'")


def _answers(conn: psycopg.Connection[Any], queries: list[str], fn: str, extra: str) -> list[Any]:
    out = []
    for q in queries:
        out.append(conn.cursor(row_factory=tuple_row).execute(
            "select chunk_id, score from groundkit." + fn + "('t3', %s, 60" + extra + ")",  # noqa: S608 - fixed names
            (q,)).fetchall())
    return out


def test_order_and_scores_do_not_depend_on_the_plan(gk: Groundkit) -> None:
    """Item 5: 60 chunks with the same text (the top 60 of every query) have the same score to
    the last bit and come back by (object_id, chunk_seq), whatever the strategy, and session
    settings a reader may change move no score and swap no chunk. (Summed in the order rows
    came in, their scores differed in the last bit, and that noise ordered them.)"""
    gk.put_member("t3", "T3")
    gk.put_space("open", "T0")
    words = ["granite", "marble", "basalt", "quartz", "slate", "pumice"]
    tied = " ".join(w for i, w in enumerate(words) for _ in range(i + 1))
    for i in range(60):
        gk.put_object(f"tie{i:02d}", 1, "board_post", "open", "T0", "", tied)
    for i in range(200):
        gk.put_object(f"other{i:03d}", 1, "board_post", "open", "T0", "",
                      f"{words[i % 6]} {words[(i + 1) % 6]} and filler text of other kinds")
    queries = [" ".join(words[:n]) for n in range(3, 7)] + ["pumice slate quartz basalt"]
    conn = gk.conn
    scores: set[float] = set()
    for merged in (False, True):
        if merged:
            gk.merge_pending()
        for fn, extra in (("_search_pruned", ""), ("_search_pruned", ", strategy => 'scan'"),
                          ("_search_pruned", ", strategy => 'threshold'"), ("_search_pruned", ", start_depth => 1"),
                          ("_search_exhaustive", "")):
            want = _answers(conn, queries, fn, extra)
            for answer in want:  # the tied chunks, by chunk id (their object ids' order)
                assert len({score for _c, score in answer}) == 1 and answer == sorted(answer), (fn, extra, answer)
            scores |= {answer[0][1] for answer in want}
            for setting in PLAN_SETTINGS:
                conn.execute("set " + setting)
                try:
                    assert _answers(conn, queries, fn, extra) == want, (fn, extra, setting, merged)
                finally:
                    conn.execute("reset " + setting.split(" = ")[0])
    assert len(scores) == len(queries)  # every strategy, merged or pending: the same score to the bit


def test_query_terms_are_bounded(gk: Groundkit) -> None:
    """Item 13, as issue 52 changed it: 64 distinct terms are scored (a repeated term counts
    once); past 64 a query is not refused, search keeps the 64 of the highest IDF and says so
    (the rule itself: tests/test_query_syntax.py)."""
    gk.put_member("r", "T0")
    gk.put_space("open", "T0")
    gk.put_object("o", 1, "board_post", "open", "T0", "", " ".join(str(1000 + i) for i in range(65)))
    hits = gk.search("r", " ".join(str(1000 + i) for i in range(64)) + " 1000 1000")
    assert [h.object_id for h in hits] == ["o"]
    assert hits[0].query_notice is None and gk.last_query_notice is None
    hits = gk.search("r", " ".join(str(1000 + i) for i in range(65)))
    assert [h.object_id for h in hits] == ["o"]
    assert gk.last_query_notice is not None and "65 distinct terms in english" in gk.last_query_notice
    assert hits[0].query_notice == gk.last_query_notice
    assert gk.conn.execute("select * from groundkit.search('nobody', %s)",
                           (" ".join(f"x{i}" for i in range(65)),)).fetchall() == []


def test_revision_0013_drops_the_pending_counts_by_rank_alone(empty_dsn: str) -> None:
    """_pending_dfs took the reader's rank and counted every pending posting; today's takes the
    reader's buckets too, and revision 0013 drops the old overload once."""
    upgrade_revisions_only(empty_dsn, "0012")
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        conn.execute("create function groundkit._pending_dfs(p_terms text[], p_rank integer)"
                     " returns table (term text, df bigint, present boolean) language sql as"
                     " 'select null::text, 0::bigint, false'")
    groundkit.migrate(empty_dsn, gate=False)
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        rows = conn.execute("select oid::regprocedure::text from pg_proc where proname = '_pending_dfs'").fetchall()
    assert rows == [("groundkit._pending_dfs(text[],integer,bigint[])",)]
