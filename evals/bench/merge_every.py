"""One-off: one-object write rate on two new databases, config.pending_merge_chunks 2048 against 512.

    python -m evals.bench.merge_every URL 16000

The same documents (40-160 words) through put_object, one per transaction, into each database in
alternating blocks of 1,000 (A B B A ...), inline merges on, one final merge_pending() each inside
the time.
"""

from __future__ import annotations

import sys
import time

import psycopg

from evals.bench.common import drop_db, log, populate_authority, setup_db
from evals.bench.corpus import PUT_OBJECT_SQL, Corpus


def main() -> int:
    server, n, block = sys.argv[1], int(sys.argv[2]), 1000
    docs = list(Corpus(7).documents(n))
    conns: dict[int, psycopg.Connection[tuple[object, ...]]] = {}
    for m in (2048, 512):
        conns[m] = psycopg.connect(setup_db(server, f"gk_bh_me{m}"), autocommit=True)
        populate_authority(conns[m], Corpus(7), chunk_settings=False)
        conns[m].execute("update groundkit.config set pending_merge_chunks = %s", (m,))
    took = {m: 0.0 for m in conns}
    for b in range(n // block):
        for m in ((2048, 512) if b % 4 in (0, 3) else (512, 2048)):
            t0 = time.perf_counter()
            for d in docs[b * block:(b + 1) * block]:
                conns[m].execute(PUT_OBJECT_SQL, d.as_json())
            took[m] += time.perf_counter() - t0
        log(f"block {b + 1}: " + ", ".join(f"{m} {(b + 1) * block / t:.0f}/s" for m, t in took.items()))
    for m, c in conns.items():
        t0 = time.perf_counter()
        c.execute("select groundkit.merge_pending()")
        took[m] += time.perf_counter() - t0
        c.close()
        drop_db(server, f"gk_bh_me{m}")
    print(", ".join(f"merge every {m}: {n / t:.0f} documents/s" for m, t in took.items())
          + f"; 512 / 2048 {took[2048] / took[512]:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
