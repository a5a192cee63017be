"""The framework's floor: a minimal Faust agent that only counts events per key into a
changelogged table, consumed and committed the way the worker does (batches of up to 1,000 events,
RocksDB table, at-least-once). Not a test; ``bench.streams`` starts it as a process and compares.

    python -m bench.faust_floor BOOTSTRAP TOPIC APP_ID DATA_DIR PARTITIONS
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from typing import Any

import faust

from streams.app import processing


def build(bootstrap: str, topic: str, app_id: str, data_dir: str, partitions: int) -> faust.App:
    """The app: one agent, one table of counts by key."""
    app = faust.App(
        app_id,
        broker=f"kafka://{bootstrap}",
        store="rocksdb://",
        datadir=data_dir,
        topic_partitions=partitions,
        topic_replication_factor=1,
        broker_commit_interval=1.0,
        consumer_auto_offset_reset="earliest",
        web_enabled=False,
        stream_buffer_maxsize=4096,
        broker_max_poll_records=1000,
    )
    source = app.topic(topic, key_serializer="raw", value_serializer="raw")
    counts = app.Table(
        "counts",
        default=int,
        partitions=partitions,
        key_type=bytes,
        value_type=int,
        schema=faust.Schema(key_serializer="raw", value_serializer="json"),
    )

    @app.agent(source, name=f"{app_id}-count")
    async def count(stream: Any) -> AsyncIterator[None]:  # noqa: ANN401 - faust stream
        async for events in stream.take_events(1000, within=0.1):
            for event in events:
                with processing(event):
                    counts[event.message.key] += 1
            yield None

    @app.task  # type: ignore[untyped-decorator]
    async def buffer() -> None:
        app.producer.buffer.max_messages = 4000  # as the worker sets it

    return app


def main() -> None:
    """Run the app as a Faust worker with the arguments of the module docstring."""
    bootstrap, topic, app_id, data_dir, partitions = sys.argv[1:6]
    sys.argv = [sys.argv[0], "worker", "-l", "warn"]  # Faust reads its own command line
    build(bootstrap, topic, app_id, data_dir, int(partitions)).main()


if __name__ == "__main__":
    main()
