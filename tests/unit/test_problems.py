"""Every error is problem details; the OpenAPI document says so and names the auth schemes."""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable
from typing import cast

import httpx
import numpy as np
import pytest

from memcore import MAX_RELATIONS, MAX_TAGS
from memcore.policy import MAX_WEIGHT
from memcore.scoring import Scored
from ranker.api import create_api
from ranker.problems import MAX_RETRY_AFTER_S, problem_body
from ranker.service import Recall, Recalled, RecallQuery, RecallService
from ranker.wire import memory_json
from storage import MilvusConfig, MilvusStore
from storage.embedding import Hashing
from storage.tenants import TenantRegistry
from tests.rows import make_row

KEY = "key-acme-0123456789"
pytestmark = pytest.mark.anyio


async def _no_send(role: str, key: bytes, value: bytes) -> Awaitable[object]:
    raise AssertionError(role)


def app() -> httpx.AsyncClient:
    registry = TenantRegistry.of({"tenants": {"acme": {"api_keys": [KEY]}}})
    store = MilvusStore(MilvusConfig("unused.db", dim=4))  # never connected
    api = create_api(RecallService(store, Hashing(4), _no_send), registry)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=api), base_url="http://m")


async def test_errors_of_every_kind_share_the_problem_shape() -> None:
    auth = {"Authorization": f"Bearer {KEY}"}
    async with app() as http:
        replies = {
            401: await http.post("/v1/recall", json={"k": 3}),
            422: await http.post("/v1/memories", json={"memories": [{"content": 3}]}, headers=auth),
            404: await http.get("/no/such/route", headers=auth),
            405: await http.put("/v1/recall", headers=auth),
        }
    for status, reply in replies.items():
        body = reply.json()
        assert reply.status_code == status, reply.text
        assert reply.headers["content-type"] == "application/problem+json"
        assert (body["type"], body["status"]) == ("about:blank", status)
        assert body["title"]
        assert body["detail"]
    assert replies[422].json()["field"] == "memories[0].content"
    assert replies[401].headers["WWW-Authenticate"] == "Bearer"


async def test_the_openapi_document_types_errors_and_names_the_key_schemes() -> None:
    async with app() as http:
        doc = (await http.get("/openapi.json")).json()
    schemes = doc["components"]["securitySchemes"]
    assert {s["type"] for s in schemes.values()} == {"http", "apiKey"}
    assert doc["components"]["schemas"]["Problem"]["required"] == ["title", "status", "detail"]
    for path in ("/v1/recall", "/v1/memories"):
        for method, operation in doc["paths"][path].items():
            assert operation["security"], (path, method)
            for status in ("401", "422", "429", "503"):
                content = operation["responses"][status]["content"]
                assert "application/problem+json" in content, (path, method, status)
    assert "409" in doc["paths"]["/v1/memories/{memory_id}"]["patch"]["responses"]


async def test_what_milvus_or_the_cache_would_choke_on_is_a_422_naming_the_field() -> None:
    auth = {"Authorization": f"Bearer {KEY}", "content-type": "application/json"}
    surrogate_key = b'{"memories": [{"content": "a", "metadata": {"k\\udc00": 1}}]}'
    async with app() as http:
        replies = {
            "memories[0].metadata.k\\udc00": await http.post(
                "/v1/memories", content=surrogate_key, headers=auth
            ),
            "filters.tags[0]": await http.post(
                "/v1/recall",
                content=b'{"query": "x", "filters": {"tags": ["\\ud800"]}}',
                headers=auth,
            ),
            "vector": await http.post("/v1/recall", json={"vector": [1.0, 0.0]}, headers=auth),
            "memory_id": await http.get("/v1/memories/a%0Ab", headers=auth),
            "memories[0].run_id": await http.post(
                "/v1/memories",
                json={"memories": [{"content": "a", "session_id": "s1", "run_id": "s2"}]},
                headers=auth,
            ),
            "filters.run_id": await http.post(
                "/v1/recall",
                json={"query": "x", "filters": {"session_id": "s1", "run_id": "s2"}},
                headers=auth,
            ),
            "include_history": await http.post(
                "/v1/recall", json={"query": "x", "include_history": 0}, headers=auth
            ),
        }
    for field, reply in replies.items():
        assert (reply.status_code, reply.json()["field"]) == (422, field), reply.text


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b'{"vector": [NaN, 1, 1, 1]}', "vector[0]"),
        (b'{"query": "x", "k": 123456789012345678901234567890}', "k"),
        (b'{"query": "x", "k": -9223372036854775809}', "k"),
        (b'{"query": "x", "filters": {"tags": ["a", 18446744073709551616]}}', "filters.tags[1]"),
        (b'{"query": "\\ud800"}', "query"),
        (b'{"query": "x", "k": 1.5}', "k"),
        (b'{"query": "x", "filters": {"tags": "a"}}', "filters.tags"),
    ],
)
async def test_recall_bodies_orjson_refuses_get_the_same_422_naming_the_field(
    body: bytes, field: str
) -> None:
    """Recall bodies are parsed by orjson (ranker.wire.OrjsonRoute); what it refuses or would
    read differently is read by the standard library, so NaN, lone surrogates and integers over
    64 bits (which orjson makes floats) still name their field with the value as sent."""
    auth = {"Authorization": f"Bearer {KEY}", "content-type": "application/json"}
    async with app() as http:
        reply = await http.post("/v1/recall", content=body, headers=auth)
    assert (reply.status_code, reply.json()["field"]) == (422, field), reply.text
    big = re.search(rb"-?\d{19,}", body)
    if big is not None:  # the integer as sent, not the float orjson would make of it
        assert reply.json()["detail"].startswith(f"{field}={big.group().decode()}"), reply.text


async def test_responses_of_the_recall_routes_are_counted_under_their_route() -> None:
    """The recall routes have their own route class (orjson bodies); Admission still labels
    their responses with their path, as every other route's."""
    registry = TenantRegistry.of({"tenants": {"acme": {"api_keys": [KEY]}}})
    service = RecallService(MilvusStore(MilvusConfig("unused.db", dim=4)), Hashing(4), _no_send)
    api = create_api(service, registry)
    transport = httpx.ASGITransport(app=api)
    async with httpx.AsyncClient(transport=transport, base_url="http://m") as http:
        for path in ("/v1/recall", "/v1/archive/search", "/v1/memories"):
            assert (await http.post(path, json={"k": 3})).status_code == 401
    for path in ("/v1/recall", "/v1/archive/search", "/v1/memories"):
        labels = {"route": path, "status": "401"}
        found = service.metrics.registry.get_sample_value(
            "mnemostream_http_responses_total", labels
        )
        assert found == 1.0, path


async def test_route_labels_stay_right_when_paths_repeat() -> None:
    """Admission remembers the labels of paths without parameters; a path with one (a memory
    id), another method on a known path and an unknown path are matched again each time."""
    registry = TenantRegistry.of({"tenants": {"acme": {"api_keys": [KEY]}}})
    service = RecallService(MilvusStore(MilvusConfig("unused.db", dim=4)), Hashing(4), _no_send)
    transport = httpx.ASGITransport(app=create_api(service, registry))
    async with httpx.AsyncClient(transport=transport, base_url="http://m") as http:
        for _ in range(2):
            assert (await http.post("/v1/recall", json={"k": 3})).status_code == 401
            assert (await http.put("/v1/recall")).status_code == 405
            assert (await http.get("/v1/nothing/here")).status_code == 404
            for memory_id in ("m-1", "m-2"):
                assert (await http.get(f"/v1/memories/{memory_id}")).status_code == 401
    counts = {
        (route, status): service.metrics.registry.get_sample_value(
            "mnemostream_http_responses_total", {"route": route, "status": status}
        )
        for route, status in (
            ("/v1/recall", "401"),
            ("other", "405"),
            ("other", "404"),
            ("/v1/memories/{memory_id}", "401"),
        )
    }
    assert counts == {
        ("/v1/recall", "401"): 2.0,
        ("other", "405"): 2.0,
        ("other", "404"): 2.0,
        ("/v1/memories/{memory_id}", "401"): 4.0,
    }


@pytest.mark.parametrize(
    "metadata", [{"n": 3, "s": "é", "nested": [1.5, None]}, {"big": 2**70}], ids=["plain", "big"]
)
async def test_recall_answers_are_every_route_s_json_whoever_writes_them(
    monkeypatch: pytest.MonkeyPatch, metadata: dict[str, object]
) -> None:
    """Recall answers are written by orjson (ranker.wire.json_response); what it cannot write
    (an integer beyond 64 bits in metadata, numpy scores) still comes back, value for value."""
    registry = TenantRegistry.of({"tenants": {"acme": {"api_keys": [KEY]}}})
    service = RecallService(MilvusStore(MilvusConfig("unused.db", dim=4)), Hashing(4), _no_send)
    row = make_row("acme", "m1", (1.0, 0.0, 0.0, 0.0), metadata=metadata)
    recency = cast("float", np.float32(0.25))  # numpy scalars, as a kernel may hand them over
    score = Scored("m1", np.float64(0.75), 0.0, 0.5, recency, 0.0, 0.625)

    async def recall(tenant_id: str, query: RecallQuery) -> Recall:
        return Recall([Recalled(row, score)])

    monkeypatch.setattr(service, "recall", recall)
    transport = httpx.ASGITransport(app=create_api(service, registry))
    auth = {"Authorization": f"Bearer {KEY}"}
    async with httpx.AsyncClient(transport=transport, base_url="http://m") as http:
        reply = await http.post("/v1/recall", json={"vector": [1, 0, 0, 0]}, headers=auth)
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"] == "application/json"
    (found,) = json.loads(reply.content)["results"]  # the standard library: exact integers
    scores = {"similarity": 0.75, "keyword": 0.0, "importance": 0.5, "recency": 0.25}
    assert found == {**memory_json(row), "scores": {**scores, "graph": 0.0, "final": 0.625}}
    assert found["metadata"] == metadata


async def test_a_write_body_with_an_integer_over_64_bits_is_refused_as_sent() -> None:
    """Every route reads JSON bodies with orjson (which makes such an integer a float that a
    write would accept); they are read by the standard library instead, so the write is
    refused naming the field and the integer as sent."""
    auth = {"Authorization": f"Bearer {KEY}", "content-type": "application/json"}
    body = b'{"memories": [{"content": "x", "metadata": {"n": 18446744073709551616}}]}'
    async with app() as http:
        reply = await http.post("/v1/memories", content=body, headers=auth)
    assert reply.status_code == 422, reply.text
    assert reply.json()["field"] == "memories[0].metadata.n"
    assert reply.json()["detail"].startswith("memories[0].metadata.n=18446744073709551616"), (
        reply.text
    )


async def test_a_write_field_another_api_names_so_is_refused_naming_ours() -> None:
    """mem0's exports carry ``created_at``: "Extra inputs are not permitted" left the caller to
    find that this API calls it ``at``. A recall's unknown field gets no such hint (its ``at``
    is the as-of time, not a creation time).
    """
    auth = {"Authorization": f"Bearer {KEY}"}
    memory = {"content": "x", "created_at": "2026-01-01T00:00:00+00:00"}
    async with app() as http:
        write = await http.post("/v1/memories", json={"memories": [memory]}, headers=auth)
        odd = await http.post(
            "/v1/memories", json={"memories": [{"content": "x", "colour": 1}]}, headers=auth
        )
        recall = await http.post("/v1/recall", json={"query": "q", "created_at": "x"}, headers=auth)
    assert (write.status_code, write.json()["field"]) == (422, "memories[0].created_at")
    assert write.json()["detail"].endswith("; this API calls it 'at'"), write.text
    assert (odd.status_code, odd.json()["field"]) == (422, "memories[0].colour")
    assert "this API calls it" not in odd.json()["detail"]
    assert (recall.status_code, recall.json()["field"]) == (422, "created_at")
    assert "this API calls it" not in recall.json()["detail"]


async def test_a_write_with_metadata_nested_past_what_json_encoders_take_is_a_422() -> None:
    """orjson encodes 254 levels at most: such a write was a 500 (TypeError) at the edge."""
    auth = {"Authorization": f"Bearer {KEY}", "content-type": "application/json"}
    metadata = b'{"a": ' * 300 + b"1" + b"}" * 300
    body = b'{"memories": [{"content": "x", "metadata": ' + metadata + b"}]}"
    async with app() as http:
        reply = await http.post("/v1/memories", content=body, headers=auth)
    assert (reply.status_code, reply.json()["field"]) == (422, "memories[0].metadata"), reply.text


@pytest.mark.parametrize("depth", [600, 1_000])
async def test_a_deeply_nested_body_is_still_validated(depth: int) -> None:
    """The walk that looks for integers orjson misreads goes as deep as orjson reads (1,024
    levels; a recursive walk stopped near 1,000, and the standard library's reading then
    raised RecursionError: a generic 400 that said nothing): validated as any other body."""
    auth = {"Authorization": f"Bearer {KEY}", "content-type": "application/json"}
    deep = b'{"a": ' * depth + b"1" + b"}" * depth
    body = b'{"query": "x", "filters": {"tags": [' + deep + b"]}}"
    async with app() as http:
        reply = await http.post("/v1/recall", content=body, headers=auth)
    assert (reply.status_code, reply.json()["field"]) == (422, "filters.tags[0]"), reply.text


async def test_a_body_too_deep_for_the_standard_library_is_a_400_saying_so() -> None:
    """An integer past 64 bits sends the body to the standard library's reader, which stops
    near 1,000 levels."""
    auth = {"Authorization": f"Bearer {KEY}", "content-type": "application/json"}
    deep = b'{"a": ' * 1_000 + str(2**70).encode() + b"}" * 1_000
    body = b'{"query": "x", "filters": {"tags": [' + deep + b"]}}"
    async with app() as http:
        reply = await http.post("/v1/recall", content=body, headers=auth)
    assert reply.status_code == 400, reply.text
    assert "nested too deep" in reply.json()["detail"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"weights": {"similarity": 1e308, "keyword": 1e308}}, "weights.similarity"),
        ({"weights": {"graph": 1000.5}}, "weights.graph"),
        ({"preset": "zeromemory", "weights": {"importance": 1e308}}, "weights.importance"),
    ],
)
async def test_a_weight_over_the_bound_names_the_request_field(
    body: dict[str, object], field: str
) -> None:
    """Not the policy's internal path (``policy.recall.weights.similarity``)."""
    auth = {"Authorization": f"Bearer {KEY}"}
    async with app() as http:
        reply = await http.post("/v1/recall", json={"query": "x", **body}, headers=auth)
    assert (reply.status_code, reply.json()["field"]) == (422, field), reply.text
    assert reply.json()["detail"].startswith(f"{field}="), reply.text


async def test_the_openapi_document_declares_the_weights_bound() -> None:
    async with app() as http:
        doc = (await http.get("/openapi.json")).json()
    weights = doc["components"]["schemas"]["Weights"]["properties"]
    assert set(weights) == {"similarity", "keyword", "importance", "recency", "graph"}
    for name, schema in weights.items():
        (number,) = [s for s in schema["anyOf"] if s.get("type") == "number"]
        assert (number["minimum"], number["maximum"]) == (0, MAX_WEIGHT), name


@pytest.mark.parametrize("path", ["/v1/recall", "/v1/memories", "/v1/access", "/v1/memories/get"])
@pytest.mark.parametrize(
    ("body", "where"),
    [
        (
            b'{"query": "x",}',
            "the body is not JSON: Expecting property name enclosed in double"
            " quotes at line 1, column 15 (char 14)",
        ),
        (
            b'{\n  "k": 3\n  "query": "x"}',
            "the body is not JSON: Expecting ',' delimiter at line 3, column 3 (char 13)",
        ),
        (b'{"query": ', "the body is not JSON: Expecting value at line 1, column 11 (char 10)"),
        (b"\xff\xfe{}", "the body is not UTF-8: byte 0 (0xff): invalid start byte"),
        (b'{"query": "\xe9"}', "the body is not UTF-8: byte 11 (0xe9): invalid continuation byte"),
    ],
    ids=["trailing comma", "missing comma", "cut short", "UTF-16 BOM", "Latin-1"],
)
async def test_a_body_that_is_not_json_is_a_400_saying_where(
    path: str, body: bytes, where: str
) -> None:
    """As the OpenAPI document declares ("the body is not JSON (or not UTF-8)"): not a 422 whose
    ``field`` is the character offset; the same on the direct recall route as on the others."""
    auth = {"Authorization": f"Bearer {KEY}", "content-type": "application/json"}
    async with app() as http:
        reply = await http.post(path, content=body, headers=auth)
    assert reply.status_code == 400, reply.text
    assert reply.headers["content-type"] == "application/problem+json"
    assert reply.json() == {
        "type": "about:blank",
        "title": "Bad Request",
        "status": 400,
        "detail": where,
    }


@pytest.mark.parametrize("wait_s", [1e30, float("inf"), float("nan"), 86_400.5])
def test_a_retry_hint_past_a_day_names_a_day(wait_s: float) -> None:
    """A tenant rate of 1e-30 requests/s (accepted) waits ~1e30 s: past 64 bits, a 500 before."""
    body, headers = problem_body(429, "over its rate", retry_after_s=wait_s)
    assert json.loads(body)["retry_after_s"] == MAX_RETRY_AFTER_S == 86_400
    assert headers["retry-after"] == "86400"


def test_a_retry_hint_is_whole_seconds_of_at_least_one() -> None:
    for wait_s, named in ((0.0, 1), (0.2, 1), (1.5, 2), (86_399.2, 86_400)):
        body, _ = problem_body(503, "later", retry_after_s=wait_s)
        assert json.loads(body)["retry_after_s"] == named


async def test_the_openapi_document_declares_the_caps_a_write_and_an_update_are_refused_past() -> (
    None
):
    """The document said nothing of the 64-tag and 64-relation caps nor of content's byte limit:
    a client generated from it learnt them from 422s. Each declared cap is the one enforced.
    """
    auth = {"Authorization": f"Bearer {KEY}"}
    async with app() as http:
        schemas = (await http.get("/openapi.json")).json()["components"]["schemas"]
        over = [f"t{i}" for i in range(MAX_TAGS + 1)]
        refused = await http.post(
            "/v1/memories", json={"memories": [{"content": "x", "tags": over}]}, headers=auth
        )
        linked = [f"m{i}" for i in range(MAX_RELATIONS + 1)]
        unlinked = await http.post(
            "/v1/memories", json={"memories": [{"content": "x", "relations": linked}]}, headers=auth
        )
    write, update = schemas["MemoryBody"]["properties"], schemas["UpdateBody"]["properties"]
    assert write["tags"]["maxItems"] == update["tags"]["maxItems"] == MAX_TAGS
    assert write["relations"]["maxItems"] == MAX_RELATIONS
    assert "MNEMO_MAX_CONTENT_BYTES" in write["content"]["description"]
    assert "MNEMO_MAX_CONTENT_BYTES" in update["content"]["description"]
    assert (refused.status_code, refused.json()["field"]) == (422, "memories[0].tags")
    assert (unlinked.status_code, unlinked.json()["field"]) == (422, "memories[0].relations")
