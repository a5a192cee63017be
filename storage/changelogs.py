"""The worker's tables as their changelog topics hold them (compacted: the last value of each
key is the current value), read directly from Kafka.

The worker's start-up check (``streams.rebuild``), ``mnemo rebuild`` and ``state-hash`` read them
to rewrite Milvus; a ranker reads them to fill its hot cache without a pass over Milvus
(``ranker.__main__``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Literal

from aiokafka import AIOKafkaConsumer, TopicPartition

from memcore import MemoryState
from storage import codec
from storage.kafka import KafkaConnection
from storage.key_log import ROLE as KEY_ROLE
from storage.rows import Document, MemoryRow
from storage.sealing import Erased, KeyRing, SealError

CHUNK = 1000
log = logging.getLogger(__name__)


def changelog_topic(app_id: str, table: Literal["memories", "documents"]) -> str:
    """The changelog topic of the worker's ``table`` (Faust names it)."""
    return f"{app_id}-{table}-changelog"


async def read_changelog(kafka: KafkaConnection | str, topic: str) -> dict[bytes, bytes]:
    """The last value of every key of a changelog topic (a tombstone removes its key)."""
    latest, _ = await read_changelog_to(kafka, topic)
    return latest


async def read_changelog_to(
    kafka: KafkaConnection | str, topic: str, start: Mapping[int, int] | None = None
) -> tuple[dict[bytes, bytes], dict[int, int]]:
    """:func:`read_changelog`, and where the read stopped: partition -> its end offset when the
    read began. Every record before it is in the read; a record written meanwhile may be too (a
    fetch returns what it finds), and reading it again from there is harmless to a last-value
    view (:meth:`ranker.view.StateView.seed`). ``start``: read each partition from this offset
    (partition -> offset, e.g. where an earlier read stopped), not from its beginning: the keys
    written since, each with its last value (a tombstone removes a key only when its earlier
    value is in the read too).
    """
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
            return latest, {}
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        for tp in tps:
            if start and start.get(tp.partition):
                consumer.seek(tp, start[tp.partition])
        ends = await consumer.end_offsets(tps)
        todo = {tp for tp in tps if ends[tp] > (start or {}).get(tp.partition, 0)}
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
        return latest, {tp.partition: ends[tp] for tp in tps}
    finally:
        await consumer.stop()


@dataclass(frozen=True)
class Tables:
    """The memories and documents tables of one app id, as their changelogs hold them, and the
    data keys that open the sealed documents (the ``memory-keys`` topic).
    """

    memories: dict[bytes, bytes]
    documents: dict[bytes, bytes]
    keys: KeyRing = dataclasses.field(default_factory=KeyRing)
    memories_to: dict[int, int] = dataclasses.field(default_factory=dict)
    """Where the read of the memories changelog stopped: partition -> its end offset when the
    read began (see :func:`read_changelog_to`)."""
    documents_to: dict[int, int] = dataclasses.field(default_factory=dict)
    """Where the read of the documents changelog stopped, likewise."""

    @classmethod
    async def read(
        cls,
        kafka: KafkaConnection | str,
        app_id: str,
        keys_topic: str,
        *,
        states_first: bool = False,
    ) -> Tables:
        """Read the changelogs of ``app_id``'s tables and the data keys on ``keys_topic``.
        ``states_first``: the documents only once the memories changelog is read, for a reader
        while the worker runs (its table writes of one batch land on both topics about together):
        a state's document is then at least as new as the state but for a record the worker's
        producer held back for longer than the states' read took (:func:`stale_documents` finds
        those). Raises aiokafka's ``KafkaError`` when the broker fails.
        """
        memories_read = read_changelog_to(kafka, changelog_topic(app_id, "memories"))
        if states_first:
            memories, memories_to = await memories_read
            (documents, documents_to), keys = await asyncio.gather(
                read_changelog_to(kafka, changelog_topic(app_id, "documents")),
                read_changelog(kafka, keys_topic),
            )
        else:
            (memories, memories_to), (documents, documents_to), keys = await asyncio.gather(
                memories_read,
                read_changelog_to(kafka, changelog_topic(app_id, "documents")),
                read_changelog(kafka, keys_topic),
            )
        ring = KeyRing()
        for key, value in keys.items():
            ring.apply(key, value)
        return cls(memories, documents, ring, memories_to, documents_to)

    def undocumented(self) -> list[tuple[str, str]]:
        """(tenant, memory id) of every memory not purged whose document the read does not hold
        (written after the read of the documents ended: see :meth:`read`), in key order.
        """
        out = []
        for key, raw in sorted(self.memories.items()):
            if key not in self.documents:
                state = codec.decode(raw)
                if not state.purged:
                    out.append((state.tenant_id, state.memory_id))
        return out

    def rows(self, *, strict: bool = True) -> tuple[list[MemoryRow], list[tuple[str, str]]]:
        """Rows to upsert (:meth:`iter_rows`) and (tenant, memory id) of purged memories."""
        return list(self.iter_rows(strict=strict)), self.purged()

    def iter_rows(self, *, strict: bool = True) -> Iterator[MemoryRow]:
        """The row of every memory :meth:`served` yields, built as it is taken."""
        return itertools.starmap(MemoryRow.of, self.served(strict=strict))

    def served(self, *, strict: bool = True) -> Iterator[tuple[MemoryState, Document]]:
        """The state and opened document of every memory Milvus serves, in key order. A state
        whose document is missing (never the case once its write is applied) or erased (the
        purge that follows an erasure deletes the row) is left out, as is a purged one. A sealed
        document whose key is not on the keys topic raises Unreadable (``strict``: a rebuild
        must not drop what it cannot write back), else is logged and left out.
        """
        unreadable = 0
        for key, raw in sorted(self.memories.items()):
            state = codec.decode(raw)
            raw_doc = self.documents.get(key)
            if state.purged or raw_doc is None:
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
            yield state, doc
        if unreadable:
            log.warning(
                "%d sealed documents left out: their keys are not on %s", unreadable, KEY_ROLE
            )

    def purged(self) -> list[tuple[str, str]]:
        """(tenant, memory id) of every purged memory, in key order."""
        states = (codec.decode(raw) for _, raw in sorted(self.memories.items()))
        return [(s.tenant_id, s.memory_id) for s in states if s.purged]


class Unreadable(Exception):  # noqa: N818 - the condition, as callers catch it
    """A sealed document whose data key is not on the keys topic (not erased: missing, or the
    topic not readable by this process): a rebuild would lose the memory's row.
    """

    def __init__(self, key: str, cause: Exception) -> None:
        super().__init__(f"{key}: {cause}; is the {KEY_ROLE} topic readable here?")


def chunks(rows: Iterable[MemoryRow], size: int = CHUNK) -> Iterator[list[MemoryRow]]:
    """``rows`` in lists of ``size`` (the last may be shorter)."""
    it = iter(rows)
    while chunk := list(itertools.islice(it, size)):
        yield chunk
