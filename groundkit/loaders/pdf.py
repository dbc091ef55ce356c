"""PDF from its text layer (pypdf). The outline, where the PDF has one, becomes Markdown
headings placed before the text of the page each entry points at; the page count is capped."""

from __future__ import annotations

import io
from typing import Any

from groundkit.loaders import Failed, Loaded, Skipped


def _outline(reader: Any, items: list[Any], depth: int, into: dict[int, list[str]]) -> None:
    """Each outline entry as a heading of its depth (at most 6), under its page's index."""
    from pypdf.generic import Destination

    for item in items:
        if isinstance(item, list):
            _outline(reader, item, depth + 1, into)
        elif isinstance(item, Destination):
            page = reader.get_destination_page_number(item)
            title = " ".join(str(item.title or "").split())
            if page is not None and page >= 0 and title:
                into.setdefault(page, []).append(f"{'#' * min(depth, 6)} {title}")


def load(data: bytes, stem: str, *, max_pages: int) -> Loaded:
    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    if not data.lstrip()[:5] == b"%PDF-":
        raise Failed("not a PDF (no %PDF- header)")
    try:
        reader = PdfReader(io.BytesIO(data))
        n_pages = len(reader.pages)
        if n_pages > max_pages:
            raise Skipped(f"{n_pages} pages, over the cap of {max_pages}")
        headings: dict[int, list[str]] = {}
        try:
            _outline(reader, reader.outline, 1, headings)
        except (PyPdfError, KeyError, ValueError, TypeError, AttributeError):
            headings = {}  # a broken outline costs the headings, not the text
        parts: list[str] = []
        for i, page in enumerate(reader.pages):
            parts.extend(headings.get(i, ()))
            text = page.extract_text() or ""
            if text.strip():
                parts.append(text.strip())
        meta = reader.metadata
        title = " ".join(str(meta.title).split()) if meta is not None and meta.title else ""
    except Skipped:
        raise
    except (PyPdfError, KeyError, ValueError, TypeError, AttributeError, OSError, RecursionError) as exc:
        raise Failed(f"malformed PDF: {type(exc).__name__}: {exc}") from None
    body = "\n\n".join(parts).replace("\x00", "")
    if not body.strip():
        raise Skipped("no text layer (a scanned PDF needs OCR first)")
    return Loaded(title=title or stem, body=body)
