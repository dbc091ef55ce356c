"""The HTTP embedding providers (ollama, openai) and the reranker seam, against a server on
loopback that speaks each protocol and answers with real vectors from the local model."""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from groundkit import Groundkit
from groundkit.embedders import Embedder, EmbeddingModel
from groundkit.embedders import embedder_for as gated_embedder_for
from groundkit.embedders.local import LocalOptions, LocalProvider
from groundkit.embedders.rerank import Reranker
from groundkit.embedders.rerank import reranker_for as gated_reranker_for
from groundkit.errors import EmbeddingProviderError
from groundkit.outbound import gate
from groundkit.outbound.policy import Allowance, ClassPolicy, default_policy

# These tests are about the transports: a fixed outbound policy lets the loopback server (a
# cloud endpoint to the policy) take anything, unscrubbed (tests/test_outbound.py tests the gate).
OPEN = default_policy().with_class("cloud", ClassPolicy(allow=Allowance(private_spaces=True, owner_only=True,
                                                                        queries=True)))


def embedder_for(m: EmbeddingModel, **kw: Any) -> Embedder:
    return gated_embedder_for(m, policy_from=OPEN, **kw)


def reranker_for(options: dict[str, Any], **kw: Any) -> Reranker:
    return gated_reranker_for(options, policy_from=OPEN, **kw)


def local_embed(provider: LocalProvider, texts: list[str]) -> tuple[list[list[float]], int]:
    """The local model's vectors and tokens, through the gate (as every provider call)."""
    sent = gate.send("embed_documents", gate.Destination("local", None, "minilm"), texts,
                     lambda t: gate.Answer(provider.embed(t, query=False)),
                     provenance=gate.Provenance(unattributed=len(texts)))
    return sent.result

SECRET = "sk-test-5f2a9c7e1b3d4a6f8e0c"
TEXTS = ["The cat sat on the mat.", "Insulin regulates glucose uptake.", "Markets fell.",
         "Mitochondria make ATP.", "Rain is likely tomorrow."]


@dataclass
class Script:
    """What the server does: canned failures first (status, headers), then real answers."""

    failures: list[tuple[int, dict[str, str]]] = field(default_factory=list)
    delay: float = 0.0
    dimension: int | None = None  # cut the vectors to this many components
    shuffle: bool = False  # openai: answer the items in reverse order (their `index` says where)
    requests: list[dict[str, Any]] = field(default_factory=list)
    answers: list[dict[str, Any]] = field(default_factory=list)


@pytest.fixture(scope="module")
def model_provider(embed_home: Path) -> Iterator[LocalProvider]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GROUNDKIT_HOME", str(embed_home))
        yield LocalProvider(LocalOptions.model_validate({}))


@pytest.fixture
def server(model_provider: LocalProvider) -> Iterator[tuple[str, Script]]:
    script = Script()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            return None

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            script.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
            time.sleep(script.delay)
            if script.failures:
                status, headers = script.failures.pop(0)
                # a careless server echoes the request's credentials in its error
                self._send(status, {"error": f"denied for {self.headers.get('Authorization')}"}, headers)
                return
            script.answers.append(self._answer(body))
            self._send(200, script.answers[-1])

        def _answer(self, body: dict[str, Any]) -> dict[str, Any]:
            if self.path == "/rerank":
                query = np.array(local_embed(model_provider, [body["query"]])[0][0])
                docs = np.array(local_embed(model_provider, body["documents"])[0])
                logits = (docs @ query) * 10 - 3  # raw logits, as a cross-encoder answers them
                order = np.argsort(-logits)[: body["top_n"]]
                return {"results": [{"index": int(i), "relevance_score": float(logits[i])} for i in order]}
            vectors, tokens = local_embed(model_provider, body["input"])
            if script.dimension is not None:
                vectors = [v[: script.dimension] for v in vectors]
            if self.path == "/api/embed":
                return {"model": body["model"], "embeddings": vectors, "prompt_eval_count": tokens}
            assert self.path == "/v1/embeddings"
            items = [{"object": "embedding", "embedding": v, "index": i} for i, v in enumerate(vectors)]
            return {"data": items[::-1] if script.shuffle else items, "model": body["model"],
                    "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}

        def _send(self, status: int, answer: dict[str, Any], headers: dict[str, str] | None = None) -> None:
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", script
    httpd.shutdown()
    httpd.server_close()


def model(provider: str, url: str, **options: Any) -> EmbeddingModel:
    return EmbeddingModel(name=f"minilm-{provider}", provider=provider, dimension=384,  # type: ignore[arg-type]
                          distance="cosine", recipe="text", options={"url": url, "model": "all-minilm", **options})


def chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and every exception in its __cause__ / __context__ chain."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        current = todo.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        todo += [current.__cause__, current.__context__]


def assert_no_secret(exc: BaseException, *secrets: str) -> None:
    for link in chain(exc):
        text = f"{link!s} {link!r} {link.args!r}"
        for secret in secrets:
            assert secret not in text, (type(link), text)


@pytest.mark.parametrize("provider", ["ollama", "openai"])
def test_vectors_come_back_in_order_batched(server: tuple[str, Script], model_provider: LocalProvider,
                                            provider: str) -> None:
    url, script = server
    script.shuffle = True
    got = embedder_for(model(provider, url, batch_size=2)).embed_documents(TEXTS)
    if provider == "ollama":
        answered = [v for a in script.answers for v in a["embeddings"]]
    else:  # each batch's items came in reverse order; their index puts them back
        answered = [item["embedding"] for a in script.answers for item in a["data"][::-1]]
    assert got == answered
    alone = np.array(local_embed(model_provider, TEXTS)[0])  # other batches: int8 scales differ a little
    assert ((np.array(got) * alone).sum(axis=1) > 0.98).all()
    assert [len(r["body"]["input"]) for r in script.requests] == [2, 2, 1]
    path = "/api/embed" if provider == "ollama" else "/v1/embeddings"
    assert {r["path"] for r in script.requests} == {path}
    assert all(r["body"]["model"] == "all-minilm" for r in script.requests)


@pytest.mark.parametrize("provider", ["ollama", "openai"])
def test_tokens_are_metered_and_a_span_is_recorded(server: tuple[str, Script], gk: Groundkit, provider: str,
                                                   local_spans: InMemorySpanExporter) -> None:
    url, _ = server
    embedder_for(model(provider, url), meter_to=gk, flow="home").embed_documents(TEXTS[:3])
    (row,) = gk.conn.execute("select flow, model, kind, tokens_in, cost from groundkit.calls").fetchall()
    assert (row["flow"], row["model"], row["kind"], row["cost"]) == ("home", f"minilm-{provider}", "embedding", None)
    assert row["tokens_in"] > 10  # the server's count (prompt_eval_count / usage.prompt_tokens)
    (span,) = named(local_spans, "groundkit.embed")
    assert (span.attributes or {})["groundkit.provider"] == provider


def test_429_then_200_is_retried_after_retry_after(server: tuple[str, Script]) -> None:
    url, script = server
    script.failures = [(429, {"Retry-After": "1"}), (503, {})]
    slept: list[float] = []
    from groundkit.embedders.http import provider_for

    provider = provider_for("openai", {"url": url, "model": "m", "backoff": 0.01}, sleep=slept.append)
    vectors = gate.send("embed_documents", gate.Destination("openai", url, "m"), TEXTS[:2],
                        lambda t: gate.Answer(provider.embed(t, query=False)[0]),
                        provenance=gate.Provenance(unattributed=2), policy_from=OPEN).result
    assert len(vectors) == 2 and len(script.requests) == 3
    assert slept == [1.0, 0.02]  # Retry-After, then the backoff of the second retry


def test_bounded_retries_give_up_with_gk017(server: tuple[str, Script]) -> None:
    url, script = server
    script.failures = [(503, {})] * 10
    with pytest.raises(EmbeddingProviderError, match=r"HTTP 503.*|after 3 attempts") as info:
        embedder_for(model("ollama", url, max_retries=2, backoff=0)).embed_query("q")
    assert info.value.sqlstate == "GK017" and "after 3 attempts" in info.value.message
    assert len(script.requests) == 3


def test_a_client_error_is_not_retried(server: tuple[str, Script]) -> None:
    url, script = server
    script.failures = [(400, {})] * 3
    with pytest.raises(EmbeddingProviderError, match="HTTP 400"):
        embedder_for(model("openai", url, backoff=0)).embed_query("q")
    assert len(script.requests) == 1


def test_a_timeout_is_gk017(server: tuple[str, Script]) -> None:
    url, script = server
    script.delay = 0.5
    t0 = time.monotonic()
    with pytest.raises(EmbeddingProviderError, match=r"no answer within 0.1 s"):
        embedder_for(model("ollama", url, timeout=0.1, max_retries=1, backoff=0)).embed_query("q")
    assert time.monotonic() - t0 < 5 and len(script.requests) == 2


def test_an_unreachable_server_is_gk017() -> None:
    with pytest.raises(EmbeddingProviderError, match="cannot reach it") as info:
        embedder_for(model("openai", "http://127.0.0.1:9", max_retries=0)).embed_query("q")
    assert info.value.__cause__ is None and info.value.__context__ is None


@pytest.mark.parametrize("provider", ["ollama", "openai"])
def test_a_wrong_dimension_is_gk017(server: tuple[str, Script], provider: str) -> None:
    url, script = server
    script.dimension = 100
    with pytest.raises(EmbeddingProviderError, match="dimension 100; the model declares 384"):
        embedder_for(model(provider, url)).embed_documents(TEXTS[:2])


def test_the_api_key_is_sent_but_never_shown(server: tuple[str, Script], monkeypatch: pytest.MonkeyPatch) -> None:
    url, script = server
    monkeypatch.setenv("GK_TEST_EMBED_KEY", SECRET)
    userinfo_url = url.replace("http://", "http://alice:pw-in-the-url-1234@") + "/?key=query-secret-5678"
    embedder = embedder_for(model("openai", userinfo_url, api_key_env="GK_TEST_EMBED_KEY", max_retries=0))
    script.failures = [(401, {})]
    with pytest.raises(EmbeddingProviderError) as info:
        embedder.embed_query("q")
    assert script.requests[0]["headers"]["Authorization"] == f"Bearer {SECRET}"
    assert "HTTP 401" in info.value.message and "127.0.0.1" in info.value.message
    assert_no_secret(info.value, SECRET, "pw-in-the-url-1234", "query-secret-5678")
    assert info.value.__cause__ is None and info.value.__context__ is None
    script.delay = 0.3  # a timeout's httpx error would carry the request: not chained either
    with pytest.raises(EmbeddingProviderError) as info:
        embedder_for(model("openai", userinfo_url, api_key_env="GK_TEST_EMBED_KEY", max_retries=0,
                           timeout=0.05)).embed_query("q")
    assert_no_secret(info.value, SECRET, "pw-in-the-url-1234", "query-secret-5678")


def test_the_api_key_is_read_at_call_time(server: tuple[str, Script], monkeypatch: pytest.MonkeyPatch) -> None:
    url, script = server
    monkeypatch.delenv("GK_TEST_EMBED_KEY", raising=False)
    embedder = embedder_for(model("openai", url, api_key_env="GK_TEST_EMBED_KEY"))
    with pytest.raises(EmbeddingProviderError, match=r"\$GK_TEST_EMBED_KEY, which is not set"):
        embedder.embed_query("q")
    assert script.requests == []
    monkeypatch.setenv("GK_TEST_EMBED_KEY", "rotated-key")
    embedder.embed_query("q")
    assert script.requests[0]["headers"]["Authorization"] == "Bearer rotated-key"


def test_an_unconfigured_http_provider_is_gk017() -> None:
    with pytest.raises(EmbeddingProviderError, match="not configured: model"):
        embedder_for(EmbeddingModel(name="m", provider="openai", dimension=8, distance="cosine", recipe="r",
                                    options={"url": "http://127.0.0.1:9"}))
    with pytest.raises(EmbeddingProviderError, match="api_key_env"):
        embedder_for(model("openai", "http://x", api_key_env="not a name; $(rm)"))


# --- the reranker seam --------------------------------------------------------------------------


def test_rerank_speaks_the_common_protocol_and_scores_are_sigmoids(server: tuple[str, Script]) -> None:
    url, script = server
    docs = ["Stock markets fell.", "Mitochondria produce ATP in cells.", "The cat sat on the mat."]
    got = reranker_for({"url": url, "model": "rr"}).rerank("How do cells make energy?", docs, top_n=2)
    assert script.requests[0]["path"] == "/rerank"
    assert script.requests[0]["body"] == {"query": "How do cells make energy?", "documents": docs, "top_n": 2,
                                          "model": "rr"}
    answered = script.answers[0]["results"]
    assert any(r["relevance_score"] < 0 or r["relevance_score"] > 1 for r in answered)  # raw logits
    assert [i for i, _ in got] == [r["index"] for r in answered]
    assert [score for _, score in got] == pytest.approx([1 / (1 + math.exp(-r["relevance_score"])) for r in answered])
    assert got[0][0] == 1 and all(0.0 <= score <= 1.0 for _, score in got)


def test_rerank_failures_are_gk017(server: tuple[str, Script]) -> None:
    url, script = server
    script.failures = [(500, {})] * 5
    with pytest.raises(EmbeddingProviderError, match=r"reranker .* failed after 2 attempts"):
        reranker_for({"url": url, "max_retries": 1, "backoff": 0}).rerank("q", ["a", "b"], top_n=1)


def named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def test_a_provider_is_built_once_per_process_and_definition(server: tuple[str, Script]) -> None:
    """The servers make a Groundkit per request: each must not build (for the local model, load)
    the provider again. Another definition is another provider."""
    url, _ = server
    first, again = embedder_for(model("openai", url)), embedder_for(model("openai", url))
    assert vars(first)["_provider"] is vars(again)["_provider"]
    assert vars(embedder_for(model("openai", url, timeout=5)))["_provider"] is not vars(first)["_provider"]
