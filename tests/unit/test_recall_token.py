"""A recall answers with the token of the access events it recorded (the real stack:
test_end_to_end); the SDK's session does not wait for it."""

from __future__ import annotations

import json

import httpx
import pytest

from mnemostream import Client
from ranker.api import create_api
from ranker.applied import Token
from ranker.service import Candidate, RecallQuery, RecallService
from storage import MilvusConfig, MilvusStore
from storage.embedding import Hashing
from storage.tenants import TenantRegistry
from tests.rows import make_row
from tests.unit.test_user_scope import AUTH, KEY, Produced

pytestmark = pytest.mark.anyio
ROWS = [make_row("acme", f"m{i}", (1.0, i / 10, 0.0, 0.0)) for i in range(3)]


async def test_a_tracked_recall_answers_with_the_token_of_its_access_events(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    produced = Produced()
    registry = TenantRegistry.of({"tenants": {"acme": {"api_keys": [KEY]}}})
    service = RecallService(MilvusStore(MilvusConfig("unused.db", dim=4)), Hashing(4), produced)

    def candidates(tenant_id: str, vector: object, query: RecallQuery) -> list[Candidate]:
        return [Candidate(r, 1.0 - i / 10, None) for i, r in enumerate(ROWS)]

    monkeypatch.setattr(service, "_candidates", candidates)
    transport = httpx.ASGITransport(app=create_api(service, registry))
    await service.start()
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://m") as http:
            body = {"vector": [1, 0, 0, 0], "k": 2}
            tracked = await http.post("/v1/recall", json=body, headers=AUTH)
            untracked = await http.post("/v1/recall", json={**body, "track": False}, headers=AUTH)
            archived = await http.post("/v1/archive/search", json=body, headers=AUTH)
    finally:
        await service.stop()
    assert tracked.status_code == untracked.status_code == archived.status_code == 200
    assert [m["memory_id"] for m in tracked.json()["results"]] == ["m0", "m1"]
    assert [(v["memory_id"], v["kind"]) for v in produced.values] == [
        ("m0", "recall"),
        ("m1", "recall"),
    ]  # only the tracked recall recorded accesses: the offsets the fake broker gave are 1, 2
    assert Token.decode(tracked.json()["token"]).offsets == {"access-events": {0: 2}}
    assert untracked.json()["token"] is archived.json()["token"] is None
    assert len(untracked.json()["results"]) == 2


def test_the_sdk_sends_no_recalls_token_with_its_next_read() -> None:
    """Back-to-back recalls would each wait for the worker's access batch window."""
    after: list[list[str]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/recall":
            after.append(json.loads(request.content).get("after") or [])
            return httpx.Response(200, json={"results": [], "token": "v1.r"})
        if request.url.path == "/v1/memories":
            return httpx.Response(200, json={"ids": ["m1"], "token": "v1.w"})
        after.append(request.url.params.get_list("after"))
        return httpx.Response(404, json={"detail": "no such memory"})

    with Client("http://x", "k" * 16, transport=httpx.MockTransport(answer)) as client:
        client.remember("a")
        client.recall("q")
        client.get("m1")
        client.recall("q")
    assert after == [["v1.w"], [], []]
