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
import itertools
import logging
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from aiokafka import AIOKafkaConsumer, TopicPartition

from memcore import MemoryState
from storage import Document, MemoryRow, MilvusStore, codec
from storage.kafka import KafkaConnection
from storage.key_log import ROLE as KEYS_ROLE
from storage.sealing import Erased, KeyRing, SealError
from streams.settings import WorkerSettings

CHUNK = 1000
log = logging.getLogger(__name__)


async def read_changelog(kafka: KafkaConnection | str, topic: str) -> dict[bytes, bytes]:
    """The last value of every key of a changelog topic (a tombstone removes its key)."""
    latest, _ = await read_changelog_to(kafka, topic)
    return latest


async def read_changelog_to(
    kafka: KafkaConnection | str, topic: str
) -> tuple[dict[bytes, bytes], dict[int, int]]:
    """:func:`read_changelog`, and where the read stopped: partition -> its end offset when the
    read began. Every record before it is in the read; a record written meanwhile may be too (a
    fetch returns what it finds), and reading it again from there is harmless to a last-value
    view (:meth:`ranker.view.StateView.seed`).
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
        return latest, {tp.partition: ends[tp] for tp in tps}
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
    memories_to: dict[int, int] = dataclasses.field(default_factory=dict)
    """Where the read of the memories changelog stopped: partition -> its end offset when the
    read began (see :func:`read_changelog_to`)."""

    @classmethod
    async def read(cls, settings: WorkerSettings) -> Tables:
        (memories, memories_to), documents, keys = await asyncio.gather(
            read_changelog_to(settings.kafka(), f"{settings.app_id}-memories-changelog"),
            read_changelog(settings.kafka(), f"{settings.app_id}-documents-changelog"),
            read_changelog(settings.kafka(), settings.topic(KEYS_ROLE)),
        )
        ring = KeyRing()
        for key, value in keys.items():
            ring.apply(key, value)
        return cls(memories, documents, ring, memories_to)

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
                "%d sealed documents left out: their keys are not on %s", unreadable, KEYS_ROLE
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
        super().__init__(f"{key}: {cause}; is the {KEYS_ROLE} topic readable here?")


def chunks(rows: Iterable[MemoryRow], size: int = CHUNK) -> Iterator[list[MemoryRow]]:
    """``rows`` in lists of ``size`` (the last may be shorter)."""
    it = iter(rows)
    while chunk := list(itertools.islice(it, size)):
        yield chunk


def write_rows(store: MilvusStore, tables: Tables, *, strict: bool = True) -> tuple[int, int]:
    """Upsert every memory's row from ``tables`` into a connected store, :data:`CHUNK` rows at a
    time, and delete purged ones; returns (rows upserted, purged rows deleted). Idempotent.
    ``strict``: see :meth:`Tables.iter_rows`.
    """
    upserted = 0
    for chunk in chunks(tables.iter_rows(strict=strict)):
        store.upsert(chunk)
        upserted += len(chunk)
    purged = tables.purged()
    by_tenant: dict[str, list[str]] = {}
    for tenant_id, memory_id in purged:
        by_tenant.setdefault(tenant_id, []).append(memory_id)
    for tenant_id, ids in by_tenant.items():
        store.delete(tenant_id, ids)
    return upserted, len(purged)


@dataclass(frozen=True)
class ResyncMarker:
    """A file in the worker's data directory, beside its tables, whose presence asks the next
    start-up for a full rewrite of Milvus (:func:`catch_up`): set when tables may have changed
    without their rows. A batch that fails after its reducer ran is such a case: Faust
    acknowledges its events all the same (``take_events`` acknowledges in a ``finally``), so they
    are never redelivered; rows Milvus refused are another.
    """

    path: Path

    @classmethod
    def of(cls, settings: WorkerSettings) -> ResyncMarker:
        return cls(settings.data_dir / f"{settings.app_id}.milvus-resync")

    def ask(self, reason: str) -> None:
        """Set the marker with ``reason``; logged, never raises (a failure to write it is
        logged as an error: the next start then relies on the count).
        """
        log.warning(
            "Milvus may lack rows of changed memories (%s): the next start rewrites all", reason
        )
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(reason + "\n", encoding="utf-8")
        except OSError:
            log.exception("could not write the resync marker %s", self.path)

    def reason(self) -> str | None:
        """Why a full rewrite was asked, or None when the marker is not set."""
        try:
            return self.path.read_text(encoding="utf-8").strip() or "asked"
        except FileNotFoundError:
            return None

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)


@contextmanager
def resync_on_failure(marker: ResyncMarker) -> Iterator[None]:
    """Around one batch of an agent: any exception escaping it (a cancellation included) sets
    ``marker`` before it propagates.
    """
    try:
        yield
    except BaseException as exc:
        marker.ask(f"a batch failed: {exc!r}")
        raise


Fill = Callable[[Iterable[Sequence[MemoryRow]]], object]
"""Takes every row the changelogs hold, in pages (the hot cache of ``python -m server``:
:meth:`ranker.hotcache.HotCache.fill`)."""


@dataclass(frozen=True)
class Resynced:
    """What a start-up resync found and did (counts of rows).

    Attributes:
        rows: rows the changelogs hold (memories with a readable document, not purged).
        stored: rows Milvus held before, every tenant and state.
        held: rows Milvus holds after (``stored`` when nothing was rewritten).
        upserted: rows written back: 0 when Milvus held as many rows as the changelogs (checked,
            not rewritten), else ``rows``.
        deleted: purged memories whose rows were deleted (0 when not rewritten).
        asked: why every row was rewritten whatever the count (``MNEMO_RESYNC=always``, the
            :class:`ResyncMarker`'s reason), or None.
    """

    rows: int
    stored: int
    held: int
    upserted: int
    deleted: int
    asked: str | None = None


def resync(
    settings: WorkerSettings,
    store: MilvusStore,
    *,
    into: Fill | None = None,
    read: Callable[[Tables], None] | None = None,
) -> Resynced:
    """At worker start-up, before Faust runs: make Milvus hold the row of every memory the
    changelogs hold (a lost or new collection, rows lost with Milvus's files). Reads the changelog
    topics directly (not the Faust tables: a read of them inside recovery stalled the streams);
    see :func:`catch_up`, with ``always`` from ``MNEMO_RESYNC`` and the worker's
    :class:`ResyncMarker`. ``read`` is handed the tables as read, before the check (``python -m
    server`` seeds its state view with them).
    """
    tables = asyncio.run(Tables.read(settings))
    if read is not None:
        read(tables)
    always = settings.resync == "always"
    return catch_up(store, tables, always=always, marker=ResyncMarker.of(settings), into=into)


def catch_up(
    store: MilvusStore,
    tables: Tables,
    *,
    always: bool = False,
    marker: ResyncMarker | None = None,
    into: Fill | None = None,
) -> Resynced:
    """Rewrite every row of ``tables`` into ``store`` (and delete purged ones) unless ``store``
    already holds exactly as many rows as ``tables`` has memories to serve; ``always`` or a set
    ``marker``: rewrite regardless (the marker is cleared once done). ``into`` is handed the
    rows as they are read (pages of :data:`CHUNK`), before the rewrite.

    The count suffices for the crash windows: an event's offset is committed only after its batch
    wrote its rows, or with the marker set when the batch failed; and an event redelivered after
    a kill -9 or a rebalance (its table write kept, its row perhaps not) rewrites its memory's row
    (:meth:`streams.processor.Processor.write`, ``access``, ``decision``). What the count catches
    is Milvus losing rows: a new or lost collection, lost files. It is blind to rows lost and as
    many extra kept at once (a purge's delete and a write both lost) and to a Milvus whose
    ``count(*)`` is wrong: ``MNEMO_RESYNC=always`` or ``mnemo rebuild`` rewrite all. Milvus rows
    a rewrite does not touch (a sealed document whose key this process cannot read, an erased
    memory not purged yet, another app's rows) keep the counts apart: every start rewrites
    then, as before this check existed. Raises ``StorageError`` when Milvus fails.
    """
    asked = marker.reason() if marker is not None else None
    if always:
        asked = "MNEMO_RESYNC=always"
    stored = store.total()
    if into is None:  # counted without building the rows
        counted = sum(1 for _ in tables.served(strict=False))
    else:
        counted = 0

        def pages() -> Iterator[list[MemoryRow]]:
            nonlocal counted
            for chunk in chunks(tables.iter_rows(strict=False)):
                counted += len(chunk)
                yield chunk

        taken = pages()
        into(taken)
        for _ in taken:  # whatever ``into`` left unread is still counted
            pass
    if counted == stored and asked is None:
        return Resynced(counted, stored, stored, 0, 0)
    upserted, deleted = write_rows(store, tables, strict=False)
    if marker is not None:
        marker.clear()
    return Resynced(counted, stored, store.total(), upserted, deleted, asked)


def rebuild(settings: WorkerSettings, tables: Tables, *, drop: bool) -> tuple[int, int]:
    """Write the tables' rows into the configured collection (dropped first with ``drop``);
    returns (rows upserted, purged rows deleted).
    """
    for _ in tables.served():  # raises Unreadable before anything is dropped
        pass
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
