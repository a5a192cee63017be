"""What the recall routes check and how they order their answer, the same for ``/v1/recall`` and
``/v1/archive/search`` (one body, ``RecallBody``; the token of a tracked recall: test_recall_token).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from memcore.scoring import Scored
from ranker.service import Candidate, Recall, Recalled, RecallQuery
from storage import to_us
from storage.records import Limits, checked_access
from storage.tenants import TenantRegistry
from tests.rows import make_row
from tests.unit.test_user_scope import AUTH, KEY, Produced, service_and_client

pytestmark = pytest.mark.anyio
ROWS = [make_row("acme", f"m{i}", (1.0, i / 10, 0.0, 0.0)) for i in range(2)]
LIMITS = Limits(4, 16_384, TenantRegistry.of({"tenants": {"acme": {"api_keys": [KEY]}}}))


async def test_a_tracked_recall_dated_past_the_allowed_skew_is_a_422_naming_at(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its access events would carry that ``at`` and the worker would dead-letter them: the
    recall is refused as ``POST /v1/access`` refuses the same ``at``, and records nothing. An
    as-of recall in the past stays a recall, its accesses ones the worker accepts."""
    produced = Produced()
    service, client = service_and_client(produced)

    def candidates(tenant_id: str, vector: object, query: RecallQuery) -> list[Candidate]:
        return [Candidate(r, 1.0, None) for r in ROWS]

    monkeypatch.setattr(service, "_candidates", candidates)
    future = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    past = "2001-01-01T00:00:00+00:00"
    await service.start()
    try:
        async with client as http:
            body = {"vector": [1, 0, 0, 0], "at": future}
            tracked = await http.post("/v1/recall", json=body, headers=AUTH)
            access = await http.post(
                "/v1/access", json={"memory_ids": ["m0"], "at": future}, headers=AUTH
            )
            untracked = await http.post("/v1/recall", json={**body, "track": False}, headers=AUTH)
            archive = await http.post("/v1/archive/search", json=body, headers=AUTH)
            assert not produced.values  # nothing recorded so far
            as_of = await http.post(
                "/v1/recall", json={"vector": [1, 0, 0, 0], "at": past}, headers=AUTH
            )
    finally:
        await service.stop()
    assert (tracked.status_code, tracked.json()["field"]) == (422, "at"), tracked.text
    assert (access.status_code, access.json()["field"]) == (422, "at"), access.text
    reason = access.json()["detail"].split("after the time it was received")[0]
    assert tracked.json()["detail"].startswith(reason)  # the access route's check and limits
    assert untracked.status_code == archive.status_code == 200  # no access events: as-of only
    assert as_of.status_code == 200, as_of.text
    assert [(v["memory_id"], v["at"]) for v in produced.values] == [("m0", past), ("m1", past)]
    for value in produced.values:
        checked_access(value, LIMITS, datetime.now(UTC))  # the worker applies them


@pytest.mark.parametrize("path", ["/v1/recall", "/v1/archive/search"])
async def test_both_recall_routes_list_history_in_time_order(
    monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    """``include_history``: the top k in time order, as ``RecallBody`` promises for both routes;
    without it, best first."""
    service, client = service_and_client(Produced())
    old = make_row("acme", "old", (1.0, 0.0, 0.0, 0.0), state="archived", created_at_us=1_000_000)
    new = make_row("acme", "new", (1.0, 1.0, 0.0, 0.0), state="archived", created_at_us=5_000_000)

    async def recall(tenant_id: str, query: RecallQuery) -> Recall:
        best_first = [(new, 0.9), (old, 0.5)]
        return Recall([Recalled(r, Scored(r.memory_id, s, 0, 0, 0, 0, s)) for r, s in best_first])

    monkeypatch.setattr(service, "recall", recall)
    async with client as http:
        body = {"vector": [1, 1, 0, 0], "track": False}
        history = await http.post(path, json={**body, "include_history": True}, headers=AUTH)
        current = await http.post(path, json=body, headers=AUTH)
    assert history.status_code == current.status_code == 200, history.text
    assert [r["memory_id"] for r in history.json()["results"]] == ["old", "new"]
    assert [r["memory_id"] for r in current.json()["results"]] == ["new", "old"]


async def test_a_history_recall_lists_a_fact_s_current_version_before_any_older_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``include_history`` scored superseded versions as current ones: "I live in Paris" matched
    "Where do I live?" better than "I live in Berlin now", and ``k=1`` returned only the outdated
    one. The places a fact's versions hold now go to them newest first.
    """
    service, client = service_and_client(Produced())
    paris = make_row(
        "acme", "paris", (1.0, 0.0, 0.0, 0.0), created_at_us=1_000_000,
        valid_to_us=3_000_000, superseded_by="berlin",
    )  # fmt: skip
    rome = make_row(
        "acme", "rome", (0.9, 0.1, 0.0, 0.0), created_at_us=3_000_000,
        valid_to_us=5_000_000, superseded_by="berlin",
    )  # fmt: skip
    berlin = make_row("acme", "berlin", (0.6, 0.8, 0.0, 0.0), created_at_us=5_000_000)
    other = make_row("acme", "other", (0.7, 0.0, 0.7, 0.0), created_at_us=2_000_000)

    def candidates(tenant_id: str, vector: object, query: RecallQuery) -> list[Candidate]:
        rows = (paris, rome, other, berlin)  # cosines .99, .99, .70, .60 to the query
        cosine = [float(np.dot(r.vector, np.asarray(vector))) for r in rows]
        return [Candidate(r, c, None) for r, c in zip(rows, cosine, strict=True)]

    monkeypatch.setattr(service, "_candidates", candidates)
    await service.start()
    try:
        async with client as http:
            ids = []
            for k in (1, 2, 3, 4):
                body = {"vector": [1, 0, 0, 0], "k": k, "include_history": True, "track": False}
                answer = await http.post("/v1/recall", json=body, headers=AUTH)
                assert answer.status_code == 200, answer.text
                ids.append([r["memory_id"] for r in answer.json()["results"]])
    finally:
        await service.stop()
    assert ids == [  # the top k (a fact's places to its versions, newest first) by time
        ["berlin"],
        ["paris", "berlin"],
        ["paris", "other", "berlin"],
        ["paris", "other", "rome", "berlin"],
    ]


async def test_archive_search_under_zeromemory_finds_what_the_sweep_archived(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The sweep archives below an effective importance of 0.05, zeromemory's soft-delete line:
    archive search under that preset returned none of what it archived.
    """
    produced = Produced()
    service, client = service_and_client(produced)
    swept = make_row("acme", "old", (1.0, 0.0, 0.0, 0.0), state="archived", importance=0.04)

    def candidates(tenant_id: str, vector: object, query: RecallQuery) -> list[Candidate]:
        return [Candidate(swept, 1.0, None)]

    monkeypatch.setattr(service, "_candidates", candidates)
    body = {"vector": [1, 0, 0, 0], "preset": "zeromemory"}
    await service.start()
    try:
        async with client as http:
            archive = await http.post("/v1/archive/search", json=body, headers=AUTH)
            recall = await http.post("/v1/recall", json={**body, "track": False}, headers=AUTH)
    finally:
        await service.stop()
    assert [r["memory_id"] for r in archive.json()["results"]] == ["old"]
    assert recall.json()["results"] == []  # recall keeps the preset's soft delete


async def test_a_powermem_recall_on_a_zeromemory_tenant_vetoes_what_is_hours_stale(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """SPEC section 6: a named preset reproduces its source per request, its decay rates included.
    The tenant decays as zeromemory (a working memory's τ is 48 h); PowerMem's is 1.2 h, so the
    strong match last used 12 hours ago falls below the fresh weaker one.
    """
    service, client = service_and_client(Produced())
    now = to_us(datetime.now(UTC))

    def used(memory_id: str, head: tuple[float, float], hours_ago: float) -> Candidate:
        last = now - int(hours_ago * 3.6e9)
        row = make_row(
            "acme",
            memory_id,
            (*head, 0.0, 0.0),
            tier="working",
            tau_hours=48.0,
            created_at_us=last,
            last_access_us=last,
            access_count=1,
        )
        return Candidate(row, head[0], None)

    def candidates(tenant_id: str, vector: object, query: RecallQuery) -> list[Candidate]:
        return [used("stale", (1.0, 0.0), 12), used("fresh", (0.5, 0.75**0.5), 0)]

    monkeypatch.setattr(service, "_candidates", candidates)
    body = {"vector": [1, 0, 0, 0], "track": False}
    await service.start()
    try:
        async with client as http:
            powermem = await http.post(
                "/v1/recall", json={**body, "preset": "powermem"}, headers=AUTH
            )
            default = await http.post("/v1/recall", json=body, headers=AUTH)
    finally:
        await service.stop()
    assert powermem.status_code == default.status_code == 200, powermem.text
    assert [r["memory_id"] for r in powermem.json()["results"]] == ["fresh", "stale"]
    assert [r["memory_id"] for r in default.json()["results"]] == ["stale", "fresh"]


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"preset": "zeph", "weights": {"recency": 0.5}}, "weights"),
        ({"preset": "zeph", "mmr_lambda": 0.2}, "mmr_lambda"),
        ({"preset": "powermem", "weights": {"similarity": 1.0}}, "weights"),
        ({"filters": {"user_id": "é" * 200}}, "filters.user_id"),  # 400 bytes
        ({"filters": {"run_id": "x" * 300}}, "filters.run_id"),
        ({"filters": {"user_id": "bob\x00"}}, "filters.user_id"),
        ({"at": 1772366400}, "at"),  # a number: read as Unix seconds
        ({"at": "1772366400"}, "at"),
        ({"filters": {"created_from": "1772366400"}}, "filters.created_from"),
        ({"at": "1772366400.5"}, "at"),  # read as seconds, or as milliseconds when large
        ({"filters": {"created_to": "1.7e12"}}, "filters.created_to"),
        (  # created_to is exclusive: an empty range was a 200 with no results
            {
                "filters": {
                    "created_from": "2026-03-01T00:00:00Z",
                    "created_to": "2026-03-01T00:00:00Z",
                }
            },
            "filters.created_to",
        ),
        (
            {
                "filters": {
                    "created_from": "2026-03-02T00:00:00Z",
                    "created_to": "2026-03-01T00:00:00Z",
                }
            },
            "filters.created_to",
        ),
    ],
)
async def test_a_recall_parameter_the_answer_would_ignore_or_a_write_refuses_is_a_422(
    extra: dict[str, object], field: str
) -> None:
    produced = Produced()
    service, client = service_and_client(produced)
    await service.start()
    try:
        async with client as http:
            body = {"vector": [1, 0, 0, 0], "track": False, **extra}
            reply = await http.post("/v1/recall", json=body, headers=AUTH)
            listed = await http.get("/v1/memories", params={"user_id": "é" * 200}, headers=AUTH)
            access = await http.post(
                "/v1/access", json={"memory_ids": ["m0"], "at": 1772366400}, headers=AUTH
            )
    finally:
        await service.stop()
    assert (reply.status_code, reply.json()["field"]) == (422, field), reply.text
    assert "Weights(" not in reply.json()["detail"]  # the value as the body gave it
    assert "datetime(" not in reply.json()["detail"]
    assert (listed.status_code, listed.json()["field"]) == (422, "user_id"), listed.text
    assert (access.status_code, access.json()["field"]) == (422, "at"), access.text
    assert not produced.values


async def test_archive_search_refuses_track_it_would_ignore_and_says_so_in_its_description(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``"track": true`` on the archive route was answered 200 and recorded nothing, and no
    description said the route never tracks: a caller believed its archive reads were counted.
    """
    produced = Produced()
    service, client = service_and_client(produced)
    swept = make_row("acme", "old", (1.0, 0.0, 0.0, 0.0), state="archived")

    def candidates(tenant_id: str, vector: object, query: RecallQuery) -> list[Candidate]:
        return [Candidate(swept, 1.0, None)]

    monkeypatch.setattr(service, "_candidates", candidates)
    body = {"vector": [1, 0, 0, 0]}
    await service.start()
    try:
        async with client as http:
            tracked = await http.post(
                "/v1/archive/search", json={**body, "track": True}, headers=AUTH
            )
            replies = [
                await http.post("/v1/archive/search", json=b, headers=AUTH)
                for b in (body, {**body, "track": False})
            ]
            doc = (await http.get("/openapi.json")).json()
    finally:
        await service.stop()
    assert (tracked.status_code, tracked.json()["field"]) == (422, "track"), tracked.text
    for reply in replies:
        assert reply.status_code == 200, reply.text
        assert [r["memory_id"] for r in reply.json()["results"]] == ["old"]
        assert reply.json()["token"] is None
    assert produced.values == []
    assert "Never tracked" in doc["paths"]["/v1/archive/search"]["post"]["description"]
    assert "track" in doc["paths"]["/v1/recall"]["post"]["description"]
