"""Evaluation helpers: collection loaders, trec_eval metrics and the reference BM25 arms.

Everything runs on tiny collections written here; the shared test collections are never read.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from groundkit.quality.arms import ArmResult, bm25s_arm, fts5_arm, query_terms, tantivy_arm
from groundkit.quality.datasets import (
    CRANFIELD_GAINS,
    Collection,
    CollectionFormatError,
    Doc,
    Query,
    load_beir,
    load_collection,
    load_cranfield,
)

CRLF = "\r\n"


def _write_crlf(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes((CRLF.join(lines) + CRLF).encode("utf-8"))


@pytest.fixture
def beir_dir(tmp_path: Path) -> Path:
    root = tmp_path / "beir-tiny"
    corpus = [
        {"_id": "d1", "title": "Statins", "text": "Statins lower cholesterol.", "metadata": {}},
        {"_id": "d2", "title": "", "text": "Caf\u00e9 culture in Vienna."},
        {"_id": "d3", "title": "Sleep", "text": "Sleep and memory."},
    ]
    queries = [
        {"_id": "q1", "text": "Do statins lower cholesterol?", "metadata": {"x": 1}},
        {"_id": "q2", "text": "unjudged query"},
        {"_id": "q3", "text": "memory"},
    ]
    _write_crlf(root / "corpus.jsonl", [json.dumps(r) for r in corpus])
    _write_crlf(root / "queries.jsonl", [json.dumps(r) for r in queries])
    _write_crlf(root / "qrels" / "test.tsv", ["query-id\tcorpus-id\tscore", "q1\td1\t2", "q1\td3\t0", "q3\td3\t1"])
    _write_crlf(root / "qrels" / "train.tsv", ["query-id\tcorpus-id\tscore", "q2\td2\t1"])
    return root


@pytest.fixture
def cranfield_dir(tmp_path: Path) -> Path:
    root = tmp_path / "cran-tiny"
    _write_crlf(
        root / "cran.all.1400",
        [
            ".I 1",
            ".T",
            "wing in a",
            "slipstream .",
            ".A",
            "brenckman,m.",
            ".B",
            "j. ae. scs. 25, 1958, 324.",
            ".W",
            "wing in a",
            "slipstream .",
            "  lift increase due to slipstream .",
            ".I 2",
            ".T",
            "heat transfer .",
            ".A",
            "chapman",
            ".B",
            "naca tn 3792",
            ".W",
            "heat transfer in separated flow .",
            ".A",
            "turbulent separations are treated .",
            ".I 3",
            ".T",
            ".A",
            ".B",
            ".W",
        ],
    )
    # Query labels skip numbers, as in the real cran.qry; the qrels count queries by position.
    _write_crlf(
        root / "cran.qry",
        [
            ".I 001",
            ".W",
            "slipstream lift",
            "of a wing .",
            ".I 004",
            ".W",
            "heat transfer in separated flow .",
        ],
    )
    _write_crlf(root / "cranqrel", ["1 1 1 ", "1 2 -1 ", "2 2 4 ", "2 3 2 "])
    return root


# ------------------------------------------------------------------------------------------ loaders


def test_load_beir_reads_crlf_files_and_keeps_judged_queries(beir_dir: Path) -> None:
    collection = load_beir(beir_dir)
    assert collection.name == "beir-tiny"
    assert [d.doc_id for d in collection.docs] == ["d1", "d2", "d3"]
    assert collection.docs[1] == Doc(doc_id="d2", title="", text="Caf\u00e9 culture in Vienna.")
    assert [q.query_id for q in collection.queries] == ["q1", "q3"]
    assert collection.queries[0].text == "Do statins lower cholesterol?"
    assert {q: dict(d) for q, d in collection.qrels.items()} == {"q1": {"d1": 2, "d3": 0}, "q3": {"d3": 1}}
    for value in [*collection.docs, *collection.queries, *collection.qrels, *collection.qrels["q1"]]:
        assert "\r" not in str(value)


def test_load_beir_other_split(beir_dir: Path) -> None:
    collection = load_beir(beir_dir, split="train")
    assert [q.query_id for q in collection.queries] == ["q2"]


def test_models_are_frozen_and_strict(beir_dir: Path) -> None:
    collection = load_beir(beir_dir)
    with pytest.raises(ValueError):
        collection.docs[0].__setattr__("title", "changed")
    with pytest.raises(ValueError):
        Query.model_validate({"query_id": "q", "text": "t", "extra": "nope"})


def test_load_beir_rejects_unknown_judged_query(beir_dir: Path) -> None:
    _write_crlf(beir_dir / "qrels" / "test.tsv", ["query-id\tcorpus-id\tscore", "q9\td1\t1"])
    with pytest.raises(CollectionFormatError, match="q9"):
        load_beir(beir_dir)


def test_load_cranfield_parses_smart_records(cranfield_dir: Path) -> None:
    collection = load_cranfield(cranfield_dir)
    docs = {d.doc_id: d for d in collection.docs}
    assert docs["1"].title == "wing in a slipstream ."
    assert docs["1"].text == "wing in a slipstream . lift increase due to slipstream ."
    # A stray .A inside the abstract does not cut it short.
    assert docs["2"].text == "heat transfer in separated flow . turbulent separations are treated ."
    assert docs["3"] == Doc(doc_id="3", title="", text="")
    assert all("\r" not in d.title + d.text for d in collection.docs)


def test_load_cranfield_numbers_queries_by_position(cranfield_dir: Path) -> None:
    collection = load_cranfield(cranfield_dir)
    assert collection.queries == (
        Query(query_id="1", text="slipstream lift of a wing ."),
        Query(query_id="2", text="heat transfer in separated flow ."),
    )
    assert {q: dict(d) for q, d in collection.qrels.items()} == {
        "1": {"1": CRANFIELD_GAINS[1], "2": 0},
        "2": {"2": CRANFIELD_GAINS[4], "3": CRANFIELD_GAINS[2]},
    }


def test_cranfield_gains_put_code_1_first() -> None:
    assert CRANFIELD_GAINS[1] > CRANFIELD_GAINS[2] > CRANFIELD_GAINS[3] > CRANFIELD_GAINS[4] >= 1
    assert CRANFIELD_GAINS[-1] == 0


def test_load_collection_detects_the_layout(beir_dir: Path, cranfield_dir: Path, tmp_path: Path) -> None:
    assert load_collection(beir_dir).name == "beir-tiny"
    assert load_collection(cranfield_dir).name == "cran-tiny"
    (tmp_path / "empty").mkdir()
    with pytest.raises(CollectionFormatError, match="not a test collection"):
        load_collection(tmp_path / "empty")
    assert issubclass(CollectionFormatError, ValueError)


# ------------------------------------------------------------------------------------------ metrics


def test_metrics_hand_computed() -> None:
    pytest.importorskip("ir_measures")
    from groundkit.quality.metrics import evaluate, per_query

    qrels = {"q1": {"a": 2, "b": 1, "c": 0}, "q2": {"x": 1}}
    # q1 ranks: a (gain 2) at 1, n (unjudged) at 2, b (gain 1) at 3. q2 is absent from the run.
    run = {"q1": {"a": 3.0, "n": 2.0, "b": 1.0}, "unjudged": {"a": 1.0}}
    dcg = 2 / math.log2(2) + 1 / math.log2(4)
    idcg = 2 / math.log2(2) + 1 / math.log2(3)
    q1 = per_query(qrels, run)["q1"]
    assert q1["ndcg@10"] == pytest.approx(dcg / idcg)
    assert q1["recall@10"] == 1.0
    assert q1["mrr@10"] == 1.0

    result = evaluate(qrels, run)
    assert set(result) == {"ndcg@10", "recall@10", "recall@100", "mrr@10"}
    # The query without results counts as zero instead of being dropped.
    assert result["ndcg@10"] == pytest.approx(dcg / idcg / 2)
    assert result["recall@100"] == pytest.approx(0.5)
    assert evaluate(qrels, {**run, "q2": {}}) == result


def test_metrics_cutoffs() -> None:
    pytest.importorskip("ir_measures")
    from groundkit.quality.metrics import evaluate

    qrels = {"q": {"rel": 1, "rel2": 1}}
    # "rel" at rank 11 and "rel2" at rank 101: outside every cutoff but recall@100's for "rel".
    ranking = {f"n{i:03d}": 1000.0 - i for i in range(120)}
    ranking["rel"] = ranking.pop("n010")
    ranking["rel2"] = ranking.pop("n100")
    result = evaluate(qrels, {"q": ranking})
    assert result == {"ndcg@10": 0.0, "recall@10": 0.0, "recall@100": 0.5, "mrr@10": 0.0}

    second = evaluate(qrels, {"q": {"n": 2.0, "rel": 1.0}})
    assert second["mrr@10"] == pytest.approx(0.5)
    assert second["ndcg@10"] == pytest.approx((1 / math.log2(3)) / (1 + 1 / math.log2(3)))


# --------------------------------------------------------------------------------------------- arms

NASTY_QUERIES = [
    'title:"statins" AND (cholesterol OR -liver)^2 ~ * NEAR(a b) [1 TO 5] \\ \' {x} +y!',
    "NOT",
    "???",
    "",
    'a "quoted" phrase',
    "caf\u00e9 \u00fcber na\u00efve \u03b2-blockers",
]


def _arm_collection() -> Collection:
    docs = (
        Doc(doc_id="statins", title="Statins and cholesterol", text="Statins lower LDL cholesterol levels."),
        Doc(doc_id="sleep", title="Sleep", text="Sleep deprivation impairs memory consolidation."),
        Doc(doc_id="coffee", title="Coffee", text="Coffee intake and heart rhythm."),
        Doc(doc_id="vitamin", title="Vitamin D", text="Vitamin D and bone density in the elderly."),
        Doc(doc_id="exercise", title="Exercise", text="Exercise improves sleep quality somewhat."),
    )
    queries = (
        Query(query_id="q-statin", text="Do statins reduce cholesterol?"),
        Query(query_id="q-sleep", text="sleep deprivation memory"),
        *(Query(query_id=f"nasty-{i}", text=text) for i, text in enumerate(NASTY_QUERIES)),
    )
    qrels = {"q-statin": {"statins": 1}, "q-sleep": {"sleep": 1}}
    return Collection(name="tiny", docs=docs, queries=queries, qrels=qrels)


def _check_arm(result: ArmResult, collection: Collection) -> None:
    assert set(result.run) == {q.query_id for q in collection.queries}
    assert next(iter(sorted(result.run["q-statin"].items(), key=lambda kv: -kv[1])))[0] == "statins"
    assert next(iter(sorted(result.run["q-sleep"].items(), key=lambda kv: -kv[1])))[0] == "sleep"
    assert result.run["nasty-2"] == {} and result.run["nasty-3"] == {}
    assert "statins" in result.run["nasty-0"]
    assert all(len(hits) <= 100 for hits in result.run.values())
    assert result.index_seconds >= 0 and result.query_seconds >= 0


def test_query_terms_drop_syntax() -> None:
    assert query_terms('title:"a-b" (c_d)^2 caf\u00e9') == ["title", "a", "b", "c", "d", "2", "caf\u00e9"]


def test_fts5_arm() -> None:
    collection = _arm_collection()
    _check_arm(fts5_arm(collection), collection)


def test_tantivy_arm() -> None:
    pytest.importorskip("tantivy")
    collection = _arm_collection()
    _check_arm(tantivy_arm(collection), collection)


def test_bm25s_arm() -> None:
    pytest.importorskip("bm25s")
    pytest.importorskip("Stemmer")
    collection = _arm_collection()
    _check_arm(bm25s_arm(collection), collection)
