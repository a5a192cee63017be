"""Request input the API took although it is bad (a review drove every route with odd input):
filter lists of any length, JSON types coerced on recall, tokens named by a union's branch, bodies
that are not UTF-8 JSON, and ``/`` escaped into a memory id. Each is a 4xx naming the field."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from memcore import MAX_TAGS
from ranker.api import MAX_FILTER_TIERS, create_api
from ranker.applied import Token
from ranker.service import Recall, RecallQuery, RecallService
from ranker.tokens import TokenSeal
from storage import Filters, MilvusConfig, MilvusStore
from storage.embedding import Hashing
from storage.tenants import TenantRegistry

KEY = "key-acme-0123456789"
AUTH = {"Authorization": f"Bearer {KEY}"}
pytestmark = pytest.mark.anyio


class Asked(RecallService):
    """The filters of each recall, answered with nothing (no Kafka, no Milvus)."""

    def __init__(self) -> None:
        store = MilvusStore(MilvusConfig("unused.db", dim=4))
        super().__init__(store, Hashing(4), self._no_send)  # type: ignore[arg-type]
        self.filters: list[Filters] = []

    @staticmethod
    async def _no_send(*_: object) -> object:
        raise AssertionError("nothing is produced here")

    async def recall(self, tenant_id: str, query: RecallQuery) -> Recall:
        self.filters.append(query.filters)
        return Recall([])


SEAL = TokenSeal()
"""The apps' token seal: a test seals tokens as the service issues them."""


def client(service: Asked) -> httpx.AsyncClient:
    registry = TenantRegistry.of({"tenants": {"acme": {"api_keys": [KEY]}}})
    api = create_api(service, registry, token_seal=SEAL)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=api), base_url="http://m")


async def recall(body: dict[str, Any], service: Asked | None = None) -> httpx.Response:
    async with client(service or Asked()) as http:
        return await http.post("/v1/recall", json=body, headers=AUTH)


def refused(reply: httpx.Response) -> tuple[int, str]:
    return reply.status_code, reply.json().get("field", "")


@pytest.mark.parametrize(
    ("filters", "field"),
    [
        ({"tags": [f"t{i}" for i in range(MAX_TAGS + 1)]}, "filters.tags"),
        ({"tags": ["ok", ""]}, "filters.tags[1]"),
        ({"tags": ["x" * 200]}, "filters.tags[0]"),
        ({"memory_types": ["episodic"] * (MAX_FILTER_TIERS + 1)}, "filters.memory_types"),
    ],
)
async def test_filter_lists_are_bounded_as_a_memory_is(filters: dict[str, Any], field: str) -> None:
    """Any number of tags (each pasted into the Milvus expression) was searched: 300,000 held
    Milvus for seconds and answered 200."""
    reply = await recall({"query": "tea", "filters": filters})
    assert refused(reply) == (422, field), reply.text


async def test_filters_name_each_tag_and_tier_once() -> None:
    service = Asked()
    filters = {"tags": ["a", "b", "a"], "memory_types": ["episodic", "short_term", "semantic"]}
    reply = await recall({"query": "tea", "filters": filters}, service)
    assert reply.status_code == 200, reply.text
    (asked,) = service.filters
    assert (asked.tags_any, asked.tiers) == (("a", "b"), ("episodic", "semantic"))


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"vector": ["1", "0", "0", "0"]}, "vector[0]"),
        ({"vector": [1.0, 0.0, 0.0, 0.0], "k": "2"}, "k"),
        ({"query": "tea", "k": True}, "k"),
        ({"query": "tea", "min_score": True}, "min_score"),
        ({"query": "tea", "mmr_lambda": "0.5"}, "mmr_lambda"),
        ({"query": "tea", "weights": {"similarity": "1"}}, "weights.similarity"),
        ({"query": "tea", "filters": {"tags": [5]}}, "filters.tags[0]"),
    ],
)
async def test_recall_takes_json_types_as_they_are(body: dict[str, Any], field: str) -> None:
    """Recall coerced "2" to a k and true to a number, where writes are strict."""
    assert refused(await recall(body)) == (422, field)


@pytest.mark.parametrize(
    ("body", "field", "value"),
    [
        (
            {"query": "tea", "filters": {"tags": ["work", "\ud800", "x"]}},
            "filters.tags[1]",
            "'\\ud800'",
        ),
        ({"query": "a\udc00b"}, "query", "'a\\udc00b'"),
        ({"query": "tea", "filters": {"user_id": "ann\ud800"}}, "filters.user_id", "'ann\\ud800'"),
    ],
)
async def test_text_utf8_cannot_carry_is_shown_where_it_is_named(
    body: dict[str, Any], field: str, value: str
) -> None:
    """A lone surrogate in a recall list was named by its place but shown as the whole list."""
    headers = AUTH | {"content-type": "application/json"}
    async with client(Asked()) as http:  # escaped as \\ud800: UTF-8 cannot carry it raw
        reply = await http.post("/v1/recall", content=json.dumps(body), headers=headers)
    assert refused(reply) == (422, field), reply.text
    assert reply.json()["detail"].startswith(f"{field}={value}: "), reply.text


async def test_times_are_still_text_in_strict_bodies() -> None:
    service = Asked()
    at = "2026-03-01T12:00:00+00:00"
    filters = {"created_from": "2026-01-01T00:00:00Z"}
    reply = await recall({"query": "tea", "at": at, "track": False, "filters": filters}, service)
    assert reply.status_code == 200, reply.text
    assert service.filters[0].created_from_us is not None
    async with client(Asked()) as http:
        access = await http.post(
            "/v1/access", json={"memory_ids": ["m1"], "at": True}, headers=AUTH
        )
    assert refused(access)[0] == 422


async def test_a_bad_token_is_named_by_its_place_in_after() -> None:
    """The error named the union's branch: ``after.str``."""
    good = await SEAL.seal(Token({"memory-writes": {0: 5}}), "acme")
    many = await recall({"query": "tea", "after": [good, 5]})
    one = await recall({"query": "tea", "after": 5})
    assert refused(many) == (422, "after[1]"), many.text
    assert refused(one)[0] == 422
    assert "str" not in refused(one)[1]


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ('{"query": "tea"}'.encode("utf-16"), "not UTF-8"),
        ('{"query": "tea"}'.encode("utf-32"), "not UTF-8"),
        (b"\xef\xbb\xbf" + b'{"query": "tea"}', "BOM"),
        (b'{"query": "tea", "k": ' + b"7" * 5000 + b"}", "digits"),
    ],
    ids=["utf-16", "utf-32", "bom", "5000-digits"],
)
async def test_a_body_is_utf8_json_or_a_400_saying_why(body: bytes, says: str) -> None:
    """UTF-16 and a byte order mark were read (the standard library detects them in bytes), and
    an integer of 5,000 digits was a 400 that said nothing."""
    headers = {**AUTH, "content-type": "application/json"}
    async with client(Asked()) as http:
        reply = await http.post("/v1/recall", content=body, headers=headers)
        write = await http.post("/v1/memories", content=body, headers=headers)
    for answer in (reply, write):
        assert answer.status_code == 400, answer.text
        assert says in answer.json()["detail"]


@pytest.mark.parametrize("path", ["/v1/memories/a%2Fb", "/v1/memories/a%2fhistory"])
async def test_a_slash_escaped_into_a_memory_id_is_named(path: str) -> None:
    """The server decodes ``%2F`` before routing: 404 ``Not Found`` from no route, or the
    history of ``a`` for ``a%2Fhistory``."""
    async with client(Asked()) as http:
        got = await http.get(path, headers=AUTH)
        patched = await http.patch(path, json={"tags": ["x"]}, headers=AUTH)
        deleted = await http.delete(path, headers=AUTH)
        history = await http.get(f"{path}/history", headers=AUTH)
        nobody = await http.get(path)
        stranger = await http.get(path, headers={"Authorization": "Bearer key-nobody-0123456789"})
    for reply in (got, patched, deleted, history):
        assert refused(reply) == (422, "memory_id"), reply.text
    for reply in (nobody, stranger):  # the key is checked first, as on every route
        assert reply.status_code == 401, reply.text
