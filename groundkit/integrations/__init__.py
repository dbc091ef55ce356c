"""Adapters for agent frameworks: each is an optional extra, imported only by its own module.

- :mod:`groundkit.integrations.langchain`: ``GroundkitRetriever``, a LangChain ``BaseRetriever``
  (``pip install 'groundkit[langchain]'``).
- :mod:`groundkit.integrations.llamaindex`: ``GroundkitRetriever``, a LlamaIndex ``BaseRetriever``
  (``pip install 'groundkit[llamaindex]'``).

Both search with :meth:`groundkit.Groundkit.search` itself, for a reader fixed when the retriever
is made: the live permission predicate at every call, no second store, no permission metadata
stamped at ingest (docs/integrations.md). What this module holds is what both share: which
options a call may set (:data:`PER_CALL`, never the reader), the one sync and the one async way
to search, and the citation fields a hit carries into a framework's document.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from groundkit.aio import AsyncGroundkit
from groundkit.client import Groundkit
from groundkit.errors import InvalidArgument
from groundkit.models import SearchHit

__all__ = ["PER_CALL", "AnyClient", "asearch", "call_options", "citation_id", "citation_metadata", "search"]

#: The search options a single call may set, in each framework's own way; each defaults to the
#: retriever's. The reader is not among them, whatever it is called: it is fixed when the
#: retriever is made.
PER_CALL: tuple[str, ...] = ("k", "mode", "content_types", "space_ids")


def call_options(retriever: str, defaults: Mapping[str, Any], given: Mapping[str, Any]) -> dict[str, Any]:
    """The options of one call: ``defaults`` (the retriever's) overridden by ``given``, which may
    name only :data:`PER_CALL`. Anything else, a reader in any spelling among it, is refused
    with :class:`InvalidArgument` before anything is searched. Values are checked by
    :meth:`Groundkit.search` itself (one implementation of each rule: ``k`` within 1..MAX_K, a
    known mode and content types, lists rather than a string)."""
    unknown = sorted(set(given) - set(PER_CALL))
    if unknown:
        raise InvalidArgument(
            f"{retriever} takes {', '.join(PER_CALL)} per call (got {', '.join(map(repr, unknown))}); "
            "the reader is fixed when the retriever is made")
    return {**defaults, **given}


#: what a retriever searches with: the sync client, or the async one (then only the framework's
#: async entry points answer)
AnyClient = Groundkit | AsyncGroundkit


def search(client: AnyClient, reader_sub: str, query: str, options: Mapping[str, Any]) -> list[SearchHit]:
    """One search for the retriever's reader, with one call's options (:func:`call_options`)."""
    if isinstance(client, AsyncGroundkit):
        raise InvalidArgument("this retriever searches with an AsyncGroundkit: call its async entry point "
                              "(ainvoke, aretrieve), or give it a Groundkit for the sync one")
    return client.search(reader_sub, query, k=options["k"], content_types=_list(options.get("content_types")),
                         space_ids=_list(options.get("space_ids")), mode=options.get("mode"))


async def asearch(client: AnyClient, reader_sub: str, query: str, options: Mapping[str, Any]) -> list[SearchHit]:
    """:func:`search` for a framework's async entry point (LangChain's ``ainvoke``, LlamaIndex's
    ``aretrieve``), without blocking the event loop: an :class:`AsyncGroundkit`'s search is
    awaited on the loop; a sync client's runs in a worker thread (contextvars, and so telemetry
    spans and LangChain callbacks, go with it)."""
    if isinstance(client, AsyncGroundkit):
        return await client.search(reader_sub, query, k=options["k"], content_types=_list(options.get("content_types")),
                                   space_ids=_list(options.get("space_ids")), mode=options.get("mode"))
    return await asyncio.to_thread(search, client, reader_sub, query, options)


def _list(values: Any) -> Any:
    # a string goes on as it is, for search to refuse (it is not a list of one)
    return values if values is None or isinstance(values, str) else list(values)


def citation_metadata(hit: SearchHit) -> dict[str, Any]:
    """A hit's citation fields, for a framework's document metadata: every field of the hit but
    its text, so that a field the hit gains is carried without a change here. JSON values
    (``heading_path`` a list), as a framework's tracing and stores serialise them."""
    return hit.model_dump(mode="json", exclude={"content"})


def citation_id(hit: SearchHit) -> str:
    """The chunk's stable id: object, version, chunk."""
    return f"{hit.object_id}:{hit.object_version}:{hit.chunk_seq}"
