"""The HTTP API's request log: request id and tenant id on every line, as JSON."""

from __future__ import annotations

import io
import logging
from collections.abc import Awaitable, Iterator

import httpx
import orjson
import pytest

from ranker.api import create_api
from ranker.logs import access_log
from ranker.service import RecallService
from storage import MilvusConfig, MilvusStore
from storage.embedding import Hashing
from storage.logs import JsonFormatter, RequestContext
from storage.tenants import TenantRegistry

KEY = "key-acme-0123456789"


async def _no_send(role: str, key: bytes, value: bytes) -> Awaitable[object]:
    raise AssertionError(role)


@pytest.fixture
def lines() -> Iterator[io.StringIO]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.addFilter(RequestContext())
    handler.setFormatter(JsonFormatter())
    access_log.addHandler(handler)
    level = access_log.level
    access_log.setLevel(logging.INFO)
    yield out
    access_log.removeHandler(handler)
    access_log.setLevel(level)


@pytest.mark.anyio
async def test_every_request_logs_its_request_id_and_tenant(lines: io.StringIO) -> None:
    registry = TenantRegistry.of({"tenants": {"acme": {"api_keys": [KEY]}}})
    store = MilvusStore(MilvusConfig("unused.db", dim=4))  # never connected: no request reaches it
    app = create_api(RecallService(store, Hashing(4), _no_send), registry)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://mnemostream") as http:
        given = {"X-API-Key": KEY, "X-Request-ID": "req-42"}
        bad = await http.post("/v1/recall", json={"k": 3}, headers=given)
        anonymous = await http.post("/v1/recall", json={"k": 3})
        odd = await http.post("/v1/recall", json={}, headers={"X-Request-ID": "a b\tc"})
    assert (bad.status_code, bad.headers["X-Request-ID"]) == (422, "req-42")
    first, second, third = (orjson.loads(line) for line in lines.getvalue().splitlines())
    assert {k: first[k] for k in ("request_id", "tenant_id", "status", "method", "route")} == {
        "request_id": "req-42",
        "tenant_id": "acme",
        "status": 422,
        "method": "POST",
        "route": "/v1/recall",
    }
    assert (first["level"], first["logger"]) == ("info", "mnemostream.http")
    assert (second["tenant_id"], second["status"]) == (None, 401)
    assert second["request_id"] == anonymous.headers["X-Request-ID"] != "req-42"
    assert third["request_id"] == odd.headers["X-Request-ID"] != "a b\tc"  # not a token: replaced


@pytest.mark.anyio
@pytest.mark.parametrize("every", [True, False])
async def test_with_errors_only_a_success_is_not_logged_and_an_error_is(
    lines: io.StringIO, every: bool
) -> None:
    registry = TenantRegistry.of({"tenants": {"acme": {"api_keys": [KEY]}}})
    store = MilvusStore(MilvusConfig("unused.db", dim=4))
    app = create_api(RecallService(store, Hashing(4), _no_send), registry, log_every_request=every)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://mnemostream") as http:
        ok = await http.get("/openapi.json")
        refused = await http.post("/v1/recall", json={"k": 3})
    assert (ok.status_code, refused.status_code) == (200, 401)
    logged = [orjson.loads(line)["status"] for line in lines.getvalue().splitlines()]
    assert logged == ([200, 401] if every else [401])


@pytest.mark.anyio
async def test_an_unexpected_error_is_answered_and_logged_with_the_request_s_ids(
    lines: io.StringIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Starlette's last handler answered it outside this log: no X-Request-ID to quote, no
    access line, and a traceback logged with request_id and tenant_id None.
    """
    errors = io.StringIO()
    handler = logging.StreamHandler(errors)
    handler.addFilter(RequestContext())
    handler.setFormatter(JsonFormatter())
    logging.getLogger("ranker").addHandler(handler)

    async def broken(*_: object, **__: object) -> None:
        raise RuntimeError("a bug")

    registry = TenantRegistry.of({"tenants": {"acme": {"api_keys": [KEY]}}})
    service = RecallService(MilvusStore(MilvusConfig("unused.db", dim=4)), Hashing(4), _no_send)
    monkeypatch.setattr(service, "get", broken)
    app = create_api(service, registry, log_every_request=False)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://mnemostream") as http:
            reply = await http.get(
                "/v1/memories/m1", headers={"X-API-Key": KEY, "X-Request-ID": "r-7"}
            )
    finally:
        logging.getLogger("ranker").removeHandler(handler)
    assert (reply.status_code, reply.headers.get("X-Request-ID")) == (500, "r-7")
    assert reply.json()["detail"] == "internal error: RuntimeError"  # no more than its type
    (line,) = (orjson.loads(x) for x in lines.getvalue().splitlines())
    assert (line["status"], line["request_id"]) == (500, "r-7")
    (error,) = (orjson.loads(x) for x in errors.getvalue().splitlines())
    assert (error["request_id"], error["tenant_id"], error["level"]) == ("r-7", "acme", "error")


@pytest.mark.anyio
async def test_a_line_names_the_route_not_the_path_and_no_path_writes_a_line_of_its_own(
    lines: io.StringIO,
) -> None:
    """The path was logged as decoded: a %0A in it wrote a second, forged line in the text log,
    and the ids in a path (a user's, erased since) stayed in it.
    """
    registry = TenantRegistry.of({"tenants": {"acme": {"api_keys": [KEY]}}})
    store = MilvusStore(MilvusConfig("unused.db", dim=4))
    app = create_api(RecallService(store, Hashing(4), _no_send), registry)
    text = io.StringIO()
    handler = logging.StreamHandler(text)
    handler.setFormatter(logging.Formatter("%(message)s"))
    access_log.addHandler(handler)
    transport = httpx.ASGITransport(app=app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://mnemostream") as http:
            await http.delete("/v1/users/alice@example.com")
            forged = "/v1/x%0A2026-01-05 INFO mnemostream.http: POST /v1/admin/tenants 201"
            await http.get(forged)
    finally:
        access_log.removeHandler(handler)
    assert text.getvalue().splitlines() == [
        "DELETE /v1/users/{user_id:text} 401",
        "GET /v1/x\\n2026-01-05 INFO mnemostream.http: POST /v1/admin/tenants 201 404",
    ]
    routes = [orjson.loads(line)["route"] for line in lines.getvalue().splitlines()]
    assert routes[0] == "/v1/users/{user_id:text}"


@pytest.mark.anyio
async def test_a_request_over_its_tenant_s_share_is_logged_with_its_tenant(
    lines: io.StringIO,
) -> None:
    """The share is taken at the edge before the body is read, before the route records the
    tenant: the 429's line named none, the one an operator reads to see who is throttled.
    """
    registry = TenantRegistry.of({"tenants": {"acme": {"api_keys": [KEY]}}})
    store = MilvusStore(MilvusConfig("unused.db", dim=4))  # never connected: refused before
    app = create_api(RecallService(store, Hashing(4), _no_send), registry, max_in_flight=4)
    app.state.tenant_slots.held["acme"] = app.state.tenant_slots.limit  # its share in flight
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://mnemostream") as http:
        refused = await http.post("/v1/recall", json={"query": "x"}, headers={"X-API-Key": KEY})
    assert refused.status_code == 429, refused.text
    (line,) = (orjson.loads(line) for line in lines.getvalue().splitlines())
    assert (line["tenant_id"], line["status"]) == ("acme", 429)
