"""The user scope over HTTP, next to agent_id and session_id/run_id: on writes (and the ids
derived from them), recall and list filters, and every memory returned; and in the SDK."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import httpx
import orjson
import pytest

from memcore.ids import derive_memory_id
from ranker.api import create_api
from ranker.listing import Page
from ranker.service import Recall, RecallQuery, RecallService
from ranker.tokens import TokenSeal
from ranker.wire import memory_json
from storage import Filters, MilvusConfig, MilvusStore
from storage.embedding import Hashing
from storage.tenants import TenantRegistry
from tests.rows import make_row

KEY = "key-acme-0123456789"
AUTH = {"Authorization": f"Bearer {KEY}"}
pytestmark = pytest.mark.anyio


class Produced:
    """The records the ranker produces, each acknowledged at once."""

    def __init__(self) -> None:
        self.values: list[dict[str, Any]] = []

    async def __call__(self, role: str, key: bytes, value: bytes) -> asyncio.Future[object]:
        self.values.append(orjson.loads(value))
        delivered: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        delivered.set_result(SimpleNamespace(partition=0, offset=len(self.values)))
        return delivered


SEAL = TokenSeal()
"""The apps' token seal: a test opens the tokens they answer with."""


def service_and_client(produced: Produced) -> tuple[RecallService, httpx.AsyncClient]:
    registry = TenantRegistry.of({"tenants": {"acme": {"api_keys": [KEY]}}})
    store = MilvusStore(MilvusConfig("unused.db", dim=4))  # never connected
    service = RecallService(store, Hashing(4), produced)
    api = create_api(service, registry, token_seal=SEAL)
    return service, httpx.AsyncClient(transport=httpx.ASGITransport(app=api), base_url="http://m")


async def test_a_write_carries_its_user_and_the_id_derives_from_it() -> None:
    produced = Produced()
    _, client = service_and_client(produced)
    memories = [
        {"content": "Likes tea", "user_id": "ann", "agent_id": "bot", "run_id": "r1"},
        {"content": "Likes tea", "user_id": "bob", "agent_id": "bot", "run_id": "r1"},
        {"content": "Likes tea", "agent_id": "bot", "run_id": "r1"},
    ]
    async with client as http:
        reply = await http.post("/v1/memories", json={"memories": memories}, headers=AUTH)
        too_long = await http.post(
            "/v1/memories",
            json={"memories": [{"content": "x", "user_id": "é" * 129}]},
            headers=AUTH,
        )
    assert reply.status_code == 200, reply.text
    ann, bob, nobody = reply.json()["ids"]
    assert ann == derive_memory_id("acme", "Likes tea", "bot", "r1", "ann")
    assert len({ann, bob, nobody}) == 3
    assert nobody == derive_memory_id("acme", "Likes tea", "bot", "r1")  # as before users
    assert [v.get("user_id") for v in produced.values] == ["ann", "bob", None]
    assert [v["memory_id"] for v in produced.values] == [ann, bob, nobody]
    assert (too_long.status_code, too_long.json()["field"]) == (422, "memories[0].user_id")


async def test_recall_and_list_filter_by_user_and_return_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    service, client = service_and_client(Produced())
    row = make_row("acme", "m1", (1.0, 0.0, 0.0, 0.0), user_id="ann", agent_id="bot")
    asked: list[Filters] = []

    async def recall(tenant_id: str, query: RecallQuery) -> Recall:
        asked.append(query.filters)
        return Recall([])

    async def list_page(tenant_id: str, filters: Filters, *args: object) -> Page:
        asked.append(filters)
        return Page([row], None)

    monkeypatch.setattr(service, "recall", recall)
    monkeypatch.setattr(service, "list_page", list_page)
    async with client as http:
        filters = {"user_id": "ann", "agent_id": "bot", "run_id": "r1"}
        found = await http.post(
            "/v1/recall", json={"query": "tea", "filters": filters}, headers=AUTH
        )
        listed = await http.get(
            "/v1/memories", params={"user_id": "ann", "agent_id": "bot"}, headers=AUTH
        )
        unfiltered = await http.get("/v1/memories", headers=AUTH)
    assert found.status_code == listed.status_code == unfiltered.status_code == 200
    recall_filters, list_filters, no_filters = asked
    assert (recall_filters.user_id, recall_filters.agent_id) == ("ann", "bot")
    assert recall_filters.session_id == "r1"
    assert (list_filters.user_id, list_filters.agent_id, list_filters.session_id) == (
        "ann",
        "bot",
        None,
    )
    assert no_filters.user_id is None
    (memory,) = listed.json()["memories"]
    assert (memory["user_id"], memory["agent_id"], memory["run_id"]) == ("ann", "bot", "s1")


def test_every_memory_returned_names_its_user_or_null() -> None:
    assert memory_json(make_row("acme", "m1", (1.0,), user_id="ann"))["user_id"] == "ann"
    assert memory_json(make_row("acme", "m1", (1.0,)))["user_id"] is None


def test_the_sdk_sends_and_reads_the_user_scope() -> None:
    from mnemostream import Client

    sent: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        body = memory_json(make_row("acme", "m1", (1.0,), user_id="ann"))
        if request.url.path == "/v1/memories" and request.method == "POST":
            return httpx.Response(200, json={"ids": ["m1"], "token": "t"})
        if request.url.path == "/v1/recall":
            return httpx.Response(200, json={"results": [body]})
        return httpx.Response(200, json={"memories": [body], "cursor": None})

    with Client("http://m", KEY, transport=httpx.MockTransport(handle)) as client:
        client.remember("Likes tea", user_id="ann", agent_id="bot")
        (recalled,) = client.recall("tea", filters={"user_id": "ann"})
        (listed,) = client.list_memories(user_id="ann")
    written, recall, page = sent
    assert orjson.loads(written.content)["memories"][0]["user_id"] == "ann"
    assert orjson.loads(recall.content)["filters"] == {"user_id": "ann"}
    assert page.url.params["user_id"] == "ann"
    assert recalled.user_id == listed.user_id == "ann"
