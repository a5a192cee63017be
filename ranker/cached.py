"""An async answer kept for a while and asked once at a time: many callers, one call."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Cached(Generic[T]):
    """``ask()``'s answer, kept ``every_s`` seconds; while an ask is in flight every caller
    awaits that one (a caller cancelled meanwhile does not cancel it). A failed ask reaches every
    caller waiting on it and is not kept: the next call asks again.
    """

    def __init__(self, ask: Callable[[], Awaitable[T]], every_s: float) -> None:
        self.ask = ask
        self.every_s = every_s
        self._last: tuple[float, T] | None = None  # (monotonic seconds, answer)
        self._asking: asyncio.Future[T] | None = None

    async def __call__(self) -> T:
        if self._last is not None and time.monotonic() - self._last[0] < self.every_s:
            return self._last[1]
        if self._asking is None:
            self._asking = asyncio.ensure_future(self._ask())
        return await asyncio.shield(self._asking)

    async def _ask(self) -> T:
        try:
            answer = await self.ask()
            self._last = (time.monotonic(), answer)
            return answer
        finally:
            self._asking = None
