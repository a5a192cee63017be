"""Faults answered by ``python -m server`` with its own broker: a broker restart during HTTP writes
loses no acknowledged write and answers 503 with Retry-After while the broker is down (never a
500, never a hang); a flood of concurrent recalls is refused fast with 429s and the service answers
again right after. And the flush before a worker's offset commit, over Faust's producer and a real
broker paused mid-flush: it returns only once the broker has acknowledged every record buffered
before it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import faust
import httpx
import pytest

from streams.flush import exact_flush
from tests.infra import ROOT, free_port
from tests.integration.harness import Stack, eventually
from tests.integration.test_end_to_end import DIM, KEY, e, serve
from tests.integration.test_streams import T0

pytestmark = pytest.mark.integration
AUTH = {"Authorization": f"Bearer {KEY}"}


class Broker:
    """A broker of this test alone (``scripts/kafka.sh``), stoppable and restartable on the same
    ports and data.
    """

    def __init__(self, home: Path, **extra: str) -> None:
        self.port = free_port()
        self.env = {
            **os.environ,
            **extra,
            "KAFKA_HOME": str(home),
            "KAFKA_PORT": str(self.port),
            "KAFKA_CONTROLLER_PORT": str(free_port()),
        }
        subprocess.run([ROOT / "scripts" / "kafka.sh", "fetch"], check=True, env={**os.environ})
        home.mkdir(parents=True, exist_ok=True)
        (home / "lib").symlink_to(ROOT / "var" / "kafka" / "lib")

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        subprocess.run([ROOT / "scripts" / "kafka.sh", "start"], check=True, env=self.env)

    def stop(self) -> None:
        subprocess.run([ROOT / "scripts" / "kafka.sh", "stop"], check=False, env=self.env)


def running_broker(home: Path, **extra: str) -> Iterator[Broker]:
    """A started :class:`Broker` (``extra``: ``scripts/kafka.sh`` settings), stopped after."""
    own = Broker(home, **extra)
    own.start()
    try:
        yield own
    finally:
        own.stop()


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    yield from running_broker(tmp_path / "kafka")


@pytest.fixture
def server(broker: Broker, milvus_server_uri: str, tmp_path: Path) -> Iterator[str]:
    stack = Stack(broker.bootstrap, milvus_server_uri, tmp_path, ("acme",), dim=DIM)
    yield from serve(stack, tmp_path, MNEMO_PRODUCE_TIMEOUT_S="3")


class Writer(threading.Thread):
    """Writes one memory per request until stopped; keeps every answer (status, id or None)."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.answers: list[tuple[int, str | None, str | None]] = []  # status, id, Retry-After
        self.halt = threading.Event()

    def run(self) -> None:
        with httpx.Client(base_url=self.url, headers=AUTH, timeout=20.0) as http:
            i = 0
            while not self.halt.is_set():
                memory = {
                    "content": f"fact {i}",
                    "embedding": e(1.0, i / 100),
                    "at": T0.isoformat(),
                }
                try:
                    reply = http.post("/v1/memories", json={"memories": [memory]})
                except httpx.TimeoutException:
                    self.answers.append((0, None, None))  # a hang: the test fails on it
                    continue
                ids = reply.json().get("ids") if reply.status_code == 200 else None
                self.answers.append(
                    (reply.status_code, ids[0] if ids else None, reply.headers.get("Retry-After"))
                )
                i += 1

    def acked(self) -> list[str]:
        return [m for status, m, _ in self.answers if status == 200 and m is not None]


def test_a_broker_restart_loses_no_acknowledged_write_and_answers_503_meanwhile(
    server: str, broker: Broker
) -> None:
    writer = Writer(server)
    writer.start()
    try:
        eventually(lambda: len(writer.acked()) >= 20, 60, "writes before the outage")
        broker.stop()
        eventually(lambda: any(s == 503 for s, *_ in writer.answers), 60, "a 503 while down")
        down = len(writer.answers)
        eventually(lambda: len(writer.answers) >= down + 3, 60, "answers while down")
        broker.start()
        after = len(writer.acked())
        eventually(lambda: len(writer.acked()) >= after + 20, 120, "writes after the restart")
    finally:
        writer.halt.set()
        writer.join(60)
    statuses = {s for s, *_ in writer.answers}
    assert statuses <= {200, 503}, statuses  # no 500, no hang (0)
    assert all(r is not None for s, _, r in writer.answers if s == 503)  # Retry-After on each
    assert_all_applied(server, writer.acked())


def assert_all_applied(server: str, acked: list[str]) -> None:
    """Wait until every acknowledged id can be read back (at most 180 s)."""
    with httpx.Client(base_url=server, headers=AUTH, timeout=30.0) as http:

        def missing() -> list[str]:
            reply = http.post("/v1/memories/get", json={"memory_ids": acked})
            return list(reply.json()["missing"]) if reply.status_code == 200 else acked

        eventually(lambda: not missing(), 180, "every acknowledged write applied")


@pytest.fixture
def small_server(make_stack: Callable[..., Stack], tmp_path: Path) -> Iterator[str]:
    yield from serve(make_stack(("acme",), dim=DIM), tmp_path, MNEMO_MAX_IN_FLIGHT="64")


def test_a_flood_of_recalls_gets_fast_429s_and_the_service_answers_right_after(
    small_server: str,
) -> None:
    url = small_server
    with httpx.Client(base_url=url, headers=AUTH, timeout=30.0) as http:
        memories = [{"content": f"note {i}", "embedding": e(1.0, i / 10)} for i in range(50)]
        assert http.post("/v1/memories", json={"memories": memories}).status_code == 200
    statuses = asyncio.run(flood(url, 5_000))
    assert set(statuses) <= {200, 429}, statuses  # every request answered, no 5xx
    assert statuses.get(429, 0) > 0  # beyond the in-flight limit: refused, not queued
    assert statuses.get(200, 0) > 0
    with httpx.Client(base_url=url, headers=AUTH, timeout=10.0) as http:
        after = http.post("/v1/recall", json={"vector": e(1.0), "k": 3, "track": False})
        assert after.status_code == 200, after.text  # answering again at once
        assert http.get("/readyz").status_code == 200


async def flood(url: str, n: int) -> dict[int, int]:
    """``n`` recalls at once on as many connections; how many got each status."""
    limits = httpx.Limits(max_connections=n, max_keepalive_connections=0)
    body = {"vector": e(1.0, 0.5), "k": 10, "track": False}
    async with httpx.AsyncClient(base_url=url, headers=AUTH, timeout=120.0, limits=limits) as http:
        replies = await asyncio.gather(
            *(http.post("/v1/recall", json=body) for _ in range(n)), return_exceptions=True
        )
    counts: dict[int, int] = {}
    for reply in replies:
        status = reply.status_code if isinstance(reply, httpx.Response) else -1
        counts[status] = counts.get(status, 0) + 1
    return counts


@pytest.mark.anyio
async def test_a_commit_flush_returns_once_the_paused_broker_acknowledged_every_record(
    broker: Broker, tmp_path: Path
) -> None:
    """Faust's own flush gives up once no record is handed to aiokafka within 0.1 s (here: while
    the broker is paused, aiokafka's per-partition batches fill and the hand-over waits), and the
    commit that called it would go ahead with records unsent.
    """
    app = faust.App(
        "flush-probe",
        broker=f"kafka://{broker.bootstrap}",
        topic_replication_factor=1,
        web_enabled=False,
        producer_max_batch_size=16_384,  # Faust's default: ~15 records of 1 KB per batch
    )
    topic = app.topic("flush-probe", partitions=1, key_serializer="raw", value_serializer="raw")
    exact_flush(app)
    await app.producer.start()
    try:
        await topic.maybe_declare()
        await topic.send(key=b"warm", value=b"up")  # metadata and connection before the pause
        pid = int((tmp_path / "kafka" / "broker.pid").read_text())
        os.kill(pid, signal.SIGSTOP)
        try:
            records = [topic.send_soon(key=b"k%d" % i, value=bytes(1000)) for i in range(2000)]
            flush = asyncio.ensure_future(app.producer.flush())  # what precedes a commit
            await asyncio.sleep(1.0)  # ten of Faust's 0.1 s give-ups while the broker is paused
        finally:
            os.kill(pid, signal.SIGCONT)
        await flush
        assert all(r.done() and r.exception() is None for r in records)
        offsets = [r.result().offset for r in records]
        assert offsets == list(range(offsets[0], offsets[0] + len(records)))
    finally:
        await app.producer.stop()
