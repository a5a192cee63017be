"""Our topics, created by the worker at start-up with the configured partitions and retention."""

from __future__ import annotations

import logging

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError

from streams.settings import WorkerSettings

log = logging.getLogger(__name__)

#: Topic roles. Writes, access and audit are the replayable log: kept for ``log_retention_ms``.
WRITES = "memory-writes"
ACCESS = "access-events"
CONSOLIDATION = "consolidation"
AUDIT = "audit"
DEAD_LETTER = "dead-letter"
ROLES = (WRITES, ACCESS, CONSOLIDATION, AUDIT, DEAD_LETTER)
_REPLAYED = {WRITES, ACCESS, AUDIT}


async def ensure_topics(settings: WorkerSettings) -> list[str]:
    """Create the missing topics; returns the names created. Existing topics are left as they are."""
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap)
    await admin.start()
    created = []
    try:
        existing = set(await admin.list_topics())
        wanted = []
        for role in ROLES:
            name = settings.topic(role)
            if name in existing:
                continue
            config = {"retention.ms": str(settings.log_retention_ms)} if role in _REPLAYED else {}
            wanted.append(NewTopic(name, settings.partitions, 1, topic_configs=config))
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
