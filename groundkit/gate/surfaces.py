"""The gate's ``surfaces`` section: the golden set (world, queries, scenario steps with their
downgrades, private boards and deletes, and the reader x object grid after every step) run
again through each serving surface over real loopback HTTP, as each reader's bearer token:

- ``http``: POST /v1/search of ``groundkit serve http`` (Starlette on uvicorn), with httpx;
- ``mcp``: the ``search`` tool of ``groundkit serve mcp`` over streamable HTTP, with the MCP SDK's
  own client.

The surfaces are optional extras (``groundkit[http,mcp]``); the gate itself is not. Without them
the section is reported as skipped, naming what to install, and the gate runs on; the surface
tests (tests/test_serve_http.py, tests/test_serve_mcp.py) hold the same cases wherever the test
extra is installed.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import ExitStack, asynccontextmanager, contextmanager
from typing import Any

from groundkit import tokens
from groundkit.client import Groundkit
from groundkit.errors import GroundkitError
from groundkit.gate.golden import GoldenRun, Hit, Searcher, load_golden, load_grid
from groundkit.gate.tap import Tap
from groundkit.gate.throwaway import GateDatabases, connect_dict
from groundkit.serve.models import MAX_SURFACE_K

EXTRAS = ("starlette", "uvicorn", "httpx", "mcp", "psycopg_pool")


def missing_extras() -> list[str]:
    return [m for m in EXTRAS if importlib.util.find_spec(m) is None]


def run_section(dbs: GateDatabases, tap: Tap, opts: Any) -> None:
    missing = missing_extras()
    if missing:
        tap.skip("surfaces section", f"needs {', '.join(missing)}: pip install 'groundkit[http,mcp]'")
        return
    _, _, grid = load_grid()
    for name, surface in (("http", _http_surface), ("mcp", _mcp_surface)):
        dsn = dbs.clone()
        try:
            with Groundkit.connect(dsn) as gk, connect_dict(dsn) as admin, surface(dsn, gk) as search:
                GoldenRun(gk, admin, search, tap, load_golden(), grid, label=f"{name}: ").run()
        finally:
            dbs.drop(dsn)


def _token_for(gk: Groundkit) -> Callable[[str], str]:
    made: dict[str, str] = {}

    def token(reader: str) -> str:
        if reader not in made:
            made[reader] = tokens.create_token(gk, reader)
        return made[reader]

    return token


def _hits(body: dict[str, Any]) -> list[Hit]:
    return [Hit(h["object_id"], h["object_version"], h["title"], h["content"]) for h in body["hits"]]


def _request(query: str, k: int, content_types: Sequence[str] | None,
             space_ids: Sequence[str] | None) -> dict[str, Any]:
    # (the surfaces page at MAX_SURFACE_K; the golden set has fewer objects than that)
    return {"query": query, "k": min(k, MAX_SURFACE_K), "content_types": content_types, "space_ids": space_ids}


def _raise(body: dict[str, Any]) -> None:
    raise GroundkitError(str(body.get("message")), sqlstate=str(body.get("code")))


@contextmanager
def _http_surface(dsn: str, gk: Groundkit) -> Iterator[Searcher]:
    import httpx

    from groundkit.serve.background import serving
    from groundkit.serve.http import create_app
    from groundkit.serve.service import ReadService

    token = _token_for(gk)
    with serving(create_app(ReadService(dsn, pool_size=2))) as url, httpx.Client(base_url=url, timeout=30) as client:
        def search(reader_sub: str, query: str, k: int = 10, content_types: Sequence[str] | None = None,
                   space_ids: Sequence[str] | None = None) -> list[Hit]:
            r = client.post("/v1/search", json=_request(query, k, content_types, space_ids),
                            headers={"Authorization": f"Bearer {token(reader_sub)}"})
            if r.status_code != 200:
                _raise(r.json())
            return _hits(r.json())

        yield search


@asynccontextmanager
async def _mcp_client(url: str, token: str) -> AsyncIterator[Any]:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    async with create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http, \
            Client(streamable_http_client(url, http_client=http)) as client:
        yield client


@contextmanager
def _mcp_surface(dsn: str, gk: Groundkit) -> Iterator[Searcher]:
    from anyio.from_thread import start_blocking_portal
    from mcp_types import TextContent

    from groundkit.serve.background import serving
    from groundkit.serve.mcp import http_app
    from groundkit.serve.service import ReadService

    token = _token_for(gk)
    with serving(http_app(ReadService(dsn, pool_size=2))) as url, start_blocking_portal() as portal, \
            ExitStack() as sessions:
        clients: dict[str, Any] = {}  # one MCP session per reader, kept open across the run

        def search(reader_sub: str, query: str, k: int = 10, content_types: Sequence[str] | None = None,
                   space_ids: Sequence[str] | None = None) -> list[Hit]:
            if reader_sub not in clients:
                cm = portal.wrap_async_context_manager(_mcp_client(f"{url}/mcp", token(reader_sub)))
                clients[reader_sub] = sessions.enter_context(cm)
            result = portal.call(clients[reader_sub].call_tool, "search",
                                 _request(query, k, content_types, space_ids))
            if result.is_error:
                block = result.content[0]
                _raise(json.loads(block.text) if isinstance(block, TextContent) else {})
            return _hits(result.structured_content or {})

        yield search
