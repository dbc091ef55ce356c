"""``groundkit serve mcp``: the MCP server, on the official SDK's low-level ``Server``.

The low-level server, not ``MCPServer``: ``MCPServer`` builds each tool's input from the function's
signature and ignores unknown arguments, while here each tool's input is one of the pydantic
models in :mod:`groundkit.serve.models` (``extra="forbid"``), validated with JSON's types and no
coercion (:func:`~groundkit.serve.inputs.parse_input`), so a call that adds ``reader``, or gives
``k`` as ``"5"``, is refused. No tool takes a reader. Over stdio the member is the ``--reader`` the server was started
with; over streamable HTTP, the member of each request's bearer token, checked by the ASGI layer
below before the SDK sees the request.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import mcp_types as types
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from pydantic import BaseModel
from starlette.types import ASGIApp, Receive, Scope, Send

from groundkit.errors import GroundkitError, InvalidArgument, Unauthenticated
from groundkit.serve.inputs import load_json, parse_input, refuse_query_string
from groundkit.serve.limits import ServerLimits
from groundkit.serve.models import (
    CitationInput,
    CitationResult,
    HomeInput,
    HomeResult,
    SearchInput,
    SearchResult,
)
from groundkit.serve.service import ReadService, error_body
from groundkit.serve.transport import serve

log = logging.getLogger("groundkit.serve")
MEMBER_KEY = "groundkit_member"  # where the HTTP layer leaves the token's member, in the ASGI scope's state


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    input: type[BaseModel]
    output: type[BaseModel]
    run: Callable[[ReadService, str, Any], Awaitable[BaseModel]]


TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec("search", "Search the community's content as the connected member: the top k chunks they may "
             "see right now, ranked by BM25, with the fields to cite each one.",
             SearchInput, SearchResult, lambda service, member, args: service.search(member, args)),
    ToolSpec("home", "The connected member's home feed: the newest objects they may see (mode latest), or the "
             "most engaged with over the last week (mode top).",
             HomeInput, HomeResult, lambda service, member, args: service.home(member, args)),
    ToolSpec("fetch_citation", "A search hit's chunk with its context (the section, the post, the stretch of the "
             "recording), by the hit's object_id, object_version and chunk_seq, if the member may see it now.",
             CitationInput, CitationResult, lambda service, member, args: service.fetch_citation(member, args)),
)


def _tool(spec: ToolSpec) -> types.Tool:
    return types.Tool(name=spec.name, description=spec.description,
                      input_schema=spec.input.model_json_schema(),
                      output_schema=spec.output.model_json_schema(mode="serialization"))


def _failure(exc: BaseException) -> types.CallToolResult:
    """A tool error whose text is the JSON error body ({"code": "GK005", "message": ...})."""
    _status, body = error_body(exc)
    return types.CallToolResult(content=[types.TextContent(type="text", text=body.model_dump_json())],
                                is_error=True)


def _http_member(ctx: ServerRequestContext[Any, Any]) -> str:
    state = getattr(ctx.request, "scope", {}).get("state", {})
    member = state.get(MEMBER_KEY)
    if not isinstance(member, str):  # fail closed: a request that did not pass the token check
        raise Unauthenticated("a valid bearer token is required")
    return member


def build_server(service: ReadService, reader: str | None) -> Server[Any]:
    """The MCP server reading as ``reader`` (stdio), or as each HTTP request's token when None."""
    by_name = {spec.name: spec for spec in TOOLS}

    async def list_tools(ctx: ServerRequestContext[Any, Any],
                         params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[_tool(spec) for spec in TOOLS])

    async def call_tool(ctx: ServerRequestContext[Any, Any],
                        params: types.CallToolRequestParams) -> types.CallToolResult:
        spec = by_name.get(params.name)
        if spec is None:
            return _failure(GroundkitError(f"unknown tool {params.name!r}", sqlstate="GK005"))
        try:
            member = reader if reader is not None else _http_member(ctx)
            args = parse_input(spec.input, params.arguments or {})
            result = await spec.run(service, member, args)
        except GroundkitError as exc:
            return _failure(exc)
        except Exception as exc:  # a tool error for the model, never a crash; the trace goes to the log
            log.exception("unexpected error in tool %s", params.name)
            return _failure(exc)
        text = result.model_dump_json()
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                    structured_content=result.model_dump(mode="json"))

    return Server("groundkit", version="1", instructions="Permission-correct retrieval: every tool reads as "
                  "the connected member, and sees only what that member may see now.",
                  on_list_tools=list_tools, on_call_tool=call_tool)


MAX_BODY = 256 * 1024  # a JSON-RPC message to this server is a tool call: far below this


class BearerMember:
    """ASGI middleware in front of the SDK's streamable HTTP app, for every request:

    - a query string is refused (400, GK005): nothing here reads one, so none may look as if it did;
    - without a valid bearer token, a 401 with the JSON error body; with one, its member goes in
      the scope's state (which the tools read) and in ``scope["user"]``, where the SDK's session
      manager binds a session to the member who opened it: a request on that session with
      another member's token is answered 404, as for an unknown session, and reaches nothing;
    - a POST's body is read whole (at most :data:`MAX_BODY` bytes) and must be strict JSON
      (:func:`~groundkit.serve.inputs.load_json`: no duplicate keys, no NaN, nested at most 32
      deep), else 400 (GK005) before the SDK parses it.

    The service's pool opens and closes with the app's lifespan."""

    def __init__(self, app: ASGIApp, service: ReadService) -> None:
        self.app = app
        self.service = service

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, self._opening(receive), send)
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        scheme, _, token = headers.get("authorization", "").partition(" ")
        try:
            refuse_query_string(scope.get("query_string", b""))
            member = await self.service.member_for_token(token.strip() if scheme.lower() == "bearer" else None)
            if scope["method"] == "POST":
                body = await _read_body(receive)
                if body is None:
                    return  # the client went away mid-body: nobody to answer
                load_json(body)
                receive = _replay(body, receive)
        except GroundkitError as exc:
            await _send_error(send, exc)
            return
        except Exception as exc:  # never a stack trace in a response: it goes to the server's log
            log.exception("unexpected error before the MCP layer")
            await _send_error(send, exc)
            return
        scope.setdefault("state", {})[MEMBER_KEY] = member
        # The SDK binds a session to this principal when it opens and refuses it to any other.
        scope["user"] = AuthenticatedUser(AccessToken(token="", client_id=member, scopes=[]))
        await self.app(scope, receive, send)

    def _opening(self, receive: Receive) -> Receive:
        async def receive_and_open() -> Any:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await self.service.open()
            elif message["type"] == "lifespan.shutdown":
                await self.service.close()
            return message

        return receive_and_open


async def _read_body(receive: Receive) -> bytes | None:
    """The request's whole body, or None when the client disconnects first."""
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        body += message.get("body", b"")
        if len(body) > MAX_BODY:
            raise InvalidArgument(f"the body is larger than {MAX_BODY} bytes")
        if not message.get("more_body", False):
            return bytes(body)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A receive that gives the body read already, then the client's own messages (its disconnect)."""
    given = False

    async def replay() -> Any:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _send_error(send: Send, exc: BaseException) -> None:
    status, body = error_body(exc)
    payload = body.model_dump_json().encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


def run_stdio(service: ReadService, reader: str) -> None:
    from mcp.server.stdio import stdio_server

    server = build_server(service, reader)

    async def main() -> None:
        await service.open()
        try:
            async with stdio_server() as (read, write):
                await server.run(read, write, server.create_initialization_options())
        finally:
            await service.close()

    anyio.run(main)


def http_app(service: ReadService, host: str = "127.0.0.1") -> ASGIApp:
    """The streamable HTTP app at /mcp, behind the bearer check."""
    server = build_server(service, None)
    return BearerMember(server.streamable_http_app(host=host), service)


def run_http(service: ReadService, host: str, port: int, limits: ServerLimits | None = None) -> None:
    serve(http_app(service, host), host, port, limits)


