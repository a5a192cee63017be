"""The recall API on a real Milvus (Lite) and a real Kafka broker, through HTTP (in-process ASGI)."""

from __future__ import annotations

import asyncio
import dataclasses
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from pathlib import Path

import httpx
import orjson
import pytest
from aiokafka import AIOKafkaProducer

from ranker.api import create_api
from ranker.batcher import Overloaded
from ranker.service import RecallService
from storage import MemoryRow, MilvusConfig, MilvusStore, to_us
from storage.embedding import Hashing
from storage.tenants import TenantRegistry
from tests.integration.harness import Stack, read_all
from tests.integration.test_streams import T0
from tests.rows import make_row

pytestmark = [pytest.mark.integration, pytest.mark.anyio]


DIM = 8
KEY_A, KEY_B = "key-acme-0123456789", "key-globex-0123456789"
REGISTRY = TenantRegistry.of(
    {
        "tenants": {
            "acme": {"api_keys": [KEY_A], "recall": "zeromemory"},  # SPEC's Alice example
            "globex": {"api_keys": [KEY_B]},  # the default policy
        }
    }
)
TAU = 1200.0  # semantic, zeromemory


def row(tenant: str, memory_id: str, cosine: float, importance: float, recency: float) -> MemoryRow:
    """A semantic memory at ``cosine`` to QUERY's vector with the given recency at T0."""
    vector = (cosine, math.sqrt(1 - cosine * cosine), *([0.0] * (DIM - 2)))
    last = T0 - timedelta(hours=-TAU * math.log(recency))
    return make_row(
        tenant,
        memory_id,
        vector,
        content=f"{memory_id} says something",
        tier="semantic",
        importance=importance,
        created_at_us=to_us(T0 - timedelta(days=90)),
        last_access_us=to_us(last),
        state_changed_at_us=to_us(T0 - timedelta(days=90)),
        tau_hours=TAU,
        next_review_us=0,
    )


ALICE = [
    ("prefers-python", 0.92, 0.8, 0.9),
    ("rust-interesting", 0.75, 0.4, 0.3),
    ("team-fastapi", 0.70, 0.5, 0.7),
]


@pytest.fixture
async def client(
    make_stack: Callable[..., Stack], tmp_path: Path
) -> AsyncIterator[tuple[httpx.AsyncClient, Stack, MilvusStore]]:
    stack = make_stack(("acme", "globex"), dim=DIM)
    await asyncio.to_thread(stack.create_topics)
    store = MilvusStore(MilvusConfig(str(tmp_path / "milvus.db"), dim=DIM))
    store.connect()
    store.upsert([row("acme", m, c, i, r) for m, c, i, r in ALICE])
    store.upsert(
        [dataclasses.replace(row("globex", "secret", 0.99, 0.9, 0.9), content="globex secret")]
    )
    producer = AIOKafkaProducer(bootstrap_servers=stack.bootstrap, acks="all")
    await producer.start()

    async def send(role: str, key: bytes, value: bytes) -> Awaitable[object]:
        delivery: Awaitable[object] = await producer.send(stack.topic(role), key=key, value=value)
        return delivery

    service = RecallService(store, Hashing(DIM), send, candidates=10, batch_wait_s=0.005)
    await service.start()
    transport = httpx.ASGITransport(app=create_api(service, REGISTRY))
    async with httpx.AsyncClient(transport=transport, base_url="http://mnemostream") as http:
        yield http, stack, store
    await service.stop()
    await producer.stop()
    store.close()


def accesses(stack: Stack) -> list[dict[str, object]]:
    return [orjson.loads(v) for _, v in read_all(stack.bootstrap, stack.topic("access-events"))]


QUERY = {"vector": [1.0, *([0.0] * (DIM - 1))], "k": 3, "at": T0.isoformat()}


async def test_recall_orders_and_scores_as_the_spec_says(
    client: tuple[httpx.AsyncClient, Stack, MilvusStore],
) -> None:
    http, stack, _ = client
    reply = await http.post("/v1/recall", json=QUERY, headers={"Authorization": f"Bearer {KEY_A}"})
    assert reply.status_code == 200, reply.text
    results = reply.json()["results"]
    assert [r["memory_id"] for r in results] == [
        "prefers-python",
        "team-fastapi",
        "rust-interesting",
    ]
    assert [r["scores"]["final"] for r in results] == pytest.approx([0.88, 0.64, 0.555], abs=1e-3)
    assert results[0]["scores"]["recency"] == pytest.approx(0.9, abs=1e-6)
    assert (await http.get("/healthz")).json() == {"status": "ok"}
    metrics = (await http.get("/metrics")).text
    assert "mnemostream_recall_batch_size_count 1.0" in metrics
    assert "mnemostream_recall_seconds_count 1.0" in metrics
    sent = await asyncio.to_thread(accesses, stack)
    assert sorted((a["memory_id"], a["kind"], a["at"]) for a in sent) == sorted(
        (m, "recall", T0.isoformat()) for m, *_ in ALICE
    )


async def test_track_false_emits_no_access(
    client: tuple[httpx.AsyncClient, Stack, MilvusStore],
) -> None:
    http, stack, _ = client
    reply = await http.post(
        "/v1/recall", json={**QUERY, "track": False}, headers={"X-API-Key": KEY_A}
    )
    assert len(reply.json()["results"]) == 3
    assert await asyncio.to_thread(accesses, stack) == []


async def test_tenants_never_see_each_other(
    client: tuple[httpx.AsyncClient, Stack, MilvusStore],
) -> None:
    http, _, _ = client
    assert (await http.post("/v1/recall", json=QUERY)).status_code == 401
    assert (
        await http.post("/v1/recall", json=QUERY, headers={"X-API-Key": "nope" * 5})
    ).status_code == 401
    b = await http.post("/v1/recall", json=QUERY, headers={"X-API-Key": KEY_B})
    assert [r["memory_id"] for r in b.json()["results"]] == ["secret"]
    a = await http.post("/v1/recall", json={**QUERY, "k": 10}, headers={"X-API-Key": KEY_A})
    assert "secret" not in {r["memory_id"] for r in a.json()["results"]}
    assert (await http.get("/v1/memories/secret", headers={"X-API-Key": KEY_A})).status_code == 404
    own = await http.get("/v1/memories/secret", headers={"X-API-Key": KEY_B})
    assert own.json()["content"] == "globex secret"


async def test_writes_take_the_tenant_from_the_key(
    client: tuple[httpx.AsyncClient, Stack, MilvusStore],
) -> None:
    http, stack, _ = client
    body = {"memories": [{"content": "remember: tea at four", "importance": 0.7}]}
    reply = await http.post("/v1/memories", json=body, headers={"X-API-Key": KEY_B})
    (memory_id,) = reply.json()["ids"]
    sent = [
        orjson.loads(v)
        for _, v in await asyncio.to_thread(read_all, stack.bootstrap, stack.topic("memory-writes"))
    ]
    assert [(w["tenant_id"], w["memory_id"], w["importance"]) for w in sent] == [
        ("globex", memory_id, 0.7)
    ]
    forged = {"memories": [{"content": "x", "tenant_id": "acme"}]}
    assert (
        await http.post("/v1/memories", json=forged, headers={"X-API-Key": KEY_B})
    ).status_code == 422


async def test_bad_requests_name_the_field(
    client: tuple[httpx.AsyncClient, Stack, MilvusStore],
) -> None:
    http, _, _ = client
    headers = {"X-API-Key": KEY_A}
    no_query = await http.post("/v1/recall", json={"k": 3}, headers=headers)
    assert (no_query.status_code, no_query.json()["field"]) == (422, "query")
    bad_tier = await http.post(
        "/v1/recall", json={**QUERY, "filters": {"memory_types": ["x"]}}, headers=headers
    )
    assert bad_tier.json()["field"] == "filters.memory_types[0]"
    assert (
        await http.post("/v1/recall", json={**QUERY, "k": 0}, headers=headers)
    ).status_code == 422


async def test_overload_is_429_with_retry_after(
    client: tuple[httpx.AsyncClient, Stack, MilvusStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    http, _, _ = client

    async def saturated(*_: object) -> object:
        raise Overloaded(1024, 0.2)

    monkeypatch.setattr(RecallService, "recall", saturated)
    reply = await http.post("/v1/recall", json=QUERY, headers={"X-API-Key": KEY_A})
    assert (reply.status_code, reply.headers["Retry-After"]) == (429, "1")


def decisions(stack: Stack) -> list[dict[str, object]]:
    sent = [orjson.loads(v) for _, v in read_all(stack.bootstrap, stack.topic("memory-writes"))]
    return [d for d in sent if d.get("kind") == "decision"]


async def test_nothing_faded_or_archived_is_hidden_and_archived_ranks_below_active(
    client: tuple[httpx.AsyncClient, Stack, MilvusStore],
) -> None:
    http, stack, store = client
    store.delete("globex", ["secret"])
    faded = dataclasses.replace(  # 200 days idle, importance 0.1: effective importance ~0
        row("globex", "faded", 0.97, 0.1, 1e-9), content="the faded answer"
    )
    twin = dataclasses.replace(faded, key="globex/twin", memory_id="twin", importance=0.5)
    archived = dataclasses.replace(
        twin, key="globex/archived", memory_id="archived", state="archived"
    )
    store.upsert([faded, archived, row("globex", "weaker", 0.3, 0.9, 1.0)])  # < half as similar
    headers = {"X-API-Key": KEY_B}
    body = {**QUERY, "k": 5, "track": False}
    results = (await http.post("/v1/recall", json=body, headers=headers)).json()["results"]
    assert [r["memory_id"] for r in results] == ["faded", "archived", "weaker"]
    assert results[1]["state"] == "archived"
    assert results[1]["scores"]["final"] == pytest.approx(0.5 * 0.5 * 0.97, rel=1e-3)
    assert await asyncio.to_thread(decisions, stack) == []  # recall never archives anything
    store.upsert([twin])
    found = (await http.post("/v1/recall", json=body, headers=headers)).json()["results"]
    assert [r["memory_id"] for r in found][:2] == ["twin", "faded"]  # importance breaks the tie


async def test_superseded_versions_and_as_of_recall(
    client: tuple[httpx.AsyncClient, Stack, MilvusStore],
) -> None:
    http, _, store = client
    store.delete("globex", ["secret"])
    t1, t2 = T0 - timedelta(days=100), T0 - timedelta(days=10)
    osaka = dataclasses.replace(
        row("globex", "osaka", 0.9, 0.5, 0.5),
        created_at_us=to_us(t1),
        valid_to_us=to_us(t2),
        superseded_by="lisbon",
    )
    lisbon = dataclasses.replace(row("globex", "lisbon", 0.8, 0.5, 0.5), created_at_us=to_us(t2))
    store.upsert([osaka, lisbon])
    headers = {"X-API-Key": KEY_B}

    async def recall(**extra: object) -> list[dict[str, object]]:
        body = {**QUERY, "k": 5, "track": False, **extra}
        reply = await http.post("/v1/recall", json=body, headers=headers)
        assert reply.status_code == 200, reply.text
        return list(reply.json()["results"])

    assert [r["memory_id"] for r in await recall()] == ["lisbon"]
    history = await recall(include_history=True)
    assert [r["memory_id"] for r in history] == ["osaka", "lisbon"]  # in time order
    assert (history[0]["superseded_by"], history[0]["valid_to"]) == ("lisbon", t2.isoformat())
    as_of = (t1 + timedelta(days=1)).isoformat()
    assert [r["memory_id"] for r in await recall(at=as_of)] == ["osaka"]  # lisbon did not exist
    before_any = (t1 - timedelta(days=1)).isoformat()
    assert await recall(at=before_any) == []


async def test_a_write_returns_a_token_and_reads_check_it(
    client: tuple[httpx.AsyncClient, Stack, MilvusStore],
) -> None:
    http, _, _ = client
    headers = {"X-API-Key": KEY_A}
    reply = await http.post(
        "/v1/memories", json={"memories": [{"content": "a new memory"}]}, headers=headers
    )
    token = reply.json()["token"]
    assert token.startswith("v2.")
    bad = await http.post("/v1/recall", json={**QUERY, "after": "v2.???"}, headers=headers)
    assert (bad.status_code, bad.json()["field"]) == (422, "after")
    # sealed for the tenant it was issued to: another tenant can neither read nor use it
    other = {"X-API-Key": KEY_B}
    theirs = await http.post("/v1/recall", json={**QUERY, "after": [token]}, headers=other)
    assert (theirs.status_code, theirs.json()["field"]) == (422, "after")
    assert theirs.json()["detail"].endswith(": not a token returned by this service")
    # this service has no worker to wait on: a token is accepted and not waited for
    ok = await http.post("/v1/recall", json={**QUERY, "after": token}, headers=headers)
    assert ok.status_code == 200


ALICE_ORDER = [ALICE[0], ALICE[2], ALICE[1]]


def unit(*xs: float) -> tuple[float, ...]:
    norm = math.sqrt(sum(x * x for x in xs))
    return tuple(x / norm for x in (*xs, *([0.0] * (DIM - len(xs)))))


async def test_graph_proximity_counts_hops_over_relations(
    client: tuple[httpx.AsyncClient, Stack, MilvusStore],
) -> None:
    http, _, store = client
    store.delete("globex", ["secret"])
    seeds = [row("globex", f"seed{i}", 0.95 - i / 100, 0.5, 0.5) for i in range(3)]
    seeds[0] = dataclasses.replace(seeds[0], relations=("linked", "bridge"))
    # the bridge is not a candidate (filtered out by tier) but a path runs through it
    bridge = dataclasses.replace(
        row("globex", "bridge", 0.9, 0.5, 0.5), tier="working", relations=("two-away",)
    )
    others = [row("globex", m, c, 0.5, 0.5) for m, c in (("linked", 0.2), ("far", 0.3))]
    store.upsert([*seeds, bridge, *others, row("globex", "two-away", 0.25, 0.5, 0.5)])
    headers = {"X-API-Key": KEY_B}

    async def scores(graphrag: bool) -> dict[str, dict[str, float]]:
        body = {
            **QUERY,
            "k": 10,
            "graphrag": graphrag,
            "track": False,
            "filters": {"memory_types": ["semantic"]},
        }
        reply = await http.post("/v1/recall", json=body, headers=headers)
        return {r["memory_id"]: r["scores"] for r in reply.json()["results"]}

    plain, graph = await scores(False), await scores(True)
    assert "bridge" not in graph
    assert plain["far"]["final"] > plain["linked"]["final"]  # more similar, nothing else differs
    assert {m: graph[m]["graph"] for m in ("seed0", "linked", "two-away", "far")} == {
        "seed0": 1.0,
        "linked": 0.5,
        "two-away": pytest.approx(1 / 3),
        "far": 0.0,
    }
    assert graph["linked"]["final"] == pytest.approx(plain["linked"]["final"] * 0.7 + 0.5 * 0.3)
    assert graph["linked"]["final"] > graph["far"]["final"]


async def test_mmr_pushes_a_near_copy_down(
    client: tuple[httpx.AsyncClient, Stack, MilvusStore],
) -> None:
    http, _, store = client
    store.delete("globex", ["secret"])
    a = dataclasses.replace(row("globex", "a", 0.9, 0.8, 0.9), vector=unit(0.9, 0.43589))
    copy = dataclasses.replace(a, key="globex/a-copy", memory_id="a-copy", importance=0.79)
    b = dataclasses.replace(row("globex", "b", 0.8, 0.8, 0.9), vector=unit(0.8, 0.0, 0.6))
    store.upsert([a, copy, b])
    headers = {"X-API-Key": KEY_B}

    async def order(mmr: float | None) -> list[str]:
        body = {**QUERY, "k": 3, "mmr_lambda": mmr, "track": False}
        reply = await http.post("/v1/recall", json=body, headers=headers)
        return [r["memory_id"] for r in reply.json()["results"]]

    assert await order(None) == ["a", "a-copy", "b"]
    assert await order(0.5) == ["a", "b", "a-copy"]


async def test_list_pages_with_a_cursor_filters_and_keeps_tenants_apart(
    client: tuple[httpx.AsyncClient, Stack, MilvusStore],
) -> None:
    http, _, store = client
    extra = [
        dataclasses.replace(row("acme", f"note-{i:02d}", 0.5, 0.5, 0.5), tags=("odd",) * (i % 2))
        for i in range(7)
    ]
    store.upsert(extra)
    auth = {"Authorization": f"Bearer {KEY_A}"}
    seen: list[str] = []
    cursor = None
    while True:
        params = {"limit": "4", **({"cursor": cursor} if cursor else {})}
        reply = await http.get("/v1/memories", params=params, headers=auth)
        assert reply.status_code == 200, reply.text
        body = reply.json()
        assert len(body["memories"]) <= 4
        seen += [m["memory_id"] for m in body["memories"]]
        cursor = body["cursor"]
        if cursor is None:
            break
    expected = sorted([m for m, *_ in ALICE] + [r.memory_id for r in extra])
    assert seen == expected  # every memory once, in id order; none of globex's
    tagged = await http.get("/v1/memories", params={"tag": "odd"}, headers=auth)
    assert [m["memory_id"] for m in tagged.json()["memories"]] == ["note-01", "note-03", "note-05"]
    theirs = await http.get("/v1/memories", headers={"Authorization": f"Bearer {KEY_B}"})
    assert [m["memory_id"] for m in theirs.json()["memories"]] == ["secret"]
    bad = await http.get("/v1/memories", params={"cursor": "%%%"}, headers=auth)
    assert (bad.status_code, bad.json()["field"]) == (422, "cursor")
