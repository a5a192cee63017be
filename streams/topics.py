"""Our topics, created by the worker at start-up with the configured partitions, replicas and
retention. Existing topics are left as they are (change them with Kafka's own tools).
"""

from __future__ import annotations

import logging

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError

from storage import key_log, tenant_log
from streams.settings import WorkerSettings

log = logging.getLogger(__name__)

#: Topic roles. Writes, access and audit are the replayable log: kept for ``log_retention_ms``
#: (forever by default); consolidation requests for a week; dead letters for
#: ``dead_letter_retention_ms``; tenants (:mod:`storage.tenant_log`, keyed by tenant id) are
#: compacted: the last record of each tenant is kept forever; memory keys (:mod:`storage.key_log`)
#: are compacted too, with short segments so that an erased key soon leaves the broker's disk. The
#: broker compresses every topic (``topic_compression``, zstd).
WRITES = "memory-writes"
ACCESS = "access-events"
CONSOLIDATION = "consolidation"
AUDIT = "audit"
DEAD_LETTER = "dead-letter"
TENANTS = tenant_log.ROLE
KEYS = key_log.ROLE
ROLES = (WRITES, ACCESS, CONSOLIDATION, AUDIT, DEAD_LETTER, TENANTS, KEYS)
_REPLAYED = {WRITES, ACCESS, AUDIT}
WEEK_MS = 7 * 86_400_000


def topic_config(settings: WorkerSettings, role: str) -> dict[str, str]:
    """The configuration a topic of ``role`` is created with (see the roles above)."""
    if role == KEYS:
        lag = str(settings.keys_compaction_lag_ms)
        return {
            "retention.ms": "-1",
            "cleanup.policy": "compact",
            "segment.ms": lag,  # the cleaner never compacts the segment being written
            "max.compaction.lag.ms": lag,
            "min.cleanable.dirty.ratio": "0.01",
            "delete.retention.ms": lag,  # how long followers still see a tombstone
            "compression.type": settings.topic_compression,
            "min.insync.replicas": str(settings.kafka_min_insync),
        }
    if role == TENANTS:
        return {
            "retention.ms": "-1",
            "cleanup.policy": "compact",
            "compression.type": settings.topic_compression,
            "min.insync.replicas": str(settings.kafka_min_insync),
        }
    if role in _REPLAYED:
        retention = settings.log_retention_ms
    elif role == DEAD_LETTER:
        retention = settings.dead_letter_retention_ms
    else:
        retention = WEEK_MS
    return {
        "retention.ms": str(retention),
        "cleanup.policy": "delete",
        "compression.type": settings.topic_compression,
        "min.insync.replicas": str(settings.kafka_min_insync),
    }


async def ensure_topics(settings: WorkerSettings) -> list[str]:
    """Create the missing topics; returns the names created. Existing topics are left as they are."""
    admin = AIOKafkaAdminClient(**settings.kafka().client())
    await admin.start()
    created = []
    try:
        existing = set(await admin.list_topics())
        wanted = []
        for role in ROLES:
            name = settings.topic(role)
            if name in existing:
                continue
            config = topic_config(settings, role)
            replicas = settings.kafka_replication
            wanted.append(NewTopic(name, settings.partitions, replicas, topic_configs=config))
        for topic in wanted:
            try:
                await admin.create_topics([topic])
                created.append(topic.name)
            except TopicAlreadyExistsError:
                pass
    finally:
        await admin.close()
    if created:
        log.info("created topics %s", ", ".join(created))
    return created
