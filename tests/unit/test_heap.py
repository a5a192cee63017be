"""The garbage-collector policy: a slow full collection freezes its survivors, a fast one does not."""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from storage.heap import freeze_slow_collections, trim_heap


@pytest.fixture(autouse=True)
def _thawed() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


class Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the collector frees it


@contextmanager
def policy(limit_ms: float) -> Iterator[None]:
    remove = freeze_slow_collections(limit_ms)
    try:
        yield
    finally:
        remove()


def test_a_full_collection_slower_than_the_limit_freezes_its_survivors() -> None:
    with policy(0.0):
        kept = [Node() for _ in range(100)]
        gc.collect()
    assert gc.get_freeze_count() >= len(kept)
    young = {id(o) for o in gc.get_objects(2)}
    assert not any(id(n) in young for n in kept)


def test_a_faster_collection_or_a_younger_one_freezes_nothing() -> None:
    with policy(60_000.0):
        gc.collect()
    assert gc.get_freeze_count() == 0
    with policy(0.0):
        gc.collect(1)
    assert gc.get_freeze_count() == 0


def test_garbage_of_a_cycle_made_after_the_freeze_is_still_collected() -> None:
    with policy(0.0):
        gc.collect()
        assert gc.get_freeze_count() > 0
        Node()  # garbage at once: a cycle no one references
        assert gc.collect() >= 1


def resident_mb() -> float:
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="reads Linux's /proc")
def test_trim_heap_hands_back_what_a_dropped_read_left_below_live_rows() -> None:
    """As at start-up: the changelogs' read (here 300 MB of 2 KB values), then long-lived rows
    made after it (here 150,000 values of 600 bytes: C-heap blocks, as numpy's are). Dropping the
    read leaves its space in the heap below the rows, where the allocator keeps it; trim_heap
    returns it to the operating system.
    """
    read = [bytes(2_000) + i.to_bytes(4, "little") for i in range(150_000)]
    kept = [bytes(600) + i.to_bytes(4, "little") for i in range(150_000)]
    del read
    before = resident_mb()
    assert trim_heap()
    assert resident_mb() < before - 200, (before, resident_mb())
    assert len(kept) == 150_000
