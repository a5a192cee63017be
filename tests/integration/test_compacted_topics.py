"""Following the compacted topics on a real broker while an operator adds partitions to them."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions
from aiokafka.partitioner import DefaultPartitioner

from ranker.applied import AppliedOffsets, KafkaOffsets, Token
from storage.key_log import ROLE, KeyLog
from tests.integration.harness import Stack

pytestmark = [pytest.mark.integration, pytest.mark.anyio]


async def partitions_of(bootstrap: str, topic: str) -> int:
    """The topic's partition count, once the broker's metadata has it (a topic just created
    may be described with none for a moment).
    """
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        for _ in range(300):
            (described,) = await admin.describe_topics([topic])
            if described["partitions"]:
                return len(described["partitions"])
            await asyncio.sleep(0.1)
        raise AssertionError(f"{topic} has no partitions after 30 s")
    finally:
        await admin.close()


async def add_partitions(bootstrap: str, topic: str, total: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_partitions({topic: NewPartitions(total_count=total)})
    finally:
        await admin.close()


async def test_keys_on_partitions_added_to_the_keys_topic_are_read_and_erased(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """A follower assigned the partitions the topic had at its start never read a key minted
    on one added later (the worker dead-lettered the write sealed under it), and publishing to
    one failed (an erase answered 500).
    """
    stack = Stack(kafka_bootstrap, str(tmp_path / "m.db"), tmp_path, ("acme",))
    await asyncio.to_thread(stack.create_topics)
    topic = stack.topic(ROLE)
    before = await partitions_of(kafka_bootstrap, topic)
    worker, ranker = KeyLog(kafka_bootstrap, topic), KeyLog(kafka_bootstrap, topic)
    try:
        await worker.catch_up()
        await ranker.catch_up()
        await add_partitions(kafka_bootstrap, topic, before + 2)
        memories = [("acme", f"m{i}", None) for i in range(40)]
        keys = await ranker.mint(memories)  # a producer made now: it writes to every partition
        every, added = list(range(before + 2)), set(range(before, before + 2))
        choose = DefaultPartitioner()
        assert {choose(k.record_key, every, every) for k in keys} & added  # some landed there

        await worker.read_through()  # what the worker does for a write naming an unknown key
        for key in keys:
            assert worker.data_key("acme", key.memory_id, key.key_id) == key
        erased = await ranker.erase("acme", [m for _, m, _ in memories])  # publishes, applied
        assert sum(erased.values()) == len(keys)
        await worker.read_through()
        assert all(worker.erased_memory("acme", m) for _, m, _ in memories)
    finally:
        await worker.stop()
        await ranker.stop()


async def test_a_token_on_a_partition_added_while_the_ranker_runs_is_waited_on(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """The ranker's end-offsets client knew the partitions it had read at start for up to 5
    minutes: a read-your-writes token of a write on a partition added since was refused as not
    one this service returned. It reads the cluster's partitions again before refusing.
    """
    stack = Stack(kafka_bootstrap, str(tmp_path / "m.db"), tmp_path, ("acme",))
    await asyncio.to_thread(stack.create_topics)
    topic = stack.topic("memory-writes")
    before = await partitions_of(kafka_bootstrap, topic)
    offsets = KafkaOffsets(kafka_bootstrap, f"{stack.app_id}-group", {"memory-writes": topic})
    await offsets.start()
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await producer.start()
    try:
        assert len(await offsets.end_offsets("memory-writes")) == before
        await add_partitions(kafka_bootstrap, topic, before + 1)
        for _ in range(300):  # the producer sends to a partition its own metadata lists
            if before in await producer.partitions_for(topic):
                break
            await producer.client.force_metadata_update()
            await asyncio.sleep(0.1)
        sent = await producer.send_and_wait(topic, b"v", key=b"k", partition=before)
        assert sent.partition == before
        assert before not in await offsets.end_offsets("memory-writes")  # the list it read
        applied = AppliedOffsets(
            offsets.committed, offsets.end_offsets, timeout_s=30, refresh=offsets.refresh
        )
        await applied._check_issued(Token({"memory-writes": {before: sent.offset}}))  # no 422
        assert (await offsets.end_offsets("memory-writes"))[before] == sent.offset + 1
    finally:
        await producer.stop()
        await offsets.stop()
