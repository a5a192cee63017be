"""The ranker's view of every memory's live state, fed from the worker's changelog.

The stream worker's ``memories`` table is the source of truth for what an access changes
(counters, importance, the decay clock, the review card, tier, lifecycle state, validity); its
changelog topic (``<app id>-memories-changelog``, compacted) carries every new value. The view
reads that topic from the beginning (or from where a read of it that it is handed stopped,
:meth:`StateView.seed`) and keeps, per tenant, the :data:`storage.rows.LIVE_FIELDS` of
each memory, so recall scores on fresh state while Milvus rows are rewritten only when what they
are searched or filtered by changes (never per access). Replaying the topic rebuilds the view; a
view rebuilt from the topic equals the worker's table (tested).

Memory: a tuple of 14 values per memory (about 0.5 KB); the id, purge time and write count
alone of the last :data:`PURGED_MARKS` purged ones (about 0.41 KB each): a purged memory's row
may outlive its purge in Milvus until the worker deletes it, and must not be judged on its own
stale values meanwhile.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from storage import MemoryRow, codec
from storage.compacted import CompactedLog, CompactedLogError, cancelled
from storage.kafka import KafkaConnection
from storage.rows import with_live

log = logging.getLogger(__name__)

PURGED_MARKS = 100_000
"""Purged memories whose ids the view keeps: the latest purged (by the time of the purge, not the
order the view reads them in), ~41 MB (measured, 32-character ids). The worker deletes a purged
memory's row in the batch that purged it; a row outlives that only while the worker is down or
Milvus refuses its writes, and then no later purge reaches the topic either: the marks at risk
are always the latest."""


class StateView(CompactedLog):
    """Live state per tenant and memory. The constructor does no I/O; :meth:`start` connects and
    follows the topic in a task of its own (waiting for the topic while the worker creates it).
    """

    def __init__(self, kafka: KafkaConnection | str, topic: str, *, poll_s: float = 0.05) -> None:
        super().__init__(kafka, topic, poll_s=poll_s)
        self._live: dict[str, dict[str, tuple[Any, ...]]] = {}
        self._purged: dict[tuple[str, str], codec.Purged] = {}  # by (tenant, memory)
        self._by_purge: list[tuple[int, str, str]] = []  # a heap of its entries, earliest first
        # tenant -> how many times its set of ids changed, and its ids sorted at one of those
        # (:meth:`sorted_ids`: a listing's pages share it while no memory comes or goes)
        self._members: dict[str, int] = {}
        self._sorted: dict[str, tuple[int, list[str]]] = {}
        self.listeners: list[Callable[[str, str, Sequence[Any] | None], None]] = []
        """Called, in the event loop, with each memory's new live values (None: deleted); one
        that raises is logged and the others, and the records after, still apply."""
        self._settling: asyncio.Task[None] | None = None
        self.settled = asyncio.Event()
        """Set once the view has read every record the topic held when :meth:`settle` began
        (``GET /readyz`` waits for it: before, recall and listing would answer older states)."""

    # -- state -----------------------------------------------------------------------------------

    def apply(self, key: bytes | None, value: bytes | None, *, tell: bool = True) -> None:
        """Take one changelog record: a memory's new state, or a tombstone (None) that drops it.
        A purged memory's state (:func:`storage.codec.decode_served`) leaves the tenant's
        memories too (held whole, every memory ever erased or purged stayed in every ranker's
        memory), but its id is kept: :meth:`values` answers :data:`storage.codec.PURGED` for it,
        so a row Milvus still holds of it (the worker's delete not synced yet: a crash, Milvus
        refusing writes) is judged deleted, not on its own stale values. ``tell``: hand it to
        the listeners. A record that does not decode is logged and skipped (the worker wrote
        it; it is not input).
        """
        if key is None:
            return
        tenant_id, _, memory_id = key.decode("utf-8", "replace").partition("/")
        try:
            decoded = codec.decode_served(value) if value is not None else None
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("state view: skipped an undecodable value of %r: %s", key, exc)
            return
        purged = decoded if isinstance(decoded, codec.Purged) else None
        self._mark_purged(tenant_id, memory_id, purged)
        values = None if purged is not None else decoded
        if values is None:
            held = self._live.get(tenant_id)
            if held is not None and held.pop(memory_id, None) is not None:
                self._came_or_went(tenant_id)
                if not held:
                    del self._live[tenant_id]
            if tell:
                self._tell(tenant_id, memory_id, None)
            return
        held = self._live.setdefault(tenant_id, {})
        if memory_id not in held:
            self._came_or_went(tenant_id)
        held[memory_id] = values
        self.applied += 1
        if tell:
            self._tell(tenant_id, memory_id, values)

    def _mark_purged(self, tenant_id: str, memory_id: str, purged: codec.Purged | None) -> None:
        """Keep the memory as ``purged``, or (None: written again, its key compacted away) no
        longer; over :data:`PURGED_MARKS`, the earliest purged go first, whatever the order the
        records come in (a replay reads partitions apart, a seed in the order keys were first
        written).
        """
        key = (tenant_id, memory_id)
        if purged is None:
            self._purged.pop(key, None)
            return
        self._purged[key] = purged
        heapq.heappush(self._by_purge, (purged.at_us, tenant_id, memory_id))
        while len(self._purged) > PURGED_MARKS:
            at, t, m = heapq.heappop(self._by_purge)
            kept = self._purged.get((t, m))
            if kept is not None and kept.at_us == at:  # else left by a later change of it
                del self._purged[(t, m)]
        if len(self._by_purge) > 2 * PURGED_MARKS:  # entries left by later changes: dropped
            self._by_purge = [(p.at_us, t, m) for (t, m), p in self._purged.items()]
            heapq.heapify(self._by_purge)

    def seed(self, latest: Mapping[bytes, bytes], ends: Mapping[int, int]) -> None:
        """Hold ``latest`` (each key's last value on the topic, read up to ``ends``: partition ->
        the offset after the last record read) and follow the topic from ``ends`` instead of
        replaying it: ``python -m server`` hands over the changelog its start-up resync read, so
        the view starts with the newest values (a replay from the beginning passes older values
        first) and reads nothing twice. Listeners are not told. Call before :meth:`start`.
        """
        for key, value in latest.items():
            self.apply(key, value, tell=False)
        self.start_from(ends)

    def _tell(self, tenant_id: str, memory_id: str, values: Sequence[Any] | None) -> None:
        for listener in self.listeners:
            try:
                listener(tenant_id, memory_id, values)
            except Exception:  # the record is applied; the follower must not lose the rest
                log.exception("state view: a listener failed on %s/%s", tenant_id, memory_id)

    def values(self, tenant_id: str, memory_id: str) -> tuple[Any, ...] | None:
        """One memory's live values (:func:`storage.rows.live_values`), :data:`codec.PURGED`
        for a purged one, or None for one the view has not heard of.
        """
        found = self._live.get(tenant_id, {}).get(memory_id)
        return codec.PURGED if found is None and self.purged(tenant_id, memory_id) else found

    def purged_writes(self, tenant_id: str, memory_id: str) -> int | None:
        """A purged memory's writes until its purge (:class:`storage.codec.Purged`), or None
        for one not purged (among the last :data:`PURGED_MARKS`; a memory is marked or held,
        never both: :meth:`apply`).
        """
        kept = self._purged.get((tenant_id, memory_id))
        return None if kept is None else kept.write_count

    def purged(self, tenant_id: str, memory_id: str) -> bool:
        """The memory is purged (among the last :data:`PURGED_MARKS`): a row Milvus still holds
        of it is not to be served, read by id included.
        """
        return (tenant_id, memory_id) in self._purged

    def overlay(self, row: MemoryRow) -> MemoryRow:
        """``row`` with the live fields the view holds for it (the row as it is when it has none)."""
        values = self.values(row.tenant_id, row.memory_id)
        return with_live(row, values) if values is not None else row

    def tenant(self, tenant_id: str) -> Mapping[str, tuple[Any, ...]]:
        """The live values of one tenant's memories by id (read-only use)."""
        return self._live.get(tenant_id, {})

    async def sorted_ids(self, tenant_id: str) -> Sequence[str]:
        """One tenant's memory ids in order (read-only use), sorted off the event loop once
        for as long as no memory of the tenant comes or goes: each page of a listing sorted
        the whole tenant again (1.5 s of CPU a page at 1M memories, holding the GIL).
        """
        members = self._members.get(tenant_id, 0)
        cached = self._sorted.get(tenant_id)
        if cached is not None and cached[0] == members:
            return cached[1]
        ids = await asyncio.to_thread(sorted, list(self._live.get(tenant_id, {})))
        if self._members.get(tenant_id, 0) == members:  # none came or went meanwhile
            self._sorted[tenant_id] = (members, ids)
        return ids

    def _came_or_went(self, tenant_id: str) -> None:
        self._members[tenant_id] = self._members.get(tenant_id, 0) + 1
        self._sorted.pop(tenant_id, None)

    async def start(self) -> None:
        """Connect and follow the topic (:meth:`CompactedLog.start`), and :meth:`settle` in a
        task of its own.
        """
        await super().start()
        if self._settling is None:
            self._settling = asyncio.create_task(self.settle(), name="state-view-settle")

    async def stop(self) -> None:
        if self._settling is not None:
            await cancelled(self._settling)
            self._settling = None
        await super().stop()

    async def settle(self, attempt_s: float = 10.0) -> None:
        """Wait until the view has read every record the topic holds (each wait at most
        ``attempt_s``, then again), then set :attr:`settled`. Run once at start-up, in a task.
        """
        while not await self.caught_up(attempt_s):
            log.info("state view: still reading %s", self.topic)
        self.settled.set()

    async def caught_up(self, timeout_s: float) -> bool:
        """Wait until the view has read every record on the topic now (at most ``timeout_s``);
        False when it has not by then. A topic that does not exist yet has nothing to read.
        """
        try:
            await self.catch_up(timeout_s)
        except CompactedLogError:
            return False
        return True
