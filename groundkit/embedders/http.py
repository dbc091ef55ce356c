"""The HTTP providers: ``ollama`` (``POST /api/embed``) and ``openai`` (any OpenAI-compatible
``POST /v1/embeddings``), with httpx.

Options (``EmbeddingModel.options``): ``url`` (the server's base URL, required), ``model`` (the
server's name for the model, required), ``api_key_env`` (the NAME of an environment variable
holding the API key, read at each call; sent as ``Authorization: Bearer``), ``timeout`` (seconds
per request, 30), ``max_retries`` (3), ``backoff`` (seconds before the first retry, 0.5, doubling),
``max_backoff`` (seconds, 20: also the most a ``Retry-After`` is honoured), ``batch_size``
(texts per request: 64).

A 429, a 5xx, a timeout or a failed connection is retried at most ``max_retries`` times with
exponential backoff (``Retry-After`` when the server sends one); then, or on any other error
status or a malformed answer,
:class:`~groundkit.errors.EmbeddingProviderError` (GK017). Its message names the server by
scheme, host, port and path only (no user info, no query), never shows the key, and has no
``__cause__`` or ``__context__`` (raised outside every exception handler), so no chained httpx
error can carry a header or URL.
"""

from __future__ import annotations

import email.utils
import importlib.util
import math
import os
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal, NamedTuple
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from groundkit.errors import EmbeddingProviderError, GroundkitError

__all__ = ["HttpOptions", "HttpProvider", "JsonClient", "provider_for", "safe_url"]

RETRIED_STATUS = frozenset({429, 500, 502, 503, 504})


class HttpOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    url: str = Field(min_length=1)
    model: str = Field(min_length=1)
    api_key_env: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    timeout: float = Field(30.0, gt=0, le=3600)
    max_retries: int = Field(3, ge=0, le=20)
    backoff: float = Field(0.5, ge=0, le=60)
    max_backoff: float = Field(20.0, ge=0, le=600)
    batch_size: int = Field(64, ge=1, le=4096)


def parse_options(cls: type[BaseModel], what: str, options: dict[str, Any],
                  error: type[GroundkitError] = EmbeddingProviderError) -> Any:
    """``options`` read as ``cls``; a missing or bad one is a GK017 (or ``error``) naming the
    fields, not the values."""
    try:
        return cls.model_validate(options)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
    raise error(f"the {what} is not configured: {problems}")


def safe_url(url: str) -> str:
    """``url`` without user info, query or fragment: what an error message may show."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "<a malformed URL>"
    return urlunsplit((parts.scheme, f"{host}{port}", parts.path, "", ""))


class _Outcome(NamedTuple):
    """A request's outcome: the decoded answer, or what failed and the wait before a retry
    (0: the configured backoff; None: a retry will not help)."""

    answer: Any = None
    failure: str | None = None
    retry_in: float | None = None


class JsonClient:
    """POST JSON with bounded retries; every failure is a GK017 (or ``error``) without a chain.
    Every request goes through the outbound gate (:func:`groundkit.outbound.gate.require_ticket`):
    outside it, or to another origin than the gate decided on, nothing is sent."""

    def __init__(self, options: HttpOptions, what: str, sleep: Callable[[float], None] = time.sleep,
                 error: type[GroundkitError] = EmbeddingProviderError) -> None:
        if importlib.util.find_spec("httpx") is None:
            raise error(f"the {what} needs httpx: pip install 'groundkit[embed]'")
        import httpx

        self.error = error
        self.options = options
        self.what = what
        self._sleep = sleep
        self._httpx = httpx
        self._client = httpx.Client(timeout=options.timeout, follow_redirects=False)

    def _headers(self) -> dict[str, str]:
        env = self.options.api_key_env
        if env is None:
            return {}
        key = os.environ.get(env)
        if not key:
            raise self.error(f"the {self.what} needs an API key in ${env}, which is not set")
        return {"Authorization": f"Bearer {key}"}

    def _url(self, path: str) -> str:
        """The base URL with ``path`` appended to its path (its query kept); without its user
        info when an API key is configured (the key is the credential then, not Basic auth)."""
        parts = urlsplit(self.options.url)
        netloc = parts.netloc
        if self.options.api_key_env is not None:
            netloc = netloc.rsplit("@", 1)[-1]
        return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/") + path, parts.query, ""))

    def post(self, path: str, body: dict[str, Any]) -> Any:
        try:
            url = self._url(path)
        except ValueError:
            url = None
        if url is None:
            raise self.error(f"the {self.what}'s url is malformed (not shown: it may hold a secret)")
        from groundkit.outbound.gate import require_ticket

        require_ticket(f"the {self.what}", url)  # before anything is built from the body
        where = f"the {self.what} at {safe_url(url)}"
        attempt = 0
        while True:
            outcome = self._attempt(url, body)
            if outcome.failure is None:
                return outcome.answer
            if outcome.retry_in is None or attempt >= self.options.max_retries:
                tries = f" after {attempt + 1} attempts" if attempt else ""
                raise self.error(f"{where} failed{tries}: {outcome.failure}")
            wait = outcome.retry_in or self.options.backoff * 2**attempt
            self._sleep(min(wait, self.options.max_backoff))
            attempt += 1

    def _attempt(self, url: str, body: dict[str, Any]) -> _Outcome:
        """One request. Nothing leaves it but its outcome, or a GK017 about the API key."""
        httpx = self._httpx
        headers = self._headers()
        try:
            response = self._client.post(url, json=body, headers=headers)
        except httpx.TimeoutException:
            return _Outcome(failure=f"no answer within {self.options.timeout:g} s", retry_in=0.0)
        except httpx.TransportError as exc:
            return _Outcome(failure=f"cannot reach it ({type(exc).__name__})", retry_in=0.0)
        except (httpx.HTTPError, httpx.InvalidURL, ValueError) as exc:
            return _Outcome(failure=f"the request failed ({type(exc).__name__})")
        if response.status_code in RETRIED_STATUS:
            return _Outcome(failure=f"HTTP {response.status_code}",
                            retry_in=_retry_after(response.headers.get("retry-after")))
        if response.status_code >= 400:
            return _Outcome(failure=f"HTTP {response.status_code}")
        try:
            return _Outcome(answer=response.json())
        except ValueError:
            return _Outcome(failure="the answer is not JSON")

    def close(self) -> None:
        self._client.close()


def _retry_after(value: str | None) -> float:
    """Seconds a ``Retry-After`` asks for (delta-seconds or an HTTP date); 0: none given."""
    if not value:
        return 0.0
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return seconds if math.isfinite(seconds) and seconds > 0 else 0.0
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return 0.0
    return max(when.timestamp() - time.time(), 0.0)


class HttpProvider:
    """One protocol (``ollama`` or ``openai``) over a :class:`JsonClient`, batched."""

    def __init__(self, protocol: Literal["ollama", "openai"], options: HttpOptions,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.protocol = protocol
        self.options = options
        self.client = JsonClient(options, f"{protocol} embedding provider", sleep)

    def embed(self, texts: Sequence[str], *, query: bool) -> tuple[list[list[float]], int]:
        vectors: list[list[float]] = []
        tokens = 0
        size = self.options.batch_size
        for start in range(0, len(texts), size):
            batch = list(texts[start:start + size])
            got, used = self._batch(batch)
            vectors += got
            tokens += used
        return vectors, tokens

    def _batch(self, batch: list[str]) -> tuple[list[list[float]], int]:
        body = {"model": self.options.model, "input": batch}
        if self.protocol == "ollama":
            answer = self.client.post("/api/embed", body)
            vectors, tokens = _read_ollama(answer)
        else:
            answer = self.client.post("/v1/embeddings", body)
            vectors, tokens = _read_openai(answer)
        if vectors is None:
            where = f"the {self.protocol} embedding provider at {safe_url(self.options.url)}"
            raise EmbeddingProviderError(f"{where} answered JSON of another shape")
        if len(vectors) != len(batch):
            raise EmbeddingProviderError(
                f"the {self.protocol} embedding provider answered {len(vectors)} vectors for {len(batch)} texts")
        return vectors, tokens


def _floats(value: Any) -> list[float] | None:
    if not isinstance(value, list) or not all(isinstance(x, int | float) and not isinstance(x, bool) for x in value):
        return None
    return [float(x) for x in value]


def _read_ollama(answer: Any) -> tuple[list[list[float]] | None, int]:
    """``{"embeddings": [[...], ...], "prompt_eval_count": n}`` (the count is optional)."""
    if not isinstance(answer, dict) or not isinstance(answer.get("embeddings"), list):
        return None, 0
    vectors = [_floats(v) for v in answer["embeddings"]]
    tokens = answer.get("prompt_eval_count")
    checked = [v for v in vectors if v is not None]
    return (checked if len(checked) == len(vectors) else None), tokens if isinstance(tokens, int) else 0


def _read_openai(answer: Any) -> tuple[list[list[float]] | None, int]:
    """``{"data": [{"embedding": [...], "index": i}, ...], "usage": {"prompt_tokens": n}}``,
    put back in ``index`` order."""
    if not isinstance(answer, dict) or not isinstance(answer.get("data"), list):
        return None, 0
    items = answer["data"]
    if not all(isinstance(item, dict) for item in items):
        return None, 0
    indexes = [item.get("index", i) for i, item in enumerate(items)]
    if sorted(indexes) != list(range(len(items))):
        return None, 0
    vectors: list[list[float] | None] = [None] * len(items)
    for index, item in zip(indexes, items, strict=True):
        vectors[index] = _floats(item.get("embedding"))
    usage = answer.get("usage")
    tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    checked = [v for v in vectors if v is not None]
    return (checked if len(checked) == len(vectors) else None), tokens if isinstance(tokens, int) else 0


def provider_for(name: str, options: dict[str, Any], sleep: Callable[[float], None] = time.sleep) -> HttpProvider:
    """The ``ollama`` or ``openai`` provider configured by ``options``."""
    if name not in ("ollama", "openai"):
        raise EmbeddingProviderError(f"unknown embedding provider {name!r}: local, ollama or openai")
    parsed = parse_options(HttpOptions, f"{name} embedding provider", options)
    return HttpProvider("ollama" if name == "ollama" else "openai", parsed, sleep)
