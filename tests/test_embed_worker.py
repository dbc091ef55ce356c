"""`groundkit worker` runs the embedding job: new content gets embedded, a provider outage is
reported and backed off from without stopping the worker (docs/embedding-worker.md). Real
processes, real pgvector, the `openai` provider against the loopback test double."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from groundkit import Groundkit, embedding, model_swap
from groundkit.embedding import EmbedPass
from groundkit.errors import EmbeddingProviderError
from tests.dense_fakes import add_fake_model, fake_openai_server

WORKER = [sys.executable, "-c", "from groundkit.cli import app; app()", "worker"]


def _until(what: str, test: Callable[[], Any], proc: subprocess.Popen[str] | None = None,
           timeout: float = 90.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := test()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        assert proc is None or proc.poll() is None, f"the worker exited while waiting for {what}"
        time.sleep(0.05)
    return value


def _heartbeat(gk: Groundkit) -> dict[str, Any] | None:
    return gk.conn.execute("select * from groundkit.worker_heartbeat order by beat_at desc limit 1").fetchone()


def test_worker_embeds_new_content_and_survives_a_provider_outage(dsn: str) -> None:
    """The worker embeds what the active model lacks each pass; while the provider is down it
    records the error in its heartbeat, keeps passing (maintenance goes on), and once the
    provider is back embeds what was written meanwhile."""
    with fake_openai_server() as fake, Groundkit.connect(dsn) as gk:
        gk.put_space("open")
        gk.put_member("ana", "T0")
        add_fake_model(gk, "fake", fake)
        model_swap.cutover(gk, "fake")
        proc = subprocess.Popen([*WORKER, "--every", "0.2", "--json", "--dsn", dsn],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            gk.put_object("p1", 1, "board_post", "open", "T0", "Kilns", "firing a kiln slowly")
            _until("the first embedding", lambda: embedding.lag(gk, "fake")[0].missing == 0, proc)
            assert [h.object_id for h in gk.search("ana", "kiln firing", mode="dense")] == ["p1"]
            fake.down = True
            gk.put_object("p2", 1, "board_post", "open", "T0", "Glazes", "iron glaze on stoneware")
            row = _until("the outage in the heartbeat",
                         lambda: (r := _heartbeat(gk)) and r["last_error"] and "embedding" in r["last_error"] and r,
                         proc)
            assert row["stopped_at"] is None and row["last_run_at"] is not None
            status = subprocess.run([*WORKER[:-1], "status", "--dsn", dsn], capture_output=True, text=True,
                                    timeout=60)
            assert "last error: embedding:" in status.stdout and "fake (active): 1 chunk(s)" in status.stdout
            fake.down = False
            _until("the embedding after the outage", lambda: embedding.lag(gk, "fake")[0].missing == 0, proc,
                   timeout=120)
            _until("a clean pass", lambda: (r := _heartbeat(gk)) is not None and r["last_error"] is None, proc)
            assert {h.object_id for h in gk.search("ana", "iron glaze", mode="dense", k=2)} == {"p1", "p2"}
        finally:
            proc.send_signal(signal.SIGTERM)
            stdout, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 0, stderr
        passes = [json.loads(line) for line in stdout.splitlines()]
        failed = [p for p in passes if p["error"]]
        assert failed and all(p["report"] is not None for p in failed)  # maintenance went on
        embedded = [s for p in passes if p["report"] for s in p["report"]["steps"] if s["name"] == "embed"]
        assert sum(s["count"] for s in embedded) == 2 and {s["reason"] for s in embedded} == {"fake"}


def test_embed_pass_backs_off_after_a_failure(dsn: str) -> None:
    """After a provider failure the pass skips embedding for a while (doubling), then tries again."""
    with fake_openai_server() as fake, Groundkit.connect(dsn) as gk:
        gk.put_space("open")
        gk.put_object("p1", 1, "board_post", "open", "T0", "Kilns", "firing a kiln slowly")
        add_fake_model(gk, "fake", fake)
        model_swap.cutover(gk, "fake", force=True)
        job = EmbedPass(every=0.5)
        fake.down = True
        steps, error = job.run(gk)
        assert isinstance(error, EmbeddingProviderError) and steps == [] and job.failing is error
        asked = fake.requests
        assert job.run(gk) == ([], None) and fake.requests == asked  # backing off: not asked
        fake.down = False
        job.resume_at = 0.0
        steps, error = job.run(gk)
        assert error is None and [(s.name, s.reason, s.count) for s in steps][:1] == [("embed", "fake", 1)]
        assert job.failures == 0 and job.failing is None


def test_worker_without_a_model_or_with_no_embed_does_nothing_dense(dsn: str) -> None:
    """No model: the worker's pass has no embedding step and no error."""
    done = subprocess.run([*WORKER, "--once", "--json", "--dsn", dsn], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    assert body["error"] is None and not [s for s in body["report"]["steps"] if s["name"] in ("embed", "hnsw")]
