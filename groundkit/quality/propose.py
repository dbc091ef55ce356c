"""``groundkit eval propose``: per content type, the search mode and hybrid weights a community's
own judgments argue for, each beside its gain and a paired significance test.

Judgments come from a labelled file (``groundkit eval export-samples``, its ``relevance`` slots
filled), searched in the database as a reader of each sample's tier rank (as ``eval quality
--labels`` does: a synthetic member, rolled back, or ``--reader``), or from a BEIR folder loaded
into a scratch database as one content type (as ``eval quality`` loads it). A labelled query
counts for content type T when a candidate of type T that the reader may see now is labelled
relevant; it is then searched within T (``content_types=[T]``) and judged on its labelled
objects of type T.

Every query is searched twice, BM25 and dense, :data:`K` deep within the type; every RRF
candidate (:data:`GRID`: bm25, dense, hybrid RRF at two ``rrf_k`` and five leg weightings) and
the type's current setting (``groundkit.auto_search_settings([T])``) are scored from those two
lists, fused here exactly as ``search_hybrid`` fuses with RRF (``Σ weight / (rrf_k + rank)``
over chunks, each leg read ``max(depth, k)`` deep, ties by object id and chunk; a document
scores its best chunk; ``tests/test_quality_propose.py`` checks it against ``search_hybrid``
itself). Score fusion (min-max, ``fusion='score'``) reads the legs' internal scores, so each of
the grid's three score settings, and a current setting with score fusion, is measured by one
more search per query in that setting.

The proposal for a type is the setting with the best mean nDCG@10; beside it, its gain over the
current setting and the p-value of the paired t-test (:mod:`groundkit.quality.stats`) on the
same queries. It is applied (``--apply``: :meth:`~groundkit.admin.Admin.set_search_mode`) only
when it differs from the current setting, gains, and p < ``alpha``. The best of a grid is chosen
and tested on the same queries, which flatters it a little: judge small gains on a held-out
file. The search modes are a component of the configuration the gate certifies; ``eval propose
--apply`` carries the certificate over, since no gate section tests a mode setting
(docs/governance.md).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from pydantic import BaseModel, ConfigDict

from groundkit.client import Groundkit
from groundkit.databases import Notify, ScratchDatabases
from groundkit.errors import DatabaseUnavailable, GroundkitError, InvalidArgument
from groundkit.models import SearchHit, SearchModeSetting

if TYPE_CHECKING:
    from groundkit.quality.datasets import Collection

__all__ = [
    "GRID",
    "Candidate",
    "Judged",
    "K",
    "Proposal",
    "fuse",
    "propose",
    "propose_from_dataset",
    "propose_from_labels",
]

K: Final = 100  # each list's depth, and the ranking depth scored (recall@100's)
DEFAULT_RRF_K: Final = 20  # search_hybrid's defaults, for a setting that leaves them out
DEFAULT_DEPTH: Final = 100


@dataclass(frozen=True, slots=True)
class Candidate:
    """A search setting as auto would run it."""

    mode: str
    fusion: str = "rrf"
    rrf_k: int = DEFAULT_RRF_K
    bm25_weight: float = 1.0
    dense_weight: float = 1.0
    depth: int = DEFAULT_DEPTH

    @classmethod
    def of(cls, setting: SearchModeSetting) -> Candidate:
        if setting.mode != "hybrid":
            return cls(setting.mode)
        return cls("hybrid", setting.fusion or "rrf", DEFAULT_RRF_K if setting.rrf_k is None else setting.rrf_k,
                   1.0 if setting.bm25_weight is None else setting.bm25_weight,
                   1.0 if setting.dense_weight is None else setting.dense_weight,
                   DEFAULT_DEPTH if setting.depth is None else setting.depth)

    @property
    def label(self) -> str:
        if self.mode != "hybrid":
            return self.mode
        how = f"rrf k {self.rrf_k}" if self.fusion == "rrf" else "score"
        depth = "" if self.depth == DEFAULT_DEPTH else f", depth {self.depth}"
        return f"hybrid {how}, weights {self.bm25_weight:g}:{self.dense_weight:g}{depth}"

    def setting(self) -> dict[str, Any]:
        """Keyword arguments of :meth:`~groundkit.admin.Admin.set_search_mode` (defaults left out)."""
        if self.mode != "hybrid":
            return {"mode": self.mode}
        out: dict[str, Any] = {"mode": "hybrid"}
        for name, value, default in (("fusion", self.fusion, "rrf"), ("rrf_k", self.rrf_k, DEFAULT_RRF_K),
                                     ("bm25_weight", self.bm25_weight, 1.0),
                                     ("dense_weight", self.dense_weight, 1.0), ("depth", self.depth, DEFAULT_DEPTH)):
            if value != default:
                out[name] = value
        return out


#: the settings proposed among: each leg alone, RRF at search_hybrid's rrf_k and the textbook 60,
#: with equal weights and with either leg weighted 2x or 4x the other, and min-max score fusion
#: with equal weights and either leg weighted 2x (the forum collections' best fusion in
#: ``python -m evals.bench fusion``, docs/evals.md)
GRID: Final[tuple[Candidate, ...]] = (
    Candidate("bm25"),
    Candidate("dense"),
    *(Candidate("hybrid", "rrf", rrf_k, bm25_weight, dense_weight)
      for rrf_k in (20, 60)
      for bm25_weight, dense_weight in ((1.0, 1.0), (1.0, 0.5), (1.0, 0.25), (0.5, 1.0), (0.25, 1.0))),
    *(Candidate("hybrid", "score", DEFAULT_RRF_K, bm25_weight, dense_weight)
      for bm25_weight, dense_weight in ((1.0, 1.0), (1.0, 0.5), (0.5, 1.0))),
)


def _measured_by_search(candidate: Candidate) -> bool:
    """Whether a setting's ranking needs search itself (score fusion), not the two legs."""
    return candidate.mode == "hybrid" and candidate.fusion != "rrf"

Leg = list[tuple[str, int, float]]  # (object id, chunk seq, score), best first


@dataclass(frozen=True, slots=True)
class Judged:
    """One judged query of one content type: its two lists, its grades (object -> grade), and
    rankings measured by search itself (a score-fusion setting's)."""

    query_id: str
    bm25: Leg
    dense: Leg
    qrels: Mapping[str, int]
    measured: Mapping[Candidate, dict[str, float]] = field(default_factory=dict)


def _leg(hits: Iterable[SearchHit]) -> Leg:
    return [(h.object_id, h.chunk_seq, h.score) for h in hits]


def fuse(judged: Judged, candidate: Candidate, k: int = K) -> dict[str, float]:
    """The candidate's ranking of one query (object -> its best chunk's score), as search in its
    mode would return it at ``k``."""
    if candidate in judged.measured:
        return judged.measured[candidate]
    if candidate.mode in ("bm25", "dense"):
        leg = judged.bm25 if candidate.mode == "bm25" else judged.dense
        return _by_object(leg[:k])
    if candidate.fusion != "rrf":
        raise ValueError(f"{candidate.label} is measured by search itself, not fused here")
    depth = max(candidate.depth, k)
    b, v = judged.bm25[:depth], judged.dense[:depth]
    fused: dict[tuple[str, int], float] = defaultdict(float)
    for weight, leg in ((candidate.bm25_weight, b), (candidate.dense_weight, v)):
        for rank, (object_id, seq, _score) in enumerate(leg, start=1):
            fused[(object_id, seq)] += weight / (candidate.rrf_k + rank)
    # search_hybrid's order: fused score descending, then object id and chunk seq ascending
    ranked = sorted(fused.items(), key=lambda item: (-item[1], item[0][0], item[0][1]))[:k]
    return _by_object([(o, s, f) for (o, s), f in ranked])


def _by_object(leg: Leg) -> dict[str, float]:
    best: dict[str, float] = {}
    for object_id, _seq, s in leg:
        best.setdefault(object_id, s)  # best first: an object's first chunk is its best
    return best


class CandidateScore(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    setting: str
    ndcg_10: float
    recall_100: float


class Proposal(BaseModel):
    """One content type's proposal. ``apply``: it differs from the current setting, gains and
    p < alpha."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    content_type: str
    queries: int
    current: str
    current_ndcg_10: float
    proposed: str
    proposed_ndcg_10: float
    gain: float
    p_value: float
    apply: bool
    setting: dict[str, Any]
    candidates: tuple[CandidateScore, ...]
    applied: bool = False

    def as_json(self) -> dict[str, Any]:
        return {"kind": "proposal", **self.model_dump()}


def propose(by_type: Mapping[str, Sequence[Judged]], current: Mapping[str, Candidate], alpha: float = 0.05,
            grid: Sequence[Candidate] = GRID) -> list[Proposal]:
    """Score every candidate and the current setting on each type's judged queries; propose
    the best (see the module's docstring)."""
    return [_propose_one(t, by_type[t], current[t], alpha, grid) for t in sorted(by_type) if by_type[t]]


def _propose_one(content_type: str, judged: Sequence[Judged], now: Candidate, alpha: float,
                 grid: Sequence[Candidate]) -> Proposal:
    from groundkit.quality.metrics import per_query
    from groundkit.quality.stats import paired_test

    qrels = {j.query_id: dict(j.qrels) for j in judged}
    queries = sorted(qrels)
    # a score-fusion setting counts where search measured it for every query (it always does for
    # the queries _searches ran; hand-made judgments may leave them out)
    settings = [c for c in dict.fromkeys([now, *grid])
                if not _measured_by_search(c) or all(c in j.measured for j in judged)]
    values = {c: per_query(qrels, {j.query_id: fuse(j, c) for j in judged}) for c in settings}
    means = {c: {key: sum(values[c][q][key] for q in queries) / len(queries) for key in ("ndcg@10", "recall@100")}
             for c in settings}
    # the best by mean nDCG@10; on a tie, the current setting
    best = max(settings, key=lambda c: (round(means[c]["ndcg@10"], 12), c == now))
    gain, p = paired_test([values[best][q]["ndcg@10"] for q in queries], [values[now][q]["ndcg@10"] for q in queries])
    return Proposal(
        content_type=content_type, queries=len(queries), current=now.label, current_ndcg_10=means[now]["ndcg@10"],
        proposed=best.label, proposed_ndcg_10=means[best]["ndcg@10"], gain=gain, p_value=p,
        apply=best != now and gain > 0 and p < alpha, setting=best.setting(),
        candidates=tuple(CandidateScore(setting=c.label, ndcg_10=means[c]["ndcg@10"],
                                        recall_100=means[c]["recall@100"]) for c in settings))


def _searches(gk: Groundkit, reader: str, query: str, content_type: str, current: Candidate | None = None,
              grid: Sequence[Candidate] = GRID) -> tuple[Leg, Leg, dict[Candidate, dict[str, float]]]:
    """The two lists of one query within one type, and the rankings of the settings (the
    grid's and the current one) that cannot be fused from them (score fusion), by search."""
    bm25 = gk.search(reader, query, k=K, mode="bm25", content_types=[content_type])
    dense = gk.search(reader, query, k=K, mode="dense", content_types=[content_type])
    measured = {}
    for c in dict.fromkeys([*([current] if current is not None else []), *grid]):
        if _measured_by_search(c):
            hits = gk.search(reader, query, k=K, mode="hybrid", content_types=[content_type], fusion=c.fusion,
                             rrf_k=c.rrf_k, bm25_weight=c.bm25_weight, dense_weight=c.dense_weight, depth=c.depth)
            measured[c] = _by_object(_leg(hits))
    return _leg(bm25), _leg(dense), measured


def propose_from_labels(gk: Groundkit, path: Path, readers: Mapping[int, str] | None = None,
                        alpha: float = 0.05) -> tuple[list[Proposal], list[str]]:
    """Proposals from a labelled samples file, searched in ``gk``'s database now; and why some
    lines or queries were not used. Needs an active embedding model (dense and hybrid)."""
    from groundkit.quality.samples import _reader_for, _visibility, labelled_by_rank

    by_rank, skipped = labelled_by_rank(path)
    by_type: dict[str, list[Judged]] = defaultdict(list)
    current: dict[str, Candidate] = {}
    for rank in sorted(by_rank):
        with gk.conn.transaction(force_rollback=True):
            reader = _reader_for(gk, rank, readers or {})
            if reader is None:
                skipped.extend(f"{s.sample_id}: no tier of rank {rank} now" for s in by_rank[rank])
                continue
            for item in by_rank[rank]:
                labelled: dict[str, int] = {}
                for c in item.candidates:
                    if c.relevance is not None:
                        labelled[c.object_id] = max(labelled.get(c.object_id, 0), c.relevance)
                why = _visibility(gk, reader, sorted(labelled))
                visible = {o: g for o, g in labelled.items() if why[o] is None}
                types = _types(gk, list(visible))
                relevant_types = sorted({types[o] for o, g in visible.items() if g > 0 and o in types})
                if not relevant_types:
                    skipped.append(f"{item.sample_id}: no relevant candidate visible to rank {rank} now")
                for content_type in relevant_types:
                    if content_type not in current:
                        current[content_type] = Candidate.of(gk.auto_search_settings([content_type]))
                    try:
                        bm25, dense, measured = _searches(gk, reader, item.query, content_type, current[content_type])
                    except DatabaseUnavailable:
                        raise
                    except GroundkitError as exc:
                        skipped.append(f"{item.sample_id}: refused ({exc.sqlstate}: {exc.message})")
                        continue
                    grades = {o: g for o, g in visible.items() if types.get(o) == content_type}
                    by_type[content_type].append(Judged(item.sample_id, bm25, dense, grades, measured))
    return propose(by_type, current, alpha), skipped


def _types(gk: Groundkit, object_ids: list[str]) -> dict[str, str]:
    rows = gk._fetch("select object_id, content_type from groundkit.objects where object_id = any(%(ids)s)",
                     {"ids": object_ids})
    return {r["object_id"]: r["content_type"] for r in rows}


def propose_from_dataset(dataset: Path, target: Groundkit, server_dsn: str, content_type: str | None = None,
                         alpha: float = 0.05, embedding_cache: Path | None = None,
                         progress: Any = None, notify: Notify | None = None) -> tuple[list[Proposal], list[str]]:
    """Proposals for ``content_type`` (default: the collection's) from a BEIR folder loaded
    into a scratch database on ``server_dsn`` with the eval's model; the current setting is
    ``target``'s (the database ``--apply`` would change)."""
    import groundkit
    from groundkit.quality.datasets import load_collection
    from groundkit.quality.dense import prepare_dense
    from groundkit.quality.harness import PURPOSE, load_into_groundkit

    collection = load_collection(dataset)
    if collection.grouped:  # one space: the proposal is for the content type, not per meeting
        collection = collection.model_copy(update={"doc_groups": {}, "query_groups": {}})
    if content_type is not None:
        collection = collection.model_copy(update={"content_type": content_type})
    now = Candidate.of(target.auto_search_settings([collection.content_type]))
    judged: list[Judged] = []
    skipped: list[str] = []
    # a database of this run's own, dropped at the end (groundkit/databases.py)
    with ScratchDatabases(server_dsn, PURPOSE, notify) as scratch:
        dsn = scratch.create("propose")
        groundkit.migrate(dsn, gate=False)
        load_into_groundkit(dsn, collection, progress)
        prepare_dense(dsn, embedding_cache, progress)
        _search_dataset(dsn, collection, now, judged, skipped, progress)
    return propose({collection.content_type: judged}, {collection.content_type: now}, alpha), skipped


def _search_dataset(dsn: str, collection: Collection, now: Candidate, judged: list[Judged], skipped: list[str],
                    progress: Any) -> None:
    from groundkit.quality.harness import READER

    with Groundkit.connect(dsn) as gk:
        for n, query in enumerate(collection.queries, start=1):
            try:
                bm25, dense, measured = _searches(gk, READER, query.text, collection.content_type, now)
            except DatabaseUnavailable:
                raise
            except GroundkitError as exc:
                skipped.append(f"{query.query_id}: refused ({exc.sqlstate}: {exc.message})")
                continue
            judged.append(Judged(query.query_id, bm25, dense, collection.qrels.get(query.query_id, {}), measured))
            if progress is not None and (n % 25 == 0 or n == len(collection.queries)):
                progress("search", n, len(collection.queries))


def apply(target: Groundkit, proposals: Sequence[Proposal]) -> list[Proposal]:
    """Set each proposal marked ``apply`` on ``target`` in one transaction; the proposals with
    ``applied`` set."""
    out = []
    with target.conn.transaction():
        for p in proposals:
            if p.apply:
                target.set_search_mode(p.content_type, **p.setting)
            out.append(p.model_copy(update={"applied": p.apply}))
    return out


def check_alpha(alpha: float) -> float:
    if not 0 < alpha < 1:
        raise InvalidArgument(f"alpha must be between 0 and 1 (got {alpha!r})")
    return alpha
