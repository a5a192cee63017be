"""Driving a real worker process against the real broker and Milvus server."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from memcore import MemoryState
from storage import MilvusConfig, MilvusStore, codec
from streams.settings import WorkerSettings
from streams.topics import ensure_topics
from tests.infra import ROOT


@dataclass
class Stack:
    """One isolated deployment: its own topics, app id, tables and Milvus collection."""

    bootstrap: str
    milvus_uri: str
    workdir: Path
    tenants: tuple[str, ...]
    dim: int = 8
    partitions: int = 4
    embedder: str = "hash"
    name: str = field(default_factory=lambda: f"t{uuid.uuid4().hex[:10]}")
    app_id: str = ""
    replay: bool = False  # MNEMO_REPLAY: apply the topics, produce nothing

    def __post_init__(self) -> None:
        self.app_id = self.app_id or self.name

    def topic(self, role: str) -> str:
        return f"{self.name}.{role}"

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "MNEMO_KAFKA_BOOTSTRAP": self.bootstrap,
            "MNEMO_APP_ID": self.app_id,
            "MNEMO_TOPIC_PREFIX": f"{self.name}.",
            "MNEMO_PARTITIONS": str(self.partitions),
            "MNEMO_STORE": "rocksdb",
            "MNEMO_DATA_DIR": str(self.workdir / f"data-{self.app_id}"),
            "MNEMO_MILVUS_URI": self.milvus_uri,
            "MNEMO_MILVUS_COLLECTION": f"c_{self.app_id}",
            "MNEMO_MILVUS_PARTITION_KEY": "false",  # Milvus 2.3 server: see storage.MilvusConfig
            "MNEMO_MILVUS_FULL_TEXT": "false",  # Milvus 2.3 has no BM25
            "MNEMO_EMBEDDING_DIM": str(self.dim),
            "MNEMO_EMBEDDER": self.embedder,
            "MNEMO_TENANTS": ",".join(self.tenants),
            "MNEMO_SESSION_TIMEOUT_S": "10",
            "MNEMO_COMMIT_INTERVAL_S": "0.5",
            "MNEMO_LOG_LEVEL": os.environ.get("MNEMO_TEST_LOG_LEVEL", "info"),
            "MNEMO_METRICS_PORT": "0",  # workers run side by side: a test that scrapes picks a port
            "MNEMO_REPLAY": "true" if self.replay else "false",
        }

    def create_topics(self) -> None:
        """Create the topics as the worker does at start-up (the broker auto-creates none)."""
        settings = WorkerSettings(
            kafka_bootstrap=self.bootstrap, topic_prefix=f"{self.name}.", partitions=self.partitions
        )
        asyncio.run(ensure_topics(settings))

    def store(self) -> MilvusStore:
        s = MilvusStore(
            MilvusConfig(
                self.milvus_uri,
                collection=f"c_{self.app_id}",
                dim=self.dim,
                partition_key=False,
                full_text=False,
            )
        )
        s.connect()
        return s


class WorkerProcess:
    """``python -m streams`` in a subprocess, logging to a file; with ``metrics_port``, serving
    its Prometheus metrics there (:meth:`metrics`); ``env``: more variables.
    """

    def __init__(
        self,
        stack: Stack,
        label: str = "worker",
        metrics_port: int = 0,
        env: dict[str, str] | None = None,
    ) -> None:
        self.stack = stack
        self.log_path = stack.workdir / f"{stack.app_id}-{label}.log"
        self.metrics_port = metrics_port
        self.env = env or {}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> WorkerProcess:
        self.stack.create_topics()
        env = {**self.stack.env(), "MNEMO_METRICS_PORT": str(self.metrics_port), **self.env}
        with self.log_path.open("ab") as log:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "streams"],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=log,
            )
        return self

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        terminate(self.proc)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def metrics(self) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
        """A scrape of ``GET /metrics``: sample name -> sorted label pairs -> value; empty while
        the process does not answer yet.
        """
        assert self.metrics_port, "started without a metrics port"
        try:
            response = httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5)
        except httpx.TransportError:
            return {}
        response.raise_for_status()
        samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
        for family in text_string_to_metric_families(response.text):
            for s in family.samples:
                samples.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
        return samples


def terminate(proc: subprocess.Popen[bytes] | None) -> None:
    """Stop ``proc`` if it runs: SIGTERM, then SIGKILL when it has not exited after 60 s."""
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)


def produce(
    bootstrap: str, topic: str, messages: Iterable[tuple[bytes | None, bytes | None]]
) -> int:
    """Send messages (a None value: a tombstone) and wait for every acknowledgement; returns how
    many."""

    async def run() -> int:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
        await producer.start()
        try:
            futures = [await producer.send(topic, key=k, value=v) for k, v in messages]
            await asyncio.gather(*futures)
            return len(futures)
        finally:
            await producer.stop()

    return asyncio.run(run())


def read_all(bootstrap: str, topic: str) -> list[tuple[bytes | None, bytes]]:
    """Every message currently in ``topic`` (all partitions, from the beginning)."""

    async def run() -> list[tuple[bytes | None, bytes]]:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        await consumer.start()
        try:
            partitions = consumer.partitions_for_topic(topic)
            if partitions is None:
                await consumer._client.force_metadata_update()
                partitions = consumer.partitions_for_topic(topic) or set()
            tps = [TopicPartition(topic, p) for p in partitions]
            if not tps:
                return []
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            ends = await consumer.end_offsets(tps)
            out: list[tuple[bytes | None, bytes]] = []

            async def behind() -> bool:
                return any([await consumer.position(tp) < ends[tp] for tp in tps])

            while await behind():
                batches = await consumer.getmany(timeout_ms=1000)
                for records in batches.values():
                    out.extend((r.key, r.value) for r in records if r.value is not None)
            return out
        finally:
            await consumer.stop()

    return asyncio.run(run())


def table_states(stack: Stack) -> dict[str, MemoryState]:
    """The memory table as its changelog holds it: the last value of every key."""
    latest: dict[str, bytes] = {}
    for key, value in read_all(stack.bootstrap, f"{stack.app_id}-memories-changelog"):
        assert key is not None
        latest[key.decode()] = value
    return {k: codec.decode(v) for k, v in latest.items()}


def dead_letters(stack: Stack) -> list[dict[str, Any]]:
    return [orjson.loads(v) for _, v in read_all(stack.bootstrap, stack.topic("dead-letter"))]


def eventually(
    check: Callable[[], bool],
    timeout_s: float,
    what: str,
    worker: WorkerProcess | None = None,
    show: Callable[[], object] | None = None,
) -> None:
    """Poll ``check`` until it holds; fail with ``what`` (and the worker's log tail) at the deadline.

    A deadline is not a timing assertion: it only bounds how long a broken system is waited for.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    tail = worker.log()[-3000:] if worker is not None else ""
    seen = f"\n--- last seen ---\n{show()!r}" if show is not None else ""
    raise AssertionError(
        f"not reached within {timeout_s:.0f} s: {what}{seen}\n--- worker log ---\n{tail}"
    )


def wait_for_http(
    url: str, proc: subprocess.Popen[bytes], log_path: Path, timeout_s: float = 120
) -> None:
    """Wait until the process serves ``/openapi.json``; kill it and fail with its log otherwise."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(f"{url}/openapi.json", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.3)
    proc.kill()
    raise AssertionError(log_path.read_text(errors="replace")[-3000:])
