"""Write three memories and record a recall of one, straight to Kafka, through a running `make up`
stack; print the audit trail of the three.

    .venv/bin/python scripts/demo.py [--bootstrap 127.0.0.1:9092] [--tenant demo]

Apps use the HTTP API (README, "Quick start"); this shows the log beneath it: JSON records keyed
``tenant_id/memory_id`` on ``memory-writes`` and ``access-events``, and the worker's records of
what it decided on ``audit`` (a plain access counts, and decides nothing to audit).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from datetime import UTC, datetime
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaError

from memcore import derive_memory_id

NOTES = [
    "remember: Alice prefers Python for backend work",
    "The team lunch is on Friday at noon",
    "Important: the staging password rotates every 30 days!",
]


def records(tenant: str, now: datetime) -> list[tuple[str, bytes, bytes]]:
    """(topic, key, value) of the three writes and the recall of the first, dated ``now`` (an
    app's clock: the writer chooses the event time; the worker refuses one past its allowed skew,
    300 s, after the record reached Kafka).
    """
    out = []
    for text in NOTES:
        memory_id = derive_memory_id(tenant, text)
        write = {"v": 1, "tenant_id": tenant, "memory_id": memory_id, "content": text}
        out.append(("memory-writes", memory_id, {**write, "at": now.isoformat()}))
    first = out[0][1]
    access = {"v": 1, "tenant_id": tenant, "memory_id": first, "kind": "recall"}
    out.append(("access-events", first, {**access, "at": now.isoformat()}))
    return [(topic, f"{tenant}/{m}".encode(), orjson.dumps(value)) for topic, m, value in out]


async def main(bootstrap: str, tenant: str, prefix: str) -> None:
    """Produce the writes and the recall, then print their audit records (60 s at most)."""
    produced = records(tenant, datetime.now(UTC))
    ids = [key.decode().partition("/")[2] for topic, key, _ in produced if topic == "memory-writes"]
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    try:  # stopped also when it did not start (else aiokafka warns it is unclosed)
        await producer.start()
        for topic, key, value in produced:
            await producer.send_and_wait(f"{prefix}{topic}", key=key, value=value)
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(
        f"{prefix}audit",
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    told: set[str] = set()
    try:
        await consumer.start()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while loop.time() < deadline:
            for batch in (await consumer.getmany(timeout_ms=1000)).values():
                for r in batch:
                    line = describe(orjson.loads(r.value), ids, tenant)
                    if line is not None:
                        told.add(line.split()[0])
                        print(line)
            if len(told) == len(ids):  # every memory of this run has its record, and the
                deadline = min(deadline, loop.time() + 3)  # ones the same events made follow
    finally:
        await consumer.stop()


def describe(audit: dict[str, Any], ids: list[str], tenant: str) -> str | None:
    """One line for an audit record about one of ``ids``; None for any other record (another
    memory's, another tenant's, or a consolidation report, which names no memory).
    """
    memory_id = audit.get("memory_id")
    if memory_id not in ids or audit.get("tenant_id") != tenant:
        return None
    after = audit.get("after") or {}
    return (
        f"{memory_id}  {audit.get('kind', '?'):<11} {after.get('tier', '?'):<9} "
        f"importance {after.get('importance', 0.0):.2f}  recalls {after.get('recall_count', 0)}  "
        f"({audit.get('reason', '')})"
    )


def cli(argv: list[str] | None = None) -> int:
    """Run the demo; exit 1 with one line when the broker cannot be reached (no traceback)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--tenant", default="demo")
    parser.add_argument("--topic-prefix", default="")
    args = parser.parse_args(argv)
    try:
        asyncio.run(main(args.bootstrap, args.tenant, args.topic_prefix))
    except (KafkaError, OSError) as exc:
        print(
            f"cannot reach Kafka at {args.bootstrap} (is `make up` running?): {exc}",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(cli())
