"""Markdown and plain text: UTF-8 (a byte-order mark is dropped); the body is the text as is."""

from __future__ import annotations

import re

from groundkit.loaders import Loaded, Skipped

_SNIFF = 8192
_ATX = re.compile(r"^ {0,3}#{1,6}[ \t]+(.+?)[ \t#]*$", re.MULTILINE)


def decode(data: bytes) -> str:
    """UTF-8 text without a BOM; :class:`Skipped` for a binary file (a NUL byte near the start)
    or bytes that are not UTF-8."""
    if b"\x00" in data[:_SNIFF]:
        raise Skipped("binary file (NUL bytes)")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise Skipped(f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if "\x00" in text:
        raise Skipped("binary file (NUL bytes)")
    return text.replace("\r\n", "\n").replace("\r", "\n")


def load_markdown(data: bytes, stem: str) -> Loaded:
    """Markdown: the title is the first heading's text, else ``stem``."""
    text = decode(data)
    first = _ATX.search(text)
    return Loaded(title=first.group(1).strip() if first else stem, body=text)


def load_text(data: bytes, stem: str) -> Loaded:
    return Loaded(title=stem, body=decode(data))
