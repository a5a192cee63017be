"""The hot cache's freshness rules over a fake store (its I/O path against real Milvus is in
tests/contract/test_hot_cache.py; the whole path through the worker in tests/integration)."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest

from memcore.policy import RecallPolicy
from ranker.hotcache import (
    DIRTY_GIVE_UP_S,
    GONE_CHECK_S,
    GONE_GIVE_UP_S,
    LATE_RETRY_S,
    TIERS,
    HotCache,
    LiveColumns,
    PreloadStoppedError,
)
from ranker.kernel import RankRequest
from ranker.service import Candidate, RecallQuery, _hot_request, _request
from storage import Filters, MemoryRow, MilvusConfig, StorageError, codec
from storage.milvus import ANY_STATE
from storage.rows import LIVE_FIELDS, row_live_values
from tests.rows import make_row

DIM = 4
AT = datetime(1970, 1, 1, 0, 0, 5, tzinfo=UTC)
RECALL = Filters(states=("active", "archived"), current_at_us=5_000_000)


class FakeStore:
    """Rows by tenant and id; counts the reads the cache makes."""

    def __init__(self) -> None:
        self.config = MilvusConfig(uri="unused", dim=DIM)
        self.rows: dict[str, dict[str, MemoryRow]] = {}
        self.reads = 0

    def put(self, *rows: MemoryRow) -> None:
        for row in rows:
            self.rows.setdefault(row.tenant_id, {})[row.memory_id] = row

    def count(self, tenant_id: str, filters: Filters = ANY_STATE) -> int:
        return len(self.rows.get(tenant_id, {}))

    def query(
        self, tenant_id: str, filters: Filters = ANY_STATE, limit: int = 0
    ) -> list[MemoryRow]:
        self.reads += 1
        return list(self.rows.get(tenant_id, {}).values())[:limit]

    def get(self, tenant_id: str, memory_ids: Sequence[str]) -> dict[str, MemoryRow]:
        self.reads += 1
        found = self.rows.get(tenant_id, {})
        return {m: found[m] for m in memory_ids if m in found}

    def scan(self) -> Iterator[list[MemoryRow]]:
        """One page per tenant; ``during_scan`` runs after the first page (a write meanwhile)."""
        for i, rows in enumerate([list(r.values()) for r in self.rows.values()]):
            yield rows
            if i == 0:
                self.during_scan()

    def during_scan(self) -> None:
        pass


def row(memory_id: str, *head: float, **kw: object) -> MemoryRow:
    return make_row("acme", memory_id, [*head, *([0.0] * (DIM - len(head)))], **kw)


def live(r: MemoryRow, **kw: object) -> tuple[Any, ...]:
    return tuple(getattr(dataclasses.replace(r, **kw), name) for name in LIVE_FIELDS)  # type: ignore[arg-type]


class Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


def ids(cache: HotCache, filters: Filters = RECALL) -> list[str]:
    hits = cache.search("acme", [1.0, 0.0, 0.0, 0.0], 10, filters)
    assert hits is not None
    return [r.memory_id for r in hits.rows]


def setup(*rows: MemoryRow) -> tuple[FakeStore, dict[str, tuple[Any, ...]], HotCache, Clock]:
    store = FakeStore()
    store.put(*rows)
    view: dict[str, tuple[Any, ...]] = {}
    clock = Clock()
    cache = HotCache(
        store,  # type: ignore[arg-type]
        lambda _t, m: view.get(m),
        ids_of=lambda _t: view.keys(),
        clock=clock,
    )
    return store, view, cache, clock


def test_state_changes_apply_in_place_without_reading_milvus() -> None:
    a, b = row("a", 1.0), row("b", 0.9, 0.1)
    store, view, cache, _ = setup(a, b)
    assert ids(cache) == ["a", "b"]
    reads = store.reads
    view["a"] = live(a, state="forgotten")
    cache.on_change("acme", "a", view["a"])
    view["b"] = live(b, valid_to_us=4_000_000, superseded_by="c", access_count=9)
    cache.on_change("acme", "b", view["b"])
    assert ids(cache) == []
    assert ids(cache, Filters(states=("forgotten",))) == ["a"]
    assert store.reads == reads  # no Milvus read: filters were applied from the view


def test_a_new_memory_is_read_from_milvus_once_it_is_there() -> None:
    a = row("a", 0.5, 0.5)
    store, view, cache, _ = setup(a)
    assert ids(cache) == ["a"]
    new = row("n", 1.0)
    view["n"] = live(new)
    cache.on_change("acme", "n", view["n"])
    assert ids(cache) == ["a"]  # the worker has not written the row yet
    store.put(new)
    assert ids(cache) == ["n", "a"]
    reads = store.reads
    assert ids(cache) == ["n", "a"]
    assert store.reads == reads  # clean again


def test_a_newer_version_waits_for_its_row() -> None:
    a = row("a", 1.0)
    store, view, cache, _ = setup(a)
    assert ids(cache) == ["a"]
    rewritten = row("a", 0.0, 1.0, write_count=2)
    view["a"] = live(rewritten)
    cache.on_change("acme", "a", view["a"])
    hits = cache.search("acme", [1.0, 0.0, 0.0, 0.0], 1, RECALL)
    assert hits is not None
    assert hits.similarity[0] == 1.0  # the old version, until Milvus has the new one
    store.put(rewritten)
    hits = cache.search("acme", [1.0, 0.0, 0.0, 0.0], 1, RECALL)
    assert hits is not None
    assert abs(hits.similarity[0]) < 1e-6


def test_a_purged_memorys_lingering_row_is_left_out_without_being_read_again() -> None:
    """The view answers a purged memory's values as :data:`storage.codec.PURGED` (write count
    0): the cache took that for a view behind the row, laid the row active and marked it dirty,
    so every search read Milvus again (off the event loop) for 30 s.
    """
    a, b = row("a", 1.0), row("b", 0.9, 0.1)
    store, view, cache, _ = setup(a, b)
    view.update(a=codec.PURGED, b=live(b))  # a's row awaits the worker's delete
    assert ids(cache) == ["b"]
    assert ids(cache) == ["b"]
    assert cache.ready("acme", RECALL)
    assert store.reads == 1  # the load alone
    view["a"] = live(a)  # written again after its purge
    cache.on_change("acme", "a", view["a"])
    assert ids(cache) == ["a", "b"]


def test_a_deleted_memory_leaves_at_once_and_a_missing_row_is_given_up_later() -> None:
    a, b = row("a", 1.0), row("b", 0.9, 0.1)
    store, _, cache, clock = setup(a, b)
    assert ids(cache) == ["a", "b"]
    cache.on_change("acme", "a", None)
    del store.rows["acme"]["a"]
    assert ids(cache) == ["b"]
    ghost = row("g", 1.0)
    cache.on_change("acme", "g", live(ghost))
    clock.now += DIRTY_GIVE_UP_S + 1
    assert ids(cache) == ["b"]
    reads = store.reads
    assert ids(cache) == ["b"]
    assert store.reads == reads  # given up: no read per search


@pytest.mark.parametrize("held_by", ["load", "preload"])
def test_a_memory_told_of_before_its_tenant_was_held_is_awaited_from_milvus(held_by: str) -> None:
    """The worker writes its table (the view hears) before its Milvus upsert: a load, or a
    preload's pass (MNEMO_HOT_CACHE_FILL=milvus, the fallback when the changelogs cannot be
    read), between the two reads no row of the memory, and on_change had ignored it (the tenant
    was not held).
    """
    a = row("a", 0.5, 0.5)
    store, view, cache, _ = setup(a)
    view["a"] = live(a)
    new = row("n", 1.0)
    view["n"] = live(new)
    cache.on_change("acme", "n", view["n"])  # not held: ignored
    if held_by == "load":
        assert ids(cache) == ["a"]  # loads; the row of n is not in Milvus yet
    else:
        cache.preload()
    assert not cache.ready("acme", RECALL)  # n is awaited
    store.put(new)
    assert ids(cache) == ["n", "a"]
    assert cache.ready("acme", RECALL)
    view["gone"] = live(row("gone", 1.0), state="deleted")  # purged: no row to await
    cache.forget()
    assert ids(cache) == ["n", "a"]
    assert cache.ready("acme", RECALL)


def test_a_row_landing_after_the_give_up_is_taken_while_the_view_holds_it_live() -> None:
    """A worker stopped between its table write and its upsert, back after DIRTY_GIVE_UP_S: the
    row it then writes is taken (no change of the memory follows, and recall never returned it,
    so no access would make one).
    """
    a = row("a", 0.5, 0.5)
    store, view, cache, clock = setup(a)
    assert ids(cache) == ["a"]
    late = row("late", 1.0)
    view["late"] = live(late)
    cache.on_change("acme", "late", view["late"])
    clock.now += DIRTY_GIVE_UP_S + 1
    assert ids(cache) == ["a"]  # given up for now
    reads = store.reads
    assert ids(cache) == ["a"]
    assert store.reads == reads  # not read at every search
    store.put(late)
    clock.now += LATE_RETRY_S
    assert ids(cache) == ["late", "a"]
    view["never"] = live(row("never", 1.0))  # one whose row never comes, which the view drops
    cache.on_change("acme", "never", view["never"])
    clock.now += DIRTY_GIVE_UP_S + 1
    assert ids(cache) == ["late", "a"]
    del view["never"]
    clock.now += LATE_RETRY_S
    assert ids(cache) == ["late", "a"]
    reads = store.reads
    clock.now += LATE_RETRY_S
    assert ids(cache) == ["late", "a"]
    assert store.reads == reads


def test_a_late_id_is_looked_for_every_retry_even_while_milvus_fails() -> None:
    """While Milvus was down, every search of a held tenant with a late id read Milvus (and
    failed), where it had been served from memory.
    """
    a = row("a", 0.5, 0.5)
    store, view, cache, clock = setup(a)
    assert ids(cache) == ["a"]
    view["late"] = live(row("late", 1.0))
    cache.on_change("acme", "late", view["late"])
    clock.now += DIRTY_GIVE_UP_S + 1
    assert ids(cache) == ["a"]  # given up for now
    clock.now += LATE_RETRY_S

    def down(*_args: object, **_kw: object) -> dict[str, MemoryRow]:
        raise StorageError("get", "down", retriable=True)

    store.get = down  # type: ignore[method-assign]
    with pytest.raises(StorageError):
        ids(cache)  # due: looked for, and Milvus fails
    assert cache.ready("acme", RECALL)  # not due again for LATE_RETRY_S
    assert ids(cache) == ["a"]


def test_rows_read_from_milvus_take_the_views_newer_state() -> None:
    a = row("a", 1.0, state="archived")
    _, view, cache, _ = setup(a)
    view["a"] = live(a, state="active")  # revived; Milvus not rewritten yet
    assert ids(cache, Filters(states=("active",))) == ["a"]


def test_the_user_scope_filters_like_the_agent_scope() -> None:
    users = ("ann", "bob", "")
    rows = [
        row(f"m{i:02d}", 1.0, i / 100, user_id=users[i % 3], agent_id="bot" if i % 2 else "")
        for i in range(40)  # past the first block: the user column grows with the others
    ]
    _, _, cache, _ = setup(*rows)

    def found(filters: Filters) -> list[str]:
        hits = cache.search("acme", [1.0, 0.0, 0.0, 0.0], 100, filters)
        assert hits is not None
        return sorted(r.memory_id for r in hits.rows)

    for user in users:
        assert found(Filters(user_id=user)) == [
            f"m{i:02d}" for i in range(40) if users[i % 3] == user
        ]
    both = found(Filters(user_id="ann", agent_id="bot"))
    assert both == [f"m{i:02d}" for i in range(40) if i % 3 == 0 and i % 2]
    assert len(found(Filters())) == 40


def test_least_recently_searched_tenants_go_over_the_budget() -> None:
    store = FakeStore()
    for tenant in ("t1", "t2", "t3"):
        store.put(*(make_row(tenant, f"m{i}", [1.0, 0, 0, 0]) for i in range(4)))
    cache = HotCache(store, total_max=8)  # type: ignore[arg-type]
    for tenant in ("t1", "t2", "t1", "t3"):
        assert cache.search(tenant, [1.0, 0, 0, 0], 2, Filters()) is not None
    assert cache.rows == 8
    assert cache.loads == 3
    cache.search("t2", [1.0, 0, 0, 0], 2, Filters())
    assert cache.loads == 4  # t2 was dropped for t3, loaded again


def test_an_access_updates_the_scoring_columns_without_reading_milvus() -> None:
    a, b = row("a", 1.0, importance=0.2), row("b", 0.9, 0.1, tier="semantic")
    store, view, cache, _ = setup(a, b)
    assert ids(cache) == ["a", "b"]
    reads = store.reads
    view["a"] = live(a, importance=0.8, access_count=3, last_access_us=4_000_000, tau_hours=9.0)
    cache.on_change("acme", "a", view["a"])
    view["b"] = live(b, state="archived")
    cache.on_change("acme", "b", view["b"])
    hits = cache.search("acme", [1.0, 0.0, 0.0, 0.0], 10, RECALL)
    assert hits is not None
    expected = LiveColumns.of([view["a"], view["b"]])
    for name in ("importance", "last_access_us", "tau_hours", "accessed", "tier", "archived"):
        assert getattr(hits.live, name).tolist() == getattr(expected, name).tolist(), name
    assert hits.live.accessed.tolist() == [True, False]
    assert hits.live.archived.tolist() == [False, True]
    assert hits.live.tier.tolist() == [TIERS.index("episodic"), TIERS.index("semantic")]
    assert store.reads == reads


def test_the_hot_request_equals_the_one_built_from_candidates() -> None:
    rows = [row(f"m{i}", 1.0, i / 10, importance=i / 10, tier=TIERS[i % 3]) for i in range(6)]
    _, view, cache, clock = setup(*rows)
    view["m2"] = live(rows[2], importance=0.9, access_count=1, last_access_us=3_000_000)
    cache.on_change("acme", "m2", view["m2"])
    # a newer version whose row Milvus never gets: given up on, yet scored on the view's values
    view["m4"] = live(rows[4], write_count=2, importance=0.95, state="archived", tier="semantic")
    cache.on_change("acme", "m4", view["m4"])
    assert cache.search("acme", [1.0, 0.0, 0.0, 0.0], 1, RECALL) is not None  # still dirty
    clock.now += DIRTY_GIVE_UP_S + 1
    hits = cache.search("acme", [1.0, 0.3, 0.0, 0.0], 5, RECALL)
    assert hits is not None
    assert len(hits) == 5
    query = RecallQuery(
        text="hello", vector=(1.0, 0.3, 0.0, 0.0), k=3, at=AT, policy=RecallPolicy()
    )
    hot = _hot_request(hits, query.vector or (), query)
    candidates = [
        Candidate(r, s, None, v)
        for r, s, v in zip(hits.rows, hits.similarity.tolist(), hits.vectors, strict=True)
    ]

    def live_of(r: MemoryRow) -> tuple[Any, ...]:
        return view.get(r.memory_id) or row_live_values(r)

    general = _request(candidates, query.vector or (), query, {}, live_of)
    for field in dataclasses.fields(RankRequest):
        a, b = getattr(hot, field.name), getattr(general, field.name)
        if isinstance(a, np.ndarray):
            assert a.tolist() == b.tolist(), field.name
        else:
            assert a == b, field.name


def local_setup(*rows: MemoryRow) -> tuple[FakeStore, dict[str, tuple[Any, ...]], HotCache, Clock]:
    """A cache with a worker in its process: rows it writes come through ``upserted``."""
    store, view, _, clock = setup(*rows)
    cache = HotCache(store, lambda _t, m: view.get(m), clock=clock, writer_grace_s=5.0)  # type: ignore[arg-type]
    return store, view, cache, clock


def written_elsewhere(
    store: FakeStore, view: dict[str, tuple[Any, ...]], cache: HotCache
) -> MemoryRow:
    """A new memory ``n``: the view tells the cache of it, and Milvus holds its row."""
    new = row("n", 1.0)
    view["n"] = live(new)
    cache.on_change("acme", "n", view["n"])  # the view may hear of it before the upsert ends
    store.put(new)
    return new


def test_a_row_the_local_worker_writes_is_searchable_without_a_milvus_read() -> None:
    a = row("a", 0.5, 0.5)
    store, view, cache, _ = local_setup(a)
    assert ids(cache) == ["a"]
    reads = store.reads
    new = written_elsewhere(store, view, cache)
    cache.upserted([new, row("z", 1.0, tenant_id="other")])  # a tenant not held is left alone
    assert ids(cache) == ["n", "a"]
    assert cache.ready("acme", RECALL)
    assert store.reads == reads


def test_a_dirty_id_waits_the_grace_for_the_local_worker_then_is_read() -> None:
    a = row("a", 0.5, 0.5)
    store, view, cache, clock = local_setup(a)
    assert ids(cache) == ["a"]
    reads = store.reads
    written_elsewhere(store, view, cache)  # by another process: no upserted call comes
    assert ids(cache) == ["a"]
    assert cache.ready("acme", RECALL)  # nothing to read yet: the search may run on the loop
    assert store.reads == reads
    clock.now += 5.0
    assert not cache.ready("acme", RECALL)
    assert ids(cache) == ["n", "a"]
    assert store.reads == reads + 1


def test_an_older_version_written_late_does_not_replace_the_newer_row() -> None:
    old, new = row("a", 1.0), row("a", 0.0, 1.0, write_count=2)
    _, _, cache, _ = local_setup(new)
    assert ids(cache) == ["a"]
    cache.upserted([old])
    hits = cache.search("acme", [1.0, 0.0, 0.0, 0.0], 1, RECALL)
    assert hits is not None
    assert abs(hits.similarity[0]) < 1e-6  # still the newer version's vector


def test_without_a_local_worker_every_dirty_id_is_read_at_once() -> None:
    a = row("a", 0.5, 0.5)
    store, view, cache, _ = setup(a)
    assert ids(cache) == ["a"]
    written_elsewhere(store, view, cache)
    assert not cache.ready("acme", RECALL)
    assert ids(cache) == ["n", "a"]


def test_a_memory_rewritten_after_its_purge_is_taken_from_the_local_worker() -> None:
    old = row("a", 1.0, write_count=3)
    store, view, cache, _ = local_setup(old)
    assert ids(cache) == ["a"]
    view.pop("a", None)
    cache.on_change("acme", "a", None)  # purged: the view drops it, the slot is emptied
    again = row("a", 0.0, 1.0, write_count=1, created_at_us=old.created_at_us + 1)
    view["a"] = live(again)
    cache.on_change("acme", "a", view["a"])
    store.put(again)
    cache.upserted([again])
    hits = cache.search("acme", [0.0, 1.0, 0.0, 0.0], 1, RECALL)
    assert hits is not None
    assert [r.memory_id for r in hits.rows] == ["a"]
    assert hits.similarity[0] == 1.0


def purged_local_setup() -> tuple[FakeStore, dict[str, tuple[Any, ...]], HotCache, MemoryRow]:
    """A local worker's cache holding ``a`` (3 writes) and ``b``; ``a`` then purged: the view
    keeps its id alone (answering :data:`storage.codec.PURGED`), tells the cache, and the
    worker deletes its row.
    """
    old, b = row("a", 1.0, write_count=3), row("b", 0.5, 0.5)
    store, view, _, clock = setup(old, b)
    view.update(a=live(old), b=live(b))

    def purged_writes(_t: str, m: str) -> int | None:
        return 3 if view.get(m) is codec.PURGED else None

    cache = HotCache(
        store,  # type: ignore[arg-type]
        lambda _t, m: view.get(m),
        purged_writes=purged_writes,
        clock=clock,
        writer_grace_s=5.0,
    )
    assert ids(cache) == ["a", "b"]
    view["a"] = codec.PURGED
    cache.on_change("acme", "a", None)
    del store.rows["acme"]["a"]
    assert ids(cache) == ["b"]
    return store, view, cache, old


def test_a_memory_rewritten_after_its_purge_is_taken_from_the_local_worker_before_the_view() -> (
    None
):
    """The local worker hands its new row over before the view reads the rewrite: the view still
    answers the purge, and the row was left out as the purged memory's lingering one: the
    memory missing from recall for the writer's grace (5 s).
    """
    store, view, cache, old = purged_local_setup()
    again = row("a", 1.0, write_count=4, created_at_us=old.created_at_us + 10)
    store.put(again)
    cache.upserted([again])
    assert ids(cache) == ["a", "b"]
    view["a"] = live(again)
    cache.on_change("acme", "a", view["a"])
    assert ids(cache) == ["a", "b"]


def test_a_rewrite_the_view_reads_while_its_row_is_handed_over_is_laid() -> None:
    """The view (the event loop) may read the rewrite between the cache's two reads of it in
    the upserting thread: the purge, then no purge mark. The row was left out as the purged
    memory's, and the memory missed from recall for the writer's grace.
    """
    store, view, cache, old = purged_local_setup()
    again = row("a", 1.0, write_count=4, created_at_us=old.created_at_us + 10)
    asked = cache.purged_writes

    def the_view_reads_the_rewrite_now(tenant_id: str, memory_id: str) -> int | None:
        view["a"] = live(again)
        return asked(tenant_id, memory_id)

    cache.purged_writes = the_view_reads_the_rewrite_now
    store.put(again)
    cache.upserted([again])
    cache.on_change("acme", "a", view["a"])  # its notice, waiting on the block lock meanwhile
    assert ids(cache) == ["a", "b"]


def test_a_row_from_before_the_purge_the_local_worker_lands_late_is_left_out() -> None:
    """An access batch's row built before the purge, retried while Milvus was down, lands after
    it: laid because the view answered the purge, it stayed in the cache after the worker's
    delete, and came back in recall once the purge's mark was gone.
    """
    store, view, cache, old = purged_local_setup()
    stale = dataclasses.replace(old, access_count=old.access_count + 1)  # 3 writes, as purged
    store.put(stale)
    cache.upserted([stale])
    assert ids(cache) == ["b"]
    del store.rows["acme"]["a"]  # the worker's delete lands next
    view.pop("a")  # the purge's mark gone (evicted)
    assert ids(cache) == ["b"]


def test_a_row_the_cache_fails_to_take_is_read_back_without_waiting_the_grace() -> None:
    a = row("a", 0.5, 0.5)
    store, view, _, clock = setup(a)
    broken = {"n"}

    def live_of(_tenant: str, memory_id: str) -> tuple[Any, ...] | None:
        if memory_id in broken:
            raise RuntimeError("view unreadable")
        return view.get(memory_id)

    cache = HotCache(store, live_of, clock=clock, writer_grace_s=5.0)  # type: ignore[arg-type]
    assert ids(cache) == ["a"]
    new = row("n", 1.0)
    store.put(new)
    cache.upserted([new])  # logged, not raised
    broken.clear()
    assert not cache.ready("acme", RECALL)
    assert ids(cache) == ["n", "a"]


def test_a_rewrite_after_a_delete_replaces_the_old_memory_whatever_its_time() -> None:
    old = row("a", 1.0, write_count=3, state="forgotten")
    store, _, cache, _ = local_setup(old)
    assert ids(cache, Filters(states=("forgotten",))) == ["a"]
    again = row("a", 0.0, 1.0, write_count=1, created_at_us=old.created_at_us - 1)
    store.put(again)
    cache.upserted([again])  # a new memory: its count starts again, its time is the client's
    hits = cache.search("acme", [0.0, 1.0, 0.0, 0.0], 1, RECALL)
    assert hits is not None
    assert [r.memory_id for r in hits.rows] == ["a"]
    assert hits.similarity[0] == 1.0


def test_an_older_row_read_back_keeps_a_newer_version_awaited() -> None:
    v1 = row("a", 1.0)
    _, view, cache, _ = setup(v1)
    assert ids(cache) == ["a"]
    cache.upserted([row("a", 0.0, 1.0, write_count=2)])
    view["a"] = live(v1, write_count=3)  # the view already knows a third version
    cache.on_change("acme", "a", view["a"])
    assert not cache.ready("acme", RECALL)
    ids(cache)  # Milvus still answers the first version: older than the one held
    assert not cache.ready("acme", RECALL)  # the third version is still awaited


def sole_writer_setup(
    *rows: MemoryRow, total_max: int = 2_000_000, tenant_max: int = 16_384
) -> tuple[FakeStore, HotCache]:
    """A cache whose process alone writes the collection (Milvus Lite embedded), not preloaded."""
    store = FakeStore()
    store.put(*rows)
    cache = HotCache(
        store,  # type: ignore[arg-type]
        writer_grace_s=5.0,
        sole_writer=True,
        total_max=total_max,
        tenant_max=tenant_max,
    )
    return store, cache


def written(store: FakeStore, cache: HotCache, *rows: MemoryRow) -> None:
    """The worker in the cache's process writes ``rows``: Milvus has them, then the cache hears."""
    store.put(*rows)
    cache.upserted(rows)


def found(cache: HotCache, tenant: str) -> list[str] | None:
    hits = cache.search(tenant, [1.0, 0.0, 0.0, 0.0], 10, Filters())
    return None if hits is None else sorted(r.memory_id for r in hits.rows)


def test_a_new_tenant_written_by_the_sole_writer_is_searched_without_a_milvus_read() -> None:
    store, cache = sole_writer_setup(row("a", 1.0))
    cache.preload()
    written(store, cache, make_row("fresh", "f1", [1.0, 0, 0, 0]))
    written(store, cache, make_row("fresh", "f2", [0, 1.0, 0, 0]))
    assert cache.ready("fresh", Filters())
    assert found(cache, "fresh") == ["f1", "f2"]
    assert store.reads == 0


def test_a_cache_filled_with_every_row_reads_nothing_back_from_milvus() -> None:
    """``python -m server`` fills the cache from the rows its start-up resync read."""
    rows = [row("a", 1.0), row("b", 0, 1.0), make_row("globex", "g1", [0, 0, 1.0, 0])]
    store, cache = sole_writer_setup(*rows)
    store.scan = None  # type: ignore[assignment,method-assign]  # a scan would fail
    assert cache.fill([rows[:2], rows[2:]]) == (3, 2)
    assert not cache.preload_ended.is_set()  # GET /readyz waits for the preload's return
    assert cache.preload() == (3, 2)  # complete: nothing scanned
    assert cache.preload_ended.is_set()
    assert found(cache, "acme") == ["a", "b"]
    assert found(cache, "globex") == ["g1"]
    written(store, cache, make_row("fresh", "f1", [1.0, 0, 0, 0]))  # known empty: starts
    assert found(cache, "fresh") == ["f1"]
    assert store.reads == 0


def test_a_fill_asked_to_stop_holds_no_tenant_and_leaves_the_cache_incomplete() -> None:
    store, cache = sole_writer_setup(row("a", 1.0))
    cache.stop_preload()
    with pytest.raises(PreloadStoppedError):
        cache.fill([[row("a", 1.0)], [make_row("globex", "g1", [1.0, 0, 0, 0])]])
    assert cache.rows == 0
    written(store, cache, make_row("fresh", "f1", [1.0, 0, 0, 0]))
    assert found(cache, "fresh") == ["f1"]
    assert store.reads == 1  # not known empty: loaded from Milvus


@pytest.mark.parametrize("sole_writer", [True, False])
def test_a_purged_memory_the_view_replays_is_read_back_only_into_a_partial_view(
    sole_writer: bool,
) -> None:
    kept = row("a", 1.0)
    store = FakeStore()
    store.put(kept)
    cache = HotCache(store, sole_writer=sole_writer)  # type: ignore[arg-type]
    cache.fill([[kept]])
    cache.on_change("acme", "gone", live(row("gone", 0, 1.0), state="deleted"))  # purged
    # the sole writer's complete cache met every row: a deleted memory it lacks has none
    assert cache.ready("acme", Filters()) is sole_writer
    cache.on_change("acme", "new", live(row("new", 0, 1.0)))  # a new memory is read either way
    assert not cache.ready("acme", Filters())
    assert found(cache, "acme") == ["a"]
    assert store.reads == 1


def test_a_forgotten_fill_is_preloaded_from_milvus() -> None:
    rows = [row("a", 1.0), row("b", 0, 1.0)]
    _, cache = sole_writer_setup(*rows)
    cache.fill([rows[:1]])  # fewer rows than Milvus holds (the resync found the counts apart)
    cache.forget()
    assert cache.held() == (0, 0)
    assert cache.preload() == (2, 1)  # scanned
    assert found(cache, "acme") == ["a", "b"]


def test_a_new_tenant_loads_from_milvus_when_other_processes_may_write() -> None:
    store, _ = sole_writer_setup(row("a", 1.0))
    cache = HotCache(store, writer_grace_s=5.0)  # type: ignore[arg-type]  # a shared server
    cache.preload()
    written(store, cache, make_row("fresh", "f1", [1.0, 0, 0, 0]))
    assert not cache.ready("fresh", Filters())
    assert found(cache, "fresh") == ["f1"]
    assert store.reads == 1


def test_before_a_complete_preload_no_tenant_is_known_empty() -> None:
    store, cache = sole_writer_setup(row("a", 1.0))
    store.put(make_row("old", "o1", [1.0, 0, 0, 0]))  # in Milvus from an earlier run
    written(store, cache, make_row("old", "o2", [0, 1.0, 0, 0]))  # no preload yet
    assert found(cache, "old") == ["o1", "o2"]
    assert store.reads == 1


def test_a_tenant_written_during_the_preload_pass_loads_from_milvus() -> None:
    store, cache = sole_writer_setup(row("a", 1.0))
    # written while the pass reads: the pass may have gone by the row's place
    store.during_scan = lambda: written(store, cache, make_row("late", "l1", [1.0, 0, 0, 0]))  # type: ignore[method-assign]
    store.rows.setdefault("late", {})  # ... and the page it was on is read already
    cache.preload()
    written(store, cache, make_row("late", "l2", [0, 1.0, 0, 0]))
    assert found(cache, "late") == ["l1", "l2"]
    assert store.reads == 1


def test_a_dropped_tenant_is_not_taken_as_empty_again() -> None:
    store, cache = sole_writer_setup(
        *(make_row("t1", f"m{i}", [1.0, 0, 0, 0]) for i in range(4)), total_max=4
    )
    cache.preload()
    written(store, cache, make_row("t2", "n0", [1.0, 0, 0, 0]))  # new: t1 is dropped for it
    assert found(cache, "t2") == ["n0"]
    assert store.reads == 0
    written(store, cache, make_row("t1", "m4", [1.0, 0, 0, 0]))
    assert found(cache, "t1") == ["m0", "m1", "m2", "m3", "m4"]
    assert store.reads == 1


def test_a_tenant_written_past_the_tenant_limit_leaves_the_cache_for_milvus() -> None:
    store, cache = sole_writer_setup(*(row(f"m{i}", 1.0) for i in range(3)), tenant_max=4)
    cache.preload()
    written(store, cache, row("m3", 1.0))
    assert found(cache, "acme") == ["m0", "m1", "m2", "m3"]  # at the limit: still held
    written(store, cache, row("m4", 1.0))
    assert cache.rows == 0
    assert found(cache, "acme") is None  # the caller searches Milvus
    written(store, cache, row("m5", 1.0))  # not taken again by a write either
    assert cache.rows == 0


def test_a_tenant_grown_past_the_limit_between_its_count_and_its_read_is_not_held_cut() -> None:
    """The load counts, then reads at most the limit: a write in between made a block cut at
    the limit, and the hot path missed the rows left out.
    """
    store, cache = sole_writer_setup(*(row(f"m{i}", 1.0) for i in range(5)), tenant_max=4)
    counts = iter([4, 5])  # counted before a write, then after it
    store.count = lambda *_a, **_k: next(counts)  # type: ignore[method-assign]
    assert found(cache, "acme") is None  # the caller searches Milvus
    assert cache.rows == 0


def test_writes_to_held_tenants_past_the_total_limit_drop_the_least_recently_searched() -> None:
    store, cache = sole_writer_setup(
        *(make_row(t, f"{t}-0", [1.0, 0, 0, 0]) for t in ("t1", "t2", "t3")), total_max=4
    )
    cache.preload()
    for tenant in ("t2", "t1", "t3"):
        assert found(cache, tenant) == [f"{tenant}-0"]
    written(store, cache, make_row("t1", "t1-1", [1.0, 0, 0, 0]))
    written(store, cache, make_row("t3", "t3-1", [1.0, 0, 0, 0]))
    assert cache.rows == 4  # t2, searched longest ago, went
    reads = store.reads
    assert found(cache, "t1") == ["t1-0", "t1-1"]
    assert found(cache, "t3") == ["t3-0", "t3-1"]
    assert store.reads == reads
    assert found(cache, "t2") == ["t2-0"]
    assert store.reads == reads + 1  # loaded again from Milvus


def test_rows_read_back_past_the_tenant_limit_leave_the_cache_for_milvus() -> None:
    store = FakeStore()
    store.put(row("a", 1.0), row("b", 1.0))
    view: dict[str, tuple[Any, ...]] = {}
    cache = HotCache(store, lambda _t, m: view.get(m), tenant_max=2)  # type: ignore[arg-type]
    assert ids(cache) == ["a", "b"]
    new = row("c", 1.0)
    store.put(new)  # written by a worker elsewhere: the view tells, the search reads it back
    view["c"] = live(new)
    cache.on_change("acme", "c", view["c"])
    assert ids(cache) == ["a", "b", "c"]  # this search is answered from the rows it read
    assert cache.rows == 0
    assert cache.search("acme", [1.0, 0.0, 0.0, 0.0], 10, RECALL) is None


def test_a_tenants_rows_come_from_the_cache_only_while_none_is_awaited() -> None:
    a, b = row("a", 2.0), row("b", 0.0, 3.0)
    store, view, cache, clock = setup(a, b)
    assert cache.tenant_rows("acme") is None  # not held, and not loaded for it
    assert store.reads == 0
    assert ids(cache) == ["a", "b"]
    reads = store.reads
    got = cache.tenant_rows("acme") or []
    assert [(r.memory_id, r.vector) for r in got] == [("a", (1.0, 0, 0, 0)), ("b", (0, 1.0, 0, 0))]
    assert store.reads == reads
    new = row("n", 1.0)
    view["n"] = live(new)
    cache.on_change("acme", "n", view["n"])  # the worker has not written its row yet
    assert cache.tenant_rows("acme") is None
    store.put(new)
    assert [r.memory_id for r in cache.tenant_rows("acme") or []] == ["a", "b", "n"]
    del store.rows["acme"]["b"]
    cache.on_change("acme", "b", None)  # purged: its row is read back until given up
    assert cache.tenant_rows("acme") is None
    clock.now += DIRTY_GIVE_UP_S + 1
    assert [r.memory_id for r in cache.tenant_rows("acme") or []] == ["a", "n"]


def test_a_tenant_the_sole_writer_never_wrote_has_no_rows_without_a_milvus_read() -> None:
    store, cache = sole_writer_setup(row("a", 1.0))
    assert cache.tenant_rows("new") is None  # before a complete preload nothing is known
    cache.preload()
    reads = store.reads
    assert cache.tenant_rows("new") == []
    written(store, cache, make_row("new", "n1", [1.0, 0, 0, 0]))
    assert [r.memory_id for r in cache.tenant_rows("new") or []] == ["n1"]
    cache.upsert_failed([make_row("odd", "o1", [1.0, 0, 0, 0])])  # Milvus may hold it
    assert cache.tenant_rows("odd") is None
    assert store.reads == reads


def test_a_load_or_a_preload_that_fails_leaves_no_block_to_pass_for_the_tenant() -> None:
    store, cache = sole_writer_setup(row("a", 1.0), make_row("other", "o1", [1.0, 0, 0, 0]))

    def down(*_args: object, **_kw: object) -> list[MemoryRow]:
        raise StorageError("query", "down", retriable=True)

    store.query = down  # type: ignore[method-assign]
    with pytest.raises(StorageError):
        cache.search("acme", [1.0, 0, 0, 0], 10, Filters())
    assert not cache.ready("acme", Filters())

    def broken_pass() -> Iterator[list[MemoryRow]]:
        yield list(store.rows["acme"].values())
        raise StorageError("scan", "down", retriable=True)

    store.scan = broken_pass  # type: ignore[method-assign]
    assert not cache.preload_ended.is_set()
    with pytest.raises(StorageError):
        cache.preload()
    assert cache.preload_ended.is_set()  # readiness does not wait for a pass that failed
    assert cache.rows == 0
    written(store, cache, make_row("fresh", "f1", [1.0, 0, 0, 0]))  # no tenant known empty
    assert not cache.ready("fresh", Filters())


class Gate:
    """A tenant's load gate that says when a search waits on it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.waited = threading.Event()

    def __enter__(self) -> Gate:
        self.waited.set()
        self.lock.acquire()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.lock.release()


def test_a_search_whose_awaited_load_failed_loads_the_tenant_as_a_load_again() -> None:
    """Two searches of a tenant not held: the second waits on the first's load. When that
    load failed, its end unregistered the load and the second loaded unregistered: its block,
    still empty, passed for the whole tenant, and a search on the event loop (``ready``) found
    nothing.
    """
    a, b = row("a", 1.0), row("b", 0.9, 0.1)
    store, view, cache, _ = setup(a, b)
    view.update(a=live(a), b=live(b))
    first = Gate()  # a first load under way
    first.lock.acquire()
    cache._loading["acme"] = first  # type: ignore[assignment]
    seen: list[bool] = []
    read = store.query

    def query(tenant_id: str, filters: Filters = ANY_STATE, limit: int = 0) -> list[MemoryRow]:
        seen.append(cache.ready("acme", RECALL))  # while the second load reads Milvus
        return read(tenant_id, filters, limit)

    store.query = query  # type: ignore[method-assign]
    found: list[list[str]] = []
    second = threading.Thread(target=lambda: found.append(ids(cache)))
    second.start()
    assert first.waited.wait(10)
    del cache._loading["acme"]  # the first load failed: its end unregisters it
    first.lock.release()
    second.join(10)
    assert seen == [False]
    assert found == [["a", "b"]]
    assert cache.ready("acme", RECALL)


def test_a_failed_load_leaves_its_tenant_no_longer_known_empty() -> None:
    store, cache = sole_writer_setup(row("a", 1.0))
    cache.preload()
    store.put(make_row("new", "n1", [1.0, 0, 0, 0]))  # written as its first search began

    def down(*_args: object, **_kw: object) -> list[MemoryRow]:
        raise StorageError("query", "down", retriable=True)

    store.query = down  # type: ignore[method-assign]
    with pytest.raises(StorageError):
        cache.search("new", [1.0, 0, 0, 0], 10, Filters())
    assert cache.tenant_rows("new") is None  # Milvus may hold rows: the caller reads it


def test_a_failed_upsert_makes_its_tenant_load_from_milvus() -> None:
    store, cache = sole_writer_setup(row("a", 1.0))
    cache.preload()
    store.put(make_row("fresh", "f1", [1.0, 0, 0, 0]))  # Milvus took it, but the call raised
    cache.upsert_failed([make_row("fresh", "f1", [1.0, 0, 0, 0])])
    written(store, cache, make_row("fresh", "f2", [0, 1.0, 0, 0]))
    assert found(cache, "fresh") == ["f1", "f2"]
    assert store.reads == 1


def test_neighbours_answer_as_a_search_per_vector_or_not_at_all() -> None:
    """The supersession check's search (``streams.app.nearest``): each vector's nearest rows
    under the filters, best first, with their cosine; None where the cache cannot answer
    exactly, so that the caller asks Milvus.
    """
    a, b, c = row("a", 1.0), row("b", 0.8, 0.6), row("c", 0.0, 1.0)
    gone = row("gone", 1.0, 0.1, state="forgotten")
    store, _, cache, _ = setup(a, b, c, gone)
    found = cache.neighbours("acme", [[2.0, 0, 0, 0], [0, 1.0, 0, 0]], 2, RECALL)
    assert found is not None
    assert [[(h.row.memory_id, round(h.similarity, 6)) for h in hits] for hits in found] == [
        [("a", 1.0), ("b", 0.8)],
        [("c", 1.0), ("b", 0.6)],
    ]
    # each row with its vector, as Milvus's: the worker rescores a fact stem's hits by them
    assert [tuple(round(x, 6) for x in h.row.vector) for h in found[0]] == [
        (1.0, 0.0, 0.0, 0.0),
        (0.8, 0.6, 0.0, 0.0),
    ]
    assert cache.neighbours("acme", [[1.0, 0, 0, 0]], 2, Filters(tags_any=("x",))) is None
    small = HotCache(store, tenant_max=3)  # type: ignore[arg-type]  # acme has 4 rows: Milvus's
    assert small.neighbours("acme", [[1.0, 0, 0, 0]], 2, RECALL) is None


def test_a_preload_asked_to_stop_ends_at_its_next_page_holding_no_tenant_it_began() -> None:
    """The process is stopping: the preload's thread must end (an in-process Milvus Lite server
    ends with the process, and a thread waiting for its answer would hold the exit).
    """
    store, cache = sole_writer_setup(row("a", 1.0), make_row("other", "o1", [1.0, 0, 0, 0]))
    pages: list[int] = []

    def paged_pass() -> Iterator[list[MemoryRow]]:
        for tenant_id in ("acme", "other"):
            pages.append(len(pages))
            if len(pages) == 2:
                cache.stop_preload()  # asked once the first page is held
            yield list(store.rows[tenant_id].values())

    store.scan = paged_pass  # type: ignore[method-assign]
    with pytest.raises(PreloadStoppedError):
        cache.preload(["acme", "other"])
    assert pages == [0, 1]
    assert cache.rows == 0
    assert not cache.ready("acme", Filters())


def test_a_preload_asked_to_stop_loads_no_tenant_one_by_one_either() -> None:
    """A Milvus that cannot scan is loaded tenant by tenant; a stop ends that too."""
    store, cache = sole_writer_setup(row("a", 1.0))

    def cannot_scan() -> Iterator[list[MemoryRow]]:
        raise StorageError("scan", "no query iterator", retriable=False)

    store.scan = cannot_scan  # type: ignore[method-assign]
    cache.stop_preload()
    with pytest.raises(PreloadStoppedError):
        cache.preload(["acme"])
    assert not cache.ready("acme", Filters())


def pages_told_between(
    cache: HotCache, view: dict[str, tuple[Any, ...]], *pages: list[MemoryRow]
) -> Iterator[list[MemoryRow]]:
    """``pages`` for a fill; after the first, the state view tells the cache of every memory of
    the later pages (replaying its topic while the pass lays them)."""
    yield pages[0]
    for page in pages[1:]:
        for r in page:
            view[r.memory_id] = live(r)
            cache.on_change(r.tenant_id, r.memory_id, view[r.memory_id])
    yield from pages[1:]


def test_a_change_told_during_the_pass_is_met_by_the_row_it_then_lays() -> None:
    a, b = row("a", 1.0), row("b", 0.9, 0.1)
    store, view, cache, _ = setup(a, b)
    cache.fill(pages_told_between(cache, view, [a], [b]))
    assert ids(cache) == ["a", "b"]
    assert store.reads == 0  # b is laid as new as the view knows it: nothing to read back


def test_a_newer_version_told_during_the_pass_is_still_read_back() -> None:
    a, b = row("a", 1.0), row("b", 0.9, 0.1)
    store, view, cache, _ = setup(a, b)
    newer = row("b", 0.0, 1.0, write_count=2)

    def pages() -> Iterator[list[MemoryRow]]:
        yield [a]
        view["b"] = live(newer)
        cache.on_change("acme", "b", view["b"])
        store.put(newer)  # the worker wrote it to Milvus; the pass laid the older one
        yield [b]

    cache.fill(pages())
    hits = cache.search("acme", [1.0, 0.0, 0.0, 0.0], 10, RECALL)
    assert hits is not None
    similarity = dict(zip([r.memory_id for r in hits.rows], hits.similarity.tolist(), strict=True))
    assert abs(similarity["b"]) < 1e-6  # b's newer version, read back: orthogonal to the query
    assert store.reads == 1


def test_until_a_fill_is_complete_searches_go_to_milvus() -> None:
    """The fill's ``then`` (a ranker marks there what its reads missed) runs before the rows
    pass for the tenant: a search meanwhile answers None (the caller asks Milvus)."""
    a = row("a", 1.0)
    store, _, cache, _ = setup(a)
    during: list[object] = []
    cache.fill([[a]], then=lambda: during.append(cache.search("acme", [1.0, 0, 0, 0], 5, RECALL)))
    assert during == [None]
    assert ids(cache) == ["a"]
    assert store.reads == 0


def test_a_memory_the_view_dropped_during_the_pass_stays_marked() -> None:
    a, b = row("a", 1.0), row("b", 0.9, 0.1)
    store, _, cache, clock = setup(a, b)

    def pages() -> Iterator[list[MemoryRow]]:
        yield [a]
        cache.on_change("acme", "b", live(b))  # told, then dropped (deleted) meanwhile
        cache.on_change("acme", "b", None)
        del store.rows["acme"]["b"]
        yield [b]  # the pass's older read still had it

    cache.fill(pages())
    clock.now += DIRTY_GIVE_UP_S + 1
    assert ids(cache) == ["a"]  # read back: Milvus no longer has it (given up: removed)


def test_a_rewrite_whose_row_lands_after_the_give_up_is_taken_when_it_lands() -> None:
    """A rewrite's upsert later than DIRTY_GIVE_UP_S (a worker stopped between its table write
    and its upsert): Milvus meanwhile answers the older version, which the view knows is not the
    newest. Before, the id was given up for good and the old words and vector served forever.
    """
    a, b = row("a", 1.0), row("b", 0.8, 0.6)
    store, view, cache, clock = setup(a, b)
    view["a"], view["b"] = live(a), live(b)
    assert ids(cache) == ["a", "b"]
    new = row("a", 0.0, 0.0, 1.0, write_count=2, content="new words")
    view["a"] = live(new)
    cache.on_change("acme", "a", view["a"])
    clock.now += DIRTY_GIVE_UP_S + 1
    assert ids(cache) == ["a", "b"]  # the old version, all Milvus has: given up for now
    store.put(new)
    clock.now += LATE_RETRY_S
    hits = cache.search("acme", [1.0, 0.0, 0.0, 0.0], 10, RECALL)
    assert hits is not None
    assert [(r.memory_id, r.content) for r in hits.rows] == [("b", b.content), ("a", "new words")]
    assert abs(hits.similarity[1]) < 1e-6
    assert cache.ready("acme", RECALL)


def test_the_give_up_counts_from_the_latest_change_of_a_memory() -> None:
    """An id marked by a rewrite whose row landed unread (nobody searched) kept that mark's
    time: its next rewrite, met by one search in the worker's ordinary lag, was given up at once
    and the older version served for good, also after the write's token.
    """
    q = [1.0, 0.0, 0.0, 0.0]
    v1, b = row("a", 0.0, 1.0), row("b", 0.6, 0.8)
    store, view, cache, clock = setup(v1, b)
    view["a"], view["b"] = live(v1), live(b)
    assert ids(cache) == ["b", "a"]
    v2 = row("a", 0.0, 0.0, 1.0, write_count=2, content="v2")
    view["a"] = live(v2)
    cache.on_change("acme", "a", view["a"])
    store.put(v2)  # landed; no search reads it back
    clock.now += 60
    v3 = row("a", 1.0, write_count=3, content="v3")
    view["a"] = live(v3)
    cache.on_change("acme", "a", view["a"])
    clock.now += 0.05
    assert ids(cache) == ["b", "a"]  # in the worker's lag: Milvus has v2
    store.put(v3)
    hits = cache.search("acme", q, 10, RECALL)
    assert hits is not None
    assert [(r.memory_id, r.content) for r in hits.rows] == [("a", "v3"), ("b", b.content)]


def test_a_memory_written_again_long_after_its_delete_is_served_once_its_row_lands() -> None:
    """Written (its id marked while nobody searched), deleted, written again 40 s later: the
    deleted row Milvus still answers in the worker's lag must not give the new memory up."""
    b = row("b", 0.6, 0.8)
    store, view, cache, clock = setup(b)
    view["b"] = live(b)
    assert ids(cache) == ["b"]
    x1 = row("x", 0.9, 0.1)
    view["x"] = live(x1)
    cache.on_change("acme", "x", view["x"])
    store.put(x1)
    clock.now += 5
    deleted = dataclasses.replace(x1, state="deleted")
    view["x"] = live(deleted)
    cache.on_change("acme", "x", view["x"])
    store.put(deleted)
    clock.now += 40
    x2 = row("x", 1.0, write_count=2, created_at_us=2_000_000, content="x again")
    view["x"] = live(x2)
    cache.on_change("acme", "x", view["x"])
    clock.now += 0.05
    assert ids(cache) == ["b"]  # Milvus still has the deleted row
    store.put(x2)
    assert ids(cache) == ["x", "b"]
    assert cache.ready("acme", RECALL)


def test_an_access_to_an_awaited_version_keeps_its_mark_and_its_give_up() -> None:
    """Only a change that tells something new restamps a mark: accesses to a memory whose new
    version is awaited do not postpone the give-up (nor a local writer's grace) for ever."""
    a = row("a", 1.0)
    store, view, cache, clock = setup(a)
    view["a"] = live(a)
    assert ids(cache) == ["a"]
    view["a"] = live(a, write_count=2)
    cache.on_change("acme", "a", view["a"])
    for _ in range(4):
        clock.now += DIRTY_GIVE_UP_S / 3
        view["a"] = live(a, write_count=2, access_count=int(clock.now))
        cache.on_change("acme", "a", view["a"])
    ids(cache)  # given up: looked for every LATE_RETRY_S from now
    reads = store.reads
    ids(cache)
    assert store.reads == reads


@pytest.mark.parametrize("failing", ["count", "count again"])
def test_a_load_whose_count_fails_leaves_no_block_a_change_began_meanwhile(failing: str) -> None:
    """A change told while the load's count is in flight makes a pending block; when a count
    raises (the first, or the second one of a read that met the limit), that block held the
    tenant with only the changed memory: every other row missing, served as if complete.
    """
    rows = [row(f"m{i}", 1.0, i / 10) for i in range(5)]
    store = FakeStore()
    store.put(*rows)
    view = {r.memory_id: live(r) for r in rows}
    cache = HotCache(store, lambda _t, m: view.get(m), ids_of=lambda _t: view.keys(), tenant_max=7)  # type: ignore[arg-type]
    new = row("new", 0.0, 1.0)
    counts = []

    def count(tenant_id: str, filters: Filters = ANY_STATE) -> int:
        counts.append(tenant_id)
        if failing == "count" or len(counts) == 2:
            view["new"] = live(new)
            store.put(new)
            cache.on_change("acme", "new", view["new"])
            raise StorageError("count", "deadline exceeded", retriable=True)
        for extra in (row("m5", 1.0, 0.5), row("m6", 1.0, 0.6)):  # the read meets the limit
            store.put(extra)
            view[extra.memory_id] = live(extra)
        return len(rows)

    store.count = count  # type: ignore[method-assign]
    with pytest.raises(StorageError):
        cache.search("acme", [1.0, 0.0, 0.0, 0.0], 10, RECALL)
    assert "acme" not in cache._blocks
    assert not cache.ready("acme", RECALL)
    del store.count  # Milvus answers again
    hits = cache.search("acme", [1.0, 0.0, 0.0, 0.0], 10, RECALL)
    if failing == "count":
        assert hits is not None
        assert sorted(r.memory_id for r in hits.rows) == sorted(store.rows["acme"])
    else:
        assert hits is None  # 8 rows: over the limit, Milvus answers


def test_a_purged_memory_leaves_its_block_and_frees_its_slot() -> None:
    """A purged or erased memory (the view tells it deleted; the worker deletes its row) kept
    its words and vector in the block, its slot counted toward the limits: a tenant of 3 live
    memories and 6 purged ones went to Milvus as too large for a tenant_max of 9.
    """
    keep = [row("keep0", 1.0), row("keep1", 0.9, 0.1), row("keep2", 0.8, 0.2)]
    store = FakeStore()
    store.put(*keep)
    view = {r.memory_id: live(r) for r in keep}
    cache = HotCache(store, lambda _t, m: view.get(m), ids_of=lambda _t: view.keys(), tenant_max=6)  # type: ignore[arg-type]
    assert ids(cache) == ["keep0", "keep1", "keep2"]
    for i in range(6):
        r = row(f"tmp{i}", 0.5, 0.5, content=f"secret words {i}")
        view[r.memory_id] = live(r)
        cache.on_change("acme", r.memory_id, view[r.memory_id])
        store.put(r)
        assert r.memory_id in ids(cache)
        view[r.memory_id] = live(r, state="deleted")  # delete and purge, in one batch
        cache.on_change("acme", r.memory_id, view[r.memory_id])
        del store.rows["acme"][r.memory_id]
        assert ids(cache) == ["keep0", "keep1", "keep2"]
    block = cache._blocks["acme"]
    assert not [r for r in block.rows if r is not None and r.content.startswith("secret")]
    assert [r.memory_id for r in cache.tenant_rows("acme") or []] == [r.memory_id for r in keep]
    assert cache.rows == 3
    assert block.n == 4  # one slot, taken again by each new memory
    assert not np.any(block.vectors[block.free])  # and emptied
    new = row("new", 0.7, 0.7)
    view["new"] = live(new)
    cache.on_change("acme", "new", view["new"])
    store.put(new)
    assert ids(cache) == ["keep0", "keep1", "keep2", "new"]
    assert cache.rows == 4


def test_a_purge_after_a_delete_frees_the_slot_once_milvus_deletes_the_row() -> None:
    """A memory deleted (its row rewritten deleted, and kept: a consolidation may purge it),
    then purged in a later change: the view tells only a state change; the slot stays until
    Milvus no longer has the row, then leaves."""
    a, b = row("a", 1.0, content="words"), row("b", 0.9, 0.1)
    store, view, cache, clock = setup(a, b)
    view["a"], view["b"] = live(a), live(b)
    assert ids(cache) == ["a", "b"]
    deleted = dataclasses.replace(a, state="deleted", state_changed_at_us=2_000_000)
    view["a"] = live(deleted)
    cache.on_change("acme", "a", view["a"])
    assert ids(cache) == ["b"]  # Milvus still holds it active: read again until rewritten
    store.put(deleted)
    assert ids(cache) == ["b"]
    assert cache.ready("acme", RECALL)
    assert [r.memory_id for r in cache.tenant_rows("acme") or []] == ["a", "b"]  # kept
    view["a"] = live(deleted, state_changed_at_us=3_000_000)  # purged
    cache.on_change("acme", "a", view["a"])
    assert ids(cache) == ["b"]  # the worker has not deleted the row yet
    assert cache.ready("acme", RECALL)  # looked for in GONE_CHECK_S, not at every search
    del store.rows["acme"]["a"]
    clock.now += GONE_CHECK_S
    assert ids(cache) == ["b"]
    assert [r.memory_id for r in cache.tenant_rows("acme") or []] == ["b"]
    assert cache.rows == 1
    assert "words" not in [r.content for r in cache._blocks["acme"].rows if r is not None]


def test_a_purge_whose_row_leaves_milvus_after_the_give_up_still_empties_its_slot() -> None:
    """A worker stopped between its table write and its delete (its restart's resync deletes the
    row later): the purged memory's words stayed in the block for good once given up."""
    a, b = row("a", 1.0, content="secret words"), row("b", 0.9, 0.1)
    store, view, cache, clock = setup(a, b)
    view["a"], view["b"] = live(a), live(b)
    assert ids(cache) == ["a", "b"]
    view["a"] = live(a, state="deleted", state_changed_at_us=2_000_000)  # deleted and purged
    cache.on_change("acme", "a", view["a"])
    clock.now += DIRTY_GIVE_UP_S + 1
    assert ids(cache) == ["b"]  # Milvus still has the row: given up for now
    del store.rows["acme"]["a"]  # the worker is back
    clock.now += GONE_CHECK_S
    assert ids(cache) == ["b"]
    assert cache.rows == 1
    assert "secret words" not in [r.content for r in cache._blocks["acme"].rows if r is not None]


def test_an_event_ignored_on_a_deleted_memory_costs_a_few_reads_not_one_per_search() -> None:
    """An access to a deleted memory (or the same delete again) changes its state's offsets
    only, and the view tells the same values again: taken for a purge, every search of the
    tenant read Milvus again for 30 s, off the event loop, and consolidation read Milvus."""
    a, b = row("a", 1.0), row("b", 0.9, 0.1)
    store, view, cache, clock = setup(a, b)
    view["a"], view["b"] = live(a), live(b)
    assert ids(cache) == ["a", "b"]
    deleted = dataclasses.replace(a, state="deleted", state_changed_at_us=2_000_000)
    view["a"] = live(deleted)
    cache.on_change("acme", "a", view["a"])
    store.put(deleted)
    assert ids(cache) == ["b"]
    cache.on_change("acme", "a", view["a"])  # the same values: an event the reducer ignored
    reads = store.reads
    for _ in range(100):
        clock.now += 3
        assert ids(cache) == ["b"]
    assert store.reads - reads <= GONE_GIVE_UP_S / LATE_RETRY_S + 1
    assert cache.ready("acme", RECALL)
    assert [r.memory_id for r in cache.tenant_rows("acme") or []] == ["a", "b"]  # kept, deleted


class EndsOnRead(dict[str, Any]):
    """A cache's loads in flight, whose load of a tenant ends (here: finding the tenant too
    large) right after ``on_change`` read it in flight, before it made the block to mark."""

    def __init__(self, cache: HotCache, clock: Clock) -> None:
        super().__init__()
        self.cache, self.clock = cache, clock

    def get(self, key: str, default: Any = None) -> Any:
        gate = super().get(key, default)
        if gate is not None:
            self.pop(key)
            self.cache._cold[key] = self.clock.now
        return gate


def test_a_change_told_as_a_load_ends_makes_no_block_that_passes_for_the_tenant() -> None:
    """on_change saw the load in flight, the load ended (the tenant too large, or its read
    failed), then on_change made an empty block to mark: the next searches answered from it,
    holding only the memories changed since (rule zero broken until it was evicted)."""
    a, b, c = row("a", 1.0), row("b", 0.9, 0.1), row("c", 0.8, 0.2)
    _, view, cache, clock = setup(a, b, c)
    loading = EndsOnRead(cache, clock)
    loading["acme"] = object()  # a load under way in another thread
    cache._loading = loading
    view["a"] = live(a, access_count=1)
    cache.on_change("acme", "a", view["a"])
    assert "acme" not in cache._blocks
    assert cache.search("acme", [1.0, 0.0, 0.0, 0.0], 10, RECALL) is None  # Milvus answers


def test_a_bulk_load_into_a_held_tenant_leaves_it_to_milvus_before_its_next_search() -> None:
    """Each write into a held tenant marked its id to be read back, unbounded: the next search
    read every new row with its vector from Milvus at once (40,000 rows: 661 MiB in one
    recall), then found the tenant too large and dropped it all the same.
    """
    store, view, cache, _ = setup(row("a", 1.0))
    cache.tenant_max = 8
    assert ids(cache) == ["a"]
    for i in range(8):
        new = row(f"n{i}", 0.5)
        store.put(new)
        view[new.memory_id] = live(new)
        cache.on_change("acme", new.memory_id, view[new.memory_id])
    assert cache.held() == (1, 1)  # up to the block's bound: read back at the next search
    new = row("n8", 0.5)
    store.put(new)
    view["n8"] = live(new)
    cache.on_change("acme", "n8", view["n8"])
    assert cache.held() == (0, 0)
    reads = store.reads
    assert cache.search("acme", [1.0, 0.0, 0.0, 0.0], 10, RECALL) is None  # Milvus answers
    assert store.reads == reads


def pass_setup() -> tuple[FakeStore, dict[tuple[str, str], tuple[Any, ...]], HotCache, Clock]:
    """A cache with a local worker (grace 5 s) over tenants acme (a) and beta (b), a view keyed
    by (tenant, id).
    """
    store = FakeStore()
    store.put(row("a", 1.0), make_row("beta", "b", [1.0, 0, 0, 0]))
    view = {(r.tenant_id, r.memory_id): live(r) for t in store.rows.values() for r in t.values()}
    clock = Clock()
    cache = HotCache(
        store,  # type: ignore[arg-type]
        lambda t, m: view.get((t, m)),
        ids_of=lambda t: [m for (u, m) in list(view) if u == t],
        clock=clock,
        writer_grace_s=5.0,
    )
    return store, view, cache, clock


def preload_writing(
    store: FakeStore, cache: HotCache, row: MemoryRow, then: Callable[[], None] = lambda: None
) -> None:
    """Preload while the local worker writes ``row`` for beta after the pass's read of acme
    (beta not held yet: its hand-over is skipped); ``then`` runs after beta's page is laid.
    """
    pages = [list(t.values()) for t in store.rows.values()]  # the pass's read, as it began

    def scan() -> Iterator[list[MemoryRow]]:
        yield pages[0]
        store.put(row)
        cache.upserted([row])  # beta not held while the pass runs: skipped
        yield pages[1]
        then()

    store.scan = scan  # type: ignore[method-assign]
    cache.preload()


@pytest.mark.parametrize(
    "view_tells", ["before the pass lays beta", "after beta", "after the pass"]
)
@pytest.mark.parametrize("told", ["new", "newer version"])
def test_a_row_the_preload_pass_could_not_meet_is_read_back_without_waiting_the_grace(
    told: str, view_tells: str
) -> None:
    """``python -m server``'s preload runs while its worker writes. A row written for a tenant
    the pass had not reached, after the pass's read of the collection began, was in neither:
    the worker's hand-over skips a tenant not held while the pass runs, and the pass's read
    does not see it. The cache waited the writer's grace (5 s) for a hand-over that never came,
    so recalls answered without the row, read-your-writes tokens included; also when the state
    view told of it only after the pass had laid the tenant.
    """
    store, view, cache, _ = pass_setup()
    if told == "newer version":
        old = make_row("beta", "m", [0, 1.0, 0, 0])
        store.put(old)
        view[("beta", "m")] = live(old)
    new = make_row("beta", "m", [1.0, 0, 0, 0], write_count=2 if told == "newer version" else 1)
    pages = [list(t.values()) for t in store.rows.values()]  # the pass's read, as it began

    def view_reads() -> None:
        view[("beta", "m")] = live(new)
        cache.on_change("beta", "m", view[("beta", "m")])

    def scan() -> Iterator[list[MemoryRow]]:
        yield pages[0]  # acme is held, beta not yet
        if view_tells == "before the pass lays beta":
            view_reads()  # beta not held: ignored
        store.put(new)
        cache.upserted([new])  # beta not held while the pass runs: skipped
        yield pages[1]
        if view_tells == "after beta":
            view_reads()

    store.scan = scan  # type: ignore[method-assign]
    cache.preload()
    if view_tells == "after the pass":
        view_reads()
    assert not cache.ready("beta", Filters())  # due at once: no hand-over will come
    assert found(cache, "beta") == ["b", "m"]
    hits = cache.search("beta", [1.0, 0.0, 0.0, 0.0], 10, Filters())
    assert hits is not None
    assert {r.memory_id: r.write_count for r in hits.rows}["m"] == new.write_count


def test_a_row_the_local_worker_still_owes_a_tenant_the_pass_laid_is_not_read_meanwhile() -> None:
    """The view holds a memory whose row the worker has not written yet when the pass lays its
    tenant: the hand-over will come (the tenant is held now), so searches meanwhile read nothing
    back from Milvus (each read scans the whole collection on Milvus Lite) until the grace ends.
    """
    store, view, cache, _ = pass_setup()
    new = make_row("beta", "m", [1.0, 0, 0, 0])
    view[("beta", "m")] = live(new)  # the worker's table written, its upsert to come
    cache.preload()
    reads = store.reads
    assert found(cache, "beta") == ["b"]
    assert store.reads == reads
    store.put(new)
    cache.upserted([new])
    assert found(cache, "beta") == ["b", "m"]
    assert store.reads == reads


def test_a_row_written_in_a_pass_and_told_during_it_leaves_later_rewrites_to_the_hand_over() -> (
    None
):
    """The pass's record of a skipped hand-over outlived the view's news of it: the memory's
    rewrite an hour later skipped the writer's grace, and every search read it from Milvus
    until the worker's hand-over (on Milvus Lite, each read scans the collection).
    """
    store, view, cache, clock = pass_setup()
    m1 = make_row("beta", "m", [1.0, 0, 0, 0])

    def told() -> None:  # during the pass
        view[("beta", "m")] = live(m1)
        cache.on_change("beta", "m", view[("beta", "m")])

    preload_writing(store, cache, m1, told)
    assert found(cache, "beta") == ["b", "m"]
    clock.now += 3600.0
    m2 = dataclasses.replace(m1, write_count=2, content="v2")
    view[("beta", "m")] = live(m2)
    cache.on_change("beta", "m", view[("beta", "m")])  # the worker's table, before Milvus
    reads = store.reads
    for _ in range(3):
        clock.now += 0.01
        found(cache, "beta")
    assert store.reads == reads  # the hand-over is owed: no read back within the grace
    store.put(m2)
    cache.upserted([m2])
    hits = cache.search("beta", [1.0, 0.0, 0.0, 0.0], 10, Filters())
    assert hits is not None
    assert {r.memory_id: r.write_count for r in hits.rows}["m"] == 2
    assert store.reads == reads


def test_news_of_an_older_version_leaves_a_pass_written_row_owed() -> None:
    """An access of the version the view held (news of write 1) dropped the record of write 2,
    written during the pass and never handed over: the view's news of write 2 then stamped the
    writer's grace, and recalls answered the older version for 5 s.
    """
    store, view, cache, _ = pass_setup()
    m1 = make_row("beta", "m", [0, 1.0, 0, 0])
    store.put(m1)
    view[("beta", "m")] = live(m1)
    m2 = dataclasses.replace(m1, write_count=2, vector=(1.0, 0.0, 0.0, 0.0))
    preload_writing(store, cache, m2)  # the pass reads write 1
    cache.on_change("beta", "m", live(m1, access_count=1))  # an access of write 1
    view[("beta", "m")] = live(m2)
    cache.on_change("beta", "m", view[("beta", "m")])  # the view's news of write 2
    hits = cache.search("beta", [1.0, 0.0, 0.0, 0.0], 10, Filters())
    assert hits is not None
    assert {r.memory_id: r.write_count for r in hits.rows}["m"] == 2


def test_a_pass_written_row_the_view_holds_but_has_not_told_yet_is_read_at_once() -> None:
    """The view stores a change before it tells the cache. The pass's end read the row's news
    from the view, so it stopped waiting for it, and the tell that followed stamped the writer's
    grace anew: recalls answered without the row for 5 s.
    """
    store, view, cache, _ = pass_setup()
    m = make_row("beta", "m", [1.0, 0, 0, 0])

    def stored() -> None:  # by the view, not told yet
        view[("beta", "m")] = live(m)

    preload_writing(store, cache, m, stored)
    cache.on_change("beta", "m", view[("beta", "m")])  # the tell, after the pass
    assert found(cache, "beta") == ["b", "m"]


def test_purged_rows_a_preload_leaves_out_do_not_count_toward_the_total_limit() -> None:
    """A purged memory's row lingers in Milvus until the worker deletes it: the preload left it
    out of the block but counted it, so fewer tenants than ``total_max`` allows were held.
    """
    store = FakeStore()
    lingering = [make_row("t1", f"p{i}", [1.0, 0, 0, 0]) for i in range(3)]
    store.put(*lingering, make_row("t1", "a", [1.0, 0, 0, 0]), make_row("t2", "b", [1.0, 0, 0, 0]))
    purged = {r.memory_id for r in lingering}
    cache = HotCache(
        store,  # type: ignore[arg-type]
        lambda _t, m: codec.PURGED if m in purged else None,
        total_max=2,
    )
    assert cache.preload() == (2, 2)
    reads = store.reads
    assert found(cache, "t2") == ["b"]
    assert store.reads == reads  # held: no Milvus read
