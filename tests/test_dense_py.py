"""Dense search from Python and the CLI: search modes, `groundkit embed`, the lag in status,
model swaps (docs/embedding-worker.md). Real pgvector on the embedded PostgreSQL; the embedding
provider is the real `openai` provider talking to a test double on loopback (tests/dense_fakes.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from typer.testing import CliRunner

from groundkit import Groundkit, embedding, model_swap
from groundkit.cli import app
from groundkit.errors import InvalidArgument, UnknownModel
from tests.dense_fakes import FakeEmbeddings, add_fake_model
from tests.governance_helpers import certify

# The cutovers here test the switch itself; the gated cutover is tests/test_governance.py's.
UNGATED = ("--skip-gate", "--reason", "the gated cutover is tests/test_governance.py's")

CLI = [sys.executable, "-c", "from groundkit.cli import app; app()"]
runner = CliRunner()

TOPICS = ["kiln firing schedule for stoneware", "glaze recipes with iron oxide", "throwing tall cylinders",
          "pricing commissions for clients", "photographing pottery for a shop", "reclaiming clay scraps"]


def _world(gk: Groundkit, n: int = 12) -> None:
    """Members of two tiers, an open, a tiered and a private space, ``n`` posts per space."""
    gk.put_member("t0", "T0")
    gk.put_member("t2", "T2")
    gk.put_space("open", "T0")
    gk.put_space("members", "T1")
    gk.put_space("vault", "T0", private=True)
    gk.grant_space("vault", "t2")
    for space in ("open", "members", "vault"):
        for i in range(n):
            gk.put_object(f"{space}-{i}", 1, "board_post", space, "T0", f"{TOPICS[i % len(TOPICS)]} {i}",
                          f"{TOPICS[i % len(TOPICS)]}: notes number {i} from the {space} space")


def _run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout)


def _embedded(gk: Groundkit, model: str) -> int:
    return int(gk._scalar("select count(*) from groundkit.embeddings where model = %(m)s", {"m": model}))


@pytest.fixture
def dense(dsn: str, fake: FakeEmbeddings) -> Iterator[Groundkit]:
    """A world whose chunks are embedded by the active model ``fake``."""
    with Groundkit.connect(dsn) as gk:
        _world(gk)
        add_fake_model(gk, "fake", fake)
        m = embedding.get_model(gk, "fake")
        from groundkit.embedders import embedder_for

        embedding.embed_pending(gk, m, embedder_for(m))
        model_swap.cutover(gk, "fake")
        yield gk


def test_embed_fills_lag_to_zero(dsn: str, fake: FakeEmbeddings) -> None:
    """`groundkit embed --model` embeds every current chunk; the lag is then zero, and each text
    was sent to the provider once."""
    with Groundkit.connect(dsn) as gk:
        _world(gk)
        add_fake_model(gk, "fake", fake)
        (before,) = embedding.lag(gk, "fake")
        assert before.missing == 36 and before.oldest_at is not None and before.state == "inactive"
    done = _run("embed", "--model", "fake", "--batch", "5", "--dsn", dsn)
    assert done.returncode == 0, done.stderr
    assert "fake: embedded 36 chunk(s)" in done.stdout
    with Groundkit.connect(dsn) as gk:
        (after,) = embedding.lag(gk, "fake")
        assert after.missing == 0 and after.oldest_at is None
        assert _embedded(gk, "fake") == 36
    assert len(fake.texts) == len(set(fake.texts)) == 36
    again = _run("embed", "--model", "fake", "--json", "--dsn", dsn)
    assert json.loads(again.stdout)["chunks"] == 0 and len(fake.texts) == 36


def test_embed_json_shape(dsn: str, fake: FakeEmbeddings) -> None:
    """--json prints one object per model: model, chunks, seconds, chunks_per_s."""
    with Groundkit.connect(dsn) as gk:
        _world(gk, n=3)
        add_fake_model(gk, "fake", fake)
        model_swap.cutover(gk, "fake", force=True)
    done = _run("embed", "--json", "--dsn", dsn)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 1
    body = json.loads(lines[0])
    assert set(body) == {"model", "chunks", "seconds", "chunks_per_s", "withheld"}
    assert body["model"] == "fake" and body["chunks"] == 9
    assert body["seconds"] > 0 and body["chunks_per_s"] == pytest.approx(9 / body["seconds"], rel=0.05)


def test_two_concurrent_embed_processes_never_embed_a_hash_twice(dsn: str, fake: FakeEmbeddings) -> None:
    """Two `groundkit embed` processes at once share the work: together they embed every chunk,
    and no text reaches the provider twice."""
    with Groundkit.connect(dsn) as gk:
        _world(gk, n=40)
        add_fake_model(gk, "fake", fake)
    fake.delay_s = 0.02  # batches overlap in time
    procs = [subprocess.Popen([*CLI, "embed", "--model", "fake", "--batch", "4", "--json", "--dsn", dsn],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), results
    counts = [json.loads(out)["chunks"] for out, _ in results]
    assert sum(counts) == 120 and all(c > 0 for c in counts), counts  # both took a share
    assert len(fake.texts) == len(set(fake.texts)) == 120
    with Groundkit.connect(dsn) as gk:
        assert embedding.lag(gk, "fake")[0].missing == 0 and _embedded(gk, "fake") == 120


def test_ctrl_c_loses_nothing_and_redoes_nothing_committed(dsn: str, fake: FakeEmbeddings) -> None:
    """SIGINT in the middle of `groundkit embed`: exit 130, the batches committed stay, and the
    next run embeds only what is still missing (no committed text goes to the provider again)."""
    with Groundkit.connect(dsn) as gk:
        _world(gk, n=20)
        add_fake_model(gk, "fake", fake)
    fake.delay_s = 0.3
    proc = subprocess.Popen([*CLI, "embed", "--model", "fake", "--batch", "3", "--dsn", dsn],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with Groundkit.connect(dsn) as gk:
        deadline = time.monotonic() + 120
        while _embedded(gk, "fake") < 6:
            assert time.monotonic() < deadline and proc.poll() is None, proc.stderr
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 130, stderr
        assert "interrupted" in stderr and "Traceback" not in stderr
        committed = {bytes(r["content_hash"]) for r in gk._fetch(
            "select content_hash from groundkit.embeddings where model = 'fake'", {})}
        assert 6 <= len(committed) < 60
        assert embedding.lag(gk, "fake")[0].missing == 60 - len(committed)
    fake.delay_s = 0.0
    first_run = len(fake.texts)
    done = _run("embed", "--model", "fake", "--json", "--dsn", dsn)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["chunks"] == 60 - len(committed)
    redone = {hashlib.sha256(t.encode()).digest() for t in fake.texts[first_run:]}
    assert not redone & committed
    with Groundkit.connect(dsn) as gk:
        assert embedding.lag(gk, "fake")[0].missing == 0


def test_search_mode_dense_and_hybrid_return_only_visible_hits(dense: Groundkit, dsn: str) -> None:
    """Dense and hybrid search, from Python and the CLI, return only chunks the reader may see,
    ranked by the query's meaning (the fake's shared words), with each leg's rank in hybrid."""
    gk = dense
    for mode in ("dense", "hybrid"):
        t0 = gk.search("t0", "kiln firing stoneware", k=50, mode=mode)
        t2 = gk.search("t2", "kiln firing stoneware", k=50, mode=mode)
        assert t0 and {h.space_id for h in t0} == {"open"}, mode
        assert {h.space_id for h in t2} == {"open", "members", "vault"}, mode
        assert "kiln" in t0[0].title
    exact = gk.search("t0", "kiln firing stoneware", k=50, mode="dense", exact=True)
    assert {h.object_id for h in exact} == {h.object_id for h in gk.search("t0", "kiln firing stoneware", k=50,
                                                                           mode="dense")}
    hybrid = gk.search("t2", "glaze iron oxide", k=10, mode="hybrid")
    assert any(h.bm25_rank is not None and h.dense_rank is not None for h in hybrid)
    assert all(h.bm25_rank is None and h.dense_rank is None for h in gk.search("t2", "glaze", mode="dense"))
    for mode in ("dense", "hybrid"):
        shown = _run("search", "kiln firing", "--as", "t0", "--mode", mode, "-k", "50", "--json", "--dsn", dsn)
        assert shown.returncode == 0, shown.stderr
        hits = [json.loads(line) for line in shown.stdout.splitlines()]
        assert hits and {h["space_id"] for h in hits} == {"open"}
    shown = _run("search", "kiln", "--as", "t0", "--mode", "dense", "--exact", "--dsn", dsn)
    assert shown.returncode == 0 and "result(s)" in shown.stdout, shown.stderr


def test_search_mode_bad_input(dense: Groundkit, dsn: str) -> None:
    with pytest.raises(InvalidArgument, match="mode must be one of"):
        dense.search("t0", "kiln", mode="semantic")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="exact goes with"):
        dense.search("t0", "kiln", exact=True)
    with pytest.raises(InvalidArgument, match="go with mode='hybrid'"):
        dense.search("t0", "kiln", mode="dense", rrf_k=10)
    bad = _run("search", "kiln", "--as", "t0", "--mode", "semantic", "--dsn", dsn)
    assert bad.returncode == 1 and "GK005" in bad.stderr


def test_dense_search_without_an_active_model_is_unknown_model(dsn: str) -> None:
    with Groundkit.connect(dsn) as gk:
        _world(gk, n=1)
        with pytest.raises(UnknownModel):
            gk.search("t0", "kiln", mode="dense")
        assert gk.search("t0", "kiln")  # BM25 needs no model


def test_the_default_mode_is_hybrid_once_a_model_is_active_else_bm25(dsn: str, fake: FakeEmbeddings) -> None:
    """The default search (mode auto) is BM25 with no active model, and hybrid from the search
    after a cutover: the same hits as mode='hybrid', each leg's rank filled; in the caller's
    own transaction, which the check leaves usable."""
    with Groundkit.connect(dsn) as gk:
        _world(gk)
        assert gk._scalar("select groundkit.auto_search_mode() as m", {}) == "bm25"
        before = gk.search("t2", "glaze iron oxide", k=10)
        assert before == gk.search("t2", "glaze iron oxide", k=10, mode="bm25")
        assert all(h.bm25_rank is None and h.dense_rank is None for h in before)
        add_fake_model(gk, "fake", fake)
        assert gk.search("t2", "glaze iron oxide", k=10, mode="auto") == before  # added, not active
        m = embedding.get_model(gk, "fake")
        from groundkit.embedders import embedder_for

        embedding.embed_pending(gk, m, embedder_for(m))
        model_swap.cutover(gk, "fake")
        with gk.conn.transaction():
            after = gk.search("t2", "glaze iron oxide", k=10)
            assert after == gk.search("t2", "glaze iron oxide", k=10, mode="hybrid")
            assert any(h.bm25_rank is not None and h.dense_rank is not None for h in after)
            gk.put_member("t3", "T3")  # the transaction is still usable
        shown = _run("search", "glaze iron oxide", "--as", "t2", "--json", "--dsn", dsn)
        assert shown.returncode == 0, shown.stderr
        assert [json.loads(line)["object_id"] for line in shown.stdout.splitlines()] == [h.object_id for h in after]


def test_query_embeddings_are_metered_to_the_clients_flow(dense: Groundkit, dsn: str, fake: FakeEmbeddings) -> None:
    """A client made with a flow meters each query embedding to it on its own connection; the
    embedder is made once per model for the client's life."""
    from groundkit import metering

    metering.add_flow(dense, "tutor")
    with Groundkit.connect(dsn, flow="tutor") as gk:
        gk.search("t0", "kiln firing", mode="dense")
        gk.search("t0", "glaze", mode="hybrid")
        assert len(gk._embedders) == 1
    # (the embedding job's calls are metered under the built-in flow indexing)
    rows = dense._fetch("select flow, model, kind, tokens_in from groundkit.calls where flow <> 'indexing'"
                        " order by call_id", {})
    assert [(r["flow"], r["model"], r["kind"]) for r in rows] == [("tutor", "fake", "embedding")] * 2
    assert rows[0]["tokens_in"] == 2
    dense.search("t0", "kiln", mode="dense")  # no flow: not metered
    assert dense._scalar("select count(*) from groundkit.calls where flow <> 'indexing'", {}) == 2


def test_models_add_bad_input_is_typed(dsn: str, fake: FakeEmbeddings) -> None:
    with Groundkit.connect(dsn) as gk:
        cases: list[tuple[dict[str, Any], str]] = [({"provider": "cohere"}, "provider"),
                                                   ({"dimension": 0}, "dimension"),
                                                   ({"distance": "dot"}, "distance"),
                                                   ({"recipe": "everything"}, "recipe")]
        for bad, match in cases:
            args: dict[str, Any] = {"name": "m", "provider": "openai", "dimension": 8, "distance": "cosine",
                                    "recipe": "titled", "options": {"url": fake.url, "model": "x"}, **bad}
            with pytest.raises(InvalidArgument, match=match):
                model_swap.add_model(gk, **args)
        with pytest.raises(InvalidArgument, match="name"):
            model_swap.add_model(gk, name="a b", provider="openai", dimension=8, distance="cosine", recipe="titled",
                                 options={"url": fake.url, "model": "x"})
        assert gk._scalar("select count(*) from groundkit.embedding_models", {}) == 0
    refused = _run("models", "add", "m", "--provider", "openai", "--dimension", "8", "--distance", "dot",
               "--url", fake.url, "--remote-model", "x", "--dsn", dsn)
    assert refused.returncode == 1 and "GK005" in refused.stderr and "distance" in refused.stderr
    ok = _run("models", "add", "m", "--provider", "openai", "--dimension", "8", "--url", fake.url,
              "--remote-model", "x", "--api-key-env", "FAKE_KEY", "--dsn", dsn)
    assert ok.returncode == 0, ok.stderr
    listed = _run("models", "list", "--json", "--dsn", dsn)
    (row,) = [json.loads(line) for line in listed.stdout.splitlines()]
    assert row["name"] == "m" and row["state"] == "inactive" and row["options"]["api_key_env"] == "FAKE_KEY"
    assert row["missing"] == 0


def test_reindex_shadow_compare_cutover_and_rollback(dense: Groundkit, dsn: str, fake: FakeEmbeddings,
                                                    tmp_path: Path) -> None:
    """A second model is built beside the active one (search keeps serving the active one),
    compared on the same queries, cut over to, and rolled back from."""
    gk = dense
    add_fake_model(gk, "fake2", fake, recipe="text")
    started = _run("reindex", "--model", "fake2", "--dsn", dsn)
    assert started.returncode == 0 and "36 chunk(s) to embed" in started.stdout, started.stderr
    assert [(lag.model, lag.state, lag.missing) for lag in embedding.lag(gk)] == [("fake", "active", 0),
                                                                                ("fake2", "building", 36)]
    assert [m.name for m in embedding.models_to_embed(gk)] == ["fake", "fake2"]
    # refused while fake2 lags, and search still serves fake
    refused = _run("cutover", "--model", "fake2", "--dsn", dsn)
    assert refused.returncode == 1 and "GK016" in refused.stderr and "36" in refused.stderr
    assert embedding.active_model(gk).name == "fake"
    done = _run("embed", "--json", "--dsn", dsn)  # every model active or being built
    assert [json.loads(line)["model"] for line in done.stdout.splitlines()] == ["fake", "fake2"]
    queries = tmp_path / "queries.jsonl"
    queries.write_text("kiln firing\n" + json.dumps({"query": "glaze iron", "candidates": [
        {"object_id": "open-1", "relevance": 2}, {"object_id": "open-0", "relevance": 0}]}) + "\n")
    compared = _run("shadow-compare", "--model", "fake2", "--queries", str(queries), "--as", "t0", "--json",
                    "--dsn", dsn)
    assert compared.returncode == 0, compared.stderr
    report = json.loads(compared.stdout)
    assert report["active"] == "fake" and report["candidate"] == "fake2" and report["queries"] == 2
    assert 0 < report["overlap_at_k"] <= 1 and report["judged"] == 1
    assert report["ndcg_delta"] == pytest.approx(report["ndcg_candidate"] - report["ndcg_active"])
    assert embedding.active_model(gk).name == "fake"  # the comparison was rolled back
    switched = _run("cutover", "--model", "fake2", *UNGATED, "--dsn", dsn)
    assert switched.returncode == 0, switched.stderr
    assert "active embedding model: fake2 (was fake)" in switched.stdout and "the gate was bypassed" in switched.stderr
    assert embedding.active_model(gk).name == "fake2"
    assert {lag.model: lag.state for lag in embedding.lag(gk)} == {"fake2": "active", "fake": "building"}
    assert gk.search("t0", "kiln firing", mode="dense")
    back = _run("cutover", "--model", "fake", *UNGATED, "--dsn", dsn)  # the rollback: kept embedded
    assert back.returncode == 0 and "(was fake2)" in back.stdout, back.stderr
    assert embedding.active_model(gk).name == "fake"


def test_cutover_refused_with_lag_and_forced(dense: Groundkit, dsn: str, fake: FakeEmbeddings) -> None:
    gk = dense
    add_fake_model(gk, "fake2", fake)
    refused = _run("cutover", "--model", "fake2", "--dsn", dsn)
    assert refused.returncode == 1
    assert "error [GK016]" in refused.stderr and "lacks embeddings for 36 current chunks" in refused.stderr
    assert embedding.active_model(gk).name == "fake"
    unknown = _run("cutover", "--model", "nope", "--dsn", dsn)
    assert unknown.returncode == 1 and "GK015" in unknown.stderr
    forced = _run("cutover", "--model", "fake2", "--force", *UNGATED, "--dsn", dsn)
    assert forced.returncode == 0 and "active embedding model: fake2" in forced.stdout, forced.stderr
    assert embedding.active_model(gk).name == "fake2"
    assert gk.search("t0", "kiln", mode="dense") == []  # nothing embedded by fake2 yet: nothing returned


def test_status_check_breaches_on_lag(dense: Groundkit, dsn: str) -> None:
    """status shows each model's lag; --check exits 1 once the active model's lag breaches the
    configured thresholds (count or age), and 0 otherwise."""
    certify(dsn)  # (status --check also alerts on a configuration no gate certified: docs/governance.md)
    fine = runner.invoke(app, ["status", "--check", "--dsn", dsn])
    assert fine.exit_code == 0, fine.output
    assert "embeddings        fake (active): 0 chunk(s) unembedded" in fine.output
    dense.put_object("new-1", 1, "board_post", "open", "T0", "kiln", "a new post about kilns")
    shown = runner.invoke(app, ["status", "--check", "--dsn", dsn])
    assert shown.exit_code == 0 and "fake (active): 1 chunk(s) unembedded, the oldest waiting" in shown.output
    by_count = runner.invoke(app, ["status", "--check", "--embed-lag-alert-chunks", "0", "--dsn", dsn])
    assert by_count.exit_code == 1 and "ALERT" in by_count.output
    env = {**os.environ, "GROUNDKIT_EMBEDDING_LAG_ALERT_S": "0.001"}
    time.sleep(0.01)
    by_age = subprocess.run([*CLI, "status", "--check", "--json", "--dsn", dsn], env=env, capture_output=True,
                            text=True, timeout=60)
    assert by_age.returncode == 1, by_age.stderr
    body = json.loads(by_age.stdout)
    assert body["dense"]["available"] is True and body["dense"]["lag"][0]["missing"] == 1
    assert "oldest unembedded chunk waits" in body["dense"]["alerts"][0]
    bad = subprocess.run([*CLI, "status", "--dsn", dsn], env={**os.environ, "GROUNDKIT_EMBEDDING_LAG_ALERT_S": "x"},
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "GROUNDKIT_EMBEDDING_LAG_ALERT_S" in bad.stderr


def test_embed_without_any_model_says_what_to_do(dsn: str) -> None:
    done = _run("embed", "--dsn", dsn)
    assert done.returncode == 1 and "groundkit models add" in done.stderr


def test_a_failed_embedding_batch_leaves_nothing_half_stored(dense: Groundkit, fake: FakeEmbeddings) -> None:
    """A provider failure in the middle of the job raises GK017; the batches before it stay."""
    from groundkit.embedders import embedder_for
    from groundkit.errors import EmbeddingProviderError

    for i in range(5):
        dense.put_object(f"late-{i}", 1, "board_post", "open", "T0", f"late {i}", f"late post {i}")
    fake.down = True
    m = embedding.get_model(dense, "fake")
    with pytest.raises(EmbeddingProviderError):
        embedding.embed_pending(dense, m, embedder_for(m), batch=2)
    assert embedding.lag(dense, "fake")[0].missing == 5
    assert dense.conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


def test_end_to_end_with_the_real_local_model(dsn: str) -> None:
    """The real all-MiniLM-L6-v2 (the `local` provider, its ONNX export cached under the data
    directory): models add, embed, cutover, then dense search finds by meaning what shares no
    word with the query, and hybrid search answers too; only visible chunks."""
    with Groundkit.connect(dsn) as gk:
        gk.put_member("t0", "T0")
        gk.put_member("t2", "T2")
        gk.put_space("open", "T0")
        gk.put_space("members", "T2")
        for oid, space, title, body in [
            ("cats", "open", "Pets", "Cats are small domesticated felines that purr."),
            ("stocks", "open", "Markets", "The stock exchange fell sharply this afternoon."),
            ("bread", "open", "Baking", "Bake the loaf at 220 degrees until the crust is brown."),
            ("kitten-club", "members", "Members", "A club for people who adopt young cats."),
        ]:
            gk.put_object(oid, 1, "board_post", space, "T0", title, body)
    added = _run("models", "add", "minilm", "--provider", "local", "--dimension", "384", "--dsn", dsn)
    assert added.returncode == 0, added.stderr
    done = _run("embed", "--model", "minilm", "--json", "--dsn", dsn, timeout=900)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["chunks"] == 4
    assert _run("cutover", "--model", "minilm", *UNGATED, "--dsn", dsn).returncode == 0
    with Groundkit.connect(dsn) as gk:
        hits = gk.search("t0", "kitten", k=3, mode="dense")
        assert hits[0].object_id == "cats" and "kitten-club" not in {h.object_id for h in hits}
        assert gk.search("t2", "kitten", k=2, mode="dense", exact=True)[0].object_id in {"cats", "kitten-club"}
        assert gk.search("t0", "bake bread", k=1, mode="hybrid")[0].object_id == "bread"


def test_surfaces_take_a_mode(dense: Groundkit, dsn: str) -> None:
    """The HTTP API (a real server on loopback) and the LangChain and LlamaIndex retrievers
    search in dense or hybrid mode when asked, still only over what the reader may see; an
    unknown mode is a GK005 on HTTP."""
    import httpx
    from llama_index.core.schema import QueryBundle

    from groundkit import tokens
    from groundkit.integrations.langchain import GroundkitRetriever as LangchainRetriever
    from groundkit.integrations.llamaindex import GroundkitRetriever as LlamaRetriever
    from groundkit.serve.background import serving
    from groundkit.serve.http import create_app
    from groundkit.serve.service import ReadService

    token = tokens.create_token(dense, "t0")
    with serving(create_app(ReadService(dsn, pool_size=2, pool_timeout=5.0))) as url:
        for mode in ("dense", "hybrid"):
            r = httpx.post(f"{url}/v1/search", json={"query": "kiln firing", "k": 50, "mode": mode},
                           headers={"Authorization": f"Bearer {token}"}, timeout=60)
            assert r.status_code == 200, r.text
            hits = r.json()["hits"]
            assert hits and {h["space_id"] for h in hits} == {"open"}
            assert (hits[0]["dense_rank"] is not None) == (mode == "hybrid")
        r = httpx.post(f"{url}/v1/search", json={"query": "kiln", "mode": "semantic"},
                       headers={"Authorization": f"Bearer {token}"}, timeout=60)
        assert r.status_code == 400 and r.json()["code"] == "GK005"
    docs = LangchainRetriever(client=dense, reader_sub="t0", k=50, mode="dense").invoke("kiln firing")
    assert docs and {d.metadata["space_id"] for d in docs} == {"open"}
    nodes = LlamaRetriever(dense, "t2", k=50, mode="hybrid").retrieve(QueryBundle("kiln firing"))
    assert {n.node.metadata["space_id"] for n in nodes} == {"open", "members", "vault"}


def test_embed_builds_the_hnsw_index_once_due(dsn: str, fake: FakeEmbeddings) -> None:
    """`groundkit embed` builds the HNSW index of each of the model's buckets (concurrently) once
    hnsw_status says it is due; dense search then still answers the same. (The threshold is
    lowered in this test's own database, a replaceable function; 1,000 entries in production.)"""
    with Groundkit.connect(dsn) as gk:
        _world(gk)
        add_fake_model(gk, "fake", fake)
        model_swap.cutover(gk, "fake", force=True)
        gk.conn.execute("create or replace function groundkit._hnsw_min_entries() returns bigint"
                        " language sql immutable as $$ select 10::bigint $$")
    done = _run("embed", "--dsn", dsn)
    with Groundkit.connect(dsn) as gk:
        status = gk._fetch("select bucket, entries, index_valid, due from groundkit.hnsw_status('fake')", {})
        due = [s for s in status if s["entries"] >= 10]
        assert due and all(s["index_valid"] and not s["due"] for s in due), status
        assert all(not s["index_valid"] for s in status if s["entries"] < 10), status
        assert done.returncode == 0 and f"built {len(due)} HNSW index(es) of fake" in done.stderr, done.stderr
        exact = {h.object_id for h in gk.search("t2", "kiln firing", k=50, mode="dense", exact=True)}
        assert len(exact) == 36 and {h.object_id for h in gk.search("t2", "kiln firing", k=50, mode="dense")} == exact
    again = _run("embed", "--dsn", dsn)
    assert again.returncode == 0 and "HNSW index" not in again.stderr


def test_shadow_compare_on_sampled_queries(dense: Groundkit, dsn: str, fake: FakeEmbeddings) -> None:
    """--sampled N takes the latest distinct sampled queries (groundkit.search_samples); with no
    samples it says how to get some."""
    add_fake_model(dense, "fake2", fake, recipe="text")
    none = _run("shadow-compare", "--model", "fake2", "--sampled", "5", "--as", "t0", "--dsn", dsn)
    assert none.returncode == 1 and "set-sample-rate" in none.stderr
    dense.set_sample_rate(1.0)
    for q in ("kiln firing", "glaze iron", "kiln firing", "pricing"):
        dense.search("t0", q, mode="hybrid")
    model_swap.start_reindex(dense, "fake2")
    from groundkit.embedders import embedder_for

    fake2 = embedding.get_model(dense, "fake2")
    embedding.embed_pending(dense, fake2, embedder_for(fake2))
    done = _run("shadow-compare", "--model", "fake2", "--sampled", "5", "--as", "t0", "--mode", "hybrid",
                "--dsn", dsn)
    assert done.returncode == 0, done.stderr
    assert "3 quer(ies), hybrid, as t0: overlap@10 of fake and fake2" in done.stdout
