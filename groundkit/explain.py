"""Why a member can or cannot see an object (docs/explain.md, ``groundkit explain``).

:func:`explain` asks ``groundkit.explain_visibility`` for each clause of the permission predicate
with its value for one (reader, object) pair and the clause that decides; the answer is computed
by the functions search applies (``groundkit._reader``, ``groundkit._visible_chunk``), never from
the clauses. With a query, :func:`explain` also says which of the query's terms each chunk of the
object holds (``groundkit.explain_match``) and where its chunks rank in that reader's own search.

Both SQL functions are the owner's and ``groundkit_auditor``'s only: they are an oracle no reader
may have. The ranking is the reader's search itself, run in a transaction that is rolled back
(the sampler records nothing), so it needs a login that may call ``groundkit.search``.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from groundkit import ops
from groundkit.client import Groundkit
from groundkit.errors import InvalidArgument
from groundkit.models import MAX_K, SearchMode
from groundkit.session import Session, no_nul

__all__ = ["ChunkMatch", "Clause", "QueryExplanation", "VisibilityExplanation", "explain", "explain_visibility"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Clause(_Frozen):
    """One clause of the predicate: its value for the pair, whether it holds (``None``: it
    cannot be judged, e.g. a tier clause for an object that does not exist), and whether it is
    the one that decides."""

    step: int
    clause: str
    value: str | None
    holds: bool | None
    decides: bool


class ChunkMatch(_Frozen):
    """One current chunk of the object against the query: the query's terms it holds (as BM25
    analyses them), and its place in the reader's results (1-based; ``None``: not among them)."""

    chunk_seq: int
    object_version: int
    matched: tuple[str, ...]
    rank: int | None
    score: float | None


class QueryExplanation(_Frozen):
    """The object against one query, for the reader: ``terms`` the query's analysed terms,
    ``chunks`` each current chunk's match and rank in the reader's search (``mode``, as ``auto``
    resolved; the first ``depth`` hits), ``best_rank`` the best of them."""

    query: str
    mode: SearchMode
    depth: int
    terms: tuple[str, ...]
    chunks: tuple[ChunkMatch, ...]
    best_rank: int | None


class VisibilityExplanation(_Frozen):
    """Whether ``reader_sub`` may see ``object_id`` right now, and why: every clause of the
    predicate, the last (``predicate``) being search's own answer."""

    reader_sub: str
    object_id: str
    visible: bool
    decided_by: str
    clauses: tuple[Clause, ...]
    query: QueryExplanation | None = None

    @property
    def consistent(self) -> bool:
        """Whether the listed clauses agree with search's answer: all hold exactly when it is
        visible (the gate checks this for every pair of the golden set)."""
        return self.visible == all(c.holds for c in self.clauses if c.clause != "predicate")


def explain_visibility(s: Session, reader_sub: str, object_id: str) -> VisibilityExplanation:
    """``groundkit.explain_visibility(reader_sub, object_id)``, as a model."""
    for name, value in (("reader_sub", reader_sub), ("object_id", object_id)):
        if not isinstance(value, str):
            raise InvalidArgument(f"{name} must be a string")
    no_nul(reader_sub=reader_sub, object_id=object_id)
    rows = s._fetch("select * from groundkit.explain_visibility(%(reader)s, %(object)s)",
                    {"reader": reader_sub, "object": object_id})
    clauses = tuple(Clause.model_validate(r) for r in rows)
    [answer] = [c for c in clauses if c.clause == "predicate"]
    [decider] = [c for c in clauses if c.decides]
    return VisibilityExplanation(reader_sub=reader_sub, object_id=object_id, visible=bool(answer.holds),
                                 decided_by=decider.clause, clauses=clauses)


def explain(gk: Groundkit, reader_sub: str, object_id: str, query: str | None = None, *,
            mode: SearchMode | None = None, depth: int = MAX_K) -> VisibilityExplanation:
    """:func:`explain_visibility`, and with ``query`` the object's chunks against it: the
    query's terms each holds and where each ranks among the reader's first ``depth`` hits of
    ``gk.search(reader_sub, query, mode=mode)``. That search runs in a transaction rolled back
    at once, so it records no sample."""
    explanation = explain_visibility(gk, reader_sub, object_id)
    if query is None:
        return explanation
    if isinstance(depth, bool) or not isinstance(depth, int) or not 1 <= depth <= MAX_K:
        raise InvalidArgument(f"depth must be between 1 and {MAX_K} (got {depth!r})")
    if not isinstance(query, str):
        raise InvalidArgument("query must be a string")
    no_nul(query=query)
    rows = gk._fetch("select * from groundkit.explain_match(%(object)s, %(query)s)",
                     {"object": object_id, "query": query})
    used = _resolved(gk, mode)
    with gk.conn.transaction(force_rollback=True):
        # auto as search runs it: the content types' own mode and hybrid settings too
        hits = gk.search(reader_sub, query, k=depth, mode=mode)
    ranked = {(h.object_version, h.chunk_seq): (n, h.score) for n, h in enumerate(hits, start=1)
              if h.object_id == object_id}
    chunks = tuple(ChunkMatch(chunk_seq=r["chunk_seq"], object_version=r["object_version"],
                              matched=tuple(r["matched"]),
                              rank=ranked.get((r["object_version"], r["chunk_seq"]), (None, None))[0],
                              score=ranked.get((r["object_version"], r["chunk_seq"]), (None, None))[1])
                   for r in rows if r["chunk_seq"] is not None)
    ranks = [c.rank for c in chunks if c.rank is not None]
    terms = tuple(rows[0]["terms"])
    return explanation.model_copy(update={"query": QueryExplanation(
        query=query, mode=used, depth=depth, terms=terms, chunks=chunks, best_rank=min(ranks) if ranks else None)})


def _resolved(gk: Groundkit, mode: SearchMode | None) -> SearchMode:
    """The mode ``auto`` (the default) stands for right now over every content type, as search
    resolves it (``groundkit.auto_search_settings``: a mode the content types set, docs/dense.md)."""
    if mode not in (None, "auto"):
        return mode
    return gk._run(ops.auto_mode(None))[0]
