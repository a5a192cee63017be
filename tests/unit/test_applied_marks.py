"""A worker's applied marks (``python -m server``): published only once what the batch produced
is flushed, never going back; the ranker's wait ends on them before the worker commits.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pytest

from ranker.applied import AppliedOffsets, NotAppliedError, Token
from streams.applied import AppliedMarks, offset_ranges

pytestmark = pytest.mark.anyio


@dataclass(frozen=True)
class Message:
    partition: int
    offset: int


def deliveries(n: int) -> list[asyncio.Future[Any]]:
    """Deliveries the broker has not acknowledged yet."""
    loop = asyncio.get_running_loop()
    return [loop.create_future() for _ in range(n)]


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_offset_ranges_run_from_the_lowest_to_one_past_the_highest_offset() -> None:
    messages = [Message(0, 4), Message(1, 9), Message(0, 7), Message(0, 5)]
    assert offset_ranges(messages) == {0: (4, 8), 1: (9, 10)}


async def test_a_mark_is_published_only_once_its_records_are_delivered() -> None:
    marks = AppliedMarks()
    first, second = deliveries(2)
    marks.note("memory-writes", {0: (0, 8)}, [first, second])
    await settle()
    first.set_result(Message(0, 1))
    await settle()
    assert marks.snapshot() == {}  # one of the batch's records not yet at the broker
    second.set_result(Message(0, 2))
    await settle()
    assert marks.snapshot() == {("memory-writes", 0): 8}
    marks.note("memory-writes", {0: (8, 9)}, [])
    marks.note("access-events", {2: (0, 5)}, [])
    await settle()
    assert marks.snapshot() == {("memory-writes", 0): 9, ("access-events", 2): 5}
    await marks.stop()


async def test_marks_are_published_in_the_order_noted() -> None:
    marks = AppliedMarks()
    (slow,) = deliveries(1)
    marks.note("access-events", {0: (0, 3)}, [slow])  # holds a record the next batch wrote
    marks.note("memory-writes", {0: (0, 8)}, [])
    await settle()
    assert marks.snapshot() == {}
    slow.set_result(Message(0, 1))
    await settle()
    assert marks.snapshot() == {("access-events", 0): 3, ("memory-writes", 0): 8}


async def test_a_failed_delivery_stops_the_marks() -> None:
    marks = AppliedMarks()
    (failed,) = deliveries(1)
    failed.set_exception(RuntimeError("broker gone"))
    marks.note("memory-writes", {0: (0, 8)}, [failed])
    marks.note("memory-writes", {0: (8, 9)}, [])
    await settle()
    assert marks.snapshot() == {}


async def test_a_gap_in_the_offsets_stops_that_partitions_marks() -> None:
    marks = AppliedMarks()
    marks.note("memory-writes", {0: (0, 8), 1: (0, 4)}, [])
    marks.note("memory-writes", {0: (10, 12), 1: (4, 6)}, [])  # 8 and 9 never came here
    await settle()
    assert marks.snapshot() == {("memory-writes", 0): 8, ("memory-writes", 1): 6}


async def test_a_wait_ends_on_the_local_marks_before_any_commit() -> None:
    async def committed() -> Mapping[tuple[str, int], int]:
        return {}  # the worker has not committed yet

    async def end_offsets(role: str) -> Mapping[int, int]:
        return {0: 8}

    marks = AppliedMarks()
    token = Token({"memory-writes": {0: 7}})
    without = AppliedOffsets(committed, end_offsets, poll_s=0.01, timeout_s=0.1)
    with pytest.raises(NotAppliedError):
        await without.wait(token)
    applied = AppliedOffsets(committed, end_offsets, poll_s=0.01, timeout_s=5.0, local=marks)
    waiting = asyncio.ensure_future(applied.wait(token))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    marks.note("memory-writes", {0: (0, 8)}, [])
    await asyncio.wait_for(waiting, 5.0)


async def test_a_published_mark_wakes_a_waiter_at_once() -> None:
    async def committed() -> Mapping[tuple[str, int], int]:
        return {}

    async def end_offsets(role: str) -> Mapping[int, int]:
        return {}

    marks = AppliedMarks()
    # a poll far beyond the test's patience: only the mark's wake-up can end the wait in time
    applied = AppliedOffsets(committed, end_offsets, poll_s=60.0, timeout_s=120.0, local=marks)
    waiting = asyncio.ensure_future(applied.wait(Token({"access-events": {0: 3}})))
    await settle()
    assert not waiting.done()
    marks.note("access-events", {0: (0, 4)}, [])
    await asyncio.wait_for(waiting, 5.0)


async def test_marks_that_cover_a_token_spare_the_broker_its_ask() -> None:
    asked: list[str] = []

    async def committed() -> Mapping[tuple[str, int], int]:
        asked.append("committed")
        return {}

    async def end_offsets(role: str) -> Mapping[int, int]:
        return {}

    marks = AppliedMarks()
    marks.note("access-events", {0: (0, 4)}, [])
    await settle()
    applied = AppliedOffsets(committed, end_offsets, poll_s=0.01, timeout_s=1.0, local=marks)
    await applied.wait(Token({"access-events": {0: 3}}))
    assert asked == []
    with pytest.raises(NotAppliedError):  # beyond the marks: the commits are asked
        await AppliedOffsets(committed, end_offsets, poll_s=0.01, timeout_s=0.05, local=marks).wait(
            Token({"access-events": {0: 4}})
        )
    assert asked


async def test_local_marks_never_hide_a_higher_commit() -> None:
    async def committed() -> Mapping[tuple[str, int], int]:
        return {("memory-writes", 0): 50, ("memory-writes", 1): 2}

    async def end_offsets(role: str) -> Mapping[int, int]:
        return {}

    marks = AppliedMarks()
    marks.note("memory-writes", {0: (0, 10), 1: (0, 7)}, [])
    await settle()
    applied = AppliedOffsets(committed, end_offsets, poll_s=0.01, timeout_s=0.05, local=marks)
    await applied.wait(Token({"memory-writes": {0: 40, 1: 6}}))  # 0 by the commit, 1 by a mark
    with pytest.raises(NotAppliedError):
        await applied.wait(Token({"memory-writes": {0: 50}}))


@dataclass
class Derived:
    """A local worker with no marks of its own (the commits cover the token) whose batches
    derived ``found``."""

    found: dict[int, int] | None

    def snapshot(self) -> Mapping[tuple[str, int], int]:
        return {}

    def derived(self, role: str, offsets: Mapping[int, int]) -> Mapping[int, int] | None:
        return self.found

    def on_change(self, listener: Callable[[], None]) -> None:
        pass


def delivered(partition: int, offset: int) -> asyncio.Future[Any]:
    future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    future.set_result(Message(partition, offset))  # RecordMetadata's partition and offset
    return future


async def test_the_marks_know_what_each_batch_derived() -> None:
    marks = AppliedMarks()
    marks.note("memory-writes", {0: (0, 5)}, [])  # derived nothing
    derived = [delivered(1, 2), delivered(1, 3)]
    marks.note("memory-writes", {0: (5, 9), 1: (0, 2)}, derived, derived)
    lost: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    lost.cancel()  # a derived record whose delivery is not known
    marks.note("memory-writes", {0: (9, 12)}, [], [lost])
    await settle()
    assert marks.derived("memory-writes", {0: 3}) == {}
    assert marks.derived("memory-writes", {0: 6}) == {1: 3}
    assert marks.derived("memory-writes", {0: 3, 1: 1}) == {1: 3}
    assert marks.derived("memory-writes", {0: 10}) is None  # unknown: wait for everything
    assert marks.derived("memory-writes", {0: 12}) is None  # not applied by this process
    assert marks.derived("memory-writes", {2: 0}) is None


async def test_a_token_waits_for_what_every_earlier_batch_derived() -> None:
    marks = AppliedMarks()
    derived = [delivered(1, 3)]
    marks.note("memory-writes", {0: (0, 5)}, derived, derived)  # wrote A: derived a decision
    marks.note("memory-writes", {0: (5, 9)}, [])  # wrote B: nothing
    await settle()
    # a token of A and B holds only B's offset: A's decision must still be waited for
    assert marks.derived("memory-writes", {0: 6}) == {1: 3}


async def test_a_writes_second_step_skips_writes_made_after_the_first_ask() -> None:
    asked: list[str] = []

    async def committed() -> Mapping[tuple[str, int], int]:
        return {("memory-writes", 0): 8, ("memory-writes", 1): 3}

    async def end_offsets(role: str) -> Mapping[int, int]:
        asked.append(role)  # at the first ask, what an earlier process may have derived
        return {0: 8, 1: 3} if len(asked) == 1 else {0: 50, 1: 50}

    local = Derived({1: 2})
    applied = AppliedOffsets(committed, end_offsets, poll_s=0.01, timeout_s=0.2, local=local)
    await applied.wait(Token({"memory-writes": {0: 7}}))
    await applied.wait(Token({"memory-writes": {0: 7}}))  # writes of others came meanwhile
    assert asked == ["memory-writes"]
    local.found = None
    with pytest.raises(NotAppliedError):  # unknown: everything on the topic now
        await applied.wait(Token({"memory-writes": {0: 7}}))
    assert asked == ["memory-writes", "memory-writes"]


async def test_what_an_earlier_process_derived_is_waited_for() -> None:
    async def committed() -> Mapping[tuple[str, int], int]:
        return {("memory-writes", 0): 8}  # this process replayed the write: derived nothing

    async def end_offsets(role: str) -> Mapping[int, int]:
        return {0: 8, 1: 5}  # the earlier process's decision sits at 1/4, not applied yet

    applied = AppliedOffsets(committed, end_offsets, poll_s=0.01, timeout_s=0.2, local=Derived({}))
    with pytest.raises(NotAppliedError):
        await applied.wait(Token({"memory-writes": {0: 7}}))
