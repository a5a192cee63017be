"""The ranker's state view (ranker.view) over records handed in as the follower hands them (the
follower against a real broker: tests/integration/test_streams.py): a failing listener costs
nothing of the view, and readiness waits until the view has read the changelog."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pytest

from memcore import Lifecycle
from ranker.__main__ import _readiness
from ranker.view import StateView
from storage import MilvusConfig, MilvusStore, codec
from storage.rows import LIVE_FIELDS, live_values
from tests.unit.test_warmup import AT, key, state

pytestmark = pytest.mark.anyio


def view() -> StateView:
    return StateView("unused:9092", "app-memories-changelog")


def test_a_purged_memorys_values_are_a_deleted_memorys_in_live_field_order() -> None:
    assert len(codec.PURGED) == len(LIVE_FIELDS)
    assert dict(zip(LIVE_FIELDS, codec.PURGED, strict=True))["state"] == Lifecycle.DELETED.value


def test_the_view_keeps_the_ids_of_the_last_purged_memories_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Kept by the time of the purge, not the order read: a replay reads partitions apart, and
    a seed holds each key where it was first written (a memory written long ago and purged
    now comes first).
    """
    monkeypatch.setattr("ranker.view.PURGED_MARKS", 2)
    v = view()
    for memory_id, day in (("c", 3), ("a", 1), ("b", 2), ("d", 4)):
        v.apply(key(memory_id), codec.encode(state(memory_id)))
        gone = dataclasses.replace(
            state(memory_id),
            state=Lifecycle.DELETED,
            purged=True,
            state_changed_at=AT + timedelta(days=day),
        )
        v.apply(key(memory_id), codec.encode(gone))
    assert [v.purged("acme", m) for m in ("a", "b", "c", "d")] == [False, False, True, True]
    assert v.values("acme", "a") is None  # the earliest marks went: their rows long since deleted
    v.apply(key("c"), codec.encode(state("c")))  # written again
    assert not v.purged("acme", "c")
    assert v.values("acme", "c") == live_values(state("c"))
    assert v.purged("acme", "d")
    assert v.purged_writes("acme", "d") == state("d").write_count  # a row with more: a rewrite
    assert v.purged_writes("acme", "c") is None


def test_a_failing_listener_costs_neither_the_record_nor_the_others() -> None:
    """``HotCache.on_change`` raising on a value it cannot take lost the rest of the follower's
    fetched batch: the consumer's position was already past it."""
    v = view()
    told: list[tuple[str, str, Sequence[Any] | None]] = []

    def failing(tenant_id: str, memory_id: str, values: Sequence[Any] | None) -> None:
        raise TypeError("float() argument must be a string or a real number, not 'NoneType'")

    v.listeners += [failing, lambda t, m, values: told.append((t, m, values))]
    for memory_id in ("a", "b"):
        v.apply(key(memory_id), codec.encode(state(memory_id)))
    v.apply(key("a"), None)
    assert [(t, m, values is None) for t, m, values in told] == [
        ("acme", "a", False),
        ("acme", "b", False),
        ("acme", "a", True),
    ]
    assert v.values("acme", "a") is None
    assert v.values("acme", "b") is not None


def test_a_purged_memory_leaves_the_view_as_a_tombstone_would() -> None:
    """The worker keeps a purged memory's state for idempotence, and the view kept it too: every
    memory ever erased or purged stayed in every ranker (0.55 KB each), and in every listing's
    ids. Written again after its purge, it is held again.
    """
    v = view()
    told: list[tuple[str, Sequence[Any] | None]] = []
    v.listeners.append(lambda t, m, values: told.append((m, values)))
    v.apply(key("a"), codec.encode(state("a")))
    v.apply(key("b"), codec.encode(state("b")))
    purged = dataclasses.replace(state("a"), state=Lifecycle.DELETED, purged=True)
    v.apply(key("a"), codec.encode(purged))
    assert v.values("acme", "a") == codec.PURGED  # its id alone is kept: a stale row is deleted
    assert list(v.tenant("acme")) == ["b"]
    assert told[-1] == ("a", None)  # the hot cache lets its row go
    v.apply(key("b"), codec.encode(dataclasses.replace(state("b"), purged=True)))
    assert v.tenant("acme") == {}  # and nothing is kept for a tenant holding none
    v.apply(key("a"), codec.encode(state("a")))  # written again after its purge
    assert v.values("acme", "a") == live_values(state("a"))
    v.apply(key("b"), None)  # its key compacted away: nothing is kept of it
    assert v.values("acme", "b") is None
    assert v._purged == {}


class Producer:
    async def ready(self) -> bool:
        return True


async def test_readiness_waits_for_the_state_view() -> None:
    v = view()
    answers = [False, False, True]

    async def caught_up(timeout_s: float) -> bool:
        await asyncio.sleep(0)
        return answers.pop(0)

    v.caught_up = caught_up  # type: ignore[method-assign]
    store = MilvusStore(MilvusConfig("unused.db", dim=4))
    checks = _readiness(store, Producer(), None, None, v, asyncio.Event())  # type: ignore[arg-type]
    assert await checks["state_view"]() is False
    await v.settle(attempt_s=0.01)  # two waits that end short, then caught up
    assert answers == []
    assert await checks["state_view"]() is True


async def test_a_tenants_sorted_ids_are_sorted_again_only_when_a_memory_comes_or_goes() -> None:
    """Each listing page sorted the tenant's every id again (1.5 s of CPU at 1M memories)."""
    v = view()
    for memory_id in ("c", "a"):
        v.apply(key(memory_id), codec.encode(state(memory_id)))
    first = await v.sorted_ids("acme")
    assert list(first) == ["a", "c"]
    accessed = dataclasses.replace(state("c"), access_count=3)
    v.apply(key("c"), codec.encode(accessed))  # an access: the same ids
    assert await v.sorted_ids("acme") is first
    v.apply(key("b"), codec.encode(state("b")))
    assert list(await v.sorted_ids("acme")) == ["a", "b", "c"]
    v.apply(key("a"), None)
    assert list(await v.sorted_ids("acme")) == ["b", "c"]
    assert list(first) == ["a", "c"]  # a page being read keeps the ids it started with
