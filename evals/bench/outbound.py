"""python -m evals.bench outbound: what the outbound gate adds to a provider call, and what the
scrubber costs per chunk (docs/outbound.md).

One run, one loopback server (an OpenAI-compatible ``/v1/embeddings`` answering 384-dimension
vectors and ``/v1/chat/completions``), arms interleaved round by round:

- an embedding batch of ``--batch`` chunk texts (SciFact abstracts written as objects): the
  provider alone (its HTTP call and the seam's checks of the vectors, under a bare ticket: what
  an embedding call did before the gate), against the gate as the
  embedding job calls it (the decision by text hash in SQL under a restricted allowance, the
  record and the metered call), without and with the cloud scrub list (email, phone,
  url_credentials, secrets);
- an LLM call of two messages carrying five retrieved chunks: the transport alone, against the
  gate (the decision by object for the reader, the scrub, the record and the metered call).

Then the scrubber alone over every chunk, per kind and all together (and with 1,000 member names).

    python -m evals.bench outbound [--docs 320] [--batch 64] [--rounds 5] [--calls 20] [--dsn DSN]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from evals.bench.common import log, scratch_db, server
from evals.bench.embed import default_data, load

DIMENSION = 384


@contextmanager
def loopback() -> Iterator[str]:
    vector = [round(random.uniform(-0.1, 0.1), 6) for _ in range(DIMENSION)]

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as a real endpoint

        def log_message(self, *args: Any) -> None:
            return None

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path == "/v1/embeddings":
                answer: dict[str, Any] = {
                    "data": [{"index": i, "embedding": vector} for i in range(len(body["input"]))],
                    "usage": {"prompt_tokens": 60 * len(body["input"])}}
            else:
                answer = {"choices": [{"message": {"role": "assistant", "content": "An answer of a few words."}}],
                          "usage": {"prompt_tokens": 900, "completion_tokens": 7}}
            data = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


@contextmanager
def bare_ticket(kind: str, url: str) -> Iterator[None]:
    """The transport's own check passes, nothing else of the gate runs (the baseline arm)."""
    from groundkit.outbound import gate

    token = gate._TICKET.set(gate.Ticket(kind, "private", gate.origin_of(url)))
    try:
        yield
    finally:
        gate._TICKET.reset(token)


def timed(fn: Callable[[], Any], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def main(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m evals.bench outbound", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=320)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=20, help="LLM calls per arm and round")
    ap.add_argument("--data", type=str, default=None, help="A BEIR folder (default: ../shared/datasets/beir-scifact).")
    ap.add_argument("--dsn", type=str, default=None)
    args = ap.parse_args(list(argv))

    from groundkit import Groundkit, embedding, model_swap
    from groundkit.embedders import embedder_for
    from groundkit.llm import ChatClient, LlmProvider, Message
    from groundkit.models import ContentObject
    from groundkit.outbound import gate
    from groundkit.outbound.policy import Allowance, ClassPolicy, current_policy, set_policy

    data = Path(args.data) if args.data else default_data()
    ids, texts, _q, _qrels = load(data, args.docs)
    log(f"{len(texts)} abstracts from {data}; load average {os.getloadavg()[0]:.2f}")
    arms: dict[str, list[float]] = {}
    with server(args.dsn) as server_dsn, scratch_db(server_dsn, "outbound") as dsn, \
            Groundkit.connect(dsn) as gk, loopback() as url:
        gk.put_member("reader", "T3")
        gk.put_space("scifact")
        gk.put_objects([ContentObject(object_id=i, version=1, content_type="document", space_id="scifact",
                                      tier_visibility="T1", title="", body=t) for i, t in zip(ids, texts, strict=True)])
        rows = gk._fetch("select c.object_id, c.content, c.embed_hash_text as h from groundkit.chunks c"
                         " order by c.chunk_id", {})
        log(f"{len(rows)} chunks")
        base = current_policy(gk).policy.model_copy(update={"private_origins": (url,)})
        restricted = Allowance(max_tier="T2", queries=True)  # a per-text check in SQL, as a real deployment
        plain = base.with_class("private", ClassPolicy(allow=restricted))
        scrubbed = base.with_class("private", ClassPolicy(
            allow=restricted, scrub=("email", "phone", "url_credentials", "secrets")))
        model_swap.add_model(gk, name="remote", provider="openai", dimension=DIMENSION, distance="cosine",
                             recipe="text", options={"url": url, "model": "m", "batch_size": args.batch})
        model = embedding.get_model(gk, "remote")
        chat = ChatClient(LlmProvider(protocol="openai", url=url), "m")
        batches = [rows[i:i + args.batch] for i in range(0, len(rows), args.batch)]
        context = "\n\n".join(f"[{n + 1}] {r['content']}" for n, r in enumerate(rows[:5]))
        messages = [Message(role="system", content="Answer from the context; cite [n]."),
                    Message(role="user", content=f"<retrieved_context>\n{context}\n</retrieved_context>\n\n"
                                                 "What does the first study find?")]
        objects = tuple(r["object_id"] for r in rows[:5])

        seam = embedder_for(model)

        def transport_batch(batch: list[dict[str, Any]]) -> None:
            """The provider and the seam's checks of its answer, as before the gate: only the gate differs."""
            with bare_ticket("embed_documents", url):
                vectors, _tokens = seam._provider.embed([r["content"] for r in batch], query=False)  # type: ignore[attr-defined]
                seam._check(vectors, len(batch))  # type: ignore[attr-defined]

        def gated_batch(batch: list[dict[str, Any]]) -> None:
            embedder_for(model, meter_to=gk, flow="indexing").embed_documents(
                [r["content"] for r in batch], hashes=[bytes(r["h"]) for r in batch])

        def transport_llm() -> None:
            with bare_ticket("complete", url):
                chat.chat(messages)

        def gated_llm() -> None:
            gate.send("complete", gate.Destination("openai", url, "m"), [m.content for m in messages],
                      lambda t: gate.Answer(chat.chat([Message(role=m.role, content=c)
                                                       for m, c in zip(messages, t, strict=True)])),
                      provenance=gate.Provenance(queries=2, object_ids=objects), policy_from=gk, record_to=gk,
                      flow="tutor", reader="reader")

        set_policy(gk, scrubbed, "bench")
        gated_batch(batches[0])
        transport_batch(batches[0])  # warm both
        for r in range(args.rounds):
            for name, policy, fn in (("batch: provider alone", None, transport_batch),
                                     ("batch: through the gate", plain, gated_batch),
                                     ("batch: through the gate, scrubbed", scrubbed, gated_batch)):
                if policy is not None:
                    set_policy(gk, policy, "bench")
                t0 = time.perf_counter()
                for b in batches:
                    fn(b)
                arms.setdefault(name, []).append((time.perf_counter() - t0) * 1000)
            set_policy(gk, scrubbed, "bench")
            arms.setdefault("LLM call: transport alone", []).extend(timed(transport_llm, args.calls))
            arms.setdefault("LLM call: through the gate, scrubbed", []).extend(timed(gated_llm, args.calls))
            log(f"round {r + 1}/{args.rounds}")
        sent = gk._scalar("select count(*) from groundkit.outbound_calls where decision = 'sent'", {})
        log(f"{sent} decisions recorded")
    n_batches = len(batches)
    print(f"{len(rows)} chunks in {n_batches} batches of {args.batch}; {args.rounds} rounds; "
          f"{args.calls} LLM calls per arm and round")
    per_batch = {k: [v / n_batches for v in vs] for k, vs in arms.items() if k.startswith("batch")}
    base_b = statistics.median(per_batch["batch: provider alone"])
    for name, values in per_batch.items():
        m = statistics.median(values)
        print(f"{name:<40} {m:8.2f} ms per batch  (+{m - base_b:6.2f} ms, {m / base_b:.2f}x)")
    base_l = statistics.median(arms["LLM call: transport alone"])
    for name in ("LLM call: transport alone", "LLM call: through the gate, scrubbed"):
        m = statistics.median(arms[name])
        print(f"{name:<40} {m:8.2f} ms per call   (+{m - base_l:6.2f} ms, {m / base_l:.2f}x)")
    scrub_cost([r["content"] for r in rows])
    return 0


def scrub_cost(chunks: list[str]) -> None:
    """The scrubber alone: microseconds per chunk, per kind and all together."""
    from groundkit.outbound.scrub import Scrubber

    rng = random.Random(7)
    names = [f"{rng.choice(['Ana', 'Ravi', 'Mei', 'Kofi', 'Tess', 'Jonas', 'Ines'])}{i} "
             f"{rng.choice(['Lindqvist', 'Menon', 'Okafor', 'Silva', 'Brandt'])}{i}" for i in range(1000)]
    chars = sum(len(c) for c in chunks) / len(chunks)
    print(f"scrubber over {len(chunks)} chunks ({chars:.0f} characters on average)")
    cases: list[tuple[str, Any]] = [(k, Scrubber([k])) for k in ("email", "phone", "url_credentials", "secrets")]
    cases.append(("the cloud default (all four)", Scrubber(["email", "phone", "url_credentials", "secrets"])))
    cases.append(("member_names (1,000 members)", Scrubber(["member_names"], names=names)))
    for name, scrubber in cases:
        scrubber.scrub_all(chunks[:20])  # warm
        runs = []
        for _ in range(3):
            t0 = time.perf_counter()
            scrubber.scrub_all(chunks)
            runs.append((time.perf_counter() - t0) / len(chunks) * 1e6)
        print(f"  {name:<32} {statistics.median(runs):8.1f} us per chunk")
