"""A LangChain retriever over groundkit search (``pip install 'groundkit[langchain]'``).

The reader is fixed when the retriever is made and cannot change afterwards: the model is frozen,
a call may set only ``k``, ``mode``, ``content_types`` and ``space_ids`` (LangChain's per-call
keyword arguments, ``retriever.invoke(query, k=3)``), and any other argument, a reader in any
spelling among them, is refused (LangChain would otherwise drop it silently); nor can the reader
or the client be made configurable (``configurable_fields``). Each call is
:meth:`groundkit.Groundkit.search`, so a downgrade, a revoked grant or a delete counts from the
next call on.
"""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field

from groundkit.errors import InvalidArgument
from groundkit.integrations import PER_CALL, AnyClient, asearch, call_options, citation_id, citation_metadata, search
from groundkit.models import MAX_K, SearchHit, SearchMode

try:
    from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.messages.content import Citation, create_citation
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.runnables import RunnableSerializable
    from langchain_core.runnables.utils import AnyConfigurableField
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("groundkit.integrations.langchain needs langchain-core: "
                      "pip install 'groundkit[langchain]'") from exc

__all__ = ["GroundkitRetriever", "to_citation", "to_document"]

# What LangChain's own invoke reads from the keyword arguments and then passes on to the
# retriever all the same (langchain_core.retrievers.BaseRetriever.invoke): not ours to refuse.
_LANGCHAIN_OWN = ("verbose",)
# Fields that say whose search this is: never configurable per call.
_FIXED = ("client", "reader_sub")


class GroundkitRetriever(BaseRetriever):
    """Documents for ``reader_sub``: each hit's chunk text as ``page_content``, ``id``
    ``object:version:chunk``, and as ``metadata`` every field of the hit but its text
    (object_id, object_version, chunk_seq, char_start, char_end, start_ms, end_ms,
    heading_path, thread_id, thread_title, title, score, ...) plus LangChain's own keys:
    ``source`` (the object id) and ``start_index`` (``char_start``), as its loaders and text
    splitters write them."""

    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)

    client: AnyClient  # a Groundkit, or an AsyncGroundkit (then ainvoke only, awaited natively)
    reader_sub: str = Field(min_length=1, max_length=256)
    k: int = Field(default=10, ge=1, le=MAX_K)
    content_types: tuple[str, ...] | None = None
    space_ids: tuple[str, ...] | None = None
    mode: SearchMode | None = None  # auto, bm25, dense or hybrid (None: groundkit.models.DEFAULT_SEARCH_MODE)

    def _options(self, given: dict[str, Any]) -> dict[str, Any]:
        for name in _LANGCHAIN_OWN:
            given.pop(name, None)
        defaults = {"k": self.k, "mode": self.mode, "content_types": self.content_types, "space_ids": self.space_ids}
        return call_options(type(self).__name__, defaults, given)

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        options = self._options(kwargs)
        return [to_document(h) for h in search(self.client, self.reader_sub, query, options)]

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        options = self._options(kwargs)
        return [to_document(h) for h in await asearch(self.client, self.reader_sub, query, options)]

    def configurable_fields(self, **kwargs: AnyConfigurableField) -> RunnableSerializable[str, list[Document]]:
        """As LangChain's, for the search options (:data:`~groundkit.integrations.PER_CALL`);
        the reader and the client are refused: a per-call configuration must not pick whose
        search it is."""
        fixed = sorted(set(kwargs) & set(_FIXED))
        if fixed:
            raise InvalidArgument(f"{', '.join(fixed)} cannot be configurable: the reader is fixed when the "
                                  f"retriever is made (per call: {', '.join(PER_CALL)})")
        return super().configurable_fields(**kwargs)


def to_document(hit: SearchHit) -> Document:
    """A search hit as a LangChain ``Document`` (what the retriever returns)."""
    metadata = citation_metadata(hit)
    metadata["source"] = hit.object_id
    metadata["start_index"] = hit.char_start
    return Document(page_content=hit.content, metadata=metadata, id=citation_id(hit))


# The fields of a document's metadata that say where the cited text lies; to_citation carries
# them in the citation's extras.
_WHERE = ("object_id", "object_version", "chunk_seq", "char_start", "char_end", "start_ms", "end_ms",
          "heading_path", "thread_id", "thread_title")


def to_citation(document: Document, *, start_index: int | None = None, end_index: int | None = None,
                url: str | None = None) -> Citation:
    """A retrieved document as a LangChain citation block (``langchain_core.messages.content``,
    made with its ``create_citation``), for annotating an answer: the document's title and text
    as ``title`` and ``cited_text``; ``start_index``/``end_index`` are where the answer cites it
    (offsets into the answer, as LangChain defines them); where the text lies in groundkit
    (object, version, chunk, offsets, times, headings, thread) goes in ``extras``. ``url``: the
    object's address in your app, if it has one (groundkit has none)."""
    meta = document.metadata
    return create_citation(url=url, title=meta.get("title"), start_index=start_index, end_index=end_index,
                           cited_text=document.page_content, **{name: meta.get(name) for name in _WHERE})
