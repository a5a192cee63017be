"""A wake-up shared by every coroutine that waits for something to change.

Waiters that each slept ``poll_s``, or each ran ``wait_for(event.wait(), poll_s)`` (a task and a
timer per waiter and round), cost CPU in proportion to how many were waiting: when a worker fell
behind, the recalls waiting on it took the CPU it needed to catch up. A :class:`Pulse` keeps one
future and one timer per round; a waiter adds only the shield of its own await.
"""

from __future__ import annotations

import asyncio


class Pulse:
    """Rounds that end at :meth:`fire` or after ``every`` seconds, whichever comes first.

    A waiter takes the round (:meth:`next`) *before* looking at what it waits for, then awaits
    it with :meth:`wait`: a change made in between ends that round, so it is never missed. Must
    be used from one event loop.
    """

    def __init__(self, every: float) -> None:
        self.every = every
        self._round: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None

    def next(self) -> asyncio.Future[None]:
        """The current round (started now, with its timer, when none is running)."""
        if self._round is None or self._round.done():
            loop = asyncio.get_running_loop()
            self._round = loop.create_future()
            self._timer = loop.call_later(self.every, _end, self._round)
        return self._round

    def fire(self) -> None:
        """End the current round now: every waiter on it wakes."""
        if self._round is not None:
            _end(self._round)
            self._round = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    @staticmethod
    async def wait(round_: asyncio.Future[None]) -> None:
        """Until ``round_`` ends; cancelling the waiter leaves the round to the others."""
        await asyncio.shield(round_)


def _end(round_: asyncio.Future[None]) -> None:
    if not round_.done():
        round_.set_result(None)
