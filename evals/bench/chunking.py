"""What each chunker costs per object, against the recursive text chunker on the same text.

    python -m evals.bench chunking [--dsn URL] [--objects 400] [--rounds 5]

A new database; --objects payloads of each kind (a 3,000-character text in paragraphs; the same
text with a Markdown heading every paragraph, as a document; a 600-character board post with a
thread header in its metadata; a transcript of 60 segments); then --rounds rounds, each chunking
every kind through ``groundkit._chunks_of`` (what a write calls) and the same text through
``groundkit.chunk_text_spans`` back to back, alternating which goes first. It prints the
microseconds per object of each, the fastest round counting, and the ratio of the two: the cost
of a chunker over the plain text chunker, measured in one session (docs/chunking.md).
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from evals.bench.common import log, scratch_db, server

WORDS = ("clay glaze kiln wheel cone bisque slip trim foot centre throw pull wedge fire reduction oxide "
         "stoneware porcelain shelf damper").split()


def _sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 14))).capitalize() + "."


def _paragraphs(rng: random.Random, chars: int) -> list[str]:
    out: list[str] = []
    while sum(len(p) + 2 for p in out) < chars:
        out.append(" ".join(_sentence(rng) for _ in range(rng.randint(3, 6))))
    return out


def payloads(n: int, seed: int) -> dict[str, list[dict[str, Any]]]:
    """n payloads of each kind: (content type, title, body, segments, metadata)."""
    rng = random.Random(seed)
    kinds: dict[str, list[dict[str, Any]]] = {"event": [], "document": [], "board_post": [], "transcript": []}
    for i in range(n):
        paras = _paragraphs(rng, 3000)
        kinds["event"].append({"type": "event", "title": f"Event {i}", "body": "\n\n".join(paras)})
        md = "\n\n".join(f"{'#' * (1 + j % 3)} Part {j}\n\n{p}" for j, p in enumerate(paras))
        kinds["document"].append({"type": "document", "title": f"Doc {i}", "body": md})
        post = "\n\n".join(_paragraphs(rng, 600))
        kinds["board_post"].append({"type": "board_post", "title": f"Re: {i}", "body": post,
                                    "metadata": {"thread_id": f"t{i}", "thread_title": _sentence(rng),
                                                 "board": "Studio", "tags": ["glaze", "kiln"]}})
        segs, t = [], 0
        for _ in range(60):
            text = _sentence(rng)
            segs.append({"start_ms": t, "end_ms": t + 4000, "text": text})
            t += 4000 + rng.choice((200, 300, 1500))
        kinds["transcript"].append({"type": "transcript", "title": f"Talk {i}", "body": None, "segments": segs})
    return kinds


CHUNK = """select count(*) from jsonb_array_elements(%s) p
 cross join lateral groundkit._chunks_of(p ->> 'type', p ->> 'title', p ->> 'body', p -> 'segments',
                                         p -> 'metadata', 1500, 200) c"""
# the same text through the plain chunker (a transcript's text: its segments joined)
PLAIN = """select count(*) from jsonb_array_elements(%s) p
 cross join lateral groundkit.chunk_text_spans(
     coalesce(p ->> 'body', (select string_agg(s ->> 'text', ' ') from jsonb_array_elements(p -> 'segments') s)),
     1500, 200) c"""


def _timed(conn: psycopg.Connection[Any], query: str, batch: Jsonb) -> float:
    t0 = time.perf_counter()
    conn.execute(query, (batch,)).fetchone()
    return time.perf_counter() - t0


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m evals.bench chunking", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", help="a server to create the database on (default: a throwaway embedded one)")
    parser.add_argument("--objects", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=44)
    args = parser.parse_args(argv)
    kinds = payloads(args.objects, args.seed)
    with server(args.dsn) as server_dsn, scratch_db(server_dsn, "chunking") as dsn, \
            psycopg.connect(dsn, autocommit=True) as conn:
        best: dict[tuple[str, str], float] = {}
        for r in range(args.rounds):
            for kind, objs in kinds.items():
                batch = Jsonb(objs)
                order = [("chunker", CHUNK), ("plain", PLAIN)]
                for arm, query in order if r % 2 == 0 else order[::-1]:
                    secs = _timed(conn, query, batch)
                    best[(kind, arm)] = min(best.get((kind, arm), secs), secs)
            log(f"round {r + 1}/{args.rounds}")
        print(f"{'content type':<12} {'its chunker':>14} {'text chunker':>14} {'ratio':>7}   (us per object)")
        for kind in kinds:
            mine, plain = (best[(kind, a)] * 1e6 / args.objects for a in ("chunker", "plain"))
            print(f"{kind:<12} {mine:>14.0f} {plain:>14.0f} {mine / plain:>6.2f}x")
    return 0
