"""Read-your-writes waits share the worker's committed offsets: Kafka is asked once per poll,
not once per waiting request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import pytest

from ranker.applied import AppliedOffsets, NotAppliedError, Token

pytestmark = pytest.mark.anyio


class Group:
    """A worker group whose committed offset reaches ``applied_after`` on the given ask."""

    def __init__(self, applied_after: int, fail: Exception | None = None) -> None:
        self.asked = 0
        self.applied_after = applied_after
        self.fail = fail

    async def committed(self) -> Mapping[tuple[str, int], int]:
        self.asked += 1
        await asyncio.sleep(0)  # an answer takes a round trip
        if self.fail is not None:
            raise self.fail
        return {("memory-writes", 0): 100 if self.asked >= self.applied_after else 0}

    async def end_offsets(self, role: str) -> Mapping[int, int]:
        return {}


async def test_a_hundred_waiters_share_each_ask() -> None:
    group = Group(applied_after=3)
    applied = AppliedOffsets(group.committed, group.end_offsets, poll_s=0.01, timeout_s=30)
    token = Token({"memory-writes": {0: 42}})
    await asyncio.gather(*(applied.wait(token, derived_role="none") for _ in range(100)))
    # one ask per poll for all of them (three polls until applied), not one per waiter and poll
    assert 3 <= group.asked < 10


async def test_a_failed_ask_reaches_every_waiter_and_the_next_ask_is_fresh() -> None:
    group = Group(applied_after=1, fail=RuntimeError("broker gone"))
    applied = AppliedOffsets(group.committed, group.end_offsets, poll_s=0.01, timeout_s=30)
    token = Token({"memory-writes": {0: 42}})
    results = await asyncio.gather(
        *(applied.wait(token, derived_role="none") for _ in range(5)), return_exceptions=True
    )
    assert [str(r) for r in results] == ["broker gone"] * 5
    assert group.asked == 1
    group.fail = None
    await applied.wait(token, derived_role="none")  # no stale failure kept
    assert group.asked == 2


async def test_a_waiter_never_passes_on_an_older_answer() -> None:
    group = Group(applied_after=10**9)  # never applied
    applied = AppliedOffsets(group.committed, group.end_offsets, poll_s=0.01, timeout_s=0.05)
    with pytest.raises(NotAppliedError):
        await applied.wait(Token({"memory-writes": {0: 42}}), derived_role="none")
