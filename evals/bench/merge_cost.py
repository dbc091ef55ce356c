"""What a merge of the pending part costs, and whether its WAL is what costs.

    python evals/bench/bench_search.py --dsn URL --chunks 1000000 --keep    # builds gk_bench_1000000
    python evals/bench/merge_cost.py --dsn URL --chunks 1000000 [--rounds 4]

On a throwaway copy of the kept benchmark database (``copy_of``; migrated), each round writes 600
new objects through ``put_object``, one per transaction, with ``pending_merge_chunks`` out of reach,
then times ``merge_pending()`` alone in one of three settings of its session, in alternating order:

- ``default``: as configured (``synchronous_commit = on``, ``wal_compression = off`` on the
  embedded server);
- ``pglz``: ``wal_compression = pglz`` (the full-page images a merge writes after a checkpoint,
  compressed; the embedded server's build has no lz4 or zstd);
- ``async``: ``synchronous_commit = off`` (the commit does not wait for its WAL to reach disk).

It prints each merge's time and the WAL it wrote (``pg_current_wal_lsn()`` before and after), and
per setting the merge's milliseconds and WAL kilobytes per chunk. If async or pglz were much
faster, the merge would be waiting on WAL; docs/bm25.md ("What a merge costs") has a run.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_search import copy_of, kept_database_args, log
from corpus import PUT_OBJECT_SQL, Corpus

from groundkit.migrate import migrate

SETTINGS = {"default": [], "pglz": ["set wal_compression = pglz"], "async": ["set synchronous_commit = off"]}
WAL_SQL = "select (pg_current_wal_lsn() - '0/0'::pg_lsn)::float8"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    kept_database_args(ap, chunks=1_000_000)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--write-seed", type=int, default=883, help="the corpus seed of the objects written")
    args = ap.parse_args(argv)
    modes = list(SETTINGS)
    objs = list(Corpus(seed=args.write_seed).objects(4000 * args.rounds * len(modes)))
    got: dict[str, list[tuple[int, float, float]]] = {m: [] for m in modes}
    with copy_of(args.dsn, f"gk_bench_{args.chunks}", "merge") as dsn:
        migrate(dsn)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("select groundkit.merge_pending()")
            conn.execute("update groundkit.config set pending_merge_chunks = 1000000000")
            i = 0
            for r in range(args.rounds):
                for mode in (modes if r % 2 == 0 else modes[::-1]):
                    conn.execute("reset all")
                    tag, chunks = f"mc-{uuid.uuid4().hex[:6]}-", 0
                    for o in objs[i:i + 600]:
                        conn.execute(PUT_OBJECT_SQL, dict(o.as_json(), object_id=tag + o.object_id))
                        chunks += len(o.paragraphs)
                    i += 600
                    for stmt in SETTINGS[mode]:
                        conn.execute(stmt)
                    wal0 = conn.execute(WAL_SQL).fetchone()
                    t0 = time.perf_counter()
                    conn.execute("select groundkit.merge_pending()")
                    secs = time.perf_counter() - t0
                    wal1 = conn.execute(WAL_SQL).fetchone()
                    assert wal0 is not None and wal1 is not None
                    got[mode].append((chunks, secs, float(wal1[0]) - float(wal0[0])))
                    log(f"round {r} {mode}: {chunks} chunks, merge {1000 * secs:.0f} ms, "
                        f"{(float(wal1[0]) - float(wal0[0])) / 1e6:.1f} MB of WAL")
            conn.execute("reset all")
    print(f"\n{args.chunks:,} chunks; merges of about 1,250 chunks, {args.rounds} per setting")
    print("| setting | merge ms per chunk | WAL kB per chunk |\n|---|---|---|")
    for mode, rounds in got.items():
        chunks = sum(x[0] for x in rounds)
        print(f"| {mode} | {1000 * sum(x[1] for x in rounds) / chunks:.3f} | "
              f"{sum(x[2] for x in rounds) / chunks / 1e3:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
