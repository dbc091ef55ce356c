"""The outbound gate (docs/outbound.md), against real HTTP servers on loopback that capture every
byte they receive: what the policy withholds never arrives, what it scrubs arrives scrubbed, a
policy change counts from the next call, and no provider can be called around the gate."""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json
import pkgutil
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import psycopg
import pytest
from typer.testing import CliRunner

import groundkit.embedders
from groundkit import Groundkit, embedding, model_swap
from groundkit.cli import app
from groundkit.embedders import EmbeddingModel, embedder_for
from groundkit.embedders.rerank import reranker_for
from groundkit.errors import InvariantViolation, OutboundPolicyInvalid, OutboundRefused
from groundkit.llm import LlmProvider, Message, messages_digest, text_digest
from groundkit.outbound import gate, outbound_policy_hash
from groundkit.outbound.policy import (
    Allowance,
    ClassPolicy,
    OutboundPolicy,
    current_policy,
    default_policy,
    normalize_origin,
    policy_hash,
    set_policy,
)
from groundkit.outbound.scrub import Scrubber
from tests.dense_fakes import DIMENSION, fake_vector

runner = CliRunner()

T3_TEXT = "Secret T3 masterclass: the hide glue recipe uses fish bladder and exactly 41 grams of urea"
PRIVATE_TEXT = "Mastermind board only: our wholesale margin floor is 38 percent for the gallery deal"
NOTE_TEXT = "My private note: remember the dentist on Thursday and the locker code 5521"
PUBLIC_TEXT = "Open course on sharpening chisels with a honing guide and a leather strop"
EMAIL = "tess.lindqvist@example.org"
EMAIL_TEXT = f"Questions about the strop? Write to {EMAIL} any time"


@dataclass
class Capture:
    """What the loopback server received: every request's raw body, decoded JSON and path."""

    url: str = ""
    raw: list[bytes] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def received(self) -> str:
        with self.lock:
            return b"\n".join(self.raw).decode("utf-8")


@pytest.fixture
def capture() -> Iterator[Capture]:
    """An OpenAI-compatible embeddings and chat server, an ollama chat and a rerank endpoint."""
    state = Capture()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            return None

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            with state.lock:
                state.raw.append(raw)
                state.paths.append(self.path)
            body = json.loads(raw)
            if self.path == "/v1/embeddings":
                texts = body["input"]
                data = [{"index": i, "embedding": fake_vector(t)} for i, t in enumerate(texts)]
                self._send({"data": data, "usage": {"prompt_tokens": 7 * len(texts)}})
            elif self.path == "/v1/chat/completions":
                self._send({"choices": [{"message": {"role": "assistant", "content": "Use a strop."}}],
                            "usage": {"prompt_tokens": 123, "completion_tokens": 4}})
            elif self.path == "/api/chat":
                self._send({"message": {"role": "assistant", "content": "Hone it."}, "prompt_eval_count": 50,
                            "eval_count": 3})
            elif self.path == "/rerank":
                n = len(body["documents"])
                self._send({"results": [{"index": i, "relevance_score": 1.0 / (i + 1)} for i in range(n)],
                            "usage": {"total_tokens": 11}})
            else:
                self._send({"error": "no such path"}, 404)

        def _send(self, answer: dict[str, Any], status: int = 200) -> None:
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield state
    httpd.shutdown()
    httpd.server_close()


def world(gk: Groundkit) -> None:
    """A public course, a T3 section, a private board's post, an owner-only note, a post with an email."""
    gk.put_member("t0", "T0")
    gk.put_member("t3", "T3")
    gk.put_member("kofi", "T1")
    gk.put_space("courses", "T0")
    gk.put_space("mastermind", "T0", private=True)
    gk.grant_space("mastermind", "kofi")
    gk.put_space("notes", "T0")
    gk.put_object("course-1", 1, "course_section", "courses", "T0", "Sharpening", PUBLIC_TEXT)
    gk.put_object("course-t3", 1, "course_section", "courses", "T3", "Hide glue", T3_TEXT)
    gk.put_object("post-private", 1, "board_post", "mastermind", "T0", "Margins", PRIVATE_TEXT)
    gk.put_object("note-kofi", 1, "member_note", "notes", "T0", "Note", NOTE_TEXT, owner_sub="kofi", owner_only=True)
    gk.put_object("post-email", 1, "board_post", "courses", "T0", "Strop", EMAIL_TEXT)


def private_policy(gk: Groundkit, url: str, allow: Allowance | None, *, scrub: tuple[Any, ...] = (),
                   reason: str = "test") -> None:
    """Mark ``url`` private and give the private class ``allow`` and ``scrub``."""
    policy = current_policy(gk).policy.with_class("private", ClassPolicy(allow=allow, scrub=scrub))
    set_policy(gk, policy.model_copy(update={"private_origins": (url,)}), reason)


def add_model(gk: Groundkit, url: str, name: str = "remote") -> EmbeddingModel:
    model_swap.add_model(gk, name=name, provider="openai", dimension=DIMENSION, distance="cosine", recipe="titled",
                         options={"url": url, "model": "fake", "max_retries": 0, "timeout": 10})
    return embedding.get_model(gk, name)


def fresh(capture: Capture) -> None:
    with capture.lock:
        capture.raw.clear()
        capture.paths.clear()


# -- the policy ------------------------------------------------------------------------------


def test_the_default_policy_sends_nothing_out_and_its_hash_is_the_canonical_json(gk: Groundkit) -> None:
    v = current_policy(gk)
    assert v.version == 1 and v.policy == default_policy()
    assert v.policy.classes.private.allow is None and v.policy.classes.cloud.allow is None
    assert v.policy_hash == policy_hash(v.policy)  # recomputable offline
    assert outbound_policy_hash(gk) == (1, v.policy_hash)
    assert gk._scalar("select groundkit.outbound_policy_hash()", {}) == v.policy_hash


def test_a_policy_version_is_appended_never_edited(gk: Groundkit, raw: psycopg.Connection[Any]) -> None:
    opened = default_policy().with_class("cloud", ClassPolicy(allow=Allowance(max_tier="T1")))
    v2 = set_policy(gk, opened, "open cloud to T1")
    assert (v2.version, v2.changed, v2.policy_hash) == (2, True, policy_hash(opened))
    again = set_policy(gk, opened, "the same again")
    assert (again.version, again.changed) == (2, False)
    for stmt in ("update groundkit.outbound_policies set reason = 'x'", "delete from groundkit.outbound_policies",
                 "truncate groundkit.outbound_policies", "truncate groundkit.outbound_calls"):
        with pytest.raises(psycopg.Error) as info:
            raw.execute(stmt)
        assert info.value.sqlstate == "GK006"
    assert current_policy(gk).version == 2
    with pytest.raises(InvariantViolation):
        gk._fetch("update groundkit.outbound_policies set reason = 'x'", {})


def test_an_invalid_policy_is_gk025(gk: Groundkit) -> None:
    with pytest.raises(OutboundPolicyInvalid, match="unknown tier 'T9'"):
        set_policy(gk, default_policy().with_class("cloud", ClassPolicy(allow=Allowance(max_tier="T9"))), "x")
    with pytest.raises(OutboundPolicyInvalid, match="needs a reason"):
        set_policy(gk, default_policy(), " ")
    with pytest.raises(OutboundPolicyInvalid):
        set_policy(gk, {"classes": {}, "surprise": 1}, "x")
    bad = default_policy().document()
    bad["classes"]["cloud"]["allow"] = {"spaces": None}
    with pytest.raises(OutboundPolicyInvalid, match="allow is null or an object"):
        gk._fetch("select groundkit.set_outbound_policy(%(p)s, 'x')", {"p": psycopg.types.json.Jsonb(bad)})
    assert current_policy(gk).version == 1


@pytest.mark.parametrize("url", [
    "http://10.0.0.5:11434/api", "HTTPS://Embed.Example.ORG/v1?x=1", "http://user:pw@127.0.0.1:8080/",
    "http://[::1]:9000/x", "https://host.example:443", "http://host.example",
])
def test_sql_and_python_read_an_origin_alike(gk: Groundkit, url: str) -> None:
    sql_origin = gk._scalar("select groundkit._origin(%(u)s)", {"u": url})
    assert sql_origin == normalize_origin(url) == gate.origin_of(url)


@pytest.mark.parametrize("url", ["http://a@b@10.0.0.5/", "http://host\\@10.0.0.5/", "ftp://10.0.0.5/", "nonsense"])
def test_a_url_the_strict_reading_cannot_parse_is_never_private(gk: Groundkit, url: str) -> None:
    assert gk._scalar("select groundkit._origin(%(u)s)", {"u": url}) is None
    assert gk._scalar("select groundkit.outbound_class('openai', %(u)s)", {"u": url}) == "cloud"


# -- the embedding job -------------------------------------------------------------------------


def test_the_embedding_job_never_sends_what_the_policy_withholds(dsn: str, capture: Capture) -> None:
    """A T3 chunk, a private board's text and an owner-only note never reach a private endpoint
    allowed up to T2 without private boards or notes; an email arrives scrubbed. Withheld chunks
    are reported apart from the lag, and hybrid search still finds them by BM25."""
    with Groundkit.connect(dsn) as gk:
        world(gk)
        private_policy(gk, capture.url, Allowance(max_tier="T2", queries=True), scrub=("email",))
        model = add_model(gk, capture.url)
        report = embedding.embed_pending(gk, model, embedder_for(model), batch=2)
        received = capture.received()
        for text in (T3_TEXT, PRIVATE_TEXT, NOTE_TEXT, EMAIL):
            assert text not in received
        assert PUBLIC_TEXT in received and "Write to [email] any time" in received
        assert (report.chunks, report.withheld) == (2, 3)
        (lag,) = embedding.lag(gk, "remote")
        assert (lag.missing, lag.withheld, lag.oldest_at) == (0, 3, None)
        model_swap.cutover(gk, "remote")  # nothing lags: the withheld are not waiting
        hits = gk.search("t3", "hide glue urea", mode="hybrid")
        assert hits and hits[0].object_id == "course-t3" and hits[0].dense_rank is None
        decisions = gk._fetch("select class, kind, decision, texts, scrubbed, policy_version, flow"
                              " from groundkit.outbound_calls order by id", {})
        assert {(d["class"], d["kind"], d["decision"], d["flow"]) for d in decisions} == {
            ("private", "embed_documents", "sent", "indexing")}
        assert sum(d["texts"] for d in decisions) == 2 and any(d["scrubbed"] == {"email": 1} for d in decisions)
        assert gk._scalar("select count(*) from groundkit.calls where flow = 'indexing'", {}) == len(decisions)
    status = runner.invoke(app, ["status", "--dsn", dsn])
    assert status.exit_code == 0, status.output
    shown = " ".join(status.output.split())
    assert "0 chunk(s) unembedded; 3 withheld by the outbound policy (BM25-only)" in shown
    assert "outbound policy v2" in shown and "outbound calls last 24 h: 1 sent" in shown


def test_a_policy_change_counts_from_the_next_call(dsn: str, capture: Capture) -> None:
    with Groundkit.connect(dsn) as gk:
        world(gk)
        private_policy(gk, capture.url, None)  # marked private, but closed
        model = add_model(gk, capture.url)
        report = embedding.embed_pending(gk, model, embedder_for(model))
        assert (report.chunks, report.withheld) == (0, 5) and capture.raw == []
        embedder = embedder_for(model, policy_from=gk)
        with pytest.raises(OutboundRefused, match=r"rule private\.closed"):
            embedder.embed_query("sharpening")
        private_policy(gk, capture.url, Allowance(queries=True))  # public content and queries
        embedder.embed_query("sharpening")  # the same embedder: the next call reads the new policy
        assert capture.paths == ["/v1/embeddings"]
        report = embedding.embed_pending(gk, model, embedder_for(model))
        assert (report.chunks, report.withheld) == (3, 2)  # any tier now; still no private board, no note
        private_policy(gk, capture.url, None)
        with pytest.raises(OutboundRefused):
            embedder.embed_query("sharpening")
        assert len(capture.paths) == 2


def test_a_redacted_or_retiered_text_is_decided_on_its_live_rows(dsn: str, capture: Capture) -> None:
    """Re-tiering a public course to T3 withholds its text from the next batch on."""
    with Groundkit.connect(dsn) as gk:
        world(gk)
        private_policy(gk, capture.url, Allowance(max_tier="T1"))
        model = add_model(gk, capture.url)
        gk.retier_object("course-1", 2, "T3")
        embedding.embed_pending(gk, model, embedder_for(model))
        assert PUBLIC_TEXT not in capture.received()


# -- queries and search ------------------------------------------------------------------------


def test_query_embedding_to_cloud_needs_the_queries_allowance(dsn: str, capture: Capture) -> None:
    """Without it, search's auto mode is BM25 and an explicit dense search is refused; with it the
    query arrives scrubbed of what the cloud class scrubs."""
    with Groundkit.connect(dsn) as gk:
        world(gk)
        set_policy(gk, default_policy().with_class("cloud", ClassPolicy(
            allow=Allowance(max_tier="T0"), scrub=("email",))), "public content to the cloud, no queries")
        model = add_model(gk, capture.url)
        embedding.embed_pending(gk, model, embedder_for(model))
        model_swap.cutover(gk, "remote", force=True)
        fresh(capture)
        assert gk._scalar("select groundkit.auto_search_mode()", {}) == "bm25"
        assert gk.search("t0", f"strop {EMAIL}")  # auto: BM25, nothing sent
        with pytest.raises(OutboundRefused, match=r"rule cloud\.queries") as info:
            gk.search("t0", f"strop {EMAIL}", mode="dense")
        assert EMAIL not in info.value.message and capture.raw == []
        set_policy(gk, default_policy().with_class("cloud", ClassPolicy(
            allow=Allowance(max_tier="T0", queries=True), scrub=("email",))), "queries too")
        assert gk._scalar("select groundkit.auto_search_mode()", {}) == "hybrid"
        gk.search("t0", f"strop {EMAIL}")
        assert capture.received() and EMAIL not in capture.received() and "[email]" in capture.received()


# -- the LLM seam ----------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", ["openai", "ollama"])
def test_complete_pins_digests_and_meters_from_the_response(dsn: str, capture: Capture, protocol: str) -> None:
    with Groundkit.connect(dsn) as gk:
        world(gk)
        private_policy(gk, capture.url, Allowance(max_tier="T0", queries=True))
        provider = LlmProvider.model_validate({"protocol": protocol, "url": capture.url})
        with gk.run(flow="tutor", reader="t0", prompt_version="tutor-v3") as run:
            hits = run.search("sharpening chisels")
            context = run.context(hits, 500)
            answer = run.complete([{"role": "system", "content": "Answer from the context."},
                                   {"role": "user", "content": f"{context.text}\n\nHow do I sharpen?"}],
                                  model="chat-1", provider=provider)
        header = gk.replay(run.id).run
        (call,) = header.llm_calls
        sent = json.loads(capture.raw[-1])["messages"]
        assert call["messages_sha256"] == messages_digest([Message(**m) for m in sent]) == hashlib.sha256(
            json.dumps(sent, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()).hexdigest()
        assert call["answer_sha256"] == text_digest(answer.text) == answer.answer_sha256
        assert (call["source"], call["decision"], call["class"], call["prompt_version"]) == (
            "gate", "sent", "private", "tutor-v3")
        expected = (123, 4) if protocol == "openai" else (50, 3)
        assert (call["tokens_in"], call["tokens_out"]) == expected == (answer.tokens_in, answer.tokens_out)
        assert PUBLIC_TEXT in capture.received()
        assert "Use a strop" not in json.dumps(call) and PUBLIC_TEXT not in json.dumps(call)
        row = gk._fetch("select flow, kind, tokens_in, run_id from groundkit.calls where kind = 'llm'", {})[0]
        assert (row["flow"], row["tokens_in"], str(row["run_id"])) == ("tutor", expected[0], str(run.id))


def test_an_async_run_completes_through_the_same_gate(dsn: str, capture: Capture) -> None:
    """``async with gk.run(...)`` on an AsyncGroundkit: the same decision, digests, metering and
    refusal as the sync run, recorded in the run's transaction on the async connection."""
    import asyncio

    from groundkit import AsyncGroundkit

    with Groundkit.connect(dsn) as gk:
        world(gk)
        private_policy(gk, capture.url, Allowance(max_tier="T0", queries=True))
    provider = LlmProvider.model_validate({"protocol": "openai", "url": capture.url})

    async def main() -> tuple[Any, Any, Any]:
        async with await AsyncGroundkit.connect(dsn) as agk:
            async with agk.run(flow="tutor", reader="t0", prompt_version="tutor-v3") as run:
                hits = await run.search("sharpening chisels")
                context = run.context(hits, 500)
                answer = await run.complete([{"role": "user", "content": f"{context.text}\n\nHow do I sharpen?"}],
                                            model="chat-1", provider=provider)
                await run.record_llm("chat-2", 10, 2)  # metered in the run's transaction
            return run.id, answer, await agk.replay(run.id)

    run_id, answer, replay = asyncio.run(main())
    calls = replay.run.llm_calls
    sent = json.loads(capture.raw[-1])["messages"]
    assert calls[0]["messages_sha256"] == messages_digest([Message(**m) for m in sent]) == answer.messages_sha256
    assert (calls[0]["decision"], calls[0]["class"], calls[0]["prompt_version"]) == ("sent", "private", "tutor-v3")
    assert (answer.tokens_in, answer.tokens_out) == (123, 4) and PUBLIC_TEXT in capture.received()
    with Groundkit.connect(dsn) as gk:
        rows = gk._fetch("select model, tokens_in, run_id from groundkit.calls where kind = 'llm' order by call_id", {})
        assert [(r["model"], r["tokens_in"], str(r["run_id"])) for r in rows] == [
            ("chat-1", 123, str(run_id)), ("chat-2", 10, str(run_id))]


def test_an_llm_call_carrying_what_the_policy_refuses_is_refused_by_rule(dsn: str, capture: Capture) -> None:
    """A T3 chunk (as its T3 reader retrieved it) may not go to a private endpoint allowed up to
    T1: GK023 naming the rule, never the content; nothing arrives; the run pins the refusal."""
    with Groundkit.connect(dsn) as gk:
        world(gk)
        private_policy(gk, capture.url, Allowance(max_tier="T1", queries=True))
        provider = LlmProvider(protocol="openai", url=capture.url)
        with pytest.raises(OutboundRefused) as info, gk.run(flow="tutor", reader="t3") as run:
            hits = run.search("hide glue urea")
            assert any(h.object_id == "course-t3" for h in hits)
            run.complete([{"role": "user", "content": f"Summarise: {hits[0].content}"}], model="chat-1",
                         provider=provider)
        assert info.value.rule == "private.max_tier" and info.value.sqlstate == "GK023"
        assert T3_TEXT not in info.value.message and "urea" not in info.value.message
        assert capture.raw == []
        (call,) = gk.replay(run.id).run.llm_calls
        assert (call["decision"], call["rule"]) == ("refused", "private.max_tier")
        refused = gk._fetch("select decision, rule, refused from groundkit.outbound_calls", {})
        assert refused == [{"decision": "refused", "rule": "private.max_tier", "refused": 1}]


def test_private_boards_and_owner_only_notes_never_reach_an_llm_or_a_reranker(dsn: str, capture: Capture) -> None:
    with Groundkit.connect(dsn) as gk:
        world(gk)
        private_policy(gk, capture.url, Allowance(queries=True))  # any tier, no private boards, no notes
        provider = LlmProvider(protocol="ollama", url=capture.url)
        for query, rule in (("wholesale margin floor", "private.private_spaces"),
                            ("dentist locker code", "private.owner_only")):
            with pytest.raises(OutboundRefused, match=rule), gk.run(flow="tutor", reader="kofi") as run:
                hits = run.search(query)
                run.complete([{"role": "user", "content": hits[0].content}], model="m", provider=provider)
        reranker = reranker_for({"url": capture.url}, policy_from=gk, reader="kofi")
        with pytest.raises(OutboundRefused, match=r"private\.private_spaces"):
            reranker.rerank("margin", [PRIVATE_TEXT, PUBLIC_TEXT], 2, object_ids=["post-private", "course-1"])
        with pytest.raises(OutboundRefused, match=r"private\.unattributed"):
            reranker.rerank("margin", [NOTE_TEXT], 1)  # unknown provenance: only an unrestricted class
        assert capture.raw == []
        assert reranker.rerank("strop", [PUBLIC_TEXT, EMAIL_TEXT], 2, object_ids=["course-1", "post-email"])
        assert capture.paths == ["/rerank"]


def test_a_reader_cannot_probe_objects_through_the_decision(gk: Groundkit) -> None:
    """An object the reader may not see is refused as '<class>.unknown', exactly as one that does not exist."""
    world(gk)
    set_policy(gk, default_policy().with_class("cloud", ClassPolicy(allow=Allowance(queries=True))), "x")

    def rule(reader: str, obj: str) -> Any:
        return gk._scalar("select rule from groundkit.outbound_decide('openai', 'https://api.example', 'complete',"
                          " %(r)s, array[%(o)s], 1, 0)", {"r": reader, "o": obj})

    assert rule("t0", "post-private") == rule("t0", "no-such-object") == "cloud.unknown"
    assert rule("kofi", "post-private") == "cloud.private_spaces"
    assert rule("t0", "course-1") is None


def test_the_cloud_scrubber_removes_what_the_policy_names(dsn: str, capture: Capture) -> None:
    with Groundkit.connect(dsn) as gk:
        world(gk)
        gk._fetch("select groundkit.put_member_name('t0', 'Tess Lindqvist')", {})
        set_policy(gk, default_policy().with_class("cloud", ClassPolicy(
            allow=Allowance(max_tier="T0", queries=True),
            scrub=("email", "phone", "url_credentials", "secrets", "member_names"))), "scrub everything")
        key = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
        question = (f"Tess asked: mail {EMAIL}, call +1 415 555 0132, clone https://tess:hunter2pw@git.example/r "
                    f"with token {key}; Lindqvist says hi")
        provider = LlmProvider(protocol="openai", url=capture.url)
        with gk.run(flow="tutor", reader="t0") as run:
            answer = run.complete([{"role": "user", "content": question}], model="m", provider=provider)
        received = capture.received()
        for secret in (EMAIL, "415 555 0132", "hunter2pw", key, "Tess", "Lindqvist"):
            assert secret not in received
        assert "https://[credentials]@git.example/r" in received
        assert answer.scrubbed == {"email": 1, "phone": 1, "url_credentials": 1, "secrets": 1, "member_names": 2}


# -- no provider around the gate -----------------------------------------------------------------

# The transport methods of every provider class: each must refuse outside the gate.
TRANSPORTS = ("embed", "embed_array", "rerank_scores", "chat", "post")


def provider_classes() -> list[type]:
    """Every class in groundkit.embedders.* and groundkit.llm with a transport method."""
    modules = [importlib.import_module(f"groundkit.embedders.{m.name}")
               for m in pkgutil.iter_modules(groundkit.embedders.__path__) if m.name != "export"]
    modules += [groundkit.embedders, importlib.import_module("groundkit.llm")]
    found: dict[str, type] = {}
    for module in modules:
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if (cls.__module__ == module.__name__ and any(callable(getattr(cls, t, None)) for t in TRANSPORTS)
                    and not getattr(cls, "_is_protocol", False)):
                found[f"{module.__name__}.{name}"] = cls
    return list(found.values())


def test_every_provider_class_is_enumerated() -> None:
    names = {c.__qualname__ for c in provider_classes()}
    assert {"LocalProvider", "HttpProvider", "JsonClient", "HttpReranker", "ChatClient"} <= names


def test_no_provider_can_be_called_around_the_gate(capture: Capture, embed_home: Any,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Each provider class's transport, called directly, refuses (gate.bypass) and sends nothing;
    through its public factory, the same call goes through gate.send."""
    monkeypatch.setenv("GROUNDKIT_HOME", str(embed_home))
    from groundkit.embedders.http import HttpOptions, JsonClient, provider_for
    from groundkit.embedders.local import LocalOptions, LocalProvider
    from groundkit.embedders.rerank import HttpReranker, RerankOptions
    from groundkit.llm import ChatClient, Message

    direct: dict[str, Callable[[], object]] = {
        "LocalProvider": lambda: LocalProvider(LocalOptions.model_validate({})).embed(["x"], query=False),
        "HttpProvider": lambda: provider_for("openai", {"url": capture.url, "model": "m"}).embed(["x"], query=False),
        "JsonClient": lambda: JsonClient(HttpOptions.model_validate({"url": capture.url, "model": "m"}), "t").post(
            "/v1/embeddings", {}),
        "HttpReranker": lambda: HttpReranker(RerankOptions.model_validate({"url": capture.url})).rerank_scores(
            "q", ["d"], 1),
        "ChatClient": lambda: ChatClient(LlmProvider(protocol="openai", url=capture.url), "m").chat(
            [Message(role="user", content="x")]),
    }
    covered = {c.__qualname__ for c in provider_classes()} - {"_Seam", "GatedReranker"}
    assert covered <= set(direct), covered - set(direct)
    for name, call in direct.items():
        with pytest.raises(OutboundRefused, match=r"gate\.bypass"):
            call()
        assert capture.raw == [], name
    calls: list[str] = []
    real_send = gate.send_steps  # (gate.send and the clients' searches both run it)

    def spy(kind: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(kind)
        return real_send(kind, *args, **kwargs)

    monkeypatch.setattr(gate, "send_steps", spy)
    opened = default_policy().with_class("cloud", ClassPolicy(allow=Allowance(private_spaces=True, owner_only=True,
                                                                              queries=True)))
    local = EmbeddingModel(name="minilm", provider="local", dimension=384, distance="cosine", recipe="titled")
    remote = EmbeddingModel(name="r", provider="openai", dimension=DIMENSION, distance="cosine", recipe="titled",
                            options={"url": capture.url, "model": "m"})
    embedder_for(local).embed_documents(["x"])
    embedder_for(remote, policy_from=opened).embed_query("x")
    reranker_for({"url": capture.url}, policy_from=opened).rerank("q", ["d"], 1)
    assert calls == ["embed_documents", "embed_query", "rerank"]
    assert capture.paths == ["/v1/embeddings", "/rerank"]


def test_the_transport_refuses_another_origin_than_the_decided_one(capture: Capture) -> None:
    from groundkit.embedders.http import HttpOptions, JsonClient

    opened = default_policy().with_class("cloud", ClassPolicy(allow=Allowance(queries=True)))
    elsewhere = JsonClient(HttpOptions.model_validate({"url": "http://127.0.0.2:9", "model": "m"}), "t")
    with pytest.raises(OutboundRefused, match=r"gate\.origin"):
        gate.send("embed_query", gate.Destination("openai", capture.url, "m"), ["q"],
                  lambda t: gate.Answer(elsewhere.post("/v1/embeddings", {"input": t})),
                  provenance=gate.Provenance(queries=1), policy_from=opened)


# -- the scrubber alone ----------------------------------------------------------------------


def test_the_scrubber_keeps_ordinary_text_and_counts_what_it_removes() -> None:
    s = Scrubber(["email", "phone", "url_credentials", "secrets", "member_names"], ["US", "GB"],
                 ["Ravi Menon"])
    text = "Cut the tenon 12 mm long; the 2024 show had 300 visitors. Mark the shoulder with a knife."
    assert s.scrub(text) == (text, {})
    cleaned, counts = s.scrub("Ravi's number is (020) 7946 0958 and AKIAIOSFODNN7EXAMPLE is his AWS key; "
                              "password = 'correct-horse-9'")
    assert "7946" not in cleaned and "AKIAIOSFODNN7EXAMPLE" not in cleaned and "correct-horse-9" not in cleaned
    assert "Ravi" not in cleaned
    assert counts == {"member_names": 1, "phone": 1, "secrets": 2}


def test_scrubbing_refuses_rather_than_sends_when_member_names_cannot_be_read(dsn: str, capture: Capture) -> None:
    """A fixed policy has no database to read names from: the call is refused, not sent unscrubbed."""
    policy = OutboundPolicy.model_validate(default_policy().document()).with_class(
        "cloud", ClassPolicy(allow=Allowance(queries=True), scrub=("member_names",)))
    remote = EmbeddingModel(name="r", provider="openai", dimension=DIMENSION, distance="cosine", recipe="titled",
                            options={"url": capture.url, "model": "m"})
    with pytest.raises(OutboundRefused, match=r"cloud\.scrub\.member_names"):
        embedder_for(remote, policy_from=policy).embed_query("Tess")
    assert capture.raw == []


# -- the CLI ---------------------------------------------------------------------------------


def test_the_cli_manages_the_policy(dsn: str) -> None:
    def run(*args: str) -> str:
        result = runner.invoke(app, [*args, "--dsn", dsn])
        assert result.exit_code == 0, result.output
        return result.output

    assert "cloud           closed" in run("outbound", "show")
    run("outbound", "private-origin", "add", "http://10.1.2.3:11434/api", "--reason", "the GPU box")
    shown = run("outbound", "allow", "private", "--max-tier", "T2", "--queries", "--reason", "the GPU box")
    assert "v3 in force" in shown and "tiers up to T2" in shown and "http://10.1.2.3:11434" in shown
    run("outbound", "scrub", "private", "email", "phone", "--reason", "belt and braces")
    body = json.loads(run("outbound", "show", "--json"))
    assert body["version"] == 4 and body["policy"]["classes"]["private"]["scrub"] == ["email", "phone"]
    history = [json.loads(line) for line in run("outbound", "history", "--json").splitlines()]
    assert [h["version"] for h in history] == [4, 3, 2, 1]
    bad = runner.invoke(app, ["outbound", "allow", "cloud", "--max-tier", "T9", "--reason", "x", "--dsn", dsn])
    assert bad.exit_code == 1 and "GK025" in bad.output


def test_a_gated_call_is_priced_per_flow_from_the_providers_usage(dsn: str, capture: Capture, tmp_path: Any,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    prices = tmp_path / "prices.toml"
    prices.write_text('[models."chat-1"]\ninput_per_1k = 0.5\noutput_per_1k = 2\ncurrency = "USD"\n')
    monkeypatch.setenv("GROUNDKIT_PRICES", str(prices))
    with Groundkit.connect(dsn) as gk:
        world(gk)
        private_policy(gk, capture.url, Allowance(queries=True))
        provider = LlmProvider.model_validate({"protocol": "openai", "url": capture.url})
        with gk.run(flow="authoring", reader="t0") as run:
            run.complete([{"role": "user", "content": "Draft a welcome note."}], model="chat-1", provider=provider)
        (call,) = gk.replay(run.id).run.llm_calls
        assert call["cost"] == "0.0695"  # 123 tokens in at 0.5 per 1k, 4 out at 2 per 1k
        (row,) = gk._fetch("select flow, kind, cost, currency from groundkit.calls", {})
        assert (row["flow"], row["kind"], str(row["cost"]), row["currency"]) == ("authoring", "llm", "0.0695", "USD")
        (spend,) = runner.invoke(app, ["costs", "--json", "--dsn", dsn]).output.splitlines()
        assert json.loads(spend)["flow"] == "authoring" and json.loads(spend)["cost"] == "0.0695"


def test_an_llm_provider_failure_is_gk024_without_a_chain_and_without_fallback(dsn: str, capture: Capture) -> None:
    from groundkit.errors import LlmProviderError

    with Groundkit.connect(dsn) as gk:
        world(gk)
        private_policy(gk, capture.url, Allowance(queries=True))
        broken = LlmProvider.model_validate({"protocol": "openai", "url": capture.url + "/nowhere", "max_retries": 1,
                                             "backoff": 0})
        with pytest.raises(LlmProviderError, match="HTTP 404") as info, gk.run(flow="tutor", reader="t0") as run:
            run.complete([{"role": "user", "content": "hello"}], model="m", provider=broken)
        assert info.value.sqlstate == "GK024" and info.value.__cause__ is None and info.value.__context__ is None
        assert capture.paths == ["/nowhere/v1/chat/completions"]  # a 404 is not retried, nothing else is tried
        assert gk.replay(run.id).run.error_class == "groundkit.errors.LlmProviderError"
