"""Recall's candidates from Milvus are judged on the state view's live values, as the hot cache
judges its own: the worker writes its table (whose changelog feeds the view) before it rewrites
the Milvus row, so for a while Milvus still holds a memory as active and current after the view
knows it deleted, forgotten or superseded. Both paths must then give the same candidates.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, cast

import numpy as np
import pytest

from memcore import Lifecycle
from memcore.policy import RecallPolicy
from ranker.__main__ import _hot_cache
from ranker.hotcache import HotCache, live_passes
from ranker.service import RecallQuery, RecallService
from ranker.settings import RankerSettings
from ranker.view import StateView
from storage import Filters, Hit, MemoryRow, MilvusConfig, codec
from storage.milvus import ANY_STATE
from storage.rows import LIVE_FIELDS, row_live_values, with_live
from tests.rows import make_row
from tests.unit.test_warmup import key, state

DIM = 4
AT = datetime(1970, 1, 1, 0, 0, 5, tzinfo=UTC)
NOW_US = 5_000_000
RECALL = Filters(states=("active", "archived"), current_at_us=NOW_US)
HISTORY = Filters(states=("active", "archived"))  # every version: include_history


def _passes(row: MemoryRow, filters: Filters) -> bool:
    """What Milvus's filter expression keeps, on the row as Milvus holds it."""
    return (
        (not filters.states or row.state in filters.states)
        and (not filters.tiers or row.tier in filters.tiers)
        and (
            filters.current_at_us is None
            or row.valid_to_us == 0
            or row.valid_to_us > filters.current_at_us
        )
    )


class FakeMilvus:
    """One tenant's rows as Milvus holds them; exact cosine search under the row's own fields."""

    def __init__(self, *rows: MemoryRow) -> None:
        self.config = MilvusConfig(uri="unused", dim=DIM, full_text=False)
        self.rows = {(r.tenant_id, r.memory_id): r for r in rows}

    def _of(self, tenant_id: str) -> list[MemoryRow]:
        return [r for (t, _), r in self.rows.items() if t == tenant_id]

    def search(
        self, tenant_id: str, vectors: Sequence[Sequence[float]], k: int, filters: Filters
    ) -> list[list[Hit]]:
        out = []
        for vector in vectors:
            q = np.asarray(vector, dtype=np.float64)
            hits = [
                Hit(r, float(np.dot(q, r.vector) / np.linalg.norm(q) / np.linalg.norm(r.vector)))
                for r in self._of(tenant_id)
                if _passes(r, filters)
            ]
            out.append(sorted(hits, key=lambda h: -h.similarity)[:k])
        return out

    def count(self, tenant_id: str, filters: Filters = ANY_STATE) -> int:
        return len(self._of(tenant_id))

    def query(
        self, tenant_id: str, filters: Filters = ANY_STATE, limit: int = 16_384
    ) -> list[MemoryRow]:
        wanted = set(filters.memory_ids)
        found = [r for r in self._of(tenant_id) if not wanted or r.memory_id in wanted]
        return [r for r in found if _passes(r, filters)][:limit]

    def get(self, tenant_id: str, memory_ids: Sequence[str]) -> dict[str, MemoryRow]:
        return {m: self.rows[tenant_id, m] for m in memory_ids if (tenant_id, m) in self.rows}


class FakeView:
    """The state view: live values by tenant and memory."""

    def __init__(self) -> None:
        self.live: dict[tuple[str, str], tuple[Any, ...]] = {}

    def values(self, tenant_id: str, memory_id: str) -> tuple[Any, ...] | None:
        return self.live.get((tenant_id, memory_id))

    def overlay(self, row: MemoryRow) -> MemoryRow:
        values = self.values(row.tenant_id, row.memory_id)
        return with_live(row, values) if values is not None else row


def row(memory_id: str, *head: float, **kw: object) -> MemoryRow:
    return make_row("acme", memory_id, [*head, *([0.0] * (DIM - len(head)))], **kw)


def live(r: MemoryRow, **kw: object) -> tuple[Any, ...]:
    return tuple(getattr(dataclasses.replace(r, **kw), n) for n in LIVE_FIELDS)  # type: ignore[arg-type]


RETIRING = pytest.mark.parametrize(
    "change",
    [
        {"state": "deleted"},
        {"state": "forgotten"},
        {"valid_to_us": 4_000_000, "superseded_by": "b"},
    ],
    ids=["deleted", "forgotten", "superseded"],
)
"""The changes by which the view takes a memory out of recall before Milvus's row shows it."""


def recalled(service: RecallService, filters: Filters = RECALL) -> list[tuple[str, str]]:
    """(memory id, state shown) of a recall's results, best first."""
    query = RecallQuery(None, (1.0, 0.0, 0.0, 0.0), 10, AT, RecallPolicy(), filters, track=False)

    async def main() -> list[tuple[str, str]]:
        await service.start()
        try:
            answer = await service.recall("acme", query)
        finally:
            await service.stop()
        return [(r.row.memory_id, r.row.state) for r in answer.results]

    return asyncio.run(main())


def services(store: FakeMilvus, view: FakeView) -> tuple[RecallService, RecallService]:
    """A service that searches Milvus, and one that searches its hot cache."""
    none = cast(Any, None)
    milvus = RecallService(cast(Any, store), none, none, view=cast(Any, view), kernel_thread=False)
    cache = HotCache(cast(Any, store), view.values)
    hot = RecallService(
        cast(Any, store), none, none, view=cast(Any, view), cache=cache, kernel_thread=False
    )
    return milvus, hot


@RETIRING
def test_a_memory_the_view_retired_is_not_recalled_while_milvus_still_holds_it(
    change: dict[str, object],
) -> None:
    a, b = row("a", 1.0), row("b", 0.9, 0.1)
    store, view = FakeMilvus(a, b), FakeView()
    view.live["acme", "a"] = live(a, **change)  # the worker's table; its row is not rewritten yet
    milvus, hot = services(store, view)
    assert recalled(milvus) == [("b", "active")]
    assert recalled(hot) == [("b", "active")]


def test_a_purged_memory_is_not_recalled_or_read_active_while_milvus_still_holds_its_row() -> None:
    """``DELETE ?purge=true`` retires and purges in one worker batch, so the Milvus row still
    says active until the worker's delete is synced (a crash, Milvus refusing writes). The view
    dropped the purged memory whole, and the ranker judged that row on its own values: the
    deleted memory was recalled, and read by id, as active; read by id, it is not found.
    """
    a, b = row("a", 1.0), row("b", 0.9, 0.1)
    store, view = FakeMilvus(a, b), StateView("unused:9092", "app-memories-changelog")
    for memory_id in ("a", "b"):
        view.apply(key(memory_id), codec.encode(state(memory_id)))
    purged = dataclasses.replace(state("a"), state=Lifecycle.DELETED, purged=True)
    view.apply(key("a"), codec.encode(purged))  # the table; the row is not deleted yet
    milvus, hot = services(store, cast(Any, view))
    assert recalled(milvus) == [("b", "active")]
    assert recalled(hot) == [("b", "active")]
    assert asyncio.run(milvus.get_many("acme", ["a", "b"])).keys() == {"b"}  # a: 404


def test_the_rankers_cache_weighs_the_local_workers_rows_against_the_views_purge_marks() -> None:
    """The cache ``python -m server`` builds (:func:`ranker.__main__._hot_cache`) over a real
    state view: after a purge, a row of the memory from before it (an upsert retried past the
    purge) is left out, and the row of the memory written again is searchable at once.
    """
    a, b = row("a", 1.0), row("b", 0.9, 0.1)
    store, view = FakeMilvus(a, b), StateView("unused:9092", "app-memories-changelog")
    store.embedded, store.upserted, store.upsert_failed = False, [], []  # type: ignore[attr-defined]
    for memory_id in ("a", "b"):
        view.apply(key(memory_id), codec.encode(state(memory_id)))
    cache = _hot_cache(RankerSettings(), cast(Any, store), view, local_writer=True)
    assert cache is not None

    def searched() -> list[str]:
        hits = cache.search("acme", [1.0, 0.0, 0.0, 0.0], 10, RECALL)
        assert hits is not None
        return [r.memory_id for r in hits.rows]

    def written(r: MemoryRow) -> None:
        store.rows["acme", r.memory_id] = r
        for listener in store.upserted:  # type: ignore[attr-defined]
            listener([r])

    assert searched() == ["a", "b"]
    purged = dataclasses.replace(state("a"), state=Lifecycle.DELETED, purged=True)
    view.apply(key("a"), codec.encode(purged))
    del store.rows["acme", "a"]
    written(a)  # from before the purge (as many writes), landing late
    del store.rows["acme", "a"]  # the worker's delete lands next
    assert searched() == ["b"]
    written(dataclasses.replace(a, write_count=purged.write_count + 1))  # written again
    assert searched() == ["a", "b"]


def test_a_tier_the_view_moved_a_memory_out_of_is_filtered_on_both_paths() -> None:
    a, b = row("a", 1.0, tier="working"), row("b", 0.9, 0.1, tier="working")
    store, view = FakeMilvus(a, b), FakeView()
    view.live["acme", "a"] = live(a, tier="episodic")
    milvus, hot = services(store, view)
    working = dataclasses.replace(RECALL, tiers=("working",))
    assert recalled(milvus, working) == recalled(hot, working) == [("b", "active")]


def test_history_and_any_state_keep_what_the_view_retired() -> None:
    a = row("a", 1.0)
    store, view = FakeMilvus(a), FakeView()
    view.live["acme", "a"] = live(a, valid_to_us=4_000_000, superseded_by="b")
    milvus, hot = services(store, view)
    history = dataclasses.replace(RECALL, current_at_us=None)
    assert recalled(milvus, history) == recalled(hot, history) == [("a", "active")]
    view.live["acme", "a"] = live(a, state="deleted")
    assert recalled(milvus, ANY_STATE) == recalled(hot, ANY_STATE) == [("a", "deleted")]


def test_live_passes_agrees_with_the_row_filter_on_the_rows_own_values() -> None:
    filters = [
        RECALL,
        ANY_STATE,
        Filters(states=("deleted",)),
        Filters(tiers=("semantic", "working")),
        Filters(current_at_us=3_000_000),
    ]
    rows = [
        row("a", 1.0),
        row("b", 1.0, state="deleted"),
        row("c", 1.0, state="archived", tier="semantic"),
        row("d", 1.0, valid_to_us=3_000_000),
        row("e", 1.0, valid_to_us=3_000_001, tier="working"),
    ]
    for f in filters:
        for r in rows:
            assert live_passes(row_live_values(r), f) == _passes(r, f), (f, r.memory_id)


def test_a_listing_leaves_out_what_the_view_retired_and_fills_its_page() -> None:
    rows = [row(m, 1.0) for m in ("a", "b", "c", "d")]
    store, view = FakeMilvus(*rows), FakeView()
    view.live["acme", "b"] = live(rows[1], state="deleted")
    view.live["acme", "c"] = live(rows[2], valid_to_us=4_000_000, superseded_by="d")
    service, _ = services(store, view)
    ids = ["a", "b", "c", "d"]

    async def main() -> list[tuple[list[str], str | None]]:
        pages = []
        for filters in (RECALL, ANY_STATE):
            found = await service.list_page("acme", filters, None, 2, ordered=ids)
            pages.append(([r.memory_id for r in found.rows], found.cursor))
        return pages

    current, everything = asyncio.run(main())
    assert current == (["a", "d"], None)
    assert everything[0] == ["a", "b"]


def test_a_tenant_evicted_after_ready_is_not_loaded_on_the_event_loop() -> None:
    """The recall searches its hot cache on the event loop when ``ready`` says nothing is to be
    read; a worker thread may evict the tenant between the two calls (another tenant's load over
    ``total_max``): the search then loaded it, a Milvus count and query, on the loop.
    """
    a, b = row("a", 1.0), row("b", 0.9, 0.1)
    store, view = FakeMilvus(a, b), FakeView()
    _, hot = services(store, view)
    cache = hot.cache
    assert cache is not None
    assert cache.search("acme", [1.0, 0.0, 0.0, 0.0], 10, RECALL) is not None  # held
    ready = cache.ready

    def evicted_after(tenant_id: str, filters: Filters) -> bool:
        answer = ready(tenant_id, filters)
        cache._blocks.pop(tenant_id, None)  # what another thread's _evict does meanwhile
        return answer

    cache.ready = evicted_after  # type: ignore[method-assign]
    readers: list[str] = []
    query = store.query

    def recorded(*args: Any, **kw: Any) -> list[MemoryRow]:
        readers.append(threading.current_thread().name)
        return query(*args, **kw)

    store.query = recorded  # type: ignore[method-assign]
    assert recalled(hot) == [("a", "active"), ("b", "active")]
    assert readers  # loaded again, for this recall
    assert threading.main_thread().name not in readers  # in a thread, not on the loop


@RETIRING
def test_a_change_the_view_applies_while_the_batch_scores_leaves_the_memory_out(
    change: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The view's change came after the candidates were judged and before the answer: the
    recall returned the memory shown deleted, forgotten or superseded."""
    a, b = row("a", 1.0), row("b", 0.9, 0.1)
    store, view = FakeMilvus(a, b), FakeView()
    view.live["acme", "a"] = live(a)
    for service in services(store, view):
        scoring = service._submit

        async def changed_meanwhile(request: Any, scoring: Any = scoring) -> Any:
            view.live["acme", "a"] = live(a, **change)  # the view's follower ran at this await
            return await scoring(request)

        monkeypatch.setattr(service, "_submit", changed_meanwhile)
        view.live["acme", "a"] = live(a)
        assert recalled(service) == [("b", "active")]


class ErasedKeys:
    """The keys this ranker knows: ``erased`` holds (tenant, memory) pairs erased."""

    def __init__(self) -> None:
        self.erased: set[tuple[str, str]] = set()

    def erased_memory(self, tenant_id: str, memory_id: str) -> bool:
        return (tenant_id, memory_id) in self.erased

    async def catch_up(self) -> None:
        return None


def test_a_memory_erased_while_the_batch_scores_is_not_returned(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    a, b = row("a", 1.0), row("b", 0.9, 0.1)
    store, view = FakeMilvus(a, b), FakeView()
    for service in services(store, view):
        keys = ErasedKeys()
        monkeypatch.setattr(service, "keys", keys)
        scoring = service._submit

        async def erased_meanwhile(
            request: Any, scoring: Any = scoring, keys: ErasedKeys = keys
        ) -> Any:
            keys.erased.add(("acme", "a"))  # an erasure through this ranker, meanwhile
            return await scoring(request)

        monkeypatch.setattr(service, "_submit", erased_meanwhile)
        assert recalled(service) == [("b", "active")]


def test_a_k_as_large_as_the_candidates_still_returns_k_when_one_is_left_out() -> None:
    """With k equal to the candidates searched, a memory left out after the search (retired by
    the view before Milvus's row) was not replaced: k - 1 results."""
    rows = [row(f"m{i}", 1.0, 0.1 * i) for i in range(6)]
    store, view = FakeMilvus(*rows), FakeView()
    view.live["acme", "m0"] = live(rows[0], state="deleted")  # the best match, retired
    none = cast(Any, None)
    service = RecallService(
        cast(Any, store), none, none, view=cast(Any, view), kernel_thread=False, candidates=3
    )
    query = RecallQuery(None, (1.0, 0.0, 0.0, 0.0), 3, AT, RecallPolicy(), RECALL, track=False)

    async def main() -> list[str]:
        await service.start()
        try:
            return [r.row.memory_id for r in (await service.recall("acme", query)).results]
        finally:
            await service.stop()

    assert asyncio.run(main()) == ["m1", "m2", "m3"]


def test_a_listing_by_state_finds_a_memory_the_view_moved_before_milvus_did() -> None:
    """The worker writes its table (the view) before the row: for that while, a memory the
    view holds archived was in neither ``state=archived`` (Milvus's row: active) nor
    ``state=active`` (the view: archived)."""
    a, b = row("a", 1.0), row("b", 1.0)
    store, view = FakeMilvus(a, b), FakeView()
    view.live["acme", "a"] = live(a, state="archived")  # Milvus's row still says active
    service, _ = services(store, view)

    async def listed(filters: Filters) -> list[str]:
        found = await service.list_page("acme", filters, None, 10, ordered=["a", "b"])
        return [r.memory_id for r in found.rows]

    assert asyncio.run(listed(Filters(states=("archived",)))) == ["a"]
    assert asyncio.run(listed(Filters(states=("active",)))) == ["b"]


def test_a_history_recall_follows_a_fact_through_the_view_not_milvus() -> None:
    """Rome, superseded by Berlin, is no candidate: the link is the view's (a history recall
    read Milvus by id for it on every call, the hot path's too; this fake has no such read).
    """
    paris = row("paris", 1.0, valid_to_us=2_000_000, superseded_by="rome")
    rome = row("rome", 0.0, 0.0, 1.0, valid_to_us=3_000_000, superseded_by="berlin")
    berlin = row("berlin", 0.8, 0.6, created_at_us=3_000_000)
    store, view = FakeMilvus(paris, berlin), FakeView()
    view.live["acme", "rome"] = live(rome)
    query = RecallQuery(None, (1.0, 0.0, 0.0, 0.0), 1, AT, RecallPolicy(), HISTORY, track=False)
    asked = dataclasses.replace(query, include_history=True)
    for service in services(store, view):

        async def main(service: RecallService = service) -> list[list[str]]:
            await service.start()
            try:
                answers = [await service.recall("acme", q) for q in (asked, asked, query)]
            finally:
                await service.stop()
            return [[r.row.memory_id for r in a.results] for a in answers]

        assert asyncio.run(main()) == [["berlin"], ["berlin"], ["paris"]]
