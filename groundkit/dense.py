"""The HNSW index of an embedding model: built concurrently, outside any transaction (docs/dense.md).

``CREATE INDEX CONCURRENTLY`` cannot run inside a function or a transaction, so the index is
built from here, by the schema's owner, on an autocommit connection. One partial expression index
per model: ``((embedding::vector(dimension)) <opclass>) WHERE model = '<name>'``, the expression
``groundkit._search_dense_ids`` orders by, to the letter. Until it is valid, the dense leg scans
exactly.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from groundkit.errors import InvalidArgument, from_psycopg

OPCLASS = {"cosine": "vector_cosine_ops", "l2": "vector_l2_ops", "inner_product": "vector_ip_ops"}


def hnsw_index_sql(vector_schema: str, index_name: str, model: str, dimension: int, distance: str,
                   m: int = 16, ef_construction: int = 64) -> sql.Composed:
    """The CREATE INDEX CONCURRENTLY statement of a model's HNSW index (names and values quoted)."""
    return sql.SQL(
        "create index concurrently if not exists {idx} on groundkit.embeddings "
        "using hnsw ((embedding::{vs}.vector({dim})) {vs}.{opclass}) "
        "with (m = {m}, ef_construction = {efc}) where model = {model}"
    ).format(idx=sql.Identifier(index_name), vs=sql.Identifier(vector_schema), dim=sql.Literal(dimension),
             opclass=sql.Identifier(OPCLASS[distance]), m=sql.Literal(m), efc=sql.Literal(ef_construction),
             model=sql.Literal(model))


def build_hnsw_index(conn: psycopg.Connection[Any], model: str, *, m: int = 16, ef_construction: int = 64,
                     maintenance_work_mem: str | None = None) -> str:
    """Build ``model``'s HNSW index concurrently (searches and the worker go on meanwhile) and
    return its name. Idempotent: a valid index is kept; an invalid one (an interrupted build) is
    dropped and built again. ``conn`` must be in autocommit mode and belong to the schema's owner.
    GK015 for an unknown model, GK008 without pgvector."""
    if not conn.autocommit:
        raise InvalidArgument("build_hnsw_index needs an autocommit connection (CREATE INDEX CONCURRENTLY)")
    if not (2 <= m <= 100 and 4 <= ef_construction <= 1000):
        raise InvalidArgument("m must be 2-100 and ef_construction 4-1000")
    try:
        row = conn.execute(
            "select s.index_name, s.index_valid, s.dimension, s.distance, groundkit._vector_schema() "
            "from groundkit.hnsw_status(%s) s", (model,)).fetchone()
        assert row is not None
        index_name, valid, dimension, distance, vector_schema = (
            row.values() if isinstance(row, dict) else row)
        if valid:
            return str(index_name)
        if maintenance_work_mem is not None:
            conn.execute("select set_config('maintenance_work_mem', %s, false)", (maintenance_work_mem,))
        # an interrupted concurrent build leaves an invalid index behind
        conn.execute(sql.SQL("drop index concurrently if exists groundkit.{}").format(sql.Identifier(index_name)))
        conn.execute(hnsw_index_sql(vector_schema, index_name, model, dimension, distance, m, ef_construction))
        conn.execute("select groundkit._hnsw_built(%s)", (model,))
    except psycopg.Error as exc:
        raise from_psycopg(exc) from None
    return str(index_name)
