"""The gate's dense section: the golden set through ``search_dense`` and ``search_hybrid``, and a
model swap (docs/dense.md).

Vectors come from :mod:`groundkit.gate.dense_double`, a test double no configuration can select
(the gate runs without any embedding model). Before every search the worker catches up, through
the real ``embed_claim`` / ``embed_store``, so the lag is zero and every visible chunk is
embedded: the checks are then the same as BM25's, rank aside (golden.GoldenRun, ``ranking``).
Each mode runs the whole golden set: the grid, the queries, and the scenario steps, the downgrade
and the stale re-tier among them. The swap: a second model (another dimension and recipe) is
refused at cutover while it lags, then embedded, cut over to, and rolled back from, with the grid
checked under each.

With ``GateOptions.dense_model`` (``groundkit cutover --model M`` certifying M, docs/governance.md)
the golden world is embedded with that model through its provider instead of the double (the same
definition registered in the throwaway database), queries too (each text once); the swap then goes
from it to the double and back.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal

import psycopg

from groundkit.client import Groundkit
from groundkit.embedders import EmbeddingModel
from groundkit.errors import CutoverRefused, GroundkitError, from_psycopg
from groundkit.gate.dense_double import DIMENSION, embed, embed_pending, vector_literal
from groundkit.gate.golden import GoldenRun, Hit, Searcher, load_golden, load_grid
from groundkit.gate.tap import Tap
from groundkit.gate.throwaway import GateDatabases, connect_dict
from groundkit.outbound.policy import Allowance, Classes, ClassPolicy, OutboundPolicy

FIRST = ("gate-double", DIMENSION, "titled")
SECOND = ("gate-double-b", 24, "text")


def _sql(conn: psycopg.Connection[Any], query: Any, params: Any = None) -> list[dict[str, Any]]:
    try:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []
    except psycopg.Error as exc:
        raise from_psycopg(exc) from None


def add_model(conn: psycopg.Connection[Any], name: str, dimension: int, recipe: str) -> None:
    _sql(conn, "select groundkit.add_embedding_model(%s, 'local', %s, 'cosine', %s)", (name, dimension, recipe))


def fixture_policy() -> OutboundPolicy:
    """An outbound policy under which every provider class takes the fixture's text as it is."""
    anything = ClassPolicy(allow=Allowance(private_spaces=True, owner_only=True, queries=True))
    return OutboundPolicy(classes=Classes(local=anything, private=anything, cloud=anything))


class Vectors:
    """The section's vectors: the test double's, or, for the model under test (``real``), its
    provider's, through the embedder seam; each query text is embedded once."""

    def __init__(self, real: EmbeddingModel | None = None) -> None:
        self.real = real
        self._queries: dict[tuple[str, str], str] = {}
        self._embedder: Any = None
        if real is not None:
            from groundkit.embedders import embedder_for

            # The golden world is the gate's own fixture text, not member content: it may go to the
            # model's provider whatever class the deployment's outbound policy puts it in (the gate
            # tests the model's retrieval, not the policy; docs/governance.md).
            self._embedder = embedder_for(real, policy_from=fixture_policy())  # (GK017 now, not mid-section)

    @property
    def first(self) -> tuple[str, int, str]:
        """The model the golden world is embedded with first: name, dimension, recipe."""
        return (self.real.name, self.real.dimension, self.real.recipe) if self.real is not None else FIRST

    def register_first(self, admin: psycopg.Connection[Any]) -> None:
        if self.real is None:
            add_model(admin, *FIRST)
            return
        m = self.real
        _sql(admin, "select groundkit.add_embedding_model(%s, %s, %s, %s, %s, %s::jsonb)",
             (m.name, m.provider, m.dimension, m.distance, m.recipe, json.dumps(m.options)))
        # the throwaway database's own policy, so that its embedding claim withholds no fixture text
        # from the model's provider either (embed_claim decides by the database's policy)
        _sql(admin, "select * from groundkit.set_outbound_policy(%s::jsonb, %s)",
             (json.dumps(fixture_policy().document()), "the gate's fixture text may go to the model under test"))

    def catch_up(self, admin: psycopg.Connection[Any], name: str, dimension: int) -> None:
        """Embed every current chunk lacking an embedding for ``name`` (embed_claim / embed_store)."""
        if self.real is None or name != self.real.name:
            embed_pending(admin, name, dimension)
            return
        while True:
            with admin.transaction():
                rows = _sql(admin, "select content_hash, text from groundkit.embed_claim(%s, %s)", (name, 256))
                if not rows:
                    return
                vectors = self._embedder.embed_documents([str(r["text"]) for r in rows])
                _sql(admin, "select groundkit.embed_store(%s, %s::bytea[], %s::real[])",
                     (name, [r["content_hash"] for r in rows], vectors))

    def query(self, name: str, dimension: int, text: str) -> str:
        key = (name, text)
        if key not in self._queries:
            if self.real is not None and name == self.real.name:
                self._queries[key] = vector_literal(self._embedder.embed_query(text))
            else:
                self._queries[key] = vector_literal(embed(text, dimension))
        return self._queries[key]


def dense_searcher(gk: Groundkit, admin: psycopg.Connection[Any], mode: Literal["dense", "hybrid"],
                   vectors: Vectors | None = None) -> Searcher:
    """search_dense, or search_hybrid with the match gate, as the reader; the worker first."""
    vecs = vectors or Vectors()

    def search(reader_sub: str, query: str, k: int = 10, content_types: Sequence[str] | None = None,
               space_ids: Sequence[str] | None = None) -> list[Hit]:
        active = _sql(gk.conn, "select name, dimension from groundkit.active_embedding_model()")[0]
        vecs.catch_up(admin, active["name"], active["dimension"])
        vec = vecs.query(active["name"], active["dimension"], query)
        ct = list(content_types) if content_types is not None else None
        sp = list(space_ids) if space_ids is not None else None
        if mode == "dense":
            rows = _sql(gk.conn, "select * from groundkit.search_dense(%s, %s::vector, %s, %s, %s)",
                        (reader_sub, vec, k, ct, sp))
        else:
            rows = _sql(gk.conn, "select * from groundkit.search_hybrid(%s, %s, %s::vector, %s, %s, %s,"
                        " match_gate => true)", (reader_sub, query, vec, k, ct, sp))
        return [Hit(r["object_id"], r["object_version"], r["title"], r["content"], r["snippet"] or "")
                for r in rows]

    return search


def _model_swap(run: GoldenRun, admin: psycopg.Connection[Any], tap: Tap, label: str, first: str) -> None:
    name, dimension, recipe = SECOND
    add_model(admin, name, dimension, recipe)
    try:
        _sql(admin, "select * from groundkit.cutover(%s)", (name,))
        refused = False
    except CutoverRefused:
        refused = True
    tap.check(refused, f"{label}a cutover to a model that lags is refused (GK016)")
    embed_pending(admin, name, dimension)
    _sql(admin, "select * from groundkit.cutover(%s)", (name,))
    run.check_grid(f"{label}reader x object grid matches the model after a cutover to {name} "
                   f"({dimension}-d, recipe {recipe})", None)
    _sql(admin, "select * from groundkit.cutover(%s)", (first,))
    run.check_grid(f"{label}reader x object grid matches the model after rolling back to {first}", None)


def run_section(dbs: GateDatabases, tap: Tap, opts: Any) -> None:
    _, _, grid = load_grid()
    real: EmbeddingModel | None = getattr(opts, "dense_model", None)
    try:
        vectors = Vectors(real)
    except GroundkitError as exc:
        tap.check(False, f"the embedding model {real.name if real else ''} answers", [f"{type(exc).__name__}: {exc}"])
        return
    first, first_dim, _ = vectors.first
    if real is not None:
        tap.comment(f"embedding with {real.name} ({real.provider}, {real.dimension}-d, recipe {real.recipe})")
    for mode in ("dense", "hybrid"):
        label = f"[{mode}] "
        dsn = dbs.clone()
        try:
            with Groundkit.connect(dsn) as gk, connect_dict(dsn) as admin:
                if not _sql(admin, "select groundkit._vector_schema() is not null as ok")[0]["ok"]:
                    tap.skip(f"{label}golden set through {mode} search", "pgvector is not installed")
                    continue
                vectors.register_first(admin)
                run = GoldenRun(gk, admin, dense_searcher(gk, admin, mode, vectors), tap, load_golden(), grid,
                                label=label, ranking=mode)
                if not run.setup():
                    continue
                vectors.catch_up(admin, first, first_dim)
                _sql(admin, "select * from groundkit.cutover(%s)", (first,))
                run.check_grid(f"{label}reader x object grid of the golden world matches grid.txt", grid)
                for q in run.golden.queries:
                    run.check_query(q)
                run.run_steps()
                if mode == "dense":
                    _model_swap(run, admin, tap, label, first)
        except GroundkitError as exc:
            tap.check(False, f"{label}golden set through {mode} search runs", [f"{type(exc).__name__}: {exc}"])
        finally:
            dbs.drop(dsn)
