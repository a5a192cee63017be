"""The garbage-collector policy: a slow full collection freezes its survivors, a fast one does not."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from storage.heap import freeze_slow_collections


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
