"""The contracts of the MCP tools and the HTTP endpoints: one pydantic model per input and per
result, shared by both surfaces. Inputs forbid unknown fields, so no request can name a reader.

Results carry the client's own :class:`~groundkit.models.SearchHit`,
:class:`~groundkit.models.HomeItem` and :class:`~groundkit.models.Citation`, whole: a field added to it
(citations, dense scores) reaches both surfaces with no change here.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from groundkit.models import MAX_QUERY_CHARS, Citation, ContentType, HomeItem, SearchHit, SearchMode

# Tighter than the library's MAX_K: a surface a model drives gets small pages.
MAX_SURFACE_K = 50


class _Input(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SearchInput(_Input):
    """A search as the authenticated reader over what they may see right now: BM25, dense (the
    active embedding model), hybrid (both, fused) or auto (hybrid when a model is active)."""

    query: str = Field(max_length=MAX_QUERY_CHARS, description="Plain text; no search syntax.")
    k: int = Field(default=10, ge=1, le=MAX_SURFACE_K, description="How many chunks.")
    content_types: tuple[ContentType, ...] | None = Field(default=None, max_length=6,
                                                          description="Only these content types.")
    space_ids: tuple[str, ...] | None = Field(default=None, max_length=100, description="Only these spaces.")
    mode: SearchMode | None = Field(default=None, description="auto (hybrid when the server has an active embedding "
                                    "model, else bm25), bm25, dense or hybrid; default: the server's.")


class HomeInput(_Input):
    """The reader's home: the newest visible objects, or the most engaged-with this week."""

    mode: Literal["latest", "top"] = "latest"
    k: int = Field(default=20, ge=1, le=MAX_SURFACE_K)


class CitationInput(_Input):
    """A hit's citation (object_id, object_version, chunk_seq of a search hit), with its context."""

    object_id: str = Field(min_length=1, max_length=1000)
    version: int = Field(ge=1, le=2**63 - 1, description="The hit's object_version.")
    chunk_seq: int = Field(ge=0, le=2**31 - 1)


class CitationResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    citation: Citation


class SearchResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    hits: tuple[SearchHit, ...]


class HomeResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    items: tuple[HomeItem, ...]


class ErrorBody(BaseModel):
    """Every error of both surfaces: the GK code (``unavailable`` or ``internal`` when none
    applies) and a message that never holds a DSN or a stack trace."""

    model_config = ConfigDict(frozen=True)

    code: str
    message: str


class GateHealth(BaseModel):
    """The gate's verdict on the configuration the server was started on (docs/governance.md):
    ``allowed_ungated`` when it was started with ``--allow-ungated`` on one no gate certifies."""

    model_config = ConfigDict(frozen=True)

    certified: bool
    allowed_ungated: bool
    config_hash: str | None = None
    ledger_id: int | None = None
    reason: str | None = None


class Health(BaseModel):
    model_config = ConfigDict(frozen=True)

    database: Literal["ok", "unavailable"]
    revision: str | None = None
    expected_revision: str
    gate: GateHealth | None = None
