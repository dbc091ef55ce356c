"""How long the HTTP server lets a request wait on the database, and a slow client hold a connection.

    python -m evals.bench serve-guards                 # the servers' default timeouts and limits
    python -m evals.bench serve-guards --dsn URL --lock-timeout 2 --header-timeout 5 --max-connections 100

In one run: a fresh database (a throwaway embedded PostgreSQL 18, or --dsn's server) with a
small world, and `groundkit serve http` started as its own process on loopback with the
options given (the defaults are the server's). Then:

- **held lock**: with the pool warm, another connection takes ACCESS EXCLUSIVE on
  groundkit.chunks (as `groundkit rebuild` does) and holds it for --hold seconds while --clients
  searches arrive at once. Each one's time to its answer, by answer: 503 GK019 "a lock timeout"
  (a pooled connection, waited --lock-timeout), 503 GK019 "no connection came free" (waited
  --pool-timeout for a connection), or 200 (it waited for the lock to go).
- **slow clients**: --tricklers clients send a request's headers one byte every --gap seconds,
  --body-tricklers send the headers at once and the body one byte at a time, all at once; then
  --extra more connect while those are open. Each one's time connected, by what ended it: the
  server's 408, the server closing, a 503 (over --max-connections), or nothing before
  --give-up seconds (the run then fails).

The run fails (exit 1) when a search waited out the held lock or a trickling client was never
cut off.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections import Counter, defaultdict
from collections.abc import Sequence

import psycopg

from evals.bench.common import log, pct, scratch_db, server
from evals.bench.http import free_port, start_server
from groundkit import Groundkit, tokens
from groundkit.serve.limits import BODY_TIMEOUT, HEADER_TIMEOUT
from groundkit.serve.service import LOCK_TIMEOUT, POOL_TIMEOUT, STATEMENT_TIMEOUT

Outcome = tuple[str, float]  # (what ended it, seconds)


def world(dsn: str, objects: int) -> str:
    """A member, a space and ``objects`` posts; the member's token."""
    with Groundkit.connect(dsn) as gk:
        gk.put_member("m1", "T1")
        gk.put_space("board", "T0")
        for i in range(objects):
            gk.put_object(f"post-{i}", 1, "board_post", "board", "T0", f"Post {i}",
                          f"Pricing commissions and glazing kilns, note {i}")
        return tokens.create_token(gk, "m1")


async def held_lock(url: str, dsn: str, token: str, clients: int, pool_size: int, hold: float) -> list[Outcome]:
    import httpx

    headers = {"Authorization": f"Bearer {token}"}
    body = {"query": "pricing commissions", "k": 5}
    async with httpx.AsyncClient(base_url=url, timeout=hold + 60,
                                 limits=httpx.Limits(max_connections=clients + pool_size)) as client:
        warm = await asyncio.gather(*(client.post("/v1/search", json=body, headers=headers) for _ in range(pool_size)))
        assert all(r.status_code == 200 for r in warm), [r.text for r in warm]

        async def one() -> Outcome:
            t0 = time.perf_counter()
            r = await client.post("/v1/search", json=body, headers=headers)
            seconds = time.perf_counter() - t0
            if r.status_code != 503:
                return str(r.status_code), seconds
            message = r.json()["message"]
            reason = "lock timeout" if "lock timeout" in message else "statement timeout" \
                if "statement timeout" in message else "no connection" if "no connection" in message else "other"
            return f"503 {r.json()['code']} ({reason})", seconds

        holder = psycopg.connect(dsn)
        try:
            holder.execute("lock table groundkit.chunks in access exclusive mode")
            answers = asyncio.gather(*(one() for _ in range(clients)))
            try:
                return await asyncio.wait_for(asyncio.shield(answers), hold)
            except TimeoutError:
                holder.rollback()  # the rest waited for the lock all along
                return await answers
        finally:
            holder.close()


async def trickle(host: str, port: int, head: bytes, slow: bytes, gap: float, give_up: float) -> Outcome:
    """Connect, send ``head`` at once and ``slow`` one byte every ``gap`` s, until the server
    answers or closes (or ``give_up`` s pass)."""
    t0 = time.perf_counter()
    try:
        reader, writer = await asyncio.open_connection(host, port)
    except OSError:
        return "connect failed", time.perf_counter() - t0
    answer = b""
    try:
        writer.write(head)
        reading = asyncio.ensure_future(reader.read(65536))
        sent = 0
        while time.perf_counter() - t0 < give_up:
            done, _ = await asyncio.wait({reading}, timeout=gap)
            if done:
                answer = reading.result()
                break
            if sent < len(slow):
                writer.write(slow[sent:sent + 1])
                sent += 1
        else:
            reading.cancel()
            return "still connected", time.perf_counter() - t0
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()
    seconds = time.perf_counter() - t0
    status = answer[9:12].decode("ascii", "replace") if answer.startswith(b"HTTP/1.1 ") else ""
    return (f"answered {status}, closed" if status else "closed"), seconds


async def slow_clients(url: str, token: str, tricklers: int, body_tricklers: int, extra: int, gap: float,
                       give_up: float, header_timeout: float) -> dict[str, list[Outcome]]:
    host, port = url.removeprefix("http://").split(":")
    pad = b"a" * int(give_up / gap + 10)
    headers = b"POST /v1/search HTTP/1.1\r\nHost: bench\r\nX-Pad: " + pad + b"\r\n\r\n"
    body = b'{"query": "' + pad + b'"}'
    body_head = (f"POST /v1/search HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer {token}\r\n"
                 f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode()

    async def extras() -> list[Outcome]:
        await asyncio.sleep(min(1.0, header_timeout / 4))  # while the tricklers are connected
        return list(await asyncio.gather(*(trickle(host, int(port), b"", headers, gap, give_up)
                                           for _ in range(extra))))

    header_runs = asyncio.gather(*(trickle(host, int(port), b"", headers, gap, give_up) for _ in range(tricklers)))
    body_runs = asyncio.gather(*(trickle(host, int(port), body_head, body, gap, give_up)
                                 for _ in range(body_tricklers)))
    h, b, e = await asyncio.gather(header_runs, body_runs, extras())
    return {"headers trickled": list(h), "body trickled": list(b), "beyond the tricklers": e}


def rows(kind: str, setting: str, outcomes: Sequence[Outcome]) -> list[str]:
    by: dict[str, list[float]] = defaultdict(list)
    for what, seconds in outcomes:
        by[what].append(seconds)
    return [f"| {kind} | {setting} | {what} | {len(xs):,} | {pct(xs, 50):.2f} | {max(xs):.2f} |"
            for what, xs in sorted(by.items())]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m evals.bench serve-guards", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsn", help="a server to create the scratch database on (default: a throwaway embedded one)")
    ap.add_argument("--objects", type=int, default=200)
    ap.add_argument("--pool-size", type=int, default=10)
    ap.add_argument("--pool-timeout", type=float, default=POOL_TIMEOUT)
    ap.add_argument("--lock-timeout", type=float, default=LOCK_TIMEOUT)
    ap.add_argument("--statement-timeout", type=float, default=STATEMENT_TIMEOUT)
    ap.add_argument("--header-timeout", type=float, default=HEADER_TIMEOUT)
    ap.add_argument("--body-timeout", type=float, default=BODY_TIMEOUT)
    ap.add_argument("--max-connections", type=int, default=250,
                    help="the server's cap here (its default is 500): --tricklers + --body-tricklers fill it")
    ap.add_argument("--clients", type=int, default=30, help="searches arriving while the lock is held")
    ap.add_argument("--hold", type=float, default=60.0, help="seconds the lock is held at most")
    ap.add_argument("--tricklers", type=int, default=200)
    ap.add_argument("--body-tricklers", type=int, default=50)
    ap.add_argument("--extra", type=int, default=50, help="connections opened while the tricklers are")
    ap.add_argument("--gap", type=float, default=0.2, help="seconds between a trickling client's bytes")
    args = ap.parse_args(argv)
    give_up = 3 * max(args.header_timeout, args.body_timeout) + 5

    options = ["--pool-timeout", str(args.pool_timeout), "--lock-timeout", str(args.lock_timeout),
               "--statement-timeout", str(args.statement_timeout), "--header-timeout", str(args.header_timeout),
               "--body-timeout", str(args.body_timeout), "--max-connections", str(args.max_connections)]
    with server(args.dsn) as server_dsn, scratch_db(server_dsn, "bh_guards") as dsn:
        token = world(dsn, args.objects)
        port = free_port()
        proc = start_server(dsn, port, args.pool_size, options)
        url = f"http://127.0.0.1:{port}"
        try:
            log(f"held lock: {args.clients} searches, the lock held up to {args.hold:g} s")
            locked = asyncio.run(held_lock(url, dsn, token, args.clients, args.pool_size, args.hold))
            log(f"slow clients: {args.tricklers} + {args.body_tricklers} trickling, {args.extra} more")
            slow = asyncio.run(slow_clients(url, token, args.tricklers, args.body_tricklers, args.extra, args.gap,
                                            give_up, args.header_timeout))
        finally:
            proc.terminate()
            proc.wait(timeout=30)

    print(f"### groundkit serve http: timeouts and limits (pool of {args.pool_size}, loopback)\n")
    print("| what | setting | answer | clients | p50 s | max s |\n|---|---|---|---|---|---|")
    lines = [*rows("search, ACCESS EXCLUSIVE held on chunks", f"lock_timeout {args.lock_timeout:g} s, "
                   f"pool_timeout {args.pool_timeout:g} s, held {args.hold:g} s", locked),
             *rows(f"headers, 1 byte per {args.gap:g} s", f"header_timeout {args.header_timeout:g} s",
                   slow["headers trickled"]),
             *rows(f"body, 1 byte per {args.gap:g} s", f"body_timeout {args.body_timeout:g} s",
                   slow["body trickled"]),
             *rows("connections while those are open", f"max_connections {args.max_connections}",
                   slow["beyond the tricklers"])]
    print("\n".join(lines))
    counts = Counter(what for what, _ in locked)
    stuck = counts["200"] + sum(what == "still connected" for runs in slow.values() for what, _ in runs)
    return 1 if stuck else 0
