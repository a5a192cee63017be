"""The hot cache's warm-up (ranker.warmup) over a fake store and stand-ins for the two Kafka reads:
what a fill from the changelogs lays, what it leaves to be read back from Milvus, and when it
falls back to a preload. The reads themselves, and a ranker filling from a real broker, are in
tests/integration (test_streams.py, test_shared_port.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Generator, Mapping
from datetime import UTC, datetime

import pytest
from aiokafka.errors import KafkaConnectionError

from memcore import (
    ImportanceDecision,
    ImportanceSource,
    MemoryState,
    Policy,
    Write,
    apply,
    content_hash,
)
from ranker import warmup
from ranker.hotcache import HotCache
from ranker.warmup import Changelogs, warm
from storage import Document, Filters, MemoryRow, codec
from storage.changelogs import Record
from storage.kafka import KafkaConnection
from tests.unit.test_hot_cache import DIM, FakeStore

AT = datetime(2026, 3, 1, tzinfo=UTC)
SOURCE = Changelogs(KafkaConnection("unused:9092"), "app", "memory-keys")


def state(memory_id: str) -> MemoryState:
    decision = ImportanceDecision(0.6, ImportanceSource.EXPLICIT, "test")
    made, _ = apply(None, Write("acme", memory_id, content_hash(memory_id), AT, decision), Policy())
    assert made is not None
    return made


def axis(i: int) -> tuple[float, ...]:
    return tuple(float(j == i) for j in range(DIM))


def key(memory_id: str) -> bytes:
    return f"acme/{memory_id}".encode()


STATES = {m: state(m) for m in ("a", "b", "c", "d")}
OLD_A, NEW_A = Document("a as first written", axis(0)), Document("a rewritten", axis(1))
OLD_B, B = Document("b before", axis(0)), Document("b", axis(2))
C, D = Document("c", axis(3)), Document("d", axis(1))
STATES_TOPIC, DOCUMENTS_TOPIC = "app-memories-changelog", "app-documents-changelog"


def doc(memory_id: str, document: Document) -> tuple[bytes, bytes]:
    return key(memory_id), codec.encode_document(document)


class Reads:
    """Stand-ins for the fill's Kafka reads of the worker writing as it goes: the memories
    changelog holds a, b and c when read (d comes after); the documents stream brings a's first
    document, b's two (the later wins), and d's, but not c's (the worker's producer still held
    it); read again from where they stopped, the documents hold a's rewrite and the states d.
    ``tails_fail``: the reads again raise.
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, tails_fail: bool = False) -> None:
        self.starts: list[tuple[str, Mapping[int, int] | None]] = []
        self.tails_fail = tails_fail
        monkeypatch.setattr(warmup, "read_changelog_to", self.read_to)
        monkeypatch.setattr(warmup, "read_changelog", self.read_keys)
        monkeypatch.setattr(warmup, "ChangelogStream", self.stream)

    async def read_to(
        self, _kafka: object, topic: str
    ) -> tuple[dict[bytes, bytes], dict[int, int]]:
        assert topic == STATES_TOPIC
        self.starts.append((topic, None))
        return {key(m): codec.encode(STATES[m]) for m in "abc"}, {0: 7}

    async def read_keys(self, _kafka: object, _topic: str) -> dict[bytes, bytes]:
        return {}

    def stream(self, _kafka: object, topic: str, start: Mapping[int, int] | None = None) -> Stream:
        self.starts.append((topic, start))
        if start is None:
            assert topic == DOCUMENTS_TOPIC
            return Stream([[doc("a", OLD_A), doc("b", OLD_B)], [doc("b", B), doc("d", D)]])
        if self.tails_fail:
            raise KafkaConnectionError("the broker went away")
        if topic == STATES_TOPIC:
            return Stream([[(key("d"), codec.encode(STATES["d"]))]])
        return Stream([[doc("a", NEW_A)]])


class Stream:
    """A changelog stream of ``batches`` that ends at offset 4."""

    def __init__(self, batches: list[list[Record]]) -> None:
        self.batches = batches
        self.ends: dict[int, int] = {}

    def __iter__(self) -> Generator[list[Record], None, None]:
        self.ends = {0: 4}
        yield from self.batches


def milvus() -> FakeStore:
    """What the worker wrote to Milvus: every memory's newest row."""
    store = FakeStore()
    store.put(
        *(MemoryRow.of(STATES[m], d) for m, d in (("a", NEW_A), ("b", B), ("c", C), ("d", D)))
    )
    return store


def contents(cache: HotCache) -> dict[str, str]:
    hits = cache.search("acme", list(axis(1)), 10, Filters())
    assert hits is not None
    return {r.memory_id: r.content for r in hits.rows}


EVERY = {"a": "a rewritten", "b": "b", "c": "c", "d": "d"}


async def start_then_stop(cache: HotCache, after_s: float) -> None:
    """Start a warm-up of ``cache`` from the changelogs and stop it ``after_s`` later."""
    up = warmup.Warmup(cache, SOURCE)
    up.start(["acme"])
    await asyncio.sleep(after_s)
    await up.stop()


def test_a_fill_reads_back_from_milvus_only_what_its_reads_missed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reads = Reads(monkeypatch)
    store = milvus()
    cache = HotCache(store)  # type: ignore[arg-type]
    asyncio.run(warm(cache, ["acme"], SOURCE, asyncio.Event()))
    assert cache.preload_ended.is_set()
    assert reads.starts == [
        (STATES_TOPIC, None),
        (DOCUMENTS_TOPIC, None),
        (STATES_TOPIC, {0: 7}),  # again, from where each read stopped
        (DOCUMENTS_TOPIC, {0: 4}),
    ]
    assert store.reads == 0  # nothing read from Milvus to warm
    assert cache.held() == (2, 1)  # a (its first document) and b (its last); c had none, d no state
    assert contents(cache) == EVERY
    assert store.reads == 1  # one read back of a, c and d, at the first search
    assert contents(cache) == EVERY
    assert store.reads == 1


def test_a_fill_whose_reads_again_fail_is_dropped_and_preloaded_from_milvus(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Laid but not yet marked, the rows must not pass for complete (c missing, a stale)."""
    Reads(monkeypatch, tails_fail=True)
    store = milvus()
    cache = HotCache(store)  # type: ignore[arg-type]
    asyncio.run(warm(cache, ["acme"], SOURCE, asyncio.Event()))
    assert cache.preload_ended.is_set()
    assert cache.held() == (4, 1)  # the preload's pass over Milvus
    assert contents(cache) == EVERY


def test_a_fill_whose_read_fails_preloads_from_milvus(monkeypatch: pytest.MonkeyPatch) -> None:
    async def unreachable(*_: object, **__: object) -> tuple[dict[bytes, bytes], dict[int, int]]:
        raise KafkaConnectionError("no broker")

    monkeypatch.setattr(warmup, "read_changelog_to", unreachable)
    monkeypatch.setattr(warmup, "read_changelog", unreachable)
    store = milvus()
    cache = HotCache(store)  # type: ignore[arg-type]
    asyncio.run(warm(cache, ["acme"], SOURCE, asyncio.Event()))
    assert cache.preload_ended.is_set()
    assert cache.held() == (4, 1)
    assert contents(cache) == EVERY


def test_a_warm_up_asked_to_stop_during_its_read_ends_holding_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cancelled = []

    async def endless(*_: object, **__: object) -> tuple[dict[bytes, bytes], dict[int, int]]:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(True)  # the read's consumer is stopped in its finally
            raise
        raise AssertionError("unreachable")

    monkeypatch.setattr(warmup, "read_changelog_to", endless)
    monkeypatch.setattr(warmup, "read_changelog", endless)
    cache = HotCache(milvus())  # type: ignore[arg-type]

    asyncio.run(start_then_stop(cache, after_s=0.05))
    assert cancelled == [True, True]
    assert cache.preload_ended.is_set()
    assert cache.held() == (0, 0)


def test_a_warm_up_without_changelogs_preloads_from_milvus() -> None:
    cache = HotCache(milvus())  # type: ignore[arg-type]
    asyncio.run(warm(cache, ["acme"], None, asyncio.Event()))
    assert cache.held() == (4, 1)


def test_a_warm_up_asked_to_stop_while_the_documents_stream_ends_holding_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    Reads(monkeypatch)
    closed: list[str] = []

    class Idle:
        """A documents topic that brings nothing more (a broker gone quiet): empty fetches."""

        def __init__(self, *_: object) -> None:
            self.ends: dict[int, int] = {}

        def __iter__(self) -> Generator[list[Record], None, None]:
            try:
                for _ in range(500):  # 5 s: far past the stop
                    yield []
                    time.sleep(0.01)
                closed.append("ran out")
                raise AssertionError("the stream was not stopped")
            finally:
                closed.append("closed")

    monkeypatch.setattr(warmup, "ChangelogStream", Idle)
    cache = HotCache(milvus())  # type: ignore[arg-type]

    asyncio.run(start_then_stop(cache, after_s=0.2))
    assert closed == ["closed"]  # by the stop, not at its end
    assert cache.preload_ended.is_set()
    assert cache.held() == (0, 0)
