"""WebVTT subtitles as a transcript (webvtt-py): one segment per cue, its timings in ms. Cue
settings are dropped by the parser; voice tags become a ``Speaker:`` prefix, other tags go."""

from __future__ import annotations

import io

from groundkit.loaders import Failed, Loaded
from groundkit.loaders.text import decode
from groundkit.models import Segment


def load(data: bytes, stem: str) -> Loaded:
    import webvtt
    from webvtt.errors import MalformedFileError

    text = decode(data)
    try:
        captions = webvtt.from_buffer(io.StringIO(text)).captions
    except (MalformedFileError, ValueError) as exc:
        raise Failed(f"malformed WebVTT: {exc}") from None
    segments = []
    for cue in captions:
        words = " ".join(cue.text.split())
        if cue.voice:
            words = f"{' '.join(cue.voice.split())}: {words}"
        start, end = cue.start_time.in_milliseconds(), cue.end_time.in_milliseconds()
        if end < start:
            raise Failed(f"malformed WebVTT: cue at {cue.start} ends before it starts ({cue.end})")
        segments.append(Segment(start_ms=start, end_ms=end, text=words))
    if not segments:
        raise Failed("malformed WebVTT: no cues")
    return Loaded(title=stem, body="\n".join(s.text for s in segments), segments=tuple(segments))
