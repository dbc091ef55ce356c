"""Both servers' HTTP transport: uvicorn with h11, and guards against slow and too many clients.

uvicorn has a keep-alive timeout (between requests) and ``limit_concurrency`` (a 503 for a
request that arrives over the limit, answered only once its headers are in), but nothing that
ends a request whose headers or body trickle in: a client that sends one byte a second holds its
connection, and a task, for as long as it likes. The guards live in the HTTP protocol, a
subclass of uvicorn's h11 protocol, because that is the one place that sees a connection before
a request exists and each byte as it arrives; the ASGI app only sees a request once its headers
are complete, and never sees a connection that sends nothing. They do not touch the app, so
they stay as they are when the servers' handlers move to an async database client.

- **Header deadline**: a request's headers must be complete within ``header_timeout`` seconds of
  the connection opening, or of the previous response on it ending (keep-alive); else the
  server answers 408 and closes the connection (or just closes it, when not one byte of a
  request has come: an idle connection).
- **Body deadline**: once the headers are in, the whole body must arrive within
  ``body_timeout`` seconds; else the connection is closed (the app, waiting for the body, sees
  the client gone).
- **Connection cap**: at most ``max_connections`` connections are open at once; one more is
  answered 503 (GK019) and closed at once, not queued. Its socket costs nothing after that.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, ClassVar, Literal

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from groundkit.serve.limits import ServerLimits

log = logging.getLogger("groundkit.serve")
Phase = Literal["headers", "body"]


def _raw_response(status: int, reason: str, code: str, message: str) -> bytes:
    """A whole HTTP/1.1 response that closes the connection, for when there is no request (or
    no h11 state) to answer through."""
    body = json.dumps({"code": code, "message": message}).encode()
    head = (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n")
    return head.encode("ascii") + body


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with the read deadlines and the connection cap of ``limits``
    (a subclass per server sets it: :func:`guarded_protocol`)."""

    limits: ClassVar[ServerLimits] = ServerLimits()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._phase: Phase | None = None
        self._refused = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        if len(self.connections) >= self.limits.max_connections:
            self._refused = True
            log.info("refused a connection: %d are open (max_connections)", len(self.connections))
            transport.write(_raw_response(503, "Service Unavailable", "GK019",
                                          "the server has as many connections open as it takes; try again"))
            transport.close()
            return
        super().connection_made(transport)
        self._follow()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if not self._refused:  # a refused connection was never registered
            super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        super().data_received(data)
        self._follow()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._follow()

    def _follow(self) -> None:
        """Arm the deadline of what the client owes now: headers (between requests), the body
        (after the headers), or nothing (the request is in; the response is the app's)."""
        if self.transport is None or self.transport.is_closing():
            self._disarm()
            return
        state = self.conn.their_state
        phase: Phase | None = "headers" if state is h11.IDLE else "body" if state is h11.SEND_BODY else None
        if phase == self._phase:
            return
        self._disarm()
        self._phase = phase
        if phase is not None:
            seconds = self.limits.header_timeout if phase == "headers" else self.limits.body_timeout
            self._deadline = self.loop.call_later(seconds, self._expire, phase, seconds)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline, self._phase = None, None

    def _expire(self, phase: Phase, seconds: float) -> None:
        self._deadline, self._phase = None, None
        if self.transport.is_closing():
            return
        if phase == "headers" and not self.conn.trailing_data[0]:
            # Not one byte of a request: an idle connection (kept alive, or opened and left). Close
            # it without a word, as uvicorn's keep-alive timeout does: a 408 here could reach a
            # client that just sent a request on it and read as that request's answer.
            self.transport.close()
            return
        client = f"{self.client[0]}:{self.client[1]}" if self.client else "a client"
        log.info("closed the connection of %s: the request's %s did not arrive within %g s", client, phase, seconds)
        if phase == "headers":
            self.transport.write(_raw_response(408, "Request Timeout", "timeout",
                                               f"the request's headers did not arrive within {seconds:g} s"))
            self.transport.close()
        else:  # the app is running and may be writing: drop the connection, buffered bytes and all
            self.transport.abort()


def guarded_protocol(limits: ServerLimits) -> type[GuardedH11Protocol]:
    """A protocol class for uvicorn's ``http`` setting, with ``limits``."""
    return type("GuardedH11Protocol", (GuardedH11Protocol,), {"limits": limits})


def uvicorn_config(app: Any, host: str, port: int, limits: ServerLimits | None = None) -> Any:
    """The uvicorn configuration both servers run with: h11 with the guards, no WebSocket
    upgrades (neither server has one), warnings only in the log."""
    import uvicorn

    return uvicorn.Config(app, host=host, port=port, http=guarded_protocol(limits or ServerLimits()), ws="none",
                          log_level="warning", lifespan="on")


def serve(app: Any, host: str, port: int, limits: ServerLimits | None = None) -> None:
    """Serve ``app`` until interrupted."""
    import uvicorn

    uvicorn.Server(uvicorn_config(app, host, port, limits)).run()
