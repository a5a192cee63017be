"""A worker's applied marks (``python -m server``): published only once what the batch produced
is flushed, never going back; the ranker's wait ends on them before the worker commits.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass

import pytest

from ranker.applied import AppliedOffsets, NotAppliedError, Token, with_local
from streams.applied import AppliedMarks, next_offsets

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@dataclass(frozen=True)
class Message:
    partition: int
    offset: int


class Producer:
    """A flush that completes when the test says so (or fails)."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.flushes = 0
        self.fail: Exception | None = None

    async def flush(self) -> None:
        self.flushes += 1
        await self.gate.wait()
        if self.fail is not None:
            raise self.fail


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_next_offsets_are_one_past_the_highest_offset_per_partition() -> None:
    messages = [Message(0, 4), Message(1, 9), Message(0, 7), Message(0, 5)]
    assert next_offsets(messages) == {0: 8, 1: 10}


async def test_a_mark_is_published_only_after_the_flush() -> None:
    producer = Producer()
    marks = AppliedMarks()
    marks.bind(producer.flush)
    marks.note("memory-writes", {0: 8})
    await settle()
    assert marks.snapshot() == {}  # produced records not yet at the broker
    producer.gate.set()
    await settle()
    assert marks.snapshot() == {("memory-writes", 0): 8}
    marks.note("memory-writes", {0: 3})  # a lower mark never lowers a published one
    marks.note("access-events", {2: 5})
    await settle()
    assert marks.snapshot() == {("memory-writes", 0): 8, ("access-events", 2): 5}
    await marks.stop()


async def test_a_failed_flush_publishes_nothing_and_later_marks_still_come() -> None:
    producer = Producer()
    producer.fail = RuntimeError("broker gone")
    producer.gate.set()
    marks = AppliedMarks()
    marks.bind(producer.flush)
    marks.note("memory-writes", {0: 8})
    await settle()
    assert marks.snapshot() == {}
    producer.fail = None
    marks.note("memory-writes", {0: 9})
    await settle()
    assert marks.snapshot() == {("memory-writes", 0): 9}


async def test_unbound_marks_publish_nothing() -> None:
    marks = AppliedMarks()
    marks.note("memory-writes", {0: 8})
    await settle()
    assert marks.snapshot() == {}


async def test_a_wait_ends_on_the_local_marks_before_any_commit() -> None:
    async def committed() -> Mapping[tuple[str, int], int]:
        return {}  # the worker has not committed yet

    async def end_offsets(role: str) -> Mapping[int, int]:
        return {0: 8}

    producer = Producer()
    producer.gate.set()
    marks = AppliedMarks()
    marks.bind(producer.flush)
    token = Token({"memory-writes": {0: 7}})
    without = AppliedOffsets(committed, end_offsets, poll_s=0.01, timeout_s=0.1)
    with pytest.raises(NotAppliedError):
        await without.wait(token)
    applied = AppliedOffsets(
        with_local(committed, marks.snapshot), end_offsets, poll_s=0.01, timeout_s=5.0
    )
    waiting = asyncio.ensure_future(applied.wait(token))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    marks.note("memory-writes", {0: 8})
    await asyncio.wait_for(waiting, 5.0)


async def test_local_marks_never_hide_a_higher_commit() -> None:
    async def committed() -> Mapping[tuple[str, int], int]:
        return {("memory-writes", 0): 50, ("memory-writes", 1): 2}

    merged = with_local(committed, lambda: {("memory-writes", 0): 10, ("memory-writes", 1): 7})
    assert await merged() == {("memory-writes", 0): 50, ("memory-writes", 1): 7}
