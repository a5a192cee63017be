"""A memory written again after its deletion, as the hot cache sees it through the state view.

A write after a delete starts a new memory (memcore's reducer: its ``write_count`` starts again,
its creation time is the rewrite's), so the view's count is not above the deleted row's: the
cache must still read the new row back, and never serve the deleted memory's content, vector or
creation time under the new memory's live state (Milvus answers the new row).
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
