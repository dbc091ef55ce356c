"""A LlamaIndex retriever over groundkit search (``pip install 'groundkit[llamaindex]'``).

The reader is fixed when the retriever is made (a read-only property); a query is a
``QueryBundle``, which has no place for a reader. Each call is :meth:`groundkit.Groundkit.search`,
so a downgrade, a revoked grant or a delete counts from the next call on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from groundkit.client import Groundkit
from groundkit.errors import InvalidArgument
from groundkit.integrations import citation_id, citation_metadata
from groundkit.models import MAX_K, SearchMode

try:
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("groundkit.integrations.llamaindex needs llama-index-core: "
                      "pip install 'groundkit[llamaindex]'") from exc

__all__ = ["GroundkitRetriever"]


class GroundkitRetriever(BaseRetriever):
    """Nodes for ``reader_sub``: each hit as a ``TextNode`` (the chunk text, its citation fields
    as ``metadata``, ``id_`` ``object:version:chunk``) with the hit's BM25 score."""

    def __init__(
        self,
        client: Groundkit,
        reader_sub: str,
        k: int = 10,
        content_types: Sequence[str] | None = None,
        space_ids: Sequence[str] | None = None,
        mode: SearchMode | None = None,
        **kwargs: Any,
    ) -> None:
        if not isinstance(reader_sub, str) or not 1 <= len(reader_sub) <= 256:
            raise InvalidArgument("reader_sub must be between 1 and 256 characters")
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
            raise InvalidArgument(f"k must be between 1 and {MAX_K} (got {k!r})")
        self._client = client
        self._reader_sub = reader_sub
        self._k = k
        self._content_types = None if content_types is None else list(content_types)
        self._space_ids = None if space_ids is None else list(space_ids)
        self._mode = mode  # auto, bm25, dense or hybrid (None: groundkit.models.DEFAULT_SEARCH_MODE)
        super().__init__(**kwargs)

    @property
    def reader_sub(self) -> str:
        return self._reader_sub

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        hits = self._client.search(self._reader_sub, query_bundle.query_str, k=self._k,
                                   content_types=self._content_types, space_ids=self._space_ids,
                                   mode=self._mode)
        return [NodeWithScore(node=TextNode(id_=citation_id(h), text=h.content, metadata=citation_metadata(h)),
                              score=h.score)
                for h in hits]
