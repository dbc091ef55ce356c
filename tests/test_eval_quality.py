"""`groundkit eval quality` end to end on a tiny BEIR collection written by the test."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from typer.testing import CliRunner

from groundkit.cli import app
from groundkit.quality.dense import CachedEmbedder
from groundkit.quality.harness import run_quality
from groundkit.quality.reference import REFERENCE_ARMS, run_reference

DOCS = [
    ("d1", "Dovetail joints", "Hand-cut dovetails for drawer boxes in walnut."),
    ("d2", "Finishing oil", "Hardwax oil finishing schedule for oak tables."),
    ("d3", "Pricing commissions", "How to price a commission: materials, hours and margin."),
    ("d4", "Dust collection", "Cyclone separators and shop vacuums for a small garage."),
]
QUERIES = [("q1", "dovetail drawer"), ("q2", "price a commission"), ("q3", "oil finish for oak")]
QRELS = [("q1", "d1", 1), ("q2", "d3", 2), ("q3", "d2", 1)]


def _write_beir(root: Path, extra_queries: Sequence[tuple[str, str]] = (),
                extra_qrels: Sequence[tuple[str, str, int]] = ()) -> Path:
    root.mkdir()
    (root / "qrels").mkdir()
    (root / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": i, "title": t, "text": x}) + "\r\n" for i, t, x in DOCS), encoding="utf-8"
    )
    (root / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": q, "text": t}) + "\r\n" for q, t in [*QUERIES, *extra_queries]), encoding="utf-8"
    )
    (root / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\r\n" + "".join(f"{q}\t{d}\t{s}\r\n" for q, d, s in [*QRELS, *extra_qrels]),
        encoding="utf-8"
    )
    return root


def test_groundkit_and_baselines_in_one_run(server_dsn: str, tmp_path: Path) -> None:
    dataset = _write_beir(tmp_path / "tiny")
    rows = run_quality(dataset, server_dsn, arms=("bm25", "ts_rank_cd", "fts5"))
    by_arm = {row.arm: row for row in rows}
    assert list(by_arm) == ["bm25", "ts_rank_cd", "fts5"]
    assert by_arm["bm25"].ndcg_10 == 1.0 and by_arm["bm25"].mrr_10 == 1.0
    assert by_arm["bm25"].queries == 3
    for row in rows:
        assert set(row.as_json()) == {"kind", "dataset", "view", "scope", "arm", "ndcg@10", "recall@10",
                                      "recall@100", "mrr@10", "queries", "refused", "refusals", "ms_per_query",
                                      "bm25_k1_b"}
        assert (row.view, row.scope, row.refused, row.bm25_k1_b) == ("documents", "all", 0, None)


def test_cli_json_output(server_dsn: str, tmp_path: Path) -> None:
    dataset = _write_beir(tmp_path / "tiny")
    result = CliRunner().invoke(app, ["eval", "quality", "--dataset", str(dataset), "--arm", "bm25",
                                      "--json", "--dsn", server_dsn])
    assert result.exit_code == 0, result.output
    line = json.loads(result.stdout.strip())
    assert line["arm"] == "bm25" and line["recall@10"] == 1.0
    bad = CliRunner().invoke(app, ["eval", "quality", "--dataset", str(dataset), "--arm", "lucene",
                                   "--dsn", server_dsn])
    assert bad.exit_code == 1 and "unknown arm 'lucene'" in bad.output


def test_reference_check_compares_known_numbers(tmp_path: Path) -> None:
    """--reference runs the reference engines only (no database) and judges them where numbers are known."""
    unknown = _write_beir(tmp_path / "tiny")
    result = CliRunner().invoke(app, ["eval", "quality", "--dataset", str(unknown), "--reference", "--json"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["arm"] for r in rows] == list(REFERENCE_ARMS)
    assert all(r["within"] is None and r["known_ndcg@10"] is None for r in rows)

    # Named as a collection with known numbers, the tiny one is far off them: the check fails.
    known = _write_beir(tmp_path / "beir-scifact")
    result = CliRunner().invoke(app, ["eval", "quality", "--dataset", str(known), "--reference", "--json"])
    assert result.exit_code == 1
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert {r["arm"]: r["within"] for r in rows} == {
        "bm25s k1 0.9 b 0.4": False, "bm25s k1 1.2 b 0.75": False, "tantivy": False, "fts5": None}
    assert "off their known numbers" in result.stderr

    loose = run_reference(known, tolerance=1.0)
    assert [r.within for r in loose] == [True, True, True, None]

    both = CliRunner().invoke(app, ["eval", "quality", "--dataset", str(known), "--reference", "--arm", "fts5"])
    assert both.exit_code == 1 and "takes no --arm" in both.output


def test_dense_and_hybrid_arms_through_groundkit_search(server_dsn: str, tmp_path: Path) -> None:
    """The dense and hybrid arms run groundkit.search with the real local model as the active
    model; the documents' vectors land in the cache, and a second run embeds nothing."""
    dataset = _write_beir(tmp_path / "tiny")
    cache = tmp_path / "cache"
    rows = run_quality(dataset, server_dsn, arms=("bm25", "dense", "hybrid"), embedding_cache=cache)
    by_arm = {row.arm: row for row in rows}
    assert list(by_arm) == ["bm25", "dense", "hybrid"]
    # each query's judged document is the obvious one: every arm ranks it first
    assert all(row.ndcg_10 == 1.0 and row.queries == 3 and row.ms_per_query > 0 for row in rows)
    (stored,) = cache.glob("minilm-*.npz")
    before = stored.stat().st_mtime_ns
    again = run_quality(dataset, server_dsn, arms=("dense",), embedding_cache=cache)
    assert again[0].ndcg_10 == 1.0
    assert stored.stat().st_mtime_ns == before  # nothing new to write: every vector came from the cache


class _Counting:
    """An embedder that counts what it is asked (a test double for the cache, not a provider)."""

    def __init__(self) -> None:
        from groundkit.embedders import EmbeddingModel

        self.model = EmbeddingModel(name="toy", provider="local", dimension=2, distance="cosine", recipe="titled")
        self.asked: list[str] = []

    def embed_documents(self, texts: Sequence[str], *, hashes: Sequence[bytes] | None = None) -> list[list[float]]:
        self.asked.extend(texts)
        return [[float(len(t)), 1.0] for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return [0.0, 1.0]


def test_embedding_cache_is_keyed_by_text_and_model(tmp_path: Path) -> None:
    inner = _Counting()
    cached = CachedEmbedder(inner, tmp_path)
    assert cached.embed_documents(["ab", "abc", "ab"]) == [[2.0, 1.0], [3.0, 1.0], [2.0, 1.0]]
    assert inner.asked == ["ab", "abc"]
    cached.save()
    second = _Counting()
    assert CachedEmbedder(second, tmp_path).embed_documents(["abc", "abcd"]) == [[3.0, 1.0], [4.0, 1.0]]
    assert second.asked == ["abcd"]
    other = _Counting()
    other.model = other.model.model_copy(update={"options": {"max_length": 128}})
    CachedEmbedder(other, tmp_path).embed_documents(["ab"])
    assert other.asked == ["ab"]  # another model definition: another cache


def test_unknown_arm_is_a_typed_error(server_dsn: str, tmp_path: Path) -> None:
    dataset = _write_beir(tmp_path / "tiny")
    bad = CliRunner().invoke(app, ["eval", "quality", "--dataset", str(dataset), "--arm", "hybrid", "--arm",
                                   "splade", "--json", "--dsn", server_dsn])
    assert bad.exit_code == 1
    assert "GK005" in bad.output and "unknown arm 'splade'" in bad.output and "hybrid" in bad.output
