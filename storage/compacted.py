"""Following a compacted topic: the Kafka half that :class:`~storage.tenant_log.TenantLog` and
:class:`~storage.key_log.KeyLog` share.

A :class:`CompactedLog` reads every partition of its topic from the beginning (no consumer group:
assigned, not subscribed) and keeps following it for the life of the process, handing each record
to :meth:`CompactedLog.apply` and calling :meth:`CompactedLog.refresh` after each fetched batch.
:meth:`CompactedLog.catch_up` waits until every record on the topic now is applied;
:meth:`CompactedLog.publish` produces records (acks=all) and waits until this log has applied them
(read-your-writes for the process that made the change). A broker error while following is logged
and retried; callers see :class:`CompactedLogError` (retriable, with a retry hint) when the topic
cannot be read or written within ``timeout_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from storage.fresh import FreshAsk
from storage.kafka import PRODUCER_BATCH_BYTES, KafkaConnection, permanent
from storage.pulse import Pulse

log = logging.getLogger(__name__)


class CompactedLogError(Exception):
    """The topic could not be read or written in time, or does not exist (retriable), or the
    broker refused it in a way a retry cannot mend (``retriable`` False: an ACL, a size limit).
    """

    what = "compacted topic"

    def __init__(self, reason: str, retry_after_s: float = 1.0, *, retriable: bool = True) -> None:
        self.reason = reason
        self.retry_after_s = retry_after_s
        self.retriable = retriable
        super().__init__(f"{self.what}: {reason}")


class CompactedLog:
    """The constructor does no I/O; :meth:`start` connects and follows the topic in a task of its
    own (waiting for the topic while the worker creates it); :meth:`stop` closes everything.
    Subclasses define :meth:`apply` (one record) and :meth:`refresh` (after a fetched batch), and
    may set ``error`` to their own :class:`CompactedLogError` subclass.
    """

    error: type[CompactedLogError] = CompactedLogError

    def __init__(
        self,
        kafka: KafkaConnection | str,
        topic: str,
        *,
        timeout_s: float = 10.0,
        poll_s: float = 0.05,
    ) -> None:
        self.kafka = KafkaConnection.of(kafka)
        self.topic = topic
        self.timeout_s = timeout_s
        self.poll_s = poll_s
        self._consumer: Any = None
        # end offsets are asked through a client of their own: the follower's connection holds
        # a long-polling fetch (up to 500 ms when nothing is new), and a broker answers one
        # request per connection at a time, so an ask there waited behind it
        self._ends: Any = None
        self._producer: Any = None
        self._advanced = Pulse(poll_s / 2)  # fired after each fetched batch is applied
        # concurrent catch-ups share one end-offsets ask made after they came (made by start())
        self._fresh_ends: FreshAsk[Any] | None = None
        self._task: asyncio.Task[None] | None = None
        self._assigned: list[Any] = []
        self._from: dict[int, int] = {}  # partition -> first offset to read (else the beginning)
        self._lock = asyncio.Lock()
        self._starting = asyncio.Lock()
        self._producing = asyncio.Lock()
        self.applied = 0
        self.offset: int | None = None  # of the record :meth:`apply` is taking (None: not read)

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        """Take one record (a tombstone has ``value`` None)."""
        raise NotImplementedError

    def refresh(self) -> None:
        """Called after each fetched batch has been applied (nothing by default)."""

    def start_from(self, offsets: Mapping[int, int]) -> None:
        """Read these partitions from these offsets instead of the beginning: the caller has
        applied every record before them itself (:meth:`ranker.view.StateView.seed`). Takes
        effect when the topic is next assigned (call it before :meth:`start`).
        """
        self._from = dict(offsets)

    # -- following -----------------------------------------------------------------------------

    async def start(self) -> None:
        from aiokafka import AIOKafkaConsumer  # noqa: PLC0415 - only a serving process needs it

        async with self._starting:  # a catch-up may start it while the owner does
            if self._consumer is not None:
                return
            consumer = AIOKafkaConsumer(
                **self.kafka.client(),
                enable_auto_commit=False,
                group_id=None,
                # an offset out of range (the topic made anew, a log truncated) reads again from
                # the beginning, which a last-value view may always do; aiokafka's default went
                # to the end and skipped what was already there for good, while caught up
                auto_offset_reset="earliest",
            )
            ends = AIOKafkaConsumer(**self.kafka.client(), enable_auto_commit=False, group_id=None)
            try:
                await consumer.start()
                await ends.start()
            except BaseException:
                await consumer.stop()  # stopping a consumer that never started is a no-op
                await ends.stop()
                raise
            self._consumer, self._ends = consumer, ends
            # bound to this client, and each ask bounded: a stop() (a closed client answers
            # nothing) or a stalled broker cannot hold the asks of a later start
            limit = self.timeout_s
            self._fresh_ends = FreshAsk(
                lambda: asyncio.wait_for(ends.end_offsets(self._assigned), limit)
            )
            self._task = asyncio.create_task(self._follow(), name=f"follow-{self.topic}")

    async def stop(self) -> None:
        if self._task is not None:
            await cancelled(self._task)
            self._task = None
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None
        consumer, ends = self._consumer, self._ends
        self._consumer = self._ends = self._fresh_ends = None
        self._assigned = []
        try:
            if consumer is not None:
                await consumer.stop()
        finally:
            if ends is not None:
                await ends.stop()

    async def _assign(self) -> bool:
        """Assign every partition of the topic, from the beginning or where :meth:`start_from`
        says; False while it does not exist.
        """
        from aiokafka import TopicPartition  # noqa: PLC0415

        async with self._lock:
            if self._assigned:
                return True
            consumer = self._consumer
            await consumer._client.force_metadata_update()
            partitions = consumer.partitions_for_topic(self.topic) or set()
            if not partitions:
                return False
            assigned = [TopicPartition(self.topic, p) for p in sorted(partitions)]
            consumer.assign(assigned)
            fresh = [tp for tp in assigned if tp.partition not in self._from]
            if fresh:
                await consumer.seek_to_beginning(*fresh)
            for tp in assigned:
                if tp.partition in self._from:
                    consumer.seek(tp, self._from[tp.partition])
            self._assigned = assigned
            return True

    async def _grow(self, *, refresh: bool = False) -> None:
        """Follow the partitions added to the topic since it was assigned (an operator raised
        its partition count), from the beginning; the others keep their positions. Reads the
        topic's partitions from the client's metadata (refreshed every few minutes), or with
        ``refresh`` from the broker first. Without it a key minted, or a tenant changed, on an
        added partition was never read until a restart (a write sealed under it went to
        dead-letter; publishing one failed).
        """
        from aiokafka import TopicPartition  # noqa: PLC0415

        consumer = self._consumer
        if consumer is None or not self._assigned:
            return
        if refresh:
            await consumer._client.force_metadata_update()
        partitions = consumer.partitions_for_topic(self.topic) or set()
        if partitions <= {tp.partition for tp in self._assigned}:
            return  # the usual case: no lock taken on a catch-up's path
        async with self._lock:
            known = {tp.partition for tp in self._assigned}
            added = [TopicPartition(self.topic, p) for p in sorted(partitions - known)]
            if not added:
                return
            positions = {tp: await consumer.position(tp) for tp in self._assigned}
            assigned = [*self._assigned, *added]
            consumer.assign(assigned)
            for tp, offset in positions.items():
                consumer.seek(tp, offset)
            await consumer.seek_to_beginning(*added)
            self._assigned = assigned
            log.info("%s has %d partitions now: following the new ones", self.topic, len(assigned))

    async def _follow(self) -> None:
        """Apply the topic's records as they come, for the life of the process: a broker error
        is logged and retried after a second, never ending the follow (which would freeze the
        view and make every ``catch_up`` time out).
        """
        while True:
            try:
                await self._follow_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("reading %s failed; retrying in 1 s", self.topic)
                await asyncio.sleep(1.0)

    async def _follow_once(self) -> None:
        while not await self._assign():
            await asyncio.sleep(1.0)
        while True:
            batches = await self._consumer.getmany(
                timeout_ms=int(self.poll_s * 1000), max_records=10_000
            )
            for records in batches.values():
                for record in records:
                    self.offset = record.offset
                    self.apply(record.key, record.value)
            if batches:
                self.refresh()
                self._advanced.fire()  # wakes every _reach

    async def _started(self) -> None:
        """:meth:`start` unless started; a broker it cannot reach raises ``error``."""
        from aiokafka.errors import KafkaError  # noqa: PLC0415

        if self._consumer is not None:
            return
        try:
            await self.start()
        except (KafkaError, OSError) as exc:
            raise self.error(f"cannot reach the broker: {type(exc).__name__}: {exc}") from exc

    async def catch_up(self, timeout_s: float | None = None, *, refresh: bool = False) -> None:
        """Return once every record on the topic now is applied (at once when the topic does
        not exist: there is nothing to read). Raises ``error`` after ``timeout_s``. Partitions
        added to the topic are followed once the client's metadata shows them (``refresh``:
        asked of the broker first; :meth:`_grow`).
        """
        from aiokafka.errors import KafkaError  # noqa: PLC0415

        await self._started()
        deadline = time.monotonic() + (self.timeout_s if timeout_s is None else timeout_s)
        try:
            if not await asyncio.wait_for(self._assign(), _left(deadline)):
                return
            await asyncio.wait_for(self._grow(refresh=refresh), _left(deadline))
            fresh = self._fresh_ends
            if fresh is None:
                raise self.error("stopped")
            ends = await asyncio.wait_for(fresh(), _left(deadline))
        except TimeoutError as exc:
            raise self.error("no answer from the broker", self.poll_s * 20) from exc
        except KafkaError as exc:  # refused (an ACL), or the broker went away
            raise self.error(f"{type(exc).__name__}: {exc}", retriable=not permanent(exc)) from exc
        await self._reach({tp.partition: end for tp, end in ends.items()}, deadline)

    async def exists(self) -> bool:
        """Whether the topic exists (:meth:`catch_up` reads a missing one as empty)."""
        await self._started()
        return await self._assign()

    async def read_through(self) -> None:
        """:meth:`catch_up` (partitions added to the topic asked of the broker), retried every
        second while the topic cannot be read (logged): for a caller that must not go on without
        the topic's records (a batch then waits, unacked).
        """
        while True:
            try:
                await self.catch_up(refresh=True)
                return
            except CompactedLogError as exc:
                log.warning("waiting for %s: %s", self.topic, exc)
                await asyncio.sleep(1.0)

    async def _reach(self, wanted: Mapping[int, int], deadline: float) -> None:
        """Wait until this log's position on each partition is at least ``wanted`` there (a
        partition added to the topic since it was assigned is followed first).
        """
        if not set(wanted) <= {tp.partition for tp in self._assigned}:
            await asyncio.wait_for(self._grow(refresh=True), _left(deadline))
        by_partition = {tp.partition: tp for tp in self._assigned}
        unknown = sorted(set(wanted) - set(by_partition))
        if unknown:
            raise self.error(f"partitions {unknown} of {self.topic} are unknown here")
        while True:
            advanced = self._advanced.next()  # before looking: a batch applied meanwhile ends it
            behind = [
                p
                for p, offset in wanted.items()
                if await self._consumer.position(by_partition[p]) < offset
            ]
            if not behind:
                return
            if time.monotonic() >= deadline:
                msg = f"partitions {behind} not read within {self.timeout_s:g} s"
                raise self.error(msg)
            # the next applied batch, or half a poll (a position can move without records: a
            # transaction marker, a compacted gap)
            await Pulse.wait(advanced)

    # -- writing -------------------------------------------------------------------------------

    async def publish(
        self, records: Sequence[tuple[bytes, bytes | None]], *, applied: bool = True
    ) -> list[int]:
        """Produce ``(key, value)`` records (acks=all; value None: a tombstone) and, with
        ``applied``, wait until this log has applied them (without: the caller applies them to
        its own view, sooner than the next fetch would); their offsets, in order. Raises
        ``error`` when the topic does not exist (the worker creates it: producing would make a
        broker that auto-creates topics create it uncompacted) or does not answer in time.
        """
        from aiokafka import AIOKafkaProducer  # noqa: PLC0415
        from aiokafka.errors import KafkaError  # noqa: PLC0415

        if not records:
            return []
        await self._started()
        deadline = time.monotonic() + self.timeout_s
        if not await self._assign():
            raise self.error(f"{self.topic} does not exist (the stream worker creates it)")
        try:
            async with self._producing:  # concurrent first publishes make one producer
                if self._producer is None:
                    made = AIOKafkaProducer(
                        **self.kafka.client(), acks="all", max_batch_size=PRODUCER_BATCH_BYTES
                    )
                    try:
                        await asyncio.wait_for(made.start(), _left(deadline))
                    except BaseException:
                        await made.stop()
                        raise
                    self._producer = made
            producer = self._producer

            async def deliver() -> list[Any]:
                # send() itself can wait (for metadata while the broker is away): within the deadline
                deliveries = [
                    await producer.send(self.topic, key=key, value=value) for key, value in records
                ]
                return list(await asyncio.gather(*deliveries))

            sent = await asyncio.wait_for(deliver(), _left(deadline))
        except TimeoutError as exc:
            raise self.error(f"not acknowledged within {self.timeout_s:g} s") from exc
        except KafkaError as exc:
            raise self.error(f"{type(exc).__name__}: {exc}", retriable=not permanent(exc)) from exc
        if not applied:
            return [meta.offset for meta in sent]
        wanted: dict[int, int] = {}
        for meta in sent:
            wanted[meta.partition] = max(wanted.get(meta.partition, 0), meta.offset + 1)
        await self._reach(wanted, deadline)
        return [meta.offset for meta in sent]


async def cancelled(task: asyncio.Task[Any]) -> None:
    """Cancel ``task`` and wait until it has ended (its CancelledError swallowed)."""
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def _left(deadline: float) -> float:
    return max(0.001, deadline - time.monotonic())
