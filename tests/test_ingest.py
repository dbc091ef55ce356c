"""`groundkit ingest PATH` on real trees the tests write, into a real database: every format
becomes searchable (and nothing hidden does), unsafe entries are skipped with a reason, a re-run
is idempotent, missing files are reported and deleted on request, and the JSON Lines path is
bounded (issue 39, item 10)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb
from typer.testing import CliRunner

from groundkit.cli import app
from groundkit.client import Groundkit
from groundkit.errors import InvalidArgument
from groundkit.models import UNSAFE_ID_CHARS, escaped
from tests.test_loaders import VTT, write_pdf

runner = CliRunner()
GROUNDKIT = [sys.executable, "-c", "from groundkit.cli.main import app; app()"]
SRT = ("1\r\n00:00:01,000 --> 00:00:02,500\r\nHello <i>weavers</i>\r\n\r\n"
       "2\r\n00:12:41,000 --> 00:12:43,000\r\nShuttle timing\r\nmatters\r\n\r\n")
HTML = """<html><head><title>Loom care</title><style>.x { color: red } /* stylesecretword */</style></head>
<body><h1>Care</h1><p>Oil the beater weekly.</p><script>var scriptsecretword = 1;</script>
<div hidden>hiddensecretword</div><h2>Storage</h2><p>Keep the bench dry.</p></body></html>"""
MARKDOWN = "# Weaving course\n\n## Module one\n\n### Warping\n\nWind the warp on the board.\n"


def ingest(dsn: str, path: Path, *options: str) -> tuple[int, dict[str, Any], str]:
    result = runner.invoke(app, ["ingest", str(path), "--space", "library", "--tier", "T0", *options, "--json",
                                 "--dsn", dsn])
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 1, result.output
    return result.exit_code, json.loads(lines[0]), result.stderr


def search(gk: Groundkit, query: str) -> list[tuple[str, int | None]]:
    return [(h.object_id, h.start_ms) for h in gk.search("reader", query, k=20)]


@pytest.fixture
def library(gk: Groundkit) -> Groundkit:
    gk.put_space("library")
    gk.put_member("reader", "T0")
    return gk


def test_every_format_becomes_searchable_and_hidden_html_does_not(library: Groundkit, dsn: str,
                                                                  tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "course").mkdir(parents=True)
    (tree / "course" / "weaving.md").write_text(MARKDOWN)
    (tree / "care.html").write_text(HTML)
    write_pdf(tree / "book.pdf", [("Heddle basics", 0, "Heddles lift alternate threads."),
                                  ("Reeds", 1, "The reed spaces the warp evenly.")])
    (tree / "talk.vtt").write_text(VTT)
    (tree / "shop.srt").write_bytes(b"\xef\xbb\xbf" + SRT.encode())
    (tree / "notes.txt").write_text("Plain notes about selvedges.")
    code, report, _ = ingest(dsn, tree)
    assert code == 0 and report["failed"] == [] and report["skipped"] == []
    assert report["loaded"] == 6 and report["chunks"] >= 6
    gk = library
    rows = gk.conn.execute("select object_id, content_type, title from groundkit.objects order by 1").fetchall()
    assert [(r["object_id"], r["content_type"], r["title"]) for r in rows] == [
        ("book.pdf", "document", "book"), ("care.html", "document", "Loom care"),
        ("course/weaving.md", "document", "Weaving course"), ("notes.txt", "document", "notes"),
        ("shop.srt", "transcript", "shop"), ("talk.vtt", "transcript", "talk")]
    assert search(gk, "warp board")[0] == ("course/weaving.md", None)
    assert search(gk, "beater")[0][0] == "care.html"
    assert search(gk, "reed spaces")[0][0] == "book.pdf"
    assert search(gk, "scriptsecretword") == [] and search(gk, "stylesecretword") == []
    assert search(gk, "hiddensecretword") == []
    # a transcript hit carries its chunk's time (which segments share a chunk is the chunker's business)
    assert ("talk.vtt", 1000) in search(gk, "loom talk")
    [(srt_id, srt_ms)] = search(gk, "shuttle timing")
    assert srt_id == "shop.srt" and srt_ms is not None and srt_ms <= 761000
    body = gk.conn.execute("select body from groundkit.content_log where object_id = 'care.html'").fetchone()
    assert body == {"body": "# Care\n\nOil the beater weekly.\n\n## Storage\n\nKeep the bench dry."}
    segments = {r["object_id"]: r["segments"] for r in gk.conn.execute(
        "select object_id, segments from groundkit.content_log where segments is not null").fetchall()}
    assert segments["talk.vtt"][1] == {"start_ms": 761500, "end_ms": 764000,
                                       "text": "Bob Smith: Price by the hour, not by the piece"}
    assert segments["shop.srt"] == [{"start_ms": 1000, "end_ms": 2500, "text": "Hello weavers"},
                                    {"start_ms": 761000, "end_ms": 763000, "text": "Shuttle timing matters"}]
    # --content-type overrides the default, for every file
    code, report, _ = ingest(dsn, tree / "notes.txt", "--content-type", "member_note", "--owner", "reader",
                             "--owner-only")
    assert code == 0 and report["updated"] == 1
    row = gk.conn.execute("select content_type, owner_only, version from groundkit.objects"
                          " where object_id = 'notes.txt'").fetchone()
    assert row == {"content_type": "member_note", "owner_only": True, "version": 2}


def test_unsafe_and_bad_files_are_skipped_or_failed_and_the_rest_loads(library: Groundkit, dsn: str,
                                                                      tmp_path: Path) -> None:
    tree, outside = tmp_path / "tree", tmp_path / "outside"
    (tree / "sub").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.md").write_text("outsidesecretword")
    os.mkfifo(outside / "pipe.md")  # opening it would block: a run that ends never opened it
    os.symlink(outside / "secret.md", tree / "link.md")
    os.symlink(outside / "pipe.md", tree / "pipe.md")
    os.symlink(outside, tree / "sub" / "outdir")
    os.mkfifo(tree / "fifo.md")
    (tree / "image.md").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    (tree / "big.md").write_text("large " * 300)
    (tree / "broken.pdf").write_bytes(b"%PDF-1.7\n1 0 obj << /Type /Catalog >>\ngarbage")
    (tree / "broken.srt").write_text("1\n00:00:01,000 --> later\nno\n")
    (tree / "photo.jpeg").write_bytes(b"\xff\xd8\xff")
    (tree / "sub" / "fine.md").write_text("A fine file about bobbins.")
    code, report, stderr = ingest(dsn, tree, "--max-bytes", "1000")
    assert code == 1  # something failed; the rest loaded
    assert report["loaded"] == 1
    assert {s["path"]: s["reason"] for s in report["skipped"]} == {
        "big.md": "1800 bytes, over --max-bytes 1000",
        "fifo.md": "not a regular file (a FIFO, device or socket)",
        "image.md": "binary file (NUL bytes)",
        "link.md": "symlink to outside the base (not followed)",
        "photo.jpeg": "unsupported file type",
        "pipe.md": "symlink to outside the base (not followed)",
        "sub/outdir": "symlink to outside the base (not followed)",
    }
    failed = {f["path"]: f["reason"] for f in report["failed"]}
    assert set(failed) == {"broken.pdf", "broken.srt"}
    assert failed["broken.pdf"].startswith("malformed PDF: ") and failed["broken.srt"].startswith("malformed SRT: ")
    assert "failed broken.pdf: malformed PDF" in stderr
    assert search(library, "bobbins") == [("sub/fine.md", None)]
    assert search(library, "outsidesecretword") == []


def test_rerun_is_idempotent_and_missing_files_are_deleted_on_request(library: Groundkit, dsn: str,
                                                                      tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "a").mkdir(parents=True)
    for name in ("one", "two", "three"):
        (tree / "a" / f"{name}.md").write_text(f"# {name}\n\nAbout {name} looms.\n")
    (tree / "top.md").write_text("top loom")
    code, first, _ = ingest(dsn, tree)
    assert code == 0 and first["loaded"] == 4
    code, again, _ = ingest(dsn, tree)
    assert (again["loaded"], again["unchanged"], again["updated"], again["chunks"]) == (0, 4, 0, 0)
    (tree / "a" / "two.md").write_text("# two\n\nRewritten about heddles.\n")
    (tree / "a" / "three.md").unlink()
    code, changed, stderr = ingest(dsn, tree)
    assert (changed["unchanged"], changed["updated"], changed["missing"], changed["deleted"]) == (2, 1, ["a/three.md"],
                                                                                                 0)
    assert "missing (--delete-missing deletes it): a/three.md" in stderr
    gk = library
    versions = {r["object_id"]: (r["version"], r["state"]) for r in
                gk.conn.execute("select object_id, version, state from groundkit.objects").fetchall()}
    assert versions == {"a/one.md": (1, "live"), "a/two.md": (2, "live"), "a/three.md": (1, "live"),
                        "top.md": (1, "live")}
    assert search(gk, "heddles") == [("a/two.md", None)]
    # a subdirectory under the same base: ids stay relative to the base; only its own files count
    (tree / "top.md").unlink()
    code, sub, _ = ingest(dsn, tree / "a", "--base", str(tree), "--delete-missing")
    assert (sub["unchanged"], sub["missing"], sub["deleted"]) == (2, ["a/three.md"], 1)
    assert search(gk, "three") == []
    code, whole, _ = ingest(dsn, tree, "--delete-missing")
    assert (whole["unchanged"], whole["missing"], whole["deleted"]) == (2, ["top.md"], 1)
    # a deleted id stays deleted; an id another writer owns is left alone
    (tree / "top.md").write_text("back again")
    gk.put_object("mine.md", 1, "document", "library", "T0", "Mine", "written by the app")
    (tree / "mine.md").write_text("from a file")
    code, last, _ = ingest(dsn, tree)
    reasons = {s["path"]: s["reason"] for s in last["skipped"]}
    assert reasons["top.md"].startswith("object 'top.md' was deleted")
    assert reasons["mine.md"].startswith("object id 'mine.md' is taken by an object not ingested from this base")
    outside = runner.invoke(app, ["ingest", str(tmp_path), "--base", str(tree), "--space", "library", "--tier", "T0",
                                  "--dsn", dsn])
    assert outside.exit_code == 1 and "is not inside the base directory" in " ".join(outside.output.split())


def test_json_output_shape(library: Groundkit, dsn: str, tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("shape")
    (tmp_path / "b.bin").write_bytes(b"\x00")
    code, report, _ = ingest(dsn, tmp_path)
    assert code == 0
    assert set(report) == {"loaded", "unchanged", "updated", "deleted", "missing", "skipped", "failed", "chunks",
                           "seconds"}
    assert all(isinstance(report[k], int) for k in ("loaded", "unchanged", "updated", "deleted", "chunks"))
    assert isinstance(report["seconds"], float) and report["missing"] == [] and report["failed"] == []
    assert report["skipped"] == [{"path": "b.bin", "reason": "unsupported file type"}]


def _objects(dsn: str) -> dict[str, Any]:
    with Groundkit.connect(dsn) as gk:
        row = gk.conn.execute("""
            select count(*) as objects,
                   count(*) filter (where not exists (select 1 from groundkit.chunks c
                                                     where c.object_id = o.object_id)) as without_chunks
            from groundkit.objects o""").fetchone()
    assert row is not None
    return row


def test_ctrl_c_leaves_whole_objects_and_a_second_run_finishes(library: Groundkit, dsn: str, tmp_path: Path) -> None:
    for i in range(1000):
        (tmp_path / f"f{i:03}.md").write_text(f"# file {i}\n\n" + " ".join(f"word{i}x{j}" for j in range(300)))
    command = [*GROUNDKIT, "ingest", str(tmp_path), "--space", "library",
               "--tier", "T0", "--jobs", "2", "--dsn", dsn]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while _objects(dsn)["objects"] < 20 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert "interrupted" in stderr
    partial = _objects(dsn)
    assert 20 <= partial["objects"] < 1000 and partial["without_chunks"] == 0
    code, report, _ = ingest(dsn, tmp_path)
    assert code == 0 and report["loaded"] == 1000 - partial["objects"] and report["unchanged"] == partial["objects"]
    assert _objects(dsn) == {"objects": 1000, "without_chunks": 0}


# -- JSON Lines (issue 39, item 10) --------------------------------------------------------------

LINE = {"object_id": "j1", "version": 1, "content_type": "board_post", "space_id": "library",
        "tier_visibility": "T0", "title": "t", "body": "jsonl loom"}


def test_jsonl_with_a_bom_loads(library: Groundkit, dsn: str, tmp_path: Path) -> None:
    path = tmp_path / "objects.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(LINE).encode() + b"\r\n")
    result = runner.invoke(app, ["ingest", str(path), "--dsn", dsn])
    assert result.exit_code == 0, result.output
    assert "1 applied" in result.output and search(library, "loom") == [("j1", None)]


def test_jsonl_line_too_long_names_the_line(library: Groundkit, dsn: str, tmp_path: Path) -> None:
    path = tmp_path / "objects.jsonl"
    path.write_text(json.dumps(LINE) + "\n" + json.dumps({**LINE, "object_id": "j2", "body": "x" * 5000}) + "\n")
    code, report, _ = ingest(dsn, path, "--max-bytes", "1000")
    assert code == 1 and report["loaded"] == 0  # checked whole before anything of it is written
    assert report["failed"] == [{"path": "objects.jsonl", "reason": "objects.jsonl:2: line longer than 1000 bytes "
                                                                    "(--max-bytes)"}]


def _cli(dsn: str, path: Path | str) -> subprocess.CompletedProcess[str]:
    """The real command in a process of its own, bounded in time: what hung (a FIFO) or grew
    without bound (/dev/zero) before fails the test instead of stalling it."""
    return subprocess.run([*GROUNDKIT, "ingest", str(path), "--dsn", dsn],
                          capture_output=True, text=True, timeout=60)


def test_jsonl_from_a_fifo_or_a_device_is_refused(library: Groundkit, dsn: str, tmp_path: Path) -> None:
    fifo = tmp_path / "objects.jsonl"
    os.mkfifo(fifo)
    for path in (fifo, "/dev/zero"):
        result = _cli(dsn, path)
        assert result.returncode == 1, result.stderr
        refused = f"error [GK005]: {path}: not a regular file (a FIFO, device or socket)"
        assert " ".join(result.stderr.split()) == refused


def test_bad_flags_stop_the_run_with_one_error_line(library: Groundkit, dsn: str, tmp_path: Path) -> None:
    """What would fail every file alike stops the run before (or at) its first write."""
    (tmp_path / "a.md").write_text("text")
    cases = [
        ([], "--space and --tier are needed to ingest files other than .jsonl"),
        (["--space", "library", "--tier", "T0", "--content-type", "essay"], "unknown content type 'essay'"),
        (["--space", "nowhere", "--tier", "T0"], "GK003"),
        (["--space", "library", "--tier", "T9"], "GK002"),
    ]
    for options, message in cases:
        result = runner.invoke(app, ["ingest", str(tmp_path), *options, "--dsn", dsn])
        assert result.exit_code == 1 and message in " ".join(result.output.split()), (options, result.output)
        assert "Traceback" not in result.output
    assert library.conn.execute("select count(*) as n from groundkit.objects").fetchone() == {"n": 0}


def test_a_batch_with_one_failing_object_writes_the_others(library: Groundkit, dsn: str, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Files go in put_objects batches; when one object fails the statement (here: another
    writer changed a.md's object between the read of the current versions and the write, so
    version 1 now differs), each is written alone and only that one fails."""
    from groundkit import ingest as core

    for name in ("a", "b", "c"):
        (tmp_path / f"{name}.md").write_text(f"{name} first")
    assert ingest(dsn, tmp_path / "a.md", "--base", str(tmp_path))[1]["loaded"] == 1
    (tmp_path / "a.md").write_text("a changed")
    monkeypatch.setattr(Groundkit, "stored_objects", lambda self, ids: {})  # a read from before a.md was written
    plan = core.plan(str(tmp_path))
    try:
        report, written = core.run(library, dsn, plan, core.IngestOptions(space_id="library", tier="T0"))
    finally:
        plan.tree.close()
    assert report.loaded == 2 and sorted(written) == ["b.md", "c.md"]
    assert [(f.path, f.reason[:7]) for f in report.failed] == [("a.md", "[GK001]")]


# -- what an untrusted tree may not do (issue 50, items 4 to 6) ----------------------------------

@pytest.fixture
def platform(gk: Groundkit) -> Groundkit:
    """The adversarial run's world: board0 and commons, a private vault, an app-written o10 in
    the vault at T2, and m0, a member of it."""
    gk.put_space("board0")
    gk.put_space("commons")
    gk.put_space("vault", private=True)
    gk.put_member("m0", "T3")
    gk.grant_space("vault", "m0")
    gk.put_object("o10", 1, "document", "vault", "T2", "Vault plan", "written by the app")
    return gk


def _state(gk: Groundkit) -> list[dict[str, Any]]:
    return gk.conn.execute("select object_id, version, space_id, tier_visibility, owner_sub, owner_only, state"
                           " from groundkit.objects order by object_id").fetchall()


def test_jsonl_in_a_walked_tree_replaces_no_app_object_and_plants_no_note(platform: Groundkit, dsn: str,
                                                                            tmp_path: Path) -> None:
    """The exact tree of the run: `ingest DIR --space board0 --tier T3` over x.jsonl naming o10 (in
    commons at T0, version 50) and an owner-only note for m0 in the vault."""
    gk = platform
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "x.jsonl").write_text(
        json.dumps({"object_id": "o10", "version": 50, "content_type": "document", "space_id": "commons",
                    "tier_visibility": "T0", "title": "o10", "body": "replacedbyfile"}) + "\n"
        + json.dumps({"object_id": "planted", "version": 1, "content_type": "member_note", "space_id": "vault",
                      "tier_visibility": "T0", "title": "note", "body": "plantednote", "owner_sub": "m0",
                      "owner_only": True}) + "\n")
    (tree / "readme.md").write_text("an ordinary page about looms")
    before = _state(gk)
    result = runner.invoke(app, ["ingest", str(tree), "--space", "board0", "--tier", "T3", "--json", "--dsn", dsn])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout.splitlines()[-1])
    assert report["loaded"] == 1
    assert report["skipped"] == [{"path": "x.jsonl", "reason": "JSON Lines found in a directory walk are not written "
                                  "(their lines name their own ids, spaces and tiers); name the file itself as "
                                  "PATH to write it"}]
    after = _state(gk)
    assert [r for r in after if r["object_id"] != "readme.md"] == before  # o10 as the app wrote it; no note
    assert {"object_id": "readme.md", "version": 1, "space_id": "board0", "tier_visibility": "T3",
            "owner_sub": None, "owner_only": False, "state": "live"} in after
    assert gk.conn.execute("select count(*) as n from groundkit.content_log where body like '%replacedbyfile%'"
                           " or body like '%plantednote%'").fetchone() == {"n": 0}


def test_jsonl_named_with_space_and_tier_is_refused_whole_when_a_line_says_otherwise(
        platform: Groundkit, dsn: str, tmp_path: Path) -> None:
    """Named as PATH, the file is written as it says, but --space and --tier are never overridden."""
    gk = platform
    path = tmp_path / "x.jsonl"
    line = {"object_id": "b1", "version": 1, "content_type": "board_post", "space_id": "board0",
            "tier_visibility": "T3", "title": "t", "body": "fine"}
    path.write_text(json.dumps(line) + "\n" + json.dumps({**line, "object_id": "o10", "version": 50,
                                                          "space_id": "commons", "tier_visibility": "T0"}) + "\n")
    before = _state(gk)
    code, report, _ = ingest_as(dsn, path, "--space", "board0", "--tier", "T3")
    assert code == 1 and report["loaded"] == 0
    assert report["failed"] == [{"path": "x.jsonl", "reason": "x.jsonl:2: 'o10' has space_id 'commons', not --space "
                                 "'board0' (a file never overrides the options given)"}]
    assert _state(gk) == before
    path.write_text(json.dumps(line) + "\n" + json.dumps({**line, "object_id": "b2", "tier_visibility": "T0"}) + "\n")
    code, report, _ = ingest_as(dsn, path, "--space", "board0", "--tier", "T3")
    assert code == 1 and "'b2' has tier_visibility 'T0', not --tier 'T3'" in report["failed"][0]["reason"]
    path.write_text(json.dumps(line) + "\n")
    code, report, _ = ingest_as(dsn, path, "--space", "board0", "--tier", "T3")
    assert code == 0 and report["loaded"] == 1


def ingest_as(dsn: str, path: Path, *options: str) -> tuple[int, dict[str, Any], str]:
    result = runner.invoke(app, ["ingest", str(path), *options, "--json", "--dsn", dsn])
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 1, result.output
    return result.exit_code, json.loads(lines[0]), result.stderr


def test_a_hard_link_to_a_file_outside_the_base_is_not_read(library: Groundkit, dsn: str, tmp_path: Path) -> None:
    tree, outside = tmp_path / "tree", tmp_path / "outside"
    tree.mkdir()
    outside.mkdir()
    (outside / "tokens.txt").write_text("bearer hardlinkedsecrettoken")
    os.link(outside / "tokens.txt", tree / "tokens.txt")
    (tree / "fine.md").write_text("fine looms")
    code, report, _ = ingest(dsn, tree)
    assert code == 0 and report["loaded"] == 1
    assert report["skipped"] == [{"path": "tokens.txt", "reason": "hard link (2 names for one file; not read: another "
                                  "name may lie outside the base, copy the file to load it)"}]
    assert search(library, "hardlinkedsecrettoken") == []
    # named as PATH, and made after the walk (the opened file's own link count decides)
    code, report, _ = ingest(dsn, tree / "tokens.txt")
    assert report["loaded"] == 0 and report["skipped"][0]["reason"].startswith("hard link (2 names")
    from groundkit.loaders import Skipped
    from groundkit.loaders.tree import Tree

    (tree / "late.md").write_text("late")
    with Tree(str(tree)) as walked:
        assert "late.md" in walked.walk().files
        (tree / "late.md").unlink()
        os.link(outside / "tokens.txt", tree / "late.md")
        with pytest.raises(Skipped, match="hard link"):
            walked.read("late.md", 1000)


@pytest.mark.parametrize("name", ["new\nline.md", "esc\x1b[31mred.md", "tab\there.md", "bidi\u202eevil.md",
                                  "del\x7f.md", "c1\x9b2J.md", "sep\u2028x.md"])
def test_a_file_name_with_control_characters_is_skipped_and_shown_escaped(library: Groundkit, dsn: str,
                                                                          tmp_path: Path, name: str) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / name).write_text("controlcharname looms")
    (tree / "fine.md").write_text("fine looms")
    code, report, stderr = ingest(dsn, tree)
    assert code == 0 and report["loaded"] == 1
    (skipped,) = report["skipped"]
    assert skipped["path"] == escaped(name) and "\\" in skipped["path"]
    assert not UNSAFE_ID_CHARS.search(skipped["path"]) and skipped["reason"].startswith("the file name has a control")
    assert f"U+{ord(UNSAFE_ID_CHARS.search(name).group()):04X}" in skipped["reason"]  # type: ignore[union-attr]
    assert not UNSAFE_ID_CHARS.search(stderr.replace("\n", ""))  # nothing raw reaches the terminal
    assert search(library, "controlcharname") == []


@pytest.mark.parametrize("object_id", ["a\nb", "a\x1b[2Jb", "a\tb", "a\u202eb", "a\x85b"])
def test_an_object_id_with_control_characters_is_gk005_in_python_and_in_sql(library: Groundkit,
                                                                            object_id: str) -> None:
    gk = library
    with pytest.raises(InvalidArgument, match="object_id must not contain control"):
        gk.put_object(object_id, 1, "document", "library", "T0", "t", "b")
    payload = {"object_id": object_id, "version": 1, "content_type": "document", "space_id": "library",
               "tier_visibility": "T0", "title": "t", "body": "b"}
    for statement, arg in [("select groundkit.put_object(%s, 1, 'document', 'library', 'T0', 't', 'b')", object_id),
                           ("select groundkit.put_objects(%s)", Jsonb([payload]))]:
        with pytest.raises(psycopg.Error, match=r"object_id must not contain control.*\(found U\+") as raised:
            with gk.conn.transaction():
                gk.conn.execute(statement, (arg,))
        assert raised.value.sqlstate == "GK005"
    assert gk.conn.execute("select count(*) as n from groundkit.objects").fetchone() == {"n": 0}


def test_the_sql_and_python_sets_of_refused_id_characters_agree(library: Groundkit) -> None:
    library.conn.execute("""
        create function pg_temp.refused(id text) returns boolean language plpgsql as $$
        begin
            perform groundkit._check_put(id, 1, 'document', 'library', 'T0', 't', 'b', null, false, null, '{}');
            return false;
        exception when sqlstate 'GK005' then
            return true;
        end $$""")
    chars = [chr(cp) for cp in range(1, 0x3000)]
    rows = library.conn.execute("select c from unnest(%s::text[]) c where pg_temp.refused('x' || c)", (chars,))
    assert {r["c"] for r in rows.fetchall()} == {ch for ch in chars if UNSAFE_ID_CHARS.match(ch)}
