"""``mnemo state-hash`` and ``mnemo rebuild``: the worker's tables as Kafka holds them.

The tables' changelog topics (``<app id>-memories-changelog``, ``<app id>-documents-changelog``)
are the durable copy of the worker's state: the last value of each key is the current state.

- ``state-hash`` prints a SHA-256 over the canonical encoding of every memory state, sorted by key
  (without the applied offsets, which are delivery bookkeeping: a replay into a new app id that
  meets the same events has the same hash).
- ``rebuild`` writes every memory's row from the tables into a Milvus collection (the configured
  one, or ``--collection`` for a new one: the migration path), deletes purged ones, and prints the
  hash. With Milvus Lite, run it while the server is stopped (one process per file); a starting
  worker also resyncs Milvus from the changelogs by itself (:func:`resync`).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import hashlib
import logging
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, TopicPartition

from storage import MemoryRow, MilvusStore, codec
from storage.kafka import KafkaConnection
from storage.key_log import ROLE as KEYS_ROLE
from storage.sealing import Erased, KeyRing, SealError
from streams.settings import WorkerSettings

CHUNK = 1000
log = logging.getLogger(__name__)


async def read_changelog(kafka: KafkaConnection | str, topic: str) -> dict[bytes, bytes]:
    """The last value of every key of a changelog topic (a tombstone removes its key)."""
    consumer = AIOKafkaConsumer(**KafkaConnection.of(kafka).client(), enable_auto_commit=False)
    await consumer.start()
    try:
        partitions = consumer.partitions_for_topic(topic)
        if partitions is None:
            await consumer._client.force_metadata_update()  # no public refresh
            partitions = consumer.partitions_for_topic(topic) or set()
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        latest: dict[bytes, bytes] = {}
        if not tps:
            return latest
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        todo = {tp for tp in tps if ends[tp] > 0}
        while todo:
            for records in (await consumer.getmany(*todo, timeout_ms=1000)).values():
                for record in records:
                    if record.key is None:
                        continue
                    if record.value is None:
                        latest.pop(record.key, None)
                    else:
                        latest[record.key] = record.value
            todo = {tp for tp in todo if await consumer.position(tp) < ends[tp]}
        return latest
    finally:
        await consumer.stop()


def state_hash(memories: Mapping[bytes, bytes]) -> str:
    """SHA-256 (hex) over ``key NUL canonical-state LF`` of every memory, sorted by key; the
    canonical state is the codec's encoding of the decoded state with its offsets emptied.
    """
    digest = hashlib.sha256()
    for key in sorted(memories):
        state = dataclasses.replace(codec.decode(memories[key]), offsets=())
        digest.update(key + b"\x00" + codec.encode(state) + b"\n")
    return digest.hexdigest()


@dataclass(frozen=True)
class Tables:
    """The memories and documents tables of one app id, as their changelogs hold them, and the
    data keys that open the sealed documents (the ``memory-keys`` topic).
    """

    memories: dict[bytes, bytes]
    documents: dict[bytes, bytes]
    keys: KeyRing = dataclasses.field(default_factory=KeyRing)

    @classmethod
    async def read(cls, settings: WorkerSettings) -> Tables:
        memories, documents, keys = await asyncio.gather(
            read_changelog(settings.kafka(), f"{settings.app_id}-memories-changelog"),
            read_changelog(settings.kafka(), f"{settings.app_id}-documents-changelog"),
            read_changelog(settings.kafka(), settings.topic(KEYS_ROLE)),
        )
        ring = KeyRing()
        for key, value in keys.items():
            ring.apply(key, value)
        return cls(memories, documents, ring)

    def rows(self, *, strict: bool = True) -> tuple[list[MemoryRow], list[tuple[str, str]]]:
        """Rows to upsert and (tenant, memory id) of purged memories; a state whose document
        is missing (never the case once its write is applied) or erased (the purge that follows
        an erasure deletes the row) is left out. A sealed document whose key is not on the keys
        topic raises Unreadable (``strict``: a rebuild must not drop what it cannot write back),
        else is logged and left out.
        """
        upserts: list[MemoryRow] = []
        purged: list[tuple[str, str]] = []
        unreadable = 0
        for key, raw in sorted(self.memories.items()):
            state = codec.decode(raw)
            if state.purged:
                purged.append((state.tenant_id, state.memory_id))
                continue
            raw_doc = self.documents.get(key)
            if raw_doc is None:
                continue
            memory = (state.tenant_id, state.memory_id)
            try:
                doc = codec.decode_document(raw_doc, self.keys, memory)
            except Erased:
                continue
            except SealError as exc:
                if strict:
                    raise Unreadable(key.decode(), exc) from exc
                unreadable += 1
                continue
            upserts.append(MemoryRow.of(state, doc))
        if unreadable:
            log.warning(
                "%d sealed documents left out: their keys are not on %s", unreadable, KEYS_ROLE
            )
        return upserts, purged


class Unreadable(Exception):  # noqa: N818 - the condition, as callers catch it
    """A sealed document whose data key is not on the keys topic (not erased: missing, or the
    topic not readable by this process): a rebuild would lose the memory's row.
    """

    def __init__(self, key: str, cause: Exception) -> None:
        super().__init__(f"{key}: {cause}; is the {KEYS_ROLE} topic readable here?")


def write_rows(store: MilvusStore, tables: Tables, *, strict: bool = True) -> tuple[int, int]:
    """Upsert every memory's row from ``tables`` into a connected store and delete purged ones;
    returns (rows upserted, purged rows deleted). Idempotent. ``strict``: see :meth:`Tables.rows`.
    """
    upserts, purged = tables.rows(strict=strict)
    for i in range(0, len(upserts), CHUNK):
        store.upsert(upserts[i : i + CHUNK])
    by_tenant: dict[str, list[str]] = {}
    for tenant_id, memory_id in purged:
        by_tenant.setdefault(tenant_id, []).append(memory_id)
    for tenant_id, ids in by_tenant.items():
        store.delete(tenant_id, ids)
    return len(upserts), len(purged)


def resync(settings: WorkerSettings, store: MilvusStore) -> tuple[int, int]:
    """At worker start-up, before Faust runs: make Milvus hold the row of every memory the
    changelogs hold (a row lost by a kill -9, a lost or new collection). Reads the changelog
    topics directly (not the Faust tables: a read of them inside recovery stalled the streams).
    """
    return write_rows(store, asyncio.run(Tables.read(settings)), strict=False)


def rebuild(settings: WorkerSettings, tables: Tables, *, drop: bool) -> tuple[int, int]:
    """Write the tables' rows into the configured collection (dropped first with ``drop``);
    returns (rows upserted, purged rows deleted).
    """
    tables.rows()  # raises Unreadable before anything is dropped
    store = MilvusStore(settings.milvus())
    store.connect()
    try:
        if drop:
            store.drop()
            store.close()
            store.connect()
        return write_rows(store, tables)
    finally:
        store.close()


def main(command: str, argv: list[str]) -> int:
    """``state-hash`` or ``rebuild`` with their options; prints the hash and the counts."""
    parser = argparse.ArgumentParser(
        prog=f"mnemo {command}",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--app-id", help="the worker's app id (default: MNEMO_APP_ID)")
    if command == "rebuild":
        parser.add_argument("--collection", help="write into this collection (default: configured)")
        parser.add_argument("--drop", action="store_true", help="drop the collection first")
    args = parser.parse_args(argv)
    overrides: dict[str, object] = {}
    if args.app_id:
        overrides["app_id"] = args.app_id
    if command == "rebuild" and args.collection:
        overrides["milvus_collection"] = args.collection
    settings = WorkerSettings(**overrides)  # type: ignore[arg-type]
    started = time.perf_counter()
    tables = asyncio.run(Tables.read(settings))
    if command == "rebuild":
        try:
            upserted, deleted = rebuild(settings, tables, drop=args.drop)
        except Unreadable as exc:
            print(f"not rebuilt (nothing dropped): {exc}", file=sys.stderr)
            return 2
        print(
            f"rebuilt {settings.milvus_collection}: {upserted} rows, {deleted} purged deleted "
            f"in {time.perf_counter() - started:.1f} s"
        )
    print(f"{state_hash(tables.memories)} {len(tables.memories)} memories")
    return 0
