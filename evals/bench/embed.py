"""python -m evals.bench embed: the local embedding model's throughput and quality, per variant.

Every variant embeds the same SciFact abstracts (title + text, the first ``--docs``) in the same
run, interleaved ``--rounds`` times so that a change in the machine's load hits each alike; the
table gives docs/s (the median round) and nDCG@10 of the dense ranking (exact cosine in numpy
over the embedded abstracts, for the test queries whose relevant abstracts are among them), and
PyTorch's (sentence-transformers on the same weights) when torch is installed. The load average
is printed before and after: the machine is shared, and the figures are only comparable within
one run. "docs per CPU-second" divides by the CPU time the process used (all its threads): on a
loaded machine it shows the work a document takes, which the wall-clock rate hides; on 2 idle
cores a variant that keeps both busy (2 streams) reaches about twice it.

    python -m evals.bench embed [--docs 1000] [--rounds 2] [--variants NAME ...] [--data DIR]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from evals.bench.common import log


def default_data() -> Path:
    """``../shared/datasets/beir-scifact`` from the repository's root, or from a directory above
    it (a git worktree kept below the main checkout's parent)."""
    for parent in Path(__file__).resolve().parents[2].parents:
        candidate = parent / "shared" / "datasets" / "beir-scifact"
        if candidate.is_dir():
            return candidate
    return Path("../shared/datasets/beir-scifact")


# name -> the local provider's options (threads: the 2 cores the target is stated for)
VARIANTS: dict[str, dict[str, Any]] = {
    "int8 b32 on 2 threads (before)": {"sort_by_length": False, "batch_size": 32, "threads": 2, "streams": 1},
    "int8 b32 sorted on 2 threads": {"batch_size": 32, "threads": 2, "streams": 1},
    "int8 b4 sorted, 2 streams": {"batch_size": 4, "threads": 2, "streams": 2},
    "int8 b1, 2 streams (default)": {"batch_size": 1, "threads": 2, "streams": 2},
    "int8 128 tokens b1, 2 streams": {"batch_size": 1, "threads": 2, "streams": 2, "max_length": 128},
    "fp32 b1, 2 streams": {"batch_size": 1, "threads": 2, "streams": 2, "quantized": False},
}
PYTORCH = "pytorch fp32 (sentence-transformers)"

Matrix = npt.NDArray[np.float32]
Embed = Callable[[Sequence[str]], Matrix]


def load(data: Path, docs: int) -> tuple[list[str], list[str], dict[str, str], dict[str, dict[str, int]]]:
    """The first ``docs`` abstracts (ids, texts), the test queries, and their qrels restricted to those abstracts."""
    ids: list[str] = []
    texts: list[str] = []
    with (data / "corpus.jsonl").open(encoding="utf-8") as f:
        for line in f:
            if len(ids) == docs:
                break
            row = json.loads(line)
            ids.append(row["_id"])
            texts.append(f"{row['title']} {row['text']}".strip())
    queries = {}
    with (data / "queries.jsonl").open(encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            queries[row["_id"]] = row["text"]
    kept = set(ids)
    qrels: dict[str, dict[str, int]] = {}
    with (data / "qrels" / "test.tsv").open(encoding="utf-8") as f:
        next(f)
        for line in f:
            qid, did, score = line.strip().split("\t")
            if did in kept and int(score) > 0:
                qrels.setdefault(qid, {})[did] = int(score)
    return ids, texts, {q: queries[q] for q in qrels}, qrels


def ndcg_at_10(doc_vectors: Matrix, ids: list[str], query_vectors: Matrix, qids: list[str],
               qrels: dict[str, dict[str, int]]) -> float:
    """trec_eval's ndcg_cut.10 (linear gains) of the exact cosine ranking, averaged over the queries."""
    scores = query_vectors @ doc_vectors.T
    total = 0.0
    for row, qid in enumerate(qids):
        top = np.argsort(-scores[row], kind="stable")[:10]
        rel = qrels[qid]
        dcg = sum(rel.get(ids[d], 0) / math.log2(rank + 2) for rank, d in enumerate(top))
        ideal = sorted(rel.values(), reverse=True)[:10]
        total += dcg / sum(g / math.log2(rank + 2) for rank, g in enumerate(ideal))
    return total / len(qids)


def local_variant(options: dict[str, Any]) -> Embed:
    from groundkit.embedders.local import LocalOptions, LocalProvider
    from groundkit.outbound import gate

    provider = LocalProvider(LocalOptions.model_validate(options))

    def embed(texts: Sequence[str]) -> Matrix:
        # through the outbound gate, as every provider call (the default policy: local takes anything)
        return gate.send("embed_documents", gate.Destination("local", None, "minilm"), list(texts),
                         lambda t: gate.Answer(provider.embed_array(t)[0]),
                         provenance=gate.Provenance(unattributed=len(texts))).result

    return embed


def pytorch_variant() -> Embed | None:
    try:
        import torch
        from sentence_transformers import SentenceTransformer
    except ImportError:
        return None
    from groundkit.embedders.export import weights_dir

    torch.set_num_threads(2)
    model = SentenceTransformer(str(weights_dir()), device="cpu")
    model.max_seq_length = 256

    def embed(texts: Sequence[str]) -> Matrix:
        out: Matrix = model.encode(list(texts), batch_size=32, normalize_embeddings=True, convert_to_numpy=True)
        return out

    return embed


def load_line(when: str) -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {when}: {one:.2f} {five:.2f} {fifteen:.2f} ({os.cpu_count()} cores)"


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m evals.bench embed", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=None, help="a BEIR SciFact directory")
    parser.add_argument("--docs", type=int, default=1000, help="the first N abstracts (5183: all)")
    parser.add_argument("--rounds", type=int, default=2, help="timed rounds per variant, interleaved")
    parser.add_argument("--variants", nargs="*", default=[*VARIANTS, PYTORCH],
                        help=f"among: {', '.join([*VARIANTS, 'pytorch'])}")
    args = parser.parse_args(argv)
    ids, texts, queries, qrels = load(args.data or default_data(), args.docs)
    qids = list(queries)
    print(f"## Local embedding model: {len(texts)} SciFact abstracts, {len(qids)} queries with a relevant one "
          f"among them, {args.rounds} rounds")
    print(load_line("before"))
    embedders: dict[str, Embed] = {}
    for name in args.variants:
        if name in VARIANTS:
            embedders[name] = local_variant(VARIANTS[name])
        elif name in ("pytorch", PYTORCH):
            torch_embed = pytorch_variant()
            if torch_embed is None:
                print("PyTorch: not installed (sentence-transformers, torch), left out")
            else:
                embedders[PYTORCH] = torch_embed
        else:
            parser.error(f"unknown variant {name!r}")
    seconds: dict[str, list[float]] = {name: [] for name in embedders}
    cpu: dict[str, list[float]] = {name: [] for name in embedders}
    vectors: dict[str, Matrix] = {}
    for round_no in range(args.rounds):
        for name, embed in embedders.items():
            embed(texts[:8])  # warm up: first-run allocations out of the timing
            t0, c0 = time.perf_counter(), time.process_time()
            vectors[name] = embed(texts)
            seconds[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
            log(f"round {round_no + 1}: {name}: {len(texts) / seconds[name][-1]:.1f} docs/s")
    print()
    print("| variant | docs/s | docs per CPU-second | nDCG@10 | query ms |")
    print("|---|---|---|---|---|")
    for name, embed in embedders.items():
        query_vectors = embed([queries[q] for q in qids])
        t0 = time.perf_counter()
        for q in qids[:50]:
            embed([queries[q]])
        query_ms = (time.perf_counter() - t0) * 1000 / min(50, len(qids))
        score = ndcg_at_10(vectors[name], ids, query_vectors, qids, qrels)
        rate = len(texts) / statistics.median(seconds[name])
        per_cpu = len(texts) / statistics.median(cpu[name])
        print(f"| {name} | {rate:.1f} | {per_cpu:.1f} | {score:.4f} | {query_ms:.1f} |")
    print()
    print(load_line("after"))
    return 0
