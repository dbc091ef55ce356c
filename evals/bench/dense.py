"""The dense leg at scale: recall@10 of the HNSW path against the exact scan, and latency, by the
reader's visible fraction.

    python -m evals.bench dense --chunks 100000            # a throwaway embedded server
    python -m evals.bench dense --dsn URL --chunks 100000  # a scratch database on URL's server

The database: ``--chunks`` one-chunk objects in one open space, written with ``put_objects``;
one in 100 at tier T0, one in 10 at T0 or T1, the rest at T2, so the readers ``v1`` (T0), ``v10``
(T1) and ``v100`` (T2) see 1 %, 10 % and 100 % of them. Synthetic 384-d vectors, clustered (100
random centres, each vector a centre plus uniform noise), so that recall means something; they are
generated in SQL and stored with ``groundkit.embed_store`` (which files them in the dense index's
buckets; the embedding itself is not what is measured). Then the HNSW index of each bucket
(``groundkit.dense.build_hnsw_indexes``, m 16, ef_construction 64): T0, T1 and T2, one each.
Queries: a centre plus the same noise.

Arms, per reader, every query back to back in turns, through ``groundkit.search_dense`` at k = 10:
``exact`` (``exact => true``), ``index`` (the HNSW path whatever the visible set:
``groundkit.dense_exact_max = 0``; it still finishes exactly when the index yields fewer than k)
and ``auto`` (what search_dense chooses). Recall@10 of ``index`` and ``auto`` against ``exact``;
ms per query p50 / p95.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Sequence

import psycopg

from evals.bench.common import log, pct, scratch_db, server, timed
from groundkit.dense import build_hnsw_indexes

MODEL = "bench-384"
DIM = 384
CENTRES = 100
NOISE = 0.35
READERS = {"v100": "T2", "v10": "T1", "v1": "T0"}


def load(dsn: str, n: int, seed: int) -> list[list[float]]:
    """The objects, their embeddings and the HNSW index; returns the centres."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("select groundkit.put_space('s', 'T0', false)")
        for reader, tier in READERS.items():
            conn.execute("select groundkit.put_member(%s, %s)", (reader, tier))
        conn.execute("select groundkit.add_embedding_model(%s, 'local', %s, 'cosine', 'text')", (MODEL, DIM))
        t0 = time.perf_counter()
        batch = 5000
        for lo in range(0, n, batch):
            conn.execute(
                """select count(*) from groundkit.put_objects((
                     select jsonb_agg(jsonb_build_object(
                         'object_id', 'd' || i, 'version', 1, 'content_type', 'document', 'space_id', 's',
                         'tier_visibility', case when i %% 100 = 0 then 'T0' when i %% 10 = 0 then 'T1' else 'T2' end,
                         'title', '', 'body', 'document number ' || i))
                       from generate_series(%s::integer, %s::integer) i))""", (lo, min(n, lo + batch) - 1))
        log(f"{n} objects in {time.perf_counter() - t0:.0f} s")
        rng = random.Random(seed)
        centres = [[rng.uniform(-1, 1) for _ in range(DIM)] for _ in range(CENTRES)]
        conn.execute("create temp table centres (c integer primary key, v real[])")
        with conn.cursor().copy("copy centres (c, v) from stdin") as cp:
            for c, v in enumerate(centres):
                cp.write_row((c, v))
        row = conn.execute("select coalesce(max(chunk_id), 0) from groundkit.chunks").fetchone()
        last = int(row[0]) if row else 0
        seconds, _ = timed(lambda: (
            conn.execute("select setseed(%s)", (seed % 1000 / 1000,)),
            [conn.execute(
                """select groundkit.embed_store(%s, array_agg(x.h), array_agg(x.v))
                     from (select ch.embed_hash_text as h,
                                  array(select (ce.v[d] + (random() * 2 - 1) * %s)::real
                                          from generate_series(1, %s) d) as v
                             from groundkit.chunks ch
                             join centres ce on ce.c = (hashtext(ch.object_id) & 2147483647) %% %s
                            where ch.chunk_id between %s and %s) x""",
                (MODEL, NOISE, DIM, CENTRES, lo, lo + 4999)) for lo in range(1, last + 1, 5000)]))
        log(f"{n} embeddings in {seconds:.0f} s")
        missing = conn.execute("select missing from groundkit.embedding_lag(%s)", (MODEL,)).fetchone()
        assert missing == (0,), missing
        conn.execute("select * from groundkit.cutover(%s)", (MODEL,))
        seconds, _ = timed(lambda: build_hnsw_indexes(conn, MODEL, maintenance_work_mem="1GB", min_entries=1))
        log(f"HNSW indexes in {seconds:.0f} s")
        conn.execute("vacuum analyze")
    return centres


def query_vectors(centres: Sequence[Sequence[float]], n: int, seed: int) -> list[str]:
    rng = random.Random(seed + 1)
    out = []
    for _ in range(n):
        c = rng.choice(centres)
        out.append("[" + ",".join(f"{x + rng.uniform(-NOISE, NOISE):.5f}" for x in c) + "]")
    return out


def measure(dsn: str, queries: Sequence[str], k: int, repeat: int) -> list[str]:
    stmt = "select object_id from groundkit.search_dense(%s, %s::vector, %s, exact => %s)"
    lines = [f"dense leg at k = {k}, {len(queries)} queries per reader, fastest of {repeat}; ms per query",
             "", "| reader (visible) | exact p50 / p95 | index p50 / p95 | auto p50 / p95 "
             "| recall@10 index | recall@10 auto |", "|---|---:|---:|---:|---:|---:|"]
    with psycopg.connect(dsn, autocommit=True) as conn, psycopg.connect(dsn, autocommit=True) as forced:
        forced.execute("set groundkit.dense_exact_max = 0")
        arms = {"exact": (conn, True), "index": (forced, False), "auto": (conn, False)}
        visible: dict[str, int] = {}
        for r, tier in READERS.items():
            row = conn.execute(
                "select count(*) from groundkit.objects o join groundkit.tiers t on t.name = o.tier_visibility"
                " where t.rank <= (select rank from groundkit.tiers where name = %s)", (tier,)).fetchone()
            visible[r] = int(row[0]) if row else 0
        for reader in READERS:
            for q in queries[:5]:  # warm: pages and plans
                for c, exact in arms.values():
                    c.execute(stmt, (reader, q, k, exact)).fetchall()
            ms: dict[str, list[float]] = {a: [] for a in arms}
            recall: dict[str, list[float]] = {"index": [], "auto": []}
            for i, q in enumerate(queries):
                got: dict[str, set[str]] = {}
                best = dict.fromkeys(arms, float("inf"))
                for j in range(repeat):
                    order = list(arms) if (i + j) % 2 == 0 else list(reversed(arms))
                    for a in order:
                        c, exact = arms[a]
                        t0 = time.perf_counter()
                        rows = c.execute(stmt, (reader, q, k, exact)).fetchall()
                        best[a] = min(best[a], time.perf_counter() - t0)
                        got[a] = {r[0] for r in rows}
                for a in arms:
                    ms[a].append(best[a] * 1000)
                for a in recall:
                    recall[a].append(len(got[a] & got["exact"]) / max(1, len(got["exact"])))
            lines.append(f"| {reader} ({visible[reader]:,}) | " + " | ".join(
                f"{pct(ms[a], 50):.1f} / {pct(ms[a], 95):.1f}" for a in arms) + " | "
                + " | ".join(f"{statistics.mean(recall[a]):.3f}" for a in recall) + " |")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m evals.bench dense", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsn", help="a server to work on (default: a throwaway embedded one)")
    ap.add_argument("--chunks", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args(argv)
    with server(args.dsn) as server_dsn, scratch_db(server_dsn, "bh_dense") as dsn:
        centres = load(dsn, args.chunks, args.seed)
        lines = measure(dsn, query_vectors(centres, args.queries, args.seed), args.k, args.repeat)
    print(f"### {args.chunks:,} chunks, {DIM}-d vectors in {CENTRES} clusters\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
