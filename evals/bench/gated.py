"""What the gate adds to a deployment change (docs/governance.md, "What a gated change costs").

    python -m evals.bench gated                      # migrate and cutover, the local model
    python -m evals.bench gated --full-gate          # and, for scale, the whole gate once

Measured in one run on one server, each change against the same change without its gate:

- ``migrate``: an empty database migrated bare (``groundkit.migrate(dsn, gate=False)``) and another
  through ``groundkit.deployment.gated_migrate`` (a throwaway template at the target revision, the
  migrate sections there, then the migration and its ledger row); then the gated migrate again,
  which reuses the certificate (the template is still made, to learn the target's configuration);
- ``cutover``: a small world embedded by two definitions of the local model (all-MiniLM-L6-v2, the
  ``titled`` and the ``text`` recipe), in the bare database switched bare (``model_swap.cutover``)
  and in the gated one (certified by its gated migrate) through ``gated_cutover`` (the golden set
  through dense and hybrid search, embedding with the new model): to the first model, to the
  other, and back to the first, which reuses its certificate.

Needs the local model's export (``groundkit embed`` makes it once; docs/embeddings.md).
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import time
from collections.abc import Sequence

import psycopg

import groundkit
from evals.bench.common import log, scratch_db, server, timed
from groundkit import Groundkit, deployment, embedding, model_swap


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _world(dsn: str, models: bool) -> None:
    """A small world, and (``models``) two definitions of the local model embedding it."""
    from groundkit.embedders import embedder_for

    with Groundkit.connect(dsn) as gk:
        gk.put_member("m", "T1")
        gk.put_space("open", "T0")
        for i in range(20):
            gk.put_object(f"o{i}", 1, "board_post", "open", "T0", f"Post {i}", f"kiln glaze note number {i}")
        for name, recipe in (("minilm-titled", "titled"), ("minilm-text", "text")) if models else ():
            model_swap.add_model(gk, name=name, provider="local", dimension=384, distance="cosine", recipe=recipe)
            m = embedding.get_model(gk, name)
            embedding.embed_pending(gk, m, embedder_for(m))


def measure(server_dsn: str, cutover: bool) -> list[str]:
    lines = ["| change | bare s | gated s | gated / bare | verdict |", "|---|---:|---:|---:|---|"]
    with scratch_db(server_dsn, "bh_gated_a") as a, scratch_db(server_dsn, "bh_gated_b") as b:
        for dsn in (a, b):  # back to empty: scratch_db migrates its databases
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("drop schema groundkit cascade")
        bare, _ = timed(lambda: groundkit.migrate(a, gate=False))
        log(f"bare migrate {bare:.1f} s; the gated one (load {_load()})...")
        gated, (_, change) = timed(lambda: deployment.gated_migrate(b, out=io.StringIO()))
        lines.append(f"| migrate, empty database | {bare:.1f} | {gated:.1f} | {gated / bare:.0f}x | {change.verdict} |")
        again, (_, reuse) = timed(lambda: deployment.gated_migrate(b, out=io.StringIO()))
        lines.append(f"| migrate again (certificate reused) | - | {again:.1f} | - | {reuse.verdict} |")
        if not cutover:
            return lines
        _world(a, models=True)
        _world(b, models=True)
        with Groundkit.connect(a) as gk:
            bare_first, _ = timed(lambda: model_swap.cutover(gk, "minilm-titled"))
            bare_swap, _ = timed(lambda: model_swap.cutover(gk, "minilm-text"))
        log(f"bare cutovers {bare_first * 1000:.0f} / {bare_swap * 1000:.0f} ms; the gated ones (load {_load()})...")
        rows = []
        for label, model, bare_s in (("cutover to the first model", "minilm-titled", bare_first),
                                     ("cutover to another model", "minilm-text", bare_swap),
                                     ("rollback to the first (certificate reused)", "minilm-titled", None)):
            t0 = time.perf_counter()
            _, change = deployment.gated_cutover(b, model, out=io.StringIO())
            seconds = time.perf_counter() - t0
            checks = f", {change.summary['checks']} checks" if change.summary else ""
            rows.append(f"| {label} | {'-' if bare_s is None else f'{bare_s:.3f}'} | {seconds:.1f} | "
                        f"{'-' if bare_s is None else f'{seconds / bare_s:.0f}x'} | {change.verdict}{checks} |")
        lines += rows
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m evals.bench gated", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsn", help="a server to work on (default: a throwaway embedded one)")
    ap.add_argument("--full-gate", action="store_true", help="also time the whole gate (all twelve sections)")
    ap.add_argument("--no-cutover", action="store_true", help="migrate only (no local model needed)")
    args = ap.parse_args(argv)
    with server(args.dsn) as server_dsn:
        lines = [f"load average at the start: {_load()} ({os.cpu_count()} CPUs)", ""]
        lines += measure(server_dsn, cutover=not args.no_cutover)
        if args.full_gate:
            from groundkit.gate.runner import run_gate

            seconds, summary = timed(lambda: run_gate(server_dsn, out=io.StringIO()))
            lines += ["", f"the whole gate, all twelve sections, for scale: {seconds:.1f} s, {summary.checks} checks"]
        lines.append(f"load average at the end: {_load()}")
        for line in lines:
            print(line)
    sys.stdout.flush()
    return 0
