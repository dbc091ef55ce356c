"""The ``local`` provider: all-MiniLM-L6-v2 run with onnxruntime, tokenized with ``tokenizers``.

Vectors are sentence-transformers' for this model: the mean of the last hidden states over the
real tokens, L2-normalised. Texts are cut at ``max_length`` tokens (256, the model's maximum; the
bundled ``tokenizer.json`` says 128 and pads every text to it, so both are overridden here).

Speed (docs/embeddings.md, ``python -m evals.bench embed``): by default each text is its own
onnxruntime run (batch 1: no padding, and the fewest cache misses: a batch of 8 texts of 256
tokens has 25 MB of attention scores), and as many runs go at once as there are cores, each on
one thread (onnxruntime releases the GIL). Per CPU-second that does about a quarter more than
batches of 32 on two intra-op threads, and far more on a loaded machine, where threads that
wait for each other lose their turn. Batch 1 also makes a text's vector independent of its
neighbours: dynamic int8 quantization scales each run's activations together.

Options (``EmbeddingModel.options``): ``batch_size`` (1: texts per run; larger batches are sorted
by length, so each pads only to its longest text), ``max_length`` (256), ``threads`` (the usable
cores), ``streams`` (runs at once, each on threads / streams threads; default: one per thread),
``sort_by_length`` (true), ``quantized`` (true: the int8 export; false: fp32, for comparison).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from groundkit.embedders.export import INSTALL_EMBED, ensure_export, weights_dir
from groundkit.errors import EmbeddingProviderError

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["DIMENSION", "LocalOptions", "LocalProvider"]

MODEL_MAX_TOKENS = 256
#: the model's vectors' dimension (``groundkit models add NAME --provider local`` needs no other)
DIMENSION = 384


class LocalOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    batch_size: int = Field(1, ge=1, le=1024)
    max_length: int = Field(MODEL_MAX_TOKENS, ge=8, le=MODEL_MAX_TOKENS)
    threads: int | None = Field(None, ge=1, le=256)
    streams: int | None = Field(None, ge=1, le=64)
    sort_by_length: bool = True
    quantized: bool = True


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


class LocalProvider:
    """all-MiniLM-L6-v2 in this process. Build it with :meth:`from_options` (or
    :func:`groundkit.embedders.embedder_for`); the export is made at first use if not cached."""

    def __init__(self, options: LocalOptions, model_path: Path | None = None) -> None:
        try:
            import numpy as np
            import onnxruntime as ort
            from tokenizers import Tokenizer
        except ImportError as exc:
            missing = exc.name
        else:
            missing = None
        if missing is not None:  # raised outside the handler: nothing to chain
            raise EmbeddingProviderError(f"the local embedding model needs {missing}: {INSTALL_EMBED}")
        self.options = options
        self._np = np
        self.tokenizer = Tokenizer.from_file(str(weights_dir() / "tokenizer.json"))
        self.tokenizer.no_padding()  # pad per batch below, to the batch's longest text
        self.tokenizer.enable_truncation(max_length=options.max_length)
        path = model_path or ensure_export(quantized=options.quantized)
        session_options = ort.SessionOptions()
        # streams > 1: that many batches run at once (onnxruntime releases the GIL), each on
        # threads // streams cores, instead of one batch spread over every core
        threads = options.threads or _usable_cores()
        self.streams = options.streams or threads
        session_options.intra_op_num_threads = max(1, threads // self.streams)
        session_options.inter_op_num_threads = 1
        session_options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        session_options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        session_options.log_severity_level = 3
        self.session = ort.InferenceSession(str(path), session_options, providers=["CPUExecutionProvider"])

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> LocalProvider:
        try:
            parsed = LocalOptions.model_validate(options)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
            raise EmbeddingProviderError(f"the local provider's options are not valid: {problems}") from None
        return cls(parsed)

    def embed(self, texts: Sequence[str], *, query: bool) -> tuple[list[list[float]], int]:
        vectors, tokens = self.embed_array(texts)
        return vectors.tolist(), tokens

    def embed_array(self, texts: Sequence[str]) -> tuple[npt.NDArray[np.float32], int]:
        """The vectors as one float32 array (row i: text i), and the tokens embedded. Only inside
        the outbound gate (:func:`groundkit.outbound.gate.send`), like every provider."""
        from groundkit.outbound.gate import require_ticket

        require_ticket("the local embedding model", None)
        xp = self._np
        encodings = self.tokenizer.encode_batch(list(texts), add_special_tokens=True)
        lengths = xp.fromiter((len(e.ids) for e in encodings), dtype=xp.int64, count=len(encodings))
        if self.options.sort_by_length:  # longest first: the first batch shows the peak memory
            order = xp.argsort(-lengths, kind="stable")
        else:
            order = xp.arange(len(encodings))
        out = xp.empty((len(encodings), DIMENSION), dtype=xp.float32)
        size = self.options.batch_size
        batches = [order[start:start + size] for start in range(0, len(order), size)]

        def run(rows: Any) -> None:
            out[rows] = self._run([encodings[i] for i in rows], int(lengths[rows].max()))

        if self.streams == 1 or len(batches) == 1:
            for rows in batches:
                run(rows)
        else:
            with ThreadPoolExecutor(self.streams) as pool:
                list(pool.map(run, batches))
        return out, int(lengths.sum())

    def _run(self, batch: list[Any], width: int) -> npt.NDArray[np.float32]:
        xp = self._np
        ids = xp.zeros((len(batch), width), dtype=xp.int64)
        mask = xp.zeros((len(batch), width), dtype=xp.int64)
        for row, encoding in enumerate(batch):
            n = len(encoding.ids)
            ids[row, :n] = encoding.ids
            mask[row, :n] = 1
        (hidden,) = self.session.run(["last_hidden_state"], {
            "input_ids": ids, "attention_mask": mask, "token_type_ids": xp.zeros_like(ids)})
        weights = mask[:, :, None].astype(xp.float32)
        pooled = (hidden * weights).sum(axis=1) / xp.maximum(weights.sum(axis=1), 1e-9)
        norms = xp.linalg.norm(pooled, axis=1, keepdims=True)
        result: npt.NDArray[np.float32] = (pooled / xp.maximum(norms, 1e-12)).astype(xp.float32)
        return result
