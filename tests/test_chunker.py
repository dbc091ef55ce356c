"""Issue 2, chunking: a simple deterministic chunker that terminates on any text, covers it, keeps
transcript timings, rejects malformed segments, and records its version on every chunk."""

from __future__ import annotations

import bisect
import itertools
import json
import random
import string
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg.types.json import Jsonb

from groundkit import Groundkit, InvalidArgument

Raw = psycopg.Connection[tuple[Any, ...]]
TRIM = " \n\r\t"


@pytest.fixture
def chunker(raw: Raw) -> Raw:
    raw.execute("set statement_timeout = '5s'")  # an infinite loop fails the test instead of hanging
    return raw


def chunk_text(raw: Raw, body: str, max_chars: int, overlap: int) -> list[str]:
    rows = raw.execute(
        "select chunk_seq, content from groundkit.chunk_text(%s, %s, %s)", (body, max_chars, overlap)
    ).fetchall()
    assert [r[0] for r in rows] == list(range(len(rows)))
    return [r[1] for r in rows]


def assert_covers(text: str, chunks: list[str]) -> None:
    """Every character of ``text`` lies in some chunk, chunks taken in order at non-decreasing
    start positions; only the whitespace a chunk was trimmed of may fall between two chunks.

    A chunk can occur many times in repetitive text (``aaaa...``), so the positions are found by
    search: for each chunk, the occurrences that can follow some reachable position of the
    previous chunk (it started no later and, with the whitespace after it, reaches this one)."""
    if not text.strip(TRIM):
        assert chunks == [""]
        return
    n = len(text)
    first = n - len(text.lstrip(TRIM))
    last = len(text.rstrip(TRIM))
    # reach[e]: where a chunk ending at e reaches, counting the whitespace that follows it
    reach = list(range(n + 1))
    for e in range(n - 1, -1, -1):
        if text[e] in TRIM:
            reach[e] = reach[e + 1]
    starts, best = [-1], [first]  # a virtual chunk before the text; best = running max of reach
    for chunk in chunks:
        assert chunk and chunk == chunk.strip(TRIM)
        found: list[int] = []
        pos = text.find(chunk)
        while pos != -1:
            i = bisect.bisect_right(starts, pos)
            if i > 0 and best[i - 1] >= pos:
                found.append(pos)
            pos = text.find(chunk, pos + 1)
        assert found, f"chunk {chunk[:30]!r} cannot follow the previous chunks contiguously"
        starts, best = found, list(itertools.accumulate((reach[p + len(chunk)] for p in found), max))
    assert best[-1] >= last, "the end of the text is not covered"


def test_chunk_text_terminates_on_separator_free_text(chunker: Raw) -> None:
    """Regression: an infinite loop on text without separators when overlap > 0. A one-megabyte
    text at the default sizes must also finish well inside the timeout: it used to take time
    quadratic in its length (about ten seconds)."""
    big = chunk_text(chunker, "x" * 1_000_000, 1500, 200)
    assert len(big) > 600 and all(len(c) <= 1500 for c in big)
    uniform = chunk_text(chunker, "x" * 5_000, 100, 99)  # one step per character
    assert len(uniform) == 4_901 and set(uniform) == {"x" * 100}
    rnd = random.Random(2)
    base64ish = "".join(rnd.choice(string.ascii_letters + string.digits + "+/=") for _ in range(20_000))
    for body, max_chars, overlap in [
        (base64ish[:5000], 100, 99),
        (base64ish, 1500, 200),
        (base64ish[:3000], 2, 1),
        ("https://example.org/" + base64ish.replace("+", "/")[:9000], 300, 150),  # a long URL
        (base64ish[:5000], 1000, 999),
    ]:
        chunks = chunk_text(chunker, body, max_chars, overlap)
        assert chunks
        assert all(len(c) <= max_chars for c in chunks)
        assert_covers(body, chunks)
    # a long text with separators, past the point where the chunker re-anchors its reads
    prose = "\n\n".join(" ".join(f"Sentence {p}.{i} about glazes." for i in range(12)) for p in range(300))
    chunks = chunk_text(chunker, prose, 1500, 200)
    assert len(prose) > 100_000 and all(len(c) <= 1500 for c in chunks)
    assert_covers(prose, chunks)
    assert all(c.endswith(".") for c in chunks)  # every cut fell on a sentence or paragraph break


separator_free = st.text(alphabet="abcxyz0189-_/=+", min_size=1, max_size=400)
with_separators = st.lists(st.sampled_from([*"ab. \n\t", "\n\n", ". ", "word "]), max_size=120).map("".join)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    body=st.one_of(separator_free, with_separators),
    max_chars=st.integers(1, 60),
    overlap_fraction=st.floats(0, 0.99),
)
def test_chunk_text_covers_the_text_and_respects_max_chars(
    chunker: Raw, body: str, max_chars: int, overlap_fraction: float
) -> None:
    overlap = min(int(max_chars * overlap_fraction), max_chars - 1)
    chunks = chunk_text(chunker, body, max_chars, overlap)
    assert all(len(c) <= max_chars for c in chunks)
    assert_covers(body, chunks)
    assert chunk_text(chunker, body, max_chars, overlap) == chunks  # deterministic


def test_assert_covers_detects_a_gap() -> None:
    """The coverage check itself can fail."""
    with pytest.raises(AssertionError):
        assert_covers("abcdef", ["abc", "ef"])
    with pytest.raises(AssertionError):
        assert_covers("abcdef", ["abc", "cd"])
    assert_covers("abc def", ["abc", "def"])
    assert_covers("aaaa", ["aaa", "aa"])


def test_blank_text_is_one_empty_chunk(chunker: Raw, community: Groundkit) -> None:
    """Text that is only whitespace is one empty chunk, so the object is still found by its
    title (the title is indexed with every chunk). Regression: a body of "\\n" made no chunk."""
    for blank in ("", " ", "\n", "\t\r\n ", "\n\n"):
        assert chunk_text(chunker, blank, 1500, 200) == [""]
    for i, blank in enumerate(("", " ", "\n", "\t\r\n ")):
        community.put_object(f"blank{i}", 1, "event", "open", "T0", "Open studio night", blank)
    hits = community.search("t0", "studio")
    assert [(h.object_id, h.content) for h in hits] == [(f"blank{i}", "") for i in range(4)]


def test_chunk_text_is_deterministic(chunker: Raw) -> None:
    body = "\n\n".join(f"Paragraph {i}. " + "Some sentence here. " * 30 for i in range(10))
    first = chunk_text(chunker, body, 500, 100)
    assert len(first) > 5
    for _ in range(3):
        assert chunk_text(chunker, body, 500, 100) == first


def test_chunk_text_rejects_bad_sizes(chunker: Raw) -> None:
    for max_chars, overlap in [(0, 0), (-5, 0), (10, 10), (10, -1), (10, 11)]:
        with pytest.raises(psycopg.Error) as info:
            chunk_text(chunker, "some text", max_chars, overlap)
        assert info.value.sqlstate == "GK005"


def chunks_of(raw: Raw, content_type: str, body: str, segments: list[dict[str, Any]] | None, max_chars: int,
              overlap: int) -> list[tuple[Any, ...]]:
    return raw.execute(
        "select chunk_seq, content, start_ms, end_ms, chunker_version"
        " from groundkit._chunks_of(%s, null, %s, %s, null, %s, %s)",
        (content_type, body, Jsonb(segments) if segments is not None else None, max_chars, overlap),
    ).fetchall()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    body=st.one_of(separator_free, with_separators, st.sampled_from(["", " ", "\n\n", " a ", "a" * 60])),
    max_chars=st.integers(1, 60),
    overlap_fraction=st.floats(0, 0.99),
    content_type=st.sampled_from(["post", "transcript"]),
)
def test_chunks_of_is_one_window_or_chunk_text(
    chunker: Raw, body: str, max_chars: int, overlap_fraction: float, content_type: str
) -> None:
    """What a write chunks with (groundkit._chunks_of): a body that fits one window is that window,
    trimmed; any other body, and a transcript given as a body, is chunk_text's result. Guards the
    PL/pgSQL form of _chunks_of, which replaced a SQL union of three branches."""
    overlap = min(int(max_chars * overlap_fraction), max_chars - 1)
    rows = chunks_of(chunker, content_type, body, None, max_chars, overlap)
    assert all(r[2:] == (None, None, "gk-text-1") for r in rows)
    assert [r[:2] for r in rows] == list(enumerate(chunk_text(chunker, body, max_chars, overlap)))
    if len(body) <= max_chars and body.strip(TRIM):
        assert [r[1] for r in rows] == [body.strip(TRIM)]


def test_chunks_of_uses_segments_for_transcripts_and_rejects_bad_sizes(chunker: Raw) -> None:
    segments = [{"start_ms": 0, "end_ms": 10, "text": "intro"}, {"start_ms": 10, "end_ms": 20, "text": "more"}]
    assert chunks_of(chunker, "transcript", "ignored body", segments, 100, 10) == [
        (0, "intro more", 0, 20, "gk-segments-2")]
    for max_chars, overlap in [(0, 0), (10, 10), (10, -1)]:
        with pytest.raises(psycopg.Error) as info:
            chunks_of(chunker, "post", "some text", None, max_chars, overlap)
        assert info.value.sqlstate == "GK005"
        chunker.rollback()


# -- transcripts -----------------------------------------------------------------------------


def test_chunk_segments_splits_a_long_segment_keeping_its_times(chunker: Raw) -> None:
    segments = [{"start_ms": 0, "end_ms": 10, "text": "intro"},
                {"start_ms": 10, "end_ms": 99_000, "text": "word " * 100},
                {"start_ms": 99_000, "end_ms": 99_500, "text": "outro"}]
    rows = chunker.execute(
        "select content, start_ms, end_ms from groundkit.chunk_segments(%s, 100, 20)", (Jsonb(segments),)
    ).fetchall()
    assert rows[0] == ("intro", 0, 10)
    assert rows[-1] == ("outro", 99_000, 99_500)
    middle = rows[1:-1]
    assert len(middle) >= 5
    assert all(r[1:] == (10, 99_000) and len(r[0]) <= 100 for r in middle)


def test_transcripts_chunk_by_segments_and_search_returns_times(community: Groundkit, raw: Raw) -> None:
    gk = community
    segments = [
        {"start_ms": 0, "end_ms": 60_000, "text": "Welcome to the workshop. " + "Intro talk. " * 50},
        {"start_ms": 60_000, "end_ms": 125_000, "text": "Centering clay on the wheel. " + "More. " * 100},
        {"start_ms": 125_000, "end_ms": 190_000, "text": "Trimming the foot ring. " + "Detail. " * 100},
        {"start_ms": 190_000, "end_ms": 200_000, "text": "Questions about trimming."},
    ]
    gk.put_object("talk", 1, "transcript", "open", "T0", "Wheel workshop", "", segments=segments)
    chunks = raw.execute(
        "select chunk_seq, start_ms, end_ms, chunker_version from groundkit.chunks where object_id = 'talk'"
        " order by chunk_seq"
    ).fetchall()
    # segments of 624, 628, 823 and 25 characters: two to a 1,500-character window, no overlap
    # (no segment fits in 200 characters)
    assert [(c[1], c[2]) for c in chunks] == [(0, 125_000), (125_000, 200_000)]
    assert {c[3] for c in chunks} == {"gk-segments-2"}
    centering = gk.search("t0", "centering")
    assert [(h.start_ms, h.end_ms) for h in centering] == [(0, 125_000)]
    trimming = gk.search("t0", "trimming foot ring")
    assert [(h.chunk_seq, h.start_ms, h.end_ms) for h in trimming] == [(1, 125_000, 200_000)]
    # a body-only text object has no times
    gk.put_object("post", 1, "board_post", "open", "T0", "Trimming", "trimming tips")
    assert [(h.start_ms, h.end_ms) for h in gk.search("t0", "tips")] == [(None, None)]


MALFORMED: list[tuple[str, Any]] = [
    ("not an array", {"start_ms": 0, "end_ms": 1, "text": "x"}),
    ("a string", "0-1 x"),
    ("an empty array", []),
    ("not an object", [[0, 1, "x"]]),
    ("missing end_ms", [{"start_ms": 0, "text": "x"}]),
    ("missing text", [{"start_ms": 0, "end_ms": 1}]),
    ("extra key", [{"start_ms": 0, "end_ms": 1, "text": "x", "speaker": "A"}]),
    ("negative ms", [{"start_ms": -1, "end_ms": 1, "text": "x"}]),
    ("fractional start", [{"start_ms": 0.5, "end_ms": 1, "text": "x"}]),
    ("fractional end", [{"start_ms": 0, "end_ms": 1.25, "text": "x"}]),
    ("end before start", [{"start_ms": 10, "end_ms": 5, "text": "x"}]),
    ("ms as a string", [{"start_ms": "0", "end_ms": 1, "text": "x"}]),
    ("text not a string", [{"start_ms": 0, "end_ms": 1, "text": 7}]),
    ("ms beyond bigint", [{"start_ms": 0, "end_ms": 2**64, "text": "x"}]),
    ("a good then a bad segment", [{"start_ms": 0, "end_ms": 1, "text": "x"}, {"start_ms": 1, "text": "y"}]),
]


def nothing_stored(raw: Raw) -> bool:
    counts = raw.execute(
        "select (select count(*) from groundkit.content_log) + (select count(*) from groundkit.objects)"
        " + (select count(*) from groundkit.chunks)"
    ).fetchone()
    return counts == (0,)


def test_malformed_segments_raise_invalid_argument(community: Groundkit, raw: Raw) -> None:
    for name, segments in MALFORMED:
        with pytest.raises(psycopg.Error) as info:
            raw.execute(
                "select groundkit.put_object(object_id => 't', version => 1, content_type => 'transcript',"
                " space_id => 'open', tier_visibility => 'T0', title => 'T', body => null, segments => %s)",
                (Jsonb(segments),),
            )
        assert info.value.sqlstate == "GK005", name
        # The Python API takes a list of segments. (Its Segment model, like every model, is in
        # pydantic's lax mode and reads the string "0" as the number 0.)
        if isinstance(segments, list) and name != "ms as a string":
            with pytest.raises(InvalidArgument):
                community.put_object("t", 1, "transcript", "open", "T0", "T", "", segments=segments)
        assert nothing_stored(raw), name


def test_segments_on_a_non_transcript_raise_invalid_argument(community: Groundkit, raw: Raw) -> None:
    good = [{"start_ms": 0, "end_ms": 1, "text": "x"}]
    for content_type in ("board_post", "document", "course_section"):
        with pytest.raises(InvalidArgument):
            community.put_object("t", 1, content_type, "open", "T0", "T", "body", segments=good)
        with pytest.raises(psycopg.Error) as info:
            raw.execute(
                "select groundkit.put_object(object_id => 't', version => 1, content_type => %s,"
                " space_id => 'open', tier_visibility => 'T0', title => 'T', body => 'b', segments => %s)",
                (content_type, Jsonb(good)),
            )
        assert info.value.sqlstate == "GK005"
    assert nothing_stored(raw)


def test_whole_milliseconds_written_as_decimals_are_accepted(community: Groundkit, raw: Raw) -> None:
    """JSON has one number type: 1000.0 is a whole number of milliseconds."""
    raw.execute(
        "select groundkit.put_object(object_id => 't', version => 1, content_type => 'transcript',"
        " space_id => 'open', tier_visibility => 'T0', title => 'T', body => null, segments => %s::jsonb)",
        (json.dumps([{"start_ms": 1000.0, "end_ms": 2.5e3, "text": "kiln opening"}]),),
    )
    assert [(h.start_ms, h.end_ms) for h in community.search("t0", "kiln")] == [(1000, 2500)]


def test_every_chunk_records_chunker_version(community: Groundkit, raw: Raw) -> None:
    gk = community
    gk.put_object("doc", 1, "document", "open", "T0", "Doc", "A paragraph. " * 400)
    gk.put_object("empty", 1, "board_post", "open", "T0", "Only a title", "")
    gk.put_object("talk", 1, "transcript", "open", "T0", "Talk", "",
                  segments=[{"start_ms": 0, "end_ms": 5, "text": "hello"}])
    gk.put_object("talk2", 1, "transcript", "open", "T0", "Talk", "a transcript given as a body")
    rows = raw.execute(
        "select object_id, count(*), array_agg(distinct chunker_version) from groundkit.chunks"
        " group by object_id order by object_id"
    ).fetchall()
    by_object = {r[0]: (r[1], r[2]) for r in rows}
    assert by_object["doc"][0] > 1
    assert by_object["doc"][1] == ["gk-markdown-1"]
    assert by_object["empty"] == (1, ["gk-thread-1"])
    assert by_object["talk"] == (1, ["gk-segments-2"])
    assert by_object["talk2"] == (1, ["gk-text-1"])
    assert raw.execute(
        "select count(*) from groundkit.chunks where chunker_version is null or chunker_version = ''"
    ).fetchone() == (0,)
    gk.rebuild()
    assert raw.execute("select count(distinct chunker_version) from groundkit.chunks").fetchone() == (4,)
