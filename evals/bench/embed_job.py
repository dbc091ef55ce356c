"""python -m evals.bench embed-job: where ``groundkit embed``'s time goes, against the provider alone.

SciFact's abstracts (the first ``--docs``) are written to a scratch database as ``groundkit ingest``
writes a JSON Lines file of them (``put_objects``: object id, title, the abstract as the body,
content type ``--content-type``), and a local model with the ``titled`` recipe (``groundkit models
add``'s default) is registered. Then, interleaved ``--rounds`` times in the same run:

- ``bench texts``: the provider embeds title + text per abstract, as ``python -m evals.bench
  embed`` does (its docs/s is the figure docs/embeddings.md quotes);
- ``job texts``: the provider embeds exactly the texts the job sends (each chunk under its title
  and headings, ``groundkit._embed_text``; one per distinct text), in batches of ``--batch``;
- ``job, batch N``: ``groundkit embed``'s job itself (``embedding.embed_pending``: claim, embed,
  store, commit per batch) for a fresh model, for each ``--batches`` N;
- ``groundkit embed --json``: the command itself, in a process of its own, for a fresh model (its
  rate is the one it prints; its CPU is the child process's, model load included);
- ``claim/store alone``: the job's database path with no model (every text stored with one
  constant vector): what claiming, storing and committing cost by themselves, and whether a
  batch's cost grows as the model's embeddings fill up (the first and the last tenth of batches).

Each row gives items/s and tokens/s (wall), and the CPU seconds this process used (all its
threads) and, for the job, the database backend's (read from /proc: the server must be local).
The machine is shared: compare tokens per CPU-second, and rows within one run. The ratios printed
at the end split the gap between the two headline figures into the texts (more tokens per item)
and the job's own cost.

    python -m evals.bench embed-job [--docs 1000] [--rounds 2] [--batch 64] [--batches 64] [--dsn DSN]
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evals.bench.common import log, scratch_db, server
from evals.bench.embed import default_data, load


@dataclass
class Row:
    arm: str
    items: int
    tokens: int
    wall: float
    cpu: float
    server_cpu: float | None = None

    def line(self) -> str:
        server_cpu = "" if self.server_cpu is None else f"{self.server_cpu:8.2f}"
        per_cpu = f"{self.tokens / self.cpu:>12.0f}" if self.tokens else f"{'-':>12}"
        return (f"{self.arm:<22}{self.items:>7}{self.tokens:>10}{self.items / self.wall:>10.1f}"
                f"{self.tokens / self.wall:>10.0f}{self.cpu:>9.2f}{server_cpu:>9}{per_cpu}")


HEADER = (f"{'arm':<22}{'items':>7}{'tokens':>10}{'items/s':>10}{'tokens/s':>10}{'cpu s':>9}{'db cpu s':>9}"
          f"{'tokens/cpu s':>12}")


def backend_cpu(pid: int) -> float | None:
    """The CPU seconds (user + system) a local server process has used, or None if not readable."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measured(arm: str, items: int, run: Callable[[], int], backend: int | None = None) -> Row:
    cpu0, wall0 = time.process_time(), time.perf_counter()
    db0 = backend_cpu(backend) if backend is not None else None
    tokens = run()
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    db = backend_cpu(backend) if backend is not None else None
    return Row(arm, items, tokens, wall, cpu, None if db is None or db0 is None else db - db0)


def main(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m evals.bench embed-job", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64, help="Texts per provider call in 'job texts'.")
    ap.add_argument("--batches", type=int, nargs="+", default=[64], help="The job's batch sizes to run.")
    ap.add_argument("--content-type", default="document", help="The objects' content type (its chunker).")
    ap.add_argument("--data", type=str, default=None, help="A BEIR folder (default: ../shared/datasets/beir-scifact).")
    ap.add_argument("--dsn", type=str, default=None, help="A server to make the scratch database on "
                                                          "(default: a throwaway embedded one).")
    args = ap.parse_args(list(argv))

    from groundkit import Groundkit, embedding, model_swap
    from groundkit.embedders import embedder_for
    from groundkit.embedders.local import LocalProvider
    from groundkit.models import ContentObject
    from groundkit.outbound import gate

    data = Path(args.data) if args.data else default_data()
    ids, texts, _queries, _qrels = load(data, args.docs)
    titles = _titles(data, args.docs)
    log(f"{len(texts)} abstracts from {data}; load average {os.getloadavg()[0]:.2f}")
    rows: dict[str, list[Row]] = {}
    with server(args.dsn) as server_dsn, scratch_db(server_dsn, "embedjob") as dsn, Groundkit.connect(dsn) as gk:
        gk.put_space("scifact")
        objects = [ContentObject(object_id=i, version=1, content_type=args.content_type, space_id="scifact",
                                 tier_visibility="T0", title=titles[i], body=body)
                   for i, body in zip(ids, _bodies(data, args.docs), strict=True)]
        for start in range(0, len(objects), 500):
            gk.put_objects(objects[start:start + 500])
        job_texts = [str(r["t"]) for r in gk._fetch(
            "select distinct on (c.embed_hash_titled) groundkit._embed_text('titled', o.title, c.search_prefix,"
            " c.content) as t from groundkit.chunks c join groundkit.objects o using (object_id)"
            " order by c.embed_hash_titled", {})]
        chunks = int(gk._scalar("select count(*) from groundkit.chunks", {}))
        backend = int(gk._scalar("select pg_backend_pid()", {}))
        log(f"{chunks} chunks, {len(job_texts)} distinct texts to embed ({args.content_type}, recipe titled)")
        model_swap.add_model(gk, name="warm", provider="local", recipe="titled")
        embedder = embedder_for(embedding.get_model(gk, "warm"))
        provider = embedder._provider  # type: ignore[attr-defined]  # the seam's provider: the model alone
        assert isinstance(provider, LocalProvider)
        embedder.embed_documents(job_texts[:8])  # load the session before timing

        def provider_alone(items: list[str], batch: int) -> Callable[[], int]:
            def one(texts: list[str]) -> int:
                # through the outbound gate, as every provider call and `evals.bench embed` (local: no scrub)
                return gate.send("embed_documents", gate.Destination("local", None, "warm"), texts,
                                 lambda t: gate.Answer(provider.embed_array(t)[1]),
                                 provenance=gate.Provenance(unattributed=len(texts))).result

            def run() -> int:
                return sum(one(items[i:i + batch]) for i in range(0, len(items), batch))
            return run

        for r in range(args.rounds):
            round_rows = [measured("bench texts", len(texts), provider_alone(texts, args.batch)),
                          measured("job texts", len(job_texts), provider_alone(job_texts, args.batch))]
            tokens = round_rows[1].tokens  # (the job embeds the same texts: the same tokens)
            for batch in args.batches:
                name = f"job-{r}-{batch}"
                model_swap.add_model(gk, name=name, provider="local", recipe="titled")
                model = embedding.get_model(gk, name)

                def job(model: Any = model, batch: int = batch, tokens: int = tokens) -> int:
                    report = embedding.embed_pending(gk, model, embedder, batch=batch)
                    assert report.chunks == len(job_texts), report
                    return tokens

                round_rows.append(measured(f"job, batch {batch}", len(job_texts), job, backend))
            name = f"cli-{r}"
            model_swap.add_model(gk, name=name, provider="local", recipe="titled")
            round_rows.append(_command(dsn, name, len(job_texts), tokens))
            name = f"db-{r}"
            model_swap.add_model(gk, name=name, provider="local", recipe="titled")
            batches: list[float] = []

            def db_only(name: str = name, batches: list[float] = batches) -> int:
                return _db_path(gk, name, args.batches[0], batches)

            round_rows.append(measured("claim/store alone", len(job_texts), db_only, backend))
            tenth = max(1, len(batches) // 10)
            log(f"round {r + 1}: claim/store alone, ms per batch of {args.batches[0]}: first tenth "
                f"{1000 * sum(batches[:tenth]) / tenth:.1f}, last tenth {1000 * sum(batches[-tenth:]) / tenth:.1f}")
            for row in round_rows:
                rows.setdefault(row.arm, []).append(row)
                log(f"round {r + 1}: {row.line()}")
    print(f"{len(texts)} abstracts, {chunks} chunks ({len(job_texts)} distinct texts), {args.content_type}, "
          f"rounds {args.rounds}; load average after {os.getloadavg()[0]:.2f}")
    print(HEADER)
    for r in range(args.rounds):
        for rs in rows.values():
            print(f"{rs[r].line()}   (round {r + 1})")
    medians = {arm: _median(rs) for arm, rs in rows.items()}
    bench, plain = medians["bench texts"], medians["job texts"]  # (the round with the median wall)
    print(f"tokens per item: bench texts {bench.tokens / bench.items:.1f}, job texts {plain.tokens / plain.items:.1f} "
          f"({plain.tokens / plain.items / (bench.tokens / bench.items):.2f}x)")
    per_cpu = (plain.tokens / plain.cpu) / (bench.tokens / bench.cpu)
    print(f"tokens per CPU-second, job texts / bench texts: {per_cpu:.2f}")
    print("against the provider alone on the same texts, round by round (CPU: this process's; wall):")
    for arm, rs in rows.items():
        if arm.startswith(("job, batch", "groundkit embed")):
            cpu = ", ".join(f"{row.cpu / base.cpu:.3f}x" for row, base in zip(rs, rows["job texts"], strict=True))
            wall = ", ".join(f"{row.wall / base.wall:.3f}x" for row, base in zip(rs, rows["job texts"], strict=True))
            db = ", ".join(f"{row.server_cpu:.2f}" for row in rs if row.server_cpu is not None)
            print(f"  {arm}: CPU {cpu}; wall {wall}" + (f"; the database backend's CPU s {db}" if db else ""))
    alone = rows["claim/store alone"]
    print("claim/store alone, CPU ms per text (this process + the backend): " + ", ".join(
        f"{1000 * (row.cpu + (row.server_cpu or 0.0)) / row.items:.2f}" for row in alone))
    return 0


def _db_path(gk: Any, model: str, batch: int, seconds: list[float]) -> int:
    """The job's transactions (embed_claim, embed_store, commit) storing one constant vector for
    every text; appends each batch's seconds. Returns 0: no tokens embedded."""
    vector = [0.05] * 384
    while True:
        t0 = time.perf_counter()
        with gk.conn.transaction():
            rows = gk._fetch("select content_hash from groundkit.embed_claim(%(m)s, %(b)s)", {"m": model, "b": batch})
            if not rows:
                return 0
            gk._fetch("select groundkit.embed_store(%(m)s, %(h)s::bytea[], %(v)s::real[])",
                      {"m": model, "h": [r["content_hash"] for r in rows], "v": [list(vector) for _ in rows]})
        seconds.append(time.perf_counter() - t0)


def _command(dsn: str, model: str, items: int, tokens: int) -> Row:
    """``groundkit embed --model MODEL --json`` in a process of its own: the rate it reports, the
    child's CPU seconds (model load included: the rate excludes it)."""
    import json
    import resource
    import subprocess
    import sys

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    command = [sys.executable, "-c", "from groundkit.cli import app; app(prog_name='groundkit')",
               "embed", "--model", model, "--json", "--dsn", dsn]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["chunks"] == items, report
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Row("groundkit embed --json", items, tokens, float(report["seconds"]), cpu)


def _median(rows: list[Row]) -> Row:
    """The round with the median wall time (its own figures, not a mix of rounds)."""
    ordered = sorted(rows, key=lambda r: r.wall)
    return ordered[len(ordered) // 2] if len(ordered) % 2 else ordered[len(ordered) // 2 - 1]


def _corpus(data: Path, docs: int) -> list[dict[str, Any]]:
    import json

    rows: list[dict[str, Any]] = []
    with (data / "corpus.jsonl").open(encoding="utf-8") as f:
        for line in f:
            if len(rows) == docs:
                break
            rows.append(json.loads(line))
    return rows


def _titles(data: Path, docs: int) -> dict[str, str]:
    return {str(r["_id"]): str(r["title"]) for r in _corpus(data, docs)}


def _bodies(data: Path, docs: int) -> list[str]:
    return [str(r["text"]) for r in _corpus(data, docs)]

