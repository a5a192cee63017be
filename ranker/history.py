"""A memory's history, read from the audit topic (the log is the record; nothing else keeps it).

The worker writes one audit record per decision about a memory (created, written again,
superseded, promoted, archived, revived, deleted, purged...), keyed ``tenant_id/memory_id`` with
Kafka's default partitioner, so one memory's records all lie in one partition, in the order they
were decided. :class:`AuditLog` reads that partition from its start to its end at the time of the
call and keeps the records of that key.

Cost: one read of the partition per call (the audit topic's size over its partitions); bounded by
``timeout_s`` (:class:`~ranker.errors.Unavailable` past it, HTTP 503). Records older than the
topic's retention are gone from it: the history starts where the log does.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError
from aiokafka.partitioner import murmur2

from memcore.ids import state_key
from ranker.errors import Unavailable
from storage.kafka import KafkaConnection

MAX_EVENTS = 10_000
"""At most this many records of one memory are returned: its newest (those that explain its
state now), in the order they were decided; :attr:`History.total` counts them all."""


@dataclass(frozen=True)
class History:
    """One memory's audit records as the API shows them.

    Attributes:
        events: its newest :data:`MAX_EVENTS` records, in the order they were decided.
        total: how many it has in the log (more than ``len(events)``: the oldest were left out).
    """

    events: list[dict[str, Any]]
    total: int


class Newest:
    """Keeps the newest ``limit`` records of one key and tenant, in order, and counts them all;
    none logged before ``since_ms`` (Kafka record time, milliseconds since the epoch: an erased
    tenant's, when one of the same id is made anew; see ``storage.tenants.Tenant``).
    """

    def __init__(
        self, key: bytes, tenant_id: str, limit: int = MAX_EVENTS, since_ms: int | None = None
    ) -> None:
        self.key = key
        self.tenant_id = tenant_id
        self.since_ms = since_ms
        self.events: deque[dict[str, Any]] = deque(maxlen=limit)
        self.total = 0

    def add(self, key: bytes | None, value: bytes | None, timestamp_ms: int) -> None:
        if key != self.key or (self.since_ms is not None and timestamp_ms < self.since_ms):
            return
        for event in _event(value, self.tenant_id):
            self.events.append(event)
            self.total += 1

    def history(self) -> History:
        return History(list(self.events), self.total)


def partition_of(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner (Java's, aiokafka's, Faust's) gives ``key``."""
    return int(murmur2(key) & 0x7FFFFFFF) % partitions


class AuditLog:
    """Reads one memory's audit records. The constructor does no I/O; each call connects."""

    def __init__(
        self, kafka: KafkaConnection | str, topic: str, *, timeout_s: float = 10.0
    ) -> None:
        self.kafka = KafkaConnection.of(kafka)
        self.topic = topic
        self.timeout_s = timeout_s

    async def history(
        self, tenant_id: str, memory_id: str, *, since_ms: int | None = None
    ) -> History:
        """The audit records of one memory of ``tenant_id`` (:class:`History`; no events when it
        has none), none logged before ``since_ms`` (:class:`Newest`). Raises Unavailable when
        Kafka does not answer within ``timeout_s``.
        """
        found = Newest(state_key(tenant_id, memory_id).encode(), tenant_id, since_ms=since_ms)
        try:
            async with asyncio.timeout(self.timeout_s):
                return await self._read(found)
        except (TimeoutError, KafkaError, OSError) as exc:
            reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            raise Unavailable("kafka", "read audit", reason) from exc

    async def _read(self, found: Newest) -> History:
        consumer = AIOKafkaConsumer(**self.kafka.client(), enable_auto_commit=False, group_id=None)
        await consumer.start()
        try:
            partitions = await _partitions(consumer, self.topic)
            if not partitions:
                return found.history()  # no audit topic yet: nothing was ever decided
            tp = TopicPartition(self.topic, partition_of(found.key, len(partitions)))
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            end = (await consumer.end_offsets([tp]))[tp]
            while await consumer.position(tp) < end:
                batches = await consumer.getmany(tp, timeout_ms=200, max_records=10_000)
                for record in batches.get(tp, []):
                    if record.offset >= end:
                        break
                    found.add(record.key, record.value, record.timestamp)
            return found.history()
        finally:
            await consumer.stop()


async def _partitions(consumer: AIOKafkaConsumer, topic: str) -> set[int]:
    deadline = time.monotonic() + 2.0
    while True:
        await consumer._client.force_metadata_update()
        found = consumer.partitions_for_topic(topic)
        if found or time.monotonic() >= deadline:
            return set(found or ())
        await asyncio.sleep(0.2)


def _event(raw: bytes | None, tenant_id: str) -> list[dict[str, Any]]:
    """The record as the API shows it; nothing for a record that is not this tenant's, or not
    an audit record at all (not a JSON object: another producer's, never the worker's). Not the
    offset of the event it records: on a topic every tenant shares, two of them told a tenant
    how many records all other tenants produced between them (as tokens in the clear did).
    """
    if raw is None:
        return []
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return []
    if not isinstance(value, dict) or value.get("tenant_id") != tenant_id:
        return []
    after = value.get("after")
    if isinstance(after, dict) and "last_access" in after:
        after = {**after, "last_access": _in_utc(after["last_access"])}
    return [
        {
            "kind": value.get("kind"),
            "reason": value.get("reason"),
            "at": _in_utc(value.get("at")),
            "source": value.get("source"),
            "after": after,
        }
    ]


def _in_utc(at: object) -> object:
    """An audit record's time in UTC, as every other route shows times (records written before
    the worker wrote them so kept the writer's offset); anything else as it is.
    """
    if not isinstance(at, str):
        return at
    try:
        when = datetime.fromisoformat(at)
    except ValueError:
        return at
    return when.astimezone(UTC).isoformat() if when.tzinfo is not None else at
