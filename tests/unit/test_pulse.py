"""The shared wake-up of waiters (read-your-writes waits, compacted-log catch-ups)."""

from __future__ import annotations

import asyncio

import pytest

from storage.pulse import Pulse

pytestmark = pytest.mark.anyio


async def test_fire_wakes_every_waiter_of_the_round() -> None:
    pulse = Pulse(every=3600.0)  # only fire() can end this round within the test
    beat = pulse.next()
    waiters = [asyncio.ensure_future(Pulse.wait(beat)) for _ in range(3)]
    await asyncio.sleep(0)
    assert not any(w.done() for w in waiters)
    pulse.fire()
    await asyncio.wait_for(asyncio.gather(*waiters), 5.0)
    assert pulse.next() is not beat  # the next round is a new one


async def test_a_round_ends_by_itself_after_every_seconds() -> None:
    pulse = Pulse(every=0.01)
    await asyncio.wait_for(Pulse.wait(pulse.next()), 5.0)


async def test_a_change_between_taking_the_round_and_waiting_is_not_missed() -> None:
    pulse = Pulse(every=3600.0)
    beat = pulse.next()
    pulse.fire()  # after the waiter looked, before it waits
    await asyncio.wait_for(Pulse.wait(beat), 5.0)


async def test_a_cancelled_waiter_leaves_the_round_to_the_others() -> None:
    pulse = Pulse(every=3600.0)
    beat = pulse.next()
    gone = asyncio.ensure_future(Pulse.wait(beat))
    stays = asyncio.ensure_future(Pulse.wait(beat))
    await asyncio.sleep(0)
    gone.cancel()
    await asyncio.sleep(0)
    assert not beat.cancelled()
    pulse.fire()
    await asyncio.wait_for(stays, 5.0)
