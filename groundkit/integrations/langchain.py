"""A LangChain retriever over groundkit search (``pip install 'groundkit[langchain]'``).

The reader is fixed when the retriever is made and cannot change afterwards: the model is frozen,
and a call that passes any argument besides the query is refused (LangChain would otherwise drop
it silently). Each call is :meth:`groundkit.Groundkit.search`, so a downgrade, a revoked grant or a
delete counts from the next call on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import ConfigDict, Field

from groundkit.client import Groundkit
from groundkit.errors import InvalidArgument
from groundkit.integrations import citation_id, citation_metadata
from groundkit.models import MAX_K, SearchMode

try:
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("groundkit.integrations.langchain needs langchain-core: "
                      "pip install 'groundkit[langchain]'") from exc

__all__ = ["GroundkitRetriever"]


class GroundkitRetriever(BaseRetriever):
    """Documents for ``reader_sub``: each hit's chunk text as ``page_content``, its citation
    fields (object_id, object_version, chunk_seq, space_id, content_type, title, score, start_ms,
    end_ms, ...) as ``metadata``, ``id`` ``object:version:chunk``."""

    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)

    client: Groundkit
    reader_sub: str = Field(min_length=1, max_length=256)
    k: int = Field(default=10, ge=1, le=MAX_K)
    content_types: tuple[str, ...] | None = None
    space_ids: tuple[str, ...] | None = None
    mode: SearchMode | None = None  # auto, bm25, dense or hybrid (None: groundkit.models.DEFAULT_SEARCH_MODE)

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        if kwargs:
            raise InvalidArgument(
                f"GroundkitRetriever takes the query only (got {', '.join(sorted(kwargs))}); "
                "the reader is fixed when the retriever is made")
        hits = self.client.search(self.reader_sub, query, k=self.k,
                                  content_types=_list(self.content_types), space_ids=_list(self.space_ids),
                                  mode=self.mode)
        return [Document(page_content=h.content, metadata=citation_metadata(h), id=citation_id(h)) for h in hits]


def _list(values: Sequence[str] | None) -> list[str] | None:
    return None if values is None else list(values)
