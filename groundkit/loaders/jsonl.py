"""JSON Lines of objects in the ``put_object`` shape, read one bounded line at a time: a line
longer than the bound is an error naming it (``groundkit ingest /dev/zero`` cannot grow), and a
UTF-8 byte-order mark before the first line is dropped."""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

from groundkit.errors import InvalidArgument
from groundkit.models import ContentObject

_BOM = b"\xef\xbb\xbf"


def objects_of(f: BinaryIO, name: str, max_line_bytes: int) -> Iterator[tuple[int, ContentObject, int]]:
    """(line number, object, the line's size in bytes) for each non-blank line; a line that is
    not a valid object, or longer than ``max_line_bytes``, is InvalidArgument naming the line."""
    n = 0
    while raw := f.readline(max_line_bytes + 1):
        n += 1
        if len(raw) > max_line_bytes and not raw.endswith(b"\n"):
            raise InvalidArgument(f"{name}:{n}: line longer than {max_line_bytes} bytes (--max-bytes)")
        size = len(raw)
        if n == 1 and raw.startswith(_BOM):
            raw = raw[len(_BOM):]
        if not raw.strip():
            continue
        try:
            obj = ContentObject.model_validate_json(raw)
        except ValueError as exc:
            raise InvalidArgument(f"{name}:{n}: {exc}") from None
        yield n, obj, size
