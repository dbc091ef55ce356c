"""The labelling flow: `groundkit eval export-samples`, then `groundkit eval quality --labels`, through
the CLI against a real database."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from groundkit import Groundkit
from groundkit.cli import app
from groundkit.quality.samples import parse_since

runner = CliRunner()


@pytest.fixture
def sampled(community: Groundkit) -> Groundkit:
    """Three searches sampled: by t1 (rank 1) and t2 (rank 2), then edits after the sampling."""
    gk = community
    gk.put_object("a", 1, "board_post", "open", "T0", "Pricing", "How to price a commission for a client")
    gk.put_object("b", 1, "document", "members", "T1", "Pricing guide", "Pricing by the hour for members")
    gk.put_object("c", 1, "document", "vault", "T2", "Vault", "private pricing notes for the vault")
    gk.put_object("d", 1, "document", "open", "T0", "Old pricing", "pricing table from last year")
    gk.set_sample_rate(1)
    gk.search("t1", "pricing")
    gk.search("t2", "pricing")
    gk.set_sample_rate(0)
    return gk


def _export(dsn: str, tmp_path: Path) -> list[dict[str, Any]]:
    out = tmp_path / "samples.jsonl"
    result = runner.invoke(app, ["eval", "export-samples", "--since", "30d", "--out", str(out), "--dsn", dsn])
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_export_writes_candidates_with_text_at_the_sampled_version(sampled: Groundkit, dsn: str,
                                                                   tmp_path: Path) -> None:
    gk = sampled
    gk.put_object("d", 2, "document", "open", "T0", "Old pricing", "rewritten: nothing about that now")
    lines = _export(dsn, tmp_path)
    assert [(line["query"], line["tier_rank"]) for line in lines] == [("pricing", 1), ("pricing", 2)]
    t2 = {c["object_id"]: c for c in lines[1]["candidates"]}
    assert set(t2) == {"a", "b", "c", "d"}
    assert t2["d"]["object_version"] == 1
    assert t2["d"]["content"] == "pricing table from last year"  # the log at version 1, not the chunk now
    assert t2["a"]["content"] == "How to price a commission for a client"  # a board post: its own text
    assert all(c["relevance"] is None for c in t2.values())
    assert "t2" not in json.dumps(lines[1])  # the reader is nowhere in the file
    assert [c["position"] for c in lines[1]["candidates"]] == [1, 2, 3, 4]


def test_export_of_a_redacted_candidate_has_no_text(sampled: Groundkit, dsn: str, tmp_path: Path) -> None:
    sampled.redact_object("c", 2)
    (line,) = [x for x in _export(dsn, tmp_path) if x["tier_rank"] == 2]
    (c,) = [c for c in line["candidates"] if c["object_id"] == "c"]
    assert c["content"] is None and c["redacted"] is True


def test_export_counts_engagement(sampled: Groundkit, dsn: str, tmp_path: Path) -> None:
    sid = sampled._scalar("select sample_id from groundkit.search_samples where tier_rank = 1", {})
    sampled.record_sample_engagement(sid, "a", "click")
    sampled.record_sample_engagement(sid, "a", "dwell_ms", 900)
    (line,) = [x for x in _export(dsn, tmp_path) if x["tier_rank"] == 1]
    (a,) = [c for c in line["candidates"] if c["object_id"] == "a"]
    assert (a["clicks"], a["dwell_ms"]) == (1, 900)


def test_export_since_leaves_out_older_samples(sampled: Groundkit, dsn: str, tmp_path: Path) -> None:
    sampled.conn.execute("update groundkit.search_samples set sampled_at = now() - interval '40 days'"
                         " where tier_rank = 1")
    assert [x["tier_rank"] for x in _export(dsn, tmp_path)] == [2]


def test_bad_since_is_an_error(dsn: str, tmp_path: Path) -> None:
    result = runner.invoke(app, ["eval", "export-samples", "--since", "soon", "--out", str(tmp_path / "x"),
                                 "--dsn", dsn])
    assert result.exit_code == 1
    assert parse_since("2w").days == 14


def _label(lines: list[dict[str, Any]], grades: dict[str, int], path: Path) -> Path:
    for line in lines:
        for c in line["candidates"]:
            c["relevance"] = grades.get(c["object_id"], 0)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def _quality(dsn: str, labels: Path, *extra: str) -> tuple[int, list[dict[str, Any]]]:
    result = runner.invoke(app, ["eval", "quality", "--labels", str(labels), "--json", "--dsn", dsn, *extra])
    rows = [json.loads(x) for x in result.stdout.splitlines() if x.startswith("{")]
    return result.exit_code, rows


def test_quality_scores_per_tier_rank(sampled: Groundkit, dsn: str, tmp_path: Path) -> None:
    labels = _label(_export(dsn, tmp_path), {"a": 2, "b": 1}, tmp_path / "labels.jsonl")
    code, rows = _quality(dsn, labels)
    assert code == 0
    ranks = {r["tier_rank"]: r for r in rows if r["kind"] == "rank"}
    assert set(ranks) == {1, 2}
    assert all(r["reader"] == "synthetic" and r["queries"] == 1 for r in ranks.values())
    assert all(r["recall_10"] == 1.0 for r in ranks.values())  # both relevant objects found
    assert 0 < ranks[1]["ndcg_10"] <= 1
    # the synthetic readers were rolled back, and no sample was drawn
    assert sampled._scalar("select count(*) from groundkit.members where member_sub like 'groundkit-eval:%%'",
                           {}) == 0


def test_quality_leak_check_reports_a_labelled_candidate_no_longer_visible(sampled: Groundkit, dsn: str,
                                                                           tmp_path: Path) -> None:
    lines = _export(dsn, tmp_path)
    labels = _label(lines, {"a": 1, "b": 2}, tmp_path / "labels.jsonl")
    sampled.retier_object("b", 2, "T3")  # rank 1 and 2 readers no longer see it
    code, rows = _quality(dsn, labels)
    assert code == 0
    hidden = [r for r in rows if r["kind"] == "not_visible"]
    # (c, graded 0, is in the vault: the synthetic rank-2 member has no grant, so it is reported too)
    assert {(r["tier_rank"], r["object_id"], r["returned"]) for r in hidden} == {
        (1, "b", False), (2, "b", False), (2, "c", False)}
    ranks = {r["tier_rank"]: r for r in rows if r["kind"] == "rank"}
    # b is not counted as relevant: a alone is, and search finds it
    assert ranks[1]["recall_10"] == 1.0


def test_quality_private_space_candidate_needs_a_configured_reader(sampled: Groundkit, dsn: str,
                                                                   tmp_path: Path) -> None:
    labels = _label(_export(dsn, tmp_path), {"c": 2}, tmp_path / "labels.jsonl")
    # the synthetic rank-2 member has no grant on the vault: c is reported, the line not scored
    code, rows = _quality(dsn, labels)
    assert code == 0
    assert {(r["tier_rank"], r["object_id"]) for r in rows if r["kind"] == "not_visible"} == {(2, "c")}
    (rank2,) = [r for r in rows if r["kind"] == "rank" and r["tier_rank"] == 2]
    assert rank2["queries"] == 0
    # t2 holds the grant
    code, rows = _quality(dsn, labels, "--reader", "2=t2")
    ranks = {r["tier_rank"]: r for r in rows if r["kind"] == "rank"}
    assert ranks[2]["reader"] == "t2" and ranks[2]["recall_10"] == 1.0


def test_quality_labels_with_a_bad_grade_is_an_error(sampled: Groundkit, dsn: str, tmp_path: Path) -> None:
    lines = _export(dsn, tmp_path)
    lines[0]["candidates"][0]["relevance"] = "very"
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(lines[0]) + "\n")
    result = runner.invoke(app, ["eval", "quality", "--labels", str(path), "--dsn", dsn])
    assert result.exit_code == 1
    assert "bad.jsonl:1" in result.output


def test_export_text_is_what_search_returned_for_every_content_type(community: Groundkit, dsn: str,
                                                                    tmp_path: Path) -> None:
    gk = community
    long_body = "\n\n".join(f"## Part {i}\n\nKiln firing notes, part {i}: " + "cone six glaze kiln " * 40
                            for i in range(4))
    gk.put_object("md", 1, "course_section", "open", "T0", "Kilns", "# Kilns\n\n" + long_body)
    gk.put_object("tr", 1, "transcript", "open", "T0", "Kiln talk", "",
                  segments=[{"text": f"  kiln segment {i} about firing  ", "start_ms": i * 1000,
                             "end_ms": i * 1000 + 900} for i in range(60)])
    gk.put_object("bp", 1, "board_post", "open", "T0", "Kiln question", "Which kiln for a small studio?")
    gk.set_sample_rate(1)
    hits = gk.search("t1", "kiln", k=50)
    assert {h.content_type for h in hits} == {"course_section", "transcript", "board_post"}
    (line,) = _export(dsn, tmp_path)
    assert [(c["object_id"], c["chunk_seq"], c["content"]) for c in line["candidates"]] == [
        (h.object_id, h.chunk_seq, h.content) for h in hits]
