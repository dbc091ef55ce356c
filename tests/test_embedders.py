"""The embedding seam and the local provider (groundkit/embedders, docs/embeddings.md).

The local model runs for real: its ONNX export is made once per test session, at first use,
in a temporary data directory (the path a fresh machine takes), and checked against PyTorch.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import ValidationError

from groundkit import Groundkit, InvalidArgument
from groundkit.embedders import Embedder, EmbeddingModel, embedder_for
from groundkit.embedders.export import INSTALL_EXPORT, cached_path, ensure_export
from groundkit.errors import EmbeddingProviderError

TEXTS = [
    "The cat sat on the mat and purred.",
    "Insulin regulates glucose uptake in skeletal muscle cells. " * 40,  # past 256 tokens: truncated
    "Stock markets fell sharply after the central bank raised interest rates.",
    "Mitochondria produce most of the cell's ATP through oxidative phosphorylation.",
]


def minilm(**options: object) -> EmbeddingModel:
    return EmbeddingModel(name="all-minilm-l6-v2", provider="local", dimension=384, distance="cosine",
                          recipe="title+text", options=dict(options))


@pytest.fixture
def home(embed_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The session's data directory for the model, so its export is made there, once, at first use."""
    monkeypatch.setenv("GROUNDKIT_HOME", str(embed_home))
    return embed_home


@pytest.fixture
def local(home: Path) -> Embedder:
    return embedder_for(minilm())


def test_the_export_is_made_at_first_use_and_cached_atomically(home: Path, local: Embedder) -> None:
    path = cached_path()
    assert path.parent == home / "models" and path.is_file()
    assert "0.1.0" in path.name and path.name.endswith(".onnx")  # the weights package's version, then the key
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left behind
    before = path.stat().st_mtime_ns
    assert ensure_export() == path and path.stat().st_mtime_ns == before  # reused, not made again


def test_the_cache_key_follows_the_weights_version_and_the_export_settings(
        home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from groundkit.embedders import export

    before = cached_path()
    with monkeypatch.context() as mp:
        mp.setitem(export.EXPORT_SETTINGS, "opset", 18)
        assert cached_path() != before
    assert cached_path() == before
    monkeypatch.setattr(export, "weights_version", lambda: "9.9.9")
    assert cached_path() != before and "-9.9.9-" in cached_path().name
    assert cached_path(quantized=False) != cached_path()


def test_local_vectors_match_pytorch(local: Embedder) -> None:
    """int8 ONNX against sentence-transformers' fp32 on the same weights: the same vectors up to quantization."""
    from sentence_transformers import SentenceTransformer

    from groundkit.embedders.export import weights_dir

    reference = SentenceTransformer(str(weights_dir()), device="cpu")
    reference.max_seq_length = 256
    expected = reference.encode(TEXTS, normalize_embeddings=True)
    got = np.array(local.embed_documents(TEXTS))
    assert got.shape == (4, 384)
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    cosines = (got * expected).sum(axis=1)
    assert cosines.min() > 0.97, cosines


def test_sorted_batches_give_each_text_its_own_vector(home: Path, local: Embedder) -> None:
    batched = embedder_for(minilm(batch_size=3, streams=1))  # sorted by length: the long text leads a batch
    together = np.array(batched.embed_documents(TEXTS))
    for i, text in enumerate(TEXTS):
        assert float(np.array(local.embed_query(text)) @ together[i]) > 0.99  # int8 scales differ a little
    query = np.array(local.embed_query("How do cells make energy?"))
    assert int(np.argmax(together @ query)) == 3


def test_by_default_a_vector_does_not_depend_on_its_neighbours(local: Embedder) -> None:
    """Batch 1 (the default), run on several streams: the same text, the same vector, whatever else is embedded."""
    first = local.embed_documents([TEXTS[0], TEXTS[1], TEXTS[2]])
    second = local.embed_documents([TEXTS[3], TEXTS[2], TEXTS[0]])
    assert first[0] == second[2] and first[2] == second[1]
    assert local.embed_query(TEXTS[0]) == first[0]


def test_the_declared_dimension_is_checked(home: Path) -> None:
    wrong = EmbeddingModel(name="m", provider="local", dimension=768, distance="cosine", recipe="r")
    with pytest.raises(EmbeddingProviderError, match="dimension 384; the model declares 768") as info:
        embedder_for(wrong).embed_documents(["a text"])
    assert info.value.sqlstate == "GK017"


def test_only_the_three_providers_can_be_configured() -> None:
    for name in ("hash", "fake", "test"):
        with pytest.raises(ValidationError):
            EmbeddingModel(name="m", provider=name, dimension=8, distance="cosine", recipe="r")  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        EmbeddingModel(name="m", provider="local", dimension=8, distance="cosine", recipe="r", extra=1)  # type: ignore[call-arg]


def test_bad_local_options_are_gk017(home: Path) -> None:
    with pytest.raises(EmbeddingProviderError, match="max_length"):
        embedder_for(minilm(max_length=4096))
    with pytest.raises(EmbeddingProviderError, match="url"):
        embedder_for(EmbeddingModel(name="m", provider="ollama", dimension=8, distance="cosine", recipe="r"))


def test_without_export_tools_or_cache_the_error_names_the_install_command(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GROUNDKIT_HOME", str(tmp_path))
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    with pytest.raises(EmbeddingProviderError) as info:
        embedder_for(minilm())
    assert INSTALL_EXPORT in info.value.message and "torch is not installed" in info.value.message
    assert not (tmp_path / "models").exists() or not any((tmp_path / "models").iterdir())


def test_metering_needs_a_flow(gk: Groundkit, home: Path) -> None:
    with pytest.raises(InvalidArgument, match="flow"):
        embedder_for(minilm(), meter_to=gk)


def test_each_call_is_metered_with_its_tokens_and_cost(gk: Groundkit, home: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    prices = tmp_path / "prices.toml"
    prices.write_text('[models."all-minilm-l6-v2"]\ninput_per_1k = 0.5\noutput_per_1k = 0\ncurrency = "EUR"\n')
    monkeypatch.setenv("GROUNDKIT_PRICES", str(prices))
    embedder = embedder_for(minilm(), meter_to=gk, flow="tutor")
    embedder.embed_documents(TEXTS)
    embedder.embed_query("cells")
    rows = gk.conn.execute("select flow, model, kind, tokens_in, tokens_out, cost, currency"
                           " from groundkit.calls order by call_id").fetchall()
    assert [(r["flow"], r["model"], r["kind"], r["tokens_out"], r["currency"]) for r in rows] == [
        ("tutor", "all-minilm-l6-v2", "embedding", 0, "EUR")] * 2
    documents, query = rows[0]["tokens_in"], rows[1]["tokens_in"]
    assert 256 + 3 * 10 < documents <= 4 * 256  # the long text counts its 256 tokens, not more
    assert query == 3  # [CLS] cells [SEP]
    assert math.isclose(float(rows[0]["cost"]), documents * 0.5 / 1000)


def test_each_call_opens_an_embed_span(local_spans: InMemorySpanExporter, home: Path, local: Embedder) -> None:
    local.embed_documents(TEXTS[:2])
    (span,) = named(local_spans, "groundkit.embed")
    attrs = dict(span.attributes or {})
    assert attrs["groundkit.model"] == "all-minilm-l6-v2" and attrs["groundkit.provider"] == "local"
    assert attrs["groundkit.texts"] == 2 and int(str(attrs["groundkit.tokens"])) > 256


def test_a_failed_call_is_recorded_on_its_span(local_spans: InMemorySpanExporter, home: Path) -> None:
    wrong = EmbeddingModel(name="m", provider="local", dimension=10, distance="cosine", recipe="r")
    with pytest.raises(EmbeddingProviderError):
        embedder_for(wrong).embed_query("x")
    (span,) = named(local_spans, "groundkit.embed")
    assert not span.status.is_ok


def named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]
