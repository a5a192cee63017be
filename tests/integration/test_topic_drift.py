"""Existing topics that differ from the settings, on a real broker: the worker leaves them as
they are and names each difference at start-up (a setting changed after the topics were made
did nothing, silently).
"""

from __future__ import annotations

import logging
import uuid

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from streams.settings import WorkerSettings
from streams.topics import ROLES, WRITES, ensure_topics

pytestmark = [pytest.mark.integration, pytest.mark.anyio]


async def test_each_way_an_existing_topic_differs_from_the_settings_is_logged(
    kafka_bootstrap: str, caplog: pytest.LogCaptureFixture
) -> None:
    name = f"t{uuid.uuid4().hex[:10]}"
    first = WorkerSettings(
        kafka_bootstrap=kafka_bootstrap, topic_prefix=f"{name}.", app_id=name, partitions=2
    )
    assert sorted(await ensure_topics(first)) == sorted(first.topic(r) for r in ROLES)
    # a changelog as a Faust of before would have made it: compacted, nothing else
    changelog = f"{name}-memories-changelog"
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(changelog, 2, 1, topic_configs={"cleanup.policy": "compact"})]
        )
    finally:
        await admin.close()

    changed = first.model_copy(
        update={"partitions": 3, "log_retention_ms": 86_400_000, "topic_compression": "lz4"}
    )
    with caplog.at_level(logging.WARNING, logger="streams.topics"):
        assert await ensure_topics(changed) == []  # nothing created, nothing altered
    logged = {r.getMessage() for r in caplog.records}
    writes = first.topic(WRITES)
    assert f"existing topic left as it is: {writes}: partitions is 2, the settings say 3" in logged
    assert (
        f"existing topic left as it is: {writes}: retention.ms is -1, the settings say 86400000"
        in logged
    )
    assert all(
        f"existing topic left as it is: {first.topic(r)}: compression.type is zstd, the settings"
        " say lz4" in logged
        for r in ROLES
    )
    assert (
        f"existing topic left as it is: {changelog}: compression.type is producer, the settings"
        " say lz4" in logged
    )

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="streams.topics"):
        assert await ensure_topics(first) == []
    # the topics made with these settings match them; the changelog made without them does not
    assert {r.getMessage() for r in caplog.records} == {
        f"existing topic left as it is: {changelog}: compression.type is producer, the settings"
        " say zstd"
    }
