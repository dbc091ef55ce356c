"""Time as a side channel in dense search: does ``search_dense`` take longer for a topic whose
nearest neighbours the reader may not see? (``python -m evals.bench sidechannel --kind dense``)

    python -m evals.bench sidechannel --kind dense [--dsn URL] [--runs 25] [--visible 6000] [--hidden 3000]
                                                  [--elsewhere 20000]

A new database: one open space (minimum tier T0), a T0 reader, ``--visible`` T0 one-chunk objects
spread evenly over ``--topics`` topics (1..topics), ``--hidden`` T3 objects on topic 0, which no
T0 chunk is on, and ``--elsewhere`` T2 objects on a topic of their own that no query is near.
(Those last ones are there for the planner: with the 9,000 chunks alone, the search before issue
50 scanned the T0 reader's visible set exactly, whatever the topic, and the channel did not show;
the issue's world held other content too. With them, it took the HNSW path, as in the issue.)
Their vectors are synthetic and deterministic: 384-d, each topic a random centre (Gaussian),
each chunk its topic's centre plus Gaussian noise seeded by its own text, so that a topic is a
tight cluster far from the others. They go through the worker's functions
(``embed_claim`` / ``embed_store``, the vector computed from the claimed text), then the cutover
and the model's HNSW indexes (``groundkit.dense.build_hnsw_indexes``, m 16, ef_construction 64,
every bucket that has entries).

Why synthetic: the question is about the index's geometry (how much of the graph a scan walks
before it meets k visible chunks), which clusters reproduce exactly: the hidden topic's nearest
neighbours are all hidden, and nothing depends on a model's weights, a corpus or the optional
local-model extra.

Queries: topic 0's centre plus noise (its nearest neighbours are the hidden chunks), two
control topics (1 and 2, whose nearest neighbours the reader sees), and an absent topic (no chunk
is on it: what the hidden topic would be if its chunks did not exist). Through a login that is
only a member of ``groundkit_reader``, ``groundkit.search_dense(reader, query, 10)`` runs the four
in turn, ``--runs`` times each after ``--warm-up`` untimed rounds, which goes first rotating. The
median of each, and the hidden topic's ratio to each; the target (issue 50) is the ratio to each
visible control under 1.5. Each query's work without a clock: the buffer pages its execution
touched (``explain (analyze, buffers)``, shared hit + read, planning apart), the same on every
run. Each query also runs once through ``search_hybrid`` with ``bm25_weight => 0``, so that its
top 10 are the dense leg's: their ``dense_rank`` must be 1..10, no gaps (a hidden chunk taking a
rank would show as one).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

import psycopg

from evals.bench.common import log
from groundkit.dense import build_hnsw_indexes
from groundkit.gate import roles

MODEL = "sc-384"
DIM = 384
NOISE = 0.35  # per coordinate, against unit-variance centres: clusters far apart
READER = "r0"
HIDDEN_TOPIC, CONTROLS = 0, (1, 2)
SEARCH_SQL = "select object_id from groundkit.search_dense(%s, %s::vector, 10)"
EXPLAIN_SQL = "explain (analyze, buffers, format json) select object_id from groundkit.search_dense(%s, %s::vector, 10)"
HYBRID_SQL = ("select dense_rank from groundkit.search_hybrid(%s, 'topic', %s::vector, 10, bm25_weight => 0)")


def centres(topics: int, seed: int) -> list[list[float]]:
    """Topic centres: 0 (hidden), 1..topics (visible), topics + 1 (elsewhere), topics + 2 (absent)."""
    rng = random.Random(seed)
    return [[rng.gauss(0, 1) for _ in range(DIM)] for _ in range(topics + 3)]


def vector_of(text: str, cs: Sequence[Sequence[float]]) -> list[float]:
    """The synthetic embedding of a chunk's text 'topic T item I': topic T's centre plus noise
    seeded by the text."""
    topic = int(text.split()[1])
    rng = random.Random(text)
    return [x + rng.gauss(0, NOISE) for x in cs[topic]]


def literal(v: Sequence[float]) -> str:
    return "[" + ",".join(f"{x:.6f}" for x in v) + "]"


def build(conn: psycopg.Connection[Any], visible: int, hidden: int, elsewhere: int, topics: int,
          seed: int) -> list[list[float]]:
    """The world of the module docstring; returns the topic centres."""
    conn.execute("select groundkit.put_space('open', 'T0', false)")
    conn.execute("select groundkit.put_member(%s, 'T0')", (READER,))
    conn.execute("select groundkit.add_embedding_model(%s, 'local', %s, 'cosine', 'text')", (MODEL, DIM))
    objs = [(f"v{i}", "T0", f"topic {1 + i % topics} item {i}") for i in range(visible)]
    objs += [(f"h{i}", "T3", f"topic {HIDDEN_TOPIC} item {i}") for i in range(hidden)]
    objs += [(f"e{i}", "T2", f"topic {topics + 1} item {i}") for i in range(elsewhere)]
    for lo in range(0, len(objs), 2000):
        conn.execute(
            """select count(*) from groundkit.put_objects((
                 select jsonb_agg(jsonb_build_object('object_id', o.id, 'version', 1, 'content_type', 'document',
                                                     'space_id', 'open', 'tier_visibility', o.tier,
                                                     'title', '', 'body', o.body))
                   from unnest(%s::text[], %s::text[], %s::text[]) as o(id, tier, body)))""",
            [list(x) for x in zip(*objs[lo:lo + 2000], strict=True)])
    cs = centres(topics, seed)
    while True:  # the worker's path: claim, embed (here: the synthetic vector of the text), store
        with conn.transaction():
            rows = conn.execute("select content_hash, text from groundkit.embed_claim(%s, 1000)", (MODEL,)).fetchall()
            if not rows:
                break
            conn.execute("select groundkit.embed_store(%s, %s::bytea[], %s::real[])",
                         (MODEL, [r[0] for r in rows], [vector_of(r[1], cs) for r in rows]))
    conn.execute("select * from groundkit.cutover(%s)", (MODEL,))
    return cs


def build_indexes(conn: psycopg.Connection[Any]) -> None:
    """Every bucket's HNSW index, whatever its size."""
    build_hnsw_indexes(conn, MODEL, min_entries=1, maintenance_work_mem="1GB")


def medians(conn: psycopg.Connection[Any], queries: Sequence[str], runs: int, warm_up: int) -> list[float]:
    """The median ms of each query, run in turn ``warm_up + runs`` times (which goes first rotates)."""
    times: list[list[float]] = [[] for _ in queries]
    for i in range(warm_up + runs):
        for j in (list(range(len(queries)))[i % len(queries):] + list(range(len(queries)))[:i % len(queries)]):
            t0 = time.perf_counter()
            conn.execute(SEARCH_SQL, (READER, queries[j]), prepare=True).fetchall()
            if i >= warm_up:
                times[j].append((time.perf_counter() - t0) * 1000)
    return [statistics.median(t) for t in times]


def pages(conn: psycopg.Connection[Any], query: str) -> int:
    """The buffer pages one execution of the search touched (shared hit + read, planning apart):
    its work without a clock."""
    row = conn.execute(EXPLAIN_SQL, (READER, query)).fetchone()
    assert row is not None
    plan = row[0][0]["Plan"]
    return int(plan["Shared Hit Blocks"]) + int(plan["Shared Read Blocks"])


def run(server_dsn: str, dsn: str, args: argparse.Namespace) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        t0 = time.perf_counter()
        cs = build(conn, args.visible, args.hidden, args.elsewhere, args.topics, args.seed)
        log(f"built the world in {time.perf_counter() - t0:.0f} s")
        t0 = time.perf_counter()
        build_indexes(conn)
        log(f"HNSW in {time.perf_counter() - t0:.0f} s")
        conn.execute("vacuum analyze")
    rng = random.Random(args.seed + 1)
    absent = args.topics + 2
    topics = (HIDDEN_TOPIC, *CONTROLS, absent)
    queries = [literal([x + rng.gauss(0, NOISE) for x in cs[t]]) for t in topics]
    with roles.login_roles(server_dsn, dsn) as who, psycopg.connect(who.reader, autocommit=True) as conn:
        hits = [[r[0] for r in conn.execute(SEARCH_SQL, (READER, q)).fetchall()] for q in queries]
        ranks = [[r[0] for r in conn.execute(HYBRID_SQL, (READER, q)).fetchall()] for q in queries]
        ms = medians(conn, queries, args.runs, args.warm_up)
        work = [pages(conn, q) for q in queries]
    out = sys.stdout
    out.write(f"\nA T0 reader's groundkit.search_dense at k = 10 through a groundkit_reader login: "
              f"{args.visible:,} visible T0 chunks on {args.topics} topics, {args.hidden:,} T3 chunks on "
              f"topic {HIDDEN_TOPIC}, {args.elsewhere:,} T2 chunks far from every query, HNSW built; "
              f"medians of {args.runs} runs each, in turn; load average {os.getloadavg()[0]:.1f}\n\n")
    out.write("| query | nearest neighbours | median (ms) | ratio hidden / this | pages | rows | hybrid dense_rank |\n"
              "|---|---|---|---|---|---|---|\n")
    problems = []
    for t, m, pg, h, r in zip(topics, ms, work, hits, ranks, strict=True):
        what = ("hidden (T3)" if t == HIDDEN_TOPIC else "none (absent topic)" if t == absent
                else "visible (control)")
        ratio = "" if t == HIDDEN_TOPIC else f"{ms[0] / m:.2f}"
        dense_ranks = sorted(x for x in r if x is not None)
        out.write(f"| topic {t} | {what} | {m:.2f} | {ratio} | {pg:,} | {len(h)} | "
                  f"{','.join(map(str, dense_ranks))} |\n")
        if len(h) != 10 or any(not oid.startswith("v") for oid in h):
            problems.append(f"topic {t}: search_dense returned {h}")
        if dense_ranks != list(range(1, len(dense_ranks) + 1)):
            problems.append(f"topic {t}: hybrid's dense ranks have gaps: {dense_ranks}")
    worst = max(ms[0] / m for m in ms[1:1 + len(CONTROLS)])
    out.write(f"\nlargest ratio hidden / control: {worst:.2f} (target: under 1.5)\n")
    for p in problems:
        out.write(f"PROBLEM: {p}\n")
    return 1 if problems else 0
