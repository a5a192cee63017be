"""The user scope over HTTP, next to agent_id and session_id/run_id: on writes (and the ids
derived from them), recall and list filters, and every memory returned; and in the SDK."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import httpx
import orjson
import pytest

from memcore.ids import derive_memory_id
from ranker.api import create_api
from ranker.applied import Token
from ranker.listing import Page
from ranker.service import Recall, RecallQuery, RecallService
from ranker.tokens import TokenSeal
from ranker.wire import memory_json
from storage import Filters, MilvusConfig, MilvusStore
from storage.embedding import Hashing
from storage.tenants import TenantRegistry
from tests.rows import make_row

KEY = "key-acme-0123456789"
AUTH = {"Authorization": f"Bearer {KEY}"}
pytestmark = pytest.mark.anyio


class Produced:
    """The records the ranker produces, each acknowledged at once."""

    def __init__(self) -> None:
        self.values: list[dict[str, Any]] = []

    async def __call__(self, role: str, key: bytes, value: bytes) -> asyncio.Future[object]:
        self.values.append(orjson.loads(value))
        delivered: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        delivered.set_result(SimpleNamespace(partition=0, offset=len(self.values)))
        return delivered


SEAL = TokenSeal()
"""The apps' token seal: a test opens the tokens they answer with."""


def service_and_client(produced: Produced) -> tuple[RecallService, httpx.AsyncClient]:
    registry = TenantRegistry.of({"tenants": {"acme": {"api_keys": [KEY]}}})
    store = MilvusStore(MilvusConfig("unused.db", dim=4))  # never connected
    service = RecallService(store, Hashing(4), produced)
    api = create_api(service, registry, token_seal=SEAL)
    return service, httpx.AsyncClient(transport=httpx.ASGITransport(app=api), base_url="http://m")


async def test_a_write_carries_its_user_and_the_id_derives_from_it() -> None:
    produced = Produced()
    _, client = service_and_client(produced)
    memories = [
        {"content": "Likes tea", "user_id": "ann", "agent_id": "bot", "run_id": "r1"},
        {"content": "Likes tea", "user_id": "bob", "agent_id": "bot", "run_id": "r1"},
        {"content": "Likes tea", "agent_id": "bot", "run_id": "r1"},
    ]
    async with client as http:
        reply = await http.post("/v1/memories", json={"memories": memories}, headers=AUTH)
        too_long = await http.post(
            "/v1/memories",
            json={"memories": [{"content": "x", "user_id": "é" * 129}]},
            headers=AUTH,
        )
    assert reply.status_code == 200, reply.text
    ann, bob, nobody = reply.json()["ids"]
    assert ann == derive_memory_id("acme", "Likes tea", "bot", "r1", "ann")
    assert len({ann, bob, nobody}) == 3
    assert nobody == derive_memory_id("acme", "Likes tea", "bot", "r1")  # as before users
    assert [v.get("user_id") for v in produced.values] == ["ann", "bob", None]
    assert [v["memory_id"] for v in produced.values] == [ann, bob, nobody]
    assert (too_long.status_code, too_long.json()["field"]) == (422, "memories[0].user_id")


async def test_recall_and_list_filter_by_user_and_return_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    service, client = service_and_client(Produced())
    row = make_row("acme", "m1", (1.0, 0.0, 0.0, 0.0), user_id="ann", agent_id="bot")
    asked: list[Filters] = []

    async def recall(tenant_id: str, query: RecallQuery) -> Recall:
        asked.append(query.filters)
        return Recall([])

    async def list_page(tenant_id: str, filters: Filters, *args: object) -> Page:
        asked.append(filters)
        return Page([row], None)

    monkeypatch.setattr(service, "recall", recall)
    monkeypatch.setattr(service, "list_page", list_page)
    async with client as http:
        filters = {"user_id": "ann", "agent_id": "bot", "run_id": "r1"}
        found = await http.post(
            "/v1/recall", json={"query": "tea", "filters": filters}, headers=AUTH
        )
        listed = await http.get(
            "/v1/memories", params={"user_id": "ann", "agent_id": "bot"}, headers=AUTH
        )
        unfiltered = await http.get("/v1/memories", headers=AUTH)
    assert found.status_code == listed.status_code == unfiltered.status_code == 200
    recall_filters, list_filters, no_filters = asked
    assert (recall_filters.user_id, recall_filters.agent_id) == ("ann", "bot")
    assert recall_filters.session_id == "r1"
    assert (list_filters.user_id, list_filters.agent_id, list_filters.session_id) == (
        "ann",
        "bot",
        None,
    )
    assert no_filters.user_id is None
    (memory,) = listed.json()["memories"]
    assert (memory["user_id"], memory["agent_id"], memory["run_id"]) == ("ann", "bot", "s1")


def test_every_memory_returned_names_its_user_or_null() -> None:
    assert memory_json(make_row("acme", "m1", (1.0,), user_id="ann"))["user_id"] == "ann"
    assert memory_json(make_row("acme", "m1", (1.0,)))["user_id"] is None


def test_the_sdk_sends_and_reads_the_user_scope() -> None:
    from mnemostream import Client

    sent: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        body = memory_json(make_row("acme", "m1", (1.0,), user_id="ann"))
        if request.url.path == "/v1/memories" and request.method == "POST":
            return httpx.Response(200, json={"ids": ["m1"], "token": "t"})
        if request.url.path == "/v1/recall":
            return httpx.Response(200, json={"results": [body]})
        return httpx.Response(200, json={"memories": [body], "cursor": None})

    with Client("http://m", KEY, transport=httpx.MockTransport(handle)) as client:
        client.remember("Likes tea", user_id="ann", agent_id="bot")
        (recalled,) = client.recall("tea", filters={"user_id": "ann"})
        (listed,) = client.list_memories(user_id="ann")
    written, recall, page = sent
    assert orjson.loads(written.content)["memories"][0]["user_id"] == "ann"
    assert orjson.loads(recall.content)["filters"] == {"user_id": "ann"}
    assert page.url.params["user_id"] == "ann"
    assert recalled.user_id == listed.user_id == "ann"


async def test_a_write_under_the_id_of_another_user_s_memory_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A caller-chosen id given to two users' memories (a per-user "profile card"): the second
    user's words replaced the first's and stood under the first user's scope, found by that
    user's recall and never by the writer's. A 409 names the field; nothing is produced.
    """
    produced = Produced()
    service, client = service_and_client(produced)
    rows = {
        "card": make_row("acme", "card", (1.0, 0.0, 0.0, 0.0), user_id="mia", session_id=""),
        "note": make_row("acme", "note", (1.0, 0.0, 0.0, 0.0), session_id=""),  # unscoped
        "old": make_row(
            "acme", "old", (1.0, 0.0, 0.0, 0.0), user_id="mia", state="deleted", session_id=""
        ),
        "s9": make_row("acme", "s9", (1.0, 0.0, 0.0, 0.0), agent_id="bot", session_id="s9"),
        "v1": make_row("acme", "v1", (1.0, 0.0, 0.0, 0.0), session_id="", superseded_by="m-v2"),
        "m-v2": make_row("acme", "m-v2", (1.0, 0.0, 0.0, 0.0), superseded_by="m-v3"),
        "m-v3": make_row("acme", "m-v3", (1.0, 0.0, 0.0, 0.0)),
        "d1": make_row("acme", "d1", (1.0, 0.0, 0.0, 0.0), session_id="", superseded_by="m-d2"),
        "m-d2": make_row("acme", "m-d2", (1.0, 0.0, 0.0, 0.0), state="deleted"),
    }
    asked: list[list[str]] = []
    waited: list[object] = []

    async def get_many(
        tenant_id: str, memory_ids: list[str], after: object = None, **_: object
    ) -> dict[str, Any]:
        asked.append(list(memory_ids))
        waited.append(after)
        return {m: rows[m] for m in memory_ids if m in rows}

    monkeypatch.setattr(service, "get_many", get_many)

    async def write(*memories: dict[str, str]) -> httpx.Response:
        return await http.post("/v1/memories", json={"memories": list(memories)}, headers=AUTH)

    async with client as http:
        derived = await write({"content": "Mia likes tea", "user_id": "mia"})
        assert derived.status_code == 200, derived.text
        assert asked == []  # a derived id is of its own scope: nothing to read
        same = {"content": "Mia lives in Porto", "memory_id": "card", "user_id": "mia"}
        other = {"content": "Ned lives at 9 Elm St", "memory_id": "card", "user_id": "ned"}
        refused = await write({**same, "memory_id": "card9"}, {**other, "memory_id": "card9"})
        assert refused.status_code == 409, refused.text  # a new id, two users in one body
        assert refused.json()["detail"].startswith("memories[1].user_id: memories[0] gives")
        refused = await write(other)
        assert refused.status_code == 409, refused.text
        assert refused.json()["detail"].startswith(
            "memories[0].user_id: memory card is under user_id 'mia'"
        )
        refused = await write(other, same)  # the one the stored memory refuses is named
        assert refused.json()["detail"].startswith(
            "memories[0].user_id: memory card is under user_id 'mia'"
        )
        tea = derive_memory_id("acme", "Likes tea", None, None, "ann")  # a derived id, given
        refused = await write(
            {"content": "Likes tea", "user_id": "ann"},
            {"content": "Bob's", "memory_id": tea, "user_id": "bob"},
        )
        assert refused.status_code == 409, refused.text
        assert refused.json()["detail"].startswith(
            f"memories[1].user_id: memories[0] gives memory {tea}"
        )
        assert len(produced.values) == 1  # the derived write only: none of this request's
        unscoped = await write({"content": "Someone", "memory_id": "card"})
        assert unscoped.status_code == 409, unscoped.text
        into_unscoped = await write({"content": "Ned's", "memory_id": "note", "user_id": "ned"})
        assert into_unscoped.status_code == 409, into_unscoped.text
        assert "memory note has no user_id" in into_unscoped.json()["detail"]
        assert into_unscoped.json()["field"] == "memories[0].user_id"
        # an agent's or a session's memory too: its words stood under the first scope (a
        # session's end did not find them under the session they were written in)
        for moved, field, whose in (
            ({"agent_id": "bot", "session_id": "s10"}, "session_id", "is under session_id 's9'"),
            ({"agent_id": "bot"}, "session_id", "is under session_id 's9'"),  # none counts as one
            ({"agent_id": "bot2", "session_id": "s9"}, "agent_id", "is under agent_id 'bot'"),
            ({"session_id": "s9"}, "agent_id", "is under agent_id 'bot'"),
        ):
            refused = await write({"content": "Said again", "memory_id": "s9", **moved})
            assert refused.status_code == 409, refused.text
            detail = refused.json()["detail"]
            assert detail.startswith(f"memories[0].{field}: memory s9 {whose}"), detail
            assert refused.json()["field"] == f"memories[0].{field}"
        # deleting the id the 409 names leaves its updates' last version current: named
        updated = await write({"content": "Card", "memory_id": "v1", "session_id": "s2"})
        assert "superseded, and m-v3 is the current version" in updated.json()["detail"]
        ended = await write({"content": "Card", "memory_id": "d1", "session_id": "s2"})
        assert ended.status_code == 409, ended.text
        assert "current version" not in ended.json()["detail"]  # its chain ends deleted
        by_run = await write(
            {"content": "Said again", "memory_id": "s9", "agent_id": "bot", "run_id": "r"}
        )
        assert by_run.json()["detail"].startswith("memories[0].run_id: memory s9 is under")
        assert by_run.json()["field"] == "memories[0].run_id"
        # two writes of one body giving one new id two scopes: the worker would keep the first
        clash = await write(
            {"content": "Ann's card", "memory_id": "new-card", "user_id": "ann"},
            {"content": "Bob's card", "memory_id": "new-card", "user_id": "bob"},
        )
        assert clash.status_code == 409, clash.text
        assert clash.json()["detail"].startswith(
            "memories[1].user_id: memories[0] gives memory new-card another user_id"
        )
        unscoped_note = {"content": "A note", "memory_id": "note", "session_id": "s1"}
        assert (
            (await write(unscoped_note))
            .json()["detail"]
            .startswith("memories[0].session_id: memory note has no session_id")
        )
        for fine in (
            same,
            {"content": "Said again", "memory_id": "s9", "agent_id": "bot", "run_id": "s9"},
            {"content": "A note", "memory_id": "note"},
            {"content": "Ned anew", "memory_id": "old", "user_id": "ned"},  # deleted: free
            {"content": "Ned's own", "memory_id": "fresh", "user_id": "ned"},
        ):
            accepted = await write(fine)
            assert accepted.status_code == 200, accepted.text
        # the check waits for the tokens given (a deletion's: until applied, the id is taken)
        deletion = Token({"memory-writes": {0: 9}})
        body = {"memories": [same], "after": [await SEAL.seal(deletion, "acme")]}
        after = await http.post("/v1/memories", json=body, headers=AUTH)
        assert after.status_code == 200, after.text
    assert len(produced.values) == 7
    assert waited[-1] == deletion
    assert waited[:-1] == [None] * (len(waited) - 1)


@pytest.mark.parametrize(
    ("method", "path", "body", "field"),
    [
        ("POST", "/v1/memories", {"memories": [{"content": "x", "user_id": ""}]}, "user_id"),
        ("POST", "/v1/memories", {"memories": [{"content": "x", "run_id": ""}]}, "run_id"),
        ("POST", "/v1/memories", {"memories": [{"content": "x", "agent_id": ""}]}, "agent_id"),
    ],
)
async def test_an_empty_scope_is_refused_naming_its_field(
    method: str, path: str, body: dict[str, Any] | None, field: str
) -> None:
    """``user_id: ""`` was taken as no user: the write got an unscoped memory's id and stood among
    the unscoped, where a user's erasure (which refuses an empty user) never finds it.
    """
    produced = Produced()
    _, client = service_and_client(produced)
    async with client as http:
        reply = await http.request(method, path, json=body, headers=AUTH)
    assert reply.status_code == 422, reply.text
    assert reply.json()["field"].endswith(field)
    assert "leave it out for none" in reply.json()["detail"]
    assert produced.values == []
