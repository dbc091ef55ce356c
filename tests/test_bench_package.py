"""The benchmark package's subcommands run end to end on a tiny corpus (python -m evals.bench).

Performance figures come from the benchmark itself (docs/performance.md); these tests check that
each subcommand runs against a real server, prints its table and that the paired comparisons find
the same answers on both sides.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from evals.bench.__main__ import main
from evals.bench.common import drop_db

CHUNKS = "300"


@pytest.fixture(scope="module")
def kept_build(server_dsn: str) -> Iterator[tuple[str, str]]:
    """gk_bench_300, built by `search --keep` (the database ab and profile work on), and what that
    run printed. Built here, not by the first test that needs it, so that each of these tests can
    run alone, in any order, or on a worker of its own (pytest -n)."""
    name = "gk_bench_" + CHUNKS
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            code = main(["search", "--dsn", server_dsn, "--chunks", CHUNKS, "--queries", "12", "--slow-queries", "4",
                         "--passes", "1", "--turns", "1", "--single-chunks", "80", "--writers", "1",
                         "--writer-seconds", "0.3", "--keep"])
        assert code == 0, printed.getvalue()
        yield name, printed.getvalue()
    finally:
        drop_db(server_dsn, name)


@pytest.fixture
def kept(kept_build: tuple[str, str]) -> str:
    return kept_build[0]


def _differing(out: str) -> list[int]:
    """The 'queries with different scores' column of every paired table row."""
    return [int(m) for m in re.findall(r"x \| [0-9.]+x \| (\d+) \|", out)]


def test_search_builds_and_keeps_its_database(server_dsn: str, kept_build: tuple[str, str]) -> None:
    kept, out = kept_build
    assert f"### {int(CHUNKS):,} chunks" in out
    for reader in ("r100", "r50", "r5"):
        assert f"| {reader} (" in out
    assert "groundkit.search and tantivy in turns" in out
    assert "concurrent put_object writers: 1 -> " in out
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        assert conn.execute("select 1 from pg_database where datname = %s", (kept,)).fetchone() is not None


def test_ab_of_two_revisions_agrees(server_dsn: str, kept: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ab", "--dsn", server_dsn, "--chunks", CHUNKS, "--queries", "12", "--repeat", "1",
                 "--revisions", "worktree", "worktree", "--writes", "1"]) == 0
    out = capsys.readouterr().out
    assert _differing(out) == [0, 0, 0], out
    assert "merges" in out and "chunks/s" in out
    with psycopg.connect(server_dsn, autocommit=True) as conn:  # the copies are gone
        left = conn.execute("select count(*) from pg_database where datname like"
            " 'groundkit_scratch_bench_bh_ab_%'").fetchone()
    assert left == (0,)


def test_ab_of_two_databases(server_dsn: str, kept: str, capsys: pytest.CaptureFixture[str]) -> None:
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("create database gk_bh_other template {}").format(sql.Identifier(kept)))
    try:
        assert main(["ab", "--dsn", server_dsn, "--chunks", CHUNKS, "--queries", "8", "--repeat", "1",
                     "--databases", kept, "gk_bh_other"]) == 0
    finally:
        drop_db(server_dsn, "gk_bh_other")
    assert _differing(capsys.readouterr().out) == [0, 0, 0]


def test_profile_search_and_write(server_dsn: str, kept: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "search", "--dsn", server_dsn, "--chunks", CHUNKS, "--queries", "12"]) == 0
    out = capsys.readouterr().out
    assert "| statement (first words) | calls | ms | share of the searches |" in out
    assert main(["profile", "write", "--dsn", server_dsn, "--chunks", CHUNKS, "--single", "4", "--commit",
                 "--min-ms", "0"]) == 0
    out = capsys.readouterr().out
    assert "synchronous_commit on" in out
    assert "groundkit.put_object(" in out


def test_ingest_fresh_and_loaded(server_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ingest", "--dsn", server_dsn, "--fresh", "60", "--chunks", "200", "--single-chunks", "60",
                 "--writers", "1", "2", "--writer-seconds", "0.3"]) == 0
    out = capsys.readouterr().out
    assert "fresh database, 60 documents" in out
    assert "documents/s by tenth of the load: " in out
    assert "concurrent put_object writers: 1 -> " in out and "2 -> " in out


def test_unmaintained_agrees_with_maintained(server_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["unmaintained", "--dsn", server_dsn, "--documents", "300", "--queries", "10",
                 "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert "un-maintained p50 / p95 / mean ms" in out
    assert _differing(out) == [0, 0, 0], out


def test_ingest_dir_times_the_loaders_and_the_ingest(server_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ingest-dir", "--dsn", server_dsn, "--markdown", "40", "--pdfs", "3"]) == 0
    out = capsys.readouterr().out
    assert "markdown: 40 files" in out and "pdf: 3 files" in out
    assert len(re.findall(r"loaders' share of ingest --jobs 1: [0-9.]+", out)) == 2
    with psycopg.connect(server_dsn, autocommit=True) as conn:  # the scratch databases are gone
        left = conn.execute("select count(*) from pg_database where datname like 'gk_ingestdir_%'").fetchone()
    assert left == (0,)


def test_snippets_compares_search_with_and_without(server_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["snippets", "--dsn", server_dsn, "--chunks", CHUNKS, "--queries", "12", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert "| snippets p50 / p95 / mean ms | no snippets p50 / p95 / mean ms |" in out
    assert _differing(out) == [0, 0, 0], out
    with psycopg.connect(server_dsn, autocommit=True) as conn:  # its database is gone
        left = conn.execute("select count(*) from pg_database where datname like"
            " 'groundkit_scratch_bench_bh_snip_%'").fetchone()
    assert left == (0,)


def test_http_load_runs_and_checks_every_answer(server_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["http", "--dsn", server_dsn, "--chunks", CHUNKS, "--queries", "10", "--clients", "4",
                 "--seconds", "1", "--pairs", "6"]) == 0
    out = capsys.readouterr().out
    row = re.search(r"\| 4 \| [0-9.]+ \| ([0-9,]+) \| [0-9,]+ \|.*\| ([0-9,]+) \| (\d+) \| (\d+) \|", out)
    assert row is not None, out
    assert int(row[1].replace(",", "")) > 0 and int(row[2].replace(",", "")) > 0
    assert (row[3], row[4]) == ("0", "0")


def test_http_load_counts_a_hit_outside_the_visible_set_as_a_leak() -> None:
    from evals.bench.http import Tally

    tally = Tally()
    visible = {"r5": {"obj-1": 1}}
    tally.judge("r5", 200, {"hits": [{"object_id": "obj-1", "object_version": 1}]}, visible)
    assert not tally.leaks
    tally.judge("r5", 200, {"hits": [{"object_id": "obj-2", "object_version": 1}]}, visible)
    tally.judge("r5", 200, {"hits": [{"object_id": "obj-1", "object_version": 2}]}, visible)
    tally.judge("r5", 503, {"code": "unavailable"}, visible)
    assert len(tally.leaks) == 2 and len(tally.errors) == 1


def test_costs_runs_every_grouping_and_drops_its_database(server_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["costs", "--dsn", server_dsn, "--calls", "3000", "--days", "30", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    for by in ("flow", "model", "reader", "day"):
        assert re.search(rf"\| {by} \| 7d \| \d+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+x \|", out), out
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        left = conn.execute("select count(*) from pg_database where datname like"
            " 'groundkit_scratch_bench_bh_costs_%'").fetchone()
    assert left == (0,)


def test_runs_times_a_run_around_a_search(server_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs", "--dsn", server_dsn, "--chunks", CHUNKS, "--queries", "8", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert "| reader | search p50 / mean | run p50 / mean | overhead p50 / mean |" in out, out
    assert len(re.findall(r"\| r(100|50|5) \| [0-9.]+ / [0-9.]+ \|", out)) == 3, out
    with psycopg.connect(server_dsn, autocommit=True) as conn:  # its database is gone
        left = conn.execute("select count(*) from pg_database where datname like"
            " 'groundkit_scratch_bench_bh_runs_%'").fetchone()
    assert left == (0,)


def test_chain_times_runs_with_and_without_the_audit_chain(server_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["chain", "--dsn", server_dsn, "--chunks", CHUNKS, "--queries", "6", "--repeat", "1",
                 "--clients", "2", "--seconds", "0.5"]) == 0
    out = capsys.readouterr().out
    assert "| reader | chain off p50 / mean | chain on p50 / mean | chain's overhead p50 / mean |" in out, out
    assert len(re.findall(r"\| r(100|50|5) \| [0-9.]+ / [0-9.]+ \|", out)) == 6, out  # commit flushed or not
    assert re.search(r"\| 2 \| \d+, [0-9.]+ / [0-9.]+ \| \d+, [0-9.]+ / [0-9.]+ \| [0-9.]+ \|", out), out
    assert re.search(r"audit verify on the chain-on copy: [\d,]+ entries in [0-9.]+ s .*, verified", out), out
    with psycopg.connect(server_dsn, autocommit=True) as conn:  # its databases are gone
        left = conn.execute("select count(*) from pg_database where datname like 'gk_bh_chain_%'").fetchone()
    assert left == (0,)


def test_telemetry_compares_search_without_and_with_otel(server_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["telemetry", "--dsn", server_dsn, "--objects", "200", "--searches", "10", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    for arm in ("bare", "none", "api", "sdk"):
        assert f"\n{arm} " in out or out.startswith(f"{arm} ")
    assert "telemetry.span() entered and left without the package" in out


def test_embed_times_each_variant_and_scores_it(embed_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """On a six-abstract BEIR collection: every variant's docs/s and nDCG@10, and the load."""
    monkeypatch.setenv("GROUNDKIT_HOME", str(embed_home))
    docs = {"d1": "Mitochondria produce ATP by oxidative phosphorylation.", "d2": "Insulin lowers blood glucose.",
            "d3": "The stock market fell sharply.", "d4": "Cats sleep most of the day.",
            "d5": "Vaccines train the immune system.", "d6": "Rainfall was heavy in April."}
    (tmp_path / "qrels").mkdir()
    (tmp_path / "corpus.jsonl").write_text("".join(
        json.dumps({"_id": k, "title": "", "text": v}) + "\n" for k, v in docs.items()), encoding="utf-8")
    (tmp_path / "queries.jsonl").write_text(
        json.dumps({"_id": "q1", "text": "how do cells make energy"}) + "\n"
        + json.dumps({"_id": "q2", "text": "immunisation"}) + "\n", encoding="utf-8")
    (tmp_path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td5\t1\n")
    assert main(["embed", "--data", str(tmp_path), "--docs", "6", "--rounds", "1",
                 "--variants", "int8 b32 sorted on 2 threads", "int8 b1, 2 streams (default)", "pytorch"]) == 0
    out = capsys.readouterr().out
    assert "6 SciFact abstracts, 2 queries" in out and "load average before: " in out
    rows = re.findall(r"^\| (.+?) \| ([0-9.]+) \| ([0-9.]+) \| ([0-9.]+) \| ([0-9.]+) \|$", out, re.MULTILINE)
    assert [r[0] for r in rows] == ["int8 b32 sorted on 2 threads", "int8 b1, 2 streams (default)",
                                    "pytorch fp32 (sentence-transformers)"]
    assert all(float(r[3]) == 1.0 for r in rows), out  # each finds both relevant abstracts first


def test_embed_job_splits_the_commands_path(
        server_dsn: str, embed_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """On four abstracts: every arm embeds the same texts (the job's and the command's own), the
    database path alone stores them all, and the ratios are printed."""
    monkeypatch.setenv("GROUNDKIT_HOME", str(embed_home))
    (tmp_path / "qrels").mkdir()
    texts = ["Mitochondria produce ATP.", "Insulin lowers blood glucose. " * 80, "Cats sleep.", "Vaccines train cells."]
    (tmp_path / "corpus.jsonl").write_text("".join(
        json.dumps({"_id": f"d{i}", "title": f"Title {i}", "text": t}) + "\n" for i, t in enumerate(texts)),
        encoding="utf-8")
    (tmp_path / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "energy"}) + "\n", encoding="utf-8")
    (tmp_path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td0\t1\n")
    assert main(["embed-job", "--dsn", server_dsn, "--data", str(tmp_path), "--docs", "4", "--rounds", "1",
                 "--batch", "2", "--batches", "2", "3"]) == 0
    out = capsys.readouterr().out
    arms = re.findall(r"^(bench texts|job texts|job, batch \d|groundkit embed --json|claim/store alone)\s+(\d+)",
                      out, re.MULTILINE)
    assert [a for a, _ in arms] == ["bench texts", "job texts", "job, batch 2", "job, batch 3",
                                    "groundkit embed --json", "claim/store alone"], out
    assert len({n for a, n in arms if a != "bench texts"}) == 1 and int(arms[1][1]) > 4  # the long text: >1 chunk
    assert "tokens per CPU-second, job texts / bench texts:" in out and "claim/store alone, CPU ms per text" in out


def test_dense_measures_recall_and_latency_by_visible_fraction(server_dsn: str,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dense", "--dsn", server_dsn, "--chunks", "1000", "--queries", "6", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert "### 1,000 chunks, 384-d vectors in 100 clusters" in out
    for reader, visible in (("v100", "1,000"), ("v10", "100"), ("v1", "10")):
        row = next(line for line in out.splitlines() if line.startswith(f"| {reader} ({visible}) |"))
        recalls = [float(x) for x in row.strip("| ").split(" | ")[-2:]]
        assert all(0.5 <= r <= 1.0 for r in recalls), row
    with psycopg.connect(server_dsn, autocommit=True) as conn:  # its database is gone
        assert conn.execute("select count(*) from pg_database where datname like"
            " 'groundkit_scratch_bench_bh_dense_%'").fetchone() == (0,)


def test_fusion_grid_on_a_tiny_collection(server_dsn: str, embed_home: Path, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """BM25 and dense alone, then the grid, best first; search_hybrid agrees with the grid's RRF."""
    monkeypatch.setenv("GROUNDKIT_HOME", str(embed_home))  # the model's export: the session's, not the user's
    docs = {"d1": ("Energy", "Mitochondria produce ATP by oxidative phosphorylation."),
            "d2": ("Diabetes", "Insulin lowers blood glucose."), "d3": ("Markets", "The stock market fell sharply."),
            "d4": ("Vaccines", "Vaccines train the immune system to fight infection.")}
    root = tmp_path / "tiny"
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text("".join(
        json.dumps({"_id": k, "title": t, "text": x}) + "\n" for k, (t, x) in docs.items()), encoding="utf-8")
    (root / "queries.jsonl").write_text(
        json.dumps({"_id": "q1", "text": "how do cells make energy"}) + "\n"
        + json.dumps({"_id": "q2", "text": "immunisation against infection"}) + "\n", encoding="utf-8")
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td4\t1\n")
    assert main(["fusion", "--dataset", str(root), "--dsn", server_dsn, "--top", "3",
                 "--embedding-cache", str(tmp_path / "cache")]) == 0
    captured = capsys.readouterr()
    rows = re.findall(r"^\| (.+?) \| ([0-9.]+) / ([0-9.]+) \|$", captured.out, re.MULTILINE)
    assert [r[0] for r in rows[:2]] == ["bm25 alone", "dense alone"] and len(rows) == 5
    assert float(rows[1][1]) == 1.0  # dense finds both by meaning
    check = re.search(r"search_hybrid \(rrf k=20 .*\) nDCG@10 ([0-9.]+), the same fusion here ([0-9.]+)", captured.err)
    assert check is not None and check[1] == check[2]
    tests = [t for t in re.findall(r"^\| (.+?) \| ([+-][0-9.]+) \(p ([0-9.]+)\) \|$", captured.out, re.MULTILINE)
             if not t[0].startswith("tiny |")]
    assert [t[0] for t in tests] == ["bm25 alone", "dense alone", "rrf k=60", "score minmax a=0.4", "score z a=0.5",
                                     "rrf k=20, gate"]
    assert all(0.0 <= float(t[2]) <= 1.0 for t in tests)
def test_replicas_runs_both_arms_and_the_paired_writes(capsys: pytest.CaptureFixture[str]) -> None:
    from groundkit import replica_pair

    try:
        replica_pair.bin_dir()
    except replica_pair.Unavailable as exc:
        pytest.skip(str(exc))
    assert main(["replicas", "--chunks", "300", "--queries", "10", "--clients", "2", "--seconds", "1",
                 "--write-rounds", "4"]) == 0
    out = capsys.readouterr().out
    assert "| one server |" in out and "| primary + standby, fenced |" in out
    assert "| put_member (a tier change) |" in out and "| retier_object |" in out


def test_shards_fuses_two_databases_and_global_statistics_match_one(
        server_dsn: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    words = ["kiln", "glaze", "clay", "wheel", "slip", "bisque", "raku", "stoneware", "porcelain", "celadon"]
    docs = [{"_id": f"d{i}", "title": words[i % 10], "text": " ".join(words[(i * j) % 10] for j in range(1, 8))}
            for i in range(60)]
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    queries = [{"_id": f"q{i}", "text": f"{words[i]} {words[(i + 3) % 10]}"} for i in range(10)]
    (tmp_path / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    (tmp_path / "qrels").mkdir()
    (tmp_path / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n" for i in range(10)))
    assert main(["shards", "--dsn", server_dsn, "--collection", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    rows = {line.split("|")[1].strip(): line.split("|") for line in out.splitlines() if line.startswith("| ")}
    assert {"one database", "two shards, per-shard statistics", "two shards, global statistics"} <= set(rows)
    assert rows["two shards, global statistics"][2] == rows["one database"][2]  # the same nDCG@10


def test_sidechannel_dense_prints_the_hidden_topics_ratio(server_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    """python -m evals.bench sidechannel --kind dense on a small world: the four medians (hidden,
    two visible controls, absent), the ratios, hybrid's dense ranks without gaps, no problem
    reported; its database is dropped."""
    assert main(["sidechannel", "--kind", "dense", "--dsn", server_dsn, "--visible", "300", "--hidden", "200",
                 "--elsewhere", "100", "--runs", "3", "--warm-up", "1"]) == 0
    out = capsys.readouterr().out
    assert "| topic 0 | hidden (T3) |" in out and "| topic 1 | visible (control) |" in out
    assert "largest ratio hidden / control: " in out and "PROBLEM" not in out
    assert "| topic 22 | none (absent topic) |" in out
    assert out.count("| 10 | 1,2,3,4,5,6,7,8,9,10 |") == 4
    with psycopg.connect(server_dsn, autocommit=True) as conn:  # its database is gone
        left = conn.execute("select count(*) from pg_database where datname like"
                            " 'groundkit_scratch_bench_bh_side_dense_%'").fetchone()
    assert left == (0,)


def test_policy_counts_what_put_space_reads_and_writes(server_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["policy", "--dsn", server_dsn, "--chunks", "3000", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    rows = re.findall(r"\| (tiny|private-0|board-0) \| ([0-9,]+) \| ([0-9,]+) \| worktree \| [0-9,]+ "
                      r"\| [0-9,]+ / [0-9,]+ \| ([0-9,]+) / ([0-9,]+) / [0-9,]+ \|", out)
    assert [r[0] for r in rows] == ["tiny", "private-0", "board-0"], out
    for _space, chunks, postings, wrote_postings, wrote_chunks in rows:
        assert wrote_postings == postings and wrote_chunks == chunks  # each once
    with psycopg.connect(server_dsn, autocommit=True) as conn:  # its database is gone
        left = conn.execute("select count(*) from pg_database where datname like"
                            " 'groundkit_scratch_bench_bh_policy_%'").fetchone()
    assert left == (0,)


def test_serve_guards_measures_the_timeouts_and_the_cap(server_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve-guards", "--dsn", server_dsn, "--objects", "5", "--pool-size", "2", "--clients", "4",
                 "--pool-timeout", "0.5", "--lock-timeout", "0.5", "--hold", "20", "--header-timeout", "1",
                 "--body-timeout", "1", "--tricklers", "3", "--body-tricklers", "2", "--extra", "2",
                 "--max-connections", "5", "--gap", "0.1"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"\| search, ACCESS EXCLUSIVE held on chunks \| .* \| 503 GK019 \(lock timeout\) \| \d+ \|", out)
    assert re.search(r"\| headers, 1 byte per 0.1 s \| header_timeout 1 s \| answered 408, closed \| 3 \|", out), out
    assert re.search(r"\| body, 1 byte per 0.1 s \| body_timeout 1 s \| closed \| 2 \|", out), out
    assert re.search(r"\| connections while those are open \| max_connections 5 \| answered 503, closed \| 2 \|", out)
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        left = conn.execute("select count(*) from pg_database where datname like"
                            " 'groundkit_scratch_bench_bh_guards_%'").fetchone()
    assert left == (0,)


def test_outbound_times_the_gate_and_the_scrubber(server_dsn: str, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """On a tiny collection, against its loopback server: each arm's figure, and the scrubber's per kind."""
    (tmp_path / "qrels").mkdir()
    (tmp_path / "corpus.jsonl").write_text("".join(
        json.dumps({"_id": f"d{i}", "title": "", "text": f"Abstract {i}: mail a{i}@example.org or call "
                    f"+1 415 555 01{i:02d}."}) + "\n" for i in range(12)), encoding="utf-8")
    (tmp_path / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "abstract"}) + "\n", encoding="utf-8")
    (tmp_path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    assert main(["outbound", "--dsn", server_dsn, "--data", str(tmp_path), "--docs", "12", "--batch", "4",
                 "--rounds", "1", "--calls", "2"]) == 0
    out = capsys.readouterr().out
    for arm in ("batch: provider alone", "batch: through the gate", "batch: through the gate, scrubbed",
                "LLM call: transport alone", "LLM call: through the gate, scrubbed"):
        assert re.search(rf"^{re.escape(arm)} +[0-9.]+ ms per", out, re.MULTILINE), out
    assert "12 chunks in 3 batches of 4" in out and "member_names (1,000 members)" in out
