"""The LLM seam: chat completions from ollama (``POST /api/chat``) or any OpenAI-compatible
endpoint (``POST /v1/chat/completions``), with httpx, through the outbound gate.

Use it from a run: ``run.complete(messages, model=..., provider=LlmProvider(...))``
(:meth:`groundkit.runs.Run.complete`). The gate decides whether the messages may go to the
provider's class (each message is the app's or the reader's own words, which need the class's
``queries`` allowance; the chunks the run retrieved and the contexts it assembled, where they
appear in the messages, are decided by their objects), scrubs them as the class's policy says,
meters the tokens the provider reports (``prompt_eval_count``/``eval_count``;
``usage.prompt_tokens``/``usage.completion_tokens``) and records the decision.

Timeouts and bounded retries as the HTTP embedding providers (a 429, a 5xx, a timeout or a
failed connection, with exponential backoff and ``Retry-After``); no fallback to another
provider. A failure is :class:`~groundkit.errors.LlmProviderError` (GK024), whose message names
the server by scheme, host, port and path only and has no chained exception.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from groundkit.embedders.http import HttpOptions, JsonClient, safe_url
from groundkit.errors import LlmProviderError

__all__ = ["ChatClient", "Completion", "LlmProvider", "Message", "messages_digest", "text_digest"]


class LlmProvider(BaseModel):
    """An LLM endpoint: ``protocol`` (``ollama`` or ``openai``: any OpenAI-compatible chat API),
    ``url`` (its base URL), ``api_key_env`` (the NAME of an environment variable holding the key,
    read at each call), ``timeout`` (seconds per request), ``max_retries``, ``backoff``,
    ``max_backoff``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    protocol: Literal["ollama", "openai"]
    url: Annotated[str, Field(min_length=1)]
    api_key_env: Annotated[str | None, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")] = None
    timeout: Annotated[float, Field(gt=0, le=3600)] = 120.0
    max_retries: Annotated[int, Field(ge=0, le=20)] = 2
    backoff: Annotated[float, Field(ge=0, le=60)] = 0.5
    max_backoff: Annotated[float, Field(ge=0, le=600)] = 20.0


class Message(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    role: Literal["system", "user", "assistant"]
    content: str


class Completion(BaseModel):
    """A completion as the run saw it: the answer's text, the tokens, and what the run pins
    (the digests of the messages as sent and of the answer; never their text)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    text: str
    model: str
    tokens_in: int
    tokens_out: int
    messages_sha256: str
    answer_sha256: str
    policy_version: int | None
    provider_class: str
    scrubbed: dict[str, int]


def messages_digest(messages: Sequence[Message]) -> str:
    """SHA-256 (hex) of the messages' canonical JSON (``[{"content": ..., "role": ...}, ...]``,
    sorted keys, no spaces, UTF-8): recompute it from a transcript to prove it is what was sent."""
    canonical = json.dumps([m.model_dump() for m in messages], sort_keys=True, separators=(",", ":"),
                           ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def text_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class ChatClient:
    """The transport of one provider (only inside the outbound gate: its client checks the ticket)."""

    def __init__(self, provider: LlmProvider, model: str, sleep: Callable[[float], None] = time.sleep) -> None:
        self.provider = provider
        self.model = model
        options = HttpOptions(url=provider.url, model=model, api_key_env=provider.api_key_env,
                              timeout=provider.timeout, max_retries=provider.max_retries, backoff=provider.backoff,
                              max_backoff=provider.max_backoff, batch_size=1)
        self.client = JsonClient(options, f"{provider.protocol} LLM provider", sleep, error=LlmProviderError)

    def chat(self, messages: Sequence[Message], *, temperature: float | None = None,
             max_tokens: int | None = None) -> tuple[str, int, int]:
        """The answer's text and the tokens in and out the provider reported."""
        wire = [m.model_dump() for m in messages]
        if self.provider.protocol == "ollama":
            body: dict[str, Any] = {"model": self.model, "messages": wire, "stream": False}
            options: dict[str, Any] = {}
            if temperature is not None:
                options["temperature"] = temperature
            if max_tokens is not None:
                options["num_predict"] = max_tokens
            if options:
                body["options"] = options
            return self._read_ollama(self.client.post("/api/chat", body))
        body = {"model": self.model, "messages": wire}
        if temperature is not None:
            body["temperature"] = temperature
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        return self._read_openai(self.client.post("/v1/chat/completions", body))

    def _malformed(self) -> LlmProviderError:
        return LlmProviderError(f"the {self.provider.protocol} LLM provider at {safe_url(self.provider.url)} "
                                "answered JSON of another shape")

    def _read_ollama(self, answer: Any) -> tuple[str, int, int]:
        message = answer.get("message") if isinstance(answer, dict) else None
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, str):
            raise self._malformed()
        return content, _count(answer.get("prompt_eval_count")), _count(answer.get("eval_count"))

    def _read_openai(self, answer: Any) -> tuple[str, int, int]:
        choices = answer.get("choices") if isinstance(answer, dict) else None
        first = choices[0] if isinstance(choices, list) and choices else None
        message = first.get("message") if isinstance(first, dict) else None
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, str):
            raise self._malformed()
        usage = answer.get("usage")
        usage = usage if isinstance(usage, dict) else {}
        return content, _count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens"))


def _count(value: Any) -> int:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0
