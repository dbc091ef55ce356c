"""A test double for embedding providers: an OpenAI-compatible ``/v1/embeddings`` server on
loopback, so that the real ``openai`` provider and its seam run end to end over HTTP.

Its vectors are deterministic bags of hashed words (texts sharing words are close), which no
configuration of groundkit can select: it exists only here. It records every text it embedded,
can be made to fail (an outage: 503 on every request) and to answer slowly.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DIMENSION = 32
_WORD = re.compile(r"[a-z0-9]+")


def fake_vector(text: str, dimension: int = DIMENSION) -> list[float]:
    """Words hashed into ``dimension`` buckets, L2-normalised (a constant bucket keeps it nonzero)."""
    v = [0.0] * dimension
    v[0] = 0.1
    for word in _WORD.findall(text.lower()):
        v[int.from_bytes(hashlib.sha256(word.encode()).digest()[:4], "big") % dimension] += 1.0
    norm = math.sqrt(sum(x * x for x in v))
    return [x / norm for x in v]


class FakeEmbeddings:
    """The server's state: what it embedded, whether it is down, how slow it is."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.requests = 0
        self.down = False
        self.delay_s = 0.0
        self.lock = threading.Lock()
        self.url = ""


@contextmanager
def fake_openai_server(dimension: int = DIMENSION) -> Iterator[FakeEmbeddings]:
    state = FakeEmbeddings()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            with state.lock:
                state.requests += 1
                down, delay = state.down, state.delay_s
            if delay:
                time.sleep(delay)
            if down or self.path.rstrip("/") != "/v1/embeddings":
                self._answer(503 if down else 404, {"error": {"message": "unavailable"}})
                return
            texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
            with state.lock:
                state.texts.extend(texts)
            data = [{"object": "embedding", "index": i, "embedding": fake_vector(t, dimension)}
                    for i, t in enumerate(texts)]
            tokens = sum(len(_WORD.findall(t.lower())) for t in texts)
            self._answer(200, {"object": "list", "data": data, "model": body.get("model"),
                               "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})

        def _answer(self, status: int, payload: dict[str, Any]) -> None:
            raw = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


def add_fake_model(gk: Any, name: str, fake: FakeEmbeddings, *, dimension: int = DIMENSION,
                   recipe: str = "titled", retries: int = 0) -> None:
    """Register ``name`` as an ``openai`` model served by ``fake`` (no retries: a failure is at once),
    and mark the fake's origin private in the outbound policy, open to anything (as an operator
    does for an embedding server inside their network; tests/test_outbound.py tests the policy)."""
    from groundkit import model_swap

    trust_private(gk, fake.url)
    model_swap.add_model(gk, name=name, provider="openai", dimension=dimension, distance="cosine", recipe=recipe,
                         options={"url": fake.url, "model": "fake", "max_retries": retries, "timeout": 10})


def trust_private(gk: Any, url: str) -> None:
    """Mark ``url``'s origin private and let the private class take anything (unscrubbed)."""
    from groundkit.outbound.policy import Allowance, ClassPolicy, current_policy, set_policy

    policy = current_policy(gk).policy
    policy = policy.with_class("private", ClassPolicy(allow=Allowance(private_spaces=True, owner_only=True,
                                                                      queries=True)))
    policy = policy.model_copy(update={"private_origins": (*policy.private_origins, url)})
    set_policy(gk, policy, "tests: the fake embedding server is inside the network")
