"""The HTTP retrieval API over real HTTP: uvicorn on loopback, httpx as the client."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import httpx
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
    with serving(create_app(service)) as url:
        assert _search(url, token, {"query": "pricing"}).status_code == 200
        held, release = threading.Event(), threading.Event()

        def hold() -> None:
            with service.pool.connection():
                held.set()
                release.wait(30)

        holder = threading.Thread(target=hold)
        holder.start()
        try:
            assert held.wait(10)
            r = _search(url, token, {"query": "pricing"})
            assert r.status_code == 503 and r.json()["code"] == "unavailable"
        finally:
            release.set()
            holder.join()
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
