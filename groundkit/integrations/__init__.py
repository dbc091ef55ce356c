"""Adapters for agent frameworks: each is an optional extra, imported only by its own module.

- :mod:`groundkit.integrations.langchain`: ``GroundkitRetriever``, a LangChain ``BaseRetriever``
  (``pip install 'groundkit[langchain]'``).
- :mod:`groundkit.integrations.llamaindex`: ``GroundkitRetriever``, a LlamaIndex ``BaseRetriever``
  (``pip install 'groundkit[llamaindex]'``).

Both search with :meth:`groundkit.Groundkit.search` itself, for a reader fixed when the retriever
is made: the live permission predicate at every call, no second store, no permission metadata
stamped at ingest (docs/integrations.md).
"""

from __future__ import annotations

from typing import Any

from groundkit.models import SearchHit


def citation_metadata(hit: SearchHit) -> dict[str, Any]:
    """A hit's citation fields, for a framework's document metadata: every field of the hit but
    its text, so that a field the hit gains is carried without a change here."""
    return hit.model_dump(exclude={"content"})


def citation_id(hit: SearchHit) -> str:
    """The chunk's stable id: object, version, chunk."""
    return f"{hit.object_id}:{hit.object_version}:{hit.chunk_seq}"
