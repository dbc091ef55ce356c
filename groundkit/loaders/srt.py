"""SRT subtitles as a transcript (the ``srt`` library, strict): one segment per cue, its
timings in ms; a BOM and CRLF line ends are fine; formatting tags (``<i>``, ``{\\an8}``) go."""

from __future__ import annotations

import re

from groundkit.loaders import Failed, Loaded
from groundkit.loaders.text import decode
from groundkit.models import Segment

_TAGS = re.compile(r"</?[a-zA-Z][^>]*>|\{\\[^}]*\}")


def _ms(delta: object) -> int:
    from datetime import timedelta

    assert isinstance(delta, timedelta)
    return delta // timedelta(milliseconds=1)


def load(data: bytes, stem: str) -> Loaded:
    import srt

    text = decode(data)  # drops the BOM, turns CRLF into LF
    try:
        cues = list(srt.parse(text))
    except srt.SRTParseError as exc:
        raise Failed(f"malformed SRT: {exc}") from None
    segments = []
    for cue in cues:
        start, end = _ms(cue.start), _ms(cue.end)
        if start < 0 or end < start:
            raise Failed(f"malformed SRT: cue {cue.index} has times {cue.start} --> {cue.end}")
        segments.append(Segment(start_ms=start, end_ms=end, text=" ".join(_TAGS.sub("", cue.content).split())))
    if not segments:
        raise Failed("malformed SRT: no cues")
    return Loaded(title=stem, body="\n".join(s.text for s in segments), segments=tuple(segments))
