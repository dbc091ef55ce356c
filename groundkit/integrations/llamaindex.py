"""A LlamaIndex retriever over groundkit search (``pip install 'groundkit[llamaindex]'``).

The reader is fixed when the retriever is made (a read-only property). A query is a string or a
``QueryBundle``; :class:`GroundkitQuery`, a ``QueryBundle`` with ``k``, ``mode``,
``content_types`` and ``space_ids``, sets them for one call, through ``retrieve`` and
``aretrieve`` and through any query engine that hands the bundle on. Neither has a place for a
reader. Each call is :meth:`groundkit.Groundkit.search`, so a downgrade, a revoked grant or a
delete counts from the next call on. ``aretrieve`` is native: it does not block the event loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from groundkit.errors import InvalidArgument
from groundkit.integrations import PER_CALL, AnyClient, asearch, call_options, citation_id, citation_metadata, search
from groundkit.models import MAX_K, SearchHit, SearchMode

try:
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import (
        NodeRelationship,
        NodeWithScore,
        ObjectType,
        QueryBundle,
        RelatedNodeInfo,
        TextNode,
    )
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("groundkit.integrations.llamaindex needs llama-index-core: "
                      "pip install 'groundkit[llamaindex]'") from exc

__all__ = ["GroundkitQuery", "GroundkitRetriever", "to_node"]


@dataclass(kw_only=True)
class GroundkitQuery(QueryBundle):
    """A ``QueryBundle`` with one call's search options (``None``: the retriever's):
    ``retriever.retrieve(GroundkitQuery("compost", k=3, mode="hybrid"))``."""

    k: int | None = None
    mode: SearchMode | None = None
    content_types: Sequence[str] | None = None
    space_ids: Sequence[str] | None = None


class GroundkitRetriever(BaseRetriever):
    """Nodes for ``reader_sub``: each hit as a ``TextNode`` (see :func:`to_node`) with the hit's
    score."""

    def __init__(
        self,
        client: AnyClient,
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
        # auto, bm25, dense or hybrid (mode None: groundkit.models.DEFAULT_SEARCH_MODE)
        self._defaults: dict[str, Any] = {
            "k": k, "mode": mode, "content_types": None if content_types is None else tuple(content_types),
            "space_ids": None if space_ids is None else tuple(space_ids)}
        super().__init__(**kwargs)

    @property
    def reader_sub(self) -> str:
        return self._reader_sub

    def _options(self, query_bundle: QueryBundle) -> dict[str, Any]:
        given = {}
        if isinstance(query_bundle, GroundkitQuery):
            given = {name: getattr(query_bundle, name) for name in PER_CALL
                     if getattr(query_bundle, name) is not None}
        return call_options(type(self).__name__, self._defaults, given)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        options = self._options(query_bundle)
        return [to_node(h) for h in search(self._client, self._reader_sub, query_bundle.query_str, options)]

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        options = self._options(query_bundle)
        hits = await asearch(self._client, self._reader_sub, query_bundle.query_str, options)
        return [to_node(h) for h in hits]


# What the LLM reads of a node's metadata (LlamaIndex renders the rest into its context unless
# excluded): where the text comes from in words and time. Ids, offsets, scores, ranks and the
# chunker are for the app, not the model.
_FOR_THE_LLM = ("title", "heading_path", "thread_title", "start_ms", "end_ms")


def to_node(hit: SearchHit) -> NodeWithScore:
    """A search hit as LlamaIndex's ``NodeWithScore`` (what the retriever returns): a
    ``TextNode`` whose id is ``object:version:chunk``, text the chunk, ``start_char_idx`` /
    ``end_char_idx`` its offsets in the object's body, its SOURCE relationship the object (so
    ``ref_doc_id`` is the object id), and as metadata every field of the hit but its text; of
    those, only title, heading path, thread title and times are shown to the LLM or embedded."""
    metadata = citation_metadata(hit)
    hidden = [name for name, value in metadata.items() if name not in _FOR_THE_LLM or value is None]
    node = TextNode(
        id_=citation_id(hit), text=hit.content, metadata=metadata,
        start_char_idx=hit.char_start, end_char_idx=hit.char_end,
        relationships={NodeRelationship.SOURCE: RelatedNodeInfo(
            node_id=hit.object_id, node_type=ObjectType.DOCUMENT,
            metadata={"object_version": hit.object_version, "title": hit.title})},
        excluded_llm_metadata_keys=hidden, excluded_embed_metadata_keys=hidden)
    return NodeWithScore(node=node, score=hit.score)
