"""A recall answers with the token of the access events it recorded (the real stack:
test_end_to_end; the SDK's session does not wait for it: test_sdk_session)."""

from __future__ import annotations

import pytest

from ranker.service import Candidate, RecallQuery
from tests.rows import make_row
from tests.unit.test_user_scope import AUTH, SEAL, Produced, service_and_client

pytestmark = pytest.mark.anyio
ROWS = [make_row("acme", f"m{i}", (1.0, i / 10, 0.0, 0.0)) for i in range(3)]


async def test_a_tracked_recall_answers_with_the_token_of_its_access_events(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    produced = Produced()
    service, client = service_and_client(produced)

    def candidates(tenant_id: str, vector: object, query: RecallQuery) -> list[Candidate]:
        return [Candidate(r, 1.0 - i / 10, None) for i, r in enumerate(ROWS)]

    monkeypatch.setattr(service, "_candidates", candidates)
    await service.start()
    try:
        async with client as http:
            body = {"vector": [1, 0, 0, 0], "k": 2}
            tracked = await http.post("/v1/recall", json=body, headers=AUTH)
            untracked = await http.post("/v1/recall", json={**body, "track": False}, headers=AUTH)
            archived = await http.post("/v1/archive/search", json=body, headers=AUTH)
    finally:
        await service.stop()
    assert tracked.status_code == untracked.status_code == archived.status_code == 200
    assert [m["memory_id"] for m in tracked.json()["results"]] == ["m0", "m1"]
    assert [(v["memory_id"], v["kind"]) for v in produced.values] == [
        ("m0", "recall"),
        ("m1", "recall"),
    ]  # only the tracked recall recorded accesses: the offsets the fake broker gave are 1, 2
    opened = await SEAL.open(tracked.json()["token"], "acme")
    assert opened.offsets == {"access-events": {0: 2}}
    assert untracked.json()["token"] is archived.json()["token"] is None
    assert len(untracked.json()["results"]) == 2
