"""Kafka faults at the ranker's adapter boundary become our own retriable errors."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka.errors import GroupCoordinatorNotAvailableError, KafkaTimeoutError, UnknownError

from ranker.applied import AppliedOffsets, KafkaOffsets, NotAppliedError, Token
from ranker.errors import Unavailable
from ranker.producer import EventProducer

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
