"""The hot cache's warm-up (ranker.warmup) over a fake store and stand-ins for the two Kafka reads:
what a fill from the changelogs lays, what it leaves to be read back from Milvus, and when it
falls back to a preload. The reads themselves, and a ranker filling from a real broker, are in
tests/integration (test_streams.py, test_shared_port.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
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
from storage.changelogs import Tables
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


STATES = {m: state(m) for m in ("a", "b", "c")}
OLD_A, NEW_A = Document("a as first written", axis(0)), Document("a rewritten", axis(1))
B, C = Document("b", axis(2)), Document("c", axis(3))


def changelogs() -> Tables:
    """The read: a state each for a, b and c; a's document before its rewrite, none for c (the
    worker's producer still held it)."""
    return Tables(
        {key(m): codec.encode(s) for m, s in STATES.items()},
        {key("a"): codec.encode_document(OLD_A), key("b"): codec.encode_document(B)},
        documents_to={0: 7},
    )


def milvus() -> FakeStore:
    """What the worker wrote to Milvus: every memory's newest row."""
    store = FakeStore()
    store.put(*(MemoryRow.of(STATES[m], d) for m, d in (("a", NEW_A), ("b", B), ("c", C))))
    return store


def stand_in(
    monkeypatch: pytest.MonkeyPatch, tables: Tables, since: Mapping[bytes, bytes]
) -> list[Mapping[int, int] | None]:
    """The two reads answer ``tables`` and ``since``; returns where each later read started."""
    starts: list[Mapping[int, int] | None] = []

    async def read(*_: object, **__: object) -> Tables:
        return tables

    async def read_since(
        _kafka: object, _topic: str, start: Mapping[int, int] | None = None
    ) -> tuple[dict[bytes, bytes], dict[int, int]]:
        starts.append(start)
        return dict(since), {0: 8}

    monkeypatch.setattr(Tables, "read", read)
    monkeypatch.setattr(warmup, "read_changelog_to", read_since)
    return starts


def contents(cache: HotCache) -> dict[str, str]:
    hits = cache.search("acme", list(axis(1)), 10, Filters())
    assert hits is not None
    return {r.memory_id: r.content for r in hits.rows}


def test_a_fill_reads_back_from_milvus_only_what_its_read_of_the_documents_missed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = milvus()
    starts = stand_in(monkeypatch, changelogs(), {key("a"): codec.encode_document(NEW_A)})
    cache = HotCache(store)  # type: ignore[arg-type]
    asyncio.run(warm(cache, ["acme"], SOURCE, asyncio.Event()))
    assert cache.preload_ended.is_set()
    assert starts == [{0: 7}]  # the documents again, from where the fill's read stopped
    assert store.reads == 0  # nothing read from Milvus to warm
    assert cache.held() == (2, 1)  # a (its older document) and b; c had no document
    assert contents(cache) == {"a": "a rewritten", "b": "b", "c": "c"}
    assert store.reads == 1  # one read back of a and c, at the first search
    assert contents(cache) == {"a": "a rewritten", "b": "b", "c": "c"}
    assert store.reads == 1


def test_a_fill_whose_read_fails_preloads_from_milvus(monkeypatch: pytest.MonkeyPatch) -> None:
    async def unreachable(*_: object, **__: object) -> Tables:
        raise KafkaConnectionError("no broker")

    monkeypatch.setattr(Tables, "read", unreachable)
    store = milvus()
    cache = HotCache(store)  # type: ignore[arg-type]
    asyncio.run(warm(cache, ["acme"], SOURCE, asyncio.Event()))
    assert cache.preload_ended.is_set()
    assert cache.held() == (3, 1)
    assert contents(cache) == {"a": "a rewritten", "b": "b", "c": "c"}


def test_a_warm_up_asked_to_stop_during_its_read_ends_holding_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cancelled = []

    async def endless(*_: object, **__: object) -> Tables:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(True)  # the read's consumer is stopped in its finally
            raise
        raise AssertionError("unreachable")

    monkeypatch.setattr(Tables, "read", endless)
    cache = HotCache(milvus())  # type: ignore[arg-type]

    async def start_then_stop() -> None:
        up = warmup.Warmup(cache, SOURCE)
        up.start(["acme"])
        await asyncio.sleep(0.05)
        await up.stop()

    asyncio.run(start_then_stop())
    assert cancelled == [True]
    assert cache.preload_ended.is_set()
    assert cache.held() == (0, 0)


def test_a_warm_up_without_changelogs_preloads_from_milvus() -> None:
    cache = HotCache(milvus())  # type: ignore[arg-type]
    asyncio.run(warm(cache, ["acme"], None, asyncio.Event()))
    assert cache.held() == (3, 1)
