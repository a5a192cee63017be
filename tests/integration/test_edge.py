"""The HTTP edge on a real Kafka broker and a real Milvus (Lite), through HTTP (in-process ASGI):
validation parity with the worker (a record the worker would dead-letter is a 422 naming the same
field, and nothing of the request is produced).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from aiokafka import AIOKafkaProducer

from ranker.api import create_api
from ranker.cached import Cached
from ranker.producer import EventProducer
from ranker.service import RecallService
from storage import MilvusConfig, MilvusStore, StorageError
from storage.embedding import Embedder, Hashing
from storage.records import Limits, RecordError, check_time, decode_access, decode_write
from storage.tenants import TenantRegistry
from tests.infra import free_port
from tests.integration.harness import Stack, read_all

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

DIM = 4
KEY = "key-acme-0123456789"
REGISTRY = TenantRegistry.of({"tenants": {"acme": {"api_keys": [KEY]}}})
LIMITS = Limits(DIM, 64, REGISTRY, timedelta(seconds=300))  # the worker unit tests' limits
HEADERS = {"X-API-Key": KEY}


@pytest.fixture
def make_stack(kafka_bootstrap: str, tmp_path: Path) -> Callable[..., Stack]:
    """Stacks on the real broker; their Milvus is Lite (a test that needs the server asks for
    ``milvus_server_uri`` itself)."""

    def make(tenants: tuple[str, ...] = ("acme",), **kw: Any) -> Stack:
        return Stack(kafka_bootstrap, str(tmp_path / "lite.db"), tmp_path, tenants, **kw)

    return make


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
        assert set(reply.json()) == {"type", "title", "status", "detail", "field"}
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
    assert sorted(w["content"] for w in sent) == ["fine 0", "fine 1", "fine 2"]
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


# -- faults answered -------------------------------------------------------------------------------


class Proxy:
    """A TCP forwarder to ``port`` on 127.0.0.1; ``close()`` makes the target unreachable."""

    def __init__(self, port: int) -> None:
        self.target = port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.sockets: list[socket.socket] = []
        self.closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target))
            self.sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self.closed.set()
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept; close alone may not
        self.listener.close()
        for s in self.sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()


@contextlib.asynccontextmanager
async def api(
    store: MilvusStore,
    producer: EventProducer,
    *,
    embedder: Embedder | None = None,
    max_in_flight: int = 256,
    start: bool = True,
) -> AsyncIterator[tuple[httpx.AsyncClient, RecallService]]:
    """The app over ``store`` and ``producer`` (started here), with the readiness checks that
    ``python -m ranker`` has (uncached)."""
    service = RecallService(store, embedder or Hashing(DIM), producer.send, candidates=10)
    milvus = Cached(lambda: asyncio.to_thread(store.reachable, 1.0), every_s=0)
    app = create_api(
        service,
        REGISTRY,
        LIMITS,
        max_in_flight=max_in_flight,
        max_in_flight_per_tenant=max_in_flight,  # one tenant here: the limit for all is tested
        ready={"kafka": producer.ready, "milvus": milvus},
    )
    await producer.start()
    if start:
        await service.start()
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://mnemostream") as http:
            yield http, service
    finally:
        await service.stop()
        await producer.stop()


def lite(tmp_path: Path) -> MilvusStore:
    store = MilvusStore(MilvusConfig(str(tmp_path / "milvus.db"), dim=DIM))
    store.connect()
    return store


RECALL = {"vector": [1.0, 0.0, 0.0, 0.0], "k": 3}
WRITE = {"memories": [{"content": "remember: tea at four"}]}


async def readiness(http: httpx.AsyncClient, timeout_s: float = 30.0) -> int:
    """``/readyz``'s status once it is 200, or its last status after ``timeout_s``: a loaded
    machine can take more than the checks' one second to answer (the checks are not cached), and
    what is tested is that the part answers, not how fast."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while (status := (await http.get("/readyz")).status_code) != 200:
        if asyncio.get_running_loop().time() > deadline:
            break
        await asyncio.sleep(0.2)
    return status


def assert_retry(reply: httpx.Response, status: int) -> None:
    assert (reply.status_code, reply.headers.get("Retry-After")) == (status, "1"), reply.text
    assert isinstance(reply.json()["detail"], str)


async def test_kafka_unreachable_is_a_503_with_retry_after(
    make_stack: Callable[..., Stack], tmp_path: Path
) -> None:
    store = lite(tmp_path)
    closed = f"127.0.0.1:{free_port()}"
    async with api(store, EventProducer(closed, str, timeout_s=0.5, check_every_s=0)) as (
        http,
        _,
    ):
        assert_retry(await http.post("/v1/memories", json=WRITE, headers=HEADERS), 503)
        body = {"memory_ids": ["m1"]}
        assert_retry(await http.post("/v1/access", json=body, headers=HEADERS), 503)
        ready = await http.get("/readyz")
        assert (ready.status_code, ready.json()["checks"]["kafka"]) == (503, False)
        recall = await http.post("/v1/recall", json={**RECALL, "track": False}, headers=HEADERS)
        assert recall.status_code == 200  # reads do not need Kafka
    # a broker that answers but cannot take the message (no such topic: nothing is auto-created)
    stack = make_stack(("acme",), dim=DIM)
    missing = EventProducer(stack.bootstrap, lambda role: f"{stack.name}.missing", timeout_s=1)
    async with api(store, missing) as (http, _):
        assert_retry(await http.post("/v1/memories", json=WRITE, headers=HEADERS), 503)
        assert await readiness(http) == 200  # the broker itself answers
    store.close()


async def test_milvus_unreachable_is_a_503_and_other_storage_errors_a_json_500(
    make_stack: Callable[..., Stack], milvus_server_uri: str, tmp_path: Path
) -> None:
    stack = make_stack(("acme",), dim=DIM)
    await asyncio.to_thread(stack.create_topics)
    proxy = Proxy(int(milvus_server_uri.rsplit(":", 1)[1]))
    config = MilvusConfig(
        f"http://127.0.0.1:{proxy.port}",
        collection=f"c_{stack.name}",
        dim=DIM,
        partition_key=False,
        full_text=False,
        timeout_s=3.0,
    )
    store = MilvusStore(config)
    await asyncio.to_thread(store.connect)
    producer = EventProducer(stack.bootstrap, stack.topic, timeout_s=5)
    async with api(store, producer) as (http, _):
        ok = await http.post("/v1/recall", json=RECALL, headers=HEADERS)
        assert (ok.status_code, ok.json()["results"]) == (200, [])
        assert await readiness(http) == 200
        proxy.close()
        assert_retry(await http.post("/v1/recall", json=RECALL, headers=HEADERS), 503)
        assert_retry(await http.get("/v1/memories/m1", headers=HEADERS), 503)
        ready = await http.get("/readyz")
        assert (ready.status_code, ready.json()["checks"]["milvus"]) == (503, False)
        metrics = (await http.get("/metrics")).text
        assert 'mnemostream_http_responses_total{route="/v1/recall",status="503"} 1.0' in metrics
    with contextlib.suppress(StorageError):
        await asyncio.to_thread(store.close)
    # a store that was never connected never will be: not retriable, a JSON 500
    producer = EventProducer(stack.bootstrap, stack.topic, timeout_s=5)
    async with api(MilvusStore(config), producer) as (http, _):
        failed = await http.post("/v1/recall", json=RECALL, headers=HEADERS)
        assert failed.status_code == 500
        assert "not connected" in failed.json()["detail"]
        assert "Retry-After" not in failed.headers


class Gate(Hashing):
    """An embedder that holds every call until the test opens the gate."""

    def __init__(self, dim: int) -> None:
        super().__init__(dim)
        self.entered = threading.Semaphore(0)
        self.open = threading.Event()

    def embed(self, texts: Sequence[str]) -> list[tuple[float, ...]]:
        self.entered.release()
        self.open.wait(30)
        return list(super().embed(texts))


async def test_overload_beyond_the_in_flight_limit_is_a_429_before_any_work(
    make_stack: Callable[..., Stack], tmp_path: Path
) -> None:
    stack = make_stack(("acme",), dim=DIM)
    await asyncio.to_thread(stack.create_topics)
    store, gate = lite(tmp_path), Gate(DIM)
    producer = EventProducer(stack.bootstrap, stack.topic)
    async with api(store, producer, embedder=gate, max_in_flight=2) as (http, _):
        body = {"query": "what about tea?", "k": 3, "track": False}

        async def recall() -> httpx.Response:
            return await http.post("/v1/recall", json=body, headers=HEADERS)

        held = [asyncio.create_task(recall()) for _ in range(2)]
        for _ in range(2):  # both are inside the embedder
            assert await asyncio.to_thread(gate.entered.acquire, True, 30)
        refused = await asyncio.gather(*(recall() for _ in range(50)))
        writes = await http.post("/v1/memories", json=WRITE, headers=HEADERS)
        assert (await http.get("/healthz")).status_code == 200  # probes are never refused
        gate.open.set()
        answered = await asyncio.gather(*held)
        assert [r.status_code for r in answered] == [200, 200]
        assert {r.status_code for r in refused} == {429}
        assert {r.headers["Retry-After"] for r in refused} == {"1"}
        assert writes.status_code == 429
        assert not gate.entered.acquire(blocking=False)  # no refused request reached the embedder
        assert (await recall()).status_code == 200  # answering again at once
        metrics = (await http.get("/metrics")).text
        assert 'mnemostream_http_responses_total{route="/v1/recall",status="429"} 50.0' in metrics
        assert 'mnemostream_http_responses_total{route="/v1/memories",status="429"} 1.0' in metrics
    assert await asyncio.to_thread(produced, stack, "memory-writes") == []
    store.close()


async def test_readyz_is_false_until_the_service_runs(
    make_stack: Callable[..., Stack], tmp_path: Path
) -> None:
    stack = make_stack(("acme",), dim=DIM)
    store = lite(tmp_path)
    async with api(store, EventProducer(stack.bootstrap, stack.topic), start=False) as (
        http,
        service,
    ):
        before = await http.get("/readyz")
        assert (before.status_code, before.json()["checks"]["batcher"]) == (503, False)
        await service.start()
        after = await http.get("/readyz")
        assert (after.status_code, after.json()["status"]) == (200, "ready")
        assert after.json()["checks"] == {"batcher": True, "kafka": True, "milvus": True}
        await service.stop()
        assert (await http.get("/readyz")).status_code == 503
    store.close()
