"""The recall routes skip FastAPI's per-request machinery (ranker.wire.DirectRoute); every
request must still get the answer FastAPI's own handling gives it, errors included."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import Field
from starlette.types import Message

from ranker.ratelimit import RateLimiter
from ranker.wire import Auth, DirectRoute, OrjsonRoute, TextBody
from storage.tenants import TenantRegistry

KEY = "key-acme-0123456789"
pytestmark = pytest.mark.anyio


class Probe(TextBody):
    query: str | None = Field(None, min_length=1)
    k: int = Field(10, ge=1)
    tags: list[str] = Field(default_factory=list)


async def echo(body: Probe, who: Auth) -> Response:
    return JSONResponse({"tenant": who.tenant_id, "body": body.model_dump()})


def _app() -> FastAPI:
    """One endpoint twice: FastAPI's own handling (/plain) and the direct route (/direct)."""
    api = FastAPI()
    api.state.registry = TenantRegistry.of({"tenants": {"acme": {"api_keys": [KEY]}}})
    api.state.rate_limiter = RateLimiter(0.0)

    @api.exception_handler(RequestValidationError)
    async def shown(_: Request, exc: RequestValidationError) -> Response:
        errors = [
            {
                "type": e["type"],
                "loc": list(e["loc"]),
                "msg": e["msg"],
                "input": repr(e.get("input")),
                "ctx": {k: str(v) for k, v in (e.get("ctx") or {}).items()},
            }
            for e in exc.errors()
        ]
        return JSONResponse({"errors": errors}, 422)

    for path, route_class in (("/plain", OrjsonRoute), ("/direct", DirectRoute)):
        api.router.add_api_route(path, echo, methods=["POST"], route_class_override=route_class)
    return api


BEARER = {"Authorization": f"Bearer {KEY}"}
JSON = {"content-type": "application/json"}
CASES: list[tuple[str, bytes, dict[str, str]]] = [
    ("valid, bearer", b'{"query": "x", "k": 3}', BEARER | JSON),
    ("valid, X-API-Key", b'{"query": "x"}', {"X-API-Key": KEY} | JSON),
    ("no key", b'{"query": "x"}', JSON),
    ("unknown key", b'{"query": "x"}', {"X-API-Key": "nope-nope-nope"} | JSON),
    ("basic scheme", b'{"query": "x"}', {"Authorization": f"Basic {KEY}"} | JSON),
    ("bad field and no key", b'{"k": 0}', JSON),
    ("bad JSON and no key", b'{"k": ', JSON),
    ("k too small", b'{"k": 0}', BEARER | JSON),
    ("k not a number", b'{"k": "x"}', BEARER | JSON),
    ("a tag not text", b'{"tags": ["a", 1]}', BEARER | JSON),
    ("unknown field", b'{"nope": 1}', BEARER | JSON),
    ("lone surrogate", b'{"query": "\\ud800"}', BEARER | JSON),
    ("integer beyond 64 bits", b'{"k": 123456789012345678901234567890}', BEARER | JSON),
    ("NaN", b'{"k": NaN}', BEARER | JSON),
    ("a list", b"[1, 2]", BEARER | JSON),
    ("null", b"null", BEARER | JSON),
    ("bad JSON", b'{"query": ', BEARER | JSON),
    ("not UTF-8", b'{"query": "\xff"}', BEARER | JSON),
    ("no body", b"", BEARER | JSON),
    ("no body and no key", b"", JSON),
    ("text/plain and no key", b'{"query": "x"}', {"content-type": "text/plain"}),
    ("no content type", b'{"query": "x"}', BEARER),
    ("text/plain", b'{"query": "x"}', BEARER | {"content-type": "text/plain"}),
    ("+json", b'{"query": "x"}', BEARER | {"content-type": "application/vnd.acme+json"}),
    ("charset", b'{"query": "x"}', BEARER | {"content-type": "application/json; charset=utf-8"}),
]


@pytest.mark.parametrize(("name", "body", "headers"), CASES, ids=[c[0] for c in CASES])
async def test_the_direct_route_answers_as_fastapi_does(
    name: str, body: bytes, headers: dict[str, str]
) -> None:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=_app()), base_url="http://m"
    ) as http:
        plain = await http.post("/plain", content=body, headers=headers)
        direct = await http.post("/direct", content=body, headers=headers)
    answer: dict[str, Any] = plain.json()
    assert (direct.status_code, direct.json()) == (plain.status_code, answer), name
    assert dict(direct.headers) == dict(plain.headers), name


async def test_the_cases_reach_every_outcome() -> None:
    """The cases above are not all one answer: the comparison covers success and each error."""
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=_app()), base_url="http://m"
    ) as http:
        statuses = {
            (await http.post("/direct", content=body, headers=headers)).status_code
            for _, body, headers in CASES
        }
    assert statuses == {200, 400, 401, 422}


async def test_a_client_gone_mid_body_gets_the_same_answer() -> None:
    """The body's read fails (ClientDisconnect): FastAPI answers 400, not a 500 logged as ours."""
    api = _app()
    answers: dict[str, list[Message]] = {}
    for path in ("/plain", "/direct"):
        sent: list[Message] = []

        async def receive() -> Message:
            return {"type": "http.disconnect"}

        async def send(message: Message, sent: list[Message] = sent) -> None:
            sent.append(message)

        headers = [(b"content-type", b"application/json"), (b"x-api-key", KEY.encode())]
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "root_path": "",
            "query_string": b"",
            "headers": headers,
            "client": ("127.0.0.1", 1),
            "server": ("m", 80),
        }
        await api(scope, receive, send)
        answers[path] = sent
    assert answers["/direct"] == answers["/plain"]
    assert answers["/direct"][0]["status"] == 400


def _refused(**route: Any) -> None:
    api = FastAPI()
    with pytest.raises(TypeError, match="/odd: a direct route"):
        api.router.add_api_route(
            "/odd", methods=["POST"], route_class_override=DirectRoute, **route
        )


def test_what_the_direct_route_would_skip_is_refused_when_the_route_is_made() -> None:
    async def other(query: Probe) -> Response:
        return JSONResponse({})

    def not_async(body: Probe, who: Auth) -> Response:
        return JSONResponse({})

    async def no_key(body: Probe, who: str) -> Response:
        return JSONResponse({})

    _refused(endpoint=other)
    _refused(endpoint=not_async)
    _refused(endpoint=no_key)
    _refused(endpoint=echo, dependencies=[Depends(lambda: None)])
    _refused(endpoint=echo, strict_content_type=False)
    _refused(endpoint=echo, max_body_size=1_000)
