"""Our topics, created by the worker at start-up with the configured partitions, replicas and
retention. Existing topics are left as they are (change them with Kafka's own tools): where one
differs from the settings, the start-up logs a warning for each difference (:class:`Drift`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import KafkaError, TopicAlreadyExistsError

from storage import key_log, tenant_log
from storage.changelogs import changelog_topic
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
#: The worker's tables; Faust creates their changelog topics (``<app id>-<table>-changelog``,
#: compacted) with :func:`changelog_config` besides its own settings.
TABLES = ("memories", "documents", "tenant-counters", "pending-accesses")


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


def changelog_config(settings: WorkerSettings) -> dict[str, str]:
    """What a table's changelog topic is created with besides Faust's own ``cleanup.policy``
    (compact) and replicas: the tables are the source of truth, kept as durably as our topics.
    """
    return {
        "compression.type": settings.topic_compression,
        "min.insync.replicas": str(settings.kafka_min_insync),
    }


@dataclass(frozen=True)
class Drift:
    """One way an existing topic differs from what the settings would create it with; the
    broker's value is the one in force (the worker never alters a topic).

    Attributes:
        topic: the topic's name.
        name: ``partitions``, or the topic configuration's key (``retention.ms``...).
        broker: the value the broker has for it.
        wanted: the value the settings ask for.
    """

    topic: str
    name: str
    broker: str
    wanted: str

    def __str__(self) -> str:
        return f"{self.topic}: {self.name} is {self.broker}, the settings say {self.wanted}"


def wanted_topics(settings: WorkerSettings) -> dict[str, dict[str, str]]:
    """Every topic the deployment uses (ours and the tables' changelogs) and its configuration."""
    ours = {settings.topic(role): topic_config(settings, role) for role in ROLES}
    changelogs = {changelog_topic(settings.app_id, t): changelog_config(settings) for t in TABLES}
    return ours | changelogs


async def drifts(
    admin: AIOKafkaAdminClient, settings: WorkerSettings, names: list[str]
) -> list[Drift]:
    """How the existing topics ``names`` (of :func:`wanted_topics`) differ from the settings:
    partition counts and every configuration key the settings set.
    """
    if not names:
        return []
    wanted = wanted_topics(settings)
    found = []
    for described in await admin.describe_topics(names):
        count = len(described["partitions"])
        if count and count != settings.partitions:
            found.append(
                Drift(described["topic"], "partitions", str(count), str(settings.partitions))
            )
    asked = [
        ConfigResource(ConfigResourceType.TOPIC, name, dict.fromkeys(wanted[name]))
        for name in names
    ]
    for response in await admin.describe_configs(asked):
        for resource in response.to_object()["resources"]:
            found.extend(_config_drifts(resource, wanted[resource["resource_name"]]))
    return found


def _config_drifts(resource: dict[str, Any], wanted: dict[str, str]) -> list[Drift]:
    """One described topic's configuration against ``wanted`` (none when it could not be read:
    logged).
    """
    if resource["error_code"]:
        log.warning(
            "topic %s: settings not checked (the broker answered error %s)",
            resource["resource_name"],
            resource["error_code"],
        )
        return []
    have = {e["config_names"]: e["config_value"] for e in resource["config_entries"]}
    return [
        Drift(resource["resource_name"], key, have[key], value)
        for key, value in wanted.items()
        if key in have and have[key] != value
    ]


async def _warn_of_drifts(
    admin: AIOKafkaAdminClient, settings: WorkerSettings, names: list[str]
) -> None:
    """Log each of :func:`drifts` as a warning; a broker that will not describe the topics (no
    DescribeConfigs, an ACL, a timeout) costs one warning, never the start.
    """
    try:
        found = await drifts(admin, settings, names)
    except KafkaError as exc:
        log.warning(
            "topic settings not checked against the broker's: %s: %s", type(exc).__name__, exc
        )
        return
    for drift in found:
        log.warning("existing topic left as it is: %s", drift)


async def ensure_topics(settings: WorkerSettings) -> list[str]:
    """Create the missing topics; returns the names created. Existing topics are left as they are;
    each way one differs from the settings is logged as a warning (:func:`drifts`): a setting
    changed after the topics were made, or topics made by other means (Strimzi's KafkaTopics),
    does nothing until the topic is changed with Kafka's tools.
    """
    admin = AIOKafkaAdminClient(**settings.kafka().client())
    await admin.start()
    created = []
    try:
        existing = set(await admin.list_topics())
        await _warn_of_drifts(admin, settings, sorted(existing & set(wanted_topics(settings))))
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
