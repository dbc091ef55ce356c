"""What telemetry and the sampler's draw cost a search: Groundkit.search without the OpenTelemetry
package, with the API and no SDK (its no-op tracer), and with the SDK recording every span, against
the bare search statement.

    python -m evals.bench telemetry [--dsn URL] [--objects 5000] [--searches 300] [--rounds 5]

A new database of ``--objects`` objects of generated text, one T1 reader. Each arm runs in its own
process (the package's absence is per process: ``sys.modules['opentelemetry'] = None`` before
groundkit is imported), ``--searches`` searches of k = 10 over a fixed query list after as many
untimed, and the arms take turns for ``--rounds`` rounds, each round in another order; per arm, the
fastest round's median and mean. The arms:

- ``bare``: ``select * from groundkit.search(...)`` through psycopg, rows validated into SearchHit,
  no span, no draw (the package absent);
- ``none``: ``Groundkit.search`` with the package absent: its checks, the span branch, the
  sampler's draw and the reader's tier rank in the same statement (sample_rate 0);
- ``api``: the same with opentelemetry-api and no SDK installed (spans are the API's no-ops);
- ``sdk``: the same with the SDK's TracerProvider and MeterProvider, every span recorded and
  handed to an exporter that drops it.

It also times ``telemetry.span()`` entered and left, alone, without the package (timeit).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence

from evals.bench.common import log, scratch_db, server

ARMS = ("bare", "none", "api", "sdk")
WORDS = [f"w{i}" for i in range(400)] + ["pricing", "commission", "kiln", "glaze", "studio", "client"]


def _build(dsn: str, objects: int, seed: int) -> list[str]:
    from groundkit import ContentObject, Groundkit

    rnd = random.Random(seed)
    with Groundkit.connect(dsn) as gk:
        gk.put_member("reader", "T1")
        gk.put_space("open", "T0")
        batch: list[ContentObject] = []
        for i in range(objects):
            body = " ".join(rnd.choice(WORDS) for _ in range(rnd.randint(40, 160)))
            batch.append(ContentObject(object_id=f"o{i}", version=1, content_type="document", space_id="open",
                                       tier_visibility=rnd.choice(["T0", "T1", "T2"]), title=f"doc {i}", body=body))
            if len(batch) == 500:
                gk.put_objects(batch)
                batch = []
        if batch:
            gk.put_objects(batch)
        gk.analyze_postings()
    return [" ".join(rnd.sample(WORDS, rnd.randint(1, 3))) for _ in range(50)]


_CHILD = """
import json, statistics, sys, time, timeit
arm, dsn, queries, n = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4])
if arm in ('bare', 'none'):
    sys.modules['opentelemetry'] = None
if arm == 'sdk':
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
    class Drop(SpanExporter):
        def export(self, spans): return SpanExportResult.SUCCESS
    provider = TracerProvider(); provider.add_span_processor(SimpleSpanProcessor(Drop()))
    trace.set_tracer_provider(provider)
    metrics.set_meter_provider(MeterProvider(metric_readers=[InMemoryMetricReader()]))
from groundkit import Groundkit, SearchHit, telemetry
gk = Groundkit.connect(dsn)
def bare(q):
    rows = gk._fetch('select * from groundkit.search(%(r)s, %(q)s, 10)', {'r': 'reader', 'q': q})
    return [SearchHit.model_validate(r) for r in rows]
run = bare if arm == 'bare' else (lambda q: gk.search('reader', q, k=10))
for i in range(n):
    run(queries[i % len(queries)])
times = []
for i in range(n):
    t0 = time.perf_counter(); run(queries[i % len(queries)]); times.append(time.perf_counter() - t0)
span_ns = None
if arm == 'none':
    def f():
        with telemetry.span('search', mode='bm25', k=10):
            pass
    span_ns = min(timeit.repeat(f, number=100000, repeat=5)) / 100000 * 1e9
print(json.dumps({'median': statistics.median(times), 'mean': statistics.mean(times), 'span_ns': span_ns,
                  'enabled': telemetry.enabled()}))
"""


def _round(arm: str, dsn: str, queries: list[str], n: int) -> dict[str, float]:
    done = subprocess.run([sys.executable, "-c", _CHILD, arm, dsn, json.dumps(queries), str(n)],
                          capture_output=True, text=True, check=True)
    result: dict[str, float] = json.loads(done.stdout)
    return result


def main(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m evals.bench telemetry", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsn", help="a PostgreSQL server (default: a throwaway embedded one)")
    ap.add_argument("--objects", type=int, default=5000)
    ap.add_argument("--searches", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args(argv)
    with server(args.dsn) as server_dsn, scratch_db(server_dsn, "bench_tel") as dsn:
        t0 = time.perf_counter()
        queries = _build(dsn, args.objects, args.seed)
        log(f"built {args.objects} objects in {time.perf_counter() - t0:.0f} s")
        best: dict[str, dict[str, float]] = {}
        span_ns: list[float] = []
        for r in range(args.rounds):
            order = list(ARMS[r % len(ARMS):] + ARMS[:r % len(ARMS)])
            for arm in order:
                res = _round(arm, dsn, queries, args.searches)
                if res.get("span_ns"):
                    span_ns.append(res["span_ns"])
                if arm not in best or res["median"] < best[arm]["median"]:
                    best[arm] = res
            log(f"round {r + 1}: " + ", ".join(f"{a} {best[a]['median'] * 1e6:.0f} us" for a in ARMS))
    base = best["bare"]
    print(f"{'arm':<6} {'median us':>10} {'mean us':>10} {'median vs bare':>15} {'vs none':>9}")
    for arm in ARMS:
        b = best[arm]
        print(f"{arm:<6} {b['median'] * 1e6:>10.0f} {b['mean'] * 1e6:>10.0f} "
              f"{b['median'] / base['median']:>15.3f} {b['median'] / best['none']['median']:>9.3f}")
    print(f"telemetry.span() entered and left without the package: {statistics.median(span_ns):.0f} ns")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
