"""A size-or-timeout micro-batcher over a bounded queue.

``submit(item)`` waits for the item's result. A background task takes the first waiting item, then
more until ``max_batch`` items or ``max_wait_s`` after the first, and runs ``handler`` on the whole
batch (one torch pass for many requests, of any tenants). When ``max_queue`` items are waiting,
``submit`` raises :class:`Overloaded` at once with a retry hint (the HTTP layer answers 429).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from ranker.errors import Unavailable
from storage.compacted import cancelled

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")


class Stopping(Unavailable):
    """The batcher stopped (the process is shutting down) before it answered: retriable, on
    another replica or after the restart (HTTP 503 with Retry-After, not a 500).
    """

    def __init__(self) -> None:
        super().__init__("ranker", "batch", "batcher stopped: the process is shutting down")


class Overloaded(Exception):  # noqa: N818 - the condition, as callers catch it
    """The queue is full. ``retry_after_s``: a hint, about one batch's worth of waiting."""

    retriable = True

    def __init__(self, queued: int, retry_after_s: float) -> None:
        self.queued = queued
        self.retry_after_s = retry_after_s
        super().__init__(f"{queued} requests queued; retry after {retry_after_s:.2f} s")


@dataclass(frozen=True)
class BatchStats:
    """What the last batch looked like (for metrics): its size and the queue depth left."""

    size: int
    queued: int


class Batcher(Generic[T, R]):
    """Batches ``submit`` calls into ``handler`` calls. ``start`` launches the loop; ``stop`` ends it
    (waiting callers, and any ``submit`` after it, get :class:`Stopping`). Nothing a handler or
    ``on_batch`` does ends the loop.
    """

    def __init__(
        self,
        handler: Callable[[Sequence[T]], Awaitable[Sequence[R]]],
        *,
        max_batch: int = 64,
        max_wait_s: float = 0.002,
        max_queue: int = 1024,
        on_batch: Callable[[BatchStats], None] | None = None,
    ) -> None:
        if max_batch < 1 or max_queue < 1 or max_wait_s < 0:
            msg = f"max_batch={max_batch}, max_queue={max_queue}, max_wait_s={max_wait_s}: invalid"
            raise ValueError(msg)
        self.handler = handler
        self.max_batch = max_batch
        self.max_wait_s = max_wait_s
        self.max_queue = max_queue
        self.on_batch = on_batch
        self._queue: asyncio.Queue[tuple[T, asyncio.Future[R]]] | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopped = False
        self._last_batch_s = max_wait_s

    @property
    def queued(self) -> int:
        return self._queue.qsize() if self._queue is not None else 0

    @property
    def running(self) -> bool:
        """True between start() and stop() while the batching task is alive."""
        return self._task is not None and not self._task.done()

    async def start(self) -> None:
        self._stopped = False
        self._queue = asyncio.Queue(self.max_queue)
        self._task = asyncio.create_task(self._run(), name="batcher")

    async def stop(self) -> None:
        self._stopped = True
        if self._task is not None:
            await cancelled(self._task)
            self._task = None
        while self._queue is not None and not self._queue.empty():
            _, future = self._queue.get_nowait()
            if not future.done():
                future.set_exception(Stopping())

    async def submit(self, item: T) -> R:
        """The item's result; raises Overloaded when the queue is full, or the handler's error."""
        if self._queue is None:
            msg = "Batcher.submit before start()"
            raise RuntimeError(msg)
        if self._stopped or not self.running:
            raise Stopping
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        try:
            self._queue.put_nowait((item, future))
        except asyncio.QueueFull:
            raise Overloaded(self.max_queue, max(self._last_batch_s, 0.001)) from None
        return await future

    async def _run(self) -> None:
        assert self._queue is not None
        loop = asyncio.get_running_loop()
        while True:
            batch: list[tuple[T, asyncio.Future[R]]] = []
            try:
                await self._take(batch)
                started = loop.time()
                outcome = await self._handle([item for item, _ in batch])
            except asyncio.CancelledError:  # stop(): the batch taken is answered too
                _settle(batch, Stopping())
                raise
            _settle(batch, outcome)
            self._last_batch_s = loop.time() - started + self.max_wait_s
            if self.on_batch is not None:
                try:
                    self.on_batch(BatchStats(len(batch), self._queue.qsize()))
                except Exception:  # a metrics hook must not end the loop
                    log.exception("batcher: on_batch failed")
            # a handler that never suspends (the kernel on the loop) and a queue never empty
            # would otherwise hold the loop batch after batch
            await asyncio.sleep(0)

    async def _handle(self, items: list[T]) -> Sequence[R] | Exception:
        """The handler's results for ``items``, or the error every caller of the batch gets."""
        try:
            results = await self.handler(items)
            if len(results) != len(items):
                msg = f"handler returned {len(results)} results for {len(items)} items"
                return RuntimeError(msg)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # stop()
            return RuntimeError("the batch's handler was cancelled")
        except Exception as exc:
            return exc
        return results

    async def _take(self, batch: list[tuple[T, asyncio.Future[R]]]) -> None:
        """Fill ``batch`` (empty; filled in place, so that a stop answers what it holds): the
        first waiting item, then what is waiting already (taken with no timer each), then what
        comes until ``max_batch`` items or ``max_wait_s`` after the first.
        """
        assert self._queue is not None
        loop = asyncio.get_running_loop()
        batch.append(await self._queue.get())
        deadline = loop.time() + self.max_wait_s
        while len(batch) < self.max_batch:
            if not self._queue.empty():
                batch.append(self._queue.get_nowait())
                continue
            if deadline - loop.time() <= 0:
                break
            try:
                # not wait_for: on 3.11 it can return an item and drop a stop()'s cancel
                async with asyncio.timeout_at(deadline):
                    batch.append(await self._queue.get())
            except TimeoutError:
                break


def _settle(batch: Sequence[tuple[T, asyncio.Future[R]]], outcome: Sequence[R] | Exception) -> None:
    """Answer each caller of ``batch`` not answered yet: its result, or the batch's error."""
    for i, (_, future) in enumerate(batch):
        if future.done():
            continue
        if isinstance(outcome, Exception):
            future.set_exception(outcome)
        else:
            future.set_result(outcome[i])
