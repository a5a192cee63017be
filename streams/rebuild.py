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
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from storage import MemoryRow, MilvusStore, StorageError, codec
from storage.changelogs import Tables, Unreadable, changelog_topic, chunks
from storage.key_log import ROLE as KEYS_ROLE
from storage.usage import load_settings, plain
from streams.settings import WorkerSettings

log = logging.getLogger(__name__)


def state_hash(memories: Mapping[bytes, bytes]) -> str:
    """SHA-256 (hex) over ``key NUL canonical-state LF`` of every memory, sorted by key; the
    canonical state is the codec's encoding of the decoded state with its offsets emptied.
    """
    digest = hashlib.sha256()
    for key in sorted(memories):
        state = dataclasses.replace(codec.decode(memories[key]), offsets=())
        digest.update(key + b"\x00" + codec.encode(state) + b"\n")
    return digest.hexdigest()


def write_rows(store: MilvusStore, tables: Tables, *, strict: bool = True) -> tuple[int, int]:
    """Upsert every memory's row from ``tables`` into a connected store,
    :data:`storage.changelogs.CHUNK` rows at a time, and delete purged ones; returns (rows
    upserted, purged rows deleted). Idempotent. ``strict``: see :meth:`Tables.iter_rows`. A row
    Milvus refuses is logged and left out (:func:`upsert_each`); a retriable error is raised.
    """
    upserted = 0
    for chunk in chunks(tables.iter_rows(strict=strict)):
        upserted += upsert_each(store, chunk)
    purged = tables.purged()
    by_tenant: dict[str, list[str]] = {}
    for tenant_id, memory_id in purged:
        by_tenant.setdefault(tenant_id, []).append(memory_id)
    for tenant_id, ids in by_tenant.items():
        store.delete(tenant_id, ids)
    return upserted, len(purged)


def upsert_each(store: MilvusStore, rows: Sequence[MemoryRow]) -> int:
    """Upsert ``rows``; returns how many Milvus took. When it refuses them (not retriable), each
    row alone: a row it still refuses is logged and left out, never failing the others or the
    start (as :meth:`streams.app.StreamWorker.upsert` does for a batch). Raises a retriable
    ``StorageError`` (Milvus unavailable).
    """
    try:
        store.upsert(rows)
    except StorageError as exc:
        if exc.retriable:
            raise
        if len(rows) == 1:
            log.error("Milvus refused the row of %s; left out: %s", rows[0].key, exc)
            return 0
        log.warning("Milvus refused %d rows (%s); upserting one by one", len(rows), exc)
        return sum(upsert_each(store, [row]) for row in rows)
    return len(rows)


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
            not rewritten), else ``rows`` less those Milvus refused (logged, left out).
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


async def _has_tables(settings: WorkerSettings) -> bool:
    """Whether the ``memories`` changelog of ``settings``' app id exists. A missing topic reads
    as empty tables: with a mistyped app id, ``rebuild --drop`` emptied the live collection and
    ``state-hash`` hashed nothing, both answering 0.
    """
    admin = AIOKafkaAdminClient(**settings.kafka().client())
    await admin.start()
    try:
        return changelog_topic(settings.app_id, "memories") in await admin.list_topics()
    finally:
        await admin.close()


async def read_tables(settings: WorkerSettings) -> Tables:
    """The worker's tables as their changelogs hold them (``settings``' app id and keys topic)."""
    return await Tables.read(settings.kafka(), settings.app_id, settings.topic(KEYS_ROLE))


Refresh = Callable[[Tables], tuple[Tables, set[bytes]]]
"""Tables brought up to date, and the memory keys changed since (:meth:`Tables.since`)."""

SETTLE_ROUNDS = 8
"""How many times a rewrite reads the changelogs on and writes again the rows of memories that
changed meanwhile, at most (:func:`settle`)."""


def settle(
    store: MilvusStore, tables: Tables, refresh: Refresh, rounds: int = SETTLE_ROUNDS
) -> Tables:
    """After every row of ``tables`` was written: other workers may have changed memories since
    the tables were read (a pod starting beside running ones) and written their rows before
    ours, which the snapshot's then overwrote (an older version, a purged memory back). Read the
    changelogs on (``refresh``) and write again, from their newest state, the rows of the
    memories that changed since (their purges as purges), until a read finds none of the rows
    just written changed again: a change made after a round's read is written by its own worker
    after its changelog record, or met by the next read. Returns the tables as last read; after
    ``rounds`` with changes still coming, logs a warning (``mnemo rebuild`` with the workers
    stopped writes every row from a still log). Raises as :func:`write_rows` and ``refresh``.
    """
    written: set[bytes] | None = None  # None: every row (the rewrite that came before)
    for _ in range(rounds):
        tables, changed = refresh(tables)
        todo = changed if written is None else changed & written
        if not todo:
            return tables
        write_rows(store, tables.only(todo), strict=False)
        written = todo
    log.warning(
        "memories still changing after %d rounds of catching up: their rows may be a version"
        " behind until they change again",
        rounds,
    )
    return tables


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
    tables = asyncio.run(read_tables(settings))
    if read is not None:
        read(tables)
    always = settings.resync == "always"

    def refresh(tables: Tables) -> tuple[Tables, set[bytes]]:
        return asyncio.run(
            tables.since(settings.kafka(), settings.app_id, settings.topic(KEYS_ROLE))
        )

    marker = ResyncMarker.of(settings)
    return catch_up(store, tables, always=always, marker=marker, into=into, refresh=refresh)


def catch_up(
    store: MilvusStore,
    tables: Tables,
    *,
    always: bool = False,
    marker: ResyncMarker | None = None,
    into: Fill | None = None,
    refresh: Refresh | None = None,
) -> Resynced:
    """Rewrite every row of ``tables`` into ``store`` (and delete purged ones) unless ``store``
    already holds exactly as many rows as ``tables`` has memories to serve; ``always`` or a set
    ``marker``: rewrite regardless (the marker is cleared once done). ``into`` is handed the
    rows as they are read (pages of :data:`storage.changelogs.CHUNK`), before the rewrite.
    ``refresh``: after a rewrite, the rows of memories changed since ``tables`` were read are
    written again from their newest state (:func:`settle`); without it, ``tables`` must be still
    (no other worker running).

    The count suffices for the crash windows: an event's offset is committed only after its batch
    wrote its rows, or with the marker set when the batch failed; and an event redelivered after
    a kill -9 or a rebalance (its table write kept, its row perhaps not) rewrites its memory's row
    (:meth:`streams.processor.Processor.write`, ``access``, ``decision``). What the count catches
    is Milvus losing rows: a new or lost collection, lost files. It is blind to rows lost and as
    many extra kept at once (a purge's delete and a write both lost) and to a Milvus whose
    ``count(*)`` is wrong: ``MNEMO_RESYNC=always`` or ``mnemo rebuild`` rewrite all. Milvus rows
    a rewrite does not touch (a sealed document whose key this process cannot read, an erased
    memory not purged yet, another app's rows) keep the counts apart: every start rewrites
    then, as before this check existed. A row Milvus refuses is logged and left out (the start
    goes on; its absence keeps the counts apart, so the next start rewrites again). Raises
    ``StorageError`` when Milvus is unavailable.
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
    if refresh is not None:
        settle(store, tables, refresh)
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


def main(command: str, argv: list[str], prog: str | None = None) -> int:
    """``state-hash`` or ``rebuild`` with their options; prints the hash and the counts. ``prog``
    names the command in its usage and errors (default: ``python -m streams COMMAND``).
    """
    parser = argparse.ArgumentParser(
        prog=prog or f"python -m streams {command}",
        description=plain(__doc__),
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
    settings = load_settings(WorkerSettings).model_copy(update=overrides)
    started = time.perf_counter()
    try:
        if not asyncio.run(_has_tables(settings)):
            topic = changelog_topic(settings.app_id, "memories")
            print(
                f"no {topic} on {settings.kafka_bootstrap}: is {settings.app_id!r} the worker's app"
                " id (--app-id, MNEMO_APP_ID)? Nothing was read or written",
                file=sys.stderr,
            )
            return 2
        tables = asyncio.run(read_tables(settings))
    except (KafkaError, OSError) as exc:
        print(f"cannot read the tables from {settings.kafka_bootstrap}: {exc}", file=sys.stderr)
        return 2
    if command == "rebuild":
        try:
            upserted, deleted = rebuild(settings, tables, drop=args.drop)
        except Unreadable as exc:
            print(f"not rebuilt (nothing dropped): {exc}", file=sys.stderr)
            return 2
        except StorageError as exc:
            print(f"not rebuilt: Milvus: {exc}", file=sys.stderr)
            return 2
        print(
            f"rebuilt {settings.milvus_collection}: {upserted} rows, {deleted} purged deleted "
            f"in {time.perf_counter() - started:.1f} s"
        )
    print(f"{state_hash(tables.memories)} {len(tables.memories)} memories")
    return 0
