"""Where a write's time goes: one put_objects batch (or N put_object calls) under auto_explain.

    python evals/bench/profile_write.py --dsn URL --chunks 100000 --batch 2000
    python evals/bench/profile_write.py --dsn URL --chunks 100000 --single 20

Runs against a database bench_search.py --keep built (gk_bench_<chunks>), writes fresh objects
(new ids, the benchmark corpus with another seed) and prints the duration of every statement
inside groundkit's write functions that took at least --min-ms, as auto_explain measured it
(with per-node timing, which itself adds some overhead), plus the wall time of the whole call.
Statements nest: a calling statement's time includes the statements it calls. The objects
written stay in the database.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

import psycopg
from psycopg.conninfo import make_conninfo
from psycopg.types.json import Jsonb

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus import PUT_OBJECT_SQL, Corpus


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsn", required=True)
    ap.add_argument("--chunks", type=int, default=100_000, help="which gk_bench_<chunks> database")
    ap.add_argument("--batch", type=int, default=2000, help="objects in one put_objects call")
    ap.add_argument("--single", type=int, default=0, help="profile this many put_object calls instead")
    ap.add_argument("--min-ms", type=float, default=1.0)
    args = ap.parse_args(argv)

    tag = f"prof-{uuid.uuid4().hex[:8]}-"
    n = args.single or args.batch
    objs = list(Corpus(seed=991).objects(4 * n))[:n]
    notices: list[str] = []
    dsn = make_conninfo(args.dsn, dbname=f"gk_bench_{args.chunks}")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("load 'auto_explain'")
        for name, value in [("auto_explain.log_min_duration", "0"), ("auto_explain.log_nested_statements", "on"),
                            ("auto_explain.log_analyze", "on"), ("auto_explain.log_level", "notice")]:
            conn.execute("select set_config(%s, %s, false)", (name, value))
        conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
        t0 = time.perf_counter()
        if args.single:
            for o in objs:
                conn.execute(PUT_OBJECT_SQL, dict(o.as_json(), object_id=tag + o.object_id))
        else:
            batch = [dict(o.as_json(), object_id=tag + o.object_id) for o in objs]
            conn.execute("select count(*) from groundkit.put_objects(%s)", (Jsonb(batch),))
        wall = time.perf_counter() - t0
        conn.execute("select set_config('auto_explain.log_min_duration', '-1', false)")
        chunks = conn.execute("select count(*) from groundkit.chunks where object_id like %s",
                              (tag + "%",)).fetchone()
        postings = conn.execute(
            "select count(*) from groundkit.chunks c, unnest(c.tsv) u where c.object_id like %s", (tag + "%",)
        ).fetchone()
    assert chunks is not None and postings is not None
    totals: dict[str, list[float]] = {}
    for msg in notices:
        lines = msg.split("\n")
        head = lines[0]
        if not head.startswith("duration:"):
            continue
        dur = float(head.split()[1])
        text = next((ln[len("Query Text: "):] for ln in lines if ln.startswith("Query Text: ")), "")
        key = " ".join(text.split())[:100]
        totals.setdefault(key, []).append(dur)
    print(f"{n} objects, {chunks[0]} chunks, {postings[0]} postings; wall {wall * 1000:.0f} ms "
          f"({chunks[0] / wall:,.0f} chunks/s with auto_explain on)")
    print("| total ms | calls | per chunk µs | statement |\n|---|---|---|---|")
    for key, ms in sorted(totals.items(), key=lambda kv: -sum(kv[1])):
        if sum(ms) >= args.min_ms:
            print(f"| {sum(ms):.1f} | {len(ms)} | {1000 * sum(ms) / max(1, chunks[0]):.1f} | `{key}` |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
