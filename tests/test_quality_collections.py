"""`groundkit eval quality` on forum- and transcript-shaped collections written by the test:
refused queries are counted and the run goes on, transcripts run as windows and through the
transcript chunker with the judgments mapped onto its chunks, and per meeting as well as across
all meetings, reference engines included."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from groundkit.cli import app
from groundkit.errors import InvalidArgument
from groundkit.quality.arms import bm25s_arm, fts5_arm, tantivy_arm
from groundkit.quality.datasets import Collection, Doc, Query, load_collection
from groundkit.quality.harness import comparisons, run_quality
from groundkit.quality.stats import paired_test
from groundkit.quality.transcripts import TURN_MS, ChunkSpan, read_turns, turns_collection

FORUM = [
    ("p1", "Residence permit renewal", "How long does the residence permit renewal take at the immigration office?"),
    ("p2", "Driving licence", "Can I convert my driving licence from India without a test?"),
    ("p3", "Best biryani", "Where do you find the best biryani near the corniche?"),
]


def _write(root: Path, docs: list[tuple[str, str, str]], queries: list[tuple[str, str]],
           qrels: list[tuple[str, str, int]]) -> Path:
    root.mkdir()
    (root / "qrels").mkdir()
    (root / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": i, "title": t, "text": x}) + "\n" for i, t, x in docs), encoding="utf-8")
    (root / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in queries), encoding="utf-8")
    (root / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{s}\n" for q, d, s in qrels), encoding="utf-8")
    return root


def _forum(root: Path) -> Path:
    # longer than search takes a query in characters (GK005), whatever that bound is (4,096 or 32,768)
    long_post = "renewal of my residence permit " + " ".join(f"word{n}" for n in range(6000))
    return _write(root, FORUM,
                  [("q1", "residence permit renewal time"), ("q2", long_post), ("q3", "convert driving licence")],
                  [("q1", "p1", 2), ("q2", "p1", 1), ("q3", "p2", 1)])


def test_a_refused_query_is_counted_with_its_reason_and_the_run_goes_on(server_dsn: str, tmp_path: Path) -> None:
    dataset = _forum(tmp_path / "forum")
    rows = run_quality(dataset, server_dsn, arms=("bm25", "ts_rank_cd", "tantivy"))
    bm25, ts_rank_cd, tantivy = rows
    assert bm25.queries == 3 and bm25.refused == 1
    (refusal,) = bm25.refusals
    assert refusal["query_id"] == "q2" and refusal["code"] == "GK005" and "characters long" in refusal["reason"]
    assert bm25.per_query_ndcg["q2"] == 0.0  # scored 0, not dropped from the mean
    assert bm25.per_query_ndcg["q1"] == 1.0 and bm25.per_query_ndcg["q3"] == 1.0
    assert bm25.ndcg_10 == pytest.approx(2 / 3)
    # the arms after the refusing one ran every query (ts_rank_cd has no length bound)
    for row in (ts_rank_cd, tantivy):
        assert row.refused == 0 and row.per_query_ndcg["q2"] > 0

    result = CliRunner().invoke(app, ["eval", "quality", "--dataset", str(dataset), "--arm", "bm25", "--dsn",
                                      server_dsn])
    assert result.exit_code == 0, result.output
    assert "bm25: 1 of 3 queries refused, scored 0 (GK005 x1); e.g. q2: GK005: query is" in " ".join(
        result.stdout.split())
    as_json = CliRunner().invoke(app, ["eval", "quality", "--dataset", str(dataset), "--arm", "bm25", "--json",
                                       "--dsn", server_dsn])
    (line,) = [json.loads(x) for x in as_json.stdout.splitlines()]
    assert line["kind"] == "arm" and line["refused"] == 1 and line["refusals"][0]["code"] == "GK005"


def test_groundkits_bm25_parameters_can_be_set_for_the_run(server_dsn: str, tmp_path: Path) -> None:
    """--bm25-k1/--bm25-b set groundkit's BM25 in the scratch database before the load (the
    reference engines keep theirs): a long post saying "kiln" three times outranks the short one
    that is the answer without length normalisation (b 0), and not with it (b 1)."""
    filler = " ".join(f"filler{n}" for n in range(80))
    dataset = _write(tmp_path / "kilns", [("short", "Kiln", "kiln firing"),
                                          ("long", "Kilns", f"kiln kiln kiln {filler} firing")],
                     [("q1", "kiln firing")], [("q1", "short", 1)])
    flat, normalised = (run_quality(dataset, server_dsn, arms=("bm25",), bm25_k1_b=(5.0, b))[0] for b in (0.0, 1.0))
    assert flat.bm25_k1_b == (5.0, 0.0) and flat.per_query_ndcg["q1"] < 1.0
    assert normalised.per_query_ndcg["q1"] == 1.0
    result = CliRunner().invoke(app, ["eval", "quality", "--dataset", str(dataset), "--arm", "bm25", "--bm25-k1",
                                      "5", "--bm25-b", "0", "--json", "--dsn", server_dsn])
    assert result.exit_code == 0, result.output
    (line,) = [json.loads(x) for x in result.stdout.splitlines() if '"kind": "arm"' in x]
    assert line["bm25_k1_b"] == [5.0, 0.0] and line["ndcg@10"] == pytest.approx(flat.ndcg_10)
    alone = CliRunner().invoke(app, ["eval", "quality", "--dataset", str(dataset), "--bm25-k1", "5", "--dsn",
                                     server_dsn])
    assert alone.exit_code == 1 and "--bm25-k1 and --bm25-b go together" in alone.output


def test_forum_collections_load_as_board_posts(tmp_path: Path) -> None:
    dataset = _forum(tmp_path / "semeval-cqa-forum")
    assert load_collection(dataset).content_type == "board_post"
    assert load_collection(_forum(tmp_path / "other")).content_type == "document"


# ---------------------------------------------------------------------------------- transcripts

# Two meetings that talk about the same things; each query asks about its own meeting. In `all`
# scope the other meeting's louder mention of "budget" ranks first; in `meeting` scope it cannot.
MEETINGS = {
    "M1": [("A", "Welcome everyone."), ("B", "Let us start."), ("A", ""), ("C", "The remote control needs a case."),
           ("A", "Rubber or plastic?"), ("B", "Rubber feels better in the hand."), ("C", "Agreed."),
           ("A", "Next item."), ("B", "The budget for the case is tight."), ("C", "How tight?"),
           ("B", "Twelve euros."), ("A", "Fine."), ("C", "Then the buttons."), ("A", "Scroll wheel please."),
           ("B", "Costly."), ("C", "Let us close.")],
    "M2": [("D", "Committee opens."), ("E", "The team decided the budget for the case of schools."),
           ("D", "The team decided the budget for the case of teachers."),
           ("E", "And buildings."), ("D", "The case for rubber floors was made."), ("E", "Noted."),
           ("D", "Budget again."), ("E", "Budget for transport."), ("D", "Adjourned."), ("E", "Thanks."),
           ("D", "Back again."), ("E", "Schools budget agreed.")],
}


def _transcripts(root: Path) -> Path:
    """A QMSum-shaped folder: windows of ten turns (e inclusive), segments.jsonl with every turn."""
    docs, segments = [], []
    for meeting, turns in MEETINGS.items():
        for n, (speaker, text) in enumerate(turns):
            segments.append({"meeting": meeting, "turn": n, "speaker": speaker, "text": text})
        for s in range(0, len(turns), 10):
            e = min(s + 10, len(turns)) - 1
            text = " ".join(f"{sp}: {tx}" for sp, tx in turns[s:e + 1] if tx)
            docs.append((f"{meeting}:{s}-{e}", meeting, text))
    queries = [("M1:q0", "What did the team decide about the budget for the case?"),
               ("M1:q1", "What did B say about rubber for the remote control?"),
               ("M2:q0", "Summarize the schools budget")]
    qrels = [("M1:q0", "M1:0-9", 1), ("M1:q1", "M1:0-9", 1), ("M2:q0", "M2:0-9", 1), ("M2:q0", "M2:10-11", 1)]
    root = _write(root, docs, queries, qrels)
    (root / "segments.jsonl").write_text("".join(json.dumps(s) + "\n" for s in segments), encoding="utf-8")
    return root


def test_transcript_collection_knows_each_meeting(tmp_path: Path) -> None:
    collection = load_collection(_transcripts(tmp_path / "meetings"))
    assert collection.content_type == "transcript" and collection.grouped
    assert collection.doc_groups["M2:10-11"] == "M2" and collection.query_groups["M1:q1"] == "M1"
    turns = read_turns(tmp_path / "meetings" / "segments.jsonl")
    assert [t.turn for t in turns["M1"]] == list(range(16)) and turns["M1"][2].text == ""


def test_judgments_map_onto_chunks_by_the_turns_they_cover() -> None:
    """A chunk is relevant when it is in the query's meeting and covers a turn of a window judged
    relevant for it; the same turns in another meeting, or the turns next to the window, are not."""
    windows = Collection(
        name="t", docs=(Doc(doc_id="M1:0-9", title="M1", text=""), Doc(doc_id="M1:10-19", title="M1", text="")),
        queries=(Query(query_id="M1:q0", text="x"),), qrels={"M1:q0": {"M1:10-19": 1}},
        content_type="transcript", doc_groups={"M1:0-9": "M1", "M1:10-19": "M1"}, query_groups={"M1:q0": "M1"})
    chunks = [ChunkSpan("M1", 0, 0, 9, "a"), ChunkSpan("M1", 1, 8, 10, "b"), ChunkSpan("M1", 2, 19, 25, "c"),
              ChunkSpan("M1", 3, 20, 30, "d"), ChunkSpan("M2", 0, 10, 19, "e")]
    mapped = turns_collection(windows, chunks)
    assert mapped.qrels == {"M1:q0": {"M1#1:8-10": 1, "M1#2:19-25": 1}}
    assert [d.doc_id for d in mapped.docs] == ["M1#0:0-9", "M1#1:8-10", "M1#2:19-25", "M1#3:20-30", "M2#0:10-19"]
    assert mapped.doc_groups["M2#0:10-19"] == "M2" and mapped.query_groups == {"M1:q0": "M1"}


def test_transcripts_as_windows_and_turns_across_all_and_per_meeting(server_dsn: str, tmp_path: Path) -> None:
    dataset = _transcripts(tmp_path / "meetings")
    rows = run_quality(dataset, server_dsn, arms=("bm25", "ts_rank_cd", "tantivy", "bm25s", "fts5"))
    blocks = {(r.view, r.scope, r.arm): r for r in rows}
    assert {(v, s) for v, s, _ in blocks} == {(v, s) for v in ("windows", "turns") for s in ("all", "meeting")}
    for view in ("windows", "turns"):
        for arm in ("bm25", "ts_rank_cd", "tantivy", "bm25s", "fts5"):
            everywhere, own = blocks[(view, "all", arm)], blocks[(view, "meeting", arm)]
            # the other meeting's "budget" outranks M1's own window across all meetings, never within M1
            assert own.per_query_ndcg["M1:q0"] == 1.0, (view, arm)
            assert everywhere.per_query_ndcg["M1:q0"] < 1.0, (view, arm)
            assert own.ndcg_10 > everywhere.ndcg_10 and own.refused == 0

    # the turns view ranks groundkit's own chunks: turns 0-15 of M1 at 1,500 characters are one chunk
    turns = blocks[("turns", "meeting", "bm25")]
    assert turns.dataset == "meetings" and turns.queries == 3
    only = run_quality(dataset, server_dsn, arms=("bm25",), views=["turns"], scopes=["meeting"])
    assert [(r.view, r.scope) for r in only] == [("turns", "meeting")]
    with pytest.raises(InvalidArgument, match="has no view 'pages'"):
        run_quality(dataset, server_dsn, arms=("bm25",), views=["pages"])


def test_turns_view_chunks_cover_every_spoken_turn(dsn: str, tmp_path: Path) -> None:
    """The turns view writes each meeting as one transcript through the transcript chunker: its
    chunks hold `Speaker: text` and their times give back the turns they cover."""
    import groundkit
    from groundkit.quality.harness import load_turns

    dataset = _transcripts(tmp_path / "meetings")
    with groundkit.Groundkit.connect(dsn) as gk:
        gk.set_chunk_sizes("transcript", 200, 40)  # several chunks per meeting
    collection, hit_id = load_turns(dsn, dataset, load_collection(dataset))
    covered: dict[str, set[int]] = {"M1": set(), "M2": set()}
    for doc in collection.docs:
        meeting, _, span = doc.doc_id.partition("#")
        first, last = (int(x) for x in span.split(":")[1].split("-"))
        covered[meeting].update(range(first, last + 1))
        assert doc.title == meeting and doc.text.split(":")[0] in {"A", "B", "C", "D", "E"}
    assert covered["M1"] == set(range(16)) and covered["M2"] == set(range(12))
    assert len(collection.docs) > 2
    assert hit_id("M1", 0) == collection.docs[0].doc_id
    with groundkit.Groundkit.connect(dsn) as gk:
        row = gk.conn.execute("select start_ms, end_ms from groundkit.chunks where object_id = 'M1'"
                              " order by chunk_seq limit 1").fetchone()
    assert row is not None and row["start_ms"] == 0 and row["end_ms"] % TURN_MS == TURN_MS - 1


def test_reference_engines_answer_within_a_group(tmp_path: Path) -> None:
    collection = load_collection(_transcripts(tmp_path / "meetings"))
    for arm in (tantivy_arm, fts5_arm, bm25s_arm):
        run = arm(collection, per_group=True).run
        for query_id, ranking in run.items():
            assert ranking and all(collection.doc_groups[d] == collection.query_groups[query_id] for d in ranking)
        across = arm(collection).run
        assert any(collection.doc_groups[d] != "M1" for d in across["M1:q0"]), arm
    with pytest.raises(ValueError, match="names no groups"):
        tantivy_arm(load_collection(_forum(tmp_path / "forum")), per_group=True)


def test_comparisons_hold_bm25_against_the_better_reference(server_dsn: str, tmp_path: Path) -> None:
    rows = run_quality(_forum(tmp_path / "forum"), server_dsn, arms=("bm25", "tantivy", "fts5", "bm25s"))
    (compared,) = comparisons(rows)
    best = max((r for r in rows if r.arm in ("tantivy", "bm25s")), key=lambda r: r.ndcg_10)
    assert (compared.arm, compared.against) == ("bm25", best.arm)
    assert compared.queries == 3 and compared.difference == pytest.approx(rows[0].ndcg_10 - best.ndcg_10)
    assert 0.0 <= compared.p_value <= 1.0


def test_paired_test() -> None:
    assert paired_test([0.5, 0.5], [0.5, 0.5]) == (0.0, 1.0)
    diff, p = paired_test([0.9, 0.8, 0.85, 0.95, 0.9, 0.8], [0.1, 0.2, 0.15, 0.1, 0.2, 0.1])
    assert diff == pytest.approx(0.725) and p < 0.001
    _, p = paired_test([0.9, 0.1, 0.5, 0.4], [0.1, 0.9, 0.4, 0.5])
    assert p > 0.5
    assert paired_test([1.0, 1.0, 1.0], [0.5, 0.5, 0.5]) == (0.5, 0.0)  # the same gain on every query
    with pytest.raises(ValueError):
        paired_test([1.0], [1.0, 2.0])


# ../shared from the repository (its worktrees sit one level deeper, under wt/)
REPO = Path(__file__).resolve().parents[1]
QMSUM = next((base / "shared" / "datasets" / "qmsum-transcripts" for base in (REPO.parent, REPO.parent.parent)
              if (base / "shared" / "datasets").is_dir()), REPO / "no-shared-datasets")


@pytest.mark.skipif(not (QMSUM / "segments.jsonl").is_file(), reason="the shared QMSum collection is not here")
def test_qmsum_turns_give_back_every_window() -> None:
    """On the shared QMSum folder (when present; the tests above prove the mapping on their own
    data): every window is its turns `Speaker: text` joined, so the turns view's segments carry
    the very text the windows do, and the turn numbers the judgments count in."""
    from groundkit.quality.transcripts import meeting_of, window_turns

    windows = load_collection(QMSUM)
    turns = read_turns(QMSUM / "segments.jsonl")
    assert len(turns) == 197 and sum(len(t) for t in turns.values()) == 108_459
    for doc in windows.docs:
        first, last = window_turns(doc.doc_id)
        spoken = turns[meeting_of(doc.doc_id)][first:last + 1]
        assert doc.text == " ".join(f"{t.speaker}: {t.text}" for t in spoken if t.text), doc.doc_id
