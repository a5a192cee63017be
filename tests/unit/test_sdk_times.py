"""The SDK sends every time as ISO 8601 text, a datetime or text alike, whichever call carries it
and at any depth of its body (``recall(filters={"created_from": ...})``), sync and async."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

import httpx

from mnemostream import AsyncClient, Client

WHEN = datetime(2024, 1, 1, tzinfo=UTC)
TEXT = "2024-01-01T00:00:00Z"


class Bodies:
    """Answers like the API and records the JSON body of each request."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(json.loads(request.content))
        reply = {
            "ids": ["m1"],
            "results": [],
            "accepted": 1,
            "memory_id": "m2",
            "token": None,
        }
        return httpx.Response(200, json=reply)


def _calls(client: Client, at: datetime | str) -> None:
    client.remember("a", at=at)
    client.remember_many([{"content": "b", "at": at}])
    client.recall("q", at=at, filters={"created_from": at, "created_to": at})
    client.access(["m1"], at=at)
    client.update("m1", importance=0.1, at=at)


async def _async_calls(client: AsyncClient, at: datetime | str) -> None:
    await client.remember("a", at=at)
    await client.remember_many([{"content": "b", "at": at}])
    await client.recall("q", at=at, filters={"created_from": at, "created_to": at})
    await client.access(["m1"], at=at)
    await client.update("m1", importance=0.1, at=at)


def _times(sent: list[dict[str, Any]]) -> list[object]:
    remember, many, recall, access, update = sent
    return [
        remember["memories"][0]["at"],
        many["memories"][0]["at"],
        recall["at"],
        recall["filters"]["created_from"],
        recall["filters"]["created_to"],
        access["at"],
        update["at"],
    ]


def test_every_call_sends_a_datetime_or_text_as_iso_text() -> None:
    for at, sent in ((WHEN, WHEN.isoformat()), (TEXT, TEXT)):
        seen = Bodies()
        with Client("http://x", "k" * 16, transport=httpx.MockTransport(seen)) as client:
            _calls(client, at)
        assert _times(seen.sent) == [sent] * 7, at


def test_the_async_client_sends_the_same_bodies() -> None:
    for at in (WHEN, TEXT):
        plain, awaited = Bodies(), Bodies()
        with Client("http://x", "k" * 16, transport=httpx.MockTransport(plain)) as client:
            _calls(client, at)

        async def run(at: datetime | str = at, seen: Bodies = awaited) -> None:
            transport = httpx.MockTransport(seen)
            async with AsyncClient("http://x", "k" * 16, transport=transport) as client:
                await _async_calls(client, at)

        asyncio.run(run())
        assert awaited.sent == plain.sent, at


def test_a_vector_and_other_values_are_sent_as_given() -> None:
    seen = Bodies()
    with Client("http://x", "k" * 16, transport=httpx.MockTransport(seen)) as client:
        client.remember("a", embedding=[0.5, 1.0], metadata={"n": 1, "tags": ["x", None]})
        client.recall(vector=(0.5, 1.0), filters={"tags": ["x"]})
    (remember, recall) = seen.sent
    assert remember["memories"][0]["embedding"] == [0.5, 1.0]
    assert remember["memories"][0]["metadata"] == {"n": 1, "tags": ["x", None]}
    assert (recall["vector"], recall["filters"]) == ([0.5, 1.0], {"tags": ["x"]})
