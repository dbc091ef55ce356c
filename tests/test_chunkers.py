"""Issue 44, chunkers: one per content type, deterministic and versioned (docs/chunking.md).

Every chunker terminates on any text, covers the whole body (the union of [char_start,
char_end) is the body minus the whitespace a chunk is trimmed of), is deterministic, and never
splits a transcript segment that fits in a window. The runs over a megabyte are marked slow
(`pytest -m "not slow"` leaves them out)."""

from __future__ import annotations

import json
import re
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg.types.json import Jsonb

import groundkit
from groundkit import Groundkit, OutdatedChunks
from tests.conftest import upgrade_revisions_only

Raw = psycopg.Connection[tuple[Any, ...]]
TRIM = " \n\r\t"
COLUMNS = ("chunk_seq, content, start_ms, end_ms, chunker, chunker_version, char_start, char_end,"
           " heading_path, search_prefix")
PROPERTY = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture
def chunker(raw: Raw) -> Raw:
    raw.execute("set statement_timeout = '60s'")  # an infinite loop fails the test instead of hanging
    return raw


def chunks_of(raw: Raw, content_type: str, body: str | None, max_chars: int, overlap: int, *,
              title: str | None = None, segments: list[dict[str, Any]] | None = None,
              metadata: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The chunks a write makes of one payload (groundkit._chunks_of), as dicts."""
    rows = raw.execute(
        "select chunk_seq, content, start_ms, end_ms, chunker, chunker_version, char_start, char_end,"
        " heading_path, search_prefix from groundkit._chunks_of(%s, %s, %s, %s, %s, %s, %s)",
        (content_type, title, body, Jsonb(segments) if segments is not None else None,
         Jsonb(metadata) if metadata is not None else None, max_chars, overlap),
    ).fetchall()
    out = [dict(zip([c.strip() for c in COLUMNS.split(",")], r, strict=True)) for r in rows]
    assert [c["chunk_seq"] for c in out] == list(range(len(out)))
    return out


def assert_spans(text: str, chunks: list[dict[str, Any]], max_chars: int | None = None) -> None:
    """Each chunk is text[char_start:char_end], trimmed, starts in order, and together they cover
    every character of text that is not whitespace."""
    if not text.strip(TRIM):
        assert [(c["content"], c["char_start"], c["char_end"]) for c in chunks] == [("", 0, 0)]
        return
    covered = [False] * len(text)
    last_start = -1
    for c in chunks:
        start, end, content = c["char_start"], c["char_end"], c["content"]
        assert text[start:end] == content, (start, end)
        assert content and content == content.strip(TRIM)
        assert start >= last_start
        last_start = start
        if max_chars is not None:
            assert len(content) <= max_chars
        covered[start:end] = [True] * (end - start)
    gaps = [i for i, seen in enumerate(covered) if not seen and text[i] not in TRIM]
    assert not gaps, f"characters not in any chunk at {gaps[:5]}"


def test_assert_spans_detects_a_gap_and_a_wrong_offset() -> None:
    ok = [{"content": "abc", "char_start": 0, "char_end": 3}, {"content": "def", "char_start": 4, "char_end": 7}]
    assert_spans("abc def", ok)
    with pytest.raises(AssertionError):
        assert_spans("abc def", ok[:1])
    with pytest.raises(AssertionError):
        assert_spans("abc def", [ok[0], {"content": "def", "char_start": 3, "char_end": 6}])


texts = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"), max_size=300)
separator_free = st.text(alphabet="abcxyz0189-_/=+", min_size=1, max_size=400)
with_separators = st.lists(st.sampled_from([*"ab. \n\t#", "\n\n", ". ", "word ", "\n# ", "\n## ", "\n```\n"]),
                           max_size=120).map("".join)
sizes = st.tuples(st.integers(1, 80), st.floats(0, 0.99)).map(lambda t: (t[0], min(int(t[0] * t[1]), t[0] - 1)))


@PROPERTY
@given(body=st.one_of(texts, separator_free, with_separators), size=sizes,
       content_type=st.sampled_from(["event", "member_note", "board_post", "document", "course_section"]))
def test_every_body_chunker_covers_the_body_and_is_deterministic(
    chunker: Raw, body: str, size: tuple[int, int], content_type: str
) -> None:
    max_chars, overlap = size
    chunks = chunks_of(chunker, content_type, body, max_chars, overlap, title="T")
    assert_spans(body, chunks, max_chars)
    assert chunks_of(chunker, content_type, body, max_chars, overlap, title="T") == chunks


# -- course sections and documents: Markdown headings -----------------------------------------

HEADING = re.compile(r"^ {0,3}(#{1,6})([ \t\r]|$)")
FENCE = re.compile(r"^ {0,3}(```|~~~)")


def heading_text(line: str) -> str:
    rest = re.sub(r"^ {0,3}#{1,6}", "", line)
    return re.sub(r"[ \t]+#+[ \t\r]*$|^#+[ \t\r]*$", "", rest).strip(" \t\r")


def sections(body: str, title: str | None) -> list[tuple[int, int, list[str]]]:
    """The oracle: body's sections as (start, end, heading path), a bare heading right above a
    deeper one joined to the section below (the rules of docs/chunking.md, written again)."""
    raw: list[tuple[int, int, int | None, str, bool]] = []  # start, end, level, heading, bare
    fenced = False
    pos = 0
    for line in body.split("\n"):
        m = None if fenced or FENCE.match(line) else HEADING.match(line)
        if FENCE.match(line):
            fenced = not fenced
        if m or not raw:
            raw.append((pos, pos + len(line), len(m.group(1)) if m else None, heading_text(line) if m else "",
                        m is not None))
        else:
            start, _, level, head, _bare = raw[-1]
            raw[-1] = (start, pos + len(line), level, head, _bare and not line.strip(" \t\r"))
        pos += len(line) + 1
    root = [title.strip(TRIM)] if title and title.strip(TRIM) else []
    stack: list[tuple[int, str]] = []
    out: list[tuple[int, int, list[str]]] = []
    carry: int | None = None
    for i, (start, end, level, head, bare) in enumerate(raw):
        if level is not None:
            stack = [(lv, t) for lv, t in stack if lv < level]
            if head:
                stack.append((level, head))
            next_level = raw[i + 1][2] if i + 1 < len(raw) else None
            if bare and next_level is not None and next_level > level:
                carry = start if carry is None else carry
                continue
        heads = [t for _, t in stack]
        if root and heads and heads[0] == root[0]:
            heads = heads[1:]
        out.append((start if carry is None else carry, end, root + heads))
        carry = None
    return out


words = st.lists(st.sampled_from(["clay", "glaze", "kiln", "wheel", "cone", "six", "#tag", "a.", "b"]),
                 min_size=1, max_size=8).map(" ".join)
blocks = st.one_of(
    st.tuples(st.integers(1, 6), words).map(lambda t: "#" * t[0] + " " + t[1]),
    st.tuples(st.integers(1, 6), words).map(lambda t: "#" * t[0] + " " + t[1] + " " + "#" * t[0]),
    words,
    st.lists(words, min_size=1, max_size=5).map(". ".join),
    words.map(lambda w: "```\n# " + w + "\n```"),
    st.just("#"),
)
markdown = st.tuples(st.lists(blocks, max_size=14), st.sampled_from(["\n", "\n\n", "\n \n"])).map(
    lambda t: t[1].join(t[0]))


@PROPERTY
@given(body=markdown, title=st.one_of(st.none(), st.just(""), st.just("Clay"), words),
       max_chars=st.integers(10, 120), overlap_fraction=st.floats(0, 0.49))
def test_markdown_chunks_carry_their_heading_path(
    chunker: Raw, body: str, title: str | None, max_chars: int, overlap_fraction: float
) -> None:
    overlap = int(max_chars * overlap_fraction)
    chunks = chunks_of(chunker, "course_section", body, max_chars, overlap, title=title)
    assert_spans(body, chunks, max_chars)
    assert {(c["chunker"], c["chunker_version"]) for c in chunks} == {("markdown", "gk-markdown-1")}
    units = sections(body, title)
    for c in chunks:
        if c["content"]:
            # each chunk lies in one section, and carries its path
            (path,) = [p for start, end, p in units if start <= c["char_start"] and c["char_end"] <= end]
            assert c["heading_path"] == path, c
            root = 1 if title and title.strip(TRIM) else 0
            assert c["search_prefix"] == ("\n".join(path[root:]) or None)


def test_course_section_heading_path_and_search_by_section_name(community: Groundkit, raw: Raw) -> None:
    body = ("Welcome to the course.\n\n# Throwing Basics\n\n## Module 2: Centering\n\n"
            "### Coning up and down\n\nPress with the heel of your hand.\n\n"
            "```\n# a comment, not a heading\n```\n\n## Module 3: Trimming\n\nLeather-hard pots only.")
    community.put_object("course-1", 1, "course_section", "open", "T0", "Throwing Basics", body)
    rows = raw.execute("select content, heading_path, search_prefix, char_start, char_end from groundkit.chunks"
                       " where object_id = 'course-1' order by chunk_seq").fetchall()
    assert [r[1] for r in rows] == [
        ["Throwing Basics"],
        ["Throwing Basics", "Module 2: Centering", "Coning up and down"],
        ["Throwing Basics", "Module 3: Trimming"],
    ]
    assert rows[1][0].startswith("# Throwing Basics\n\n## Module 2: Centering\n\n### Coning up and down")
    assert all(body[s:e] == content for content, _, _, s, e in rows)
    # the section's name finds the chunk under it, not its neighbours
    hits = community.search("t0", "coning")
    assert [(h.object_id, h.chunk_seq) for h in hits] == [("course-1", 1)]
    # "Module 3" names the last section only: a chunk under it matches on its heading path
    hits = community.search("t0", "trimming module")
    assert hits[0].chunk_seq == 2


# -- board posts: the thread header -------------------------------------------------------------


def test_board_reply_is_found_through_its_thread_subject(community: Groundkit, raw: Raw) -> None:
    community.put_object("post-1", 1, "board_post", "open", "T0", "Crawling glaze on bisque",
                         "My glaze pulls away from the pot in the firing.",
                         metadata={"thread_id": "t-9", "board": "Glaze Lab", "tags": ["glaze", "troubleshooting"]})
    community.put_object("post-2", 1, "board_post", "open", "T0", "Re: reply",
                         "Wipe the dust off with a damp sponge before you dip.",
                         metadata={"thread_id": "t-9", "thread_title": "Crawling glaze on bisque",
                                   "tags": "troubleshooting"})
    rows = raw.execute("select object_id, content, search_prefix, char_start, char_end, chunker from groundkit.chunks"
                       " where object_id like 'post-%' order by object_id").fetchall()
    assert rows == [
        ("post-1", "My glaze pulls away from the pot in the firing.", "Glaze Lab\nglaze troubleshooting", 0, 47,
         "thread"),
        ("post-2", "Wipe the dust off with a damp sponge before you dip.",
         "Crawling glaze on bisque\ntroubleshooting", 0, 52, "thread"),
    ]
    # "crawling" is only in the thread's subject: the reply matches it, its text is its own
    hits = community.search("t0", "crawling sponge")
    assert [h.object_id for h in hits][:1] == ["post-2"]
    assert "Crawling" not in hits[0].content
    assert {h.object_id for h in community.search("t0", "crawling")} == {"post-1", "post-2"}


def test_thread_header_shape(chunker: Raw) -> None:
    def header(title: str | None, metadata: Any) -> Any:
        row = chunker.execute("select groundkit.thread_header(%s, %s)",
                              (title, Jsonb(metadata) if metadata is not None else None)).fetchone()
        assert row is not None
        return row[0]

    assert header("Kilns", None) is None
    assert header("Kilns", {"board": "Kiln Room"}) == "Kiln Room"
    assert header("Re", {"thread_title": "Kilns", "board": "b", "tags": ["a", 7, "b", {"x": 1}]}) == "Kilns\nb\na b"
    assert header("Kilns", {"thread_title": " Kilns "}) is None  # the opening post: its own title
    assert header("Re", {"thread_title": 5, "tags": {"not": "tags"}}) == "5"


# -- transcripts ---------------------------------------------------------------------------------

segment_lists = st.lists(
    st.tuples(st.integers(0, 3000), st.integers(0, 3000),
              st.text(alphabet="ab .!?\n", max_size=30)),
    min_size=1, max_size=30,
).map(lambda xs: [{"start_ms": a, "end_ms": a + b, "text": t} for a, b, t in xs])


def transcript(raw: Raw, segments: list[dict[str, Any]], max_chars: int, overlap: int) -> list[tuple[Any, ...]]:
    return raw.execute(
        "select chunk_seq, char_start, char_end, content, start_ms, end_ms, seg_first, seg_last"
        "  from groundkit.chunk_transcript(%s, %s, %s)", (Jsonb(segments), max_chars, overlap)).fetchall()


@PROPERTY
@given(segments=segment_lists, size=st.tuples(st.integers(1, 120), st.floats(0, 0.99)))
def test_transcript_windows_never_split_a_segment(chunker: Raw, segments: list[dict[str, Any]],
                                                  size: tuple[int, float]) -> None:
    max_chars = size[0]
    overlap = min(int(max_chars * size[1]), max_chars - 1)
    rows = transcript(chunker, segments, max_chars, overlap)
    kept = [(i, s["text"].strip(TRIM), s) for i, s in enumerate(segments) if s["text"].strip(TRIM)]
    joined = " ".join(t for _, t, _ in kept)
    if not kept:
        assert rows == [(0, 0, 0, "", None, None, None, None)]
        return
    assert_spans(joined, [{"content": r[3], "char_start": r[1], "char_end": r[2]} for r in rows], max_chars)
    by_index = {i: (t, s) for i, t, s in kept}
    last_first = -1
    for _seq, _start, _end, content, start_ms, end_ms, first, last in rows:
        covered = [by_index[i] for i in range(first, last + 1) if i in by_index]
        if len(covered) == 1 and len(covered[0][0]) > max_chars:
            assert content in covered[0][0]  # a segment longer than a window: the only split
        else:
            assert content == " ".join(t for t, _ in covered)  # whole segments
            assert first > last_first  # every window starts with a new segment
            last_first = first
        assert start_ms == min(s["start_ms"] for _, s in covered)
        assert end_ms == max(s["end_ms"] for _, s in covered)
    assert transcript(chunker, segments, max_chars, overlap) == rows


def seg(start_s: float, end_s: float, text: str) -> dict[str, Any]:
    return {"start_ms": int(start_s * 1000), "end_ms": int(end_s * 1000), "text": text}


def test_transcript_breaks_at_a_pause_then_at_a_sentence_end(chunker: Raw) -> None:
    # 4 segments of 9 characters; a window of 40 holds all 4, 30 holds 3
    pause = [seg(0, 1, "one two a"), seg(1, 2, "three fo."), seg(4, 5, "five six "), seg(5, 6, "seven eig"),
             seg(6, 7, "nine ten.")]
    rows = transcript(chunker, pause, 30, 0)
    # the 2 s pause after the second segment wins over the sentence end and over filling the window
    assert (rows[0][6], rows[0][7]) == (0, 1)
    sentence = [seg(0, 1, "one two a"), seg(1, 2, "three fo."), seg(2, 3, "five six "), seg(3, 4, "seven eig"),
                seg(4, 5, "nine ten.")]
    first = transcript(chunker, sentence, 30, 0)[0]
    assert (first[6], first[7]) == (0, 1)
    plain = [seg(i, i + 1, "word word") for i in range(5)]
    assert [(r[6], r[7]) for r in transcript(chunker, plain, 30, 0)] == [(0, 2), (3, 4)]
    # overlap: the last whole segment that fits in 10 characters starts the next window
    assert [(r[6], r[7]) for r in transcript(chunker, plain, 30, 10)] == [(0, 2), (2, 4)]


def test_transcript_hit_carries_the_time_to_jump_to(community: Groundkit, raw: Raw) -> None:
    segments = [seg(i * 5, i * 5 + 4.5, f"Filler sentence number {i} about the studio.") for i in range(160)]
    segments[152] = seg(761, 765, "Now open the damper slowly to start the reduction.")
    community.put_object("talk", 1, "transcript", "open", "T0", "Firing a gas kiln", "", segments=segments)
    hits = community.search("t0", "damper reduction")
    assert hits and hits[0].object_id == "talk"
    assert hits[0].start_ms is not None and hits[0].end_ms is not None
    assert hits[0].start_ms <= 761_000 and hits[0].end_ms >= 765_000
    spans = raw.execute("select char_start, char_end, content, chunker_version from groundkit.chunks"
                        " where object_id = 'talk' order by chunk_seq").fetchall()
    joined = " ".join(s["text"] for s in segments)
    assert all(joined[s:e] == c for s, e, c, _ in spans)
    assert {r[3] for r in spans} == {"gk-segments-2"}


# -- termination on a megabyte ------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("content_type", ["event", "board_post", "document", "transcript"])
@pytest.mark.parametrize("overlap", [0, 1, 749])
def test_a_megabyte_without_separators_terminates(chunker: Raw, content_type: str, overlap: int) -> None:
    body = "x" * 1_000_000
    if content_type == "transcript":
        segments = [seg(0, 1, body[:500_000]), *(seg(i, i + 1, "y" * 999) for i in range(1, 501))]
        chunks = chunks_of(chunker, "transcript", None, 1500, overlap, segments=segments)
        text = " ".join(s["text"] for s in segments)
    else:
        chunks = chunks_of(chunker, content_type, "# Heading\n" + body if content_type == "document" else body,
                           1500, overlap)
        text = "# Heading\n" + body if content_type == "document" else body
    assert len(chunks) >= 600
    assert_spans(text, chunks, 1500)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(overlap_fraction=st.floats(0, 0.999), content_type=st.sampled_from(["event", "document", "transcript"]))
def test_separator_free_text_terminates_for_any_overlap(chunker: Raw, overlap_fraction: float,
                                                        content_type: str) -> None:
    max_chars = 100
    overlap = min(int(max_chars * overlap_fraction), max_chars - 1)
    body = "#" + "z" * 3_000
    if content_type == "transcript":
        chunks = chunks_of(chunker, content_type, None, max_chars, overlap, segments=[seg(0, 1, body)])
    else:
        chunks = chunks_of(chunker, content_type, body, max_chars, overlap)
    assert_spans(body, chunks, max_chars)


# -- versions, sizes per content type, status and rebuild ---------------------------------------


def test_sizes_per_content_type_status_and_rebuild(community: Groundkit, raw: Raw) -> None:
    long = "A sentence about slip casting. " * 200  # 6,200 characters
    community.put_object("doc", 1, "document", "open", "T0", "Slip", long)
    community.put_object("note", 1, "event", "open", "T0", "Open studio", long)
    assert community.outdated_chunks() == ()
    before = raw.execute("select count(*) from groundkit.chunks where object_id = 'doc'").fetchone()
    raw.execute("""update groundkit.config set chunk_sizes = '{"document": {"chars": 600, "overlap": 100}}'""")
    # a change re-chunks nothing by itself, and status says which chunks are out of date
    assert raw.execute("select count(*) from groundkit.chunks where object_id = 'doc'").fetchone() == before
    assert community.outdated_chunks() == (
        OutdatedChunks(content_type="document", chunker="markdown", chunker_version="gk-markdown-1",
                       chunk_chars=1500, chunk_overlap=200, chunks=before[0] if before else 0),)
    checksum = community.state_checksum()
    community.rebuild()
    assert community.state_checksum() != checksum
    assert community.outdated_chunks() == ()
    rows = raw.execute("select max(length(content)), min(chunk_chars), max(chunk_overlap) from groundkit.chunks"
                       " where object_id = 'doc'").fetchone()
    assert rows is not None and 500 < rows[0] <= 600 and rows[1:] == (600, 100)
    note = raw.execute("select max(length(content)) from groundkit.chunks where object_id = 'note'").fetchone()
    assert note is not None and 1400 < note[0] <= 1500
    # a rebuild reproduces identical chunks
    checksum = community.state_checksum()
    community.rebuild()
    assert community.state_checksum() == checksum
    # another chunker version is out of date too
    raw.execute("update groundkit.chunks set chunker_version = 'gk-text-0' where object_id = 'note'")
    assert [o.content_type for o in community.outdated_chunks()] == ["event"]


def test_revision_0015_keeps_older_chunks_until_a_rebuild(empty_dsn: str) -> None:
    """A database that revision 0012 left with chunks: after the upgrade its chunks have no
    chunker, offsets or sizes, status counts them as outdated, and a rebuild re-chunks them."""
    upgrade_revisions_only(empty_dsn, "0012")
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        conn.execute("insert into groundkit.spaces (space_id, min_tier) values ('s', 'T0')")
        conn.execute("insert into groundkit.content_log (object_id, version, op, content_type, space_id,"
                     " tier_visibility, title, body, owner_only, metadata, content_hash)"
                     " values ('o', 1, 'put', 'event', 's', 'T0', 'Kiln', '  Stack the shelves.', false, '{}', 'h')")
        conn.execute("insert into groundkit.objects (object_id, version, state, content_type, space_id,"
                     " tier_visibility, title, metadata, content_hash, log_seq)"
                     " select 'o', 1, 'live', 'event', 's', 'T0', 'Kiln', '{}', 'h', max(seq)"
                     " from groundkit.content_log")
        conn.execute("insert into groundkit.chunks (object_id, object_version, chunk_seq, content, tsv, doc_len,"
                     " chunker_version) values ('o', 1, 0, 'Stack the shelves.', to_tsvector('stack shelves'), 2,"
                     " 'gk-text-1')")
    groundkit.migrate(empty_dsn, gate=False)
    with Groundkit.connect(empty_dsn) as gk:
        assert gk.outdated_chunks() == (
            OutdatedChunks(content_type="event", chunker=None, chunker_version="gk-text-1", chunk_chars=None,
                           chunk_overlap=None, chunks=1),)
        gk.rebuild()
        assert gk.outdated_chunks() == ()
        row = gk.conn.execute("select chunker, char_start, char_end, chunk_chars from groundkit.chunks").fetchone()
        assert row == {"chunker": "text", "char_start": 2, "char_end": 20, "chunk_chars": 1500}


def test_status_reports_outdated_chunks(dsn: str) -> None:
    """`groundkit status` (text and --json) names chunks made with other sizes than the config's."""
    from typer.testing import CliRunner

    from groundkit.cli import app

    with Groundkit.connect(dsn) as gk:
        gk.put_space("commons")
        gk.put_object("e", 1, "event", "commons", "T0", "Kiln night", "Bring a plate to glaze.")
        gk.conn.execute("""update groundkit.config set chunk_sizes = '{"event": {"chars": 400, "overlap": 50}}'""")
    runner = CliRunner()
    text = runner.invoke(app, ["status", "--dsn", dsn], env={"COLUMNS": "200"})
    assert text.exit_code == 0, text.output
    assert "outdated chunks   1 event chunks made by gk-text-1, 1500/200 chars: groundkit rebuild" in text.output
    as_json = runner.invoke(app, ["status", "--json", "--dsn", dsn])
    assert json.loads(as_json.stdout)["outdated_chunks"] == [
        {"content_type": "event", "chunker": "text", "chunker_version": "gk-text-1", "chunk_chars": 1500,
         "chunk_overlap": 200, "chunks": 1}]
    assert runner.invoke(app, ["rebuild", "--dsn", dsn]).exit_code == 0
    as_json = runner.invoke(app, ["status", "--json", "--dsn", dsn])
    assert json.loads(as_json.stdout)["outdated_chunks"] == []


def test_set_chunk_sizes_python_and_cli(dsn: str) -> None:
    """Groundkit.set_chunk_sizes and `groundkit config set-chunk-sizes`: one content type's
    sizes, validated in the database, back to the defaults with neither; nothing re-chunked."""
    from typer.testing import CliRunner

    from groundkit import InvalidArgument
    from groundkit.cli import app

    with Groundkit.connect(dsn) as gk:
        gk.put_space("commons")
        gk.put_object("t", 1, "transcript", "commons", "T0", "Talk", "", segments=[seg(0, 1, "hello")])
        assert gk.set_chunk_sizes("transcript", 1000, 150) == (1000, 150)
        assert gk.set_chunk_sizes("transcript", overlap=100) == (1500, 100)
        for bad in [("transcript", 100, None), ("podcast", 900, None), ("transcript", 900, 450)]:
            with pytest.raises(InvalidArgument):
                gk.set_chunk_sizes(*bad)
        with pytest.raises(InvalidArgument):
            gk.set_chunk_sizes("transcript", True)
        assert gk.conn.execute("select chunk_sizes from groundkit.config").fetchone() == {
            "chunk_sizes": {"transcript": {"overlap": 100}}}
    result = CliRunner().invoke(app, ["config", "set-chunk-sizes", "transcript", "--chars", "900", "--overlap",
                                      "100", "--dsn", dsn], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert ("transcript: chunks of at most 900 characters, 100 of overlap; 1 chunks made otherwise:"
            " groundkit rebuild re-chunks them") in result.output
    result = CliRunner().invoke(app, ["config", "set-chunk-sizes", "transcript", "--dsn", dsn],
                                env={"COLUMNS": "200"})
    assert "at most 1500 characters, 200 of overlap; no chunk made otherwise" in result.output
    with Groundkit.connect(dsn) as gk:
        assert gk.conn.execute("select chunk_sizes from groundkit.config").fetchone() == {"chunk_sizes": {}}


@pytest.mark.parametrize("sizes", [
    '[]', '{"nope": {"chars": 500}}', '{"event": {"chars": 100}}', '{"event": {"chars": 500, "overlap": 250}}',
    '{"event": {"chars": 500.5}}', '{"event": {"size": 500}}', '{"event": 500}', '{"event": {"chars": "500"}}',
    '{"event": {"overlap": 800}}',
])
def test_bad_chunk_sizes_are_refused(raw: Raw, community: Groundkit, sizes: str) -> None:
    with pytest.raises(psycopg.Error) as info:
        raw.execute("update groundkit.config set chunk_sizes = %s::jsonb", (sizes,))
    assert info.value.sqlstate == "GK005"
    assert raw.execute("select chunk_sizes from groundkit.config").fetchone() == ({},)


def test_global_sizes_are_checked_against_every_content_type(raw: Raw, community: Groundkit) -> None:
    raw.execute("""update groundkit.config set chunk_sizes = '{"event": {"chars": 500}}'""")
    with pytest.raises(psycopg.Error) as info:  # event: chars 500 with a global overlap of 260
        raw.execute("update groundkit.config set chunk_overlap = 260")
    assert info.value.sqlstate == "GK005"
    assert raw.execute("select chunk_sizes::text, chunk_overlap from groundkit.config").fetchone() == (
        json.dumps({"event": {"chars": 500}}), 200)
