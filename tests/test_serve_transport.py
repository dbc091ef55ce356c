"""Both servers' transport against slow and too many clients (issue 50, item 8): real sockets on
loopback that trickle a request one byte at a time, and connections beyond the cap."""

from __future__ import annotations

import logging
import select
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest

from groundkit import Groundkit, tokens
from groundkit.serve.background import serving
from groundkit.serve.http import create_app
from groundkit.serve.limits import ServerLimits
from groundkit.serve.mcp import http_app
from groundkit.serve.service import ReadService

GAP = 0.05  # seconds between two bytes of a trickling client: 200 bytes take 10 s, 20 deadlines of 0.5 s
APPS: dict[str, Callable[[ReadService], Any]] = {"http": create_app, "mcp": http_app}


@pytest.fixture
def world(community: Groundkit) -> Groundkit:
    community.put_object("open-1", 1, "board_post", "open", "T0", "Glazing", "Glazing kilns and pricing commissions")
    return community


def _address(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    return parts.hostname, parts.port


def _read_to_end(sock: socket.socket) -> bytes:
    out = b""
    try:
        while chunk := sock.recv(65536):
            out += chunk
    except ConnectionResetError:
        pass
    return out


def _trickle(url: str, request: bytes) -> tuple[int, bytes]:
    """Send ``request`` one byte every GAP seconds, watching the socket in between. Returns how
    many bytes went out before the server answered or closed, and what it sent."""
    with closing(socket.create_connection(_address(url), timeout=30)) as sock:
        for sent in range(len(request)):
            readable, _, _ = select.select([sock], [], [], GAP)
            if readable:
                return sent, _read_to_end(sock)
            try:
                sock.sendall(request[sent:sent + 1])
            except (BrokenPipeError, ConnectionResetError):
                return sent, b""
        return len(request), _read_to_end(sock)


def _request(path: str, headers: dict[str, str], body: bytes = b"") -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", f"Content-Length: {len(body)}",
             "Content-Type: application/json", "Accept: application/json, text/event-stream",
             *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


@pytest.fixture
def quick(dsn: str, world: Groundkit) -> Iterator[Callable[[str], str]]:
    """Start either app with half-second read deadlines; yields a function app name -> base URL."""
    limits = ServerLimits(header_timeout=0.5, body_timeout=0.5)
    started: list[Any] = []

    def start(name: str) -> str:
        cm = serving(APPS[name](ReadService(dsn, pool_size=2)), limits=limits)
        started.append(cm)
        return cm.__enter__()

    yield start
    for cm in started:
        cm.__exit__(None, None, None)


@pytest.mark.parametrize(("app", "path"), [("http", "/v1/search"), ("mcp", "/mcp")])
def test_a_client_trickling_its_headers_is_cut_off_after_the_header_deadline(
        quick: Callable[[str], str], app: str, path: str) -> None:
    url = quick(app)
    request = _request(path, {"X-Pad": "a" * 200}, b"{}")
    sent, answer = _trickle(url, request)
    assert sent < len(request) // 2, (sent, answer[:200])
    assert answer.startswith(b"HTTP/1.1 408 ") and b'"code": "timeout"' in answer, answer[:300]


@pytest.mark.parametrize(("app", "path"), [("http", "/v1/search"), ("mcp", "/mcp")])
def test_a_client_trickling_its_body_is_cut_off_after_the_body_deadline(
        quick: Callable[[str], str], world: Groundkit, app: str, path: str,
        caplog: pytest.LogCaptureFixture) -> None:
    url = quick(app)
    token = tokens.create_token(world, "t1")
    body = b'{"query": "' + b"pricing " * 25 + b'"}'
    head = _request(path, {"Authorization": f"Bearer {token}"}, body)[:-len(body)]
    with caplog.at_level(logging.INFO, logger="groundkit"), \
            closing(socket.create_connection(_address(url), timeout=30)) as sock:
        sock.sendall(head)  # the headers at once: only the body trickles
        sent = 0
        for sent in range(len(body)):
            if select.select([sock], [], [], GAP)[0]:
                break
            try:
                sock.sendall(body[sent:sent + 1])
            except (BrokenPipeError, ConnectionResetError):
                break
        answer = _read_to_end(sock)
    assert sent < len(body) // 2 and answer == b"", (sent, answer[:300])
    said = [r for r in caplog.records if r.name.startswith("groundkit")]
    assert any("body did not arrive within 0.5 s" in r.getMessage() for r in said), [r.getMessage() for r in said]
    assert all(r.exc_info is None for r in said)  # the app saw the client go, and said nothing more


def test_a_prompt_client_is_served_and_a_kept_alive_connection_gets_a_new_header_deadline(
        quick: Callable[[str], str], world: Groundkit) -> None:
    url = quick("http")
    token = tokens.create_token(world, "t1")
    request = _request("/v1/search", {"Authorization": f"Bearer {token}"}, b'{"query": "pricing"}')
    with closing(socket.create_connection(_address(url), timeout=30)) as sock:
        for _ in range(2):  # two requests on one connection, each well inside its deadline
            sock.sendall(request)
            answer = b""
            while b'"hits"' not in answer:
                chunk = sock.recv(65536)
                assert chunk, answer
                answer += chunk
            assert answer.startswith(b"HTTP/1.1 200 "), answer[:300]
        # the next request's headers are owed within the deadline again: a part of them, then nothing
        sock.sendall(request[:10])
        assert _read_to_end(sock).startswith(b"HTTP/1.1 408 ")
    with closing(socket.create_connection(_address(url), timeout=30)) as idle:
        assert _read_to_end(idle) == b""  # not one byte sent: closed at the deadline, without a 408


@contextmanager
def _deadline(seconds: float) -> Iterator[Callable[[], None]]:
    """A wait step for a polling loop: sleeps a little, fails the test after ``seconds``."""
    end = time.monotonic() + seconds

    def wait() -> None:
        assert time.monotonic() < end, f"still not so after {seconds} s"
        time.sleep(0.05)

    yield wait


def _waiting_on_a_lock(dsn: str, count: int) -> bool:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("select count(*) from pg_stat_activity where datname = current_database()"
                           " and wait_event_type = 'Lock'").fetchone()
    return row is not None and row[0] >= count


def test_connections_beyond_the_cap_are_refused_with_503(dsn: str, world: Groundkit) -> None:
    """Two connections are open (their searches wait on a held lock); a third is answered 503
    (GK019) before it sends anything, and closed. When the two are done, a new one is served."""
    token = tokens.create_token(world, "t1")
    limits = ServerLimits(max_connections=2)
    service = ReadService(dsn, pool_size=3, lock_timeout=60)
    request = _request("/v1/search", {"Authorization": f"Bearer {token}", "Connection": "close"},
                       b'{"query": "pricing"}')
    with serving(create_app(service), limits=limits) as url, psycopg.connect(dsn) as holder:
        holder.execute("lock table groundkit.chunks in access exclusive mode")
        first, second = (socket.create_connection(_address(url), timeout=30) for _ in range(2))
        with closing(first), closing(second):
            for sock in (first, second):
                sock.sendall(request)
            with _deadline(60) as waiting:
                while not _waiting_on_a_lock(dsn, 2):
                    waiting()
            with closing(socket.create_connection(_address(url), timeout=30)) as third:
                refused = _read_to_end(third)  # sends nothing: the answer comes at once
            assert refused.startswith(b"HTTP/1.1 503 ") and b'"code": "GK019"' in refused, refused[:300]
            holder.rollback()
            for sock in (first, second):
                assert _read_to_end(sock).startswith(b"HTTP/1.1 200 ")
        with _deadline(30) as waiting:  # the server counts the two closed once it has seen them go
            while True:
                with closing(socket.create_connection(_address(url), timeout=30)) as fourth:
                    fourth.sendall(request)
                    answer = _read_to_end(fourth)
                if answer.startswith(b"HTTP/1.1 200 "):
                    break
                waiting()
