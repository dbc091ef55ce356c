"""A TEST DOUBLE of an embedding model, for the gate and the tests: deterministic, offline, and not
a provider. No configuration can select it (groundkit's providers are ``local``, ``ollama`` and
``openai``; ``embedding_models.provider`` admits nothing else). Dense search must be correct
whatever the vectors are; this one only needs texts that share words to lie close together.

Each word (lower-cased letters and digits) adds a fixed pseudo-random unit vector, derived from its
SHA-256; the sum is normalised. Texts without words map to a fixed unit vector.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence
from typing import Any

import psycopg

DIMENSION = 32
_WORD = re.compile(r"[a-z0-9]+")


def _word_vector(word: str, dimension: int) -> list[float]:
    raw = hashlib.sha256(word.encode("utf-8")).digest() * ((dimension + 31) // 32)
    return [(b - 127.5) / 127.5 for b in raw[:dimension]]


def embed(text: str, dimension: int = DIMENSION) -> list[float]:
    """The double's embedding of ``text``: a unit vector of ``dimension`` floats."""
    acc = [0.0] * dimension
    for word in _WORD.findall(text.lower()):
        for i, x in enumerate(_word_vector(word, dimension)):
            acc[i] += x
    norm = math.sqrt(sum(x * x for x in acc))
    if norm == 0:
        acc, norm = [1.0] + [0.0] * (dimension - 1), 1.0
    return [x / norm for x in acc]


def vector_literal(vec: Sequence[float]) -> str:
    """pgvector's text form of a vector."""
    return "[" + ",".join(f"{x:.7g}" for x in vec) + "]"


def embed_pending(conn: psycopg.Connection[Any], model: str, dimension: int = DIMENSION, batch: int = 256) -> int:
    """Embed every current chunk lacking an embedding for ``model`` through the real worker
    functions (embed_claim, embed_store), one transaction per batch. Returns how many it stored.
    ``conn`` must be in autocommit mode."""
    stored = 0
    while True:
        with conn.transaction():
            rows = conn.execute("select content_hash, text from groundkit.embed_claim(%s, %s)",
                                (model, batch)).fetchall()
            if not rows:
                return stored
            hashes = [_col(r, 0, "content_hash") for r in rows]
            vectors = [embed(str(_col(r, 1, "text")), dimension) for r in rows]
            row = conn.execute("select groundkit.embed_store(%s, %s::bytea[], %s::real[]) as n",
                               (model, hashes, vectors)).fetchone()
            stored += int(_col(row, 0, "n"))


def _col(row: Any, index: int, name: str) -> Any:
    return row[name] if isinstance(row, dict) else row[index]
