"""An async question whose answer must postdate the call, asked once for many callers.

A compacted log's catch-up needs the topic's end offsets as they are *after* the caller's
change was acknowledged; an answer already on its way may predate it. Asked once per caller, the
asks themselves became a cost under load (one broker request and its encoding per recall with
``after``). :class:`FreshAsk` sends at most one ask at a time: callers that arrive while one is in
flight share the next one, which starts when it ends.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class FreshAsk(Generic[T]):
    """``await fresh()``: the answer of an ``ask()`` started after this call. A failed ask
    reaches every caller sharing it; a cancelled caller does not cancel the ask the others share.
    """

    def __init__(self, ask: Callable[[], Awaitable[T]]) -> None:
        self.ask = ask
        self._in_flight: asyncio.Future[T] | None = None
        self._next: asyncio.Future[T] | None = None  # starts when the one in flight ends

    async def __call__(self) -> T:
        if self._next is None:
            self._next = asyncio.ensure_future(self._after(self._in_flight))
        return await asyncio.shield(self._next)

    async def _after(self, previous: asyncio.Future[T] | None) -> T:
        if previous is not None:
            await asyncio.wait([previous])  # its failure is its callers' to see, not ours
        self._in_flight, self._next = self._next, None  # from now on, later callers queue anew
        try:
            return await self.ask()
        finally:
            if self._in_flight is asyncio.current_task():
                self._in_flight = None
