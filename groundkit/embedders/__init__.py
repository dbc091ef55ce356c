"""Embedding providers behind one seam (docs/embeddings.md).

:func:`embedder_for` is the only way to an :class:`Embedder`: it builds the model's provider
(``local``, ``ollama`` or ``openai``) and wraps it in the seam every call goes through, which

- opens a telemetry span ``groundkit.embed`` (model, provider, texts, input, tokens),
- sends through the outbound gate (:func:`groundkit.outbound.gate.send`, docs/outbound.md): the
  policy decides whether the texts may go to the provider's class, the redaction boundary
  scrubs them, the tokens are metered (and priced) and the decision recorded,
- checks every batch's vectors against the model's declared dimension (and count).

A provider that fails, cannot be reached or is not configured raises
:class:`~groundkit.errors.EmbeddingProviderError` (GK017); a call the policy refuses raises
:class:`~groundkit.errors.OutboundRefused` (GK023) and sends nothing. There is no fallback to
another provider: vectors of two models live in different spaces, and mixing them fails silently.

Vectors are returned as lists of floats (what pgvector's adapter and JSON take), L2-normalised
by the local provider; the HTTP providers return what the server answers.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Sequence
from typing import Any, Literal, Protocol, runtime_checkable

import psycopg
from pydantic import BaseModel, ConfigDict, Field

from groundkit import telemetry
from groundkit.errors import EmbeddingProviderError, InvalidArgument
from groundkit.outbound import gate
from groundkit.session import Session
from groundkit.steps import Op

__all__ = ["Embedder", "EmbeddingModel", "EmbeddingProviderError", "Provider", "embedder_for"]

ProviderName = Literal["local", "ollama", "openai"]
Distance = Literal["cosine", "l2", "inner_product"]


class EmbeddingModel(BaseModel):
    """A row of ``groundkit.embedding_models``: which model, served by which provider, with
    which dimension and distance, embedding which text recipe. ``options`` configure the
    provider (docs/embeddings.md lists each provider's)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    provider: ProviderName
    dimension: int = Field(gt=0, le=16000)
    distance: Distance
    recipe: str
    options: dict[str, Any] = Field(default_factory=dict)


@runtime_checkable
class Embedder(Protocol):
    """What :func:`embedder_for` returns."""

    model: EmbeddingModel

    def embed_documents(self, texts: Sequence[str], *, hashes: Sequence[bytes] | None = None) -> list[list[float]]:
        """One vector per text, in order; batched inside (the provider's ``batch_size``).
        ``hashes``: the texts' hashes as the model's recipe makes them (the embedding job's),
        which the outbound policy decides by; without them the texts are of unknown
        provenance, which only a class the policy leaves unrestricted takes."""
        ...

    def embed_query(self, text: str) -> list[float]:
        """The vector of one query."""
        ...


class QueryEmbedder(Protocol):
    """What :func:`query_embedder` returns: a query's vector as an operation."""

    model: EmbeddingModel

    def query_steps(self, text: str, *, record: bool, flow: str | None) -> Op[list[float]]:
        ...


class Provider(Protocol):
    """A provider behind the seam: vectors and the tokens they took, nothing else (no
    metering, no checks: the seam does those, the same for every provider)."""

    def embed(self, texts: Sequence[str], *, query: bool) -> tuple[list[list[float]], int]:
        ...


Target = Session | psycopg.Connection[Any]


def embedder_for(model: EmbeddingModel, *, meter_to: Target | None = None, flow: str | None = None,
                 policy_from: gate.PolicySource = None) -> Embedder:
    """The embedder of ``model``, through the one seam (span, outbound gate, dimension check).

    ``meter_to``: a :class:`~groundkit.Groundkit` (or any :class:`~groundkit.session.Session`)
    or a psycopg connection; each call's decision is then recorded there and, for ``flow``
    (required with it), metered. ``policy_from``: where the outbound policy is read (default:
    ``meter_to``; neither: the default policy, under which only the local provider takes text),
    or a fixed :class:`~groundkit.outbound.policy.OutboundPolicy` for text that does not come from
    the database.
    The provider is built now (once per process and model definition; later calls share it): a
    missing option or package raises
    :class:`~groundkit.errors.EmbeddingProviderError` here, not at the first call."""
    if meter_to is not None and not flow:
        raise InvalidArgument("embedder_for: metering (meter_to) needs the flow the calls serve")
    return _Seam(model, _provider(model), meter_to, flow, meter_to if policy_from is None else policy_from)


def query_embedder(model: EmbeddingModel) -> QueryEmbedder:
    """The embedder a client's search embeds its query with (:meth:`_Seam.query_steps`): the
    policy read and the call recorded on the connection that runs the search."""
    return _Seam(model, _provider(model), None, None, None)


# Providers by model definition (its JSON), one per process: building the local one loads the
# ONNX session (hundreds of ms), and the servers make a Groundkit per request, so each would
# otherwise load it again. A provider keeps no per-caller state (onnxruntime sessions and httpx
# clients are thread-safe; credentials are read at call time), and a changed definition is
# another key. Only built providers are kept: a failure is raised again on the next call.
_PROVIDERS: dict[str, Provider] = {}
_PROVIDERS_LOCK = threading.Lock()


def _provider(model: EmbeddingModel) -> Provider:
    key = model.model_dump_json()
    if model.provider == "local":
        # the export it loads lives under the data dir, which GROUNDKIT_HOME alone moves (read
        # directly: Settings.from_env() would read the price table and stat the dir per request)
        key += f"|{os.environ.get('GROUNDKIT_HOME', '')}"
    with _PROVIDERS_LOCK:  # held while building, so that concurrent first calls load it once
        provider = _PROVIDERS.get(key)
        if provider is None:
            provider = _PROVIDERS[key] = _build_provider(model)
    return provider


def _build_provider(model: EmbeddingModel) -> Provider:
    if model.provider == "local":
        from groundkit.embedders.local import LocalProvider

        return LocalProvider.from_options(model.options)
    from groundkit.embedders.http import provider_for

    return provider_for(model.provider, model.options)


class _Seam:
    """Every provider call goes through here, and from here through the outbound gate."""

    def __init__(self, model: EmbeddingModel, provider: Provider, meter_to: Target | None, flow: str | None,
                 policy_from: gate.PolicySource) -> None:
        self.model = model
        self._provider = provider
        self._meter_to = meter_to
        self._flow = flow
        self._policy_from = policy_from
        self._destination = gate.Destination(model.provider, model.options.get("url"), model.name)

    def bound(self, target: Target, flow: str | None) -> _Seam:
        """The same provider, reading the policy from ``target`` and recording there (for ``flow``)."""
        return _Seam(self.model, self._provider, target, flow, target)

    def embed_documents(self, texts: Sequence[str], *, hashes: Sequence[bytes] | None = None) -> list[list[float]]:
        if isinstance(texts, str):
            raise InvalidArgument("embed_documents takes a sequence of texts, not one string")
        texts = list(texts)
        if hashes is not None and len(hashes) != len(texts):
            raise InvalidArgument("embed_documents: one hash per text")
        if not texts:
            return []
        provenance = (gate.Provenance(hashes=tuple(bytes(h) for h in hashes)) if hashes is not None
                      else gate.Provenance(unattributed=len(texts)))
        return self._call(texts, query=False, provenance=provenance)

    def embed_query(self, text: str) -> list[float]:
        return self._call([text], query=True, provenance=gate.Provenance(queries=1))[0]

    def query_steps(self, text: str, *, record: bool, flow: str | None) -> Op[list[float]]:
        """:meth:`embed_query` as an operation (:mod:`groundkit.steps`), for a client's search:
        the policy is read, and with ``record`` the decision recorded (metered for ``flow``),
        on the connection of the driver that runs it."""
        vectors = yield from self._steps([text], query=True, provenance=gate.Provenance(queries=1),
                                         policy=gate.DATABASE, record=record, flow=flow)
        return vectors[0]

    def _call(self, texts: list[str], *, query: bool, provenance: gate.Provenance) -> list[list[float]]:
        op = self._steps(texts, query=query, provenance=provenance, policy=gate._policy(self._policy_from),
                         record=self._meter_to is not None, flow=self._flow)
        return gate.run_on(op, self._policy_from, self._meter_to)

    def _steps(self, texts: list[str], *, query: bool, provenance: gate.Provenance, policy: gate.Policy,
               record: bool, flow: str | None) -> Op[list[list[float]]]:
        with telemetry.span("embed", model=self.model.name, provider=self.model.provider, texts=len(texts),
                            input="query" if query else "documents", flow=flow) as current:

            def transmit(outgoing: list[str]) -> gate.Answer[list[list[float]]]:
                vectors, tokens = self._provider.embed(outgoing, query=query)
                self._check(vectors, len(outgoing))
                return gate.Answer(vectors, tokens_in=tokens)

            sent = yield from gate.send_steps("embed_query" if query else "embed_documents", self._destination,
                                              texts, transmit, provenance=provenance, policy=policy,
                                              record=record, flow=flow)
            telemetry.set_attributes(current, tokens=sent.tokens_in)
        return sent.result

    def _check(self, vectors: list[list[float]], expected: int) -> None:
        where = f"the {self.model.provider} provider of embedding model {self.model.name!r}"
        if len(vectors) != expected:
            raise EmbeddingProviderError(f"{where} answered {len(vectors)} vectors for {expected} texts")
        for vector in vectors:
            if len(vector) != self.model.dimension:
                raise EmbeddingProviderError(
                    f"{where} answered vectors of dimension {len(vector)}; the model declares {self.model.dimension}"
                )
            if not all(math.isfinite(x) for x in vector):
                raise EmbeddingProviderError(f"{where} answered a vector with a NaN or infinite component")
