"""Meeting transcripts as ``groundkit eval quality`` measures them (QMSum's layout).

The collection folder is BEIR (documents are windows of ten speaker turns, ``MEETING:s-e`` with
``e`` inclusive; queries ``MEETING:qJ``) with ``segments.jsonl`` beside it: every turn of every
meeting, ``{"meeting", "turn", "speaker", "text"}``, ``turn`` the source index the judgments
count in (a blank turn keeps its line). Two views of the same judgments:

- **windows**: the prepared windows as documents, one chunk each, as the judgments name them.
- **turns**: each meeting written as one ``transcript`` with its turns as segments, cut by
  groundkit's own transcript chunker (``chunk_transcript``) at the content type's chunk sizes,
  as a community's recordings would be. The chunks are the documents scored.

QMSum has no times, so turn ``i`` is given the times ``[i * TURN_MS, next * TURN_MS - 1]``
(``next``: the next turn with text); there is no pause anywhere, and the chunker cuts after the
last sentence end that fits. A chunk's times give back the turns it covers.

Mapping the judgments onto chunks: the collection records relevance per window (a window is
relevant when it overlaps an annotated span of turns); the spans themselves are not in the
folder. A chunk is relevant to a query when it belongs to the query's meeting and covers a turn
of a window judged relevant for it, with that window's grade (the highest, if several). This is
exact where a span fills its windows, and generous by up to nine turns at a span's two ends.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from groundkit.models import ContentObject, Segment
from groundkit.quality.datasets import Collection, CollectionFormatError, Doc

__all__ = [
    "TURN_MS",
    "ChunkSpan",
    "Turn",
    "meeting_objects",
    "meeting_of",
    "read_turns",
    "turns_collection",
    "window_turns",
    "with_meetings",
]

#: the synthetic length of one turn, in milliseconds: a chunk's times divided by it are turns
TURN_MS: Final = 1000


@dataclass(frozen=True, slots=True)
class Turn:
    """One speaker turn of a meeting (``turn``: its index in the meeting, from 0)."""

    meeting: str
    turn: int
    speaker: str
    text: str


@dataclass(frozen=True, slots=True)
class ChunkSpan:
    """One chunk groundkit made of a meeting, and the turns its times cover (inclusive)."""

    meeting: str
    chunk_seq: int
    first_turn: int
    last_turn: int
    content: str

    @property
    def doc_id(self) -> str:
        return f"{self.meeting}#{self.chunk_seq}:{self.first_turn}-{self.last_turn}"


def meeting_of(item_id: str) -> str:
    """The meeting a window (``MEETING:s-e``) or query (``MEETING:qJ``) id names."""
    meeting, sep, rest = item_id.rpartition(":")
    if not sep or not meeting or not rest:
        raise CollectionFormatError(f"{item_id!r} does not name its meeting (expected MEETING:...)")
    return meeting


def window_turns(doc_id: str) -> tuple[int, int]:
    """The first and last turn (inclusive) of a window id ``MEETING:s-e``."""
    first, sep, last = doc_id.rpartition(":")[2].partition("-")
    if not sep or not first.isdigit() or not last.isdigit() or int(last) < int(first):
        raise CollectionFormatError(f"{doc_id!r} is not a window id MEETING:s-e")
    return int(first), int(last)


def with_meetings(collection: Collection) -> Collection:
    """The windows collection with each document's and query's meeting, as ``transcript``s."""
    return collection.model_copy(update={
        "content_type": "transcript",
        "doc_groups": {d.doc_id: meeting_of(d.doc_id) for d in collection.docs},
        "query_groups": {q.query_id: meeting_of(q.query_id) for q in collection.queries},
    })


def read_turns(path: Path) -> dict[str, list[Turn]]:
    """``segments.jsonl`` at ``path``: each meeting's turns, in order; turns must run 0, 1, 2, ..."""
    meetings: dict[str, list[Turn]] = defaultdict(list)
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                turn = Turn(str(record["meeting"]), int(record["turn"]), str(record["speaker"]), str(record["text"]))
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
                raise CollectionFormatError(
                    f"{path}:{lineno}: expected {{meeting, turn, speaker, text}}: {exc}") from exc
            if turn.turn != len(meetings[turn.meeting]):
                raise CollectionFormatError(f"{path}:{lineno}: meeting {turn.meeting!r} turn {turn.turn}, expected "
                                            f"{len(meetings[turn.meeting])}")
            meetings[turn.meeting].append(turn)
    return dict(meetings)


def _segments(turns: list[Turn]) -> tuple[Segment, ...]:
    """A meeting's turns with text as segments ``Speaker: text``, timed so that times give
    turns back and no gap is a pause (a blank turn's time goes to the turn before it)."""
    spoken = [t for t in turns if t.text.strip()]
    segments = []
    for n, t in enumerate(spoken):
        following = spoken[n + 1].turn if n + 1 < len(spoken) else t.turn + 1
        segments.append(Segment(start_ms=t.turn * TURN_MS, end_ms=following * TURN_MS - 1,
                                text=f"{t.speaker}: {t.text}" if t.speaker else t.text))
    return tuple(segments)


def meeting_objects(meetings: Mapping[str, list[Turn]], tier: str, space_of: Mapping[str, str]) -> list[ContentObject]:
    """One ``transcript`` per meeting, its turns as segments, in the space ``space_of`` names."""
    objects = []
    for meeting, turns in meetings.items():
        segments = _segments(turns)
        if not segments:
            raise CollectionFormatError(f"meeting {meeting!r} has no turn with text")
        objects.append(ContentObject(
            object_id=meeting, version=1, content_type="transcript", space_id=space_of[meeting],
            tier_visibility=tier, title=meeting, body="\n".join(s.text for s in segments), segments=segments))
    return objects


def turns_collection(windows: Collection, chunks: Iterable[ChunkSpan]) -> Collection:
    """The collection of groundkit's chunks of the meetings, with the windows' judgments mapped
    onto them (the module's docstring says how) and the windows' queries."""
    judged: dict[str, list[tuple[str, int, int, int]]] = defaultdict(list)  # meeting -> (query, first, last, grade)
    for query_id, docs in windows.qrels.items():
        for doc_id, grade in docs.items():
            if grade > 0:
                first, last = window_turns(doc_id)
                judged[meeting_of(doc_id)].append((query_id, first, last, grade))
    spans = list(chunks)
    qrels: dict[str, dict[str, int]] = {q: {} for q in windows.qrels}
    for c in spans:
        for query_id, first, last, grade in judged.get(c.meeting, ()):
            if first <= c.last_turn and last >= c.first_turn:
                qrels[query_id][c.doc_id] = max(qrels[query_id].get(c.doc_id, 0), grade)
    return windows.model_copy(update={
        "docs": tuple(Doc(doc_id=c.doc_id, title=c.meeting, text=c.content) for c in spans),
        "qrels": qrels,
        "doc_groups": {c.doc_id: c.meeting for c in spans},
    })
