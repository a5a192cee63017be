"""The worker's tables as their changelog topics hold them (compacted: the last value of each
key is the current value), read directly from Kafka.

The worker's start-up check (``streams.rebuild``), ``mnemo rebuild`` and ``state-hash`` read them
to rewrite Milvus; a ranker reads them to fill its hot cache without a pass over Milvus
(``ranker.warmup``: the documents streamed by, :class:`ChangelogStream` and
:class:`DocumentRows`, never held whole).
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
from collections.abc import Collection, Generator, Iterable, Iterator, Mapping
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaTimeoutError

from memcore import MemoryState
from storage import codec
from storage.kafka import KafkaConnection
from storage.key_log import ROLE as KEY_ROLE
from storage.rows import Document, MemoryRow
from storage.sealing import Erased, KeyRing, SealError

CHUNK = 1000
STALL_S = 120
"""A read that fetches nothing for this long (s) while records remain before its end offsets
raises aiokafka's KafkaTimeoutError."""
log = logging.getLogger(__name__)


def changelog_topic(app_id: str, table: str) -> str:
    """The changelog topic of the worker's ``table`` (``memories``, ``documents``, ...: Faust
    names it).
    """
    return f"{app_id}-{table}-changelog"


async def read_changelog(kafka: KafkaConnection | str, topic: str) -> dict[bytes, bytes]:
    """The last value of every key of a changelog topic (a tombstone removes its key)."""
    latest, _ = await read_changelog_to(kafka, topic)
    return latest


Record = tuple[bytes, bytes | None]
"""A changelog record: its key and its value (None: a tombstone)."""


class _Scan:
    """A consumer of every partition of one topic (assigned, no group), from ``start`` (partition
    -> offset; else the beginning) to the end offsets when :meth:`open` ran (:attr:`ends`).
    """

    def __init__(
        self, kafka: KafkaConnection | str, topic: str, start: Mapping[int, int] | None
    ) -> None:
        self.topic = topic
        self.start = dict(start or {})
        self.ends: dict[int, int] = {}
        self.kafka = KafkaConnection.of(kafka)
        self._consumer: AIOKafkaConsumer | None = None
        self._todo: set[TopicPartition] = set()
        self._to: dict[TopicPartition, int] = {}
        self._idle_s = 0  # seconds of empty fetches in a row (one fetch waits 1 s at most)

    async def open(self) -> None:
        """Connect (on the running loop) and find the partitions and their end offsets."""
        consumer = self._consumer = AIOKafkaConsumer(
            **self.kafka.client(), enable_auto_commit=False
        )
        await consumer.start()
        partitions = consumer.partitions_for_topic(self.topic)
        if partitions is None:
            await consumer._client.force_metadata_update()  # no public refresh
            partitions = consumer.partitions_for_topic(self.topic) or set()
        tps = [TopicPartition(self.topic, p) for p in sorted(partitions)]
        if not tps:
            return
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        for tp in tps:
            if self.start.get(tp.partition):
                consumer.seek(tp, self.start[tp.partition])
        self._to = await consumer.end_offsets(tps)
        self.ends = {tp.partition: end for tp, end in self._to.items()}
        self._todo = {tp for tp in tps if self._to[tp] > self.start.get(tp.partition, 0)}

    async def batch(self) -> list[Record] | None:
        """The records of the next fetch (keyless ones left out; empty when none came within a
        second), in offset order per partition; None once every partition is read to its end
        offset.
        """
        consumer = self._consumer
        assert consumer is not None, "open() first"
        if not self._todo:
            return None
        fetched = await consumer.getmany(*self._todo, timeout_ms=1000)
        self._todo = {tp for tp in self._todo if await consumer.position(tp) < self._to[tp]}
        self._idle_s = 0 if fetched else self._idle_s + 1
        if self._todo and self._idle_s >= STALL_S:
            # a broker down answers empty fetches, not errors: a read would wait forever
            raise KafkaTimeoutError(
                f"{self.topic}: no record for {STALL_S} s, {len(self._todo)} partitions short"
                " of their end offsets"
            )
        return [
            (record.key, record.value)
            for records in fetched.values()
            for record in records
            if record.key is not None
        ]

    async def close(self) -> None:
        if self._consumer is not None:
            await self._consumer.stop()


async def read_changelog_to(
    kafka: KafkaConnection | str, topic: str, start: Mapping[int, int] | None = None
) -> tuple[dict[bytes, bytes], dict[int, int]]:
    """:func:`read_changes` without the keys removed."""
    latest, _, ends = await read_changes(kafka, topic, start)
    return latest, ends


async def read_changes(
    kafka: KafkaConnection | str, topic: str, start: Mapping[int, int] | None = None
) -> tuple[dict[bytes, bytes], set[bytes], dict[int, int]]:
    """:func:`read_changelog`, and where the read stopped: partition -> its end offset when the
    read began. Every record before it is in the read; a record written meanwhile may be too (a
    fetch returns what it finds), and reading it again from there is harmless to a last-value
    view (:meth:`ranker.view.StateView.seed`). ``start``: read each partition from this offset
    (partition -> offset, e.g. where an earlier read stopped), not from its beginning: the keys
    written since, each with its last value (a tombstone removes a key only when its earlier
    value is in the read too; the keys whose last record in the read is a tombstone are returned
    apart, for a caller that merges the read into an earlier one). Raises aiokafka's
    ``KafkaError`` when the broker fails, and its ``KafkaTimeoutError`` when nothing comes for
    :data:`STALL_S` short of the end.
    """
    scan = _Scan(kafka, topic, start)
    try:
        await scan.open()
        latest: dict[bytes, bytes] = {}
        removed: set[bytes] = set()
        while (records := await scan.batch()) is not None:
            for key, value in records:
                if value is None:
                    latest.pop(key, None)
                    removed.add(key)
                else:
                    latest[key] = value
                    removed.discard(key)
        return latest, removed, scan.ends
    finally:
        await scan.close()


class ChangelogStream:
    """A changelog's records as an iterator of fetched batches (:data:`Record` lists, offset
    order per partition; an empty one after a second without records, so the consumer can check
    whether to stop), for a thread that consumes them as they come instead of holding the topic
    (the read runs on an event loop of the iterating thread's own). Blocking; raises
    aiokafka's ``KafkaError`` when the broker fails. :attr:`ends`: where the read stops (set
    once iteration began). Closing the iterator early (``close()``, or leaving a ``for`` by an
    exception) stops the consumer.
    """

    def __init__(
        self, kafka: KafkaConnection | str, topic: str, start: Mapping[int, int] | None = None
    ) -> None:
        self.kafka = kafka
        self.topic = topic
        self.start = start
        self.ends: dict[int, int] = {}

    def __iter__(self) -> Generator[list[Record], None, None]:
        loop = asyncio.new_event_loop()
        try:
            scan = _Scan(self.kafka, self.topic, self.start)  # its consumer binds to this loop
            try:
                loop.run_until_complete(scan.open())
                self.ends = scan.ends
                while (records := loop.run_until_complete(scan.batch())) is not None:
                    yield records
            finally:
                loop.run_until_complete(scan.close())
        finally:
            loop.close()


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
    keys_to: dict[int, int] = dataclasses.field(default_factory=dict)
    """Where the reads of the documents changelog and of the keys topic stopped."""

    @classmethod
    async def read(cls, kafka: KafkaConnection | str, app_id: str, keys_topic: str) -> Tables:
        """Read the changelogs of ``app_id``'s tables and the data keys on ``keys_topic``
        (all three at once). Raises aiokafka's ``KafkaError`` when the broker fails.
        """
        (memories, memories_to), (documents, documents_to), (keys, keys_to) = await asyncio.gather(
            read_changelog_to(kafka, changelog_topic(app_id, "memories")),
            read_changelog_to(kafka, changelog_topic(app_id, "documents")),
            read_changelog_to(kafka, keys_topic),
        )
        return cls(memories, documents, key_ring(keys), memories_to, documents_to, keys_to)

    async def since(
        self, kafka: KafkaConnection | str, app_id: str, keys_topic: str
    ) -> tuple[Tables, set[bytes]]:
        """These tables brought up to date (each topic read on from where this read stopped:
        what other workers wrote meanwhile), and the memory keys whose state or document
        changed since. The data keys read are added to :attr:`keys` (shared). Raises as
        :meth:`read`.
        """
        (
            (memories, _, memories_to),
            (documents, gone, documents_to),
            (keys, _, keys_to),
        ) = await asyncio.gather(
            read_changes(kafka, changelog_topic(app_id, "memories"), self.memories_to),
            read_changes(kafka, changelog_topic(app_id, "documents"), self.documents_to),
            read_changes(kafka, keys_topic, self.keys_to),
        )
        for key, value in keys.items():
            self.keys.apply(key, value)
        merged_documents = {k: v for k, v in self.documents.items() if k not in gone}
        merged_documents.update(documents)
        now = Tables(
            {**self.memories, **memories},
            merged_documents,
            self.keys,
            memories_to or self.memories_to,
            documents_to or self.documents_to,
            keys_to or self.keys_to,
        )
        return now, set(memories) | set(documents) | gone

    def only(self, keys: Collection[bytes]) -> Tables:
        """These tables restricted to the memories of ``keys`` (their rows, their purges)."""
        return dataclasses.replace(
            self,
            memories={k: v for k, v in self.memories.items() if k in keys},
            documents={k: v for k, v in self.documents.items() if k in keys},
        )

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


def key_ring(keys: Mapping[bytes, bytes]) -> KeyRing:
    """The data keys a read of the keys topic holds."""
    ring = KeyRing()
    for key, value in keys.items():
        ring.apply(key, value)
    return ring


class DocumentRows:
    """The rows of memories as their documents stream by (:class:`ChangelogStream` over the
    documents changelog), each with the memory's state from ``states`` (the memories changelog,
    read before): a fill that never holds the documents (the bulk of the tables, ~2 KB a memory
    at 384 dimensions). A key's later document record replaces its row (a taker keyed by memory,
    like the hot cache, ends with the last). Left out, as :meth:`Tables.served` leaves them: a
    purged or erased memory, a document whose state is not in ``states`` (a memory newer than
    their read), and a sealed document whose key ``keys`` lacks (counted in
    :attr:`unreadable`; it stays unseen: see :meth:`unseen`).
    """

    def __init__(self, states: Mapping[bytes, bytes], keys: KeyRing) -> None:
        self.states = states
        self.keys = keys
        self.seen: set[bytes] = set()
        self.unreadable = 0

    def pages(
        self, batches: Iterable[list[Record]], size: int = CHUNK
    ) -> Generator[list[MemoryRow], None, None]:
        """Rows in lists of ``size`` (the last may be shorter), as ``batches`` come."""
        page: list[MemoryRow] = []
        for batch in batches:
            for key, raw in batch:
                row = self._row(key, raw)
                if row is not None:
                    page.append(row)
                    if len(page) >= size:
                        yield page
                        page = []
        if page:
            yield page

    def _row(self, key: bytes, raw: bytes | None) -> MemoryRow | None:
        raw_state = self.states.get(key)
        if raw is None or raw_state is None:
            return None
        state = codec.decode(raw_state)
        if state.purged:
            return None
        try:
            doc = codec.decode_document(raw, self.keys, (state.tenant_id, state.memory_id))
        except Erased:
            self.seen.add(key)  # met: there is no row to serve
            return None
        except SealError:
            self.unreadable += 1
            self.seen.discard(key)  # an earlier version it opened is stale now: unseen
            return None
        self.seen.add(key)
        return MemoryRow.of(state, doc)

    def unseen(self) -> list[bytes]:
        """Keys of the memories in ``states`` (not purged) whose document the stream did not
        bring: written after it ended, or sealed under a key this reader lacks.
        """
        return [
            key
            for key, raw in self.states.items()
            if key not in self.seen and not codec.decode(raw).purged
        ]
