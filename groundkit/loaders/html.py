"""HTML as text: headings become Markdown ``#`` headings; nothing a browser would not show
(script, style, template, noscript, elements marked hidden) reaches the body. Parsed with
Beautiful Soup on the standard library's parser (no compiled dependency)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from groundkit.loaders import Loaded, Skipped

if TYPE_CHECKING:
    from bs4.element import PageElement, Tag

_HIDDEN_TAGS = ("head", "script", "style", "template", "noscript", "iframe", "object", "embed", "svg", "canvas")
_HEADINGS = {f"h{n}": n for n in range(1, 7)}
_BLOCKS = frozenset({
    "address", "article", "aside", "blockquote", "body", "dd", "details", "dialog", "div", "dl", "dt",
    "fieldset", "figcaption", "figure", "footer", "form", "header", "hr", "li", "main", "nav", "ol", "p",
    "pre", "section", "summary", "table", "tr", "td", "th", "ul",
})
_HIDDEN_STYLE = re.compile(r"display\s*:\s*none|visibility\s*:\s*hidden", re.IGNORECASE)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_HEADING_MARK = "\x01"  # marks the lines this loader made headings; never in text (controls are removed)


def _hidden(tag: Tag) -> bool:
    attrs = tag.attrs or {}
    if "hidden" in attrs or str(attrs.get("aria-hidden", "")).lower() == "true":
        return True
    if tag.name == "input" and str(attrs.get("type", "")).lower() == "hidden":
        return True
    return bool(_HIDDEN_STYLE.search(str(attrs.get("style", ""))))


def _inline(text: str) -> str:
    return " ".join(_CONTROL.sub(" ", text).split())


def _parts(root: Tag) -> list[str]:
    """The visible text in document order, blocks separated by blank lines; an explicit stack,
    so a deeply nested page cannot exhaust the recursion limit."""
    from bs4.element import NavigableString, Tag

    parts: list[str] = []
    stack: list[PageElement | str] = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, str) and not isinstance(node, NavigableString):
            parts.append(node)  # a block's closing break
        elif isinstance(node, NavigableString):
            if type(node) is NavigableString:  # not a comment, doctype, CDATA, script or style string
                parts.append(" " + _inline(str(node)) + " ")
        elif isinstance(node, Tag):
            if node.name in _HEADINGS:
                text = _inline(node.get_text(" "))
                if text:
                    parts.append(f"\n\n{_HEADING_MARK}{'#' * _HEADINGS[node.name]} {text}\n\n")
            elif node.name == "br":
                parts.append("\n")
            else:
                if node.name in _BLOCKS:
                    parts.append("\n\n")
                    stack.append("\n\n")
                stack.extend(reversed(node.contents))
    return parts


def _body(parts: list[str]) -> str:
    """Joined lines, trimmed; a visible line that starts with ``#`` is escaped, so only the
    page's own headings read as Markdown headings."""
    lines = []
    for raw in "".join(parts).split("\n"):
        line = " ".join(raw.split())
        if line.startswith(_HEADING_MARK):
            line = line[1:]
        elif line.startswith("#"):
            line = "\\" + line
        lines.append(line)
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def load(data: bytes, stem: str) -> Loaded:
    from bs4 import BeautifulSoup

    if b"\x00" in data[:8192]:
        raise Skipped("binary file (NUL bytes)")
    soup = BeautifulSoup(data, "html.parser")
    title_tag = soup.find("title")
    title = _inline(title_tag.get_text(" ")) if title_tag is not None else ""
    for tag in soup.find_all(_HIDDEN_TAGS):
        tag.decompose()
    for tag in soup.find_all(_hidden):
        if not tag.decomposed:
            tag.decompose()
    if not title:
        h1 = soup.find("h1")
        title = _inline(h1.get_text(" ")) if h1 is not None else ""
    return Loaded(title=title or stem, body=_body(_parts(soup)))
