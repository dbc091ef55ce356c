"""Time as a side channel: does search take longer for a word only content the reader may not see holds?

    python -m evals.bench sidechannel [--dsn URL] [--runs 400] [--filler 3000] [--copies 1500]
    python -m evals.bench sidechannel --kind dense [--dsn URL] [--runs 25]   # evals/bench/sidechannel_dense.py

``--kind bm25`` (the default) measures ``groundkit.search``, as below; ``--kind dense`` measures
``groundkit.search_dense`` for a topic whose nearest neighbours the reader may not see
(evals/bench/sidechannel_dense.py describes it).

A new database with the gate's side-channel world (groundkit/gate/side_channels.py): a T1 reader,
``--filler`` objects it may see, and for each invisible kind (shared content above its tier, a
private space without a grant, a granted private space whose policy needs a higher tier, another
member's owner-only note) ``--copies`` objects holding a word of their own, merged, and as many
again pending. Through a login that is only a member of groundkit_reader (as an app searches),
``groundkit.search(reader, word)`` and the same for a word nobody holds alternate ``--runs``
times each, alternating which goes first, after ``--warm-up`` untimed pairs; the same for the
word with a common word the reader may see. Per kind and state: the median time of each and
their ratio (the word's over the absent word's). The control row is a word ``--copies`` chunks
the reader may see hold: its ratio shows the measurement sees a difference where there is one.
The target for the invisible kinds: every ratio under 1.2. ``--revision REV`` searches with
that git revision's replaceable SQL instead of the working tree's (the world is built with the
working tree's), to see how an older search did.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

import psycopg

from evals.bench import sidechannel_dense
from evals.bench.common import log, scratch_db, server
from evals.bench.sqlsource import WORKTREE, describe, replaceable_sql
from groundkit import Groundkit
from groundkit.gate import roles, side_channels
from groundkit.gate.side_channels import ABSENT, COMMON, KINDS, READER, STATES, word
from groundkit.models import ContentObject

SEARCH_SQL = "select object_id, chunk_seq, score from groundkit.search(%s, %s, 10)"
VISIBLE = "scvisibleword"  # the control: held by --copies chunks the reader may see


def median_ms(conn: psycopg.Connection[Any], pair: tuple[str, str], runs: int, warm_up: int) -> tuple[float, float]:
    """The median milliseconds of each query of ``pair``, run alternately (which goes first
    alternates too), after ``warm_up`` untimed pairs."""
    times: tuple[list[float], list[float]] = ([], [])
    for i in range(warm_up + runs):
        for j in ((0, 1) if i % 2 == 0 else (1, 0)):
            t0 = time.perf_counter()
            conn.execute(SEARCH_SQL, (READER, pair[j]), prepare=True).fetchall()
            if i >= warm_up:
                times[j].append((time.perf_counter() - t0) * 1000)
    return statistics.median(times[0]), statistics.median(times[1])


def _control(gk: Groundkit, copies: int) -> None:
    objs = [ContentObject(object_id=f"scc{i}", version=1, content_type="board_post", space_id="sc_open",
                          tier_visibility="T0", title="", body=f"{VISIBLE} {COMMON}") for i in range(copies)]
    for start in range(0, len(objs), 500):
        gk.put_objects(objs[start:start + 500])
    gk.merge_pending()


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m evals.bench sidechannel", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kind", choices=("bm25", "dense"), default="bm25",
                    help="which search: groundkit.search (bm25) or groundkit.search_dense (dense)")
    ap.add_argument("--dsn", help="a server to create the database on (default: a throwaway embedded one)")
    ap.add_argument("--runs", type=int, help="timed runs of each query (default: 400 for bm25, 25 for dense)")
    ap.add_argument("--warm-up", type=int, default=20, help="untimed runs of each pair (dense: each round) first")
    ap.add_argument("--filler", type=int, default=3000, help="bm25: objects the reader may see")
    ap.add_argument("--copies", type=int, default=1500, help="bm25: objects holding each invisible word, per state")
    ap.add_argument("--revision", default=WORKTREE,
                    help="bm25: search with this git revision's replaceable SQL (default: the working tree's)")
    ap.add_argument("--visible", type=int, default=6000, help="dense: visible T0 chunks, spread over --topics")
    ap.add_argument("--hidden", type=int, default=3000, help="dense: T3 chunks, all on the hidden topic")
    ap.add_argument("--elsewhere", type=int, default=20000, help="dense: T2 chunks on a topic far from every query")
    ap.add_argument("--topics", type=int, default=20, help="dense: topics of the visible chunks")
    ap.add_argument("--seed", type=int, default=7, help="dense: the vectors' seed")
    args = ap.parse_args(argv)
    if args.kind == "dense":
        if args.revision != WORKTREE:
            ap.error("--revision applies to --kind bm25 only")
        args.runs = 25 if args.runs is None else args.runs
        with server(args.dsn) as server_dsn, scratch_db(server_dsn, "bh_side_dense") as dsn:
            return sidechannel_dense.run(server_dsn, dsn, args)
    args.runs = 400 if args.runs is None else args.runs
    with server(args.dsn) as server_dsn, scratch_db(server_dsn, "bh_side") as dsn:
        with Groundkit.connect(dsn) as gk:
            t0 = time.perf_counter()
            side_channels.build_visible(gk, args.filler)
            _control(gk, args.copies)
            side_channels.add_invisible(gk, args.copies)
            t = time.perf_counter() - t0
            if args.revision != WORKTREE:
                for name, text in replaceable_sql(args.revision):
                    log(f"  {args.revision}: {name}")
                    gk.conn.execute(text.encode())  # our own SQL file at that revision
            gk.analyze_postings()
            gk.conn.execute("analyze")
        log(f"built the world in {t:.0f} s")
        rows = []
        with roles.login_roles(server_dsn, dsn) as who, psycopg.connect(who.reader, autocommit=True) as conn:
            cases = [(kind, state, word(kind, state)) for kind in KINDS for state in STATES]
            for label, state, held in [("visible (control)", "merged", VISIBLE), *cases]:
                for shape, suffix in (("1 term", ""), ("2 terms", f" {COMMON}")):
                    a, b = median_ms(conn, (held + suffix, ABSENT + suffix), args.runs, args.warm_up)
                    rows.append((label, state, shape, a, b))
                    log(f"  {label} {state} {shape}: {a:.3f} / {b:.3f} ms")
        out = sys.stdout
        out.write(f"\nA T1 reader's groundkit.search ({describe(args.revision)}) through a groundkit_reader login: "
                  f"a word only one kind of content holds ({args.copies:,} objects) against a word nobody holds, "
                  f"with {args.filler:,} visible objects; medians of {args.runs} alternating runs each\n\n")
        out.write("| kind | state | query | word (ms) | absent word (ms) | ratio |\n|---|---|---|---|---|---|\n")
        for label, state, shape, a, b in rows:
            out.write(f"| {label} | {state} | {shape} | {a:.3f} | {b:.3f} | {a / b:.2f} |\n")
        worst = max(a / b for label, _s, _q, a, b in rows if label in KINDS)
        out.write(f"\nlargest ratio among invisible kinds: {worst:.2f} (target: under 1.2)\n")
    return 0
