"""python -m evals.bench embed-job: what the embedding job adds to the provider's own time.

The same SciFact abstracts (title + text, the first ``--docs``) are written as objects to a scratch
database, then, interleaved ``--rounds`` times in the same run: (a) the local model embeds their
chunk texts directly (``embed_documents`` in batches of ``--batch``), (b) ``groundkit embed``'s
job (``groundkit.embedding.embed_pending``: claim, embed, store, commit per batch) embeds them for a
fresh model. It prints docs/s of each (median round) and their ratio: the share of the job's time
that is the database's (claiming, storing, committing) rather than the model's.

    python -m evals.bench embed-job [--docs 1000] [--rounds 2] [--batch 64] [--dsn DSN]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Sequence

from evals.bench.common import log, scratch_db, server
from evals.bench.embed import default_data, load


def main(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m evals.bench embed-job", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--data", type=str, default=None, help="A BEIR folder (default: ../shared/datasets/beir-scifact).")
    ap.add_argument("--dsn", type=str, default=None, help="A server to make the scratch database on "
                                                          "(default: a throwaway embedded one).")
    args = ap.parse_args(list(argv))

    from pathlib import Path

    from groundkit import Groundkit, embedding, model_swap
    from groundkit.embedders import embedder_for
    from groundkit.models import ContentObject

    data = Path(args.data) if args.data else default_data()
    ids, texts, _queries, _qrels = load(data, args.docs)
    log(f"{len(texts)} abstracts from {data}; load average {os.getloadavg()[0]:.2f}")
    direct: list[float] = []
    job: list[float] = []
    with server(args.dsn) as server_dsn, scratch_db(server_dsn, "embedjob") as dsn, Groundkit.connect(dsn) as gk:
        gk.put_space("scifact")
        gk.put_objects([ContentObject(object_id=i, version=1, content_type="document", space_id="scifact",
                                      tier_visibility="T0", title="", body=t) for i, t in zip(ids, texts, strict=True)])
        chunks = [r["content"] for r in gk._fetch("select content from groundkit.chunks order by chunk_id", {})]
        log(f"{len(chunks)} chunks")
        for r in range(args.rounds):
            name = f"minilm-{r}"
            model_swap.add_model(gk, name=name, provider="local", dimension=384, distance="cosine", recipe="text")
            embedder = embedder_for(embedding.get_model(gk, name))
            embedder.embed_documents(chunks[:8])  # load the session before timing
            t0 = time.perf_counter()
            for i in range(0, len(chunks), args.batch):
                embedder.embed_documents(chunks[i:i + args.batch])
            direct.append(len(chunks) / (time.perf_counter() - t0))
            report = embedding.embed_pending(gk, embedding.get_model(gk, name), embedder, batch=args.batch)
            assert report.chunks == len(chunks), report
            job.append(report.chunks_per_s)
            log(f"round {r + 1}: direct {direct[-1]:.1f} chunks/s, groundkit embed's job {job[-1]:.1f} chunks/s")
    d, j = statistics.median(direct), statistics.median(job)
    print(f"chunks {len(chunks)}, batch {args.batch}, rounds {args.rounds}")
    print(f"provider alone      {d:8.1f} chunks/s")
    print(f"groundkit embed job {j:8.1f} chunks/s  ({j / d:.2f}x the provider alone)")
    log(f"load average after {os.getloadavg()[0]:.2f}")
    return 0
