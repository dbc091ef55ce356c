"""The HNSW indexes of an embedding model: one per visibility bucket, built concurrently, outside
any transaction (docs/dense.md, "Buckets").

``CREATE INDEX CONCURRENTLY`` cannot run inside a function or a transaction, so the indexes are
built from here, by the schema's owner, on an autocommit connection. One partial expression
index per model and bucket of ``groundkit.dense_entries``:
``((embedding::vector(dimension)) <opclass>) WHERE model = '<name>' AND vis_key = '<bucket>'::bigint
AND NOT pending``, the expression and predicate ``groundkit._search_dense_ids`` scans with, to the
letter, so a reader's search walks the entries of its own buckets only. Until a bucket's index is
valid, the dense leg reads that bucket's entries whole; it reads the pending ones (filed or moved
by writers, which the worker merges) whole too.
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
        "with (m = {m}, ef_construction = {efc}) where model = {model} and vis_key = {bucket}::bigint and not pending"
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


#: A bucket whose HNSW index is valid and at least this share of whose entries are pending (and at
#: least its threshold of them) gets its index built again rather than an insert per entry: after a
#: put_space or set_tier_rank moved many chunks, that is much the cheaper (30,000 inserts took over
#: 17 minutes under load where building that bucket's index took 21 s).
REBUILD_SHARE = 0.1


def merge_pending(conn: psycopg.Connection[Any], model: str, *, batch: int = 500,
                  maintenance_work_mem: str | None = None) -> tuple[int, list[str]]:
    """Put ``model``'s pending dense index entries (filed or moved by writers) in their buckets'
    HNSW indexes, and return how many were merged and which indexes were built again. A bucket
    with much of it pending (:data:`REBUILD_SHARE`) has its index dropped concurrently, its
    entries marked, and the index built again concurrently (readers of that bucket get the exact
    scan meanwhile); the rest are merged ``batch`` per transaction (``dense_merge_pending``).
    ``conn`` must be in autocommit mode and belong to the schema's owner."""
    if not conn.autocommit:
        raise InvalidArgument("merge_pending needs an autocommit connection (DROP / CREATE INDEX CONCURRENTLY)")
    merged = 0
    rebuilt: list[str] = []
    try:
        rows = conn.execute(
            "select s.bucket, s.entries, s.pending, s.threshold, s.index_name, s.index_valid"
            " from groundkit.hnsw_status(%s) s where s.pending > 0", (model,)).fetchall()
        for row in rows:
            bucket, entries, pending, threshold, index_name, valid = row.values() if isinstance(row, dict) else row
            if valid and pending >= threshold and pending >= REBUILD_SHARE * entries:
                conn.execute(sql.SQL("drop index concurrently if exists groundkit.{}").format(
                    sql.Identifier(index_name)))
                merged += _merge(conn, model, 100_000, bucket)
                rebuilt.append(str(index_name))
        merged += _merge(conn, model, batch, None)
    except psycopg.Error as exc:
        raise from_psycopg(exc) from None
    if rebuilt:
        built = build_hnsw_indexes(conn, model, maintenance_work_mem=maintenance_work_mem)
        rebuilt = [name for name in rebuilt if name in built]
    return merged, rebuilt


def _merge(conn: psycopg.Connection[Any], model: str, batch: int, bucket: int | None) -> int:
    """dense_merge_pending until nothing is left (each call its own transaction)."""
    total = 0
    while True:
        row = conn.execute("select groundkit.dense_merge_pending(%s, %s, %s)", (model, batch, bucket)).fetchone()
        n = int((next(iter(row.values())) if isinstance(row, dict) else row[0]) if row else 0)
        if n == 0:
            return total
        total += n
