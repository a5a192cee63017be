"""FreshAsk: every answer postdates its caller's call; concurrent callers share asks."""

from __future__ import annotations

import asyncio

import pytest

from storage.fresh import FreshAsk

pytestmark = pytest.mark.anyio


class Counter:
    """An ask that returns the value at the moment it is *sent*, released by the test."""

    def __init__(self) -> None:
        self.value = 0
        self.asks = 0
        self.release = asyncio.Event()
        self.fail: Exception | None = None

    async def ask(self) -> int:
        self.asks += 1
        seen = self.value
        await self.release.wait()
        if self.fail is not None:
            raise self.fail
        return seen


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_caller_never_gets_an_answer_asked_before_it_came() -> None:
    counter = Counter()
    fresh = FreshAsk(counter.ask)
    first = asyncio.ensure_future(fresh())
    await settle()  # the first ask is in flight, having seen 0
    counter.value = 1  # the change the second caller wants to see
    second = asyncio.ensure_future(fresh())
    await settle()
    counter.release.set()
    assert await first == 0
    assert await second == 1


async def test_callers_during_one_ask_share_the_next() -> None:
    counter = Counter()
    fresh = FreshAsk(counter.ask)
    first = asyncio.ensure_future(fresh())
    await settle()
    waiting = [asyncio.ensure_future(fresh()) for _ in range(10)]
    await settle()
    counter.release.set()
    await asyncio.gather(first, *waiting)
    assert counter.asks == 2


async def test_a_failure_reaches_its_sharers_and_the_next_call_asks_again() -> None:
    counter = Counter()
    counter.fail = RuntimeError("broker away")
    fresh = FreshAsk(counter.ask)
    callers = [asyncio.ensure_future(fresh()) for _ in range(3)]
    await settle()
    counter.release.set()
    results = await asyncio.gather(*callers, return_exceptions=True)
    assert all(isinstance(r, RuntimeError) for r in results)
    counter.fail = None
    counter.value = 7
    assert await fresh() == 7
    assert counter.asks == 2


async def test_a_cancelled_caller_leaves_the_ask_to_the_others() -> None:
    counter = Counter()
    fresh = FreshAsk(counter.ask)
    gone = asyncio.ensure_future(fresh())
    stays = asyncio.ensure_future(fresh())
    await settle()
    gone.cancel()
    await settle()
    counter.release.set()
    assert await stays == 0
