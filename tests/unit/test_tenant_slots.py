"""A tenant's share of the requests in flight: one tenant's slow reads never refuse the others."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import httpx
import pytest

from ranker.admission import TenantSlots
from ranker.api import create_api
from ranker.applied import AppliedOffsets, Token
from ranker.service import RecallService
from storage import Filters, MilvusConfig
from storage.embedding import Hashing
from storage.milvus import Hit
from storage.tenants import TenantRegistry
from tests.rows import make_row

pytestmark = pytest.mark.anyio
KEYS = {"acme": "key-acme-0123456789", "globex": "key-globex-0123456789"}
EVERY_ROW = Filters()
ROWS = [make_row(t, f"m{i}", (1.0, 0.0, 0.0, 0.0)) for t in KEYS for i in range(3)]


class Store:
    config = MilvusConfig("unused.db", dim=4, full_text=False)

    def search(self, tenant_id: str, vectors: object, k: int, f: Filters = EVERY_ROW) -> object:
        return [[Hit(r, 0.5) for r in ROWS if r.tenant_id == tenant_id]]

    def relations(self, tenant_id: str, ids: object) -> dict[str, list[str]]:
        return {}


async def test_a_tenant_waiting_on_its_tokens_holds_its_share_of_the_slots_not_all() -> None:
    """acme's reads wait for writes the worker has not applied; with one slot limit for all, its
    waits refused every other tenant's recall (429) for as long as they waited: a tenant holds
    at most half the slots.
    """
    worker_caught_up = asyncio.Event()

    async def committed() -> Mapping[tuple[str, int], int]:
        await worker_caught_up.wait()
        return {("memory-writes", 0): 100}

    async def end_offsets(role: str) -> Mapping[int, int]:
        return {0: 100}

    async def no_send(*_: object) -> None:
        raise AssertionError("untracked recalls send nothing")

    applied = AppliedOffsets(committed, end_offsets, timeout_s=60)
    service = RecallService(Store(), Hashing(4), no_send, kernel_thread=False, applied=applied)  # type: ignore[arg-type]
    registry = TenantRegistry.of({"tenants": {t: {"api_keys": [k]} for t, k in KEYS.items()}})
    api = create_api(service, registry, max_in_flight=4)
    slots: TenantSlots = api.state.tenant_slots
    transport = httpx.ASGITransport(app=api)
    token = await api.state.token_seal.seal(Token({"memory-writes": {0: 50}}), "acme")

    def recall(tenant: str, **extra: object) -> dict[str, object]:
        return {
            "json": {"query": "x", "track": False, **extra},
            "headers": {"X-API-Key": KEYS[tenant]},
        }

    await service.start()
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://m") as http:
            waits = [
                asyncio.create_task(http.post("/v1/recall", **recall("acme", after=token)))  # type: ignore[arg-type]
                for _ in range(2)  # its share: half of the 4
            ]
            for _ in range(1_000):  # until both hold their slot
                if slots.held.get("acme") == 2:
                    break
                await asyncio.sleep(0.001)
            assert slots.held == {"acme": 2}
            refused = await http.post("/v1/recall", **recall("acme"))  # type: ignore[arg-type]
            other = await http.post("/v1/recall", **recall("globex"))  # type: ignore[arg-type]
            worker_caught_up.set()
            answered = await asyncio.gather(*waits)
            again = await http.post("/v1/recall", **recall("acme"))  # type: ignore[arg-type]
    finally:
        await service.stop()
    assert refused.status_code == 429, refused.text
    assert "acme" in refused.json()["detail"]
    assert refused.headers["retry-after"] == "1"
    assert other.status_code == 200, other.text
    assert [r.status_code for r in answered] == [200, 200]
    assert again.status_code == 200, again.text
    assert slots.held == {}  # every slot given back


def test_a_share_is_at_least_one_and_never_above_the_limit_for_all() -> None:
    registry = TenantRegistry.of({"tenants": {}})
    service = RecallService(Store(), Hashing(4), None)  # type: ignore[arg-type]
    assert create_api(service, registry, max_in_flight=1).state.tenant_slots.limit == 1
    assert create_api(service, registry, max_in_flight=256).state.tenant_slots.limit == 128
    wide = create_api(service, registry, max_in_flight=4, max_in_flight_per_tenant=10)
    assert wide.state.tenant_slots.limit == 4
    with pytest.raises(ValueError, match="max_in_flight_per_tenant"):
        TenantSlots(0)
