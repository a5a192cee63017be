"""Write three memories and recall one through a running `make up` stack; print the audit trail.

    .venv/bin/python scripts/demo.py [--bootstrap 127.0.0.1:9092] [--tenant demo]

Until the ranker (issue #4) serves HTTP, apps produce to Kafka as this script does: a JSON record,
keyed ``tenant_id/memory_id``, on ``memory-writes`` and ``access-events``.
"""

from __future__ import annotations

import argparse
import asyncio
from datetime import UTC, datetime, timedelta

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from memcore import derive_memory_id

NOTES = [
    "remember: Alice prefers Python for backend work",
    "The team lunch is on Friday at noon",
    "Important: the staging password rotates every 30 days!",
]


async def main(bootstrap: str, tenant: str, prefix: str) -> None:
    """Produce the writes and the recall, then print their audit records (60 s at most)."""
    now = datetime.now(UTC)  # an app's clock: event time is chosen by the writer, not the worker
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    ids = []
    try:
        for text in NOTES:
            memory_id = derive_memory_id(tenant, text)
            ids.append(memory_id)
            write = {
                "v": 1,
                "tenant_id": tenant,
                "memory_id": memory_id,
                "content": text,
                "at": now.isoformat(),
            }
            await producer.send_and_wait(
                f"{prefix}memory-writes",
                key=f"{tenant}/{memory_id}".encode(),
                value=orjson.dumps(write),
            )
        access = {
            "v": 1,
            "tenant_id": tenant,
            "memory_id": ids[0],
            "kind": "recall",
            "at": (now + timedelta(hours=2)).isoformat(),
        }
        await producer.send_and_wait(
            f"{prefix}access-events", key=f"{tenant}/{ids[0]}".encode(), value=orjson.dumps(access)
        )
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(
        f"{prefix}audit",
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    seen = 0
    try:
        deadline = asyncio.get_running_loop().time() + 60
        while seen < len(NOTES) + 1 and asyncio.get_running_loop().time() < deadline:
            for records in (await consumer.getmany(timeout_ms=1000)).values():
                for r in records:
                    audit = orjson.loads(r.value)
                    if audit["memory_id"] in ids and audit["tenant_id"] == tenant:
                        seen += 1
                        after = audit["after"]
                        print(
                            f"{audit['memory_id'][:14]}  {audit['kind']:<11} {after['tier']:<9} "
                            f"importance {after['importance']:.2f}  recalls {after['recall_count']}  "
                            f"({audit['reason']})"
                        )
    finally:
        await consumer.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--tenant", default="demo")
    parser.add_argument("--topic-prefix", default="")
    args = parser.parse_args()
    asyncio.run(main(args.bootstrap, args.tenant, args.topic_prefix))
