"""What this process's worker has applied, known before its next offset commit.

A read-your-writes wait (``ranker.applied.AppliedOffsets``) ends once the worker group has
committed past a token's offsets, and the worker commits every ``MNEMO_COMMIT_INTERVAL_S``: a
recall with ``after`` waited one to two commit intervals (twice: the write, then what it derived).
When the ranker runs in the worker's process (``python -m server``), it can ask the worker itself.

:class:`AppliedMarks` publishes, per (topic role, partition), the next offset not yet applied, but
only once every record the batch produced is acknowledged by the broker (the changelog the
ranker's state view reads, derived decisions, audit): a mark promises what a commit would, except
durability of the offset itself. A crash before the commit redelivers the batch, and the reducer
applies it to the same result (it skips by offset), while the ranker that saw the mark died with
the worker. Only for a worker alone in its consumer group (``make up``): another worker's batches
are not known here, so their partitions wait for the commit as before.

The wait's second step (what the write derived, e.g. a supersession, is applied too) waited for
everything on ``memory-writes`` when the first step ended, another batch under steady writes; the
marks also keep, per recent batch, the highest ``memory-writes`` offsets derived by it and every
batch before it in this process, so that step waits for those and for what the topic held when
this process started serving (what an earlier process derived), not for other clients' writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

log = logging.getLogger(__name__)


class AppliedMarks:
    """Applied offsets of one worker process, ``{(role, partition): next offset not applied}``,
    and what each recent batch derived on ``memory-writes`` (:meth:`derived`).

    A batch's mark is published once every record it produced (its table changelog, derived
    decisions, audit) is acknowledged by the broker, batches in the order noted. A failed
    delivery stops all marks for the life of the process, and a batch whose first offset lies
    past its partition's mark (offsets this worker never applied) stops that partition's: their
    waiters use the commit, as without marks. Constructors do no I/O.
    """

    def __init__(self, remembered: int = 4096) -> None:
        """``remembered``: batches per (role, partition) whose derived offsets are kept."""
        self.remembered = remembered
        self._pending: deque[_Batch] = deque()
        self._applied: dict[tuple[str, int], int] = {}
        self._stopped: set[tuple[str, int]] = set()
        self._failed = False
        # highest memory-writes offset derived by every batch recorded so far (None: unknown)
        self._running: dict[int, int] | None = {}
        self._batches: dict[tuple[str, int], deque[tuple[int, int, dict[int, int] | None]]] = {}
        self._task: asyncio.Task[None] | None = None
        self._listeners: list[Callable[[], None]] = []

    def note(
        self,
        role: str,
        ranges: Mapping[int, tuple[int, int]],
        produced: Sequence[Awaitable[Any]],
        derived: Sequence[Awaitable[Any]] = (),
    ) -> None:
        """A batch of ``role`` is applied: ``{partition: (first offset, next offset)}``;
        ``produced``: the deliveries of every record it produced (futures); ``derived``: those
        of its records to ``memory-writes`` (futures of ``RecordMetadata``). Published in the
        background once they are all delivered: the agent does not wait.
        """
        if self._failed:
            return
        self._pending.append(_Batch(role, dict(ranges), tuple(produced), tuple(derived)))
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._publish())

    def snapshot(self) -> dict[tuple[str, int], int]:
        """The published marks (a copy)."""
        return dict(self._applied)

    def on_change(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` (no arguments, must not raise) each time a batch's marks are
        published; never after the marks stopped.
        """
        self._listeners.append(listener)

    def derived(self, role: str, offsets: Mapping[int, int]) -> dict[int, int] | None:
        """``{partition: highest offset}`` of the ``memory-writes`` records this process's
        batches produced up to the one that applied each of ``offsets`` (``{partition: offset}``
        of ``role``; a token holds only the highest offset of each partition, its earlier records
        lie in earlier batches). None when such a batch is not known here (applied by an earlier
        process, forgotten, or a delivery unknown). What an earlier process derived is not in it:
        the caller adds what ``memory-writes`` held when this process started serving.
        """
        found: dict[int, int] = {}
        for partition, offset in offsets.items():
            for first, after, running in reversed(self._batches.get((role, partition), ())):
                if first <= offset < after:
                    if running is None:
                        return None
                    for p, o in running.items():
                        found[p] = max(found.get(p, -1), o)
                    break
            else:
                return None
        return found

    async def _publish(self) -> None:
        while self._pending:
            batch = self._pending.popleft()
            deliveries = [asyncio.ensure_future(d) for d in batch.produced]
            if deliveries:  # wait, not gather: a cancelled wait must not cancel the deliveries
                await asyncio.wait(deliveries)
            failed = [d for d in deliveries if d.cancelled() or d.exception() is not None]
            if failed:
                log.warning("applied marks stopped (waiters use the commit): %s", failed[0])
                self._failed = True
            if not self._failed:
                self._record(batch)

    def _record(self, batch: _Batch) -> None:
        derived = batch.delivered()
        if derived is None or self._running is None:
            self._running = None
        else:
            for p, o in derived.items():
                self._running[p] = max(self._running.get(p, -1), o)
        running = None if self._running is None else dict(self._running)
        for partition, (first, after) in batch.ranges.items():
            key = (batch.role, partition)
            mark = self._applied.get(key)
            if mark is not None and first > mark:
                log.warning(
                    "applied marks stopped on %s %d: offsets %d-%d not seen", *key, mark, first
                )
                self._stopped.add(key)
            if key in self._stopped:
                continue
            kept = self._batches.setdefault(key, deque(maxlen=self.remembered))
            kept.append((first, after, running))
            self._applied[key] = max(mark or 0, after)
        for listener in self._listeners:
            listener()

    async def stop(self) -> None:
        """Cancel a publication in progress."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


class Positioned(Protocol):
    """A consumed message's place: a Faust message, our ``Inbound``."""

    @property
    def partition(self) -> int: ...

    @property
    def offset(self) -> int: ...


def offset_ranges(messages: Iterable[Positioned]) -> dict[int, tuple[int, int]]:
    """``{partition: (lowest offset, highest offset + 1)}`` of ``messages``."""
    found: dict[int, tuple[int, int]] = {}
    for message in messages:
        first, after = found.get(message.partition, (message.offset, message.offset + 1))
        found[message.partition] = (min(first, message.offset), max(after, message.offset + 1))
    return found


@dataclass(frozen=True)
class _Batch:
    role: str
    ranges: dict[int, tuple[int, int]]
    produced: tuple[Awaitable[Any], ...]
    derived: tuple[Awaitable[Any], ...]

    def delivered(self) -> dict[int, int] | None:
        """``{partition: highest offset}`` of the derived deliveries; None when one is unknown."""
        found: dict[int, int] = {}
        for delivery in self.derived:
            if not isinstance(delivery, asyncio.Future) or not delivery.done():
                return None
            if delivery.cancelled() or delivery.exception() is not None:
                return None
            meta = delivery.result()
            found[meta.partition] = max(found.get(meta.partition, -1), meta.offset)
        return found
