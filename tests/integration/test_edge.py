"""The HTTP edge on a real Kafka broker and a real Milvus (Lite), through HTTP (in-process ASGI):
validation parity with the worker (a record the worker would dead-letter is a 422 naming the same
field, and nothing of the request is produced).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from aiokafka import AIOKafkaProducer

from ranker.api import create_api
from ranker.service import RecallService
from storage import MilvusConfig, MilvusStore
from storage.embedding import Hashing
from storage.records import Limits, RecordError, check_time, decode_access, decode_write
from storage.tenants import TenantRegistry
from tests.integration.harness import Stack, read_all

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

DIM = 4
KEY = "key-acme-0123456789"
REGISTRY = TenantRegistry.of({"tenants": {"acme": {"api_keys": [KEY]}}})
LIMITS = Limits(DIM, 64, REGISTRY, timedelta(seconds=300))  # the worker unit tests' limits
HEADERS = {"X-API-Key": KEY}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def edge(
    make_stack: Callable[..., Stack], tmp_path: Path
) -> AsyncIterator[tuple[httpx.AsyncClient, Stack]]:
    stack = make_stack(("acme",), dim=DIM)
    await asyncio.to_thread(stack.create_topics)
    store = MilvusStore(MilvusConfig(str(tmp_path / "milvus.db"), dim=DIM))
    store.connect()
    producer = AIOKafkaProducer(bootstrap_servers=stack.bootstrap, acks="all")
    await producer.start()

    async def send(role: str, key: bytes, value: bytes) -> Awaitable[object]:
        delivery: Awaitable[object] = await producer.send(stack.topic(role), key=key, value=value)
        return delivery

    service = RecallService(store, Hashing(DIM), send, candidates=10)
    await service.start()
    transport = httpx.ASGITransport(app=create_api(service, REGISTRY, LIMITS))
    async with httpx.AsyncClient(transport=transport, base_url="http://mnemostream") as http:
        yield http, stack
    await service.stop()
    await producer.stop()
    store.close()


def produced(stack: Stack, role: str) -> list[dict[str, Any]]:
    return [orjson.loads(v) for _, v in read_all(stack.bootstrap, stack.topic(role))]


NOW = datetime.now(UTC)
GOOD: dict[str, Any] = {"memory_id": "m1", "content": "hello"}

# (name, memory fields over GOOD, the field the worker names); from tests/unit/test_streams_unit.py
# and tests/unit/test_poison.py
BAD_WRITES: list[tuple[str, dict[str, Any], str]] = [
    ("bad id", {"memory_id": "bad id"}, "memory_id"),
    ("newline ending the id", {"memory_id": "m1\n"}, "memory_id"),
    ("control character in the id", {"memory_id": "m\x001"}, "memory_id"),
    ("empty content", {"content": ""}, "content"),
    ("content over the limit", {"content": "x" * 65}, "content"),
    ("900 KB content", {"content": "x" * 900_000}, "content"),
    ("context over the limit", {"context": "x" * 65}, "context"),
    ("naive time", {"at": "2026-03-01T12:00:00"}, "at"),
    ("number as time", {"at": 5}, "at"),
    ("year 9999", {"at": "9999-12-31T23:00:00+00:00"}, "at"),
    ("year 9999, negative offset", {"at": "9999-12-31T23:00:00-05:00"}, "at"),
    ("year 1", {"at": "0001-01-01T00:00:00+05:00"}, "at"),
    ("beyond the skew", {"at": (NOW + timedelta(hours=1)).isoformat()}, "at"),
    ("embedding of the wrong size", {"embedding": [1, 2]}, "embedding"),
    ("zero embedding", {"embedding": [0, 0, 0, 0]}, "embedding"),
    ("string in the embedding", {"embedding": [1, "2", 3, 4]}, "embedding[1]"),
    ("embedding past float32", {"embedding": [1e308, 1, 1, 1]}, "embedding[0]"),
    ("embedding that float32 zeroes", {"embedding": [1e-320, 0, 0, 0]}, "embedding"),
    ("negative importance", {"importance": -0.1}, "importance"),
    ("boolean importance", {"importance": True}, "importance"),
    ("importance over 64 bits", {"importance": 10**40}, "importance"),
    ("unknown memory type", {"memory_type": "procedural"}, "memory_type"),
    ("empty tag", {"tags": ["ok", ""]}, "tags[1]"),
    ("tag over 128 bytes", {"tags": ["é" * 100]}, "tags[0]"),
    ("65 tags", {"tags": [f"t{i}" for i in range(65)]}, "tags"),
    ("bad relation", {"relations": ["a b"]}, "relations[0]"),
    ("session id over 256 bytes", {"session_id": "é" * 200}, "session_id"),
    ("metadata over 32 KiB", {"metadata": {"a": "x" * 40_000}}, "metadata"),
    ("unknown field", {"extra": 1}, "extra"),
    ("no content", {"content": None}, "content"),
]

# the worker cannot even parse these bytes (it names "$"); the edge names the field
UNPARSABLE: list[tuple[str, dict[str, Any], str]] = [
    ("NaN importance", {"importance": float("nan")}, "importance"),
    ("NaN in the embedding", {"embedding": [float("nan"), 1, 1, 1]}, "embedding[0]"),
    ("infinite metadata value", {"metadata": {"x": [float("inf")]}}, "metadata.x[0]"),
    ("lone surrogate in session_id", {"session_id": "\ud800"}, "session_id"),
    ("lone surrogate in a tag", {"tags": ["\udc00"]}, "tags[0]"),
    ("lone surrogate in a metadata key", {"metadata": {"\udc00": 1}}, "metadata.\\udc00"),
    ("metadata integer over 64 bits", {"metadata": {"n": 10**40}}, "metadata.n"),
]


def worker_field(memory: dict[str, Any]) -> str:
    """The field the worker's decode names for this memory written now."""
    doc = {"v": 1, "tenant_id": "acme", "at": NOW.isoformat(), **memory}
    try:
        record = decode_write(json.dumps(doc).encode(), LIMITS)  # the bytes a client sends
        check_time("at", record.at, NOW, LIMITS)
    except RecordError as exc:
        return exc.field
    return "(accepted)"


async def test_every_write_the_worker_would_dead_letter_is_a_422_naming_its_field(
    edge: tuple[httpx.AsyncClient, Stack],
) -> None:
    http, stack = edge
    for name, fields, field in BAD_WRITES:
        memory = {k: v for k, v in {**GOOD, **fields}.items() if v is not None}
        assert worker_field(memory) == field, name  # the worker's own verdict
        reply = await http.post("/v1/memories", json={"memories": [memory]}, headers=HEADERS)
        assert (reply.status_code, reply.json()["field"]) == (422, f"memories[0].{field}"), name
        assert set(reply.json()) == {"detail", "field"}
        assert reply.json()["detail"].startswith(f"memories[0].{field}="), name
    for name, fields, field in UNPARSABLE:
        body = json.dumps({"memories": [{**GOOD, **fields}]}).encode()  # NaN as NaN
        reply = await http.post(
            "/v1/memories",
            content=body,
            headers={**HEADERS, "content-type": "application/json"},
        )
        assert (reply.status_code, reply.json()["field"]) == (422, f"memories[0].{field}"), name
    assert await asyncio.to_thread(produced, stack, "memory-writes") == []


async def test_a_batch_with_one_bad_memory_produces_nothing(
    edge: tuple[httpx.AsyncClient, Stack],
) -> None:
    http, stack = edge
    memories: list[dict[str, Any]] = [{"content": f"fine {i}"} for i in range(5)]
    memories.insert(3, {"content": "bad", "tags": ["x" * 200]})
    reply = await http.post("/v1/memories", json={"memories": memories}, headers=HEADERS)
    assert (reply.status_code, reply.json()["field"]) == (422, "memories[3].tags[0]")
    shape = await http.post("/v1/memories", json={"memories": "nope"}, headers=HEADERS)
    assert (shape.status_code, shape.json()["field"]) == (422, "memories")
    assert await asyncio.to_thread(produced, stack, "memory-writes") == []
    ok = await http.post("/v1/memories", json={"memories": memories[:3]}, headers=HEADERS)
    assert ok.status_code == 200, ok.text
    sent = await asyncio.to_thread(produced, stack, "memory-writes")
    assert [w["content"] for w in sent] == ["fine 0", "fine 1", "fine 2"]
    for w in sent:  # every produced write decodes as the worker decodes it
        assert decode_write(orjson.dumps(w), LIMITS).memory_id in ok.json()["ids"]


async def test_bad_accesses_are_422_and_produce_nothing(
    edge: tuple[httpx.AsyncClient, Stack],
) -> None:
    http, stack = edge
    cases = [
        ({"memory_ids": ["m1", "bad id"]}, "memory_ids[1]"),
        ({"memory_ids": ["m1"], "at": (NOW + timedelta(hours=1)).isoformat()}, "at"),
        ({"memory_ids": ["m1"], "at": "9999-12-31T23:00:00-05:00"}, "at"),
        ({"memory_ids": ["m1"], "kind": "peek"}, "kind"),
    ]
    for body, field in cases:
        reply = await http.post("/v1/access", json=body, headers=HEADERS)
        assert (reply.status_code, reply.json()["field"]) == (422, field), body
    assert await asyncio.to_thread(produced, stack, "access-events") == []
    ok = await http.post("/v1/access", json={"memory_ids": ["m1", "m2"]}, headers=HEADERS)
    assert ok.status_code == 200, ok.text
    sent = await asyncio.to_thread(produced, stack, "access-events")
    assert sorted(decode_access(orjson.dumps(a), LIMITS).memory_id for a in sent) == ["m1", "m2"]
