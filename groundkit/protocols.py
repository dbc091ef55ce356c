"""Protocols that groundkit's implementations conform to.

Implementations must use the protocol's parameter names exactly: callers pass them by keyword,
and a renamed parameter (``_query`` for ``query``) turns a keyword call into a TypeError or,
worse, a silently ignored argument. tests/test_protocols.py checks every implementation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from groundkit.models import SearchHit, SearchMode


@runtime_checkable
class Retriever(Protocol):
    def search(
        self,
        reader_sub: str,
        query: str,
        k: int = 10,
        content_types: Sequence[str] | None = None,
        space_ids: Sequence[str] | None = None,
        snippet_start: str = "<mark>",
        snippet_end: str = "</mark>",
        *,
        mode: SearchMode | None = None,
        exact: bool = False,
        fusion: str | None = None,
        rrf_k: int | None = None,
        bm25_weight: float | None = None,
        dense_weight: float | None = None,
        depth: int | None = None,
        match_gate: bool | None = None,
    ) -> list[SearchHit]: ...
