"""``POST /v1/sessions/end``: the session's active working memories get their promotion to
episodic now (SPEC sections 5 and 7), not after 4 h idle; only that session's, of this tenant,
that exist at the end's time. The worker's half (the reducer applying it) is in
``tests/unit/test_consolidation.py``; the whole path on a real broker and Milvus in
``tests/integration/test_end_to_end.py``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from memcore import Lifecycle, Tier
from ranker.applied import AppliedOffsets, Token
from ranker.view import StateView
from storage import Filters, MemoryRow, codec, from_us, to_us
from tests.rows import make_row
from tests.unit.helpers import created
from tests.unit.test_user_scope import AUTH, SEAL, Produced, service_and_client

pytestmark = pytest.mark.anyio


class SessionStore:
    """What the route asks of Milvus: the ids in a scope (``states`` honoured: a row may hold an
    older state than the view), then the rows by id, without their vectors.
    """

    def __init__(self, rows: Sequence[MemoryRow]) -> None:
        self.rows = {r.memory_id: r for r in rows}
        self.asked: list[tuple[str, Filters]] = []

    def every_id(self, tenant_id: str, filters: Filters) -> list[str]:
        self.asked.append((tenant_id, filters))
        return [
            r.memory_id
            for r in self.rows.values()
            if r.tenant_id == tenant_id
            and r.session_id == filters.session_id
            and filters.user_id in (None, r.user_id)
            and filters.agent_id in (None, r.agent_id)
            and (not filters.states or r.state in filters.states)
            and (
                filters.created_to_inclusive_us is None
                or r.created_at_us <= filters.created_to_inclusive_us
            )
        ]

    def get_slim(self, tenant_id: str, memory_ids: Sequence[str]) -> dict[str, MemoryRow]:
        return {
            m: dataclasses.replace(self.rows[m], vector=(), metadata={})
            for m in memory_ids
            if m in self.rows and self.rows[m].tenant_id == tenant_id
        }


NOW_US = to_us(datetime.now(UTC))
HEADS = Token({"memory-writes": {0: 41, 1: 7}})
"""Every write the topics hold when the end arrives (a stand-in's)."""


def row(memory_id: str, **kw: Any) -> MemoryRow:
    fields: dict[str, Any] = {"tier": "working", "created_at_us": NOW_US - 60_000_000} | kw
    fields.setdefault("last_access_us", fields["created_at_us"])
    return make_row("acme", memory_id, (1.0, 0.0, 0.0, 0.0), **fields)


async def end(
    rows: Sequence[MemoryRow], body: dict[str, Any], view: StateView | None = None
) -> tuple[Any, ...]:
    produced = Produced()
    service, client = service_and_client(produced)
    store = SessionStore(rows)
    service.store = store  # type: ignore[assignment]
    service.view = view
    waited: list[Token | str | None] = []

    async def wait(after: Token | None) -> None:
        if after is not None:  # get_many's own wait (for none) is no wait
            waited.append(after)

    async def heads(roles: Sequence[str]) -> Token:
        assert tuple(roles) == ("memory-writes",)
        return HEADS

    service.wait = wait  # type: ignore[method-assign]
    service._heads = heads  # type: ignore[method-assign]
    async with client as http:
        raw = json.dumps(body)  # a lone surrogate as its \u escape, as a client may send it
        headers = {**AUTH, "content-type": "application/json"}
        reply = await http.post("/v1/sessions/end", content=raw, headers=headers)
    return reply, produced.values, store.asked, waited


async def test_a_session_end_promotes_its_active_working_memories_only() -> None:
    ahead_us = NOW_US + 120_000_000  # said by a writer whose clock runs 2 min ahead
    rows = [
        row("w2"),
        row("w1", user_id="ann"),
        row("ahead", created_at_us=ahead_us),
        row("episodic", tier="episodic"),
        row("archived", state="archived"),
        row("deleted", state="deleted"),
        row("old-version", superseded_by="w1", valid_to_us=NOW_US - 1_000_000),
        row("other-session", session_id="s2"),
        dataclasses.replace(row("other-tenant"), tenant_id="beta", key="beta/other-tenant"),
    ]
    reply, produced, asked, waited = await end(rows, {"session_id": "s1"})
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert (body["session_id"], body["promoted"]) == ("s1", ["ahead", "w1", "w2"])
    assert [(v["memory_id"], v["decision"], v["to"]) for v in produced] == [
        ("ahead", "promote", "episodic"),
        ("w1", "promote", "episodic"),
        ("w2", "promote", "episodic"),
    ]
    assert {v["tenant_id"] for v in produced} == {"acme"}
    assert all("session 's1' ended" in v["reason"] for v in produced)
    assert datetime.fromisoformat(body["at"]) == from_us(ahead_us)  # its last turn, not before
    assert {v["at"] for v in produced} == {body["at"]}
    ((tenant, scope),) = asked
    assert (tenant, scope.session_id, scope.user_id, scope.agent_id) == ("acme", "s1", None, None)
    assert scope.states == ()  # the view judges the state, not a row that may be older
    assert scope.created_to_inclusive_us is None
    assert waited == [HEADS]  # no after: every write held now, first
    assert (await SEAL.open(body["token"], "acme")).offsets  # it names what was produced


async def test_a_session_end_narrowed_to_a_user_and_given_its_time_and_tokens() -> None:
    at = from_us(NOW_US) - timedelta(seconds=30)
    rows = [
        row("ann's", user_id="ann"),
        row("ann's later", user_id="ann", created_at_us=to_us(at) + 1),  # a session resumed
        row("ann's used", user_id="ann", last_access_us=to_us(at) + 1),
        row("bob's", user_id="bob"),
        row("none's"),
    ]
    prior = Produced()
    _, writer = service_and_client(prior)
    async with writer as http:
        written = await http.post(
            "/v1/memories", json={"memories": [{"content": "x"}]}, headers=AUTH
        )
    assert written.status_code == 200, written.text
    token = written.json()["token"]
    reply, produced, asked, waited = await end(
        rows, {"run_id": "s1", "user_id": "ann", "at": at.isoformat(), "after": token}
    )
    assert reply.status_code == 200, reply.text
    assert reply.json()["promoted"] == ["ann's", "ann's used"]
    used_at = from_us(to_us(at) + 1)  # used after the end: dated then, its reviews after it
    assert [datetime.fromisoformat(v["at"]) for v in produced] == [at, used_at]
    assert asked[0][1].user_id == "ann"
    assert asked[0][1].created_to_inclusive_us == to_us(at)
    # one wait: for the tokens given (a client's accesses too) and every write held now (the
    # tokens alone missed another client's writes in the session), in one read-your-writes wait
    (one,) = waited
    assert isinstance(one, Token)
    given = await SEAL.open(token, "acme")
    for part in (given, HEADS):
        for role, offsets in part.offsets.items():
            assert all(one.offsets[role][p] >= o for p, o in offsets.items())


@pytest.mark.parametrize("offsets", [{0: 500}, {3: 5}, {1: 50}])
async def test_a_session_end_refuses_a_token_past_the_topics_naming_after_as_sent(
    monkeypatch: pytest.MonkeyPatch, offsets: dict[int, int]
) -> None:
    """Its wait joins the token given and the topics' ends: the refusal of a token the topics
    never held (made anew since) named ``after[0]``, a field the client had not sent, where a
    recall names ``after``.
    """
    monkeypatch.setattr("ranker.applied.ISSUED_CHECK_S", 0.05)
    service, client = service_and_client(Produced())
    service.store = SessionStore([row("w1")])  # type: ignore[assignment]

    async def committed() -> dict[tuple[str, int], int]:
        return {("memory-writes", 0): 60, ("memory-writes", 1): 0}

    async def end_offsets(role: str) -> dict[int, int]:
        return {0: 100, 1: 50}  # what the topics hold: offsets 0-99 and 0-49

    service.applied = AppliedOffsets(committed, end_offsets, poll_s=0.01, timeout_s=5)
    text = await SEAL.seal(Token({"memory-writes": offsets}), "acme")
    async with client as http:
        ended = await http.post(
            "/v1/sessions/end", json={"session_id": "s1", "after": text}, headers=AUTH
        )
        recalled = await http.post(
            "/v1/recall", json={"query": "x", "after": text, "track": False}, headers=AUTH
        )
    assert (ended.status_code, ended.json()["field"]) == (422, "after"), ended.text
    assert (recalled.status_code, recalled.json()["field"]) == (422, "after"), recalled.text


def live(row: MemoryRow, **changes: Any) -> bytes:
    """The state view's record of ``row``'s memory with ``changes`` (newer than its row)."""
    made = created(row.importance, Tier(row.tier), at=from_us(row.created_at_us), memory_id="x")
    return codec.encode(dataclasses.replace(made, memory_id=row.memory_id, **changes))


async def test_a_session_end_judges_each_memory_by_the_state_view_not_its_older_row() -> None:
    """The worker writes its table (the view's source) before a row, and an access changes no
    row at all: Milvus may say archived for a memory an access brought back, working for one
    an access promoted, and still hold a purged one awaiting its delete.
    """
    restored = row("restored", state="archived")
    promoted = row("promoted-by-access")
    purged = row("purged")
    used = row("used-after-the-end")
    plain = row("plain")
    view = StateView("unused:9092", "app-memories-changelog")
    view.apply(b"acme/restored", live(restored, state=Lifecycle.ACTIVE))
    view.apply(b"acme/promoted-by-access", live(promoted, tier=Tier.EPISODIC))
    view.apply(b"acme/purged", live(purged, state=Lifecycle.DELETED, purged=True))
    after_us = NOW_US + 60_000_000  # accessed after the end's time (now): still in use then
    view.apply(b"acme/used-after-the-end", live(used, last_access=from_us(after_us)))
    rows = [restored, promoted, purged, used, plain]
    at = from_us(NOW_US).isoformat()
    reply, produced, _, _ = await end(rows, {"session_id": "s1", "at": at}, view)
    assert reply.status_code == 200, reply.text
    assert reply.json()["promoted"] == ["plain", "restored", "used-after-the-end"]
    assert [(v["memory_id"], datetime.fromisoformat(v["at"])) for v in produced] == [
        ("plain", from_us(NOW_US)),
        ("restored", from_us(NOW_US)),
        ("used-after-the-end", from_us(after_us)),  # a recall still used it: dated then
    ]


async def test_a_session_end_with_nothing_working_promotes_nothing() -> None:
    reply, produced, _, _ = await end([row("e", tier="episodic")], {"session_id": "s1"})
    assert (reply.status_code, reply.json()["promoted"], produced) == (200, [], [])


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "session_id"),
        ({"session_id": ""}, "session_id"),
        ({"run_id": ""}, "run_id"),
        ({"session_id": "s1", "run_id": "s2"}, "run_id"),
        ({"session_id": 7}, "session_id"),
        ({"session_id": "a\x00b"}, "session_id"),
        ({"session_id": "s1", "user_id": "é" * 129}, "user_id"),
        ({"session_id": "s1", "agent_id": 3}, "agent_id"),
        ({"session_id": "s1", "at": "2999-01-01T00:00:00Z"}, "at"),
        ({"session_id": "s1", "at": 1700000000}, "at"),
        ({"session_id": "s1", "at": "2026-01-01T00:00:00"}, "at"),  # no timezone
        ({"session_id": "s1", "after": "v2.forged"}, "after"),
        ({"session_id": "s1", "until": "now"}, "until"),
        ({"session_id": "\ud800"}, "session_id"),  # UTF-8 cannot carry it to Milvus
        ({"session_id": "s1", "user_id": "a\udfffb"}, "user_id"),
        ({"session_id": "s1", "agent_id": "\udc00"}, "agent_id"),
    ],
)
async def test_a_bad_session_end_is_a_422_naming_its_field_and_promotes_nothing(
    body: dict[str, Any], field: str
) -> None:
    reply, produced, asked, _ = await end([row("w")], body)
    assert (reply.status_code, reply.json().get("field")) == (422, field), reply.text
    assert (produced, asked) == ([], [])
