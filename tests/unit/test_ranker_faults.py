"""Kafka and device faults at the ranker's adapter boundary become our own errors: retriable
(503 with Retry-After) unless a retry cannot mend them (500)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
import torch
from aiokafka.errors import (
    GroupAuthorizationFailedError,
    GroupCoordinatorNotAvailableError,
    KafkaError,
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    ProducerClosed,
    TopicAuthorizationFailedError,
    UnknownError,
)

from ranker.applied import AppliedOffsets, KafkaOffsets, NotAppliedError, Token
from ranker.batcher import Stopping
from ranker.errors import Refused, Unavailable
from ranker.producer import EventProducer
from ranker.service import Recall, RecallQuery
from storage.embedding import Hashing
from storage.tenant_log import TenantLogError
from tests.unit.test_user_scope import AUTH, Produced, service_and_client

pytestmark = pytest.mark.anyio


class Admin:
    def __init__(self, error: Exception) -> None:
        self.error = error

    async def list_consumer_group_offsets(self, group_id: str) -> Any:
        raise self.error


async def test_a_coordinator_not_available_yet_means_nothing_committed_yet() -> None:
    offsets = KafkaOffsets("unused:1", "group", {"memory-writes": "t.memory-writes"})
    offsets._admin = Admin(GroupCoordinatorNotAvailableError())
    assert await offsets.committed() == {}
    waiting = AppliedOffsets(offsets.committed, offsets.end_offsets, poll_s=0.01, timeout_s=0.05)
    with pytest.raises(NotAppliedError):  # a 503 with Retry-After, not a 500
        await waiting.wait(Token({"access-events": {0: 3}}))
    offsets._admin = Admin(UnknownError())
    with pytest.raises(Unavailable, match=r"^kafka committed offsets"):
        await offsets.committed()


class Stuck:
    """An aiokafka producer whose enqueue or delivery never finishes, or fails."""

    def __init__(self, fail: Exception | None = None, *, enqueue_hangs: bool = False) -> None:
        self.fail = fail
        self.enqueue_hangs = enqueue_hangs

    async def send(self, topic: str, key: bytes, value: bytes) -> asyncio.Future[object]:
        if self.enqueue_hangs:
            await asyncio.Event().wait()
        if self.fail is not None:
            raise self.fail
        return asyncio.get_running_loop().create_future()  # never acknowledged


async def test_sends_fail_fast_as_unavailable() -> None:
    producer = EventProducer("unused:1", str, timeout_s=0.05)
    with pytest.raises(Unavailable, match="not connected"):
        await producer.send("memory-writes", b"k", b"v")
    producer._producer = Stuck()
    delivery = await producer.send("memory-writes", b"k", b"v")
    with pytest.raises(Unavailable, match="not acknowledged"):
        await delivery
    producer._producer = Stuck(enqueue_hangs=True)
    with pytest.raises(Unavailable, match="no answer"):
        await producer.send("memory-writes", b"k", b"v")
    producer._producer = Stuck(KafkaTimeoutError())
    with pytest.raises(Unavailable, match="KafkaTimeoutError"):
        await producer.send("memory-writes", b"k", b"v")


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (TopicAuthorizationFailedError(), Refused),  # an ACL: every retry is refused again
        (MessageSizeTooLargeError(), Refused),
        (KafkaTimeoutError(), Unavailable),  # aiokafka marks these not retriable; they are
        (ProducerClosed(), Unavailable),
        (UnknownError(), Unavailable),
    ],
)
async def test_a_produce_refusal_no_retry_mends_is_not_retriable(
    error: KafkaError, expected: type[Exception]
) -> None:
    """Every KafkaError was a retriable 503: clients (and ``mnemo load``) retried an ACL
    refusal forever."""
    producer = EventProducer("unused:1", str, timeout_s=0.05)
    producer._producer = Stuck(error)
    with pytest.raises(expected) as raised:
        await producer.send("memory-writes", b"k", b"v")
    assert raised.value.retriable is (expected is Unavailable)  # type: ignore[attr-defined]
    assert type(error).__name__ in str(raised.value)


class Refusing(Produced):
    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error

    async def __call__(self, role: str, key: bytes, value: bytes) -> asyncio.Future[object]:
        raise self.error


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (Refused("kafka", "produce", "TopicAuthorizationFailedError"), 500),
        (Unavailable("kafka", "produce", "KafkaTimeoutError"), 503),
        (TenantLogError("TopicAuthorizationFailedError", retriable=False), 500),
        (TenantLogError("no answer from the broker"), 503),
    ],
)
async def test_the_api_answers_a_refusal_with_500_and_a_passing_fault_with_503(
    error: Exception, status: int
) -> None:
    _, client = service_and_client(Refusing(error))
    async with client as http:
        reply = await http.post("/v1/memories", json={"memories": [{"content": "x"}]}, headers=AUTH)
    assert reply.status_code == status, reply.text
    assert ("retry-after" in reply.headers) is (status == 503)
    assert str(error) in reply.json()["detail"]


class OutOfMemory(Hashing):
    def embed(self, texts: Sequence[str]) -> list[tuple[float, ...]]:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 MiB")


async def test_a_device_out_of_memory_or_a_stopping_batcher_is_a_503_not_a_500(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A CUDA out-of-memory while embedding the query, and a recall meeting the batcher stopped
    (the process shutting down), answered 500 "internal error (a bug)"."""
    service, client = service_and_client(Produced())
    monkeypatch.setattr(service, "embedder", OutOfMemory(4))
    async with client as http:
        oom = await http.post("/v1/recall", json={"query": "tea"}, headers=AUTH)
        assert (oom.status_code, oom.headers.get("retry-after")) == (503, "1"), oom.text
        assert "out of memory" in oom.json()["detail"]

        async def stopped(tenant_id: str, query: RecallQuery) -> Recall:
            await service.batcher.submit(None)  # type: ignore[arg-type]
            raise AssertionError

        await service.batcher.start()
        await service.batcher.stop()
        monkeypatch.setattr(service, "_recall", stopped)
        late = await http.post("/v1/recall", json={"query": "tea"}, headers=AUTH)
        assert (late.status_code, late.headers.get("retry-after")) == (503, "1"), late.text
    with pytest.raises(Stopping):
        await service.batcher.submit(None)  # type: ignore[arg-type]


async def test_a_refusal_reading_the_committed_offsets_is_not_retriable() -> None:
    """Read-your-writes under an ACL that refuses the group: a 503 clients retried forever."""
    offsets = KafkaOffsets("unused:1", "group", {"memory-writes": "t.memory-writes"})
    offsets._admin = Admin(GroupAuthorizationFailedError())
    with pytest.raises(Refused, match="GroupAuthorizationFailedError"):
        await offsets.committed()
