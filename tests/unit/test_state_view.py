"""The ranker's state view (ranker.view) over records handed in as the follower hands them (the
follower against a real broker: tests/integration/test_streams.py): a failing listener costs
nothing of the view, and readiness waits until the view has read the changelog."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from ranker.__main__ import _readiness
from ranker.view import StateView
from storage import MilvusConfig, MilvusStore, codec
from tests.unit.test_warmup import key, state

pytestmark = pytest.mark.anyio


def view() -> StateView:
    return StateView("unused:9092", "app-memories-changelog")


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
