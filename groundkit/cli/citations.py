"""How the CLI shows a hit's citation: jump-to-time, heading path, thread, and the snippet with
its matches highlighted (``groundkit search``, ``groundkit cite``, ``groundkit demo``)."""

from __future__ import annotations

import html
import re

from rich.markup import escape

from groundkit.models import Citation, SearchHit

MARK_START = "<mark>"
MARK_END = "</mark>"


def clock(ms: int) -> str:
    """A time in a recording as a player shows it: ``12:41``, or ``1:02:07`` past an hour."""
    seconds = ms // 1000
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def where(hit: SearchHit | Citation) -> str:
    """The citation in one line: a transcript's time, a section's headings, a post's thread."""
    parts = []
    if hit.start_ms is not None:
        parts.append(f"▶ {clock(hit.start_ms)}" + (f"-{clock(hit.end_ms)}" if hit.end_ms is not None else ""))
    if hit.heading_path:
        parts.append(" \N{SINGLE RIGHT-POINTING ANGLE QUOTATION MARK} ".join(hit.heading_path))
    if hit.thread_title is not None and hit.thread_id != hit.object_id:
        parts.append(f"in thread “{hit.thread_title}”")
    return " · ".join(parts)


def snippet_markup(snippet: str) -> str:
    """A snippet made with the default markers as rich markup: the matches bold. The chunk's
    text in a snippet is HTML-escaped, so every literal ``<mark>`` in it is a marker."""
    pieces = []
    for i, part in enumerate(snippet.split(MARK_START)):
        inner, _, after = part.partition(MARK_END) if i else ("", "", part)
        if i:
            pieces.append(f"[bold yellow]{escape(html.unescape(inner))}[/]")
        pieces.append(escape(html.unescape(after)))
    return re.sub(r" {2,}", " ", "".join(pieces))
