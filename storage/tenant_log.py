"""The live tenant registry: the ``tenants`` topic (compacted, keyed by tenant id) over the
file's or the environment's tenants.

:class:`TenantLog` reads the topic from the beginning (no consumer group: every partition,
assigned) and keeps following it, so a tenant created, changed or deleted there is known to every
process without a restart. It reads like a :class:`~storage.tenants.TenantRegistry` (``get``,
``by_api_key``, ``tenants``: always the latest view). :meth:`TenantLog.catch_up` waits until
every record on the topic now is applied; :meth:`TenantLog.publish` produces a record (acks=all)
and waits until this log has applied it (read-your-writes for the admin who made the change).

A record sets the whole tenant (``storage.tenants.tenant_record``); ``deleted`` removes it, the
file's tenant of that id included; a tombstone (null value) forgets the topic's record, so a
tenant the file defines shows through again. A record that does not decode is logged and skipped:
writers validate before they produce.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from memcore import InvalidField
from storage.kafka import KafkaConnection
from storage.tenants import Tenant, TenantRegistry, decode_tenant_record, tenant_record

log = logging.getLogger(__name__)

ROLE = "tenants"
"""The topic's role (its name is the topic prefix and this)."""


class TenantLogError(Exception):
    """The tenants topic could not be read or written in time, or does not exist; retriable."""

    retriable = True

    def __init__(self, reason: str, retry_after_s: float = 1.0) -> None:
        self.reason = reason
        self.retry_after_s = retry_after_s
        super().__init__(f"tenants topic: {reason}")


class TenantLog:
    """``base`` (the file's or the environment's tenants) with the topic's records over it.

    The constructor does no I/O; :meth:`start` connects and follows the topic in a task of its own
    (waiting for the topic while the worker creates it); :meth:`stop` closes everything.
    ``timeout_s`` bounds :meth:`catch_up` and :meth:`publish`.
    """

    def __init__(
        self,
        kafka: KafkaConnection | str,
        topic: str,
        base: TenantRegistry,
        *,
        timeout_s: float = 10.0,
        poll_s: float = 0.05,
    ) -> None:
        self.kafka = KafkaConnection.of(kafka)
        self.topic = topic
        self.base = base
        self.timeout_s = timeout_s
        self.poll_s = poll_s
        self._records: dict[str, Tenant | None] = {}
        self._view = base
        self._consumer: Any = None
        self._producer: Any = None
        self._task: asyncio.Task[None] | None = None
        self._assigned: list[Any] = []
        self._lock = asyncio.Lock()
        self._writing = asyncio.Lock()
        self._starting = asyncio.Lock()
        self.applied = 0

    # -- the registry ------------------------------------------------------------------------

    @property
    def view(self) -> TenantRegistry:
        """The tenants now (a snapshot: later records make a new one)."""
        return self._view

    @property
    def tenants(self) -> Mapping[str, Tenant]:
        return self._view.tenants

    def get(self, tenant_id: str) -> Tenant | None:
        return self._view.get(tenant_id)

    def by_api_key(self, api_key: str) -> Tenant | None:
        return self._view.by_api_key(api_key)

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        """Take one record (see the module doc); the view is rebuilt by :meth:`refresh`."""
        if value is None:
            if key is not None:
                self._records.pop(key.decode("utf-8", "replace"), None)
            return
        try:
            tenant_id, tenant = decode_tenant_record(key, value)
        except InvalidField as exc:
            log.warning("tenants topic: skipped a record keyed %r: %s", key, exc)
            return
        self._records[tenant_id] = tenant
        self.applied += 1

    def refresh(self) -> None:
        """Rebuild the view from ``base`` and the records applied."""
        self._view = self.base.merged(self._records)

    # -- Kafka -------------------------------------------------------------------------------

    async def start(self) -> None:
        from aiokafka import AIOKafkaConsumer  # noqa: PLC0415 - only a serving process needs it

        async with self._starting:  # a catch-up may start it while the owner does
            if self._consumer is not None:
                return
            consumer = AIOKafkaConsumer(
                **self.kafka.client(), enable_auto_commit=False, group_id=None
            )
            await consumer.start()
            self._consumer = consumer
            self._task = asyncio.create_task(self._follow(), name="tenant-log")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None
        self._assigned = []

    async def _assign(self) -> bool:
        """Assign every partition of the topic, from the beginning; False while it does not exist."""
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
            await consumer.seek_to_beginning(*assigned)
            self._assigned = assigned
            return True

    async def _follow(self) -> None:
        """Apply the topic's records as they come, for the life of the process: a broker error
        is logged and retried after a second, never ending the follow (which would freeze the
        registry and make every ``catch_up`` time out).
        """
        while True:
            try:
                await self._follow_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("reading the tenants topic failed; retrying in 1 s")
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
                    self.apply(record.key, record.value)
            if batches:
                self.refresh()

    async def catch_up(self, timeout_s: float | None = None) -> None:
        """Return once every record on the topic now is applied (at once when the topic does
        not exist: there is nothing to read). Raises TenantLogError after ``timeout_s``.
        """
        if self._consumer is None:
            await self.start()
        deadline = time.monotonic() + (self.timeout_s if timeout_s is None else timeout_s)
        try:
            if not await asyncio.wait_for(self._assign(), self._left(deadline)):
                return
            ends = await asyncio.wait_for(
                self._consumer.end_offsets(self._assigned), self._left(deadline)
            )
        except TimeoutError as exc:
            raise TenantLogError("no answer from the broker", self.poll_s * 20) from exc
        await self._reach({tp.partition: end for tp, end in ends.items()}, deadline)

    async def _reach(self, wanted: Mapping[int, int], deadline: float) -> None:
        """Wait until this log's position on each partition is at least ``wanted`` there."""
        by_partition = {tp.partition: tp for tp in self._assigned}
        while True:
            behind = [
                p
                for p, offset in wanted.items()
                if await self._consumer.position(by_partition[p]) < offset
            ]
            if not behind:
                return
            if time.monotonic() >= deadline:
                msg = f"partitions {behind} not read within {self.timeout_s:g} s"
                raise TenantLogError(msg)
            await asyncio.sleep(self.poll_s / 2)

    @staticmethod
    def _left(deadline: float) -> float:
        return max(0.001, deadline - time.monotonic())

    async def update(
        self, tenant_id: str, change: Callable[[Tenant | None], Tenant | None]
    ) -> Tenant | None:
        """Read-modify-write one tenant: catch up, ``change`` the current tenant (None: there is
        none) into the new one (None: delete it), publish that and return it. ``change`` may
        raise (nothing is published then). Changes made through this log are serialised; two
        processes changing the same tenant at once may lose one change (the last record wins).
        """
        async with self._writing:
            await self.catch_up()
            current = self.get(tenant_id)
            new = change(current)
            if new is None:
                await self.publish(current or Tenant(tenant_id), deleted=True)
            else:
                await self.publish(new)
            return new

    async def publish(self, tenant: Tenant, *, deleted: bool = False) -> None:
        """Produce ``tenant``'s record (acks=all) and wait until this log has applied it. Raises
        TenantLogError when the topic does not exist (the worker creates it: producing would
        make a broker that auto-creates topics create it uncompacted) or does not answer in time.
        """
        from aiokafka import AIOKafkaProducer  # noqa: PLC0415
        from aiokafka.errors import KafkaError  # noqa: PLC0415

        if self._consumer is None:
            await self.start()
        deadline = time.monotonic() + self.timeout_s
        if not await self._assign():
            raise TenantLogError(f"{self.topic} does not exist (the stream worker creates it)")
        key, value = tenant_record(tenant, deleted=deleted)
        try:
            if self._producer is None:
                producer = AIOKafkaProducer(**self.kafka.client(), acks="all")
                try:
                    await asyncio.wait_for(producer.start(), self._left(deadline))
                except BaseException:
                    await producer.stop()
                    raise
                self._producer = producer
            sent = await asyncio.wait_for(
                self._producer.send_and_wait(self.topic, key=key, value=value),
                self._left(deadline),
            )
        except TimeoutError as exc:
            raise TenantLogError(f"not acknowledged within {self.timeout_s:g} s") from exc
        except KafkaError as exc:
            raise TenantLogError(f"{type(exc).__name__}: {exc}") from exc
        await self._reach({sent.partition: sent.offset + 1}, deadline)
