"""The listing, export and get-many routes in process, over a service whose reads are recorded
(no Kafka, no Milvus): what they wait for and which field a refusal names."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from fastapi.security import HTTPAuthorizationCredentials

from ranker.api import create_api
from ranker.applied import Token
from ranker.listing import Page, encode_cursor
from ranker.service import RecallService
from ranker.tokens import TokenSeal
from ranker.wire import presented_key
from storage import Filters, MilvusConfig, MilvusStore
from storage.embedding import Hashing
from storage.tenants import TenantRegistry

KEY = "key-acme-0123456789"
AUTH = {"Authorization": f"Bearer {KEY}"}
SEAL = TokenSeal()
WRITTEN = Token({"memory-writes": {0: 41}})
pytestmark = pytest.mark.anyio


class Reads(RecallService):
    """Records the tokens waited for; holds no memory."""

    def __init__(self) -> None:
        store = MilvusStore(MilvusConfig("unused.db", dim=4))
        super().__init__(store, Hashing(4), self._no_send)  # type: ignore[arg-type]
        self.waited: list[Token | None] = []

    @staticmethod
    async def _no_send(*_: object) -> object:
        raise AssertionError("nothing is produced here")

    async def wait(self, after: Token | None) -> None:
        self.waited.append(after)

    async def memory_ids(self, tenant_id: str) -> list[str]:
        return []

    async def list_page(self, tenant_id: str, filters: Filters, *args: Any, **kw: Any) -> Page:
        return Page([], None)


async def call(service: Reads, method: str, url: str, **kw: Any) -> httpx.Response:
    registry = TenantRegistry.of({"tenants": {"acme": {"api_keys": [KEY]}}})
    api = create_api(service, registry, token_seal=SEAL)
    transport = httpx.ASGITransport(app=api)
    async with httpx.AsyncClient(transport=transport, base_url="http://m") as http:
        return await http.request(method, url, headers=AUTH, **kw)


async def test_an_export_waits_for_its_after_token() -> None:
    """An export right after an erase, with the erase's token, streamed the erased memory: the
    route took no ``after``."""
    service = Reads()
    written = await SEAL.seal(WRITTEN, "acme")
    reply = await call(service, "GET", "/v1/export", params={"after": written})
    assert reply.status_code == 200, reply.text
    assert service.waited == [WRITTEN]
    refused = await call(service, "GET", "/v1/export", params={"after": "garbage"})
    assert (refused.status_code, refused.json()["field"]) == (422, "after")


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"limit": "5000"}, "limit"),
        ({"limit": "0"}, "limit"),
        ({"cursor": "A" * 600}, "cursor"),
        ({"cursor": "%%%"}, "cursor"),
    ],
)
async def test_a_query_parameter_is_named_as_written(params: dict[str, str], field: str) -> None:
    reply = await call(Reads(), "GET", "/v1/memories", params=params)
    assert (reply.status_code, reply.json()["field"]) == (422, field), reply.text


@pytest.mark.parametrize("cursor", ["%%%", "Zm9vL2Jhcg"])  # "foo/bar": no id
async def test_a_bad_cursor_is_quoted_as_sent_not_as_decoded(cursor: str) -> None:
    """The error quoted the cursor's decoded text ("cursor='foo/bar'", "cursor=''"), which the
    client never sent.
    """
    reply = await call(Reads(), "GET", "/v1/memories", params={"cursor": cursor})
    assert (reply.status_code, reply.json()["field"]) == (422, "cursor"), reply.text
    assert f"cursor={cursor!r}" in reply.json()["detail"], reply.text


@pytest.mark.parametrize("name", ["user_id", "agent_id", "session_id", "tag"])
async def test_a_filter_that_is_not_utf8_is_refused_not_read_as_another(name: str) -> None:
    """``?user_id=%E9`` listed the memories of user U+FFFD."""
    reply = await call(Reads(), "GET", f"/v1/memories?{name}=%E9")
    assert (reply.status_code, reply.json()["field"]) == (422, name), reply.text
    fine = await call(Reads(), "GET", f"/v1/memories?{name}=%C3%A9")
    assert fine.status_code == 200, fine.text


async def test_get_many_names_the_bad_id() -> None:
    body = {"memory_ids": ["m1", "m2", "bad id/"]}
    reply = await call(Reads(), "POST", "/v1/memories/get", json=body)
    assert (reply.status_code, reply.json()["field"]) == (422, "memory_ids[2]"), reply.text


@pytest.mark.parametrize(
    ("method", "url", "field"),
    [
        ("GET", "/v1/memories?userId=ann", "userId"),  # listed every user's memories
        ("GET", "/v1/memories?states=deleted", "states"),
        ("GET", "/v1/memories?user_id=ann&user_id=bob", "user_id"),  # listed bob's alone
        ("GET", "/v1/memories?limit=5&limit=500", "limit"),
        ("GET", "/v1/export?vector=true", "vector"),
        ("DELETE", "/v1/memories/m1?purged=true", "purged"),  # deleted without purging
        ("DELETE", "/v1/memories/m1?purge=true&purge=false", "purge"),
        ("GET", "/v1/memories/m1/history?verbose=1", "verbose"),
        ("POST", "/v1/recall?k=5", "k"),  # a body's field, not a query's
    ],
)
async def test_a_query_parameter_the_route_does_not_take_is_a_422_naming_it(
    method: str, url: str, field: str
) -> None:
    """Unknown query parameters were ignored and a repeated one kept its last value, silently,
    where a body's unknown field is a 422 (the SDK checks its own filters; plain HTTP did not)."""
    kw = {"json": {"query": "tea"}} if method == "POST" else {}
    reply = await call(Reads(), method, url, **kw)
    assert (reply.status_code, reply.json()["field"]) == (422, field), reply.text
    assert "query parameter" in reply.json()["detail"] or "more than once" in reply.json()["detail"]


@pytest.mark.parametrize(
    "url",
    [
        "/v1/memories?tag=a&tag=b&state=active&state=archived&user_id=ann&limit=5",
        "/v1/memories?run_id=r1&include_history=true&memory_type=semantic",
        "/v1/export?vectors=true",
    ],
)
async def test_the_query_parameters_a_route_takes_are_accepted(url: str) -> None:
    reply = await call(Reads(), "GET", url)
    assert reply.status_code == 200, reply.text


@pytest.mark.parametrize(
    ("method", "url", "allowed"),
    [
        ("PUT", "/v1/memories", "GET, POST"),  # said POST alone
        ("PUT", "/v1/memories/m1", "DELETE, GET, PATCH"),  # said GET alone
        ("GET", "/v1/recall", "POST"),
    ],
)
async def test_a_method_the_path_does_not_serve_names_every_method_it_does(
    method: str, url: str, allowed: str
) -> None:
    reply = await call(Reads(), method, url)
    assert (reply.status_code, reply.headers["allow"]) == (405, allowed), reply.text


async def test_a_request_presenting_both_keys_is_the_bearers() -> None:
    """README: the bearer token first, else X-API-Key; a client sending both (a proxy adding
    one) is the bearer's tenant, not the header's."""
    bearer = HTTPAuthorizationCredentials(scheme="Bearer", credentials=" bearer-key ")
    assert presented_key(bearer, "header-key") == "bearer-key"
    assert presented_key(None, "header-key") == "header-key"
    assert presented_key(None, None) is None


@pytest.mark.parametrize("url", ["/v1/memories?userId=ann", "/v1/recall?k=5"])
async def test_a_wrong_key_is_a_401_before_a_query_parameter_is_judged(url: str) -> None:
    """The parameter check ran before the key's: a caller with no key learnt the route's
    parameters (a 422 listing them) instead of a 401."""
    registry = TenantRegistry.of({"tenants": {"acme": {"api_keys": [KEY]}}})
    api = create_api(Reads(), registry, token_seal=SEAL)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=api), base_url="http://m"
    ) as http:
        method = "POST" if "recall" in url else "GET"
        kw: dict[str, Any] = {"json": {"query": "tea"}} if method == "POST" else {}
        reply = await http.request(method, url, headers={"X-API-Key": "nope-0123456789"}, **kw)
    assert reply.status_code == 401, reply.text


class Pages(Reads):
    """Answers every page with one memory's worth of cursor (after ``m1``), recording what the
    route asked."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[tuple[Filters, str | None]] = []

    async def list_page(self, tenant_id: str, filters: Filters, *args: Any, **kw: Any) -> Page:
        self.asked.append((filters, args[0]))
        return Page([], encode_cursor("m1"))


async def test_the_pages_of_a_listing_are_current_at_its_first_pages_time() -> None:
    """Each page was filtered as of its own request: a memory updated between two pages, its
    new version's id before the cursor, was in no page (the old version no longer current)."""
    service = Pages()
    first = await call(service, "GET", "/v1/memories?limit=1")
    cursor = first.json()["cursor"]
    second = await call(service, "GET", f"/v1/memories?limit=1&cursor={cursor}")
    assert second.status_code == 200, second.text
    (one, _), (two, after_id) = service.asked
    assert one.current_at_us is not None
    assert two.current_at_us == one.current_at_us
    assert after_id == "m1"
    history = await call(service, "GET", "/v1/memories?include_history=true")
    more = history.json()["cursor"]
    await call(service, "GET", f"/v1/memories?include_history=true&cursor={more}")
    assert [f.current_at_us for f, _ in service.asked[2:]] == [None, None]


@pytest.mark.parametrize(
    "other",
    ["/v1/memories?user_id=bob", "/v1/memories?tag=x", "/v1/memories?include_history=true"],
)
async def test_a_cursor_given_for_another_listing_is_a_422_naming_it(other: str) -> None:
    """A cursor of ann's listing used for bob's skipped bob's memories before it, silently."""
    service = Pages()
    first = await call(service, "GET", "/v1/memories?user_id=ann")
    reply = await call(service, "GET", f"{other}&cursor={first.json()['cursor']}")
    assert (reply.status_code, reply.json()["field"]) == (422, "cursor"), reply.text
    assert "another listing" in reply.json()["detail"]


async def test_a_cursor_given_before_cursors_carried_their_time_still_pages_on() -> None:
    service = Pages()
    reply = await call(service, "GET", f"/v1/memories?cursor={encode_cursor('m7')}")
    assert reply.status_code == 200, reply.text
    assert service.asked[0][1] == "m7"


async def test_a_cursor_binds_the_listing_not_the_order_its_filters_were_written_in() -> None:
    service = Pages()
    first = await call(service, "GET", "/v1/memories?tag=a&tag=b")
    cursor = first.json()["cursor"]
    again = await call(service, "GET", f"/v1/memories?tag=b&tag=a&cursor={cursor}")
    assert again.status_code == 200, again.text
    default = await call(service, "GET", "/v1/memories")
    cursor = default.json()["cursor"]
    same = await call(service, "GET", f"/v1/memories?state=archived&state=active&cursor={cursor}")
    assert same.status_code == 200, same.text


@pytest.mark.parametrize(
    ("url", "field"),
    [
        ("/v1/memories?memory_type=semantic&memory_type=bogus", "memory_type[1]"),
        ("/v1/memories?state=active&state=bogus", "state[1]"),
    ],
)
async def test_a_bad_value_of_a_repeated_filter_is_named_by_its_place(url: str, field: str) -> None:
    """``memory_type`` named no place where ``state`` did (and the recall's ``filters``)."""
    reply = await call(Reads(), "GET", url)
    assert (reply.status_code, reply.json()["field"]) == (422, field), reply.text
