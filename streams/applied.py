"""What this process's worker has applied, known before its next offset commit.

A read-your-writes wait (``ranker.applied.AppliedOffsets``) ends once the worker group has
committed past a token's offsets, and the worker commits every ``MNEMO_COMMIT_INTERVAL_S``: a
recall with ``after`` waited one to two commit intervals (twice: the write, then what it derived).
When the ranker runs in the worker's process (``python -m server``), it can ask the worker itself.

:class:`AppliedMarks` publishes, per (topic role, partition), the next offset not yet applied, but
only once what the batch produced has reached the broker (the changelog the ranker's state view
reads, derived decisions, audit): a mark promises what a commit would, except durability of the
offset itself. A crash before the commit redelivers the batch, and the reducer applies it to the
same result (it skips by offset), while the ranker that saw the mark died with the worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Protocol

log = logging.getLogger(__name__)

Flush = Callable[[], Awaitable[None]]
"""Waits until every message the worker produced so far is acknowledged by the broker."""


class AppliedMarks:
    """Applied offsets of one worker process, ``{(role, partition): next offset not applied}``.

    Constructors do no I/O; :meth:`bind` names the producer's flush (the app's producer exists
    only once the app does). Marks only grow; a failed flush drops the pending marks (logged): a
    waiter then waits for the commit, as without marks.
    """

    def __init__(self) -> None:
        self._flush: Flush | None = None
        self._pending: dict[tuple[str, int], int] = {}
        self._applied: dict[tuple[str, int], int] = {}
        self._task: asyncio.Task[None] | None = None

    def bind(self, flush: Flush) -> None:
        """Use ``flush`` before publishing marks."""
        self._flush = flush

    def note(self, role: str, next_offsets: Mapping[int, int]) -> None:
        """A batch of ``role`` is applied up to ``{partition: next offset}``: publish it once what
        the batch produced is flushed (in the background: the agent does not wait).
        """
        for partition, offset in next_offsets.items():
            key = (role, partition)
            self._pending[key] = max(self._pending.get(key, 0), offset)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._publish())

    def snapshot(self) -> dict[tuple[str, int], int]:
        """The published marks (a copy)."""
        return dict(self._applied)

    async def _publish(self) -> None:
        while self._pending:
            taken, self._pending = self._pending, {}
            if self._flush is None:  # unbound: nothing to promise with
                return
            try:
                await self._flush()
            except Exception as exc:
                log.warning("applied marks not published (waiters use the commit): %s", exc)
                continue
            for key, offset in taken.items():
                self._applied[key] = max(self._applied.get(key, 0), offset)

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


def next_offsets(messages: Iterable[Positioned]) -> dict[int, int]:
    """``{partition: highest offset + 1}`` of ``messages``."""
    found: dict[int, int] = {}
    for message in messages:
        found[message.partition] = max(found.get(message.partition, 0), message.offset + 1)
    return found
