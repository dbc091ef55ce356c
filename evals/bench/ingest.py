"""Write throughput: one object per transaction, bulk, and concurrent writers.

    python -m evals.bench ingest --fresh 60000                       # a new user's first load
    python -m evals.bench ingest --chunks 100000 --writers 1 2 4     # bulk, then writes on top

``--fresh N``: a new database (the server's defaults for the chunker and the pending part), N
documents of 40-160 words written through ``put_object``, one per transaction (autocommit), on
one connection with nothing else running, then one ``merge_pending()`` for what the writes left,
inside the time. It prints documents/s and chunks/s for each tenth of the load, so a rate that
falls as the tables grow shows.

``--chunks N``: a new database loaded with the benchmark corpus through ``put_objects`` (bulk,
--loaders connections), then ``put_object`` one per transaction on top of it (--single-chunks),
retier/delete/redact of 20 objects each, and 1, 2, 4 concurrent ``put_object`` writers
(--writer-seconds each) with how often they waited on a lock. Every put_object figure includes
the merges of the pending part: the writers' own and one ``merge_pending()`` at the end.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from evals.bench.common import (
    Progress,
    log,
    populate_authority,
    sample_for_queries,
    scratch_db,
    server,
    timed,
)
from evals.bench.corpus import PUT_OBJECT_SQL, Corpus, Obj


def _loader_conns(dsn: str, n: int) -> list[psycopg.Connection[Any]]:
    """n connections whose backends write different statistics shards (pid % 8)."""
    conns: list[psycopg.Connection[Any]] = []
    shards: set[int] = set()
    spare: list[psycopg.Connection[Any]] = []
    while len(conns) < n:
        c = psycopg.connect(dsn, autocommit=True)
        shard = c.info.backend_pid % 8
        if shard in shards:
            spare.append(c)
            continue
        shards.add(shard)
        conns.append(c)
    for c in spare:
        c.close()
    return conns


def bulk_load(dsn: str, corpus: Corpus, n_chunks: int, batch_chunks: int, loaders: int,
              sample: list[Obj]) -> dict[str, float]:
    """Load through groundkit.put_objects with ``loaders`` concurrent connections."""
    import queue

    prog = Progress("bulk load (chunks)", n_chunks)
    conns = _loader_conns(dsn, loaders)
    work: queue.Queue[tuple[list[dict[str, object]], int] | None] = queue.Queue(maxsize=2 * loaders)
    done = [0]
    errors: list[str] = []
    lock = threading.Lock()

    def loader(conn: psycopg.Connection[Any]) -> None:
        while True:
            item = work.get()
            if item is None:
                return
            batch, n = item
            try:
                conn.execute("select count(*) from groundkit.put_objects(%s)", (Jsonb(batch),))
            except Exception as exc:  # reported below
                errors.append(repr(exc))
            with lock:
                done[0] += n
                prog.update(done[0])

    def feed(objs: Iterator[Obj], limit: int | None) -> None:
        batch: list[dict[str, object]] = []
        in_batch = 0
        fed = 0
        for obj in objs:
            sample_for_queries(obj, sample)
            batch.append(obj.as_json())
            in_batch += len(obj.paragraphs)
            fed += len(obj.paragraphs)
            if in_batch >= batch_chunks:
                work.put((batch, in_batch))
                batch, in_batch = [], 0
            if limit is not None and fed >= limit:
                break
        if batch:
            work.put((batch, in_batch))

    objs = corpus.objects(n_chunks)
    # Calibrate the impact reference length on the first tenth (docs/bm25.md), then load the rest.
    first = min(20_000, max(1, n_chunks // 10))

    def phase(limit: int | None) -> float:
        t0 = time.perf_counter()
        threads = [threading.Thread(target=loader, args=(c,)) for c in conns]
        for t in threads:
            t.start()
        feed(objs, limit)
        for _ in threads:
            work.put(None)
        for t in threads:
            t.join()
        return time.perf_counter() - t0

    t_first = phase(first)
    reindex_s, _ = timed(lambda: conns[0].execute("select groundkit.reindex_impacts()"))
    load_s = t_first + phase(None)
    for c in conns:
        c.close()
    if errors:
        raise RuntimeError(f"bulk load failed: {errors[0]}")
    return {"bulk_chunks": done[0], "bulk_s": load_s, "bulk_chunks_per_s": done[0] / load_s,
            "reindex_s": reindex_s, "loaders": loaders}


def single_ingest(dsn: str, corpus: Corpus, n_chunks: int, prefix: str) -> dict[str, Any]:
    objs = list(corpus.objects(n_chunks))
    chunks = 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        t0 = time.perf_counter()
        for o in objs:
            conn.execute(PUT_OBJECT_SQL, dict(o.as_json(), object_id=prefix + o.object_id))
            chunks += len(o.paragraphs)
        # what is left pending is merged inside the time (docs/bm25.md, "The pending part")
        conn.execute("select groundkit.merge_pending()")
        dt = time.perf_counter() - t0
    return {"objects": len(objs), "chunks": chunks, "s": dt, "chunks_per_s": chunks / dt,
            "objects_per_s": len(objs) / dt, "ids": [prefix + o.object_id for o in objs]}


LIFECYCLE_SQL = {
    "retier_object": "select groundkit.retier_object(%s, 2, 'T3')",
    "delete_object": "select groundkit.delete_object(%s, 2)",
    "redact_object": "select groundkit.redact_object(%s, 2)",
}


def lifecycle_writes(dsn: str, ids: Sequence[str], per_op: int) -> dict[str, dict[str, float]]:
    """Mean and max ms of retier/delete/redact, one object per transaction, each on its own objects.

    Each replaces or removes an object's postings and statistics, so a path among them that
    reads the whole postings table (as redaction once did) shows up here."""
    out: dict[str, dict[str, float]] = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        for i, (op, stmt) in enumerate(LIFECYCLE_SQL.items()):
            lat = []
            for oid in ids[i * per_op:(i + 1) * per_op]:
                t0 = time.perf_counter()
                status = conn.execute(stmt, (oid,)).fetchone()
                lat.append(1000 * (time.perf_counter() - t0))
                if status is None or status[0] != "applied":
                    raise RuntimeError(f"{op} {oid}: {status}")
            out[op] = {"n": len(lat), "mean_ms": statistics.fmean(lat), "max_ms": max(lat)}
    return out


def concurrent_ingest(dsn: str, corpus: Corpus, writers: int, seconds: float, tag: str) -> dict[str, float]:
    objs = list(corpus.objects(40_000))
    stop = threading.Event()
    counts = [0] * writers
    chunk_counts = [0] * writers
    errors: list[str] = []

    def work(w: int) -> None:
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                i = w
                while not stop.is_set() and i < len(objs):
                    o = objs[i]
                    conn.execute(PUT_OBJECT_SQL, dict(o.as_json(), object_id=f"{tag}-{o.object_id}"))
                    counts[w] += 1
                    chunk_counts[w] += len(o.paragraphs)
                    i += writers
        except Exception as exc:  # reported, not hidden
            errors.append(repr(exc))

    samples = 0
    lock_waits = 0
    threads = [threading.Thread(target=work, args=(w,)) for w in range(writers)]
    with psycopg.connect(dsn, autocommit=True) as mon:
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        while time.perf_counter() - t0 < seconds:
            row = mon.execute(
                "select count(*) filter (where wait_event_type = 'Lock'), count(*) from pg_stat_activity"
                " where datname = current_database() and pid <> pg_backend_pid() and state = 'active'"
            ).fetchone()
            assert row is not None
            lock_waits += int(row[0])
            samples += int(row[1])
            time.sleep(0.05)
        stop.set()
        for t in threads:
            t.join()
        # what is left pending is merged inside the time (docs/bm25.md, "The pending part")
        mon.execute("select groundkit.merge_pending()")
        dt = time.perf_counter() - t0
    if errors:
        raise RuntimeError(f"writer failed: {errors[0]}")
    return {"writers": writers, "chunks_per_s": sum(chunk_counts) / dt, "objects_per_s": sum(counts) / dt,
            "lock_wait_share": lock_waits / samples if samples else 0.0}



def fresh_ingest(dsn: str, n_docs: int, seed: int, windows: int = 10) -> dict[str, Any]:
    """``n_docs`` documents through put_object, one per transaction, into a new database: the
    rate of each of ``windows`` equal parts and of the whole, the final merge included."""
    docs = list(Corpus(seed=seed).documents(n_docs))
    per = max(1, n_docs // windows)
    rates: list[tuple[float, float]] = []
    prog = Progress("put_object (documents)", n_docs)
    with psycopg.connect(dsn, autocommit=True) as conn:
        populate_authority(conn, Corpus(seed=seed), chunk_settings=False)
        first_chunk = int(conn.execute("select coalesce(max(chunk_id), 0) from groundkit.chunks").fetchone()[0])  # type: ignore[index]
        t0 = tw = time.perf_counter()
        cw = first_chunk
        for i, d in enumerate(docs, 1):
            conn.execute(PUT_OBJECT_SQL, d.as_json())
            if i % per == 0 or i == n_docs:
                now = time.perf_counter()
                top = int(conn.execute("select coalesce(max(chunk_id), 0) from groundkit.chunks").fetchone()[0])  # type: ignore[index]
                rates.append((per / (now - tw), (top - cw) / (now - tw)))
                tw, cw = now, top
            prog.update(i)
        merge_s, _ = timed(lambda: conn.execute("select groundkit.merge_pending()"))
        dt = time.perf_counter() - t0
        chunks = int(conn.execute("select count(*) from groundkit.chunks").fetchone()[0])  # type: ignore[index]
    return {"documents": n_docs, "chunks": chunks, "s": dt, "docs_per_s": n_docs / dt, "chunks_per_s": chunks / dt,
            "final_merge_s": merge_s, "windows": rates}


def report_fresh(r: dict[str, Any]) -> None:
    print(f"\nfresh database, {r['documents']:,} documents (40-160 words) through put_object, one per "
          f"transaction, one connection: {r['docs_per_s']:,.0f} documents/s, {r['chunks_per_s']:,.0f} chunks/s "
          f"({r['chunks']:,} chunks in {r['s']:.0f} s, the final merge_pending {r['final_merge_s']:.1f} s)")
    print("documents/s by tenth of the load: " + ", ".join(f"{d:,.0f}" for d, _c in r["windows"]))


def report_load(r: dict[str, Any]) -> None:
    b, s = r["bulk"], r["single"]
    print(f"\n{b['bulk_chunks']:,} chunks: bulk put_objects ({b['loaders']} connections) {b['bulk_chunks_per_s']:,.0f} "
          f"chunks/s; put_object one per transaction {s['chunks_per_s']:,.0f} chunks/s "
          f"({s['objects_per_s']:,.0f} objects/s, {s['chunks']:,} chunks)")
    print("one object per transaction, mean / max ms: " + ", ".join(
        f"{op} {v['mean_ms']:.1f} / {v['max_ms']:.1f}" for op, v in r["lifecycle"].items()))
    if r["concurrent"]:
        base = r["concurrent"][0]["chunks_per_s"]
        print("concurrent put_object writers: " + ", ".join(
            f"{c['writers']} -> {c['chunks_per_s']:,.0f} chunks/s ({c['chunks_per_s'] / base:.2f}x, "
            f"lock-wait samples {100 * c['lock_wait_share']:.1f}%)" for c in r["concurrent"]))


def writes_on_top(dsn: str, args: argparse.Namespace) -> dict[str, Any]:
    """put_object one at a time, the lifecycle writes and concurrent writers on a loaded database."""
    res: dict[str, Any] = {}
    res["single"] = single_ingest(dsn, Corpus(seed=args.seed + 1), args.single_chunks, "single-")
    log(f"  put_object one at a time: {res['single']['chunks_per_s']:,.0f} chunks/s")
    ids = res["single"].pop("ids")
    res["lifecycle"] = lifecycle_writes(dsn, ids, min(20, len(ids) // len(LIFECYCLE_SQL)))
    res["concurrent"] = []
    for w in args.writers:
        c = concurrent_ingest(dsn, Corpus(seed=args.seed + 2 + w), w, args.writer_seconds, f"w{w}")
        log(f"  {w} writers: {c['chunks_per_s']:,.0f} chunks/s, lock waits {100 * c['lock_wait_share']:.1f}%")
        res["concurrent"].append(c)
    return res


def add_write_args(ap: argparse.ArgumentParser) -> None:
    """The options of the writes on top of a load (shared with `search`, which runs them too)."""
    ap.add_argument("--single-chunks", type=int, default=3000, help="chunks written one object per transaction")
    ap.add_argument("--writers", type=int, nargs="*", default=[1, 2, 4], help="concurrent put_object writers")
    ap.add_argument("--writer-seconds", type=float, default=8.0)
    ap.add_argument("--batch-chunks", type=int, default=4000, help="chunks per put_objects call of the bulk load")
    ap.add_argument("--loaders", type=int, default=2, help="concurrent bulk-load connections")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m evals.bench ingest", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsn", help="a server to create the databases on (default: a throwaway embedded one)")
    ap.add_argument("--fresh", type=int, metavar="DOCUMENTS", help="documents written into a new database")
    ap.add_argument("--chunks", type=int, help="chunks bulk-loaded before the writes on top")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--keep", action="store_true", help="keep the database (with --dsn)")
    add_write_args(ap)
    args = ap.parse_args(argv)
    if not args.fresh and not args.chunks:
        ap.error("give --fresh DOCUMENTS, --chunks CHUNKS or both")
    with server(args.dsn) as server_dsn:
        if args.fresh:
            with scratch_db(server_dsn, "bh_fresh", args.keep) as dsn:
                report_fresh(fresh_ingest(dsn, args.fresh, args.seed))
        if args.chunks:
            with scratch_db(server_dsn, "bh_ingest", args.keep) as dsn:
                corpus = Corpus(seed=args.seed)
                with psycopg.connect(dsn, autocommit=True) as conn:
                    populate_authority(conn, corpus)
                res: dict[str, Any] = {"bulk": bulk_load(dsn, corpus, args.chunks, args.batch_chunks, args.loaders, [])}
                res.update(writes_on_top(dsn, args))
                report_load(res)
    return 0
