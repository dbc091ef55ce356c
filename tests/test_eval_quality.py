"""`groundkit eval quality` end to end on a tiny BEIR collection written by the test."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from groundkit.cli import app
from groundkit.quality.harness import run_quality

DOCS = [
    ("d1", "Dovetail joints", "Hand-cut dovetails for drawer boxes in walnut."),
    ("d2", "Finishing oil", "Hardwax oil finishing schedule for oak tables."),
    ("d3", "Pricing commissions", "How to price a commission: materials, hours and margin."),
    ("d4", "Dust collection", "Cyclone separators and shop vacuums for a small garage."),
]
QUERIES = [("q1", "dovetail drawer"), ("q2", "price a commission"), ("q3", "oil finish for oak")]
QRELS = [("q1", "d1", 1), ("q2", "d3", 2), ("q3", "d2", 1)]


def _write_beir(root: Path) -> Path:
    root.mkdir()
    (root / "qrels").mkdir()
    (root / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": i, "title": t, "text": x}) + "\r\n" for i, t, x in DOCS), encoding="utf-8"
    )
    (root / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": q, "text": t}) + "\r\n" for q, t in QUERIES), encoding="utf-8"
    )
    (root / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\r\n" + "".join(f"{q}\t{d}\t{s}\r\n" for q, d, s in QRELS), encoding="utf-8"
    )
    return root


def test_groundkit_and_baselines_in_one_run(server_dsn: str, tmp_path: Path) -> None:
    dataset = _write_beir(tmp_path / "tiny")
    rows = run_quality(dataset, server_dsn, arms=("groundkit", "ts_rank_cd", "fts5"))
    by_arm = {row.arm: row for row in rows}
    assert list(by_arm) == ["groundkit", "ts_rank_cd", "fts5"]
    assert by_arm["groundkit"].ndcg_10 == 1.0 and by_arm["groundkit"].mrr_10 == 1.0
    assert by_arm["groundkit"].queries == 3
    for row in rows:
        assert set(row.as_json()) == {"dataset", "arm", "ndcg@10", "recall@10", "recall@100", "mrr@10", "queries",
                                      "ms_per_query"}


def test_cli_json_output(server_dsn: str, tmp_path: Path) -> None:
    dataset = _write_beir(tmp_path / "tiny")
    result = CliRunner().invoke(app, ["eval", "quality", "--dataset", str(dataset), "--arm", "groundkit",
                                      "--json", "--dsn", server_dsn])
    assert result.exit_code == 0, result.output
    line = json.loads(result.stdout.strip())
    assert line["arm"] == "groundkit" and line["recall@10"] == 1.0
    bad = CliRunner().invoke(app, ["eval", "quality", "--dataset", str(dataset), "--arm", "lucene",
                                   "--dsn", server_dsn])
    assert bad.exit_code == 1 and "unknown arm 'lucene'" in bad.output
