"""Every documented input limit, from both sides, with the limits written out (not the
constants: changing one must fail here), and the field each refusal names. A mutation review of
the validation edge (`storage/records.py`, `ranker/api.py`, `ranker/wire.py`,
`ranker/admission.py`, `storage/tenants.py`) found 48 changes no unit test noticed: a limit one
over, a check gone, another field named. README's "API input" and tenant sections promise these.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
from collections.abc import Callable, MutableMapping
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import httpx
import orjson
import pytest
from fastapi import HTTPException

from memcore import InvalidField
from ranker.admission import Admission, TenantBusy, TenantSlots
from ranker.api import create_api
from ranker.metrics import Metrics
from ranker.service import Recall, RecallQuery, RecallService
from storage import MilvusConfig, MilvusStore
from storage.embedding import Hashing
from storage.records import (
    Limits,
    RecordError,
    checked_scope,
    checked_tags,
    checked_write,
    decode_consolidation,
    decode_decision,
    decode_write,
)
from storage.tenants import Tenant, TenantRegistry, rate_limit, replaced, tenant_of, without_key

LIMITS = Limits(4, 16_384, TenantRegistry.open_to(["acme"]))
AT = "2026-03-01T12:00:00+00:00"
KEY = "key-acme-0123456789"
AUTH = {"Authorization": f"Bearer {KEY}"}
ACCEPTED = "accepted"


def outcome(check: Callable[[], object]) -> str:
    """``accepted``, or the field the refusal names."""
    try:
        check()
    except RecordError as exc:
        return exc.field
    except InvalidField as exc:
        return exc.field
    except (TenantBusy, ValueError) as exc:
        return type(exc).__name__
    return ACCEPTED


def metadata_of(size: int) -> dict[str, str]:
    """Metadata whose JSON is exactly ``size`` bytes."""
    return {"k": "a" * (size - len(b'{"k":""}'))}


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"metadata": metadata_of(32_768)}, ACCEPTED),  # 32 KiB
        ({"metadata": metadata_of(32_769)}, "metadata"),
        ({"tags": ["a" * 128]}, ACCEPTED),
        ({"tags": ["a" * 129]}, "tags[0]"),
        ({"tags": [f"t{i}" for i in range(64)]}, ACCEPTED),
        ({"tags": [f"t{i}" for i in range(65)]}, "tags"),
        ({"relations": [f"m{i}" for i in range(64)]}, ACCEPTED),
        ({"relations": [f"m{i}" for i in range(65)]}, "relations"),
        ({"content": "a" * 16_384}, ACCEPTED),  # MNEMO_MAX_CONTENT_BYTES, in bytes
        ({"content": "a" * 16_385}, "content"),
        ({"content": "é" * 8_193}, "content"),  # 8,193 characters, 16,386 bytes
        ({"agent_id": "é" + "a" * 254}, ACCEPTED),  # 256 bytes
        ({"agent_id": "é" + "a" * 255}, "agent_id"),  # 256 characters, 257 bytes
    ],
)
def test_a_writes_limits_as_the_api_checks_them(fields: dict[str, Any], named: str) -> None:
    now = datetime.now(UTC)
    doc = {"tenant_id": "acme", "content": "x", "at": now.isoformat(), **fields}
    assert outcome(lambda: checked_write(doc, LIMITS, now)) == named


def test_filter_tags_and_scopes_have_a_writes_limits() -> None:
    assert outcome(lambda: checked_tags("filters.tags", ["a" * 128])) == ACCEPTED
    assert outcome(lambda: checked_scope("filters.agent_id", "a" * 256)) == ACCEPTED
    assert outcome(lambda: checked_scope("filters.agent_id", "a" * 257)) == "filters.agent_id"


WRITE = {"tenant_id": "acme", "content": "x", "at": AT}
DECISION = {"kind": "decision", "tenant_id": "acme", "memory_id": "m1", "at": AT, "reason": "r"}
ABSORB = {**DECISION, "decision": "absorb", "source": "m2"}


@pytest.mark.parametrize(
    ("decode", "fields", "named"),
    [
        (decode_write, {**WRITE, "embedding": [1e19, 0, 0, 0]}, "embedding"),  # norm over 1e18
        (decode_write, {**WRITE, "content": "\x00abc"}, "content"),  # a NUL first, too
        (decode_write, {**WRITE, "importance": 1.2}, "importance"),
        (decode_write, {**WRITE, "summary_of": ["ok", "a/b"]}, "summary_of[1]"),
        (
            decode_write,
            {**WRITE, "summary_of": ["s1"], "source_keys": {"s1": "k1="}},
            "source_keys.s1",
        ),
        (decode_decision, {**ABSORB, "last_access": "1700000000"}, "last_access"),
        (decode_decision, {**ABSORB, "last_access": "1969-12-31T00:00:00+00:00"}, "last_access"),
        (decode_decision, {**ABSORB, "access_count": 2**31}, "access_count"),
        (decode_decision, {**DECISION, "decision": "retire", "to": "active"}, "to"),
        (decode_decision, {**DECISION, "decision": "fade", "reason": "r" * 1001}, "reason"),
        (decode_decision, {**DECISION, "decision": "fade", "request_id": "q" * 129}, "request_id"),
        (
            decode_decision,
            {**DECISION, "decision": "retire", "to": "archived", "content_hash": "A" * 64},
            "content_hash",
        ),
        (
            decode_consolidation,
            {"tenant_id": "acme", "at": AT, "semantic_dedup_min_cosine": 1.5},
            "semantic_dedup_min_cosine",
        ),
    ],
)
def test_records_other_producers_write_are_held_to_the_same_limits(
    decode: Callable[[bytes, Limits], object], fields: dict[str, Any], named: str
) -> None:
    assert outcome(lambda: decode(orjson.dumps({"v": 1, **fields}), LIMITS)) == named


def test_a_long_context_is_named_when_content_and_context_pass_the_indexed_limit() -> None:
    limits = Limits(4, 70_000, TenantRegistry.open_to(["acme"]))
    doc = {"v": 1, **WRITE, "content": "a " * 30_000, "context": "b " * 3_000}
    assert outcome(lambda: decode_write(orjson.dumps(doc), limits)) == "context"


class Answered(RecallService):
    """A service whose recall answers nothing and whose producer acknowledges at once."""

    def __init__(self) -> None:
        async def produce(role: str, key: bytes, value: bytes) -> asyncio.Future[object]:
            done = asyncio.get_running_loop().create_future()
            done.set_result(SimpleNamespace(partition=0, offset=1))
            return done

        super().__init__(MilvusStore(MilvusConfig("unused.db", dim=4)), Hashing(4), produce)

    async def recall(self, tenant_id: str, query: RecallQuery) -> Recall:
        return Recall([])


async def post(
    path: str, body: object, content_type: str = "application/json"
) -> tuple[int, str | None]:
    app = create_api(Answered(), TenantRegistry.of({"tenants": {"acme": {"api_keys": [KEY]}}}))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://m") as http:
        headers = AUTH | {"content-type": content_type}
        reply = await http.post(path, content=orjson.dumps(body), headers=headers)
    if reply.status_code == 200:
        return 200, None
    return reply.status_code, reply.json().get("field")


def memories(n: int) -> dict[str, Any]:
    return {"memories": [{"content": f"m{i}"} for i in range(n)]}


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("path", "body", "answer"),
    [
        ("/v1/recall", {"query": "q", "k": 1000}, (200, None)),
        ("/v1/recall", {"query": "q", "k": 1001}, (422, "k")),
        ("/v1/recall", {"query": "q", "k": 0}, (422, "k")),
        ("/v1/recall", {"query": "a" * 16_384}, (200, None)),
        ("/v1/recall", {"query": "a" * 16_385}, (422, "query")),
        ("/v1/recall", {"query": "q", "weights": {"importance": 3}}, (422, "weights.importance")),
        (
            "/v1/recall",
            {"query": "q", "filters": {"agent_id": "a" * 257}},
            (422, "filters.agent_id"),
        ),
        (
            "/v1/recall",
            {"query": "q", "filters": {"memory_types": ["episodic", "bogus"]}},
            (422, "filters.memory_types[1]"),
        ),
        ("/v1/memories", memories(1000), (200, None)),
        ("/v1/memories", memories(1001), (422, "memories")),
        (
            "/v1/memories",
            {"memories": [{"content": "x", "at": "2999-01-01T00:00:00+00:00"}]},
            (422, "memories[0].at"),  # refused before anything is produced: 200 means applied
        ),
        ("/v1/access", {"memory_ids": [f"m{i}" for i in range(1000)]}, (200, None)),
        ("/v1/access", {"memory_ids": [f"m{i}" for i in range(1001)]}, (422, "memory_ids")),
        ("/v1/access", {"memory_ids": ["ok", "a/b"]}, (422, "memory_ids[1]")),
    ],
)
async def test_the_http_limits_readme_lists(
    path: str, body: dict[str, Any], answer: tuple[int, str | None]
) -> None:
    assert await post(path, body) == answer


@pytest.mark.anyio
async def test_a_recall_body_is_json_by_its_content_type() -> None:
    assert await post("/v1/recall", {"query": "q"}, "application/x-ndjson") == (422, "$")
    assert await post("/v1/recall", {"query": "q"}, "application/json") == (200, None)


@pytest.mark.anyio
async def test_admission_at_its_limits() -> None:
    """One request in flight of one allowed: the next is a 429; a body of exactly the limit
    (announced or streamed) is admitted, one byte over is a 413.
    """
    held = asyncio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        while (await receive()).get("more_body"):
            pass
        await held.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    gate = Admission(app, max_in_flight=1, metrics=Metrics(), routes=list, max_body_bytes=10)

    async def call(body: bytes = b"", length: int | None = None) -> int:
        headers = [(b"x-api-key", b"k")]
        if length is not None:
            headers.append((b"content-length", str(length).encode()))
        scope = {
            "type": "http",
            "method": "POST",
            "path": "/v1/recall",
            "raw_path": b"/v1/recall",
            "headers": headers,
            "query_string": b"",
        }
        sent: list[MutableMapping[str, Any]] = []
        messages = [{"type": "http.request", "body": body, "more_body": False}]

        async def receive() -> dict[str, Any]:
            return messages.pop(0) if messages else {"type": "http.disconnect"}

        async def send(message: MutableMapping[str, Any]) -> None:
            sent.append(message)

        await gate(scope, receive, send)
        return int(sent[0]["status"])

    first = asyncio.create_task(call())
    await asyncio.sleep(0.05)
    assert await asyncio.wait_for(call(), 5) == 429
    held.set()
    assert await first == 200
    assert await call(b"x" * 10, 10) == 200
    assert await call(b"x" * 11, 11) == 413
    assert await call(b"x" * 10) == 200
    with pytest.raises(HTTPException) as over:  # raised to the route reading it: FastAPI's 413
        await call(b"x" * 11)
    assert over.value.status_code == 413


def test_a_tenants_share_of_slots_is_counted_through_releases() -> None:
    slots = TenantSlots(2)
    first: dict[str, Any] = {"mnemostream.tenant_slots": []}
    second: dict[str, Any] = {"mnemostream.tenant_slots": []}
    slots.take(first, "acme")
    slots.take(second, "acme")
    slots.release(first)
    assert outcome(lambda: slots.take({"mnemostream.tenant_slots": []}, "acme")) == ACCEPTED
    assert outcome(lambda: slots.take({"mnemostream.tenant_slots": []}, "acme")) == "TenantBusy"


async def app_of_nothing(scope: Any, receive: Any, send: Any) -> None:
    return None


def test_admission_needs_one_slot_at_least() -> None:
    refused = outcome(
        lambda: Admission(app_of_nothing, max_in_flight=0, metrics=Metrics(), routes=list)
    )
    assert refused == "ValueError"


DIGEST = hashlib.sha256(b"a-key-of-16-chars").hexdigest()
TWO_KEYS = Tenant("t", api_key_hashes=("abcdef01" + "0" * 56, "abcdef01" + "1" * 56, "9" * 64))


@pytest.mark.parametrize(
    ("check", "named"),
    [
        (lambda: tenant_of("t", {"api_keys": ["k" * 15]}), "api_keys"),
        (lambda: tenant_of("t", {"api_keys": ["k" * 16]}), ACCEPTED),
        (lambda: tenant_of("t", {"api_key_hashes": [DIGEST.upper()]}), "api_key_hashes"),
        (lambda: tenant_of("t", {"api_key_hashes": [DIGEST, DIGEST]}), "api_keys"),
        (lambda: rate_limit(True), "rate_limit_per_s"),
        (lambda: rate_limit(math.nan), "rate_limit_per_s"),
        (lambda: rate_limit(math.inf), "rate_limit_per_s"),
        (
            lambda: replaced(None, "t", {"overrides": {"supersession": {"neighbours": 1024}}}),
            ACCEPTED,
        ),
        (
            lambda: replaced(None, "t", {"overrides": {"supersession": {"neighbours": 1025}}}),
            "policy.supersession.neighbours",
        ),
        (
            lambda: replaced(None, "t", {"overrides": {"supersession": {"max_words": 64}}}),
            ACCEPTED,
        ),
        (
            lambda: replaced(None, "t", {"overrides": {"supersession": {"max_words": 65}}}),
            "policy.supersession.max_words",
        ),
        (
            lambda: replaced(None, "t", {"overrides": {"supersession": {"speaker_min_cosine": 1}}}),
            ACCEPTED,
        ),
        (
            lambda: replaced(
                None, "t", {"overrides": {"supersession": {"speaker_min_cosine": 1.5}}}
            ),
            "policy.supersession.speaker_min_cosine",
        ),
        (lambda: without_key(TWO_KEYS, "9999999"), "key_id"),  # 8 hex digits at least
        (lambda: without_key(TWO_KEYS, "abcdef01"), "key_id"),  # names two keys
    ],
)
def test_tenant_settings_at_their_limits(check: Callable[[], object], named: str) -> None:
    assert outcome(check) == named


def test_a_key_claimed_twice_is_refused_without_showing_its_digest() -> None:
    with pytest.raises(InvalidField) as err:
        tenant_of("t", {"api_key_hashes": [DIGEST, DIGEST]})
    assert DIGEST not in str(err.value)
