"""The service on a 3-broker KRaft cluster (started from the same jars) with the production
settings: three replicas of every topic (Faust's changelogs too), min.insync.replicas 2, acks=all.
Writes are acknowledged while one broker is down, and none acknowledged is lost.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from streams.settings import WorkerSettings
from streams.topics import TABLES, Drift, drifts, wanted_topics
from tests.infra import ROOT, free_port
from tests.integration.harness import Stack, eventually
from tests.integration.test_end_to_end import DIM, serve
from tests.integration.test_faults import Writer, assert_all_applied

pytestmark = pytest.mark.integration
KAFKA = ROOT / "scripts" / "kafka.sh"


class Cluster:
    """Three combined broker+controller nodes on 127.0.0.1, one static quorum."""

    def __init__(self, home: Path) -> None:
        subprocess.run([KAFKA, "fetch"], check=True, env={**os.environ})
        ports = [(free_port(), free_port()) for _ in range(3)]
        voters = ",".join(f"{n + 1}@127.0.0.1:{c}" for n, (_, c) in enumerate(ports))
        cluster_id = subprocess.run(
            ["java", "-cp", str(ROOT / "var" / "kafka" / "lib" / "*"), "kafka.tools.StorageTool",
             "random-uuid"],
            check=True, capture_output=True, text=True,
        ).stdout.split()[-1]  # fmt: skip
        self.envs = []
        for n, (port, cport) in enumerate(ports):
            node = home / f"node{n + 1}"
            node.mkdir(parents=True)
            (node / "lib").symlink_to(ROOT / "var" / "kafka" / "lib")
            self.envs.append(
                {
                    **os.environ,
                    "KAFKA_HOME": str(node),
                    "KAFKA_PORT": str(port),
                    "KAFKA_CONTROLLER_PORT": str(cport),
                    "KAFKA_NODE_ID": str(n + 1),
                    "KAFKA_VOTERS": voters,
                    "KAFKA_CLUSTER_ID": cluster_id,
                    "KAFKA_INTERNAL_RF": "3",
                    "KAFKA_HEAP": "-Xms128m -Xmx512m",
                }
            )
        self.bootstrap = ",".join(f"127.0.0.1:{p}" for p, _ in ports)

    def start(self, *nodes: int) -> None:
        """Start nodes (all by default) at once: each waits for the quorum of the others."""
        started = [
            subprocess.Popen([KAFKA, "start"], env=self.envs[n])
            for n in (nodes or range(len(self.envs)))
        ]
        assert [p.wait(180) for p in started] == [0] * len(started)

    def stop(self, *nodes: int) -> None:
        for n in nodes or range(len(self.envs)):
            subprocess.run([KAFKA, "stop"], check=False, env=self.envs[n])


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    three = Cluster(tmp_path / "kafka")
    three.start()
    yield three
    three.stop()


@pytest.fixture
def stack(cluster: Cluster, milvus_server_uri: str, tmp_path: Path) -> Stack:
    return Stack(
        cluster.bootstrap,
        milvus_server_uri,
        tmp_path,
        ("acme",),
        dim=DIM,
        app_id=f"c{uuid.uuid4().hex[:8]}",
    )


@pytest.fixture
def server(stack: Stack, tmp_path: Path) -> Iterator[str]:
    yield from serve(stack, tmp_path, MNEMO_KAFKA_REPLICATION="3", MNEMO_KAFKA_MIN_INSYNC="2")


def test_three_replicas_and_a_lost_broker_lose_no_acknowledged_write(
    cluster: Cluster, stack: Stack, server: str
) -> None:
    writer = Writer(server)
    writer.start()
    try:
        eventually(lambda: len(writer.acked()) >= 20, 120, "writes on three brokers")
        cluster.stop(2)  # one of three: two replicas stay in sync
        after = len(writer.acked())
        eventually(lambda: len(writer.acked()) >= after + 20, 180, "writes with a broker down")
    finally:
        writer.halt.set()
        writer.join(60)
    assert {s for s, *_ in writer.answers} <= {200, 503}
    replicas = replicas_of(cluster.bootstrap)
    assert any(t.endswith("-changelog") for t in replicas), replicas
    assert set(replicas.values()) == {3}, replicas  # ours and Faust's changelogs
    # every topic, the changelogs included, as the settings ask: min.insync.replicas 2, zstd
    settings = WorkerSettings(
        kafka_bootstrap=cluster.bootstrap,
        topic_prefix=f"{stack.name}.",
        app_id=stack.app_id,
        partitions=stack.partitions,
        kafka_replication=3,
        kafka_min_insync=2,
    )
    assert asyncio.run(drifted(settings, [t for t in replicas if t.endswith("-changelog")])) == []
    assert_all_applied(server, writer.acked())


async def drifted(settings: WorkerSettings, changelogs: list[str]) -> list[Drift]:
    assert len(changelogs) == len(TABLES), changelogs
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap)
    await admin.start()
    try:
        return await drifts(admin, settings, sorted(set(wanted_topics(settings))))
    finally:
        await admin.close()


def replicas_of(bootstrap: str) -> dict[str, int]:
    """Replicas per topic of ours (internal topics left out)."""

    async def run() -> dict[str, int]:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            names = [t for t in await admin.list_topics() if not t.startswith("__")]
            described = await admin.describe_topics(names)
        finally:
            await admin.close()
        return {t["topic"]: len(t["partitions"][0]["replicas"]) for t in described}

    return asyncio.run(run())
