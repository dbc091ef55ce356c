"""The MCP server with the SDK's own client: over stdio (``groundkit serve mcp`` spawned as a
subprocess) and over streamable HTTP on loopback (uvicorn in a thread), with bearer tokens."""

from __future__ import annotations

import json
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import anyio
import httpx
import psycopg
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, TextContent

from groundkit import Groundkit, tokens
from groundkit.models import MAX_QUERY_CHARS
from groundkit.serve.background import serving
from groundkit.serve.mcp import http_app
from groundkit.serve.service import ReadService
from tests.governance_helpers import certify

T = TypeVar("T")
GROUNDKIT = Path(sys.executable).with_name("groundkit")


@pytest.fixture
def world(community: Groundkit) -> Groundkit:
    community.put_object("open-1", 1, "board_post", "open", "T0", "Glazing", "Glazing kilns and pricing commissions")
    community.put_object("members-1", 1, "board_post", "members", "T1", "Pricing", "Pricing commissions for members")
    community.put_object("vault-1", 1, "document", "vault", "T2", "Rates", "Private rates for pricing commissions")
    return community


def _ids(result: CallToolResult) -> set[str]:
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return {h["object_id"] for h in result.structured_content["hits"]}


def _error(result: CallToolResult) -> dict[str, Any]:
    assert result.is_error
    block = result.content[0]
    assert isinstance(block, TextContent)
    body: dict[str, Any] = json.loads(block.text)
    return body


def _stdio(dsn: str, reader: str, session: Callable[[Client], Awaitable[T]]) -> T:
    certify(dsn)  # serve refuses a configuration no gate certified (docs/governance.md)
    params = StdioServerParameters(command=str(GROUNDKIT), args=["serve", "mcp", "--reader", reader, "--dsn", dsn])

    async def main() -> T:
        async with Client(params) as client:
            return await session(client)

    return anyio.run(main)


def test_stdio_tools_search_bounds_and_no_reader_argument(dsn: str, world: Groundkit) -> None:
    async def session(client: Client) -> None:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) == {"search", "home", "fetch_citation"}
        schema = tools["search"].input_schema
        assert set(schema["properties"]) == {"query", "k", "content_types", "space_ids", "mode"}
        assert schema["additionalProperties"] is False
        assert schema["properties"]["k"]["maximum"] == 50
        assert tools["search"].output_schema is not None

        # the configured reader (t1): the members' board, not the private one
        assert _ids(await client.call_tool("search", {"query": "pricing commissions"})) == {"open-1", "members-1"}
        hit = (await client.call_tool("search", {"query": "pricing", "k": 1})).structured_content
        assert hit is not None and {"object_id", "object_version", "chunk_seq", "score"} <= set(hit["hits"][0])

        # out of bounds: a clear tool error with the GK code, and the server goes on
        for bad, field in (({"query": "x", "k": 51}, "k"), ({"query": "x" * (MAX_QUERY_CHARS + 1)}, "query"),
                           ({"query": "x", "content_types": ["nope"]}, "content_types")):
            error = _error(await client.call_tool("search", bad))
            assert error["code"] == "GK005" and field in error["message"]
        # naming another reader is refused by the input model, whatever the name
        for name in ("reader", "reader_sub", "member_sub"):
            error = _error(await client.call_tool("search", {"query": "pricing", name: "t2"}))
            assert error["code"] == "GK005" and name in error["message"]
        assert _ids(await client.call_tool("search", {"query": "pricing commissions"})) == {"open-1", "members-1"}

        home = await client.call_tool("home", {"mode": "latest", "k": 10})
        assert not home.is_error and home.structured_content is not None
        assert {i["object_id"] for i in home.structured_content["items"]} == {"open-1", "members-1"}
        assert _error(await client.call_tool("home", {"mode": "hot"}))["code"] == "GK005"
        assert "reader" in _error(await client.call_tool("home", {"reader": "t2"}))["message"]

        # a hit's citation, in its context; the private board's is "unknown", as a missing one
        cited = await client.call_tool("fetch_citation", {"object_id": "open-1", "version": 1, "chunk_seq": 0})
        assert not cited.is_error and cited.structured_content is not None
        assert cited.structured_content["citation"]["context"] == "Glazing kilns and pricing commissions"
        hidden = _error(await client.call_tool("fetch_citation",
                                               {"object_id": "vault-1", "version": 1, "chunk_seq": 0}))
        missing = _error(await client.call_tool("fetch_citation",
                                                {"object_id": "nope", "version": 1, "chunk_seq": 0}))
        assert hidden == missing and hidden["code"] == "GK009"
        assert "reader" in _error(await client.call_tool(
            "fetch_citation", {"object_id": "open-1", "version": 1, "chunk_seq": 0, "reader": "t2"}))["message"]

    _stdio(dsn, "t1", session)


def test_stdio_downgrade_counts_from_the_next_call(dsn: str, world: Groundkit) -> None:
    async def session(client: Client) -> None:
        assert "vault-1" in _ids(await client.call_tool("search", {"query": "pricing commissions"}))
        world.put_member("t2", "T1")
        assert _ids(await client.call_tool("search", {"query": "pricing commissions"})) == {"open-1", "members-1"}
        world.put_member("t2", "T2", "revoked")
        assert _ids(await client.call_tool("search", {"query": "pricing commissions"})) == set()

    _stdio(dsn, "t2", session)


@pytest.fixture
def mcp_url(dsn: str, world: Groundkit) -> Iterator[str]:
    with serving(http_app(ReadService(dsn, pool_size=4))) as url:
        yield f"{url}/mcp"


async def _http_session(url: str, token: str | None, session: Callable[[Client], Awaitable[T]]) -> T:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with create_mcp_http_client(headers=headers) as http, \
            Client(streamable_http_client(url, http_client=http)) as client:
        return await session(client)


async def _search_pricing(client: Client) -> set[str]:
    return _ids(await client.call_tool("search", {"query": "pricing commissions"}))


def test_http_valid_token_reads_as_its_member(mcp_url: str, world: Groundkit) -> None:
    t1, t2 = tokens.create_token(world, "t1"), tokens.create_token(world, "t2")
    assert anyio.run(_http_session, mcp_url, t1, _search_pricing) == {"open-1", "members-1"}
    assert anyio.run(_http_session, mcp_url, t2, _search_pricing) == {"open-1", "members-1", "vault-1"}


@pytest.mark.parametrize("token", [None, "gk_wrong", "not-a-token"])
def test_http_missing_or_wrong_token_is_refused(mcp_url: str, token: str | None) -> None:
    with pytest.raises(BaseExceptionGroup) as refused:  # the SDK's error for the 401, from its task group
        anyio.run(_http_session, mcp_url, token, _search_pricing)
    assert refused.group_contains(MCPError)
    # what the client got: a 401 with the GK code as JSON
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    r = httpx.post(mcp_url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, headers=headers)
    assert r.status_code == 401 and r.json()["code"] == "GK014"


def test_http_revoked_token_and_downgrade_count_from_the_next_call(mcp_url: str, world: Groundkit) -> None:
    token = tokens.create_token(world, "t2")

    async def session(client: Client) -> None:
        assert "vault-1" in await _search_pricing(client)
        world.put_member("t2", "T1")
        assert await _search_pricing(client) == {"open-1", "members-1"}
        world.put_member("t2", "T2", "suspended")
        assert await _search_pricing(client) == set()
        world.put_member("t2", "T2")
        assert "vault-1" in await _search_pricing(client)
        tokens.revoke_tokens(world, "t2")
        with pytest.raises(MCPError):  # the SDK's error for the 401
            await client.call_tool("search", {"query": "pricing"})

    anyio.run(_http_session, mcp_url, token, session)
    r = httpx.post(mcp_url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                   headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 401 and r.json()["code"] == "GK014"


def test_cli_needs_a_reader_over_stdio_and_refuses_one_over_http(dsn: str) -> None:
    from typer.testing import CliRunner

    from groundkit.cli import app

    runner = CliRunner()
    no_reader = runner.invoke(app, ["serve", "mcp", "--dsn", dsn])
    assert no_reader.exit_code == 1 and "--reader is required" in no_reader.stderr
    http_reader = runner.invoke(app, ["serve", "mcp", "--transport", "http", "--reader", "t1", "--dsn", dsn])
    assert http_reader.exit_code == 1 and "bearer token" in http_reader.stderr


# -- a session belongs to the member whose token opened it (issue 50, item 1) -------------------


class _Wire:
    """What the SDK's client sent and got over HTTP: its session id, the headers it sends with
    each request, and the JSON-RPC ids of its tool calls."""

    def __init__(self) -> None:
        self.session_id: str | None = None
        self.protocol_version: str | None = None
        self.call_ids: list[int | str] = []

    async def on_request(self, request: Any) -> None:
        self.protocol_version = request.headers.get("mcp-protocol-version") or self.protocol_version
        if request.method == "POST":
            message = json.loads(request.content)
            if message.get("method") == "tools/call":
                self.call_ids.append(message["id"])

    async def on_response(self, response: Any) -> None:
        self.session_id = response.headers.get("mcp-session-id") or self.session_id


def _waiting_on_a_lock(dsn: str) -> bool:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("select count(*) from pg_stat_activity where datname = current_database()"
                           " and wait_event_type = 'Lock' and query like '%search%'").fetchone()
    return row is not None and row[0] > 0


def _session_headers(wire: _Wire, token: str, session_id: str | None = None) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream",
               "Content-Type": "application/json", "mcp-session-id": session_id or wire.session_id or ""}
    if wire.protocol_version:
        headers["mcp-protocol-version"] = wire.protocol_version
    return headers


def test_mcp_session_is_bound_to_the_member_who_opened_it(dsn: str, world: Groundkit) -> None:
    """t2 (who may read the private vault) has a search in flight on session S, held on a lock.
    t1, with t1's own valid token, replays S: the same JSON-RPC id on POST, a GET stream, a
    DELETE. Each is a 404 exactly like an unknown session's, and changes nothing: t2's call
    returns t2's hits to t2, and S goes on serving t2."""
    owner, intruder = tokens.create_token(world, "t2"), tokens.create_token(world, "t1")
    wire = _Wire()
    with serving(http_app(ReadService(dsn, pool_size=4, lock_timeout=120.0))) as base:
        url = f"{base}/mcp"

        async def main() -> None:
            http = create_mcp_http_client(headers={"Authorization": f"Bearer {owner}"})
            http.event_hooks = {"request": [wire.on_request], "response": [wire.on_response]}
            # mode legacy: the handshake-era protocol, whose sessions carry an mcp-session-id (the
            # 2026-07-28 protocol the SDK's client picks by default has none to replay)
            async with http, Client(streamable_http_client(url, http_client=http), mode="legacy") as client:
                assert "vault-1" in await _search_pricing(client)
                answer: dict[str, set[str]] = {}

                async def in_flight() -> None:
                    answer["ids"] = await _search_pricing(client)

                holder = psycopg.connect(dsn)  # (a moment of blocking the loop: the server runs in its own thread)
                try:
                    holder.execute("lock table groundkit.chunks in access exclusive mode")
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(in_flight)
                        with anyio.fail_after(60):
                            while not await anyio.to_thread.run_sync(_waiting_on_a_lock, dsn):
                                await anyio.sleep(0.05)
                        await _intrude(url, wire, intruder)
                        holder.rollback()  # t2's search goes on
                finally:
                    holder.close()
                assert answer["ids"] == {"open-1", "members-1", "vault-1"}  # t2's answer, to t2
                assert await _search_pricing(client) == {"open-1", "members-1", "vault-1"}  # S still serves t2

        anyio.run(main)


async def _intrude(url: str, wire: _Wire, intruder: str) -> None:
    """t1's requests on t2's session: each must be the unknown session's 404."""
    assert wire.session_id is not None and wire.call_ids
    call = {"jsonrpc": "2.0", "id": wire.call_ids[-1], "method": "tools/call",
            "params": {"name": "search", "arguments": {"query": "pricing commissions"}}}
    async with httpx.AsyncClient(timeout=30) as h:
        unknown = await h.post(url, json=call, headers=_session_headers(wire, intruder, "0" * 32))
        assert unknown.status_code == 404
        async with h.stream("POST", url, json=call, headers=_session_headers(wire, intruder)) as replay:
            assert replay.status_code == 404
            assert (await replay.aread()) == unknown.content
        async with h.stream("GET", url, headers=_session_headers(wire, intruder)) as stream:
            assert stream.status_code == 404
        deleted = await h.delete(url, headers=_session_headers(wire, intruder))
        assert deleted.status_code == 404 and deleted.content == unknown.content


# -- timeouts and input hygiene over MCP (issue 50, items 7 and 9) ------------------------------


def test_mcp_tool_call_under_a_held_lock_is_a_gk019_tool_error(dsn: str, world: Groundkit) -> None:
    token = tokens.create_token(world, "t1")
    with serving(http_app(ReadService(dsn, pool_size=1, lock_timeout=0.5))) as base:
        async def session(client: Client) -> None:
            assert await _search_pricing(client) == {"open-1", "members-1"}  # the connection is pooled now
            holder = psycopg.connect(dsn)  # (a moment of blocking the loop: the server runs in its own thread)
            try:
                holder.execute("lock table groundkit.chunks in access exclusive mode")
                with anyio.fail_after(60):  # without the timeout, the call waits for the lock
                    error = _error(await client.call_tool("search", {"query": "pricing commissions"}))
            finally:
                holder.close()
            assert error["code"] == "GK019" and "lock timeout" in error["message"]
            assert await _search_pricing(client) == {"open-1", "members-1"}

        anyio.run(_http_session, f"{base}/mcp", token, session)


def test_mcp_tool_arguments_are_strict_json_types(mcp_url: str, world: Groundkit) -> None:
    """The SDK's own MCPServer would coerce or ignore these; groundkit's tools refuse them."""
    async def session(client: Client) -> None:
        for k in ("5", 5.0, True):
            error = _error(await client.call_tool("search", {"query": "pricing", "k": k}))
            assert error["code"] == "GK005" and error["message"].startswith("k:"), (k, error)
        for args in ({"query": "pricing", "reader": "t2"}, {"query": "pricing", "reader_sub": "t2"},
                     {"query": 5}, {"query": "pricing", "content_types": "board_post"}):
            assert _error(await client.call_tool("search", args))["code"] == "GK005", args
        assert _error(await client.call_tool("home", {"k": "5"}))["code"] == "GK005"
        assert _error(await client.call_tool("fetch_citation", {"object_id": "open-1", "version": "1",
                                                                "chunk_seq": 0}))["code"] == "GK005"
        assert await _search_pricing(client) == {"open-1", "members-1"}

    anyio.run(_http_session, mcp_url, tokens.create_token(world, "t1"), session)


def _rpc(body: bytes) -> bytes:
    return b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "search", ' + body + b"}}"


@pytest.mark.parametrize(("path", "body", "said"), [
    ("/mcp?reader=t2", _rpc(b'"arguments": {"query": "pricing"}'), "query-string"),
    ("/mcp", _rpc(b'"arguments": {"query": "pricing", "k": 5, "k": 50}'), "'k' appears twice"),
    ("/mcp", _rpc(b'"arguments": {"query": "pricing"}, "arguments": {"query": "rates"}'), "'arguments' appears twice"),
    ("/mcp", _rpc(b'"arguments": {"query": ' + b"[" * 30_000 + b"]" * 30_000 + b"}"), "deeper than 32"),
    ("/mcp", _rpc(b'"arguments": {"query": "pricing", "k": NaN}'), "NaN"),
])
def test_mcp_http_refuses_query_strings_duplicate_keys_and_deep_bodies(
        mcp_url: str, world: Groundkit, path: str, body: bytes, said: str) -> None:
    base = mcp_url.removesuffix("/mcp")
    headers = {"Authorization": f"Bearer {tokens.create_token(world, 't1')}", "Content-Type": "application/json",
               "Accept": "application/json, text/event-stream"}
    r = httpx.post(f"{base}{path}", content=body, headers=headers, timeout=30)
    assert r.status_code == 400, r.text
    assert r.json()["code"] == "GK005" and said in r.json()["message"]
