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
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError
from aiokafka.partitioner import murmur2

from memcore.ids import state_key
from ranker.errors import Unavailable
from storage.kafka import KafkaConnection

MAX_EVENTS = 10_000
"""At most this many records of one memory are returned (the oldest first)."""


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

    async def history(self, tenant_id: str, memory_id: str) -> list[dict[str, Any]]:
        """The audit records of one memory of ``tenant_id``, oldest first (empty when it has
        none). Raises Unavailable when Kafka does not answer within ``timeout_s``.
        """
        key = state_key(tenant_id, memory_id).encode()
        try:
            async with asyncio.timeout(self.timeout_s):
                return await self._read(key, tenant_id)
        except (TimeoutError, KafkaError, OSError) as exc:
            reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            raise Unavailable("kafka", "read audit", reason) from exc

    async def _read(self, key: bytes, tenant_id: str) -> list[dict[str, Any]]:
        consumer = AIOKafkaConsumer(**self.kafka.client(), enable_auto_commit=False, group_id=None)
        await consumer.start()
        try:
            partitions = await _partitions(consumer, self.topic)
            if not partitions:
                return []  # no audit topic yet: nothing was ever decided
            tp = TopicPartition(self.topic, partition_of(key, len(partitions)))
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            end = (await consumer.end_offsets([tp]))[tp]
            found: list[dict[str, Any]] = []
            while await consumer.position(tp) < end:
                batches = await consumer.getmany(tp, timeout_ms=200, max_records=10_000)
                for record in batches.get(tp, []):
                    if record.offset >= end:
                        break
                    if record.key == key and len(found) < MAX_EVENTS:
                        found.extend(_event(record.value, tenant_id))
            return found
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
    an audit record at all (not a JSON object: another producer's, never the worker's).
    """
    if raw is None:
        return []
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return []
    if not isinstance(value, dict) or value.get("tenant_id") != tenant_id:
        return []
    return [
        {
            "kind": value.get("kind"),
            "reason": value.get("reason"),
            "at": value.get("at"),
            "source": value.get("source"),
            "offset": value.get("offset"),
            "after": value.get("after"),
        }
    ]
