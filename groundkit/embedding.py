"""The embedding job and the model registry, from Python (docs/embedding-worker.md).

:func:`embed_pending` embeds every current chunk text that lacks an embedding for a model, one
transaction per batch: ``groundkit.embed_claim`` takes a batch of texts (a transaction-level
advisory lock per text, skipped when another transaction holds it, as SKIP LOCKED would: several
processes share the work and never embed the same text twice), the provider embeds them,
``groundkit.embed_store`` writes the vectors, and the commit makes the batch count. An
interruption rolls back the batch under way and nothing else. ``groundkit embed`` and the worker
(:mod:`groundkit.maintenance`) call it; the SQL is in docs/dense.md.

Every batch goes through the outbound gate (docs/outbound.md) with its texts' hashes: the claim
never takes a text the policy keeps from the model's provider (those chunks stay BM25-only and
are reported as withheld, not as lagging), the gate checks the batch again, scrubs it where the
policy says, and meters it under the built-in flow ``indexing``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from groundkit.errors import DatabaseUnavailable, GroundkitError, InvalidArgument, PgvectorMissing, UnknownModel
from groundkit.models import MaintenanceStep
from groundkit.session import Session, no_nul
from groundkit.steps import Op, Query

if TYPE_CHECKING:
    from groundkit.embedders import Embedder, EmbeddingModel

__all__ = [
    "DEFAULT_BATCH", "EmbedPass", "EmbedReport", "EmbeddingLag", "active_model", "build_due_indexes",
    "dense_available", "embed_pending", "get_model", "lag", "list_models", "models_to_embed", "require_dense",
    "vector_literal",
]

# Texts per transaction: big enough that a provider call is worth its round trip (the local
# model batches internally), small enough that an interruption loses seconds of work.
DEFAULT_BATCH = 64
MAX_BATCH = 4096  # groundkit.embed_claim's
# the flow the embedding job's calls are metered under (built in, revision 0026)
INDEXING_FLOW = "indexing"

# progress(done, total): chunks embedded so far, and the lag when the job began
EmbedProgress = Callable[[int, int], None]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class EmbedReport(_Frozen):
    """What one :func:`embed_pending` did (``groundkit embed --json`` prints it)."""

    model: str
    chunks: int
    seconds: float
    chunks_per_s: float
    #: current chunks whose text the outbound policy keeps from the model's provider (BM25-only)
    withheld: int = 0


class EmbeddingLag(_Frozen):
    """One model's lag (``groundkit.embedding_lag``): current chunks whose text it has not
    embedded (an exact count) and since when the oldest of them waits; ``state`` is the model's
    (``active``, ``building`` while reindexed, ``inactive``). ``withheld``: chunks whose text
    the outbound policy keeps from the model's provider, not counted as missing (they stay
    BM25-only until the policy changes)."""

    model: str
    state: str
    missing: int
    oldest_at: datetime | None
    oldest_age_s: float | None
    withheld: int = 0


def vector_literal(vector: Sequence[float]) -> str:
    """pgvector's text form of a vector (``[0.1,0.2]``), sent as an untyped parameter: the SQL
    function's signature makes it a ``vector``, in whichever schema pgvector lives."""
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"


def dense_available(s: Session) -> bool:
    """Whether this database can do dense search: the pgvector extension is installed in it
    (``groundkit migrate`` creates it where the server has it). The embeddings tables exist
    everywhere; searching and indexing them needs pgvector."""
    return bool(s._scalar("select groundkit._vector_schema() is not null as ok", {}))


def require_dense(s: Session) -> None:
    """:class:`PgvectorMissing` (GK008) unless this database can do dense search."""
    if not dense_available(s):
        raise PgvectorMissing(
            "dense search needs the pgvector extension, which this database does not have "
            "(install pgvector on the server, then run `groundkit migrate`); BM25 search works without it")


def _model(row: dict[str, Any]) -> EmbeddingModel:
    from groundkit.embedders import EmbeddingModel

    options = row["options"]
    if isinstance(options, str):
        options = json.loads(options)
    return EmbeddingModel.model_validate({
        "name": row["name"], "provider": row["provider"], "dimension": row["dimension"],
        "distance": row["distance"], "recipe": row["recipe"], "options": options or {}})


# (a model's state: active; building while reindexed, revision 0023; inactive)
_MODELS = ("select name, provider, dimension, distance, recipe, options, state from ("
           " select m.*, case when m.active then 'active' when m.reindexing_at is not null then 'building'"
           "                  else 'inactive' end as state"
           "   from groundkit.embedding_models m) m")


def list_models(s: Session) -> list[tuple[EmbeddingModel, str]]:
    """Every model with its state, the active one first."""
    require_dense(s)
    rows = s._fetch(_MODELS + " order by state = 'active' desc, state = 'building' desc, name", {})
    return [(_model(r), str(r["state"])) for r in rows]


def get_model(s: Session, name: str) -> EmbeddingModel:
    """The model called ``name``; :class:`UnknownModel` (GK015) if there is none."""
    require_dense(s)
    no_nul(model=name)
    rows = s._fetch(_MODELS + " where name = %(name)s", {"name": name})
    if not rows:
        raise UnknownModel(f"no embedding model {name!r} (groundkit models list; groundkit models add)")
    return _model(rows[0])


def active_model(s: Session) -> EmbeddingModel:
    """The model search embeds queries with (``groundkit.active_embedding_model()``, which a
    reader role may call); :class:`UnknownModel` (GK015) if none is active."""
    return s._run(active_model_steps())


def active_model_steps() -> Op[EmbeddingModel]:
    """:func:`active_model` as an operation (:mod:`groundkit.steps`)."""
    rows = yield Query("select * from groundkit.active_embedding_model()")
    if not rows:
        raise UnknownModel("no embedding model is active: add one (groundkit models add), embed "
                           "(groundkit embed --model NAME), then groundkit cutover --model NAME")
    return _model(rows[0])


def models_to_embed(s: Session) -> list[EmbeddingModel]:
    """The models the worker keeps embedded: the active one and those being reindexed."""
    if not dense_available(s):
        return []
    rows = s._fetch(_MODELS + " where state in ('active', 'building') order by state = 'active' desc, name", {})
    return [_model(r) for r in rows]


def lag(s: Session, model: str | None = None) -> list[EmbeddingLag]:
    """Each model's lag (``model``: that one only), exact counts (``groundkit.embedding_lag``)."""
    require_dense(s)
    if model is not None:
        get_model(s, model)  # (GK015 for an unknown one)
    rows = s._fetch(
        "select l.name as model, l.missing, l.withheld, l.oldest as oldest_at,"
        "       case when m.active then 'active' when m.reindexing_at is not null then 'building'"
        "            else 'inactive' end as state,"
        "       extract(epoch from l.age)::float8 as oldest_age_s"
        "  from groundkit.embedding_models m"
        "  cross join lateral groundkit.embedding_lag(m.name) l"
        " where %(model)s::text is null or m.name = %(model)s"
        " order by m.active desc, m.reindexing_at is not null desc, m.name",
        {"model": model})
    return [EmbeddingLag.model_validate(r) for r in rows]


def _missing(s: Session, model: str) -> tuple[int, int]:
    rows = s._fetch("select missing, withheld from groundkit.embedding_lag(%(model)s)", {"model": model})
    return (int(rows[0]["missing"]), int(rows[0]["withheld"])) if rows else (0, 0)


def embed_pending(s: Session, model: EmbeddingModel, embedder: Embedder, *, batch: int = DEFAULT_BATCH,
                  progress: EmbedProgress | None = None) -> EmbedReport:
    """Embed every current chunk text that lacks an embedding for ``model``, ``batch`` texts per
    transaction, until none is left unclaimed; returns how many and how fast. Needs a connection
    outside a transaction (each batch commits on its own). Another process embedding the same
    model takes other batches; a text it holds is left to it."""
    if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= MAX_BATCH:
        raise InvalidArgument(f"batch must be between 1 and {MAX_BATCH} (got {batch!r})")
    if not s._outside_transaction():
        raise InvalidArgument("embed_pending commits batch by batch: give it an autocommit connection "
                              "outside a transaction")
    require_dense(s)
    total, withheld = _missing(s, model.name)
    embedder = _bound(embedder, s)
    done = 0
    t0 = time.perf_counter()
    if progress is not None:
        progress(0, total)
    while True:
        n = _one_batch(s, model, embedder, batch)
        if n == 0:
            break
        done += n
        if progress is not None:
            progress(done, max(total, done))
    seconds = time.perf_counter() - t0
    if done or withheld:  # (what a policy change since the start withheld is counted again)
        withheld = _missing(s, model.name)[1]
    return EmbedReport(model=model.name, chunks=done, seconds=round(seconds, 3),
                       chunks_per_s=round(done / seconds, 1) if seconds > 0 else 0.0, withheld=withheld)


def _bound(embedder: Embedder, s: Session) -> Embedder:
    """``embedder`` reading the outbound policy from ``s`` and recording (and metering, under
    ``indexing``) its decisions there, in each batch's transaction."""
    from groundkit.embedders import _Seam

    return embedder.bound(s, INDEXING_FLOW) if isinstance(embedder, _Seam) else embedder


def _one_batch(s: Session, model: EmbeddingModel, embedder: Embedder, batch: int) -> int:
    """Claim, embed and store one batch in one transaction; the number of texts (0: none left)."""
    with s._errors(), s.conn.transaction():
        rows = s._fetch("select content_hash, text from groundkit.embed_claim(%(model)s, %(batch)s)",
                        {"model": model.name, "batch": batch})
        if not rows:
            return 0
        vectors = embedder.embed_documents([r["text"] for r in rows],
                                           hashes=[bytes(r["content_hash"]) for r in rows])
        s._fetch("select groundkit.embed_store(%(model)s, %(hashes)s::bytea[], %(vectors)s::real[])",
                 {"model": model.name, "hashes": [r["content_hash"] for r in rows], "vectors": vectors})
        return len(rows)


# -- the worker's embedding pass ---------------------------------------------------------------

# Pending dense index entries merged per transaction (each an HNSW insert, about 1 ms at 384-d).
DENSE_MERGE_BATCH = 500

# The longest the worker skips embedding after provider failures (doubling from one pass).
EMBED_BACKOFF_MAX_S = 300.0


class EmbedPass:
    """What the worker does after each maintenance pass: for every model that is active or being
    reindexed, embed what it lacks, then build each of its buckets' HNSW indexes that is due. Keeps one embedder
    per model across passes (loading the local model takes seconds). A failure (a provider down,
    a bad answer) is returned, not raised, and embedding is skipped for a while, doubling from
    one pass interval up to :data:`EMBED_BACKOFF_MAX_S`; the maintenance jobs go on meanwhile."""

    def __init__(self, every: float | None, *, batch: int = DEFAULT_BATCH) -> None:
        self.every = every
        self.batch = batch
        self.failures = 0
        self.resume_at = 0.0
        #: the failure embedding backs off from (None once a pass embeds again): the worker's
        #: heartbeat shows it on every pass until then
        self.failing: GroundkitError | None = None
        self._embedders: dict[str, Embedder] = {}

    def embedder(self, model: EmbeddingModel) -> Embedder:
        from groundkit.embedders import embedder_for

        key = model.model_dump_json()
        if key not in self._embedders:
            self._embedders[key] = embedder_for(model)
        return self._embedders[key]

    def run(self, s: Session, progress: EmbedProgressByModel | None = None
            ) -> tuple[list[MaintenanceStep], GroundkitError | None]:
        """One pass: the steps it ran (``embed`` per model that had something to embed, ``hnsw``
        per model whose bucket indexes were built, ``count`` of them) and the failure that stopped it, if one did."""
        steps: list[MaintenanceStep] = []
        if time.monotonic() < self.resume_at:
            return steps, None
        try:
            for model in models_to_embed(s):
                report = embed_pending(s, model, self.embedder(model), batch=self.batch,
                                       progress=None if progress is None else _for_model(progress, model.name))
                if report.chunks:
                    steps.append(MaintenanceStep(name="embed", reason=model.name, count=report.chunks,
                                                 seconds=report.seconds))
                steps += build_due_indexes(s, [model.name])
        except DatabaseUnavailable:
            raise
        except GroundkitError as exc:
            self.failures += 1
            self.failing = exc
            wait = min((self.every or 1.0) * 2 ** (self.failures - 1), EMBED_BACKOFF_MAX_S)
            self.resume_at = time.monotonic() + wait
            return steps, exc
        self.failures = 0
        self.failing = None
        return steps, None


# progress(model, done, total)
EmbedProgressByModel = Callable[[str, int, int], None]


def _for_model(progress: EmbedProgressByModel, model: str) -> EmbedProgress:
    return lambda done, total: progress(model, done, total)


def build_due_indexes(s: Session, models: Sequence[str]) -> list[MaintenanceStep]:
    """The dense index's upkeep after embedding (docs/dense.md, "Buckets"), for each of
    ``models``: check again the texts stored while a writer may have written a chunk of them
    (``groundkit.dense_recheck``); merge the entries writers filed or moved into their buckets'
    HNSW indexes (``groundkit.dense.merge_pending``); build the HNSW index of each bucket that
    has enough entries and none yet (concurrently, so searches and the embedding go on)."""
    from groundkit.dense import build_hnsw_indexes, merge_pending

    steps = []
    for name in models:
        s._scalar("select groundkit.dense_recheck(%(model)s)", {"model": name})
        t = time.perf_counter()
        merged, built = merge_pending(s.conn, name, batch=DENSE_MERGE_BATCH)
        if merged:
            steps.append(MaintenanceStep(name="dense", reason=name, count=merged,
                                         seconds=round(time.perf_counter() - t, 3)))
        t = time.perf_counter()
        if s._scalar("select coalesce(bool_or(due), false) from groundkit.hnsw_status(%(model)s)", {"model": name}):
            built += build_hnsw_indexes(s.conn, name)
        if built:
            steps.append(MaintenanceStep(name="hnsw", reason=name, count=len(built),
                                         seconds=round(time.perf_counter() - t, 3)))
    return steps
