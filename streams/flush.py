"""The producer flush Faust runs before each offset commit, made exact.

Faust buffers every table write (the changelog record of a table assignment) in its producer's
``ProducerBuffer`` and hands them to aiokafka one at a time from a sending loop. Before it
commits offsets it calls ``Producer.flush``: the buffer's flush, then aiokafka's. The buffer's
flush counts sends and returns as soon as no send completes within 0.1 s, with records still
queued, and the commit goes ahead. Measured on ``make up`` during a 10,000-memory bulk write
(docs/benchmarks.md): 4 commits began with 529-1,359 records buffered and went ahead after 5-506
of them had been sent. A kill -9 in that window loses table writes of events whose offsets are
committed: they are never redelivered, and the tables, the source of truth, miss them.

:func:`exact_flush` replaces the producer's flush (what the consumer awaits before it commits,
what a rebalance and the app's stop await) with :meth:`ExactFlush.flush`: it waits until the
broker has acknowledged every record put into the buffer before the flush began (each record's
``FutureMessage`` resolves on the acknowledgement, ``acks=-1``), and every record the worker
emitted past the buffer (audit, dead-letter, derived writes: ``Topic.send``,
:meth:`ExactFlush.track`). It raises instead, so that the commit does not happen, when one of
them failed, or when the producer stopped or crashed with some still unacknowledged (its
sending loop has ended: they never will be). The worker then crashes, as Faust crashes it when a
record attached to an offset cannot be sent, and its events are redelivered (at-least-once).
Records put after the flush began belong to later commits and do not hold it: a steady flow of
table writes no longer holds a commit (Faust's flush waited for an empty buffer: 27-34 s in the
same bulk write). The buffer's own flush, which it runs when it stops, stays Faust's.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from storage import StorageError

#: How often a waiting flush looks whether the producer stopped or crashed (s).
POLL_S = 0.5


class ExactFlush:
    """Tracks the records put into one Faust producer until the broker acknowledged them;
    :meth:`flush` is the producer's flush. Built by :func:`exact_flush`.

    Relies on Faust's interfaces: ``ProducerBuffer.put(FutureMessage)`` (the only way records
    enter the buffer), ``should_stop`` of the buffer; records that resolve on this event loop
    (a producer that is not threaded).
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
        """Return once every record tracked before this call is acknowledged by the broker.

        Raises StorageError (retriable) when one of them failed or was cancelled, or when the
        producer's buffer stops or crashes while some are unacknowledged: the offset commit that
        called this must not happen. A failed record stays tracked, so every later flush raises
        too. No time limit of its own: a broker that does not answer holds it as long as the
        producer's request timeout (Faust's ``producer_request_timeout``).
        """
        started = time.perf_counter()
        waiting = list(self.unconfirmed)
        open_ = [fut for fut in waiting if not fut.done()]
        waited = len(open_)
        while True:
            for fut in waiting:
                if fut.done():
                    _raise_if_failed(fut)
            open_ = [fut for fut in open_ if not fut.done()]
            if not open_:
                break
            if self.buffer.should_stop:
                raise StorageError(
                    "commit",
                    f"the producer stopped with {len(open_)} records buffered before this commit"
                    " not acknowledged",
                    retriable=True,
                )
            # unlike gather, a cancelled flush cancels no record
            await asyncio.wait(open_, timeout=POLL_S)
        self.flushed(time.perf_counter() - started, waited)
        acknowledged = {id(fut) for fut in waiting}  # a flush running alongside keeps its own
        self.unconfirmed = [fut for fut in self.unconfirmed if id(fut) not in acknowledged]


def exact_flush(
    app: Any,  # noqa: ANN401 - a faust.App
    flushed: Callable[[float, int], None] = lambda _seconds, _records: None,
) -> ExactFlush:
    """Track what ``app``'s producer buffers and make its flush an :class:`ExactFlush`'s; call
    it before the app starts (creating the producer does no I/O). ``flushed`` is told each
    flush's wait in seconds and how many records it waited for.

    Raises ValueError for a setting under which records would never resolve here:
    ``producer_threaded`` (they resolve on another loop) or ``stream_publish_on_commit``
    (records attached to an offset are sent only when it commits).
    """
    for setting in ("producer_threaded", "stream_publish_on_commit"):
        if getattr(app.conf, setting):
            raise ValueError(f"{setting}: must be off for the worker's commit flush, not on")
    producer = app.producer
    exact = ExactFlush(producer.buffer, flushed)
    producer.buffer.put = exact.put
    producer.flush = exact.flush
    return exact


def _acknowledged(fut: asyncio.Future[Any]) -> bool:
    return fut.done() and not fut.cancelled() and fut.exception() is None


def _raise_if_failed(fut: asyncio.Future[Any]) -> None:
    if fut.cancelled():
        raise StorageError(
            "commit", "a record produced before this commit was cancelled", retriable=True
        )
    error = fut.exception()
    if error is not None:
        raise StorageError(
            "commit",
            f"a record produced before this commit was not delivered: {error!r}",
            retriable=True,
        ) from error
