"""Tenants: hashed keys, the ``tenants`` topic's records, the live registry's merge, the admin
routes (on a log that applies its own records, no broker) and the per-tenant rate limit.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import httpx
import orjson
import pytest

from memcore import InvalidField, Policy
from memcore.supersession import MAX_NEIGHBOURS
from ranker.admin import ERASE_ROUNDS
from ranker.api import create_api
from ranker.applied import Token
from ranker.history import History, Newest
from ranker.ratelimit import RateLimited, RateLimiter, TokenBucket
from ranker.service import Erasure, RecallService
from storage import MilvusConfig, MilvusStore
from storage import tenant_log as tenant_log_module
from storage.embedding import Hashing
from storage.tenant_log import TenantLog, TenantLogError
from storage.tenants import (
    ReusedTenant,
    Tenant,
    TenantRegistry,
    decode_tenant_record,
    key_hash,
    replaced,
    tenant_of,
    tenant_record,
    with_key,
    without_key,
)
from streams import tenants_cli
from streams.app import unknown_tenants

KEY = "key-acme-0123456789"
ADMIN = "admin-key-0123456789"


def test_keys_are_kept_as_sha256_digests_only() -> None:
    digest = hashlib.sha256(KEY.encode()).hexdigest()
    assert key_hash(KEY) == digest
    registry = TenantRegistry.of({"tenants": {"acme": {"api_keys": [KEY]}}})
    acme = registry.get("acme")
    assert acme is not None
    assert acme.api_key_hashes == (digest,)
    assert KEY not in repr(acme)
    assert registry.by_api_key(KEY) is acme
    assert registry.by_api_key(KEY + "x") is None
    hashed = TenantRegistry.of({"tenants": {"acme": {"api_key_hashes": [digest]}}})
    assert hashed.by_api_key(KEY) == acme


@pytest.mark.parametrize(
    ("entry", "field"),
    [
        ({"api_key_hashes": ["ABC"]}, "tenants.a.api_key_hashes"),
        ({"api_key_hashes": "x"}, "tenants.a.api_key_hashes"),
        ({"api_keys": [KEY], "api_key_hashes": [key_hash(KEY)]}, "tenants.a.api_keys"),
        ({"rate_limit_per_s": -1}, "tenants.a.rate_limit_per_s"),
        ({"rate_limit_per_s": "9"}, "tenants.a.rate_limit_per_s"),
        ({"recall": "nope"}, "policy.recall.preset"),
        ({"decay": 3}, "policy.decay.preset"),
        ({"overrides": {"recall": {"weights": {"recency": -1}}}}, "policy.recall.weights"),
    ],
)
def test_bad_tenant_settings_name_their_field(entry: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidField) as err:
        TenantRegistry.of({"tenants": {"a": entry}})
    assert err.value.field.startswith(field)


def test_a_key_two_tenants_claim_acts_for_neither() -> None:
    digest = key_hash(KEY)
    registry = TenantRegistry({"a": Tenant("a", api_key_hashes=(digest,))}).merged(
        {"b": Tenant("b", api_key_hashes=(digest,))}
    )
    assert registry.by_api_key(KEY) is None


def test_a_record_round_trips_and_holds_no_plain_key() -> None:
    tenant = with_key(
        tenant_of(
            "acme",
            {"recall": "zeromemory", "overrides": {"review": {"reinforcement": 0.2}}},
        ),
        KEY,
    )
    tenant = replaced(tenant, "acme", {"recall": "zeromemory", "rate_limit_per_s": 5})
    key, value = tenant_record(tenant)
    assert KEY.encode() not in value
    assert orjson.loads(value)["api_key_hashes"] == [key_hash(KEY)]
    tenant_id, decoded = decode_tenant_record(key, value)
    assert (tenant_id, decoded) == ("acme", tenant)
    assert decoded is not None
    assert decoded.rate_limit_per_s == 5.0
    assert decoded.policy.recall == tenant.policy.recall
    _, deleted = tenant_record(tenant, deleted=True)
    assert decode_tenant_record(key, deleted) == ("acme", None)


def test_the_admin_view_names_the_presets_the_tenant_runs_an_override_s_included() -> None:
    """``{"overrides": {"recall": {"preset": "zeph"}}}`` scored with zeph's formula while the
    view said ``"recall": "mnemostream"``: the operator read another formula than ran.
    """
    given = {"overrides": {"recall": {"preset": "zeph"}, "lifecycle": {"preset": "powermem"}}}
    shown = tenant_of("acme", given).public()
    assert (shown["recall"], shown["lifecycle"], shown["decay"]) == (
        "zeph",
        "powermem",
        "zeromemory",
    )
    assert shown["overrides"] == given["overrides"]
    assert tenant_of("acme", {"recall": "powermem"}).public()["recall"] == "powermem"


@pytest.mark.parametrize(
    "given",
    [
        {"overrides": {"recall": {"preset": "zeph"}}},
        {"recall": "zeph", "overrides": {"recall": {"preset": "mnemostream"}}},
        {"overrides": {"lifecycle": {"preset": "powermem"}}},
        # a decay override's preset renames the rates only: shown as "powermem", then sent
        # back, the rates became powermem's (a working memory's τ 48 h -> 1.2 h)
        {"decay": "zeromemory", "overrides": {"decay": {"preset": "powermem"}}},
        {"decay": "powermem", "overrides": {"decay": {"preset": "zeromemory"}}},
    ],
)
def test_a_tenant_shown_then_sent_back_as_shown_runs_the_same_policy(given: dict[str, Any]) -> None:
    shown = tenant_of("acme", given).public()
    names = ("decay", "lifecycle", "recall", "overrides")
    assert tenant_of("acme", {n: shown[n] for n in names}).policy == tenant_of("acme", given).policy


@pytest.mark.parametrize(
    ("key", "value", "field"),
    [
        (None, {"v": 1, "tenant_id": "a"}, "key"),
        (b"a", {"v": 2, "tenant_id": "a"}, "v"),
        (b"a", {"v": 1, "tenant_id": "b"}, "tenant_id"),
        (b"a", {"v": 1, "tenant_id": "a", "deleted": "yes"}, "deleted"),
        (b"a", {"v": 1, "tenant_id": "a", "api_keys": [KEY]}, "api_keys"),
        (b"a", {"v": 1, "tenant_id": "a", "decay": "nope"}, "policy.decay.preset"),
        (b"a", [1], "$"),
        (b"a", {"v": 1, "tenant_id": "a", "history_from_ms": "today"}, "history_from_ms"),
        (b"a", {"v": 1, "tenant_id": "a", "history_from_ms": -1}, "history_from_ms"),
    ],
)
def test_bad_records_name_their_field(key: bytes | None, value: object, field: str) -> None:
    with pytest.raises(InvalidField) as err:
        decode_tenant_record(key, orjson.dumps(value))
    assert err.value.field == field


def test_a_record_no_check_foresaw_is_skipped_and_the_next_applies(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The follower's position is past the whole batch: a record that raises must not cost the
    records after it (a deletion, a revoked key).
    """
    base = TenantRegistry.of({"tenants": {"acme": {"api_keys": [KEY]}}})
    log = TenantLog("127.0.0.1:1", "t.tenants", base)
    real = decode_tenant_record

    def decode(key: bytes | None, value: bytes) -> object:
        if key == b"odd":
            raise AttributeError("a value of a shape nothing checked")
        return real(key, value)

    monkeypatch.setattr(tenant_log_module, "decode_tenant_record", decode)
    log.apply(b"odd", b"{}")
    log.apply(*tenant_record(Tenant("acme"), deleted=True))
    log.refresh()
    assert log.by_api_key(KEY) is None


def test_a_tenant_whose_record_does_not_decode_is_served_by_no_process() -> None:
    """Running processes kept the previous record; once the topic was compacted, a process
    started since had only the bad one: the tenant was unknown there and served elsewhere.
    """
    base = TenantRegistry.of({"tenants": {"acme": {"api_keys": [KEY]}, "globex": {}}})
    running, started = (TenantLog("127.0.0.1:1", "t.tenants", base) for _ in range(2))
    running.apply(*tenant_record(replaced(base.get("acme"), "acme", {"recall": "zeph"})))
    bad = orjson.dumps({"v": 1, "tenant_id": "acme", "decay": "nope"})
    for log in (running, started):  # compacted: the second reads the bad record alone
        log.apply(b"acme", bad)
        log.apply(b"\xff", b"{}")  # keyed by no tenant id: nothing to close
        log.refresh()
        assert log.get("acme") is None
        assert log.by_api_key(KEY) is None
        assert sorted(log.tenants) == ["globex"]
    running.apply(*tenant_record(Tenant("acme")))  # a good record brings it back
    running.refresh()
    assert running.get("acme") is not None


def test_the_log_merges_over_the_file_and_deletes_and_tombstones() -> None:
    base = TenantRegistry.of({"tenants": {"acme": {"api_keys": [KEY]}, "globex": {}}})
    log = TenantLog("127.0.0.1:1", "t.tenants", base)  # no I/O until started
    assert log.by_api_key(KEY) is not None
    other = "other-key-0123456789"
    log.apply(*tenant_record(with_key(Tenant("initech"), other)))
    log.apply(*tenant_record(replaced(base.get("acme"), "acme", {"recall": "zeph"})))
    log.apply(*tenant_record(Tenant("globex"), deleted=True))
    log.apply(b"bad", b"not json")  # skipped
    assert log.get("initech") is None  # applied, not yet in the view
    log.refresh()
    assert sorted(log.tenants) == ["acme", "initech"]
    acme = log.by_api_key(KEY)
    assert acme is not None
    assert acme.recall == "zeph"  # the topic's record over the file's, keys kept
    assert log.by_api_key(other) == log.get("initech")
    log.apply(b"acme", None)  # a tombstone forgets the topic's record: the file's shows again
    log.apply(b"initech", None)
    log.refresh()
    assert sorted(log.tenants) == ["acme"]
    file_acme = log.get("acme")
    assert file_acme is not None
    assert file_acme.recall == "mnemostream"


def test_keys_are_added_and_revoked_by_digest_prefix() -> None:
    second = "second-key-0123456789"
    tenant = with_key(with_key(Tenant("acme"), KEY), second)
    assert with_key(tenant, KEY) == tenant
    assert len(tenant.key_ids) == 2
    assert without_key(tenant, key_hash(KEY)[:8]).api_key_hashes == (key_hash(second),)
    assert without_key(tenant, key_hash(second).upper()).api_key_hashes == (key_hash(KEY),)
    with pytest.raises(LookupError):
        without_key(tenant, "0" * 8 if not key_hash(KEY).startswith("0" * 8) else "f" * 8)
    with pytest.raises(InvalidField):
        without_key(tenant, "xyz")
    with pytest.raises(InvalidField, match="keys are added"):
        replaced(tenant, "acme", {"api_keys": [KEY]})
    assert "api_key" not in str(tenant.public()).replace("key_ids", "")


def test_a_token_bucket_bursts_to_its_rate_then_refills() -> None:
    bucket = TokenBucket.full(2.0, now=100.0)
    assert [bucket.take(100.0), bucket.take(100.0)] == [0.0, 0.0]
    assert bucket.take(100.0) == pytest.approx(0.5)
    assert bucket.take(100.25) == pytest.approx(0.25)  # half a token back, nothing taken
    assert bucket.take(100.5) == 0.0
    assert bucket.take(90.0) > 0  # a clock that went back refills nothing
    slow = TokenBucket.full(0.1, now=0.0)
    assert (slow.capacity, slow.take(0.0)) == (1.0, 0.0)
    assert slow.take(0.0) == pytest.approx(10.0)


def test_the_limiter_uses_the_tenant_rate_else_the_default() -> None:
    limiter = RateLimiter(default_per_s=0.0)
    for _ in range(100):
        limiter.check("a", None, 0.0)  # 0: unlimited
        limiter.check("b", 0.0, 0.0)
    limited = RateLimiter(default_per_s=1.0)
    limited.check("a", None, 0.0)
    with pytest.raises(RateLimited) as err:
        limited.check("a", None, 0.5)
    assert err.value.retry_after_s == pytest.approx(0.5)
    limited.check("a", 3.0, 0.5)  # a new rate starts a full bucket
    limited.check("b", None, 0.5)  # buckets are per tenant


def test_the_worker_finds_the_tenants_it_does_not_know() -> None:
    registry = TenantRegistry.open_to(["acme"])
    values = [
        orjson.dumps({"tenant_id": "acme"}),
        orjson.dumps({"tenant_id": "new"}),
        orjson.dumps({"tenant_id": "*"}),
        orjson.dumps({"tenant_id": 3}),
        b"[1]",
        b"not json",
    ]
    assert unknown_tenants(values, registry) == {"new"}


# -- the HTTP edge ---------------------------------------------------------------------------------


class LocalLog(TenantLog):
    """A tenants log that applies what it publishes itself (no broker)."""

    async def catch_up(self, timeout_s: float | None = None, *, refresh: bool = False) -> None:
        return None

    async def publish_tenant(
        self, tenant: Tenant, *, deleted: bool = False, erased: bool = False
    ) -> None:
        self.apply(*tenant_record(tenant, deleted=deleted, erased=erased))
        self.refresh()


async def _no_send(role: str, key: bytes, value: bytes) -> Awaitable[object]:
    raise AssertionError(role)


def client(registry: TenantRegistry | TenantLog, **kw: object) -> httpx.AsyncClient:
    store = MilvusStore(MilvusConfig("unused.db", dim=4))  # never connected
    api = create_api(RecallService(store, Hashing(4), _no_send), registry, **kw)  # type: ignore[arg-type]
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=api), base_url="http://m")


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.mark.anyio
async def test_admin_routes_create_a_tenant_whose_new_key_works_at_once() -> None:
    log = LocalLog("127.0.0.1:1", "t.tenants", TenantRegistry.of({"tenants": {}}))
    async with client(log, admin_key=ADMIN) as http:
        put = await http.put(
            "/v1/admin/tenants/initech",
            json={"recall": "zeph", "rate_limit_per_s": 100},
            headers=bearer(ADMIN),
        )
        assert put.status_code == 200, put.text
        assert put.json()["key_ids"] == []
        added = await http.post("/v1/admin/tenants/initech/keys", headers=bearer(ADMIN))
        assert added.status_code == 201, added.text
        api_key = added.json()["api_key"]
        assert added.json()["key_id"] == key_hash(api_key)[:12]
        # the key works on the memory routes (422: past the key, at the body)
        write = await http.post("/v1/memories", json={"memories": []}, headers=bearer(api_key))
        assert write.status_code == 422, write.text
        # ...and never on the admin routes; the admin key acts for no tenant
        assert (await http.get("/v1/admin/tenants", headers=bearer(api_key))).status_code == 401
        # a query parameter an admin route does not take: 401 without the admin key, else 422
        wrong = "/v1/admin/tenants/initech?reuse=true&erase=true"
        assert (await http.put(wrong, json={}, headers=bearer(api_key))).status_code == 401
        refused = await http.put(wrong, json={}, headers=bearer(ADMIN))
        assert (refused.status_code, refused.json()["field"]) == (422, "erase"), refused.text
        assert (await http.post("/v1/memories", json={}, headers=bearer(ADMIN))).status_code == 401
        listed = (await http.get("/v1/admin/tenants", headers={"X-API-Key": ADMIN})).json()
        assert [t["tenant_id"] for t in listed["tenants"]] == ["initech"]
        assert api_key not in str(listed)
        # replacing the settings keeps the keys
        again = await http.put("/v1/admin/tenants/initech", json={}, headers=bearer(ADMIN))
        assert again.json()["key_ids"] == [key_hash(api_key)[:12]]
        assert again.json()["recall"] == "mnemostream"
        for body, field in (  # named as the body has them, not as the policy's path
            ({"decay": "nope"}, "decay"),
            (
                {"overrides": {"recall": {"weights": {"recency": -1}}}},
                "overrides.recall.weights.recency",
            ),
            ({"overrides": {"recall": {"weightz": 1}}}, "overrides.recall.weightz"),
            ({"overrides": {"decay": {"preset": 3}}}, "overrides.decay.preset"),
            ({"decay": "bogus", "overrides": {"decay": {"preset": "powermem"}}}, "decay"),
            ({"rate_limit_per_s": -1}, "rate_limit_per_s"),
            # stored and never read (recall refuses them alike): these presets take no weights
            (
                {"recall": "zeph", "overrides": {"recall": {"weights": {"recency": 0.9}}}},
                "overrides.recall.weights",
            ),
            (
                {"overrides": {"recall": {"preset": "powermem", "weights": {"similarity": 0}}}},
                "overrides.recall.weights",
            ),
        ):
            bad = await http.put("/v1/admin/tenants/initech", json=body, headers=bearer(ADMIN))
            assert (bad.status_code, bad.json()["field"]) == (422, field), bad.text
        revoked = await http.delete(
            f"/v1/admin/tenants/initech/keys/{key_hash(api_key)[:12]}", headers=bearer(ADMIN)
        )
        assert revoked.status_code == 200, revoked.text
        gone = await http.post("/v1/memories", json={"memories": []}, headers=bearer(api_key))
        assert gone.status_code == 401
        missing = await http.delete("/v1/admin/tenants/nobody", headers=bearer(ADMIN))
        assert missing.status_code == 404
        deleted = await http.delete("/v1/admin/tenants/initech", headers=bearer(ADMIN))
        assert deleted.status_code == 200
        assert (
            await http.get("/v1/admin/tenants/initech", headers=bearer(ADMIN))
        ).status_code == 404


@pytest.mark.anyio
async def test_admin_routes_are_closed_without_an_admin_key() -> None:
    registry = TenantRegistry.of({"tenants": {"acme": {"api_keys": [KEY]}}})
    async with client(registry) as http:
        reply = await http.get("/v1/admin/tenants", headers=bearer(KEY))
        assert reply.status_code == 403
        assert reply.headers["content-type"] == "application/problem+json"
    log = LocalLog("127.0.0.1:1", "t.tenants", registry)
    async with client(log, admin_key=ADMIN) as http:
        assert (await http.get("/v1/admin/tenants")).status_code == 401
        assert (await http.get("/v1/admin/tenants", headers=bearer(KEY))).status_code == 401


@pytest.mark.anyio
@pytest.mark.parametrize("blank", ["\n", " ", "\t\n"])
async def test_a_blank_admin_key_keeps_the_admin_routes_closed(blank: str) -> None:
    """A Secret made from an empty file holds a newline: with it, a request with no key (or a
    blank one) must not pass as the admin, as the blank key stripped would let it.
    """
    log = LocalLog("127.0.0.1:1", "t.tenants", TenantRegistry.of({"tenants": {}}))
    async with client(log, admin_key=blank) as http:
        assert (await http.get("/v1/admin/tenants")).status_code == 403
        made = await http.post("/v1/admin/tenants/acme/keys", headers=bearer(" "))
        assert made.status_code == 403, made.text


@pytest.mark.anyio
async def test_the_admin_key_acts_for_no_tenant_even_one_listing_it() -> None:
    # a tenants file that lists the admin key among a tenant's keys (a misconfiguration)
    registry = TenantRegistry.of({"tenants": {"acme": {"api_keys": [KEY, ADMIN]}}})
    log = LocalLog("127.0.0.1:1", "t.tenants", registry)
    async with client(log, admin_key=ADMIN + "\n") as http:  # a Secret written with echo
        refused = await http.post("/v1/recall", json={"query": "x"}, headers=bearer(ADMIN))
        assert refused.status_code == 401, refused.text
        assert "acts for no tenant" in refused.json()["detail"]
        mine = await http.post("/v1/memories", json={"memories": []}, headers=bearer(KEY))
        assert mine.status_code == 422, mine.text  # the tenant's own key works (past the key)
        listed = await http.get("/v1/admin/tenants", headers=bearer(ADMIN))
        assert listed.status_code == 200, listed.text  # the configured key's newline stripped


@pytest.mark.anyio
async def test_a_tenant_over_its_rate_gets_429_with_retry_after() -> None:
    registry = TenantRegistry.of(
        {"tenants": {"acme": {"api_keys": [KEY], "rate_limit_per_s": 0.001}}}
    )
    async with client(registry) as http:
        first = await http.post("/v1/memories", json={"memories": []}, headers=bearer(KEY))
        assert first.status_code == 422  # one request's worth in the bucket
        second = await http.post("/v1/memories", json={"memories": []}, headers=bearer(KEY))
    assert second.status_code == 429, second.text
    assert int(second.headers["retry-after"]) == second.json()["retry_after_s"] > 1
    assert second.headers["content-type"] == "application/problem+json"
    assert "acme" in second.json()["detail"]


@pytest.mark.anyio
async def test_a_broker_that_cannot_be_reached_is_the_logs_own_error() -> None:
    """``mnemo tenants`` exits 2 on TenantLogError ("Kafka not answering"); a broker refusing the
    connection raised aiokafka's own error past it, a traceback.
    """
    log = TenantLog("127.0.0.1:1", "t.tenants", TenantRegistry.of({"tenants": {}}))
    with pytest.raises(TenantLogError, match="cannot reach the broker"):
        await log.catch_up(timeout_s=5)
    with pytest.raises(TenantLogError, match="cannot reach the broker"):
        await log.publish([(b"acme", b"{}")])
    await log.stop()


@pytest.mark.anyio
@pytest.mark.parametrize("rate", ["5", True, "1e3"])
async def test_the_admin_route_reads_a_rate_as_the_tenants_file_does(rate: object) -> None:
    log = LocalLog("127.0.0.1:1", "t.tenants", TenantRegistry.of({"tenants": {}}))
    async with client(log, admin_key=ADMIN) as http:
        reply = await http.put(
            "/v1/admin/tenants/acme", json={"rate_limit_per_s": rate}, headers=bearer(ADMIN)
        )
        assert reply.status_code == 422, reply.text
        assert reply.json()["field"] == "rate_limit_per_s"
        assert log.get("acme") is None
        kept = await http.put(
            "/v1/admin/tenants/acme", json={"rate_limit_per_s": 5}, headers=bearer(ADMIN)
        )
        assert kept.status_code == 200, kept.text
        assert kept.json()["rate_limit_per_s"] == 5.0


def test_the_admin_refuses_more_review_intervals_than_a_state_keeps_and_the_topic_reads_them() -> (
    None
):
    many = {"overrides": {"review": {"intervals_hours": list(range(1, 34))}}}
    with pytest.raises(InvalidField) as refused:
        replaced(None, "acme", many)
    assert refused.value.field == "policy.review.intervals_hours"
    log = TenantLog("127.0.0.1:1", "t.tenants", TenantRegistry.of({"tenants": {}}))
    record = orjson.dumps({"v": 1, "tenant_id": "acme", **many})
    log.apply(b"acme", record)  # written before the bound (or by hand): its tenant is served
    log.refresh()
    found = log.get("acme")
    assert found is not None
    assert len(found.policy.review.intervals_hours) == 33


def test_recall_settings_a_preset_ignores_are_refused_where_made_and_read_where_stored() -> None:
    zeph = {"recall": "zeph", "overrides": {"recall": {"weights": {"recency": 0.9}}}}
    with pytest.raises(InvalidField) as refused:
        replaced(None, "acme", zeph)
    assert (refused.value.field, refused.value.reason) == (
        "policy.recall.weights",
        "the zeph preset does not use them (SPEC section 6)",
    )
    # an mmr_lambda is read: a recall naming another preset carries it over
    kept = {"recall": "zeph", "overrides": {"recall": {"mmr_lambda": 0.2}}}
    assert replaced(None, "acme", kept).policy.recall.mmr_lambda == 0.2
    assert (
        replaced(None, "acme", {**zeph, "recall": "mnemostream"}).policy.recall.weights.recency
        == 0.9
    )
    log = TenantLog("127.0.0.1:1", "t.tenants", TenantRegistry.of({"tenants": {}}))
    log.apply(b"acme", orjson.dumps({"v": 1, "tenant_id": "acme", **zeph}))  # written before
    log.refresh()
    found = log.get("acme")
    assert found is not None
    assert found.policy.recall.preset.value == "zeph"


def test_the_admin_bounds_supersession_neighbours_and_a_worker_searches_at_most_that_many() -> None:
    """100,000 neighbours made every write's supersession search ask Milvus for 100,001 hits (a
    search returns 16,384 at most: every stated write of the tenant would fail its check).
    """
    many = {"overrides": {"supersession": {"neighbours": 100_000}}}
    with pytest.raises(InvalidField) as refused:
        replaced(None, "acme", many)
    assert refused.value.field == "policy.supersession.neighbours"
    log = TenantLog("127.0.0.1:1", "t.tenants", TenantRegistry.of({"tenants": {}}))
    log.apply(b"acme", orjson.dumps({"v": 1, "tenant_id": "acme", **many}))  # written before
    log.refresh()
    found = log.get("acme")
    assert found is not None
    assert found.policy.supersession.searched == MAX_NEIGHBOURS + 1
    assert Policy().supersession.searched == 11  # 10 neighbours and the write itself


def test_a_plain_key_put_among_the_digests_is_never_shown() -> None:
    plain = "mk-Zq3v0realCustomerKeyDoNotLog"
    with pytest.raises(InvalidField) as refused:
        TenantRegistry.of({"tenants": {"acme": {"api_key_hashes": [plain]}}})
    assert plain not in str(refused.value)
    assert refused.value.field.endswith("api_key_hashes")


class Erasing(RecallService):
    """What a tenant's erasure asks of the service, recorded: its memories, erased, waited for."""

    def __init__(self, memories: list[str]) -> None:
        super().__init__(MilvusStore(MilvusConfig("unused.db", dim=4)), Hashing(4), _no_send)
        self.memories = memories
        self.erasures: list[tuple[str, list[str]]] = []
        self.waited: list[object] = []
        self.barriers: list[object] = []  # the tenant's keys when each barrier was asked
        self.log: TenantLog | None = None
        self.keyed: list[list[str]] = []  # what each look for memories keyed meanwhile finds

    async def keyed_memories(self, tenant_id: str) -> list[str]:
        return self.keyed.pop(0) if self.keyed else []

    async def tenant_memories(self, tenant_id: str) -> list[str]:
        self.waited.append("barrier" if self.barriers else "no barrier")
        return list(self.memories)

    async def barrier(self, roles: object = ()) -> None:
        found = self.log.get("acme") if self.log is not None else None
        self.barriers.append(found.api_key_hashes if found is not None else None)

    async def erase(
        self,
        tenant_id: str,
        memory_ids: Sequence[str],
        at: datetime,
        *,
        summaries: bool = True,
        erased_before: Sequence[str] = (),
        users: bool = False,
    ) -> Erasure:
        assert not summaries  # every memory of the tenant: no summary to look for
        self.erasures.append((tenant_id, list(memory_ids)))
        return Erasure(Token({"memory-writes": {0: 7}}), len(memory_ids))

    async def wait(self, after: Token | None) -> None:
        self.waited.append(after)


@pytest.mark.anyio
async def test_an_id_deleted_with_its_memories_kept_is_not_given_to_a_new_tenant_unasked() -> None:
    """A tenant deleted and made again under its id read the deleted tenant's memories (they are
    found by the tenant id alone), and nothing could erase them.
    """
    log = LocalLog("127.0.0.1:1", "t.tenants", TenantRegistry.of({"tenants": {}}))
    service = Erasing(["m1", "m2"])
    service.log = log
    api = create_api(service, log, admin_key=ADMIN)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=api), base_url="http://m"
    ) as http:

        async def put(tenant: str, **params: str) -> httpx.Response:
            return await http.put(
                f"/v1/admin/tenants/{tenant}", json={}, params=params, headers=bearer(ADMIN)
            )

        assert (await put("acme")).status_code == 200
        assert (
            await http.delete("/v1/admin/tenants/acme", headers=bearer(ADMIN))
        ).status_code == 200
        refused = await put("acme")
        assert refused.status_code == 409, refused.text
        assert (
            "memories written under its id are kept (if it wrote any)" in refused.json()["detail"]
        )
        assert log.get("acme") is None
        assert (await put("acme", reuse="true")).status_code == 200  # said so: they are its
        added = await http.post("/v1/admin/tenants/acme/keys", headers=bearer(ADMIN))
        assert added.status_code == 201
        # erased first: every memory, waited for, then the id is free
        erased = await http.delete(
            "/v1/admin/tenants/acme", params={"erase": "true"}, headers=bearer(ADMIN)
        )
        assert erased.status_code == 200, erased.text
        assert erased.json() == {
            "tenant_id": "acme",
            "deleted": True,
            "erased": 2,
            "keys_erased": 2,
        }
        assert service.erasures == [("acme", ["m1", "m2"])]
        # the keys went first, then what was written before was applied, then the erasure
        assert service.barriers == [()]
        assert service.waited == ["barrier", Token({"memory-writes": {0: 7}})]
        assert (await put("acme")).status_code == 200
        missing = await http.delete(
            "/v1/admin/tenants/nobody", params={"erase": "true"}, headers=bearer(ADMIN)
        )
        assert missing.status_code == 404
        assert service.erasures == [("acme", ["m1", "m2"])]  # nothing erased for a missing tenant

        # a summary keyed while the tenant was erased (a consolidation ran): erased as well
        service.erasures.clear()
        service.keyed = [["s1"]]
        erased = await http.delete(
            "/v1/admin/tenants/acme", params={"erase": "true"}, headers=bearer(ADMIN)
        )
        assert erased.status_code == 200, erased.text
        assert erased.json()["erased"] == 3
        assert service.erasures == [("acme", ["m1", "m2"]), ("acme", ["s1"])]

        # keys still minted at every round: the tenant is not removed with them live; 503,
        # and the call repeated once they stop removes it
        assert (await put("acme", reuse="true")).status_code == 200
        service.erasures.clear()
        service.keyed = [[f"s{n}"] for n in range(ERASE_ROUNDS)]
        busy = await http.delete(
            "/v1/admin/tenants/acme", params={"erase": "true"}, headers=bearer(ADMIN)
        )
        assert busy.status_code == 503, busy.text
        assert busy.headers["retry-after"] == "1"
        assert f"after {ERASE_ROUNDS} rounds" in busy.json()["detail"]
        assert len(service.erasures) == ERASE_ROUNDS
        held = log.get("acme")
        assert held is not None  # kept, without keys
        assert held.api_key_hashes == ()
        again = await http.delete(
            "/v1/admin/tenants/acme", params={"erase": "true"}, headers=bearer(ADMIN)
        )
        assert again.status_code == 200, again.text
        assert log.get("acme") is None


@pytest.mark.anyio
async def test_the_cli_makes_a_tenant_only_when_told_and_reuses_an_id_only_when_told(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``put`` of a tenant it could not see (the file's, when MNEMO_TENANTS_FILE is not set
    for the command) made one with no keys, which replaced the file's in every process.
    """
    log = LocalLog("127.0.0.1:1", "t.tenants", TenantRegistry.of({"tenants": {}}))
    log.stop = _stopped  # type: ignore[method-assign]
    args = tenants_cli.parser().parse_args

    with pytest.raises(LookupError, match="--create"):
        await tenants_cli.run(log, args(["put", "demo"]))
    assert log.get("demo") is None
    made = await tenants_cli.run(log, args(["put", "demo", "--create", "--recall", "zeph"]))
    assert made["recall"] == "zeph"
    await tenants_cli.run(log, args(["delete", "demo"]))
    with pytest.raises(ReusedTenant):
        await tenants_cli.run(log, args(["put", "demo", "--create"]))
    assert (await tenants_cli.run(log, args(["put", "demo", "--create", "--reuse"])))[
        "tenant_id"
    ] == "demo"


async def _stopped() -> None:
    return None


class SharedTopic:
    """The tenants topic two processes publish to: records in order, offsets their places."""

    def __init__(self) -> None:
        self.records: list[tuple[bytes, bytes | None]] = []


class Racing(TenantLog):
    """A tenants log of one process over a :class:`SharedTopic`; ``meanwhile`` runs just before
    its next publish (another process's change landing between its read and its write).
    """

    def __init__(self, topic: SharedTopic) -> None:
        super().__init__("127.0.0.1:1", "t.tenants", TenantRegistry.of({"tenants": {}}))
        self.shared = topic
        self.read = 0
        self.meanwhile: Callable[[], Awaitable[object]] | None = None

    def _read_shared(self) -> None:
        while self.read < len(self.shared.records):
            self.offset = self.read
            self.apply(*self.shared.records[self.read])
            self.read += 1
        self.refresh()

    async def catch_up(self, timeout_s: float | None = None, *, refresh: bool = False) -> None:
        self._read_shared()

    async def publish(
        self, records: Sequence[tuple[bytes, bytes | None]], *, applied: bool = True
    ) -> list[int]:
        if self.meanwhile is not None:
            meanwhile, self.meanwhile = self.meanwhile, None
            await meanwhile()
        offsets = []
        for record in records:
            self.shared.records.append(record)
            offsets.append(len(self.shared.records) - 1)
        self._read_shared()
        return offsets


@pytest.mark.anyio
async def test_two_rankers_changing_one_tenant_at_once_lose_neither_change() -> None:
    """Behind one Service, a revoke on one ranker and a new key on another, at once: the revoke
    answered 200 was undone (the later record, made from the older tenant, won), or one of two
    new keys never worked.
    """
    topic = SharedTopic()
    a, b = Racing(topic), Racing(topic)
    k1, k2, k3, k4 = (f"key-{n}-0123456789abcdef" for n in range(4))
    await a.update("acme", lambda t: with_key(replaced(t, "acme", {}), k1))

    b_adds = b.update("acme", lambda t: with_key(_present(t), k2))
    a.meanwhile = lambda: b_adds  # b's key lands between a's read and a's record
    await a.update("acme", lambda t: without_key(_present(t), key_hash(k1)[:12]))
    await b.catch_up()
    for log in (a, b):
        assert log.by_api_key(k1) is None  # the revoke stands
        assert log.by_api_key(k2) is not None  # and so does the new key

    b_adds = b.update("acme", lambda t: with_key(_present(t), k4))
    a.meanwhile = lambda: b_adds
    await a.update("acme", lambda t: with_key(_present(t), k3))
    await b.catch_up()
    assert a.by_api_key(k3) is not None
    assert a.by_api_key(k4) is not None
    assert b.get("acme") == a.get("acme")


def _present(tenant: Tenant | None) -> Tenant:
    assert tenant is not None
    return tenant


@pytest.mark.anyio
async def test_a_change_overtaken_by_a_delete_leaves_the_tenant_deleted() -> None:
    """The redo of a key added while another ranker deleted the tenant raised (404) after its
    record had landed last: the deleted tenant was back with its old keys and the new one.
    A settings change redone on a tenant deleted with its memories kept skipped the 409.
    """
    topic = SharedTopic()
    a, b = Racing(topic), Racing(topic)
    k1, k2 = "key-1-0123456789abcdef", "key-2-0123456789abcdef"
    await a.update("acme", lambda t: with_key(replaced(t, "acme", {}), k1))

    b_deletes = b.update("acme", lambda t: None)
    a.meanwhile = lambda: b_deletes
    with pytest.raises(LookupError):
        await a.update("acme", lambda t: with_key(_present_or_404(t), k2))
    for log in (a, b):
        await log.catch_up()
        assert log.get("acme") is None
        assert log.by_api_key(k1) is None
        assert log.by_api_key(k2) is None

    await a.update("acme", lambda t: replaced(t, "acme", {}), reuse=True)
    b_deletes = b.update("acme", lambda t: None)
    a.meanwhile = lambda: b_deletes
    with pytest.raises(ReusedTenant):
        await a.update("acme", lambda t: replaced(t, "acme", {"recall": "zeph"}))
    await b.catch_up()
    assert a.get("acme") is None
    assert b.get("acme") is None


def _present_or_404(tenant: Tenant | None) -> Tenant:
    if tenant is None:
        raise LookupError("acme")
    return tenant


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("admin_key", "presented", "status"),
    [
        (ADMIN, None, 401),
        (ADMIN, "a-tenant-key-0123", 401),
        (None, ADMIN, 403),
        (ADMIN, ADMIN, 200),
    ],
)
async def test_an_admin_request_is_refused_before_its_body_is_read(
    admin_key: str | None, presented: str | None, status: int
) -> None:
    """FastAPI reads a body before the route's dependencies check the key: anyone reaching the
    port made the ranker read and parse an admin request's body (up to MNEMO_MAX_BODY_BYTES, at
    ~20 times its size), or hold its share of the body budget until the body timeout.
    """
    log = LocalLog("127.0.0.1:1", "t.tenants", TenantRegistry.of({"tenants": {}}))
    store = MilvusStore(MilvusConfig("unused.db", dim=4))  # never connected
    api = create_api(RecallService(store, Hashing(4), _no_send), log, admin_key=admin_key)
    from tests.unit.test_request_bounds import Client, scope

    body = orjson.dumps({"recall": "zeph"})
    headers = {"Content-Type": "application/json", "Content-Length": str(len(body))}
    if presented is not None:
        headers["Authorization"] = f"Bearer {presented}"
    path = "/v1/admin/tenants/initech"
    request = {**scope(headers), "method": "PUT", "path": path, "raw_path": path.encode()}
    client = Client([body])
    await api(request, client.receive, client.send)
    assert client.status == status
    assert bool(client.reads) == (status == 200)
    if status == 401:
        start = next(m for m in client.sent if m["type"] == "http.response.start")
        assert (b"www-authenticate", b"Bearer") in start["headers"]


@pytest.mark.anyio
async def test_a_tenant_made_after_an_erasure_shows_no_history_logged_before_it() -> None:
    """A tenant made under an erased tenant's id was shown the erased tenant's audit records of
    any memory id it asked for (the audit topic keeps them under the same keys). It now carries
    the time it was made, and keeps it through every change and through a deletion that keeps
    its memories; a tenant made where none was erased carries none.
    """
    log = LocalLog("127.0.0.1:1", "t.tenants", TenantRegistry.of({"tenants": {}}))
    made = await log.update("acme", lambda t: replaced(t, "acme", {}))
    assert made is not None
    assert made.history_from_ms is None
    await log.update("acme", lambda t: None, erased=True)
    before = int(time.time() * 1000)
    anew = await log.update("acme", lambda t: replaced(t, "acme", {}))
    assert anew is not None
    assert anew.history_from_ms is not None
    assert before <= anew.history_from_ms <= int(time.time() * 1000)
    assert (
        anew.public()["history_from"]
        == datetime.fromtimestamp(anew.history_from_ms / 1000, UTC).isoformat()
    )
    since = anew.history_from_ms
    changed = await log.update(
        "acme", lambda t: with_key(replaced(t, "acme", {"recall": "zeph"}), KEY)
    )
    assert changed is not None
    assert changed.history_from_ms == since
    assert decode_tenant_record(*tenant_record(changed)) == ("acme", changed)
    await log.update("acme", lambda t: None)  # its memories kept: made again, it goes on
    reused = await log.update("acme", lambda t: replaced(t, "acme", {}), reuse=True)
    assert reused is not None
    assert reused.history_from_ms == since
    await log.update("bolt", lambda t: replaced(t, "bolt", {}))
    await log.update("bolt", lambda t: None)
    kept = await log.update("bolt", lambda t: replaced(t, "bolt", {}), reuse=True)
    assert kept is not None
    assert kept.history_from_ms is None


def test_history_leaves_out_records_logged_before_the_tenant_was_made() -> None:
    newest = Newest(b"acme/m1", "acme", since_ms=1_000)
    newest.add(b"acme/m1", orjson.dumps({"tenant_id": "acme", "kind": "created"}), 999)
    newest.add(b"acme/m1", orjson.dumps({"tenant_id": "acme", "kind": "deleted"}), 1_000)
    found = newest.history()
    assert ([e["kind"] for e in found.events], found.total) == (["deleted"], 1)


@pytest.mark.anyio
async def test_the_history_route_reads_from_the_time_its_tenant_was_made() -> None:
    seen: list[int | None] = []

    class Audit:
        async def history(
            self, tenant_id: str, memory_id: str, *, since_ms: int | None = None
        ) -> History:
            seen.append(since_ms)
            return History([{"kind": "created"}], 1)

    made = Tenant("acme", api_key_hashes=(key_hash(KEY),), history_from_ms=1_234)
    api = create_api(
        RecallService(MilvusStore(MilvusConfig("unused.db", dim=4)), Hashing(4), _no_send),
        TenantRegistry({"acme": made}),
        audit=Audit(),  # type: ignore[arg-type]
    )
    transport = httpx.ASGITransport(app=api)
    async with httpx.AsyncClient(transport=transport, base_url="http://m") as http:
        reply = await http.get("/v1/memories/m1/history", headers=bearer(KEY))
    assert reply.status_code == 200, reply.text
    assert seen == [1_234]
