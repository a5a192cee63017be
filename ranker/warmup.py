"""Warming the hot cache at start-up, in the background while the ranker already serves.

Two sources (``MNEMO_HOT_CACHE_FILL``):
- ``changelogs`` (default for ``python -m ranker``): the rows the worker's tables hold, read from
  their changelog topics, the source of truth Milvus is rebuilt from. The memories changelog and
  the data keys are read first; the rows are then laid as the documents changelog streams by
  (:class:`storage.changelogs.DocumentRows`), so the documents, the bulk, are never held whole.
  No pass over Milvus: a 2.3 server answers a preload with one query per tenant (308 s at 1M
  memories, docs/benchmarks.md), Milvus Lite with a pure-Python scan.
- ``milvus``: one pass over the collection (:meth:`ranker.hotcache.HotCache.preload`).

Either way recalls search Milvus until the cache is warm, and ``GET /readyz`` waits for it
(:attr:`~ranker.hotcache.HotCache.preload_ended`). A fill that cannot read Kafka falls back to the
preload. ``python -m server`` fills its cache from its worker's start-up read instead
(``server.__main__``); its lifespan only preloads when that fill was dropped.

Freshness of a fill while the worker writes (it takes minutes at 1M memories): once the rows are
laid, and before the cache counts as filled (searches go to Milvus until then), both topics are
read again from where their reads stopped, and every memory with a record since (a new memory, a
new version, an access), with every memory whose document the stream did not bring or could not
open, is re-read from Milvus at its tenant's next search
(:meth:`~ranker.hotcache.HotCache.await_rows`); the worker writes a row before it commits. A
failure there drops the laid rows and preloads instead. The
state view, which follows the memories changelog on its own, also marks a change it tells to a
tenant already held, and the rows are laid under its values. A tenant whose rows in Milvus were
written under another app id is not in the worker's tables: a collection shared between app ids
needs ``MNEMO_HOT_CACHE_FILL=milvus``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Generator, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from memcore.ids import split_key
from ranker.hotcache import HotCache, PreloadStoppedError
from storage.changelogs import (
    ChangelogStream,
    DocumentRows,
    Record,
    changelog_topic,
    key_ring,
    read_changelog,
    read_changelog_to,
)
from storage.heap import trim_heap
from storage.kafka import KafkaConnection

log = logging.getLogger(__name__)
T = TypeVar("T")

#: At stop, how long the lifespan waits for the warm-up to reach its next page (s).
PRELOAD_STOP_S = 10


@dataclass(frozen=True)
class Changelogs:
    """Where a fill reads the worker's tables.

    Attributes:
        kafka: the brokers.
        app_id: the worker's app id (its tables' changelog topics are named after it).
        keys_topic: the data keys that open sealed documents (the ``memory-keys`` topic).
    """

    kafka: KafkaConnection
    app_id: str
    keys_topic: str


async def warm(
    cache: HotCache, tenant_ids: list[str], source: Changelogs | None, stopping: asyncio.Event
) -> None:
    """Fill the cache from ``source`` (None: preload it from Milvus; also when the changelogs
    cannot be read); ``stopping``: the process is stopping, end at the next step. Never raises
    but for a cancellation; sets the cache's ``preload_ended`` when done.
    """
    if source is not None:
        started = time.monotonic()
        try:
            filled = await _fill(cache, source, stopping)
        except PreloadStoppedError:
            log.info("hot cache fill stopped (the ranker is stopping)")
            cache.preload_ended.set()
            return
        except Exception:  # Kafka, or anything else: readiness waits for a warm-up to end
            log.warning(
                "hot cache: the fill from the changelogs failed; preloading from Milvus",
                exc_info=True,
            )
        else:
            rows, tenants, awaited = filled
            log.info(
                "hot cache filled from the changelogs: %d rows of %d tenants in %.1f s"
                " (%d memories to read back from Milvus)",
                rows,
                tenants,
                time.monotonic() - started,
                awaited,
            )
    await _preload(cache, tenant_ids)  # reads nothing once filled; sets preload_ended


async def _fill(
    cache: HotCache, source: Changelogs, stopping: asyncio.Event
) -> tuple[int, int, int]:
    """Fill the cache from the worker's tables (:func:`_lay`); returns (rows, tenants, memories
    marked to be read back). Raises KafkaError, or PreloadStoppedError once ``stopping`` is set.
    """
    try:
        return await _lay(cache, source, stopping)
    finally:
        # the states' read, dropped with _lay's frame (~0.5 GB at 1M memories); off the loop:
        # a trim of a large heap takes a while
        await asyncio.to_thread(trim_heap)


async def _lay(
    cache: HotCache, source: Changelogs, stopping: asyncio.Event
) -> tuple[int, int, int]:
    """Read the memories changelog and the keys, then, in a thread, lay the rows as the
    documents changelog streams by (the documents are never held whole) and mark what the reads
    may have missed (:func:`_missed`) before the fill completes: until then searches go to
    Milvus, and a failure leaves the cache empty, not complete (the caller then preloads).
    """
    states_topic = changelog_topic(source.app_id, "memories")
    documents_topic = changelog_topic(source.app_id, "documents")
    (states, states_to), keys = await _unless(
        stopping,
        _all(
            read_changelog_to(source.kafka, states_topic),
            read_changelog(source.kafka, source.keys_topic),
        ),
    )
    rows = DocumentRows(states, key_ring(keys))
    documents = ChangelogStream(source.kafka, documents_topic)
    marked: list[int] = []

    def mark() -> None:
        read_to = ((states_topic, states_to), (documents_topic, documents.ends))
        missed = _missed(cache, source.kafka, rows, read_to)
        marked.append(cache.await_rows(missed))

    def lay() -> tuple[int, int]:
        with (
            contextlib.closing(_until_stopped(cache, documents)) as stream,
            contextlib.closing(rows.pages(stream)) as pages,
        ):
            return cache.fill(pages, then=mark)

    held = await asyncio.to_thread(lay)
    if rows.unreadable:
        log.warning(
            "hot cache: %d sealed documents not opened (their keys are not on %s): read back"
            " from Milvus",
            rows.unreadable,
            source.keys_topic,
        )
    return *held, marked[0]


def _missed(
    cache: HotCache,
    kafka: KafkaConnection,
    rows: DocumentRows,
    read_to: Iterable[tuple[str, Mapping[int, int]]],
) -> list[tuple[str, str]]:
    """(tenant, memory id) of what the fill may lack or hold older than Milvus: memories whose
    document it did not meet, and every memory with a record on either topic after the read of
    it (each read again from where that read stopped, keys only). A state change after its read
    is also told by the state view, but only to a tenant already held then. Blocking.
    """
    keys = rows.unseen()
    for topic, ends in read_to:
        for batch in _until_stopped(cache, ChangelogStream(kafka, topic, start=ends)):
            keys.extend(key for key, _ in batch)
    return [split_key(key.decode()) for key in keys]  # the worker's keys: well formed


def _until_stopped(cache: HotCache, stream: ChangelogStream) -> Generator[list[Record], None, None]:
    """``stream``'s batches, ending with PreloadStoppedError at the first one after a stop (the
    cache checks only between pages, and a page may be long in coming); closed, it stops the
    stream's consumer.
    """
    with contextlib.closing(iter(stream)) as batches:
        for batch in batches:
            if cache.stopping:
                raise PreloadStoppedError
            yield batch


async def _all(*work: Awaitable[Any]) -> list[Any]:
    """Await every one of ``work`` at once; when one fails, the others are cancelled (a read
    would otherwise go on with its consumer open).
    """
    tasks = [asyncio.ensure_future(w) for w in work]
    try:
        return await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        raise


async def _unless(stopping: asyncio.Event, work: Awaitable[T]) -> T:
    """Await ``work`` unless ``stopping`` is set first: it is then cancelled (a Kafka read stops
    its consumer) and PreloadStoppedError raised.
    """
    task = asyncio.ensure_future(work)
    stop = asyncio.ensure_future(stopping.wait())
    try:
        await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        raise
    finally:
        stop.cancel()
    if not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        raise PreloadStoppedError
    return task.result()


async def _preload(cache: HotCache, tenant_ids: list[str]) -> None:
    """Fill the hot cache in one pass in a thread; recalls use Milvus until it is done."""
    started = time.monotonic()
    try:
        rows, tenants = await asyncio.to_thread(cache.preload, tenant_ids)
    except PreloadStoppedError:
        log.info("hot cache preload stopped (the ranker is stopping)")
        return
    except Exception:  # a row Milvus gives that does not decode, too: logged now, not at stop
        log.warning("hot cache preload failed; tenants load at their first recall", exc_info=True)
        return
    log.info(
        "hot cache: %d rows of %d tenants in %.1f s", rows, tenants, time.monotonic() - started
    )


class Warmup:
    """The warm-up of one cache as a task: :meth:`start` in the lifespan's start-up,
    :meth:`stop` at its end. The constructor does no I/O.
    """

    def __init__(self, cache: HotCache, source: Changelogs | None) -> None:
        self.cache = cache
        self.source = source
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self, tenant_ids: list[str]) -> None:
        """Begin :func:`warm` in a task of its own (``tenant_ids``: a preload's fallback for a
        Milvus that cannot scan).
        """
        self._task = asyncio.create_task(warm(self.cache, tenant_ids, self.source, self._stopping))

    async def stop(self) -> None:
        """End the warm-up at its next step and wait for it (``PRELOAD_STOP_S`` at most):
        cancelling the task would leave a preload's thread running (waiting on Milvus).
        """
        task = self._task
        if task is None:
            return
        self._stopping.set()
        self.cache.stop_preload()
        await asyncio.wait({task}, timeout=PRELOAD_STOP_S)
        if not task.done():
            log.warning("hot cache preload still running after %d s", PRELOAD_STOP_S)
        elif not task.cancelled() and task.exception() is not None:
            log.error("hot cache preload failed", exc_info=task.exception())
