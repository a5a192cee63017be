"""The producer flush Faust runs before each offset commit, made exact.

Faust buffers every table write (the changelog record of a table assignment) in its producer's
``ProducerBuffer`` and hands them to aiokafka one at a time from a sending loop. Before it
commits offsets it calls ``Producer.flush``: the buffer's ``flush``, then aiokafka's. The
buffer's own flush counts sends and returns as soon as no send completes within 0.1 s, with
records still queued, and the commit goes ahead. Measured on ``make up`` during a 10,000-memory
bulk write (docs/benchmarks.md): 4 commits began with 529-1,359 records buffered and went ahead
after 5-506 of them had been sent. A kill -9 in that window loses table writes of events whose
offsets are committed: they are never redelivered, and the tables, the source of truth, miss
them.

:func:`exact_flush` replaces that flush on the worker's buffer: it waits until the broker has
acknowledged every record put into the buffer before the flush began (each record's
``FutureMessage`` resolves on the acknowledgement, ``acks=-1``), and raises when one of them
failed, so that the commit does not happen and the events are redelivered (at-least-once; Faust
crashes the worker the same way when a record attached to an offset cannot be sent). Records
put after the flush began belong to later commits and are not waited for, so a steady flow of
table writes does not hold a commit (Faust's own flush waited for an empty buffer: 27-34 s in
the same bulk write, docs/benchmarks.md). The records a batch emits past the buffer (audit,
dead-letter, derived writes: ``Topic.send``) are tracked the same way (:meth:`ExactFlush.track`):
aiokafka's flush, which the commit also awaits, waits for them but reports no failed one.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from storage import StorageError


class ExactFlush:
    """Tracks the records put into one Faust ``ProducerBuffer`` until the broker acknowledged
    them; :meth:`flush` is the buffer's flush. Built by :func:`exact_flush`.

    Relies on Faust's buffer interface: ``put(FutureMessage)`` (the only way records enter it),
    ``flush()``, ``should_stop``; a non-threaded producer (``producer_threaded`` off, as the
    worker runs it), whose records resolve on this event loop.
    """

    def __init__(
        self,
        buffer: Any,  # noqa: ANN401 - a faust ProducerBuffer
        flushed: Callable[[float, int], None] = lambda _seconds, _records: None,
        prune_at: int = 100_000,
    ) -> None:
        self.buffer = buffer
        self.flushed = flushed  # told each flush's wait (s) and the records it waited for
        self.stock_put = buffer.put
        self.stock_flush = buffer.flush
        # put and not yet known to be acknowledged, in put order (failed ones stay)
        self.unconfirmed: list[asyncio.Future[Any]] = []
        # table writes without a commit after them (none expected) must not grow it forever
        self.prune_at = prune_at

    def put(self, fut: asyncio.Future[Any]) -> None:
        """Buffer ``fut`` (a ``FutureMessage``) as Faust does, and track it."""
        self.stock_put(fut)
        self.track(fut)

    def track(self, fut: asyncio.Future[Any]) -> None:
        """Have the next flush wait for ``fut``, a record's delivery (done on the broker's
        acknowledgement), also one sent past the buffer (``Topic.send``).
        """
        self.unconfirmed.append(fut)
        if len(self.unconfirmed) >= self.prune_at:
            self.unconfirmed = [fut for fut in self.unconfirmed if not _acknowledged(fut)]
            self.prune_at = max(self.prune_at, 2 * len(self.unconfirmed))

    async def flush(self) -> None:
        """Return once every record put before this call is acknowledged by the broker.

        Raises StorageError (retriable) when one of them failed or was cancelled: the offset
        commit that called this must not happen. A buffer that is stopping (its sending loop
        has ended) is flushed by Faust's own flush instead, as before.
        """
        if self.buffer.should_stop:
            await self.stock_flush()
            return
        started = time.perf_counter()
        waiting = list(self.unconfirmed)
        open_ = [fut for fut in waiting if not fut.done()]
        if open_:
            await asyncio.wait(open_)  # unlike gather, a cancelled flush cancels no record
        self.flushed(time.perf_counter() - started, len(open_))
        for fut in waiting:
            _raise_if_failed(fut)
        acknowledged = {id(fut) for fut in waiting}  # a flush running alongside keeps its own
        self.unconfirmed = [fut for fut in self.unconfirmed if id(fut) not in acknowledged]


def exact_flush(
    buffer: Any,  # noqa: ANN401 - a faust ProducerBuffer
    flushed: Callable[[float, int], None] = lambda _seconds, _records: None,
) -> ExactFlush:
    """Replace ``buffer.put`` and ``buffer.flush`` (on the instance: Faust's producer calls
    them there) with those of an :class:`ExactFlush`, which is returned; ``flushed`` is told
    each flush's wait in seconds and how many records it waited for.
    """
    exact = ExactFlush(buffer, flushed)
    buffer.put = exact.put
    buffer.flush = exact.flush
    return exact


def _acknowledged(fut: asyncio.Future[Any]) -> bool:
    return fut.done() and not fut.cancelled() and fut.exception() is None


def _raise_if_failed(fut: asyncio.Future[Any]) -> None:
    if fut.cancelled():
        raise StorageError(
            "commit", "a table write buffered before this commit was cancelled", retriable=True
        )
    error = fut.exception()
    if error is not None:
        raise StorageError(
            "commit",
            f"a table write buffered before this commit was not delivered: {error!r}",
            retriable=True,
        ) from error
