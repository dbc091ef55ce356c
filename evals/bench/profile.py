"""Where a search's or a write's time goes, statement by statement (auto_explain).

    python -m evals.bench profile search --dsn URL --chunks 1000000 --reader r100 --min-ms 6 --max-ms 30
    python -m evals.bench profile write --dsn URL --chunks 100000 --single 200
    python -m evals.bench profile write --dsn URL --database gk_x --single 200 --commit --documents

``search``: on a kept benchmark database (gk_bench_<chunks>, with the queries `search` ran
there), every query of --min-terms to --max-terms analysed terms runs once to warm up, then once
more with auto_explain logging the duration of every statement it runs, nested ones included,
without per-node instrumentation (``log_analyze`` off), so the durations are what the statements
cost in an ordinary run. Searches that took between --min-ms and --max-ms are summed per
statement (keyed by its first words): calls, total time, share of those searches' total.
Nested statements include the statements they run, so shares can add up to more than 100 %;
what the table leaves out is PL/pgSQL's own work between statements and planning.

``write``: fresh objects (new ids, the benchmark corpus with another seed) through one
put_objects call of --batch objects or --single put_object calls, one transaction each, on
gk_bench_<chunks> or --database; every statement inside that took at least --min-ms, with the
wall time and what the server's top-level statements account for (the rest: the round trips
and, for one-object writes, the commit's wait for its WAL to reach the disk). ``--commit``
first times --single put_object calls in blocks with ``synchronous_commit`` on and off,
alternating, four blocks each: what waiting for the WAL flush at every commit costs. The
objects written stay in the database.
"""

from __future__ import annotations

import argparse
import re
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo
from psycopg.types.json import Jsonb

import groundkit
from evals.bench.common import READERS, bench_queries, kept_database_args, log
from evals.bench.corpus import PUT_OBJECT_SQL, Corpus, Obj

DURATION = re.compile(r"duration: ([0-9.]+) ms")
TOP = "select * from groundkit.search("


def query_text(message: str) -> str | None:
    """The statement an auto_explain message is about: the lines after "Query Text:" up to the
    plan (its first node has a cost) or the parameters."""
    lines = message.split("\n")
    for i, line in enumerate(lines):
        if line.startswith("Query Text: "):
            text = [line[len("Query Text: "):]]
            for more in lines[i + 1:]:
                if "  (cost=" in more or more.startswith("Query Parameters:"):
                    break
                text.append(more)
            return "\n".join(text).strip()
    return None


def statement_key(text: str, words: int) -> str:
    """A statement's first words, whitespace folded: its name in the tables."""
    return " ".join(text.split()[:words]) or "(empty)"


def auto_explain(conn: psycopg.Connection[Any], analyze: bool) -> list[str]:
    """Turn auto_explain on for every statement of this session, nested ones too; its messages
    (one per statement) are appended to the list returned."""
    messages: list[str] = []
    conn.add_notice_handler(lambda d: messages.append(d.message_primary or ""))
    conn.execute("load 'auto_explain'")
    for name, value in [("auto_explain.log_min_duration", "0"), ("auto_explain.log_nested_statements", "on"),
                        ("auto_explain.log_analyze", "on" if analyze else "off"),
                        ("auto_explain.log_level", "notice")]:
        conn.execute("select set_config(%s, %s, false)", (name, value))
    return messages


def profile_search(args: argparse.Namespace) -> int:
    dsn = make_conninfo(args.dsn, dbname=f"gk_bench_{args.chunks}")
    groundkit.migrate(dsn, gate=False)
    queries = bench_queries(args.chunks, args.queries, args.seed)
    total: defaultdict[str, float] = defaultdict(float)
    calls: Counter[str] = Counter()
    searched = 0.0
    kept = 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        chosen = [q for q in queries
                  if args.min_terms <= len(conn.execute("select * from groundkit.query_terms(%s)", (q,)).fetchall())
                  <= args.max_terms]
        log(f"{len(chosen)} of {len(queries)} queries have {args.min_terms}-{args.max_terms} terms; warming up")
        for q in chosen:
            conn.execute("select * from groundkit.search(%s, %s, %s)", (args.reader, q, args.k)).fetchall()
        messages = auto_explain(conn, analyze=False)
        for i, q in enumerate(chosen, 1):
            messages.clear()
            conn.execute("select * from groundkit.search(%s, %s, %s)", (args.reader, q, args.k)).fetchall()
            this: defaultdict[str, float] = defaultdict(float)
            this_calls: Counter[str] = Counter()
            whole = None
            for m in messages:
                d, text = DURATION.search(m), query_text(m)
                if d is None or text is None:
                    continue
                if text.startswith(TOP):
                    whole = float(d.group(1))
                    continue
                if "groundkit._search_pruned(" in text:
                    continue  # groundkit.search's own body, which calls the search function
                key = statement_key(text, args.words)
                this[key] += float(d.group(1))
                this_calls[key] += 1
            if whole is not None and args.min_ms <= whole <= args.max_ms:
                kept += 1
                searched += whole
                for key, ms in this.items():
                    total[key] += ms
                calls.update(this_calls)
            if i % 20 == 0 or i == len(chosen):
                log(f"profiled {i}/{len(chosen)}")
        conn.execute("set auto_explain.log_min_duration = -1")
    if not kept:
        print(f"no search of {args.reader} took between {args.min_ms} and {args.max_ms} ms")
        return 1
    print(f"\n{kept} searches of {args.reader} ({args.min_terms}-{args.max_terms} terms, "
          f"{args.min_ms:g}-{args.max_ms:g} ms): {searched:.1f} ms in all, {searched / kept:.2f} ms each\n")
    print("| statement (first words) | calls | ms | share of the searches |")
    print("|---|---|---|---|")
    for key, ms in sorted(total.items(), key=lambda kv: -kv[1])[:args.top]:
        print(f"| `{key.replace('|', '/')}` | {calls[key]} | {ms:.1f} | {100 * ms / searched:.1f} % |")
    return 0


def writer(conn: psycopg.Connection[Any], single: bool) -> Callable[[Sequence[Obj]], float]:
    """Write objects under fresh ids (put_object each, or one put_objects call); the seconds it took."""
    def write(objs: Sequence[Obj]) -> float:
        tag = f"prof-{uuid.uuid4().hex[:8]}-"
        t0 = time.perf_counter()
        if single:
            for o in objs:
                conn.execute(PUT_OBJECT_SQL, dict(o.as_json(), object_id=tag + o.object_id))
        else:
            conn.execute("select count(*) from groundkit.put_objects(%s)",
                         (Jsonb([dict(o.as_json(), object_id=tag + o.object_id) for o in objs]),))
        return time.perf_counter() - t0
    return write


def commit_cost(conn: psycopg.Connection[Any], objs: Sequence[Obj], n: int) -> None:
    """put_object rate in blocks of ``n`` with synchronous_commit on and off, alternating."""
    write = writer(conn, single=True)
    rates: dict[str, list[float]] = {"on": [], "off": []}
    for block in range(8):
        mode = ("on", "off")[(block + block // 2) % 2]  # on off off on on off off on
        conn.execute("select set_config('synchronous_commit', %s, false)", (mode,))
        rates[mode].append(n / write(objs[block * n:(block + 1) * n]))
        log(f"  block {block + 1}/8, synchronous_commit {mode}: {rates[mode][-1]:,.0f} put_object/s")
    conn.execute("reset synchronous_commit")
    on, off = (sum(rates[m]) / len(rates[m]) for m in ("on", "off"))
    print(f"put_object one per transaction: {on:,.0f}/s waiting for each commit's WAL flush "
          f"(synchronous_commit on), {off:,.0f}/s without (off): the flush is "
          f"{100 * (1 / on - 1 / off) * on:.0f} % of a write's time")


def profile_write(args: argparse.Namespace) -> int:
    n = args.single or args.batch
    corpus = Corpus(seed=991)
    objs = list(corpus.documents(10 * n) if args.documents else corpus.objects(40 * n))
    dsn = make_conninfo(args.dsn, dbname=args.database or f"gk_bench_{args.chunks}")
    with psycopg.connect(dsn, autocommit=True) as conn:
        if args.commit:
            if not args.single:
                raise SystemExit("--commit times one-object writes: give --single N")
            commit_cost(conn, objs[n:], n)
        notices = auto_explain(conn, analyze=True)
        wall = writer(conn, bool(args.single))(objs[:n])
        conn.execute("select set_config('auto_explain.log_min_duration', '-1', false)")
    totals: dict[str, list[float]] = {}
    top = 0.0
    for msg in notices:
        d, text = DURATION.search(msg), query_text(msg)
        if d is None or text is None:
            continue
        key = statement_key(text, 16)[:100]
        totals.setdefault(key, []).append(float(d.group(1)))
        if key.startswith(("select groundkit.put_object(", "select count(*) from groundkit.put_objects(")):
            top += float(d.group(1))
    print(f"{n} {'put_object calls' if args.single else 'objects in one put_objects call'}: wall "
          f"{1000 * wall:.0f} ms, the top-level statements {top:.0f} ms inside the server (auto_explain with "
          f"per-node timing on, which adds its own cost); the rest is round trips and commits")
    print("| total ms | calls | ms per object | statement |\n|---|---|---|---|")
    for key, ms in sorted(totals.items(), key=lambda kv: -sum(kv[1])):
        if sum(ms) >= args.min_ms:
            print(f"| {sum(ms):.1f} | {len(ms)} | {sum(ms) / n:.3f} | `{key.replace('|', '/')}` |")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m evals.bench profile", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="target", required=True)
    s = sub.add_parser("search", help="a search's statements, on a kept benchmark database")
    kept_database_args(s)
    s.add_argument("--reader", choices=sorted(READERS), default="r100")
    s.add_argument("--min-terms", type=int, default=2)
    s.add_argument("--max-terms", type=int, default=6)
    s.add_argument("--min-ms", type=float, default=0.0, help="only searches that took at least this long")
    s.add_argument("--max-ms", type=float, default=float("inf"), help="only searches that took at most this long")
    s.add_argument("--words", type=int, default=12, help="how many first words name a statement")
    s.add_argument("--top", type=int, default=25, help="how many statements to print")
    w = sub.add_parser("write", help="a write's statements")
    w.add_argument("--dsn", required=True)
    w.add_argument("--chunks", type=int, default=100_000, help="which gk_bench_<chunks> database")
    w.add_argument("--database", help="another database (say a fresh one `ingest --fresh --keep` kept)")
    w.add_argument("--batch", type=int, default=2000, help="objects in one put_objects call")
    w.add_argument("--single", type=int, default=0, help="profile this many put_object calls instead")
    w.add_argument("--commit", action="store_true", help="first, what each commit's WAL flush costs")
    w.add_argument("--documents", action="store_true",
                   help="write documents of 40-160 words (`ingest --fresh`'s) instead of the benchmark's objects")
    w.add_argument("--min-ms", type=float, default=1.0)
    args = ap.parse_args(argv)
    return profile_search(args) if args.target == "search" else profile_write(args)
