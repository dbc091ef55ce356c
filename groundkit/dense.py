"""The HNSW indexes of an embedding model: one per visibility bucket, built concurrently, outside
any transaction (docs/dense.md, "Buckets").

``CREATE INDEX CONCURRENTLY`` cannot run inside a function or a transaction, so the indexes are
built from here, by the schema's owner, on an autocommit connection. One partial expression
index per model and bucket of ``groundkit.dense_entries``:
``((embedding::vector(dimension)) <opclass>) WHERE model = '<name>' AND vis_key = '<bucket>'::bigint``,
the expression and predicate ``groundkit._search_dense_ids`` scans with, to the letter, so a
reader's search walks the entries of its own buckets only. Until a bucket's index is valid, the
dense leg reads that bucket's entries whole.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from groundkit.errors import InvalidArgument, from_psycopg

OPCLASS = {"cosine": "vector_cosine_ops", "l2": "vector_l2_ops", "inner_product": "vector_ip_ops"}


def hnsw_index_sql(vector_schema: str, index_name: str, model: str, bucket: int, dimension: int, distance: str,
                   m: int = 16, ef_construction: int = 64) -> sql.Composed:
    """The CREATE INDEX CONCURRENTLY statement of a bucket's HNSW index (names and values quoted)."""
    return sql.SQL(
        "create index concurrently if not exists {idx} on groundkit.dense_entries "
        "using hnsw ((embedding::{vs}.vector({dim})) {vs}.{opclass}) "
        "with (m = {m}, ef_construction = {efc}) where model = {model} and vis_key = {bucket}::bigint"
    ).format(idx=sql.Identifier(index_name), vs=sql.Identifier(vector_schema), dim=sql.Literal(dimension),
             opclass=sql.Identifier(OPCLASS[distance]), m=sql.Literal(m), efc=sql.Literal(ef_construction),
             model=sql.Literal(model), bucket=sql.Literal(str(bucket)))


def build_hnsw_indexes(conn: psycopg.Connection[Any], model: str, *, m: int = 16, ef_construction: int = 64,
                       maintenance_work_mem: str | None = None, min_entries: int | None = None) -> list[str]:
    """Build the HNSW index of each of ``model``'s buckets that is due (``hnsw_status``: at least
    its threshold of entries, no valid index; with ``min_entries``, that many entries instead),
    concurrently (searches and the worker go on meanwhile), and return their names. Idempotent:
    a valid index is kept; an invalid one (an interrupted build) is dropped and built again.
    ``conn`` must be in autocommit mode and belong to the schema's owner. GK015 for an unknown
    model, GK008 without pgvector."""
    if not conn.autocommit:
        raise InvalidArgument("build_hnsw_indexes needs an autocommit connection (CREATE INDEX CONCURRENTLY)")
    if not (2 <= m <= 100 and 4 <= ef_construction <= 1000):
        raise InvalidArgument("m must be 2-100 and ef_construction 4-1000")
    if min_entries is not None and min_entries < 1:
        raise InvalidArgument("min_entries must be at least 1")
    built: list[str] = []
    try:
        rows = conn.execute(
            "select s.bucket, s.entries, s.index_name, s.index_valid, s.due, s.dimension, s.distance,"
            " groundkit._vector_schema() from groundkit.hnsw_status(%s) s", (model,)).fetchall()
        for row in rows:
            bucket, entries, index_name, valid, due, dimension, distance, vector_schema = (
                row.values() if isinstance(row, dict) else row)
            wanted = due if min_entries is None else (bucket is not None and entries >= min_entries and not valid)
            if not wanted:
                continue
            if maintenance_work_mem is not None:
                conn.execute("select set_config('maintenance_work_mem', %s, false)", (maintenance_work_mem,))
            # an interrupted concurrent build leaves an invalid index behind
            conn.execute(sql.SQL("drop index concurrently if exists groundkit.{}").format(sql.Identifier(index_name)))
            conn.execute(hnsw_index_sql(vector_schema, index_name, model, bucket, dimension, distance, m,
                                        ef_construction))
            built.append(str(index_name))
        if built:
            conn.execute("select groundkit._hnsw_built(%s)", (model,))
    except psycopg.Error as exc:
        raise from_psycopg(exc) from None
    return built
