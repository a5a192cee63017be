"""The ranker's view of every memory's live state, fed from the worker's changelog.

The stream worker's ``memories`` table is the source of truth for what an access changes
(counters, importance, the decay clock, the review card, tier, lifecycle state, validity); its
changelog topic (``<app id>-memories-changelog``, compacted) carries every new value. The view
reads that topic from the beginning and keeps, per tenant, the :data:`storage.rows.LIVE_FIELDS` of
each memory, so recall scores on fresh state while Milvus rows are rewritten only when what they
are searched or filtered by changes (never per access). Replaying the topic rebuilds the view; a
view rebuilt from the topic equals the worker's table (tested).

Memory: a tuple of 14 values per memory (about 0.5 KB).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from storage import MemoryRow, codec
from storage.kafka import KafkaConnection
from storage.rows import live_values, with_live

log = logging.getLogger(__name__)


def changelog_topic(app_id: str) -> str:
    """The changelog topic of the worker's ``memories`` table (Faust names it)."""
    return f"{app_id}-memories-changelog"


class StateView:
    """Live state per tenant and memory. The constructor does no I/O; :meth:`start` connects and
    follows the topic in a task of its own (waiting for the topic while the worker creates it).
    """

    def __init__(self, kafka: KafkaConnection | str, topic: str, *, poll_s: float = 0.05) -> None:
        self.kafka = KafkaConnection.of(kafka)
        self.topic = topic
        self.poll_s = poll_s
        self._live: dict[str, dict[str, tuple[Any, ...]]] = {}
        self._consumer: Any = None
        self._task: asyncio.Task[None] | None = None
        self.applied = 0
        self.listeners: list[Callable[[str, str, Sequence[Any] | None], None]] = []
        """Called, in the event loop, with each memory's new live values (None: deleted)."""

    # -- state -----------------------------------------------------------------------------------

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        """Take one changelog record: a memory's new state, or a tombstone (None) that drops it.
        A record that does not decode is logged and skipped (the worker wrote it; it is not input).
        """
        if key is None:
            return
        tenant_id, _, memory_id = key.decode("utf-8", "replace").partition("/")
        if value is None:
            self._live.get(tenant_id, {}).pop(memory_id, None)
            self._tell(tenant_id, memory_id, None)
            return
        try:
            values = live_values(codec.decode(value))
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("state view: skipped an undecodable value of %r: %s", key, exc)
            return
        self._live.setdefault(tenant_id, {})[memory_id] = values
        self.applied += 1
        self._tell(tenant_id, memory_id, values)

    def _tell(self, tenant_id: str, memory_id: str, values: Sequence[Any] | None) -> None:
        for listener in self.listeners:
            listener(tenant_id, memory_id, values)

    def values(self, tenant_id: str, memory_id: str) -> tuple[Any, ...] | None:
        """One memory's live values (:func:`storage.rows.live_values`), or None."""
        return self._live.get(tenant_id, {}).get(memory_id)

    def overlay(self, row: MemoryRow) -> MemoryRow:
        """``row`` with the live fields the view holds for it (the row as it is when it has none)."""
        values = self._live.get(row.tenant_id, {}).get(row.memory_id)
        return with_live(row, values) if values is not None else row

    def tenant(self, tenant_id: str) -> Mapping[str, tuple[Any, ...]]:
        """The live values of one tenant's memories by id (read-only use)."""
        return self._live.get(tenant_id, {})

    # -- Kafka -----------------------------------------------------------------------------------

    async def start(self) -> None:
        from aiokafka import AIOKafkaConsumer  # noqa: PLC0415 - only a serving process needs it

        self._consumer = AIOKafkaConsumer(
            **self.kafka.client(), enable_auto_commit=False, group_id=None
        )
        await self._consumer.start()
        self._task = asyncio.create_task(self._follow(), name="state-view")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def _follow(self) -> None:
        from aiokafka import TopicPartition  # noqa: PLC0415

        consumer = self._consumer
        partitions: set[int] = set()
        while not partitions:
            await consumer._client.force_metadata_update()  # the worker may not have made it yet
            partitions = consumer.partitions_for_topic(self.topic) or set()
            if not partitions:
                await asyncio.sleep(1.0)
        assigned = [TopicPartition(self.topic, p) for p in sorted(partitions)]
        consumer.assign(assigned)
        await consumer.seek_to_beginning(*assigned)
        while True:
            batches = await consumer.getmany(timeout_ms=int(self.poll_s * 1000), max_records=10_000)
            for records in batches.values():
                for record in records:
                    self.apply(record.key, record.value)

    async def caught_up(self, timeout_s: float) -> bool:
        """Wait until the view has read every record on the topic now (at most ``timeout_s``);
        False when it has not by then.
        """
        deadline = time.monotonic() + timeout_s
        consumer = self._consumer
        while not consumer.assignment():  # still waiting for the topic
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(self.poll_s)
        assigned = sorted(consumer.assignment())
        ends = await consumer.end_offsets(assigned)
        while True:
            behind = [tp for tp in assigned if await consumer.position(tp) < ends[tp]]
            if not behind:
                return True
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(self.poll_s / 2)
