"""Listing pages, cursors and the new version an update writes (the routes' own logic)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import UTC, datetime

import pytest
from aiokafka.partitioner import DefaultPartitioner

from memcore import InvalidField
from ranker.history import partition_of
from ranker.listing import CHUNK, decode_cursor, encode_cursor, page
from ranker.routes import UpdateBody, new_version
from storage import Filters, MemoryRow, MilvusStore
from tests.rows import make_row

NOW = datetime(2026, 3, 1, 12, tzinfo=UTC)


class RowsStore:
    """What ``page`` asks of Milvus: rows of a tenant among ``filters.memory_ids``, by tag."""

    def __init__(self, rows: Sequence[MemoryRow]) -> None:
        self.rows = rows
        self.asked: list[int] = []

    def query(self, tenant_id: str, filters: Filters, limit: int) -> list[MemoryRow]:
        self.asked.append(len(filters.memory_ids))
        wanted = set(filters.memory_ids)
        return [
            r
            for r in self.rows
            if r.tenant_id == tenant_id
            and r.memory_id in wanted
            and (not filters.tags_any or set(r.tags) & set(filters.tags_any))
        ][:limit]


def store_of(rows: Sequence[MemoryRow]) -> MilvusStore:
    return RowsStore(rows)  # type: ignore[return-value]


def test_pages_walk_every_matching_id_once_in_order_across_chunks() -> None:
    n = CHUNK + 30
    rows = [make_row("a", f"m{i:05d}", (1.0,), tags=("x",) if i % 3 else ()) for i in range(n)]
    ids = sorted([r.memory_id for r in rows] + ["only-in-the-view"])  # no Milvus row for it yet
    fake = store_of(rows)
    seen, after = [], None
    while True:
        got = page(fake, "a", ids, Filters(tags_any=("x",)), after, 100)
        seen += [r.memory_id for r in got.rows]
        if got.cursor is None:
            break
        after = decode_cursor(got.cursor)
    assert seen == [f"m{i:05d}" for i in range(n) if i % 3]
    assert max(fake.asked) <= CHUNK  # type: ignore[attr-defined]


def test_the_last_full_page_has_no_cursor_when_nothing_follows() -> None:
    rows = [make_row("a", f"m{i}", (1.0,)) for i in range(4)]
    assert page(store_of(rows), "a", [r.memory_id for r in rows], Filters(), None, 4).cursor is None
    assert page(store_of(rows), "a", [r.memory_id for r in rows], Filters(), None, 3).cursor


def test_a_cursor_round_trips_and_a_forged_one_names_the_field() -> None:
    assert decode_cursor(encode_cursor("m-abc:1.2_x")) == "m-abc:1.2_x"
    for forged in ("%%%", encode_cursor("a/b"), "", "!"):
        with pytest.raises(InvalidField) as err:
            decode_cursor(forged)
        assert err.value.field == "cursor"


def test_a_new_version_keeps_what_the_update_leaves_out() -> None:
    old = make_row(
        "a",
        "m1",
        (0.6, 0.8),
        content="Carol works at Initech",
        tags=("job",),
        metadata={"source": "chat"},
        agent_id="agent-7",
        user_id="ann",
        importance=0.7,
        tier="semantic",
    )
    doc = new_version(old, UpdateBody(importance=0.9), "a", NOW)
    assert (doc["content"], doc["tags"], doc["metadata"]) == (
        old.content,
        ["job"],
        {"source": "chat"},
    )
    assert (doc["agent_id"], doc["importance"], doc["memory_type"]) == ("agent-7", 0.9, "semantic")
    assert doc["user_id"] == "ann"  # the scope is kept too
    assert new_version(old, UpdateBody(user_id="bob"), "a", NOW)["user_id"] == "bob"
    unscoped = new_version(
        dataclasses.replace(old, user_id=""), UpdateBody(importance=0.9), "a", NOW
    )
    assert "user_id" not in unscoped
    assert doc["embedding"] == [0.6, 0.8]  # same text: the vector is kept, not recomputed
    assert doc["at"] == NOW.isoformat()
    again = new_version(old, UpdateBody(importance=0.9), "a", NOW)["memory_id"]
    other = new_version(old, UpdateBody(importance=0.8), "a", NOW)["memory_id"]
    assert doc["memory_id"] == again != old.memory_id  # the same update twice: one version
    assert other != doc["memory_id"]
    with pytest.raises(InvalidField):
        new_version(old, UpdateBody(at=NOW.isoformat()), "a", NOW)  # changes nothing
    changed = new_version(old, UpdateBody(content="Carol works at Globex"), "a", NOW)
    assert changed["content"] == "Carol works at Globex"
    assert "embedding" not in changed  # new text: the worker embeds it


def test_history_reads_the_partition_kafkas_default_partitioner_chose() -> None:
    for key in (b"acme/m-1", b"globex/a-very-long-memory-id-0123456789", b"t/x"):
        for n in (1, 3, 8, 12):
            assert partition_of(key, n) == DefaultPartitioner()(key, list(range(n)), [])
