"""Citations and snippets in every hit (issue 44): search's citation columns, the snippet's
matching, markers and escaping, and fetch_citation's context under search's permission
predicate. Against a real Postgres, through the Python API, SQL and the CLI."""

from __future__ import annotations

import html
import io
import json
import re
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row
from typer.testing import CliRunner

import groundkit
from groundkit import Groundkit, InvalidArgument
from groundkit.cli import app
from groundkit.gate import roles
from groundkit.gate.golden import GoldenRun, load_golden, load_grid, real_searcher
from groundkit.gate.tap import Tap
from tests.conftest import upgrade_revisions_only

runner = CliRunner()

SEGMENTS: list[dict[str, Any]] = [
    {"start_ms": 755_000 + i * 6_000, "end_ms": 755_000 + i * 6_000 + 5_500, "text": text}
    for i, text in enumerate([
        "Welcome back to the glaze clinic.",
        "Today we talk about kilns and cones.",
        "The first rule of crawling glaze is a clean bisque.",
        "Dust and oil keep the glaze from gripping.",
        "Wipe every pot with a damp sponge.",
        "Then let it dry before you dip it.",
        "Questions came in about shivering.",
        "Shivering is a fit problem between clay and glaze.",
    ])
]


def _marked(snippet: str) -> list[str]:
    return re.findall(r"<mark>(.*?)</mark>", snippet)


def _world(gk: Groundkit) -> None:
    gk.put_member("ana", "T1")
    gk.put_member("bo", "T0")
    gk.put_space("studio", "T0")
    gk.put_space("board", "T0")


# -- search: the citation columns --------------------------------------------------------------


def test_search_hit_carries_its_transcript_times_and_chunker(gk: Groundkit) -> None:
    _world(gk)
    gk.put_object("talk", 1, "transcript", "studio", "T0", "Glaze clinic", "", segments=SEGMENTS)
    hit = next(h for h in gk.search("ana", "crawling glaze bisque") if h.object_id == "talk")
    assert hit.start_ms is not None and hit.end_ms is not None
    assert SEGMENTS[0]["start_ms"] <= hit.start_ms <= SEGMENTS[2]["start_ms"] < hit.end_ms
    assert hit.chunker == "segments"
    assert hit.heading_path is None and hit.thread_id is None


def test_search_hit_of_a_reply_names_its_thread(gk: Groundkit) -> None:
    _world(gk)
    gk.put_object("t1", 1, "board_post", "board", "T0", "Kiln wash recipes", "Share your kiln wash.")
    gk.put_object("t1-r1", 1, "board_post", "board", "T0", "Half and half", "Alumina and kaolin, half each.",
                  metadata={"thread_id": "t1", "thread_title": "Kiln wash recipes"})
    hits = {h.object_id: h for h in gk.search("ana", "alumina kaolin")}
    assert (hits["t1-r1"].thread_id, hits["t1-r1"].thread_title) == ("t1", "Kiln wash recipes")
    # found through its thread's subject, which its text does not contain; its snippet is its own text
    (reply,) = [h for h in gk.search("ana", "recipes") if h.object_id == "t1-r1"]
    assert reply.content == "Alumina and kaolin, half each." and "<mark>" not in (reply.snippet or "")
    opening = next(h for h in gk.search("ana", "share wash") if h.object_id == "t1")
    assert (opening.thread_id, opening.thread_title) == ("t1", "Kiln wash recipes")  # its own thread


def test_search_columns_in_sql_and_python_agree(gk: Groundkit, raw: psycopg.Connection[Any]) -> None:
    _world(gk)
    gk.put_object("d1", 1, "document", "studio", "T0", "Glazes", "Glaze chemistry for potters.")
    cols = [d.name for d in raw.execute("select * from groundkit.search('ana', 'glaze')").description or []]
    assert cols[-9:] == ["char_start", "char_end", "heading_path", "thread_id", "thread_title", "chunker", "snippet",
                         "bm25_rank", "dense_rank"]  # (each leg's rank: hybrid's, null in the other modes)
    # (the query notice is a NOTICE in SQL: docs/bm25/analysis.md, "Long questions")
    assert sorted(cols) == sorted(c for c in groundkit.SearchHit.model_fields if c != "query_notice")


# -- the snippet ---------------------------------------------------------------------------------


def test_snippet_marks_stems_like_ranking_not_substrings(gk: Groundkit) -> None:
    _world(gk)
    gk.put_object("d1", 1, "document", "studio", "T0", "Runs",
                  "The kiln was running hot. A rerun of the firing and a runner in the shed; it runs daily.")
    (hit,) = gk.search("ana", "runs")
    assert sorted(_marked(hit.snippet or "")) == ["running", "runs"]  # stem 'run'; not 'rerun', 'runner'


def test_snippet_query_syntax_has_no_meaning(gk: Groundkit) -> None:
    _world(gk)
    gk.put_object("d1", 1, "document", "studio", "T0", "Quotes", "O'Brien's kiln: a back\\slash & a pipe | here.")
    hits = gk.search("ana", "O'Brien's back\\slash & | ! :* ( ) kiln")
    assert [h.object_id for h in hits] == ["d1"] and "<mark>kiln</mark>" in (hits[0].snippet or "")


def test_snippet_is_short_and_around_the_match(gk: Groundkit) -> None:
    _world(gk)
    filler = " ".join(f"word{i}" for i in range(120))
    gk.put_object("d1", 1, "document", "studio", "T0", "Long", f"{filler} the celadon glaze {filler}")
    (hit,) = gk.search("ana", "celadon")
    assert _marked(hit.snippet or "") == ["celadon"]
    assert len((hit.snippet or "").split()) <= 40 < len(hit.content.split())


def test_snippet_markers_are_chosen_per_call(gk: Groundkit, raw: psycopg.Connection[Any]) -> None:
    _world(gk)
    gk.put_object("d1", 1, "document", "studio", "T0", "Glazes", "A celadon glaze.")
    (hit,) = gk.search("ana", "celadon", snippet_start="[[", snippet_end="]]")
    assert "[[celadon]]" in (hit.snippet or "") and "<mark>" not in (hit.snippet or "")
    row = raw.execute("select snippet from groundkit.search('ana', 'celadon', snippet_start => '**',"
                      " snippet_end => '**')").fetchone()
    assert row is not None and "**celadon**" in row[0]
    default = raw.execute("select snippet from groundkit.search('ana', 'celadon')").fetchone()
    assert default is not None and "<mark>celadon</mark>" in default[0]


def test_snippet_escapes_html_so_a_chunk_cannot_forge_or_inject_markup(gk: Groundkit) -> None:
    _world(gk)
    body = ('Fake <mark>celadon</mark> and <script>alert("it\'s celadon")</script> & <b onclick=x>celadon</b> '
            "1 < 2 > 0 \x01celadon\x02")
    gk.put_object("d1", 1, "document", "studio", "T0", "Evil", body)
    (hit,) = gk.search("ana", "celadon")
    snippet = hit.snippet or ""
    # the only tags are the markers, around the matched words; everything else is text
    assert re.findall(r"<[^>]*>", snippet) == ["<mark>", "</mark>"] * snippet.count("<mark>")
    assert _marked(snippet) == ["celadon"] * 4
    assert "&lt;script&gt;" in snippet and "&lt;mark&gt;" in snippet and "&amp;" in snippet
    assert "&quot;" in snippet and "&#39;" in snippet and "\x01" not in snippet and "\x02" not in snippet
    # unescaped, the chunk's own text is back, markup included
    assert "<script>alert(" in html.unescape(snippet.replace("<mark>", "").replace("</mark>", ""))


def test_snippet_markers_are_checked(gk: Groundkit, raw: psycopg.Connection[Any]) -> None:
    _world(gk)
    for bad in ({"snippet_start": "x" * 65}, {"snippet_end": "\x02"}):
        with pytest.raises(InvalidArgument):
            gk.search("ana", "glaze", **bad)  # type: ignore[arg-type]
    for start, end in ((None, "]"), ("[", "x" * 65), ("\x01", "]")):
        with pytest.raises(psycopg.Error) as exc:
            raw.execute("select * from groundkit.search('ana', 'glaze', snippet_start => %s, snippet_end => %s)",
                        (start, end))
        assert exc.value.sqlstate == "GK005"


def test_snippet_of_a_redacted_object_is_gone_with_it(gk: Groundkit) -> None:
    _world(gk)
    gk.put_object("d1", 1, "document", "studio", "T0", "Secret", "The zaffre formula is cobalt oxide.")
    assert [h.object_id for h in gk.search("ana", "zaffre")] == ["d1"]
    gk.redact_object("d1", 2)
    assert gk.search("ana", "zaffre") == []
    assert all(gk.fetch_citation(r, "d1", v, 0) is None for r in ("ana", "bo") for v in (1, 2))


# -- fetch_citation ------------------------------------------------------------------------------


def test_fetch_citation_of_an_invisible_object_is_no_row_like_a_missing_one(gk: Groundkit) -> None:
    _world(gk)
    gk.put_space("vault", "T0", private=True)
    gk.grant_space("vault", "ana")
    gk.put_object("t2", 1, "document", "studio", "T2", "Tier two", "Cobalt carbonate notes.")
    gk.put_object("v1", 1, "document", "vault", "T0", "Vault", "Cobalt vault notes.")
    gk.put_object("n1", 1, "member_note", "studio", "T0", "Note", "Cobalt note.", owner_sub="ana", owner_only=True)
    gk.put_object("ok", 1, "document", "studio", "T0", "Open", "Cobalt open notes.")
    assert gk.fetch_citation("bo", "ok", 1, 0) is not None
    for oid in ("t2", "v1", "n1", "missing"):
        assert gk.fetch_citation("bo", oid, 1, 0) is None, oid
    assert gk.fetch_citation("ana", "v1", 1, 0) is not None  # the grant
    assert gk.fetch_citation("ana", "n1", 1, 0) is not None  # the owner
    assert gk.fetch_citation("nobody", "ok", 1, 0) is None  # no such reader: fail closed
    gk.put_member("bo", "T0", "suspended")
    assert gk.fetch_citation("bo", "ok", 1, 0) is None  # live status, read now


def test_fetch_citation_of_a_version_that_is_not_current_is_no_row(gk: Groundkit) -> None:
    _world(gk)
    gk.put_object("d1", 1, "document", "studio", "T0", "Old", "First text about slips.")
    gk.put_object("d1", 2, "document", "studio", "T0", "New", "Second text about slips.")
    assert gk.fetch_citation("ana", "d1", 1, 0) is None
    cited = gk.fetch_citation("ana", "d1", 2, 0)
    assert cited is not None and cited.content == "Second text about slips."
    assert gk.fetch_citation("ana", "d1", 2, 7) is None
    assert gk.fetch_citation("ana", "d1", 2, -1) is None
    gk.delete_object("d1", 3)
    assert gk.fetch_citation("ana", "d1", 2, 0) is None and gk.fetch_citation("ana", "d1", 3, 0) is None


def test_fetch_citation_of_a_board_post_is_the_whole_post(gk: Groundkit) -> None:
    _world(gk)
    body = "\n\n".join(f"Paragraph {i} about terra sigillata and burnishing, with care." * 6 for i in range(8))
    gk.put_object("r1", 1, "board_post", "board", "T0", "Re: Terra sig", body,
                  metadata={"thread_id": "t9", "thread_title": "Terra sigillata"})
    hits = [h for h in gk.search("ana", "burnishing", k=50) if h.object_id == "r1"]
    assert len(hits) > 1
    cited = gk.fetch_citation("ana", "r1", 1, hits[-1].chunk_seq)
    assert cited is not None
    assert cited.context == body and (cited.context_char_start, cited.context_char_end) == (0, len(body))
    assert (cited.thread_id, cited.thread_title) == ("t9", "Terra sigillata")
    assert cited.content == hits[-1].content


def test_fetch_citation_of_a_transcript_is_its_window_with_neighbouring_segments(gk: Groundkit) -> None:
    _world(gk)
    segments: list[dict[str, Any]] = [
        {"start_ms": i * 10_000, "end_ms": i * 10_000 + 9_000, "text": f"Segment {i} says " + "clay " * 40}
        for i in range(30)]
    segments[15]["text"] = "Segment 15 says shivering " + "clay " * 40
    gk.put_object("talk", 1, "transcript", "studio", "T0", "Talk", "", segments=segments)
    (hit,) = [h for h in gk.search("ana", "shivering") if h.object_id == "talk"]
    cited = gk.fetch_citation("ana", "talk", 1, hit.chunk_seq)
    assert cited is not None and cited.start_ms == hit.start_ms and cited.end_ms == hit.end_ms
    assert cited.context_start_ms is not None and cited.context_end_ms is not None
    covered = [i for i, s in enumerate(segments)
               if (hit.start_ms or 0) <= s["start_ms"] and s["end_ms"] <= (hit.end_ms or 0)]
    lo, hi = max(covered[0] - 2, 0), min(covered[-1] + 2, len(segments) - 1)
    assert (cited.context_start_ms, cited.context_end_ms) == (segments[lo]["start_ms"], segments[hi]["end_ms"])
    # segment texts trimmed and joined by one space, as the transcript chunker joins them
    assert cited.context == " ".join(str(s["text"]).strip() for s in segments[lo:hi + 1])
    assert " ".join(hit.content.split()) in " ".join(cited.context.split())
    joined = " ".join(str(s["text"]).strip() for s in segments)
    assert joined[cited.context_char_start:cited.context_char_end] == cited.context


def test_fetch_citation_of_another_text_is_the_chunk_with_its_neighbours(gk: Groundkit) -> None:
    _world(gk)
    body = "\n\n".join(f"Paragraph {i}: " + " ".join(f"w{i}x{j}" for j in range(60)) for i in range(12))
    gk.put_object("ev", 1, "event", "studio", "T0", "Open studio", body)
    chunks = [h for h in gk.search("ana", "w6x5 w6x6", k=50) if h.object_id == "ev"]
    seq = chunks[0].chunk_seq
    cited = gk.fetch_citation("ana", "ev", 1, seq)
    assert cited is not None and cited.char_start is not None and cited.context_char_start is not None
    assert cited.context == body[cited.context_char_start:cited.context_char_end]
    assert cited.context_char_start <= cited.char_start and cited.char_end <= cited.context_char_end  # type: ignore[operator]
    assert len(cited.context) > len(cited.content)


def test_fetch_citation_of_a_section_is_the_whole_section(gk: Groundkit) -> None:
    _world(gk)
    long = " ".join(f"slip{i}" for i in range(400))
    body = (f"# Clay bodies\n\nIntro text.\n\n## Slips\n\n{long}\n\n## Glazes\n\nGlaze text about frits."
            "\n\n## Slips\n\nA second section under the same heading, about casting.")
    gk.put_object("c1", 1, "course_section", "studio", "T0", "Ceramics 101", body)
    # (the best hit: slip399 whole; the other chunks hold its part "slip", docs/bm25/analysis.md)
    hit = next(h for h in gk.search("ana", "slip399") if h.object_id == "c1")
    assert "slip399" in hit.content
    assert hit.heading_path is not None and hit.heading_path[-1] == "Slips"
    cited = gk.fetch_citation("ana", "c1", 1, hit.chunk_seq)
    assert cited is not None and cited.heading_path == hit.heading_path
    assert "slip0 " in cited.context and "slip399" in cited.context
    assert "frits" not in cited.context and "casting" not in cited.context  # the run of chunks, not every "Slips"
    assert cited.context == body[cited.context_char_start:cited.context_char_end]


def test_fetch_citation_through_the_reader_role(server_dsn: str, dsn: str) -> None:
    roles._world(dsn)
    with roles.login_roles(server_dsn, dsn) as who:
        with psycopg.connect(who.reader, autocommit=True, row_factory=dict_row) as conn:
            rows = conn.execute("select * from groundkit.fetch_citation('alice', 'p1', 1, 0)").fetchall()
            assert len(rows) == 1 and "kiln" in rows[0]["content"].lower()
            hits = conn.execute("select snippet from groundkit.search('alice', 'kiln')").fetchall()
            assert hits and "<mark>" in hits[0]["snippet"].lower()
        with psycopg.connect(who.nobody, autocommit=True) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("select * from groundkit.fetch_citation('alice', 'p1', 1, 0)")


def test_fetch_citation_bad_arguments(gk: Groundkit) -> None:
    _world(gk)
    with pytest.raises(InvalidArgument):
        gk.fetch_citation("ana", "d1", "1", 0)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        gk.fetch_citation("ana", "d\x00", 1, 0)
    assert gk.fetch_citation("ana", "d1", 1, 2**40) is None


# -- the gate ------------------------------------------------------------------------------------


def test_gate_catches_a_fetch_citation_that_ignores_the_reader(dsn: str) -> None:
    """The golden run's citation check passes against the real fetch_citation and fails against
    one that answers every reader as the top-tier member: the check can fail."""
    out = io.StringIO()
    tap = Tap(out)
    with Groundkit.connect(dsn) as gk, psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as admin:
        run = GoldenRun(gk, admin, real_searcher(gk), tap, load_golden(), load_grid()[2])
        run.setup()
        assert run.check_citations("citations, real")
        row = admin.execute("select pg_get_functiondef('groundkit.fetch_citation(text,text,bigint,integer)'"
                            "::regprocedure) as src").fetchone()
        assert row is not None and "groundkit._reader(fetch_citation.reader_sub)" in row["src"]
        admin.execute(row["src"].replace("groundkit._reader(fetch_citation.reader_sub)", "groundkit._reader('eli')"))
        assert not run.check_citations("citations, leaky")
    assert "ok 2 - citations, real" in out.getvalue()
    assert "LEAK: fetch_citation as 'ana' of cs-joinery" in out.getvalue()
    assert tap.counts.leaks > 0


# -- the CLI and the migration ----------------------------------------------------------------


def test_cli_search_json_and_cite(dsn: str) -> None:
    with Groundkit.connect(dsn) as gk:
        _world(gk)
        gk.put_object("talk", 1, "transcript", "studio", "T0", "Glaze clinic", "", segments=SEGMENTS)
    result = runner.invoke(app, ["search", "--as", "ana", "crawling glaze", "--json", "--dsn", dsn])
    assert result.exit_code == 0, result.output
    hit = json.loads(result.output.splitlines()[0])
    assert hit["chunker"] == "segments" and "<mark>crawling</mark>" in hit["snippet"]
    table = runner.invoke(app, ["search", "--as", "ana", "crawling glaze", "--dsn", dsn])
    assert table.exit_code == 0 and "▶ 12:35" in table.output, table.output
    cite = runner.invoke(app, ["cite", "talk", "1", str(hit["chunk_seq"]), "--as", "ana", "--json", "--dsn", dsn])
    assert cite.exit_code == 0, cite.output
    assert "clean bisque" in json.loads(cite.output)["context"]
    hidden = runner.invoke(app, ["cite", "talk", "1", "0", "--as", "nobody", "--dsn", dsn])
    missing = runner.invoke(app, ["cite", "nothing", "1", "0", "--as", "ana", "--dsn", dsn])
    assert hidden.exit_code == missing.exit_code == 1


def test_revision_0016_drops_the_search_signature_before_citations(empty_dsn: str) -> None:
    upgrade_revisions_only(empty_dsn, "0015")
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        conn.execute("create function groundkit.search(reader_sub text, query text, k integer default 10,"
                     " content_types text[] default null, space_ids text[] default null)"
                     " returns table (object_id text) language sql as 'select null::text'")
    groundkit.migrate(empty_dsn, gate=False)
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        sigs = [r[0] for r in conn.execute("select oid::regprocedure::text from pg_proc"
                                           " where proname = 'search' and pronamespace = 'groundkit'::regnamespace")]
        assert sigs == ["groundkit.search(text,text,integer,text[],text[],text,text)"]
        conn.execute("select * from groundkit.search('x', 'y')")  # five arguments or fewer: not ambiguous


def test_demo_shows_a_jump_to_time_a_reply_found_through_its_thread_and_a_section_snippet(
        server_dsn: str, embed_home: Path) -> None:
    # (GROUNDKIT_HOME: the local model the demo's hybrid section loads is exported there, once a session)
    result = runner.invoke(app, ["demo", "--dsn", server_dsn],
                           env={"COLUMNS": "200", "GROUNDKIT_HOME": str(embed_home)})
    assert result.exit_code == 0, result.output
    out = result.output
    assert "'blotchy cherry' -> at 12:41 of 'Finishing Clinic: Live Q&A'" in out
    assert "'Reply from Kofi', a reply in the thread 'Budget dust collection for a one-car garage'" in out
    assert "The reply's own text has none of the query's words: its thread's subject is indexed with it." in out
    arrow = "\N{SINGLE RIGHT-POINTING ANGLE QUOTATION MARK}"
    assert f"Joinery 3: Hand-cut Dovetails {arrow} Module 2: Sawing and chopping {arrow} Chopping out the waste" in out
    assert "Remove most of the waste with a coping saw" in out and "&lt;" not in out and "<mark>" not in out
    assert "fetch_citation returns the cited chunk with its whole section" in out


def test_fetch_citation_of_a_chunk_made_before_offsets_is_the_chunk_itself(
        gk: Groundkit, raw: psycopg.Connection[Any]) -> None:
    """Chunks made before revision 0015 have no offsets until a rebuild: their context is the
    chunk alone (a transcript's window still comes from its segments' times)."""
    _world(gk)
    gk.put_object("ev", 1, "event", "studio", "T0", "Open studio", "Kiln opening at noon. " * 200)
    gk.put_object("talk", 1, "transcript", "studio", "T0", "Glaze clinic", "", segments=SEGMENTS)
    raw.execute("update groundkit.chunks set char_start = null, char_end = null, chunker = null")
    cited = gk.fetch_citation("ana", "ev", 1, 1)
    assert cited is not None and cited.context == cited.content and cited.context_char_start is None
    talk = gk.fetch_citation("ana", "talk", 1, 0)
    assert talk is not None and talk.context_start_ms == SEGMENTS[0]["start_ms"]
    assert "clean bisque" in talk.context
