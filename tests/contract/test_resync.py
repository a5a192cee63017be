"""A starting worker's Milvus check (``streams.rebuild.catch_up``) on both backends: rows are
rewritten from the tables only when Milvus holds another number of them, and every row the
tables hold reaches the caller's ``into`` (the hot cache of ``python -m server``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from memcore import ImportanceDecision, ImportanceSource, Policy, Write, apply, content_hash
from storage import Document, MemoryRow, MilvusStore, codec
from storage.changelogs import Tables
from streams.rebuild import ResyncMarker, catch_up
from tests.contract.conftest import DIM

AT = datetime(2026, 3, 1, tzinfo=UTC)


def tables(n: int, *, purged: int = 0) -> Tables:
    """``n`` memories of ``acme`` (``m0``...), the first ``purged`` of them purged."""
    decision = ImportanceDecision(0.6, ImportanceSource.EXPLICIT, "test")
    memories: dict[bytes, bytes] = {}
    documents: dict[bytes, bytes] = {}
    for i in range(n):
        memory_id = f"m{i}"
        write = Write("acme", memory_id, content_hash(memory_id), AT, decision)
        state, _ = apply(None, write, Policy())
        assert state is not None
        key = f"acme/{memory_id}".encode()
        if i < purged:
            memories[key] = codec.encode(dataclasses.replace(state, purged=True))
            continue
        memories[key] = codec.encode(state)
        vector = tuple(float(j == i % DIM) for j in range(DIM))
        documents[key] = codec.encode_document(Document(f"note {i}", vector))
    return Tables(memories, documents)


def contents(store: MilvusStore, n: int) -> dict[str, str]:
    found = store.get("acme", [f"m{i}" for i in range(n)])
    return {memory_id: row.content for memory_id, row in found.items()}


def test_a_store_missing_rows_gets_every_row_of_the_tables(store: MilvusStore) -> None:
    pages: list[Sequence[MemoryRow]] = []

    def into(got: Iterable[Sequence[MemoryRow]]) -> None:
        pages.extend(got)

    done = catch_up(store, tables(5), into=into)
    assert (done.rows, done.stored, done.held, done.upserted, done.deleted) == (5, 0, 5, 5, 0)
    assert contents(store, 5) == {f"m{i}": f"note {i}" for i in range(5)}
    assert sorted(r.memory_id for page in pages for r in page) == [f"m{i}" for i in range(5)]


def test_a_store_holding_as_many_rows_is_checked_not_rewritten(store: MilvusStore) -> None:
    catch_up(store, tables(4))
    (row,) = store.get("acme", ["m2"]).values()
    store.upsert([dataclasses.replace(row, content="changed in Milvus")])
    done = catch_up(store, tables(4))
    assert (done.rows, done.stored, done.held, done.upserted, done.asked) == (4, 4, 4, 0, None)
    assert contents(store, 4)["m2"] == "changed in Milvus"  # not rewritten: only counted
    again = catch_up(store, tables(4), always=True)
    assert (again.upserted, again.asked) == (4, "MNEMO_RESYNC=always")
    assert contents(store, 4)["m2"] == "note 2"


def test_a_set_marker_asks_for_a_rewrite_once(store: MilvusStore, tmp_path: Path) -> None:
    catch_up(store, tables(3))
    (row,) = store.get("acme", ["m1"]).values()
    store.upsert([dataclasses.replace(row, state="archived")])  # a batch died before its row
    marker = ResyncMarker(tmp_path / "worker" / "app.milvus-resync")
    marker.ask("a batch failed: RuntimeError()")
    done = catch_up(store, tables(3), marker=marker)
    assert (done.upserted, done.asked) == (3, "a batch failed: RuntimeError()")
    assert store.get("acme", ["m1"])["m1"].state == "active"
    assert marker.reason() is None  # cleared once rewritten
    assert catch_up(store, tables(3), marker=marker).upserted == 0


def test_a_lost_row_and_a_purged_row_left_behind_are_mended(store: MilvusStore) -> None:
    catch_up(store, tables(4))
    store.delete("acme", ["m3"])
    done = catch_up(store, tables(4))
    assert (done.stored, done.upserted) == (3, 4)
    assert set(contents(store, 4)) == {"m0", "m1", "m2", "m3"}
    # m0 purged in the tables, its row still in Milvus: one row too many
    done = catch_up(store, tables(4, purged=1))
    assert (done.rows, done.stored, done.held, done.upserted, done.deleted) == (3, 4, 3, 3, 1)
    assert set(contents(store, 4)) == {"m1", "m2", "m3"}
    assert store.total() == 3


def test_a_row_milvus_refuses_is_left_out_and_the_start_goes_on(
    store: MilvusStore, tmp_path: Path
) -> None:
    """A document stored before its limits existed (content past the field's 65,535 bytes) makes
    its row one the store refuses (not retriably): the start-up rewrite upserts that chunk row by
    row and leaves the row out instead of failing the worker's start."""
    held = tables(3)
    vector = tuple(float(j == 0) for j in range(DIM))
    big = Document("note 1 " + "x" * 70_000, vector)
    held.documents[b"acme/m1"] = codec.encode_document(big)
    marker = ResyncMarker(tmp_path / "worker" / "app.milvus-resync")
    marker.ask("a row was refused")
    done = catch_up(store, held, marker=marker)
    assert (done.rows, done.upserted) == (3, 2)
    assert contents(store, 3) == {"m0": "note 0", "m2": "note 2"}
