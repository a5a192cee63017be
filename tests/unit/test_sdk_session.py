"""The SDK's read-your-writes session, against a fake transport (the real server: test_end_to_end)."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from mnemostream import AsyncClient, Client, MnemostreamError


class Recorder:
    """Answers like the API and records what each request carried as ``after``."""

    def __init__(self) -> None:
        self.after: list[list[str]] = []
        self.tokens = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/memories":
            self.tokens += 1
            return httpx.Response(200, json={"ids": ["m1"], "token": f"v1.t{self.tokens}"})
        if request.url.path == "/v1/access":
            self.tokens += 1
            return httpx.Response(200, json={"accepted": 1, "token": f"v1.t{self.tokens}"})
        if request.url.path == "/v1/recall":
            self.after.append(json.loads(request.content).get("after") or [])
            return httpx.Response(200, json={"results": [], "token": "v1.recall"})
        self.after.append(request.url.params.get_list("after"))
        return httpx.Response(404, json={"detail": "no such memory"})


def test_reads_wait_for_this_clients_writes_once() -> None:
    seen = Recorder()
    with Client("http://x", "k" * 16, transport=httpx.MockTransport(seen)) as client:
        client.remember("a")
        client.access(["m1"])
        client.recall("q")
        client.recall("q")
        client.remember("b")
        client.get("m1")
    assert seen.after == [["v1.t1", "v1.t2"], [], ["v1.t3"]]


def test_a_recalls_token_is_not_sent_with_the_next_read() -> None:
    """Back-to-back recalls would each wait for the worker's access batch window."""
    seen = Recorder()
    with Client("http://x", "k" * 16, transport=httpx.MockTransport(seen)) as client:
        client.remember("a")
        client.recall("q")
        client.get("m1")
        client.recall("q")
    assert seen.after == [["v1.t1"], [], []]


def test_the_async_client_shares_the_session_and_it_can_be_turned_off() -> None:
    seen = Recorder()

    async def run() -> None:
        transport = httpx.MockTransport(seen)
        async with AsyncClient("http://x", "k" * 16, transport=transport) as client:
            await client.remember("a")
            await client.recall("q")

    asyncio.run(run())
    off = Recorder()
    with Client(
        "http://x", "k" * 16, transport=httpx.MockTransport(off), read_your_writes=False
    ) as client:
        client.remember("a")
        client.recall("q")
    assert (seen.after, off.after) == ([["v1.t1"]], [[]])


def test_forget_sends_purge_with_the_sessions_tokens() -> None:
    seen: list[httpx.URL] = []

    def answer(request: httpx.Request) -> httpx.Response:
        if request.method == "DELETE":
            seen.append(request.url)
            return httpx.Response(200, json={"memory_id": "m1", "token": "v1.t9"})
        return httpx.Response(200, json={"ids": ["m1"], "token": "v1.t1"})

    with Client("http://x", "k" * 16, transport=httpx.MockTransport(answer)) as client:
        client.remember("a")
        client.forget("m1", purge=True)
        client.forget("m1")
    assert [(u.path, dict(u.params.multi_items())) for u in seen] == [
        ("/v1/memories/m1", {"purge": "true", "after": "v1.t1"}),
        ("/v1/memories/m1", {"purge": "false", "after": "v1.t9"}),
    ]


def test_erasure_calls_sync_and_async() -> None:
    seen: list[httpx.URL] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.url)
        if request.url.path.startswith("/v1/users/"):
            return httpx.Response(200, json={"memory_ids": ["m1", "m2"], "token": "v1.t5"})
        return httpx.Response(200, json={"memory_id": "m1", "keys_erased": 2, "token": "v1.t4"})

    with Client("http://x", "k" * 16, transport=httpx.MockTransport(answer)) as client:
        assert client.forget("m1", erase=True) == 2  # 0 would say the words stay in the log
        assert client.erase_user("ann/bob é") == ["m1", "m2"]

    async def run() -> list[str]:
        transport = httpx.MockTransport(answer)
        async with AsyncClient("http://x", "k" * 16, transport=transport) as client:
            assert await client.forget("m1", erase=True) == 2
            return await client.erase_user("ann")

    assert asyncio.run(run()) == ["m1", "m2"]
    assert [(u.raw_path.decode(), dict(u.params.multi_items())) for u in seen] == [
        ("/v1/memories/m1?purge=false&erase=true", {"purge": "false", "erase": "true"}),
        ("/v1/users/ann%2Fbob%20%C3%A9?after=v1.t4", {"after": "v1.t4"}),
        ("/v1/memories/m1?purge=false&erase=true", {"purge": "false", "erase": "true"}),
        ("/v1/users/ann?after=v1.t4", {"after": "v1.t4"}),
    ]


def test_tokens_the_server_refuses_are_dropped_so_later_reads_are_not_refused_too() -> None:
    """Tokens kept across a reset of the topics are never applied: the server refuses them (422
    naming ``after``), and a session that kept them had every later read refused as well.
    """
    seen: list[list[str]] = []

    def server(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/memories":
            return httpx.Response(200, json={"ids": ["m1"], "token": "v1.stale"})
        after = json.loads(request.content).get("after") or []
        seen.append(after)
        if "v1.stale" in after:
            body = {"detail": "after='v1.stale': not a token returned by this service"}
            return httpx.Response(422, json={**body, "field": "after"})
        return httpx.Response(200, json={"results": [], "token": "v1.recall"})

    async def run() -> None:
        async with AsyncClient("http://x", "k" * 16, transport=httpx.MockTransport(server)) as c:
            await c.remember("a")
            with pytest.raises(MnemostreamError) as refused:
                await c.recall("q")
            assert (refused.value.status, refused.value.field) == (422, "after")
            assert await c.recall("q") == []

    with Client("http://x", "k" * 16, transport=httpx.MockTransport(server)) as client:
        client.remember("a")
        with pytest.raises(MnemostreamError):
            client.recall("q")
        assert client.recall("q") == []
    asyncio.run(run())
    assert seen == [["v1.stale"], [], ["v1.stale"], []]


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_callers_own_bad_token_drops_none_of_the_sessions(kind: str) -> None:
    """The server names the bad one of several (``after[1]``): the session dropped its own token
    too, so its next read no longer waited for its write.
    """
    seen: list[list[str]] = []

    def server(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/memories":
            return httpx.Response(200, json={"ids": ["m1"], "token": "v1.mine"})
        after = json.loads(request.content).get("after") or []
        seen.append(after)
        if "typo" in after:
            field = f"after[{after.index('typo')}]"
            return httpx.Response(422, json={"detail": "not a token", "field": field})
        return httpx.Response(200, json={"results": [], "token": "v1.recall"})

    async def run() -> None:
        async with AsyncClient("http://x", "k" * 16, transport=httpx.MockTransport(server)) as c:
            await c.remember("a")
            with pytest.raises(MnemostreamError):
                await c.recall("q", after="typo")
            await c.recall("q")

    if kind == "async":
        asyncio.run(run())
    else:
        with Client("http://x", "k" * 16, transport=httpx.MockTransport(server)) as client:
            client.remember("a")
            with pytest.raises(MnemostreamError):
                client.recall("q", after="typo")
            client.recall("q")
    assert seen == [["v1.mine", "typo"], ["v1.mine"]]


def test_a_get_is_tracked_unless_asked_and_its_token_is_not_waited_for() -> None:
    """``get`` is an access (SPEC section 5); its token is, like a recall's, not one the next
    read waits for (each read would wait for the worker's access batch window)."""
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        memory = {"memory_id": "m1", "content": "c", "memory_type": "working", "state": "active"}
        counts = {"importance": 0.5, "access_count": 0, "recall_count": 0}
        return httpx.Response(200, json={**memory, **counts, "token": "v1.get"})

    transport = httpx.MockTransport(answer)
    with Client("http://x", "k" * 16, transport=transport) as client:
        client.get("m1")
        client.get("m1", track=False)
        client.get("m1")
        with pytest.raises(TypeError, match="track"):
            client.get("m1", track="false")  # type: ignore[arg-type]
    assert [r.url.params.get("track") for r in seen] == [None, "false", None]
    assert [r.url.params.get_list("after") for r in seen] == [[], [], []]

    async def through_async() -> str | None:
        async with AsyncClient("http://x", "k" * 16, transport=transport) as aclient:
            await aclient.get("m1", track=False)
        track: str | None = seen[-1].url.params.get("track")
        return track

    assert asyncio.run(through_async()) == "false"


def test_archive_search_sends_a_recall_body_to_the_archive_route_with_the_session_s_tokens() -> (
    None
):
    """The SDK had no call for ``POST /v1/archive/search``: a user of the SDK could not search the
    archive. Both clients send the recall's body there, wait for their own writes as a recall
    does, never send ``track`` (refused before any request: the route never tracks).
    """
    sent: list[tuple[str, dict[str, object]]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/memories":
            return httpx.Response(200, json={"ids": ["m1"], "token": "v1.t1"})
        sent.append((request.url.path, json.loads(request.content)))
        found: dict[str, object] = {"memory_id": "old", "content": "x", "state": "archived"}
        found |= {"memory_type": "fact"}
        found |= {"importance": 0.5, "access_count": 0, "recall_count": 0, "scores": {}}
        return httpx.Response(200, json={"results": [found], "token": None})

    with Client("http://x", "k" * 16, transport=httpx.MockTransport(handler)) as client:
        client.remember("a")
        (found,) = client.archive_search("Carol", k=5, filters={"tags_any": ["job"]})
        with pytest.raises(TypeError, match="track"):
            client.archive_search("Carol", track=True)

    async def run() -> list[str]:
        transport = httpx.MockTransport(handler)
        async with AsyncClient("http://x", "k" * 16, transport=transport) as client:
            return [m.memory_id for m in await client.archive_search(vector=[1.0, 0.0], k=2)]

    assert (found.memory_id, found.state) == ("old", "archived")
    assert asyncio.run(run()) == ["old"]
    assert sent == [
        (
            "/v1/archive/search",
            {"query": "Carol", "k": 5, "filters": {"tags_any": ["job"]}, "after": ["v1.t1"]},
        ),
        ("/v1/archive/search", {"vector": [1.0, 0.0], "k": 2}),
    ]
