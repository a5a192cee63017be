"""The ranker's hot cache answers what Milvus answers: same ids, same order, same cosine, for
random filters, on both backends (Milvus Lite and a real server)."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import numpy as np
import pytest

from ranker.hotcache import HotCache, PreloadStoppedError
from storage import Filters, MemoryRow, MilvusConfig, MilvusStore
from storage.milvus import ANY_STATE
from tests.contract.conftest import DIM
from tests.rows import make_row

STATES = ("active", "archived", "forgotten", "deleted")
TIERS = ("working", "episodic", "semantic")


def corpus(rng: random.Random, tenant: str, n: int) -> list[MemoryRow]:
    return [
        make_row(
            tenant,
            f"m{i}",
            [rng.gauss(0, 1) for _ in range(DIM)],
            state=rng.choice(STATES),
            tier=rng.choice(TIERS),
            created_at_us=rng.randrange(0, 1_000),
            valid_to_us=rng.choice((0, 0, rng.randrange(1, 1_000))),
            session_id=rng.choice(("s1", "s2")),
            agent_id=rng.choice(("", "a1")),
            user_id=rng.choice(("", "u1", "u2")),
        )
        for i in range(n)
    ]


def random_filters(rng: random.Random) -> Filters:
    at = rng.randrange(0, 1_000)
    return Filters(
        states=tuple(rng.sample(STATES, rng.randint(1, 3))),
        current_at_us=rng.choice((None, at)),
        created_to_inclusive_us=rng.choice((None, at)),
        tiers=tuple(rng.sample(TIERS, rng.randint(0, 2))),
        session_id=rng.choice((None, "s1")),
        agent_id=rng.choice((None, "a1", "")),
        user_id=rng.choice((None, "u1", "")),
        created_from_us=rng.choice((None, rng.randrange(0, 500))),
        created_to_us=rng.choice((None, rng.randrange(500, 1_000))),
    )


def test_the_hot_cache_equals_milvus(store: MilvusStore) -> None:
    rng = random.Random(5)
    store.upsert(corpus(rng, "acme", 300) + corpus(rng, "globex", 50))
    cache = HotCache(store)
    for _ in range(40):
        filters = random_filters(rng)
        query = [rng.gauss(0, 1) for _ in range(DIM)]
        (expected,) = store.search("acme", [query], 20, filters)
        got = cache.search("acme", query, 20, filters)
        assert got is not None
        assert [r.memory_id for r in got.rows] == [h.row.memory_id for h in expected]
        assert got.similarity.tolist() == pytest.approx([h.similarity for h in expected], abs=1e-5)
        assert all(r.tenant_id == "acme" for r in got.rows)
    assert cache.loads == 1  # loaded once, then served from memory


def test_a_tenants_rows_from_the_hot_cache_equal_milvuss(store: MilvusStore) -> None:
    """What consolidation reads (``streams.app.stored_rows``): the same rows as Milvus's query,
    each vector the same direction (the cache keeps it L2-normalised).
    """
    rng = random.Random(8)
    store.upsert(corpus(rng, "acme", 120) + corpus(rng, "globex", 30))
    store.delete("acme", ["m7"])
    cache = HotCache(store)
    assert cache.tenant_rows("acme") is None  # not held: the caller reads Milvus, no load
    assert cache.loads == 0
    assert cache.search("acme", [1.0] * DIM, 5, Filters()) is not None
    got = {r.memory_id: r for r in cache.tenant_rows("acme") or []}
    expected = {r.memory_id: r for r in store.query("acme", ANY_STATE)}
    assert got.keys() == expected.keys()
    assert "m7" not in got
    for memory_id, row in expected.items():
        mine = got[memory_id]
        assert dataclasses.replace(mine, vector=()) == dataclasses.replace(row, vector=())
        unit = np.asarray(row.vector) / np.linalg.norm(row.vector)
        assert mine.vector == pytest.approx(unit.tolist(), abs=1e-6)


def test_a_tenant_over_the_limit_and_unsupported_filters_go_to_milvus(store: MilvusStore) -> None:
    rng = random.Random(6)
    store.upsert(corpus(rng, "acme", 30))
    query = [1.0] * DIM
    assert HotCache(store, tenant_max=29).search("acme", query, 5, Filters()) is None
    cache = HotCache(store, tenant_max=30)
    assert cache.search("acme", query, 5, Filters(tags_any=("work",))) is None
    assert cache.search("acme", query, 5, Filters(memory_ids=("m1",))) is None
    assert cache.search("acme", query, 5, Filters()) is not None


def test_one_preload_pass_equals_loading_each_tenant(store: MilvusStore) -> None:
    rng = random.Random(7)
    store.upsert(corpus(rng, "acme", 120) + corpus(rng, "globex", 40) + corpus(rng, "big", 140))
    preloaded = HotCache(store, tenant_max=130)
    # one pass (a 2.3 server cannot scan: the cache then loads the tenants it is given)
    assert preloaded.preload(["acme", "globex", "big"]) == (160, 2)
    assert preloaded.search("big", [1.0] * DIM, 5, Filters()) is None  # over the limit: Milvus
    one_by_one = HotCache(store, tenant_max=130)
    for _ in range(10):
        tenant = rng.choice(("acme", "globex"))
        filters = random_filters(rng)
        query = [rng.gauss(0, 1) for _ in range(DIM)]
        got, expected = (
            cache.search(tenant, query, 10, filters) for cache in (preloaded, one_by_one)
        )
        assert got is not None
        assert expected is not None
        assert [r.memory_id for r in got.rows] == [r.memory_id for r in expected.rows]
    assert preloaded.loads == 2  # the preload's; no tenant was loaded again


def test_a_scan_reads_every_row_of_every_tenant(tmp_path: Path) -> None:
    lite = MilvusStore(MilvusConfig(uri=str(tmp_path / "scan.db"), dim=DIM))
    lite.connect()
    rng = random.Random(8)
    written = corpus(rng, "acme", 120) + corpus(rng, "globex", 40)
    lite.upsert(written)
    scanned = [row.key for page in lite.scan(batch_size=50) for row in page]
    assert sorted(scanned) == sorted(row.key for row in written)
    lite.close()


def test_a_preload_asked_to_stop_ends_holding_no_tenant(store: MilvusStore) -> None:
    """Lite ends its scan after the first page; a 2.3 server (no scan) before its first tenant."""
    rng = random.Random(5)
    store.upsert(corpus(rng, "acme", 120) + corpus(rng, "globex", 40))
    cache = HotCache(store)
    cache.stop_preload()  # the process began stopping before the preload's thread ran
    with pytest.raises(PreloadStoppedError):
        cache.preload(["acme", "globex"])
    assert cache.rows == 0
    assert cache.loads == 0
