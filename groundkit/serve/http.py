"""``groundkit serve http``: the HTTP retrieval API, a Starlette app served by uvicorn.

The member comes from a bearer token (``groundkit tokens create``) or, behind a proxy that
authenticates and sets it, from a trusted header (``trust_header``, off by default). Never from
the body or the query string. Input is read strictly (:mod:`groundkit.serve.inputs`): a body
is JSON without duplicate keys, typed as JSON types it; an endpoint whose input is the body or
the path refuses a query string. Handlers are coroutines on the event loop, each borrowing one
connection from the service's bounded async pool (no thread per request).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from groundkit.errors import GroundkitError, InvalidArgument, Unauthenticated
from groundkit.serve.inputs import load_json, parse_input, parse_params, refuse_query_string
from groundkit.serve.models import (
    CitationInput,
    CitationResult,
    ErrorBody,
    Health,
    HomeInput,
    HomeResult,
    SearchInput,
    SearchResult,
)
from groundkit.serve.service import ReadService, error_body

MAX_BODY = 64 * 1024
log = logging.getLogger("groundkit.serve")


def _json(model: BaseModel, status: int = 200) -> Response:
    return Response(model.model_dump_json(), status_code=status, media_type="application/json")


def _error(exc: BaseException) -> Response:
    status, body = error_body(exc)
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return Response(body.model_dump_json(), status_code=status, media_type="application/json", headers=headers)


class Api:
    """The endpoints, bound to one service and one way of naming the member."""

    def __init__(self, service: ReadService, trust_header: str | None = None) -> None:
        self.service = service
        self.trust_header = trust_header

    async def member(self, request: Request) -> str:
        if self.trust_header is not None:
            value = request.headers.get(self.trust_header, "").strip()
            if not value or len(value) > 256:
                raise Unauthenticated(f"the {self.trust_header} header names no member")
            return value
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        return await self.service.member_for_token(token.strip() if scheme.lower() == "bearer" else None)

    async def search(self, request: Request, body: bytes) -> BaseModel:
        request_input = parse_input(SearchInput, load_json(body))
        return await self.service.search(await self.member(request), request_input)

    async def home(self, request: Request, body: bytes) -> BaseModel:
        request_input = parse_params(HomeInput, request.query_params.multi_items())
        return await self.service.home(await self.member(request), request_input)

    async def citation(self, request: Request, body: bytes) -> BaseModel:
        request_input = parse_params(CitationInput, request.path_params.items())
        return await self.service.fetch_citation(await self.member(request), request_input)


def _endpoint(handler: Callable[[Request, bytes], Awaitable[BaseModel]], *,
              query: bool = False) -> Callable[[Request], Any]:
    """``handler`` as a route; ``query``: whether its input is the query string (else one is refused)."""

    async def endpoint(request: Request) -> Response:
        try:
            if not query:
                refuse_query_string(request.scope.get("query_string", b""))
            body = await _body(request)
            return _json(await handler(request, body))
        except ClientDisconnect:  # gone mid-body (the transport's body deadline, or the client): nobody to answer
            return Response(status_code=400)
        except GroundkitError as exc:
            return _error(exc)
        except Exception as exc:  # never a stack trace in a response: it goes to the server's log
            log.exception("unexpected error in %s", request.url.path)
            return _error(exc)

    return endpoint


async def _body(request: Request) -> bytes:
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            raise InvalidArgument(f"the body is larger than {MAX_BODY} bytes")
    return body


def create_app(service: ReadService, *, trust_header: str | None = None) -> Starlette:
    api = Api(service, trust_header)

    async def healthz(request: Request) -> Response:
        health: Health = await service.health()
        return _json(health, 200 if health.database == "ok" else 503)

    async def openapi(request: Request) -> Response:
        return JSONResponse(openapi_document(trust_header))

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await service.open()
        try:
            yield
        finally:
            await service.close()

    return Starlette(routes=[
        Route("/v1/search", _endpoint(api.search), methods=["POST"]),
        Route("/v1/home", _endpoint(api.home, query=True), methods=["GET"]),
        Route("/v1/citations/{object_id}/{version}/{chunk_seq}", _endpoint(api.citation), methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/openapi.json", openapi, methods=["GET"]),
    ], lifespan=lifespan)


def openapi_document(trust_header: str | None = None) -> dict[str, Any]:
    """OpenAPI 3.1 for the routes above, its schemas the pydantic models' own."""
    schemas: dict[str, Any] = {}

    def ref(model: type[BaseModel], mode: str = "serialization") -> dict[str, str]:
        schema = model.model_json_schema(mode=mode, ref_template="#/components/schemas/{model}")  # type: ignore[arg-type]
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema
        return {"$ref": f"#/components/schemas/{model.__name__}"}

    def reply(model: type[BaseModel]) -> dict[str, Any]:
        return {"content": {"application/json": {"schema": ref(model)}}}

    errors = {str(s): {"description": d, **reply(ErrorBody)} for s, d in (
        (400, "bad input (GK005 and kin): a wrong field or JSON type, a duplicate key, a query string where none "
              "is taken"),
        (401, "no valid token (GK014)"),
        (408, "the request's headers did not arrive in time (code timeout; the connection is closed)"),
        (503, "busy (GK019: a lock or statement timeout, no free connection, too many connections; try again), "
              "no fresh server (GK018), or the database down or not migrated (unavailable)"))}
    citation_params = [{"name": name, "in": "path", "required": True, "schema": schema}
                       for name, schema in CitationInput.model_json_schema()["properties"].items()]
    home_params = [{"name": name, "in": "query", "required": False, "schema": schema}
                   for name, schema in HomeInput.model_json_schema()["properties"].items()]
    security: list[dict[str, list[str]]] = [{"member_header": []}] if trust_header else [{"bearer": []}]
    return {
        "openapi": "3.1.0",
        "info": {"title": "groundkit retrieval API", "version": "1"},
        "security": security,
        "paths": {
            "/v1/search": {"post": {
                "summary": "Search as the authenticated member",
                "requestBody": {"required": True,
                                "content": {"application/json": {"schema": ref(SearchInput, "validation")}}},
                "responses": {"200": {"description": "the hits", **reply(SearchResult)}, **errors}}},
            "/v1/home": {"get": {
                "summary": "The member's home: the newest visible objects, or the most engaged with this week",
                "parameters": home_params,
                "responses": {"200": {"description": "the objects", **reply(HomeResult)}, **errors}}},
            "/v1/citations/{object_id}/{version}/{chunk_seq}": {"get": {
                "summary": "A hit's chunk in its context; 404 (GK009) alike for an invisible and a missing one",
                "parameters": citation_params,
                "responses": {"200": {"description": "the citation", **reply(CitationResult)},
                              "404": {"description": "no such citation (GK009)", **reply(ErrorBody)}, **errors}}},
            "/healthz": {"get": {"summary": "The database and the schema revision", "security": [],
                                 "responses": {"200": {"description": "ok", **reply(Health)},
                                               "503": {"description": "database unavailable", **reply(Health)}}}},
        },
        "components": {"schemas": schemas, "securitySchemes": {
            "bearer": {"type": "http", "scheme": "bearer"},
            "member_header": {"type": "apiKey", "in": "header", "name": trust_header or "X-Member"}}},
    }
