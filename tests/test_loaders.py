"""The loaders on real files, without a database: what each format's body, title and segments
are, what is skipped or failed and why, and the tree that never leaves its base."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from groundkit.errors import InvalidArgument
from groundkit.loaders import Failed, Skipped, kind_of, load
from groundkit.loaders.tree import Tree


def write_pdf(path: Path, pages: list[tuple[str, int, str]], title: str | None = None) -> Path:
    """A PDF with a text layer: one page per (outline entry, its level, text)."""
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_font("helvetica", size=12)
    if title:
        pdf.set_title(title)
    for heading, level, text in pages:
        pdf.add_page()
        pdf.start_section(heading, level=level)
        pdf.multi_cell(0, 10, text)
    pdf.output(str(path))
    return path


def _load(kind: str, data: bytes, max_pages: int = 100) -> tuple[str, str, list[tuple[int, int, str]] | None]:
    r = load(kind, data, "stem", max_pages=max_pages)
    segs = [(s.start_ms, s.end_ms, s.text) for s in r.segments] if r.segments is not None else None
    return r.title, r.body, segs


def test_kind_by_suffix() -> None:
    assert [kind_of(n) for n in ("a.md", "B.MARKDOWN", "c.txt", "d.htm", "e.pdf", "f.vtt", "g.srt", "h.jsonl")] == [
        "markdown", "markdown", "text", "html", "pdf", "vtt", "srt", "jsonl"]
    assert kind_of("a.docx") is None and kind_of("README") is None and kind_of(".md") is None


def test_markdown_keeps_its_headings_and_takes_the_first_as_title() -> None:
    text = "Intro line\n\n# Course\n\n## Module 1\n\n### Section 1.1\n\nWarp and weft.\r\n"
    title, body, segs = _load("markdown", b"\xef\xbb\xbf" + text.encode())
    assert title == "Course" and segs is None
    assert body == text.replace("\r\n", "\n")  # the BOM dropped, line ends normalised


def test_binary_and_non_utf8_text_are_skipped() -> None:
    with pytest.raises(Skipped, match="binary"):
        load("markdown", b"PK\x03\x04\x00\x00binary", "x", max_pages=1)
    with pytest.raises(Skipped, match="not UTF-8"):
        load("text", "caf\u00e9".encode("latin-1"), "x", max_pages=1)
    with pytest.raises(Skipped, match="no text"):
        load("text", b"  \n\n", "x", max_pages=1)


def test_html_keeps_headings_and_drops_what_a_browser_hides() -> None:
    page = b"""<!doctype html><html><head><title>Loom care</title>
    <style>.x { color: red } /* stylesecret */</style><script>var scriptsecret = "<h1>no</h1>";</script></head>
    <body><h1>Care <span hidden>hiddensecret</span></h1><p>Oil the   <b>beater</b>
    weekly.</p><template><p>templatesecret</p></template><noscript>noscriptsecret</noscript>
    <div style="display: none">nonesecret</div><div aria-hidden="true">ariasecret</div>
    <input type="hidden" value="inputsecret"><!-- commentsecret -->
    <h2>Storage</h2><p># not a heading</p><ul><li>dry</li><li>cool</li></ul></body></html>"""
    title, body, _ = _load("html", page)
    assert title == "Loom care"
    assert body == "# Care\n\nOil the beater weekly.\n\n## Storage\n\n\\# not a heading\n\ndry\n\ncool"
    assert "secret" not in body


def test_pdf_text_layer_with_its_outline_as_headings(tmp_path: Path) -> None:
    path = write_pdf(tmp_path / "book.pdf", [("Weaving basics", 0, "Warp threads run lengthwise."),
                                             ("Heddles", 1, "Heddles lift the warp.")], title="The Weaving Book")
    title, body, _ = _load("pdf", path.read_bytes())
    assert title == "The Weaving Book"
    assert body == "# Weaving basics\n\nWarp threads run lengthwise.\n\n## Heddles\n\nHeddles lift the warp."
    with pytest.raises(Skipped, match="2 pages, over the cap of 1"):
        _load("pdf", path.read_bytes(), max_pages=1)


def test_malformed_pdf_fails_with_the_parsers_reason(tmp_path: Path) -> None:
    good = write_pdf(tmp_path / "b.pdf", [("A", 0, "text")]).read_bytes()
    for bad in (good[: len(good) // 3], b"%PDF-1.7\ngarbage", b"not a pdf at all"):
        with pytest.raises(Failed, match="PDF"):
            _load("pdf", bad)


VTT = """WEBVTT - a talk

NOTE cue settings and voice tags below

intro
00:00:01.000 --> 00:00:04.250 align:start position:10% line:0
<v Ana>Welcome to <b>the</b> loom talk</v>

00:12:41.500 --> 00:12:44.000 size:80%
<v.loud Bob Smith>Price by the hour,
not by the piece
"""


def test_vtt_cues_with_settings_and_voices() -> None:
    title, body, segs = _load("vtt", VTT.encode())
    assert title == "stem"
    assert segs == [(1000, 4250, "Ana: Welcome to the loom talk"),
                    (761500, 764000, "Bob Smith: Price by the hour, not by the piece")]
    assert body == "Ana: Welcome to the loom talk\nBob Smith: Price by the hour, not by the piece"
    with pytest.raises(Failed, match="WebVTT"):
        _load("vtt", b"1\n00:00:01.000 --> 00:00:02.000\nno header\n")


def test_srt_with_bom_and_crlf() -> None:
    text = ("1\r\n00:00:01,000 --> 00:00:02,500\r\nHello <i>weavers</i>\r\n\r\n"
            "2\r\n00:12:41,000 --> 00:12:43,000\r\n{\\an8}Second\r\nline\r\n\r\n")
    _, body, segs = _load("srt", b"\xef\xbb\xbf" + text.encode())
    assert segs == [(1000, 2500, "Hello weavers"), (761000, 763000, "Second line")]
    assert body == "Hello weavers\nSecond line"
    with pytest.raises(Failed, match="malformed SRT"):
        _load("srt", b"1\n00:00:01,000 --> soon\nhi\n")


def test_tree_never_leaves_its_base(tmp_path: Path) -> None:
    base, outside = tmp_path / "base", tmp_path / "outside"
    (base / "d" / "e").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.md").write_text("outsidesecret")
    (base / "d" / "e" / "a.md").write_text("a")
    (base / "b.md").write_text("b")
    (base / ".git").mkdir()
    (base / ".git" / "x.md").write_text("x")
    os.symlink(outside / "secret.md", base / "abs.md")
    os.symlink("../../outside/secret.md", base / "d" / "rel.md")
    os.symlink(outside, base / "dirlink")
    os.symlink("e/a.md", base / "d" / "inside.md")
    os.mkfifo(base / "fifo.md")
    with Tree(str(base)) as tree:
        listing = tree.walk()
        assert listing.files == ["b.md", "d/e/a.md"]
        reasons = dict(listing.skipped)
        assert reasons["abs.md"] == reasons["d/rel.md"] == reasons["dirlink"] == \
            "symlink to outside the base (not followed)"
        assert reasons["d/inside.md"].startswith("symlink (not followed")
        assert reasons["fifo.md"].startswith("not a regular file")
        assert tree.walk("d").files == ["d/e/a.md"]
        assert tree.relative(str(base / "d")) == "d"
        os.symlink(base, tmp_path / "baselink")
        assert tree.relative(str(tmp_path / "baselink")) == ""  # the base, however named
        assert tree.relative(str(tmp_path / "baselink" / "d")) == "d"
        with pytest.raises(InvalidArgument, match="not inside the base"):
            tree.relative(str(base / "d" / ".." / ".." / "outside"))
        # spelled under the base, a path is never resolved: the walk refuses its symlink
        assert tree.relative(str(base / "dirlink" / "secret.md")) == "dirlink/secret.md"
        with pytest.raises(InvalidArgument, match="symlink to outside the base"):
            tree.walk("dirlink")
        with pytest.raises(InvalidArgument, match="symlink is never followed"):
            tree.walk("dirlink/secret.md")
        for escape in ("../outside/secret.md", "d/../../outside/secret.md"):
            with pytest.raises(InvalidArgument, match=r"'\.\.'"):
                tree.read(escape, 100)
        with pytest.raises(InvalidArgument, match="not inside the base"):
            tree.relative(str(outside))
        with pytest.raises(Skipped, match="symlink is never followed"):
            tree.read("abs.md", 100)
        with pytest.raises(Skipped, match="symlink is never followed"):
            tree.read("dirlink/secret.md", 100)
        with pytest.raises(Skipped, match="not a regular file"):
            tree.read("fifo.md", 100)  # opened non-blocking: no hang
        (base / "big.md").write_bytes(b"x" * 101)
        with pytest.raises(Skipped, match="101 bytes, over --max-bytes 100"):
            tree.read("big.md", 100)
        assert tree.read("b.md", 100) == b"b"
