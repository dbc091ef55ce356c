"""The dense side of ``groundkit eval quality``: the local model in the scratch database.

The eval registers all-MiniLM-L6-v2 (:data:`EVAL_MODEL`, provider ``local``, recipe ``titled``:
the text BM25 indexes), embeds every chunk through groundkit's own job (``embed_claim``, the
provider behind the seam, ``embed_store``) and makes the model active, so that the ``dense``
and ``hybrid`` arms run ``groundkit.search``'s real SQL, query embedding included.

Document vectors are cached in a file under the data directory (``eval-embeddings/``), keyed by
the model's definition and the SHA-256 of each text (the hash ``embed_claim`` keys embeddings
by), so a second run of the eval embeds nothing. Query vectors are never cached: embedding the
query is part of what a dense search costs.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final

from groundkit import embedding, model_swap
from groundkit.client import Groundkit

if TYPE_CHECKING:
    from groundkit.embedders import Embedder, EmbeddingModel

__all__ = ["EVAL_MODEL", "CachedEmbedder", "default_cache_dir", "prepare_dense"]

#: all-MiniLM-L6-v2 through the local provider, embedding the text BM25 indexes (recipe titled)
EVAL_MODEL: Final = "minilm"


def default_cache_dir() -> Path:
    from groundkit.config import Settings

    return Settings.from_env().data_home() / "eval-embeddings"


class CachedEmbedder:
    """An :class:`~groundkit.embedders.Embedder` that answers documents it has seen from a file.

    The file (``<model name>-<hash of its definition>.npz``) holds the SHA-256 of each text and
    its vector; :meth:`save` writes it atomically (a temporary file renamed over it), so
    concurrent evals never read half a file.
    """

    def __init__(self, inner: Embedder, cache_dir: Path) -> None:
        import numpy as np

        self.model: EmbeddingModel = inner.model
        self._inner = inner
        self._np = np
        key = hashlib.sha256(inner.model.model_dump_json().encode()).hexdigest()[:16]
        self.path = cache_dir / f"{inner.model.name}-{key}.npz"
        self._vectors: dict[bytes, list[float]] = {}
        self._new = 0
        if self.path.is_file():
            with np.load(self.path) as stored:
                for digest, vector in zip(stored["hashes"], stored["vectors"], strict=True):
                    self._vectors[bytes(digest)] = vector.tolist()

    def embed_documents(self, texts: Sequence[str], *, hashes: Sequence[bytes] | None = None) -> list[list[float]]:
        digests = [hashlib.sha256(t.encode("utf-8")).digest() for t in texts]
        missing: dict[bytes, str] = {}  # each new text once, in order
        recipe_hashes: dict[bytes, bytes] = {}  # (what the outbound gate decides by, passed on)
        for i, (digest, text) in enumerate(zip(digests, texts, strict=True)):
            if digest not in self._vectors:
                missing.setdefault(digest, text)
                if hashes is not None:
                    recipe_hashes.setdefault(digest, hashes[i])
        if missing:
            fresh = self._inner.embed_documents(
                list(missing.values()), hashes=[recipe_hashes[d] for d in missing] if hashes is not None else None)
            self._vectors.update(zip(missing, fresh, strict=True))
            self._new += len(missing)
        return [self._vectors[d] for d in digests]

    def embed_query(self, text: str) -> list[float]:
        return self._inner.embed_query(text)

    def save(self) -> None:
        """Write the cache if anything was embedded since it was read."""
        if not self._new:
            return
        np = self._np
        self.path.parent.mkdir(parents=True, exist_ok=True)
        hashes = np.frombuffer(b"".join(self._vectors), dtype=np.uint8).reshape(-1, 32)
        vectors = np.asarray(list(self._vectors.values()), dtype=np.float32)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, suffix=".npz.tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez(f, hashes=hashes, vectors=vectors)
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self._new = 0


def prepare_dense(dsn: str, cache_dir: Path | None = None,
                  progress: Callable[[str, int, int], None] | None = None) -> str:
    """Register :data:`EVAL_MODEL` in the database at ``dsn``, embed every chunk (from the cache
    where it can) and make it the active model; returns its name. Raises
    :class:`~groundkit.errors.PgvectorMissing` without pgvector and
    :class:`~groundkit.errors.EmbeddingProviderError` without the ``embed`` extra."""
    from groundkit.embedders import embedder_for

    with Groundkit.connect(dsn) as gk:
        embedding.require_dense(gk)
        model_swap.add_model(gk, name=EVAL_MODEL, provider="local", dimension=384, distance="cosine",
                             recipe="titled")
        model = embedding.get_model(gk, EVAL_MODEL)
        cached = CachedEmbedder(embedder_for(model, policy_from=gk), cache_dir or default_cache_dir())

        def step(done: int, total: int) -> None:
            if progress is not None:
                progress("embed", done, total)

        try:
            embedding.embed_pending(gk, model, cached, batch=256, progress=step)
        finally:
            cached.save()
        model_swap.cutover(gk, model.name)
    return model.name
