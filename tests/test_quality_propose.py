"""`groundkit eval propose`: per content type, the search mode and hybrid weights judged queries
argue for, with the gain over the current setting and a paired t-test, applied only when asked."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest
from psycopg.rows import dict_row
from typer.testing import CliRunner

from groundkit import Groundkit, deployment, embedding, model_swap
from groundkit.cli import app
from groundkit.models import SearchModeSetting
from groundkit.quality.propose import GRID, Candidate, Judged, _searches, fuse, propose
from groundkit.quality.samples import export_samples
from tests.dense_fakes import FakeEmbeddings, add_fake_model
from tests.governance_helpers import certify

runner = CliRunner()
HYBRID = Candidate("hybrid")  # search_hybrid's defaults: what auto runs with a model and no setting


def _lexical_query(n: int) -> Judged:
    """BM25 finds the relevant object first; dense puts two others first, one of them BM25's tenth."""
    bm25 = [(f"rel-{n}", 0, 9.0), *((f"b{n}-{i}", 0, 5.0 - i / 10) for i in range(8)), (f"near-{n}", 0, 4.0)]
    dense = [(f"near-{n}", 0, 0.9), (f"other-{n}", 0, 0.89), *((f"d{n}-{i}", 0, 0.8 - i / 100) for i in range(40)),
             (f"rel-{n}", 0, 0.1)]
    return Judged(f"q{n}", bm25, dense, {f"rel-{n}": 1, f"near-{n}": 0})


def _semantic_query(n: int) -> Judged:
    """Only the dense leg finds the relevant object (a paraphrase), and at the top."""
    bm25 = [(f"b{n}-{i}", 0, 5.0 - i / 10) for i in range(20)]
    dense = [(f"rel-{n}", 0, 0.95), *((f"b{n}-{i}", 0, 0.9 - i / 100) for i in range(20))]
    return Judged(f"s{n}", bm25, dense, {f"rel-{n}": 2})


def test_fusion_ranks_as_search_hybrid_does() -> None:
    judged = _lexical_query(1)
    # RRF k 20, equal weights: near (1/30 + 1/21) beats rel (1/21 + 1/63)
    assert list(fuse(judged, HYBRID))[:2] == ["near-1", "rel-1"]
    assert list(fuse(judged, Candidate("bm25")))[:2] == ["rel-1", "b1-0"]
    assert list(fuse(judged, Candidate("dense")))[:2] == ["near-1", "other-1"]
    # BM25 weighted 4x: rel (1/21 + 0.25/63) beats near (1/30 + 0.25/21)
    assert next(iter(fuse(judged, Candidate("hybrid", bm25_weight=1.0, dense_weight=0.25)))) == "rel-1"
    # each leg read max(depth, k) deep: at k 5 and depth 5 neither rel's dense rank nor near's BM25 rank
    # counts; both score 1/21, and the tie goes by object id, as in search_hybrid
    shallow = fuse(judged, Candidate("hybrid", depth=5), k=5)
    assert len(shallow) == 5 and list(shallow)[:2] == ["near-1", "rel-1"]


def test_each_content_type_gets_its_own_proposal_with_gain_and_p() -> None:
    by_type = {"board_post": [_lexical_query(n) for n in range(12)],
               "transcript": [_semantic_query(n) for n in range(12)]}
    current = {"board_post": HYBRID, "transcript": Candidate("dense")}
    posts, talks = propose(by_type, current)
    assert (posts.content_type, posts.queries, posts.current) == ("board_post", 12, HYBRID.label)
    assert posts.proposed_ndcg_10 == 1.0 and posts.current_ndcg_10 < 0.7
    assert posts.gain == pytest.approx(posts.proposed_ndcg_10 - posts.current_ndcg_10)
    assert posts.p_value < 0.001 and posts.apply
    assert posts.setting == {"mode": "bm25"}  # first of the settings that score 1.0
    assert all(c.ndcg_10 <= posts.proposed_ndcg_10 for c in posts.candidates)
    # the current setting is one of the grid's; the score-fusion settings need search itself, and
    # these hand-made judgments have no searched rankings: they are left out
    scored = [c for c in GRID if c.fusion == "score"]
    assert len(scored) == 3 and len(posts.candidates) == len(GRID) - len(scored)
    # dense is already the best for transcripts: nothing to apply
    assert (talks.current, talks.proposed, talks.gain, talks.p_value, talks.apply) == ("dense", "dense", 0.0, 1.0,
                                                                                      False)
    # a gain the test cannot tell from noise is not applied: bm25 0.6 against dense 0.4 on five queries
    noisy = {"board_post": [_semantic_query(1), _semantic_query(2), _lexical_query(0), _lexical_query(1),
                            _lexical_query(2)]}
    (weak,) = propose(noisy, {"board_post": Candidate("dense")}, alpha=0.05)
    assert (weak.proposed, weak.current) == ("bm25", "dense")
    assert weak.gain == pytest.approx(0.2) and weak.p_value > 0.5 and not weak.apply


def _world(gk: Groundkit, fake: FakeEmbeddings) -> None:
    from groundkit.embedders import embedder_for

    gk.put_member("t1", "T1")
    gk.put_space("open", "T0")
    gk.put_space("upper", "T2")
    texts = ["kiln firing schedule for stoneware", "glaze recipes with iron oxide", "throwing tall cylinders",
             "pricing commissions for clients", "photographing pottery for a shop", "reclaiming clay scraps",
             "wax resist on bisque", "trimming feet on bowls"]
    for i, text in enumerate(texts):
        gk.put_object(f"post-{i}", 1, "board_post", "open", "T0", f"post {i}", f"{text}, asked on the board")
        gk.put_object(f"event-{i}", 1, "event", "open", "T0", f"workshop {i}", f"a workshop on {text}")
    gk.put_object("hidden", 1, "board_post", "upper", "T2", "hidden", "glaze recipes kiln firing for members")
    add_fake_model(gk, "fake", fake)
    m = embedding.get_model(gk, "fake")
    embedding.embed_pending(gk, m, embedder_for(m))
    model_swap.cutover(gk, "fake")


def test_fusion_agrees_with_search_hybrid_in_the_database(gk: Groundkit, fake: FakeEmbeddings) -> None:
    _world(gk, fake)
    for query in ("glaze kiln", "pricing pottery photographs", "bowls"):
        scored = Candidate("hybrid", fusion="score", bm25_weight=0.75)  # a current setting not in the grid
        bm25, dense, measured = _searches(gk, "t1", query, "board_post", scored)
        judged = Judged("q", bm25, dense, {}, measured)
        # score fusion reads the legs' internal scores: the grid's and the current one are searched
        assert set(measured) == {scored, *(c for c in GRID if c.fusion == "score")}
        for candidate, knobs in ((HYBRID, {}), (Candidate("hybrid", "rrf", 60, 1.0, 0.25), {"rrf_k": 60,
                                                                                            "dense_weight": 0.25}),
                                 (Candidate("hybrid", "rrf", 5, 0.5, 1.0, depth=20), {"rrf_k": 5, "bm25_weight": 0.5,
                                                                                     "depth": 20}),
                                 (scored, {"fusion": "score", "bm25_weight": 0.75}),
                                 (Candidate("hybrid", "score", dense_weight=0.5), {"fusion": "score",
                                                                                   "dense_weight": 0.5})):
            hits = gk.search("t1", query, k=100, mode="hybrid", content_types=["board_post"], **knobs)
            assert list(fuse(judged, candidate)) == [h.object_id for h in hits], (query, candidate)
        with pytest.raises(ValueError, match="measured by search itself"):
            fuse(judged, Candidate("hybrid", fusion="score", dense_weight=0.25))


def test_score_fusion_gives_a_chunk_nothing_from_a_leg_it_is_missing_from(gk: Groundkit,
                                                                            fake: FakeEmbeddings) -> None:
    """search_hybrid(fusion => 'score'): each leg's score min-max scaled over its own list, a
    chunk outside a leg's list 0 from that leg (it once got the leg's full weight, so a chunk one
    leg alone found outranked one both legs ranked high), as eval propose's score settings read it."""
    _world(gk, fake)
    for query in ("glaze kiln", "pricing pottery photographs", "bowls"):
        # each leg is read max(depth, k) deep: 5 here
        bm25 = {(h.object_id, h.chunk_seq): h.score for h in gk.search("t1", query, k=5, mode="bm25")}
        dense = {(h.object_id, h.chunk_seq): h.score for h in gk.search("t1", query, k=5, mode="dense")}
        hits = gk.search("t1", query, k=5, mode="hybrid", fusion="score", depth=5, dense_weight=0.5)

        def scaled(leg: dict[tuple[str, int], float], chunk: tuple[str, int]) -> float:
            lo, hi = min(leg.values()), max(leg.values())
            return 0.0 if chunk not in leg else 1.0 if hi == lo else (leg[chunk] - lo) / (hi - lo)

        assert hits and {(h.object_id, h.chunk_seq) for h in hits} <= set(bm25) | set(dense)
        assert any(h.bm25_rank is None or h.dense_rank is None for h in hits)  # one leg's alone
        for h in hits:
            key = (h.object_id, h.chunk_seq)
            assert h.score == pytest.approx(scaled(bm25, key) + 0.5 * scaled(dense, key)), (query, h)


def test_propose_from_the_samplers_export_applies_only_when_asked(dsn: str, gk: Groundkit, fake: FakeEmbeddings,
                                                                  tmp_path: Path) -> None:
    """The sampler's own export, relevance filled in: proposals per content type of the labelled
    candidates, searched as a reader of the sample's rank; --apply sets what it proposes to apply,
    and nothing else; without it nothing changes."""
    _world(gk, fake)
    gk.set_sample_rate(1.0)
    queries = ["glaze recipes", "kiln schedule", "pricing commissions", "tall cylinders", "clay scraps",
               "wax resist bisque", "trimming bowls", "photographing pottery"]
    for q in queries:
        gk.search("t1", q, k=10, mode="bm25")
    labels = tmp_path / "labels.jsonl"
    with labels.open("w", encoding="utf-8") as f:
        assert export_samples(gk, __import__("datetime").timedelta(days=1), f) == len(queries)
    lines = [json.loads(x) for x in labels.read_text(encoding="utf-8").splitlines()]
    for line in lines:  # the labeller: BM25's first post and first event are the answers
        seen: set[str] = set()
        for c in line["candidates"]:
            kind = c["object_id"].split("-")[0]
            c["relevance"] = 0 if kind in seen else 1
            seen.add(kind)
    labels.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")

    before = gk.search_modes()
    shown = runner.invoke(app, ["eval", "propose", "--labels", str(labels), "--json", "--dsn", dsn])
    assert shown.exit_code == 0, shown.output
    proposals = {p["content_type"]: p for p in map(json.loads, shown.stdout.splitlines())}
    assert set(proposals) == {"board_post", "event"}
    for p in proposals.values():
        assert p["kind"] == "proposal" and p["queries"] >= 6 and p["current"] == HYBRID.label
        assert p["proposed_ndcg_10"] >= max(c["ndcg_10"] for c in p["candidates"]) - 1e-12
        assert p["applied"] is False
    assert gk.search_modes() == before  # nothing changed

    table = runner.invoke(app, ["eval", "propose", "--labels", str(labels), "--dsn", dsn])
    assert table.exit_code == 0 and "board_post: every setting scored" in table.stdout

    # dense now (the fake model ranks by no meaning): the labeller's BM25 answers argue for a change
    for content_type in proposals:
        gk.set_search_mode(content_type, "dense")
    before = gk.search_modes()
    basis = certify(dsn)  # through the gate: the certificate is carried over (docs/governance.md)
    applied = runner.invoke(app, ["eval", "propose", "--labels", str(labels), "--json", "--apply", "--alpha", "0.99",
                                  "--dsn", dsn])
    assert applied.exit_code == 0, applied.output
    done = {p["content_type"]: p for p in map(json.loads, applied.stdout.splitlines())}
    changed = {t: SearchModeSetting.model_validate(p["setting"]) for t, p in done.items() if p["applied"]}
    assert changed and gk.search_modes() == {**before, **changed}
    assert all(p["applied"] == p["apply"] and p["current"] == "dense" for p in done.values())
    assert f"carries the certificate of ledger row {basis}" in " ".join(applied.stderr.split())
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        now = deployment.status(conn)
    assert now.certified and now.kind == "policy"
    assert json.loads(now.config["search_modes"] or "null") == {t: s.model_dump(exclude_none=True)
                                                               for t, s in {**before, **changed}.items()}


def test_propose_from_a_beir_folder_with_the_local_model(dsn: str, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GROUNDKIT_HOME", str(tmp_path / "home"))  # the eval's embedding cache
    root = tmp_path / "faq"
    (root / "qrels").mkdir(parents=True)
    docs = [("d1", "Dovetail joints", "Hand-cut dovetails for drawer boxes in walnut."),
            ("d2", "Finishing oil", "Hardwax oil finishing schedule for oak tables."),
            ("d3", "Pricing commissions", "How to price a commission: materials, hours and margin.")]
    (root / "corpus.jsonl").write_text("".join(json.dumps({"_id": i, "title": t, "text": x}) + "\n"
                                               for i, t, x in docs), encoding="utf-8")
    (root / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in
                                                [("q1", "dovetail drawer"), ("q2", "what to charge a client")]),
                                        encoding="utf-8")
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td3\t1\n", encoding="utf-8")
    result = runner.invoke(app, ["eval", "propose", "--dataset", str(root), "--content-type", "event", "--json",
                                 "--dsn", dsn])
    assert result.exit_code == 0, result.output
    (p,) = [json.loads(x) for x in result.stdout.splitlines()]
    assert p["content_type"] == "event" and p["queries"] == 2
    assert p["current"] == "bm25"  # the target database has no active model: auto runs bm25 there
    assert {c["setting"] for c in p["candidates"]} >= {"bm25", "dense", HYBRID.label}
    bad = runner.invoke(app, ["eval", "propose", "--dsn", dsn])
    assert bad.exit_code == 1 and "give --labels" in bad.output
