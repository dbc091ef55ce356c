"""The HTTP retrieval API over real HTTP: uvicorn on loopback, httpx as the client."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from groundkit import Groundkit, tokens
from groundkit.serve.background import serving
from groundkit.serve.http import create_app
from groundkit.serve.service import ReadService


@pytest.fixture
def world(community: Groundkit) -> Groundkit:
    community.put_object("open-1", 1, "board_post", "open", "T0", "Glazing", "Glazing kilns and pricing commissions")
    community.put_object("members-1", 1, "board_post", "members", "T1", "Pricing", "Pricing commissions for members")
    community.put_object("vault-1", 1, "document", "vault", "T2", "Rates", "Private rates for pricing commissions")
    return community


@pytest.fixture
def api(dsn: str, world: Groundkit) -> Iterator[str]:
    with serving(create_app(ReadService(dsn, pool_size=4, pool_timeout=2.0))) as url:
        yield url


def _search(url: str, token: str | None, body: object) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    return httpx.post(f"{url}/v1/search", json=body, headers=headers, timeout=30)


def _ids(response: httpx.Response) -> set[str]:
    assert response.status_code == 200, response.text
    return {h["object_id"] for h in response.json()["hits"]}


def test_search_reads_as_the_token_member(api: str, world: Groundkit) -> None:
    t1, t2 = tokens.create_token(world, "t1"), tokens.create_token(world, "t2")
    body = {"query": "pricing commissions", "k": 10}
    assert _ids(_search(api, t1, body)) == {"open-1", "members-1"}
    assert _ids(_search(api, t2, body)) == {"open-1", "members-1", "vault-1"}
    hit = _search(api, t2, {**body, "k": 1}).json()["hits"][0]
    assert {"object_id", "object_version", "chunk_seq", "title", "content", "score"} <= set(hit)


@pytest.mark.parametrize("header", [None, "", "Bearer", "Bearer gk_wrong", "Basic abc", "Bearer not-a-token"])
def test_missing_or_wrong_token_is_401_with_gk014(api: str, header: str | None) -> None:
    headers = {} if header is None else {"Authorization": header}
    r = httpx.post(f"{api}/v1/search", json={"query": "pricing"}, headers=headers)
    assert r.status_code == 401 and r.json()["code"] == "GK014"
    assert r.headers["www-authenticate"] == "Bearer"


def test_revoked_token_and_downgrade_count_from_the_next_call(api: str, world: Groundkit) -> None:
    token = tokens.create_token(world, "t2")
    body = {"query": "pricing commissions"}
    assert "vault-1" in _ids(_search(api, token, body))
    world.put_member("t2", "T1")  # a downgrade: the private T2 board goes at the next call
    assert _ids(_search(api, token, body)) == {"open-1", "members-1"}
    world.put_member("t2", "T2", "suspended")  # a suspended member's valid token sees nothing
    assert _ids(_search(api, token, body)) == set()
    world.put_member("t2", "T2")
    assert "vault-1" in _ids(_search(api, token, body))
    tokens.revoke_tokens(world, "t2")
    r = _search(api, token, body)
    assert r.status_code == 401 and r.json()["code"] == "GK014"


@pytest.mark.parametrize(("body", "field"), [
    ({"query": "x", "k": 51}, "k"),
    ({"query": "x", "k": 0}, "k"),
    ({"query": "x" * 4097}, "query"),
    ({"query": "x", "reader": "t3"}, "reader"),
    ({"query": "x", "reader_sub": "t3"}, "reader_sub"),
    ({"query": "x", "content_types": ["nope"]}, "content_types"),
    ({"k": 3}, "query"),
    ([1, 2], "input"),
])
def test_bad_input_is_400_with_gk005(api: str, world: Groundkit, body: object, field: str) -> None:
    r = _search(api, tokens.create_token(world, "t1"), body)
    assert r.status_code == 400, r.text
    assert r.json()["code"] == "GK005" and field in r.json()["message"]


def test_a_body_that_is_not_json_is_400(api: str, world: Groundkit) -> None:
    headers = {"Authorization": f"Bearer {tokens.create_token(world, 't1')}"}
    r = httpx.post(f"{api}/v1/search", content=b"{nope", headers=headers)
    assert r.status_code == 400 and r.json()["code"] == "GK005"


def test_healthz_and_openapi(api: str) -> None:
    health = httpx.get(f"{api}/healthz").json()
    assert health["database"] == "ok" and health["revision"] == health["expected_revision"] != ""
    doc = httpx.get(f"{api}/openapi.json").json()
    assert doc["openapi"].startswith("3.")
    assert set(doc["paths"]) >= {"/v1/search", "/healthz"}
    search_input = doc["components"]["schemas"]["SearchInput"]
    assert search_input["additionalProperties"] is False and search_input["properties"]["k"]["maximum"] == 50


def test_a_request_waiting_too_long_for_a_connection_gets_503(dsn: str, world: Groundkit) -> None:
    token = tokens.create_token(world, "t1")
    service = ReadService(dsn, pool_size=1, pool_timeout=0.3)
    inner, loops = create_app(service), []

    async def app(scope: Any, receive: Any, send: Any) -> None:  # notes the server's event loop
        if scope["type"] == "lifespan":
            loops.append(asyncio.get_running_loop())
        await inner(scope, receive, send)

    with serving(app) as url:
        assert _search(url, token, {"query": "pricing"}).status_code == 200
        held, release = threading.Event(), threading.Event()

        async def hold() -> None:  # the pool's one connection, held on the server's own loop
            async with service.pool.connection():
                held.set()
                await asyncio.to_thread(release.wait, 30)

        holder = asyncio.run_coroutine_threadsafe(hold(), loops[0])
        try:
            assert held.wait(10)
            r = _search(url, token, {"query": "pricing"})
            assert r.status_code == 503 and r.json()["code"] == "GK019"
            assert "no connection came free" in r.json()["message"]
        finally:
            release.set()
            holder.result(30)
        assert _search(url, token, {"query": "pricing"}).status_code == 200


def test_a_database_that_is_down_is_503_without_the_dsn(server_dsn: str) -> None:
    secret_dsn = make_conninfo(server_dsn, dbname="gk_no_such_database", password="s3cret-pw", connect_timeout=2)
    with serving(create_app(ReadService(secret_dsn, pool_size=1, pool_timeout=0.5))) as url:
        for r in (httpx.get(f"{url}/healthz"),
                  httpx.post(f"{url}/v1/search", json={"query": "x"}, headers={"Authorization": "Bearer gk_x"})):
            assert r.status_code == 503, r.text
            for secret in ("s3cret-pw", "gk_no_such_database", "Traceback", "postgres"):
                assert secret not in r.text


def test_trust_header_takes_the_member_from_the_proxy(dsn: str, world: Groundkit) -> None:
    with serving(create_app(ReadService(dsn, pool_size=2), trust_header="X-Member")) as url:
        r = httpx.post(f"{url}/v1/search", json={"query": "pricing commissions"}, headers={"X-Member": "t2"})
        assert _ids(r) == {"open-1", "members-1", "vault-1"}
        missing = httpx.post(f"{url}/v1/search", json={"query": "pricing"})
        assert missing.status_code == 401 and missing.json()["code"] == "GK014"
        # with a trusted header a bearer token means nothing: the proxy is the authority
        token = tokens.create_token(world, "t2")
        assert httpx.post(f"{url}/v1/search", json={"query": "pricing"},
                          headers={"Authorization": f"Bearer {token}"}).status_code == 401


def _home(url: str, token: str, **params: str | int) -> httpx.Response:
    return httpx.get(f"{url}/v1/home", params=params, headers={"Authorization": f"Bearer {token}"}, timeout=30)


def test_home_reads_as_the_token_member_and_follows_a_downgrade(api: str, world: Groundkit) -> None:
    token = tokens.create_token(world, "t2")
    latest = _home(api, token)
    assert latest.status_code == 200, latest.text
    assert {i["object_id"] for i in latest.json()["items"]} == {"open-1", "members-1", "vault-1"}
    world.record_engagement("members-1", "t2", "view")
    top = _home(api, token, mode="top", k=1).json()["items"]
    assert [i["object_id"] for i in top] == ["members-1"]
    world.put_member("t2", "T0")
    assert {i["object_id"] for i in _home(api, token).json()["items"]} == {"open-1"}


@pytest.mark.parametrize(("params", "field"), [
    ({"mode": "hot"}, "mode"), ({"k": 51}, "k"), ({"k": "many"}, "k"), ({"reader": "t3"}, "reader")])
def test_home_bad_input_is_400(api: str, world: Groundkit, params: dict[str, str | int], field: str) -> None:
    r = _home(api, tokens.create_token(world, "t1"), **params)
    assert r.status_code == 400 and r.json()["code"] == "GK005" and field in r.json()["message"]


def test_citation_reads_as_the_token_member_and_hides_what_they_may_not_see(api: str, world: Groundkit) -> None:
    t1, t2 = tokens.create_token(world, "t1"), tokens.create_token(world, "t2")
    auth = {"Authorization": f"Bearer {t1}"}
    ok = httpx.get(f"{api}/v1/citations/open-1/1/0", headers=auth)
    assert ok.status_code == 200, ok.text
    assert ok.json()["citation"]["context"] == "Glazing kilns and pricing commissions"
    hidden = httpx.get(f"{api}/v1/citations/vault-1/1/0", headers=auth)
    missing = httpx.get(f"{api}/v1/citations/nope/1/0", headers=auth)
    assert hidden.status_code == missing.status_code == 404
    assert hidden.json() == missing.json() and hidden.json()["code"] == "GK009"
    assert httpx.get(f"{api}/v1/citations/vault-1/1/0", headers={"Authorization": f"Bearer {t2}"}).status_code == 200
    assert httpx.get(f"{api}/v1/citations/open-1/x/0", headers=auth).json()["code"] == "GK005"
    assert httpx.get(f"{api}/v1/citations/open-1/1/0").status_code == 401
    assert "/v1/citations/{object_id}/{version}/{chunk_seq}" in httpx.get(f"{api}/openapi.json").json()["paths"]


# -- statement and lock timeouts on the pooled connections (issue 50, item 7) -------------------


@pytest.mark.parametrize(("lock_timeout", "statement_timeout", "reason"), [
    (0.5, 0, "a lock timeout"),
    (0, 0.5, "a statement timeout"),
])
def test_a_request_on_a_pooled_connection_gets_503_gk019_under_a_held_lock(
        dsn: str, world: Groundkit, lock_timeout: float, statement_timeout: float, reason: str) -> None:
    """A rebuild-like ACCESS EXCLUSIVE lock on chunks: a search on a connection the pool already
    holds ends with 503 GK019 at the timeout instead of waiting for the lock (the client would
    give up after 30 s; the lock is held until the answer is in)."""
    token = tokens.create_token(world, "t1")
    service = ReadService(dsn, pool_size=1, lock_timeout=lock_timeout, statement_timeout=statement_timeout)
    with serving(create_app(service)) as url:
        assert _search(url, token, {"query": "pricing"}).status_code == 200  # the one connection, pooled
        with psycopg.connect(dsn) as holder:
            holder.execute("lock table groundkit.chunks in access exclusive mode")
            r = _search(url, token, {"query": "pricing"})
            assert r.status_code == 503, r.text
            assert r.json()["code"] == "GK019" and reason in r.json()["message"]
            assert r.headers["content-type"] == "application/json"
        assert _ids(_search(url, token, {"query": "pricing commissions"})) == {"open-1", "members-1"}


# -- input hygiene (issue 50, item 9) -----------------------------------------------------------


def _auth(world: Groundkit, member: str = "t1") -> dict[str, str]:
    return {"Authorization": f"Bearer {tokens.create_token(world, member)}"}


def test_a_body_nested_30000_deep_is_400_gk005_logged_once_briefly(
        api: str, world: Groundkit, caplog: pytest.LogCaptureFixture) -> None:
    body = b'{"query": ' + b"[" * 30_000 + b"]" * 30_000 + b"}"
    headers = _auth(world)
    uvicorn_log = logging.getLogger("uvicorn")  # it does not propagate: listen to it too
    uvicorn_log.addHandler(caplog.handler)
    try:
        with caplog.at_level(logging.DEBUG):
            r = httpx.post(f"{api}/v1/search", content=body, headers=headers, timeout=30)
    finally:
        uvicorn_log.removeHandler(caplog.handler)
    assert r.status_code == 400, r.text
    assert r.json()["code"] == "GK005" and "deeper than 32" in r.json()["message"]
    served = [rec for rec in caplog.records if rec.name.startswith(("groundkit", "uvicorn"))]
    assert len(served) <= 1, [rec.getMessage() for rec in served]
    assert all(rec.exc_info is None and "\n" not in rec.getMessage() for rec in served)


@pytest.mark.parametrize("path", ["/v1/search?reader=t2", "/v1/search?k=50", "/v1/search?"])
def test_a_query_string_on_post_search_is_refused(api: str, world: Groundkit, path: str) -> None:
    r = httpx.post(f"{api}{path}", json={"query": "pricing"}, headers=_auth(world))
    if path.endswith("?"):  # an empty query string is no parameter
        assert r.status_code == 200, r.text
        return
    assert r.status_code == 400 and r.json()["code"] == "GK005" and "query-string" in r.json()["message"]


def test_a_query_string_on_a_citation_is_refused(api: str, world: Groundkit) -> None:
    r = httpx.get(f"{api}/v1/citations/open-1/1/0?reader=t2", headers=_auth(world))
    assert r.status_code == 400 and r.json()["code"] == "GK005" and "query-string" in r.json()["message"]


@pytest.mark.parametrize("k", ["5", 5.0, True, False, None, [5], {"k": 5}])
def test_k_must_be_a_json_integer(api: str, world: Groundkit, k: object) -> None:
    r = _search(api, tokens.create_token(world, "t1"), {"query": "pricing", "k": k})
    assert r.status_code == 400, r.text
    assert r.json()["code"] == "GK005" and r.json()["message"].startswith("k:")


@pytest.mark.parametrize(("body", "said"), [
    (b'{"query": "pricing", "k": 5, "k": 50}', "'k' appears twice"),
    (b'{"query": "pricing", "query": "rates"}', "'query' appears twice"),
    (b'{"query": "pricing", "space_ids": ["open"], "content_types": [], "space_ids": ["vault"]}', "twice"),
    (b'{"query": "pricing", "k": NaN}', "NaN is not a JSON number"),
    (b'{"query": "pricing", "k": Infinity}', "Infinity is not a JSON number"),
    (b'{"query": "pricing"} trailing', "must be JSON"),
    (b'\xff{"query": "pricing"}', "must be JSON"),
])
def test_duplicate_keys_and_non_json_are_refused(api: str, world: Groundkit, body: bytes, said: str) -> None:
    r = httpx.post(f"{api}/v1/search", content=body, headers=_auth(world))
    assert r.status_code == 400 and r.json()["code"] == "GK005", r.text
    assert said in r.json()["message"]


@pytest.mark.parametrize(("query", "said"), [
    ("k=5&k=50", "k: given more than once"), ("mode=top&mode=latest", "mode: given more than once"),
    ("k=5.0", "k: must be a whole number"), ("k=%2B5", "k: must be a whole number"),
    ("k=1_0", "k: must be a whole number"), ("k=true", "k: must be a whole number"),
])
def test_home_parameters_are_strict_too(api: str, world: Groundkit, query: str, said: str) -> None:
    r = httpx.get(f"{api}/v1/home?{query}", headers=_auth(world))
    assert r.status_code == 400 and r.json()["code"] == "GK005", r.text
    assert said in r.json()["message"]
    assert httpx.get(f"{api}/v1/home?k=5&mode=top", headers=_auth(world)).status_code == 200


def test_citation_path_numbers_are_decimal_digits(api: str, world: Groundkit) -> None:
    auth = _auth(world)
    assert httpx.get(f"{api}/v1/citations/open-1/1/0", headers=auth).status_code == 200
    for path in ("open-1/1.0/0", "open-1/%2B1/0", "open-1/1/0_0"):
        r = httpx.get(f"{api}/v1/citations/{path}", headers=auth)
        assert r.status_code == 400 and r.json()["code"] == "GK005", (path, r.text)
