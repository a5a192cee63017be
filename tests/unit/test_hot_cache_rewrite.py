"""A memory written again after its deletion, as the hot cache sees it through the state view.

A write after a delete starts a new memory (memcore's reducer: its creation time is the
rewrite's; its ``write_count`` goes on from the deleted one's now, and started again in states
written before, which the first two tests keep): the cache must read the new row back, and never
serve the deleted memory's content, vector or creation time under the new memory's live state
(Milvus answers the new row).
"""

from __future__ import annotations

import dataclasses

from tests.unit import test_hot_cache as hc

QUERY_OLD = [1.0, 0.0, 0.0, 0.0]
QUERY_NEW = [0.0, 1.0, 0.0, 0.0]


def test_a_memory_rewritten_after_its_delete_is_read_back_from_milvus() -> None:
    old = hc.row("a", 1.0, write_count=3)
    store, view, cache, _ = hc.setup(old)  # no worker in this process: Milvus is read back
    assert hc.ids(cache) == ["a"]
    deleted = dataclasses.replace(old, state="deleted")
    view["a"] = hc.live(deleted)
    cache.on_change("acme", "a", view["a"])
    store.put(deleted)
    assert hc.ids(cache) == []
    again = hc.row(
        "a", 0.0, 1.0, write_count=1, created_at_us=old.created_at_us + 1, content="new words"
    )
    view["a"] = hc.live(again)  # the worker's table first, then its row
    cache.on_change("acme", "a", view["a"])
    hits = cache.search("acme", QUERY_OLD, 1, hc.RECALL)
    assert hits is not None
    assert [r.memory_id for r in hits.rows] == []  # the deleted memory's row is not served
    store.put(again)
    hits = cache.search("acme", QUERY_NEW, 1, hc.RECALL)
    assert hits is not None
    assert [(r.memory_id, r.content, r.created_at_us) for r in hits.rows] == [
        ("a", "new words", again.created_at_us)
    ]
    assert hits.similarity[0] == 1.0


def test_a_rewrite_after_a_delete_at_the_same_time_still_replaces_the_old_row() -> None:
    old = hc.row("a", 1.0, write_count=3, state="deleted")
    store, view, cache, _ = hc.setup(old)
    view["a"] = hc.live(old)
    assert hc.ids(cache) == []
    again = hc.row("a", 0.0, 1.0, write_count=1, content="new words")  # the client's same time
    store.put(again)
    view["a"] = hc.live(again)
    cache.on_change("acme", "a", view["a"])
    hits = cache.search("acme", QUERY_NEW, 1, hc.RECALL)
    assert hits is not None
    assert [(r.memory_id, r.content) for r in hits.rows] == [("a", "new words")]
    assert hits.similarity[0] == 1.0
    assert cache.ready("acme", hc.RECALL)  # nothing awaited any more


def test_a_rewrite_after_a_delete_handed_over_before_the_view_hears_of_it_is_served() -> None:
    """The local worker's row lands while the view still says ``deleted``: the row is the newer
    version (memcore's count goes on past a delete), so it is served at once, and once the view
    catches up (a token's wait) nothing is awaited: before, the view's deleted values were laid
    over it and the memory was missing for the writer's grace (5 s), even after the wait.
    """
    old = hc.row("a", 1.0, write_count=3)
    store, view, cache, clock = hc.local_setup(old)
    view["a"] = hc.live(old)
    assert hc.ids(cache) == ["a"]
    deleted = dataclasses.replace(old, state="deleted")
    view["a"] = hc.live(deleted)
    cache.on_change("acme", "a", view["a"])
    store.put(deleted)
    cache.upserted([deleted])
    assert hc.ids(cache) == []
    again = hc.row("a", 0.0, 1.0, write_count=4, created_at_us=old.created_at_us + 1)
    store.put(again)
    cache.upserted([again])  # the view has not read the rewrite's changelog record yet
    reads = store.reads
    hits = cache.search("acme", QUERY_NEW, 1, hc.RECALL)
    assert hits is not None
    assert [r.memory_id for r in hits.rows] == ["a"]
    view["a"] = hc.live(again)  # the view catches up
    cache.on_change("acme", "a", view["a"])
    assert cache.ready("acme", hc.RECALL)
    hits = cache.search("acme", QUERY_NEW, 1, hc.RECALL)
    assert hits is not None
    assert [r.memory_id for r in hits.rows] == ["a"]
    assert store.reads == reads  # served from the row handed over, not read back
    assert clock.now == hc.Clock.now  # no time passed: no grace waited out
