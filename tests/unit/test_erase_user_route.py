"""``DELETE /v1/users/{user_id}`` erases the user the path names, never another one: bytes that
are not UTF-8 are refused, not decoded to U+FFFD (a real user id the erasure would hit)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime

import httpx
import orjson
import pytest

from ranker.api import create_api
from ranker.applied import Token
from ranker.service import Erasure, RecallService
from storage import MemoryRow, MilvusConfig, MilvusStore
from storage.embedding import Hashing
from storage.tenants import TenantRegistry
from tests.rows import make_row

KEY = "key-acme-0123456789"
pytestmark = pytest.mark.anyio


class Erasing(RecallService):
    """The route's calls into the service, recorded (no Kafka, no Milvus)."""

    def __init__(self) -> None:
        store = MilvusStore(MilvusConfig("unused.db", dim=4))
        super().__init__(store, Hashing(4), self._no_send)  # type: ignore[arg-type]
        self.users: list[str] = []

    @staticmethod
    async def _no_send(*_: object) -> object:
        raise AssertionError("nothing is produced here")

    async def wait(self, *_: object) -> None:
        return None

    async def user_memories(self, tenant_id: str, user_id: str) -> list[str]:
        self.users.append(user_id)
        return [f"m-{len(self.users)}"]

    async def erase(  # type: ignore[override]
        self, tenant_id: str, ids: Sequence[str], now: datetime, **_: object
    ) -> Erasure:
        return Erasure(Token({}), len(ids))


async def delete(service: Erasing, raw: str) -> httpx.Response:
    api = create_api(service, TenantRegistry.of({"tenants": {"acme": {"api_keys": [KEY]}}}))
    transport = httpx.ASGITransport(app=api)
    async with httpx.AsyncClient(transport=transport, base_url="http://m") as http:
        return await http.delete(f"/v1/users/{raw}", headers={"Authorization": f"Bearer {KEY}"})


@pytest.mark.parametrize(
    "raw", ["%E9", "%FF", "%ED%A0%80", "ok%C3", "bob%00"]
)  # NUL: no write has it
async def test_a_user_id_that_is_not_utf8_is_refused_and_nobody_is_erased(raw: str) -> None:
    service = Erasing()
    reply = await delete(service, raw)
    assert (reply.status_code, reply.json()["field"]) == (422, "user_id"), reply.text
    assert service.users == []


@pytest.mark.parametrize(
    ("raw", "user"),
    [
        ("alice", "alice"),
        ("%C3%A9lise", "élise"),
        ("%EF%BF%BD", "\ufffd"),
        ("a%0Ab", "a\nb"),  # a write takes it; no route matched it (404): never erased
        ("%0Aabc", "\nabc"),
        ("a%2Fb", "a/b"),
    ],
)
async def test_a_utf8_user_id_is_erased_as_written(raw: str, user: str) -> None:
    service = Erasing()
    reply = await delete(service, raw)
    assert reply.status_code == 200, reply.text
    assert service.users == [user]
    assert reply.json()["user_id"] == user


async def test_a_user_id_holding_a_nul_is_refused() -> None:
    """No write holds a NUL in its user_id (it joins a derived id's parts): the erase would
    reach Milvus's filter with it and erase nobody.
    """
    service = Erasing()
    reply = await delete(service, "bob%00")
    assert (reply.status_code, reply.json()["field"]) == (422, "user_id"), reply.text
    assert service.users == []


async def test_a_key_minted_elsewhere_during_an_erase_has_its_memory_purged_again() -> None:
    """Its write, landing after the first purge, made the memory anew; the erase destroyed its
    key and counted it, but nothing deleted the new row (it no longer opens: no sync touches it),
    so the words were served on.
    """

    class Meta:
        def __init__(self, offset: int) -> None:
            self.partition, self.offset = 0, offset

    class Keys:
        def __init__(self) -> None:
            self.rounds = [{"m1": 1, "m2": 1}, {"m1": 1, "m2": 0}]  # m1 got a key meanwhile

        async def erase(
            self, tenant_id: str, memory_ids: Sequence[str], *, users: bool = False
        ) -> dict[str, int]:
            return self.rounds.pop(0)

    produced: list[tuple[bytes, str]] = []

    async def send(role: str, key: bytes, value: bytes) -> object:
        produced.append((key, orjson.loads(value)["decision"]))
        done = asyncio.get_running_loop().create_future()
        done.set_result(Meta(len(produced)))
        return done

    class NoSummaries:
        def get(self, tenant_id: str, memory_ids: object) -> dict[str, MemoryRow]:
            return {}

        def get_slim(self, tenant_id: str, memory_ids: object) -> dict[str, MemoryRow]:
            return {}

        def every_row(self, tenant_id: str, filters: object) -> list[MemoryRow]:
            return []

    service = RecallService(NoSummaries(), Hashing(4), send, keys=Keys())  # type: ignore[arg-type]
    erasure = await service.erase("acme", ["m1", "m2"], datetime(2026, 3, 1, tzinfo=UTC))
    token, erased = erasure.token, erasure.keys
    assert erased == 3
    assert produced == [
        (b"acme/m1", "retire"),
        (b"acme/m1", "purge"),
        (b"acme/m2", "retire"),
        (b"acme/m2", "purge"),
        (b"acme/m1", "retire"),  # after its late key was destroyed
        (b"acme/m1", "purge"),
    ]
    assert token.offsets == {"memory-writes": {0: 6}}  # a read waits for the second purge too


async def test_a_memory_erased_but_not_purged_yet_is_not_updated() -> None:
    """The row waits for the worker's purge: a PATCH then wrote a new version carrying the
    erased words, under a new live key that no erase of the old id reaches.
    """

    class Pending(Erasing):
        async def get(self, tenant_id: str, memory_id: str, after: object = None) -> MemoryRow:
            return make_row(tenant_id, memory_id, (1.0, 0.0, 0.0, 0.0))

        async def erased(self, tenant_id: str, memory_id: str) -> bool:
            return memory_id == "m1"

    api = create_api(Pending(), TenantRegistry.of({"tenants": {"acme": {"api_keys": [KEY]}}}))
    transport = httpx.ASGITransport(app=api)
    async with httpx.AsyncClient(transport=transport, base_url="http://m") as http:
        reply = await http.patch(
            "/v1/memories/m1", json={"tags": ["x"]}, headers={"Authorization": f"Bearer {KEY}"}
        )
    assert reply.status_code == 404


async def test_an_erase_that_failed_after_its_memory_can_be_repeated_for_the_summaries() -> None:
    """The memory erased and purged, its summaries not yet (Milvus did not answer their search):
    a repeated erase answered 404 (no row, no key), and the summaries stayed served.
    """
    erased: list[list[str]] = []

    class Repeated(Erasing):
        async def get(self, tenant_id: str, memory_id: str, after: object = None) -> None:
            return None

        async def has_keys(self, tenant_id: str, memory_id: str) -> bool:
            return False

        async def erased(self, tenant_id: str, memory_id: str) -> bool:
            return memory_id == "m1"

        async def erase(  # type: ignore[override]
            self, tenant_id: str, ids: Sequence[str], now: datetime
        ) -> Erasure:
            erased.append(list(ids))
            return Erasure(Token({}), 0, ("s1",))

    api = create_api(Repeated(), TenantRegistry.of({"tenants": {"acme": {"api_keys": [KEY]}}}))
    transport = httpx.ASGITransport(app=api)
    async with httpx.AsyncClient(transport=transport, base_url="http://m") as http:
        headers = {"Authorization": f"Bearer {KEY}"}
        again = await http.delete("/v1/memories/m1", params={"erase": "true"}, headers=headers)
        never = await http.delete("/v1/memories/m2", params={"erase": "true"}, headers=headers)
    assert again.status_code == 200, again.text
    assert again.json()["summaries_erased"] == ["s1"]
    assert never.status_code == 404
    assert erased == [["m1"]]
