"""Tenants managed at run time: `python -m server` on a real broker (Milvus Lite) with an admin key.

A tenant created through the admin routes gets a key that writes and recalls at once (no restart),
its writes are applied by the worker (not dead-lettered as unknown), tenant keys never open the
admin routes, a revoked key is refused, a tenant over its rate gets 429 with Retry-After, the CLI
sees the same tenants, and the ``tenants`` topic holds no plain key.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path

import httpx
import orjson
import pytest

from mnemostream import Client, MnemostreamError
from storage.tenant_log import TenantLog
from storage.tenants import Tenant, TenantRegistry, key_hash, replaced, with_key, without_key
from tests.infra import ROOT
from tests.integration.harness import Stack, dead_letters, eventually, produce, read_all
from tests.integration.test_end_to_end import DIM, KEY, e, serve
from tests.integration.test_streams import T0

pytestmark = pytest.mark.integration
ADMIN = "admin-key-0123456789abcdef"


@pytest.fixture
def stack(kafka_bootstrap: str, tmp_path: Path) -> Stack:
    # `python -m server` runs on Milvus Lite (serve sets the URI): no Milvus server needed
    return Stack(kafka_bootstrap, str(tmp_path / "unused.db"), tmp_path, ("acme",), dim=DIM)


@pytest.fixture
def server(stack: Stack, tmp_path: Path) -> Iterator[str]:
    yield from serve(stack, tmp_path, MNEMO_ADMIN_KEY=ADMIN)


def admin(key: str = ADMIN) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_a_tenant_created_at_run_time_writes_and_recalls_without_a_restart(
    server: str, stack: Stack
) -> None:
    with httpx.Client(base_url=server, timeout=30) as http:
        put = http.put(
            "/v1/admin/tenants/initech",
            json={"recall": "zeromemory", "overrides": {"recall": {"weights": {"recency": 0.5}}}},
            headers=admin(),
        )
        assert put.status_code == 200, put.text
        assert put.json()["recall"] == "zeromemory"
        added = http.post("/v1/admin/tenants/initech/keys", headers=admin())
        assert added.status_code == 201, added.text
        api_key = added.json()["api_key"]

        with Client(server, api_key) as client:  # at once: the route waited for this ranker
            memory_id = client.remember(
                "initech ships staplers", embedding=e(1.0, 0.2), importance=0.8, at=T0
            )
            found = client.recall(vector=e(1.0, 0.2), k=3, at=T0, track=False)  # read-your-writes
            assert [m.memory_id for m in found] == [memory_id], dead_letters(stack)

        # tenant keys never open the admin routes; the admin key is no tenant's
        for key in (api_key, KEY):
            assert http.get("/v1/admin/tenants", headers=admin(key)).status_code == 401
        assert http.get("/v1/admin/tenants").status_code == 401
        assert http.post("/v1/recall", json={"query": "x"}, headers=admin()).status_code == 401

        listed = http.get("/v1/admin/tenants", headers=admin()).json()["tenants"]
        assert {t["tenant_id"] for t in listed} == {"acme", "initech"}  # the file's too
        bad = http.put("/v1/admin/tenants/initech", json={"decay": "x"}, headers=admin())
        assert (bad.status_code, bad.json()["field"]) == (422, "decay")  # the body's field

        key_id = added.json()["key_id"]
        revoked = http.delete(f"/v1/admin/tenants/initech/keys/{key_id}", headers=admin())
        assert revoked.status_code == 200, revoked.text
        assert revoked.json()["key_ids"] == []
        refused = http.post("/v1/recall", json={"query": "staplers"}, headers=admin(api_key))
        assert refused.status_code == 401

    assert not [d for d in dead_letters(stack) if "initech" in d["reason"]]


def test_the_worker_reads_a_new_tenant_before_it_dead_letters_one(
    server: str, stack: Stack
) -> None:
    # a tenant record, then at once its first write, straight onto the topics
    (tenant_key, tenant_value) = (
        b"hooli",
        orjson.dumps(
            {"v": 1, "tenant_id": "hooli", "api_key_hashes": [], "rate_limit_per_s": None}
        ),
    )
    produce(stack.bootstrap, stack.topic("tenants"), [(tenant_key, tenant_value)])
    write = {
        "v": 1,
        "tenant_id": "hooli",
        "memory_id": "m-hooli-1",
        "content": "hooli makes compression",
        "at": T0.isoformat(),
        "embedding": e(1.0),
    }
    produce(
        stack.bootstrap, stack.topic("memory-writes"), [(b"hooli/m-hooli-1", orjson.dumps(write))]
    )
    # the worker applied it: the memory is in its table (via an admin-made key on the ranker)
    with httpx.Client(base_url=server, timeout=30) as http:
        api_key = http.post("/v1/admin/tenants/hooli/keys", headers=admin()).json()["api_key"]
    with Client(server, api_key) as client:
        eventually(
            lambda: client.get("m-hooli-1", track=False) is not None, 60, "the write applied"
        )
    assert not [d for d in dead_letters(stack) if "hooli" in d["reason"]]


def test_a_tenant_over_its_rate_gets_429_with_retry_after(server: str, stack: Stack) -> None:
    with httpx.Client(base_url=server, timeout=30) as http:
        put = http.put("/v1/admin/tenants/slow", json={"rate_limit_per_s": 0.01}, headers=admin())
        assert put.status_code == 200, put.text
        api_key = http.post("/v1/admin/tenants/slow/keys", headers=admin()).json()["api_key"]
        replies = [http.get("/v1/memories/m-none", headers=admin(api_key)) for _ in range(5)]
    statuses = [r.status_code for r in replies]
    assert statuses[0] == 404  # the bucket's one request
    limited = [r for r in replies if r.status_code == 429]
    assert len(limited) == 4, statuses
    for reply in limited:
        assert int(reply.headers["retry-after"]) == reply.json()["retry_after_s"] >= 1
        assert reply.headers["content-type"] == "application/problem+json"

    # the CLI reads the same topic
    cli = subprocess.run(
        [sys.executable, "-m", "streams", "tenants", "get", "slow"],
        cwd=ROOT,
        env=stack.env(),
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert cli.returncode == 0, cli.stderr
    assert orjson.loads(cli.stdout)["rate_limit_per_s"] == 0.01

    # no plain key on the topic, only digests
    records = read_all(stack.bootstrap, stack.topic("tenants"))
    assert records
    for _, value in records:
        assert api_key.encode() not in value
        assert KEY.encode() not in value


def test_a_tenant_deleted_with_erase_leaves_nothing_to_the_next_tenant_of_its_id(
    server: str, stack: Stack
) -> None:
    """Memories are found by the tenant id alone: a tenant made again under a deleted one's id read
    them. Deleted with ``erase`` they are erased first (the worker applies the erasures before
    the tenant closes); deleted without, the id is not given to a new tenant unasked (409).
    """
    with httpx.Client(base_url=server, timeout=60) as http:
        assert http.put("/v1/admin/tenants/initech", json={}, headers=admin()).status_code == 200
        api_key = http.post("/v1/admin/tenants/initech/keys", headers=admin()).json()["api_key"]
        with Client(server, api_key) as client:
            ids = [
                client.remember(f"initech payroll note {i}", embedding=e(1.0, i / 10), at=T0)
                for i in range(3)
            ]
            listed = [m.memory_id for m in client.list_memories()]  # no access event
            assert sorted(listed) == sorted(ids)  # applied (read-your-writes)
            assert [h["kind"] for h in client.history(ids[0])] == ["created"]
        erased = http.delete("/v1/admin/tenants/initech", params={"erase": "true"}, headers=admin())
        assert erased.status_code == 200, erased.text
        assert erased.json()["erased"] == 3
        assert erased.json()["keys_erased"] == 3
        assert http.get("/v1/admin/tenants/initech", headers=admin()).status_code == 404
        # the id is free: a new tenant under it finds none of the old memories
        assert http.put("/v1/admin/tenants/initech", json={}, headers=admin()).status_code == 200
        new_key = http.post("/v1/admin/tenants/initech/keys", headers=admin()).json()["api_key"]
        with Client(server, new_key) as client:
            assert all(client.get(m, track=False) is None for m in ids)
            assert client.recall(vector=e(1.0), k=10, track=False) == []
            assert list(client.list_memories()) == []
            # nor their audit records, kept on the topic under the same keys
            with pytest.raises(MnemostreamError) as gone:
                client.history(ids[1])
            assert gone.value.status == 404
            client.remember("initech roadmap", embedding=e(0.5), at=T0, memory_id=ids[0])
            assert [h["kind"] for h in client.history(ids[0])] == ["created"]
        # deleted without erase: its memories stay, and its id is refused to a new tenant
        assert http.delete("/v1/admin/tenants/initech", headers=admin()).status_code == 200
        reused = http.put("/v1/admin/tenants/initech", json={}, headers=admin())
        assert reused.status_code == 409, reused.text
    # no erasure was dead-lettered as a record of an unknown tenant
    assert not [d for d in dead_letters(stack) if "initech" in d["reason"]]


class Overtaken(TenantLog):
    """A ranker's tenants log on the real broker whose next publish waits for ``meanwhile``
    first (another ranker's change landing between this one's read and its record).
    """

    meanwhile: Callable[[], Awaitable[object]] | None = None

    async def publish(
        self, records: Sequence[tuple[bytes, bytes | None]], *, applied: bool = True
    ) -> list[int]:
        if self.meanwhile is not None:
            meanwhile, self.meanwhile = self.meanwhile, None
            await meanwhile()
        return await super().publish(records, applied=applied)


@pytest.mark.anyio
async def test_two_rankers_changing_one_tenant_at_once_on_the_broker_lose_neither_change(
    stack: Stack,
) -> None:
    """The redo rests on the offsets the broker gives a published record and the follower
    reads back: a revoke on one ranker and a new key on another, at once, both stand.
    """
    await asyncio.to_thread(stack.create_topics)
    empty = TenantRegistry.of({"tenants": {}})
    a = Overtaken(stack.bootstrap, stack.topic("tenants"), empty)
    b = TenantLog(stack.bootstrap, stack.topic("tenants"), empty)
    k1, k2 = "key-1-0123456789abcdef", "key-2-0123456789abcdef"
    try:
        await a.update("acme", lambda t: with_key(replaced(t, "acme", {}), k1))
        b_adds = b.update("acme", lambda t: with_key(_present(t), k2))
        a.meanwhile = lambda: b_adds
        await a.update("acme", lambda t: without_key(_present(t), key_hash(k1)[:12]))
        await b.catch_up()
        for log in (a, b):
            assert log.by_api_key(k1) is None  # the revoke stands
            assert log.by_api_key(k2) is not None  # and so does the other ranker's new key
    finally:
        await a.stop()
        await b.stop()


def _present(tenant: Tenant | None) -> Tenant:
    assert tenant is not None
    return tenant


def test_the_cli_reading_a_tenants_topic_that_does_not_exist_says_so(stack: Stack) -> None:
    """With a mistyped MNEMO_TOPIC_PREFIX, ``tenants list`` printed an empty registry (exit 0)
    and ``get`` "no such tenant"."""

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "streams", "tenants", *args],
            cwd=ROOT,
            env={**stack.env(), "MNEMO_TENANTS": ""},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    for args in (("list",), ("get", "acme")):
        missing = cli(*args)
        assert missing.returncode == 2, missing.stderr
        assert f"{stack.topic('tenants')} does not exist" in missing.stderr
    stack.create_topics()
    listed = cli("list")
    assert (listed.returncode, orjson.loads(listed.stdout)) == (0, {"tenants": []}), listed.stderr
