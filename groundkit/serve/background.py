"""An ASGI app served by uvicorn on loopback in a background thread: for the tests, the gate's
surfaces section and the load benchmark, which talk to it over real HTTP. The transport is the
servers' own (:mod:`groundkit.serve.transport`), guards included."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from groundkit.serve.limits import ServerLimits
from groundkit.serve.transport import uvicorn_config


@contextmanager
def serving(app: Any, host: str = "127.0.0.1", startup_seconds: float = 30.0,
            limits: ServerLimits | None = None) -> Iterator[str]:
    """Serve ``app`` on a free port of ``host``; yields its base URL, stops it on exit."""
    import uvicorn

    server = uvicorn.Server(uvicorn_config(app, host, 0, limits))
    thread = threading.Thread(target=server.run, name="groundkit-serve", daemon=True)
    thread.start()
    deadline = time.monotonic() + startup_seconds
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the server did not start")
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
