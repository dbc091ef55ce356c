"""Dense retrieval in one step (``groundkit dense enable``; docs/dense.md, "In one step").

:func:`enable` registers the local model (all-MiniLM-L6-v2, its dimension known), marks it
being built (so a running worker helps, and an interrupted run leaves it to the worker), embeds
every current chunk, and makes it the active model once its lag is zero: search's ``auto`` mode
is then hybrid. With ``now`` it is made active first, and hybrid covers the chunks not embedded
yet by their BM25 leg until the embedding catches up.

Making the model active goes through ``activate`` (the caller's): ``groundkit dense enable``
passes the same function ``groundkit cutover`` uses, so whatever that command does before a
switch applies here too.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict

from groundkit import embedding, model_swap
from groundkit.errors import CutoverRefused, InvalidArgument

if TYPE_CHECKING:
    from groundkit.client import Groundkit
    from groundkit.embedders import Embedder, EmbeddingModel

__all__ = ["DEFAULT_MODEL", "EnableReport", "enable", "local_model", "register_local"]

#: the name ``groundkit dense enable`` registers the local model under
DEFAULT_MODEL = "minilm"
# How many times the lag is embedded down to zero again when content keeps arriving between
# the last batch and the switch (each round embeds only what arrived during the one before).
CATCH_UP_ROUNDS = 5

# activate(model, force) -> the model it replaced (None: none was active)
Activate = Callable[[str, bool], "str | None"]


class EnableReport(BaseModel):
    """What :func:`enable` did: whether it registered the model, how many chunks it embedded
    and how fast, and when the model became active (``now``: before embedding; ``caught up``:
    once its lag was zero; ``already``: it was active before)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str
    registered: bool
    chunks: int
    seconds: float
    chunks_per_s: float
    activated: Literal["now", "caught up", "already"]


def local_model(name: str = DEFAULT_MODEL) -> EmbeddingModel:
    """The local model's definition: all-MiniLM-L6-v2, 384 dimensions, cosine, the ``titled``
    recipe (the chunk under its title and headings, as BM25 indexes it)."""
    from groundkit.embedders import EmbeddingModel
    from groundkit.embedders.local import DIMENSION

    return EmbeddingModel(name=name, provider="local", dimension=DIMENSION, distance="cosine", recipe="titled")


def register_local(gk: Groundkit, name: str = DEFAULT_MODEL) -> tuple[EmbeddingModel, bool]:
    """The local model under ``name``, registered now if it was not (``True``); a model of
    that name with another definition is :class:`InvalidArgument`, nothing changed."""
    wanted = local_model(name)
    try:
        existing = embedding.get_model(gk, name)
    except InvalidArgument as exc:  # UnknownModel (GK015)
        if exc.sqlstate != "GK015":
            raise
    else:
        if existing.provider != "local" or existing.dimension != wanted.dimension:
            raise InvalidArgument(f"embedding model {name!r} is already registered as {existing.provider}, "
                                  f"{existing.dimension} dimensions: choose another name (--model)")
        return existing, False
    model_swap.add_model(gk, name=name, provider="local", dimension=wanted.dimension, distance=wanted.distance,
                         recipe=wanted.recipe)
    return embedding.get_model(gk, name), True


def enable(gk: Groundkit, activate: Activate, *, name: str = DEFAULT_MODEL, now: bool = False,
           batch: int = embedding.DEFAULT_BATCH, progress: embedding.EmbedProgress | None = None,
           embedder: Embedder | None = None) -> EnableReport:
    """Register the local model as ``name``, embed every current chunk with it and make it the
    active model through ``activate(name, force)``: once its lag is zero, or (``now``) first.
    Refused (:class:`InvalidArgument`) while another model is active: swapping models is
    ``reindex``, ``shadow-compare`` and ``cutover``. Needs an autocommit connection (each
    batch commits) and pgvector (:class:`~groundkit.errors.PgvectorMissing`); a missing
    ``embed`` extra is :class:`~groundkit.errors.EmbeddingProviderError` before anything is
    registered."""
    from groundkit.embedders import embedder_for

    embedding.require_dense(gk)
    active = _active_name(gk)
    if active is not None and active != name:
        raise InvalidArgument(f"{active!r} is the active embedding model; to replace it: groundkit models add, "
                              "groundkit reindex --model NAME, groundkit shadow-compare, groundkit cutover")
    embedder = embedder or embedder_for(local_model(name))  # (loads the model: a missing extra fails here)
    model, registered = register_local(gk, name)
    activated: Literal["now", "caught up", "already"] = "already"
    if active is None:
        model_swap.start_reindex(gk, name)  # the worker helps; an interrupted run leaves it to the worker
        if now:
            activate(name, True)
            activated = "now"
    t0 = time.perf_counter()
    done = 0
    for _round in range(CATCH_UP_ROUNDS):
        done += embedding.embed_pending(gk, model, embedder, batch=batch, progress=progress).chunks
        if active is not None or now:  # active already: nothing to switch
            break
        try:
            activate(name, False)
        except CutoverRefused:  # new content, or texts another process holds: embed again
            time.sleep(0.2)
            continue
        activated = "caught up"
        break
    else:
        raise CutoverRefused(f"{name}: content kept arriving faster than it was embedded; it stays being built "
                             f"(the worker embeds it): run groundkit dense enable again, or with --now")
    seconds = time.perf_counter() - t0
    return EnableReport(model=name, registered=registered, chunks=done, seconds=round(seconds, 3),
                        chunks_per_s=round(done / seconds, 1) if seconds > 0 else 0.0, activated=activated)


def _active_name(gk: Groundkit) -> str | None:
    rows = gk._fetch("select name from groundkit.active_embedding_model()", {})
    return str(rows[0]["name"]) if rows else None
