"""python -m evals.bench SUBCOMMAND [options]: groundkit's benchmarks (docs/performance.md).

    search        the 10k/100k/1M search benchmark: groundkit.search by reader, ts_rank_cd, tantivy
    ingest        write throughput: a fresh database's one-object writes, bulk, concurrent writers
    ingest-dir    groundkit ingest over a tree of 10,000 Markdown files and of 200 PDFs; the loaders' share
    ab            paired comparison of two databases, or of two revisions' SQL on copies of one
    profile       where a search's or a write's time goes, statement by statement
    chunking      what each content type's chunker costs per object, against the text chunker
    unmaintained  search on a database nobody maintained vs the same database maintained
    sidechannel   search's time for a word only content the reader may not see holds vs an absent word
    longquery     what a query of 8, 64, 300 and 5,000 distinct words costs search (the term bound)
    snippets      the cost of search's snippets: groundkit.search with and without them
    home          the home feed (latest, top) with the permission predicate, on a copy of a kept database
    http          the HTTP retrieval API under load: concurrent clients, every answer checked for leaks
    serve-guards  the servers' timeouts: a search under a held lock, clients that trickle, connections over the cap
    runs          the overhead of a run (gk.run + run.search) over the bare search at k = 10
    chain         the audit chain's cost on a run around a search (one client, concurrent clients), and verify's
    gated         groundkit migrate and groundkit cutover with their gate against the bare change
    costs         groundkit costs (groundkit.cost_summary) over 1M metered calls, index vs seq scan
    telemetry     what spans and the sampler's draw cost a search: no package, the API alone, the SDK
    fusion        BM25 and dense fused (RRF, score; weights, depth, match gate) on BEIR collections: nDCG@10
    embed         the local embedding model's docs/s and nDCG@10 on SciFact, per variant, and PyTorch's
    embed-job     groundkit embed's job (claim, embed, store, commit) against the provider alone
    dense         the dense leg: HNSW recall@10 against the exact scan and latency, at 100 %, 10 %, 1 % visible
    policy        put_space flipping a space's policy at 100k chunks: time, rows read and written, two revisions
    replicas      searches on one server vs primary + standby behind the permission fence; the fence's write cost
    shards        two databases standing in for two shards: the fused answer against one database's (BEIR)
    console       the operator console's pages at 100k chunks: render time at the client, and its reads alone
    outbound      the outbound gate's cost per embedding batch and per LLM call (loopback), the scrubber's per chunk

`python -m evals.bench SUBCOMMAND --help` describes each.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

from evals.bench import (
    ab,
    chain,
    chunking,
    console,
    costs,
    dense,
    embed,
    embed_job,
    fusion,
    gated,
    home,
    http,
    ingest,
    ingest_dir,
    longquery,
    outbound,
    policy,
    profile,
    replicas,
    runs,
    search,
    serve_guards,
    shards,
    sidechannel,
    snippets,
    telemetry,
    unmaintained,
)

SUBCOMMANDS: dict[str, Callable[[Sequence[str]], int]] = {
    "search": search.main,
    "ingest": ingest.main,
    "ingest-dir": ingest_dir.main,
    "ab": ab.main,
    "profile": profile.main,
    "longquery": longquery.main,
    "chunking": chunking.main,
    "unmaintained": unmaintained.main,
    "sidechannel": sidechannel.main,
    "snippets": snippets.main,
    "home": home.main,
    "http": http.main,
    "serve-guards": serve_guards.main,
    "costs": costs.main,
    "runs": runs.main,
    "chain": chain.main,
    "gated": gated.main,
    "telemetry": telemetry.main,
    "fusion": fusion.main,
    "embed": embed.main,
    "embed-job": embed_job.main,
    "dense": dense.main,
    "policy": policy.main,
    "replicas": replicas.main,
    "console": console.main,
    "shards": shards.main,
    "outbound": outbound.main,
}


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in SUBCOMMANDS:
        print(__doc__, file=sys.stderr)
        return 0 if argv[:1] in (["-h"], ["--help"]) else 2
    return SUBCOMMANDS[argv[0]](argv[1:])


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
