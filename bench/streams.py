"""Stream worker throughput on a real broker (not a test: figures go to docs/benchmarks.md).

    python -m bench.streams [--accesses N] [--writes N] [--embedded-writes N]

Measures, in one run on one machine:
1. access events/s through one worker (Milvus Lite embedded, or ``--milvus-server``) while the
   bench produces them, from the first produce until the worker's committed offsets reach the end
   of the topic (producing, reducing, the changelogs, the audit records and the commits), and the
   raw aiokafka consume rate of the same topic;
2. access events/s of the worker and of the minimal Faust agent (:mod:`bench.faust_floor`), each
   started on a topic already full and measured the same way, from its first offset commit to its
   last (:func:`drain_rate`): the ratio the issue asks for compares like with like;
3. writes/s with vectors given (no embedding) and with all-MiniLM-L6-v2 embedding on the CPU, from
   the first produce until the writes' offsets are committed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from tests.infra import ROOT, kafka_broker, milvus_server
from tests.integration.harness import Stack, WorkerProcess, produce

T0 = "2026-03-01T12:00:00+00:00"


def committed_total(bootstrap: str, group: str, topic: str) -> int:
    async def run() -> int:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            offsets = await admin.list_consumer_group_offsets(group)
        finally:
            await admin.close()
        return sum(
            meta.offset for tp, meta in offsets.items() if tp.topic == topic and meta.offset > 0
        )

    return asyncio.run(run())


def wait_committed(stack: Stack, role: str, total: int, timeout_s: float = 900) -> float:
    """Seconds until the worker committed ``total`` offsets of ``role`` (polled every 0.2 s)."""
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        if committed_total(stack.bootstrap, stack.app_id, stack.topic(role)) >= total:
            return time.monotonic() - start
        time.sleep(0.2)
    raise SystemExit(f"worker did not commit {total} {role} within {timeout_s} s")


def raw_consume_rate(bootstrap: str, topic: str, partitions: int, n: int) -> float:
    async def run() -> float:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        await consumer.start()
        try:
            tps = [TopicPartition(topic, p) for p in range(partitions)]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            seen, start = 0, time.monotonic()
            while seen < n:
                for records in (await consumer.getmany(timeout_ms=1000, max_records=5000)).values():
                    for r in records:
                        orjson.loads(r.value)  # decode as the worker does, nothing more
                    seen += len(records)
            return n / (time.monotonic() - start)
        finally:
            await consumer.stop()

    return asyncio.run(run())


def faust_floor_rate(stack: Stack, work: Path, n: int) -> float:
    """Events/s of :mod:`bench.faust_floor` over the same access topic, already full (``n``
    events), measured as :func:`drain_rate` measures the worker.
    """
    app_id = f"{stack.app_id}-floor"
    log_path = work / f"{app_id}.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(  # noqa: S603 - our own module, our own arguments
            [
                sys.executable,
                "-m",
                "bench.faust_floor",
                stack.bootstrap,
                stack.topic("access-events"),
                app_id,
                str(work / app_id),
                str(stack.partitions),
            ],
            cwd=ROOT,
            stdout=log,
            stderr=log,
        )
    try:
        return drain_rate(stack, app_id, 0, n)
    finally:
        proc.terminate()
        proc.wait(60)


def drain_rate(stack: Stack, group: str, base: int, n: int) -> float:
    """Events/s of consumer ``group`` over ``n`` access events waiting in the topic beyond its
    committed ``base``: from its first commit past ``base`` to the commit that reaches
    ``base + n``, counting only the events committed in between. Start-up, group join, table
    recovery and the first commit interval are left out, and so are the events processed in it.
    """
    topic = stack.topic("access-events")
    seen: list[int] = []

    def committed_past(total: int) -> bool:
        seen.append(committed_total(stack.bootstrap, group, topic))
        return seen[-1] > total

    first = wait_until(lambda: committed_past(base))
    at_first = seen[-1]
    done = wait_until(lambda: committed_past(base + n - 1))
    if seen[-1] == at_first:
        raise SystemExit(f"{group} drained {n} events within one commit: give more --accesses")
    return (seen[-1] - at_first) / (done - first)


def wait_until(check: Callable[[], bool], timeout_s: float = 900) -> float:
    """The monotonic time ``check`` first held (polled every 0.05 s)."""
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        if check():
            return time.monotonic()
        time.sleep(0.05)
    raise SystemExit(f"not reached within {timeout_s} s")


def write_msgs(
    n: int, dim: int | None, rng: random.Random, prefix: str
) -> list[tuple[bytes, bytes]]:
    out = []
    for i in range(n):
        doc = {
            "v": 1,
            "tenant_id": f"tenant{i % 10}",
            "memory_id": f"{prefix}{i}",
            "at": T0,
            "content": f"note {i}: the user said something worth keeping about topic {i % 97}",
            "importance": 0.5,
        }
        if dim is not None:
            doc["embedding"] = [rng.uniform(-1, 1) for _ in range(dim)]
        out.append((f"tenant{i % 10}/{prefix}{i}".encode(), orjson.dumps(doc)))
    return out


def access_msgs(
    n: int, memories: list[tuple[str, str]], rng: random.Random
) -> list[tuple[bytes, bytes]]:
    """``n`` recall events, each on a memory drawn from ``memories`` (tenant, id)."""
    out = []
    for i in range(n):
        tenant, memory_id = rng.choice(memories)
        doc = {
            "v": 1,
            "tenant_id": tenant,
            "memory_id": memory_id,
            "kind": "recall",
            "at": f"2026-03-01T12:{(i // 1000) % 60:02d}:00+00:00",
        }
        out.append((f"{tenant}/{memory_id}".encode(), orjson.dumps(doc)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--accesses", type=int, default=20_000)
    parser.add_argument("--writes", type=int, default=2_000)
    parser.add_argument("--embedded-writes", type=int, default=500)
    parser.add_argument("--logs", type=Path, help="copy the worker logs into this folder")
    parser.add_argument(
        "--milvus-server", action="store_true", help="sink to a Milvus server process, not Lite"
    )
    args = parser.parse_args()
    rng = random.Random(11)
    tenants = tuple(f"tenant{i}" for i in range(10))
    with contextlib.ExitStack() as resources:
        work = Path(resources.enter_context(tempfile.TemporaryDirectory()))
        bootstrap = resources.enter_context(kafka_broker(work / "kafka"))
        milvus_uri = str(work / "milvus.db")
        if args.milvus_server:
            milvus_uri = resources.enter_context(milvus_server(work / "milvus-server"))
        # 3a + 1: writes with vectors, then accesses, one worker
        stack = Stack(bootstrap, milvus_uri, work, tenants, dim=384)
        worker = WorkerProcess(stack).start()
        time.sleep(15)  # start-up and group join are not part of any figure
        writes = write_msgs(args.writes, stack.dim, rng, "m")
        t = time.monotonic()
        produce(bootstrap, stack.topic("memory-writes"), writes)
        wait_committed(stack, "memory-writes", args.writes)
        write_rate = args.writes / (time.monotonic() - t)
        memories = [(f"tenant{i % 10}", f"m{i}") for i in range(args.writes)]
        accesses = access_msgs(args.accesses, memories, rng)
        t = time.monotonic()
        produce(bootstrap, stack.topic("access-events"), accesses)
        wait_committed(stack, "access-events", args.accesses)
        access_rate = args.accesses / (time.monotonic() - t)
        raw_rate = raw_consume_rate(
            bootstrap, stack.topic("access-events"), stack.partitions, args.accesses
        )
        # 2: the same number of accesses again, waiting in the topic when the worker starts,
        # measured as the floor is (the figure above also carries the bench's own producing)
        worker.stop()
        produce(bootstrap, stack.topic("access-events"), access_msgs(args.accesses, memories, rng))
        worker = WorkerProcess(stack).start()
        drained_rate = drain_rate(stack, stack.app_id, args.accesses, args.accesses)
        worker.stop()
        floor_rate = faust_floor_rate(stack, work, 2 * args.accesses)
        # 3b: writes without vectors, embedded by MiniLM in the worker
        embedded = Stack(
            bootstrap, str(work / "milvus2.db"), work, tenants, dim=384, embedder="minilm"
        )
        worker = WorkerProcess(embedded).start()
        time.sleep(25)
        t = time.monotonic()
        produce(
            bootstrap,
            embedded.topic("memory-writes"),
            write_msgs(args.embedded_writes, None, rng, "e"),
        )
        wait_committed(embedded, "memory-writes", args.embedded_writes)
        embedded_rate = args.embedded_writes / (time.monotonic() - t)
        worker.stop()
        if args.logs is not None:
            args.logs.mkdir(parents=True, exist_ok=True)
            for log in work.glob("*.log"):
                shutil.copy(log, args.logs / log.name)
    rows = [
        (
            "access events/s, one worker, produced meanwhile"
            + (" (Milvus server)" if args.milvus_server else ""),
            f"{access_rate:,.0f}",
            args.accesses,
        ),
        ("raw aiokafka consume + JSON decode, same topic", f"{raw_rate:,.0f}", args.accesses),
        ("ratio worker / raw", f"{access_rate / raw_rate:.4f}", ""),
        ("access events/s, one worker, from a full topic", f"{drained_rate:,.0f}", args.accesses),
        (
            "minimal Faust agent, from the same full topic",
            f"{floor_rate:,.0f}",
            2 * args.accesses,
        ),
        ("ratio worker / minimal Faust agent (full topic)", f"{drained_rate / floor_rate:.2f}", ""),
        ("writes/s, 384-d vectors given", f"{write_rate:,.0f}", args.writes),
        (
            "writes/s, embedded by all-MiniLM-L6-v2 (CPU)",
            f"{embedded_rate:,.0f}",
            args.embedded_writes,
        ),
    ]
    for what, value, n in rows:
        print(f"{what:<50} {value:>10}  {n}")


if __name__ == "__main__":
    main()
