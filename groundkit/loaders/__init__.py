"""Loaders: turn one file's bytes into what ``put_object`` takes (a title, a body, and for
transcripts timed segments). One module per format; each imports its parser lazily, so the
``groundkit[loaders]`` extra is needed only for the formats that use one.

:func:`load` picks the loader by the file's suffix. A loader raises :class:`Skipped` for a
file that is not what its name says (binary, not UTF-8, no text) and :class:`Failed` for a
file its parser rejects, with the parser's reason.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from groundkit.models import Segment

__all__ = ["DEFAULT_CONTENT_TYPES", "LOADER_VERSION", "Failed", "Loaded", "Skipped", "kind_of", "load"]

# Bumped when a loader's output for the same bytes changes: re-ingesting then writes new versions.
LOADER_VERSION = 1

# suffix -> (loader module, format name)
_KINDS: dict[str, tuple[str, str]] = {
    ".md": ("text", "markdown"), ".markdown": ("text", "markdown"),
    ".txt": ("text", "text"), ".text": ("text", "text"),
    ".html": ("html", "html"), ".htm": ("html", "html"), ".xhtml": ("html", "html"),
    ".pdf": ("pdf", "pdf"),
    ".vtt": ("vtt", "vtt"),
    ".srt": ("srt", "srt"),
    ".jsonl": ("jsonl", "jsonl"),
}

DEFAULT_CONTENT_TYPES = {"vtt": "transcript", "srt": "transcript"}  # every other format: document


class Skipped(Exception):
    """The file is not loaded, for a reason that is not the parser's (binary, oversize, empty)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Failed(Exception):
    """The file's parser rejected it; ``reason`` is the parser's."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Loaded:
    """One file as an object's content. ``body`` uses Markdown ``#`` headings for the
    document's own headings, so the chunker can make heading paths of them."""

    title: str
    body: str
    segments: tuple[Segment, ...] | None = None


def kind_of(name: str) -> str | None:
    """The format of a file called ``name`` (by its suffix, any case), or None if no loader reads it."""
    dot = name.rfind(".")
    found = _KINDS.get(name[dot:].lower()) if dot > 0 else None
    return found[1] if found else None


def load(kind: str, data: bytes, stem: str, *, max_pages: int) -> Loaded:
    """Load a file of format ``kind`` (see :func:`kind_of`; not jsonl) from its bytes.
    ``stem`` is the title when the file names none; ``max_pages`` caps a PDF."""
    module = next(m for m, k in _KINDS.values() if k == kind)
    loader = importlib.import_module(f"groundkit.loaders.{module}")
    if kind == "pdf":
        result: Loaded = loader.load(data, stem, max_pages=max_pages)
    elif kind == "markdown":
        result = loader.load_markdown(data, stem)
    elif kind == "text":
        result = loader.load_text(data, stem)
    else:
        result = loader.load(data, stem)
    if not result.body.strip():
        raise Skipped("no text")
    return result
