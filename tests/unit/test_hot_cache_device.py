"""The hot cache's search on a torch device (``MNEMO_HOT_CACHE_DEVICE``) answers as its numpy
search does: the same rows, the same cosines, under the same filters, and stays fresh as rows
change. ``torch.device("cpu")`` runs the device code on any machine; CUDA where torch sees one
(``make bench-gpu`` measures it there).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np
import pytest
import torch

from memcore.errors import InvalidField
from ranker.hotcache import HotCache, search_device
from storage import Filters, MemoryRow, MilvusConfig
from storage.milvus import ANY_STATE
from tests.rows import make_row

DIM = 16
TORCH_DEVICES = [
    torch.device("cpu"),
    pytest.param(
        torch.device("cuda"),
        marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
    ),
]


class Store:
    """One tenant's rows, read whole by a load and by id by a refresh."""

    def __init__(self, rows: Sequence[MemoryRow]) -> None:
        self.config = MilvusConfig(uri="unused", dim=DIM)
        self.rows = {r.memory_id: r for r in rows}
        self.reads = 0

    def count(self, tenant_id: str, filters: Filters = ANY_STATE) -> int:
        return len(self.rows)

    def query(
        self, tenant_id: str, filters: Filters = ANY_STATE, limit: int = 0
    ) -> list[MemoryRow]:
        self.reads += 1
        return list(self.rows.values())[:limit]

    def get(self, tenant_id: str, memory_ids: Sequence[str]) -> dict[str, MemoryRow]:
        self.reads += 1
        return {m: self.rows[m] for m in memory_ids if m in self.rows}


def rows(count: int, seed: int) -> list[MemoryRow]:
    """Rows with random vectors (a few zero and a few repeated) and varied filterable fields."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        vector = [rng.gauss(0, 1) for _ in range(DIM)]
        if i % 37 == 0:
            vector = [0.0] * DIM
        out.append(
            make_row(
                "acme",
                f"m{i}",
                vector,
                state=rng.choice(["active", "active", "archived", "forgotten"]),
                tier=rng.choice(["working", "episodic", "semantic"]),
                created_at_us=rng.randrange(1, 10) * 1_000_000,
                valid_to_us=rng.choice([0, 0, 3_000_000]),
                session_id=rng.choice(["s1", "s2"]),
            )
        )
    return out


FILTERS = [
    ANY_STATE,
    Filters(states=("active", "archived"), current_at_us=5_000_000),
    Filters(states=("active",), tiers=("semantic",), session_id="s2"),
    Filters(created_from_us=3_000_000, created_to_us=7_000_000),
    Filters(states=("deleted",)),  # no row passes
]


def cache(store: Store, device: torch.device | None) -> HotCache:
    return HotCache(store, device=device)  # type: ignore[arg-type]


def answers(
    c: HotCache, queries: Sequence[Sequence[float]], n: int, filters: Filters
) -> list[tuple[list[str], list[float]]]:
    found = c.search_many("acme", queries, n, filters)
    assert found is not None
    return [([r.memory_id for r in h.rows], h.similarity.tolist()) for h in found]


def reference(
    store: Store, query: Sequence[float], n: int, filters: Filters, c: HotCache
) -> list[tuple[str, float]]:
    """Brute force in float64 over the rows that pass (as the cache's own mask says)."""
    block = c._blocks["acme"]
    passing = block.mask(filters)
    q = np.asarray(query, dtype=np.float64)
    q = q / np.linalg.norm(q)
    scored = []
    for slot, memory_id in enumerate(block.ids):
        if not passing[slot]:
            continue
        v = np.asarray(store.rows[memory_id].vector, dtype=np.float64)
        norm = np.linalg.norm(v)
        scored.append((memory_id, float(v @ q / norm) if norm > 0 else 0.0))
    scored.sort(key=lambda s: -s[1])
    return scored[:n]


@pytest.mark.parametrize("device", TORCH_DEVICES)
@pytest.mark.parametrize("filters", FILTERS)
def test_the_device_search_answers_as_numpy_and_as_brute_force(
    device: torch.device, filters: Filters
) -> None:
    store = Store(rows(300, seed=1))
    on_cpu, on_device = cache(store, None), cache(store, device)
    rng = random.Random(2)
    queries = [[rng.gauss(0, 1) for _ in range(DIM)] for _ in range(7)]
    for n in (1, 10, 400):
        numpy_answers = answers(on_cpu, queries, n, filters)
        device_answers = answers(on_device, queries, n, filters)
        for query, (ids, sims), (dev_ids, dev_sims) in zip(
            queries, numpy_answers, device_answers, strict=True
        ):
            want = reference(store, query, n, filters, on_cpu)
            assert len(dev_ids) == len(ids) == len(want)
            assert np.allclose(dev_sims, [s for _, s in want], atol=1e-5)
            assert np.allclose(sims, [s for _, s in want], atol=1e-5)
            # the same rows, up to the order of equal cosines (the zero vectors tie at 0)
            assert {m for m, s in zip(dev_ids, dev_sims, strict=True) if abs(s) > 1e-6} == {
                m for m, s in zip(ids, sims, strict=True) if abs(s) > 1e-6
            }


@pytest.mark.parametrize("device", [None, *TORCH_DEVICES])
def test_one_search_of_many_queries_answers_as_one_search_each(
    device: torch.device | None,
) -> None:
    store = Store(rows(120, seed=3))
    c = cache(store, device)
    rng = random.Random(4)
    queries = [[rng.gauss(0, 1) for _ in range(DIM)] for _ in range(5)]
    filters = Filters(states=("active", "archived"))
    together = answers(c, queries, 10, filters)
    alone = [answers(c, [q], 10, filters)[0] for q in queries]
    for (ids, sims), (one_ids, one_sims) in zip(together, alone, strict=True):
        assert ids == one_ids
        assert np.allclose(sims, one_sims, atol=1e-6)
    assert c.search_many("acme", [], 10, filters) == []


@pytest.mark.parametrize("device", TORCH_DEVICES)
def test_the_device_copy_follows_new_versions_and_growth(device: torch.device) -> None:
    first = rows(10, seed=5)
    store = Store(first)
    c = cache(store, device)
    target = [1.0] + [0.0] * (DIM - 1)
    (ids, sims), *_ = answers(c, [target], 3, ANY_STATE)  # the device copy is made here
    assert sims[0] < 0.999
    # a new version of m3 points at the query: its slot is copied again before the next search
    store.rows["m3"] = make_row("acme", "m3", target, write_count=2)
    c.await_rows([("acme", "m3")])
    (ids, sims), *_ = answers(c, [target], 3, ANY_STATE)
    assert ids[0] == "m3"
    assert sims[0] == pytest.approx(1.0, abs=1e-6)
    # 40 new rows grow the block past its capacity (16, then 32, then 64): copied whole again
    extra = [make_row("acme", f"x{i}", [0.0, 1.0] + [0.0] * (DIM - 2)) for i in range(39)]
    extra.append(make_row("acme", "x39", [-1.0] + [0.0] * (DIM - 1)))
    for r in extra:
        store.rows[r.memory_id] = r
    c.await_rows([("acme", r.memory_id) for r in extra])
    (ids, sims), *_ = answers(c, [[-1.0] + [0.0] * (DIM - 1)], 1, ANY_STATE)
    assert ids == ["x39"]
    assert sims[0] == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("device", [None, *TORCH_DEVICES])
def test_neighbours_of_a_batch_read_milvus_once(device: torch.device | None) -> None:
    store = Store(rows(50, seed=6))
    c = cache(store, device)
    rng = random.Random(7)
    vectors = [[rng.gauss(0, 1) for _ in range(DIM)] for _ in range(4)]
    found = c.neighbours("acme", vectors, 5, ANY_STATE)
    assert found is not None
    assert [len(hits) for hits in found] == [5, 5, 5, 5]
    assert store.reads == 1  # the tenant's load, once for the whole batch
    best = answers(c, [vectors[2]], 5, ANY_STATE)[0][0]
    assert [h.row.memory_id for h in found[2]] == best


def test_the_setting_names_the_device(monkeypatch: pytest.MonkeyPatch) -> None:
    assert search_device("cpu") is None
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert search_device("cuda") == torch.device("cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(InvalidField) as refused:
        search_device("cuda")  # said at start-up, not at the first recall
    assert refused.value.field == "hot_cache_device"
    with pytest.raises(InvalidField):
        search_device("tpu")
