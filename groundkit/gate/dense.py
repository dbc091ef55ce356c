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
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import psycopg

from groundkit.client import Groundkit
from groundkit.errors import CutoverRefused, GroundkitError, from_psycopg
from groundkit.gate.dense_double import DIMENSION, embed, embed_pending, vector_literal
from groundkit.gate.golden import GoldenRun, Hit, Searcher, load_golden, load_grid
from groundkit.gate.tap import Tap
from groundkit.gate.throwaway import GateDatabases, connect_dict

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


def dense_searcher(gk: Groundkit, admin: psycopg.Connection[Any], mode: Literal["dense", "hybrid"]) -> Searcher:
    """search_dense, or search_hybrid with the match gate, as the reader; the worker first."""

    def search(reader_sub: str, query: str, k: int = 10, content_types: Sequence[str] | None = None,
               space_ids: Sequence[str] | None = None) -> list[Hit]:
        active = _sql(gk.conn, "select name, dimension from groundkit.active_embedding_model()")[0]
        embed_pending(admin, active["name"], active["dimension"])
        vec = vector_literal(embed(query, active["dimension"]))
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


def _model_swap(run: GoldenRun, admin: psycopg.Connection[Any], tap: Tap, label: str) -> None:
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
    _sql(admin, "select * from groundkit.cutover(%s)", (FIRST[0],))
    run.check_grid(f"{label}reader x object grid matches the model after rolling back to {FIRST[0]}", None)


def run_section(dbs: GateDatabases, tap: Tap, opts: Any) -> None:
    _, _, grid = load_grid()
    for mode in ("dense", "hybrid"):
        label = f"[{mode}] "
        dsn = dbs.clone()
        try:
            with Groundkit.connect(dsn) as gk, connect_dict(dsn) as admin:
                if not _sql(admin, "select groundkit._vector_schema() is not null as ok")[0]["ok"]:
                    tap.skip(f"{label}golden set through {mode} search", "pgvector is not installed")
                    continue
                add_model(admin, *FIRST)
                run = GoldenRun(gk, admin, dense_searcher(gk, admin, mode), tap, load_golden(), grid, label=label,
                                ranking=mode)
                if not run.setup():
                    continue
                embed_pending(admin, FIRST[0], FIRST[1])
                _sql(admin, "select * from groundkit.cutover(%s)", (FIRST[0],))
                run.check_grid(f"{label}reader x object grid of the golden world matches grid.txt", grid)
                for q in run.golden.queries:
                    run.check_query(q)
                run.run_steps()
                if mode == "dense":
                    _model_swap(run, admin, tap, label)
        except GroundkitError as exc:
            tap.check(False, f"{label}golden set through {mode} search runs", [f"{type(exc).__name__}: {exc}"])
        finally:
            dbs.drop(dsn)
