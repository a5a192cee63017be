"""What SDK users pass that the SDK sent wrong or refused badly (a review drove both clients):
a key read from a file, one id given as a str, sets, a 404 of no route, errors that cross a
process boundary."""

from __future__ import annotations

import asyncio
import copy
import json
import pickle
from collections.abc import Callable

import httpx
import pytest

from mnemostream import AsyncClient, Client, MnemostreamError, Overloaded, Unreachable

Handler = Callable[[httpx.Request], httpx.Response]
KEY = "mk-" + "k" * 20


def client(handler: Handler, key: str = KEY) -> Client:
    return Client("http://x", key, transport=httpx.MockTransport(handler))


def test_a_key_read_with_its_newline_is_sent_without_it() -> None:
    """httpx refused the header, and the SDK called that "no reply" (retriable) for ever."""
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["authorization"])
        return httpx.Response(200, json={"ids": ["m1"], "token": "v1.e30"})

    with client(handler, f"  {KEY}\n") as sdk:
        sdk.remember("x")
    assert seen == [f"Bearer {KEY}"]
    with pytest.raises(ValueError, match="api_key"):
        Client("http://x", "mk-a\x01b")
    with pytest.raises(ValueError, match="api_key"):
        AsyncClient("http://x", " \n")
    with pytest.raises(TypeError, match="api_key"):
        Client("http://x", None)  # type: ignore[arg-type]


def test_get_answers_none_only_for_a_memory_the_service_does_not_hold() -> None:
    """Any 404 was None: a wrong base URL (no such route) read as "no such memory" for every id."""

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.startswith("/v1/memories/"):
            return httpx.Response(404, json={"detail": "no such memory"})
        return httpx.Response(404, json={"detail": "Not Found"})

    with client(handler) as sdk:
        assert sdk.get("m1") is None
    wrong = Client("http://x/wrong-prefix", KEY, transport=httpx.MockTransport(handler))
    with wrong as sdk, pytest.raises(MnemostreamError) as no_route:
        sdk.get("m1")
    assert no_route.value.status == 404


def test_one_id_given_as_a_str_is_refused_not_split_into_characters() -> None:
    """``access("m1")`` counted accesses of memories ``m`` and ``1``."""
    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, json={"accepted": 1, "token": "v1.e30"})

    with client(handler) as sdk:
        with pytest.raises(TypeError, match="memory_ids"):
            sdk.access("m1")
        with pytest.raises(TypeError, match="memory_ids"):
            sdk.get_many("m1")

    async def run() -> None:
        async with AsyncClient("http://x", KEY, transport=httpx.MockTransport(handler)) as sdk:
            with pytest.raises(TypeError, match="memory_ids"):
                await sdk.access("m1")

    asyncio.run(run())
    assert sent == []


def test_sets_are_sent_as_lists() -> None:
    """A set of tags was listed as the tag ``"{'work'}"`` (nothing found, no error), and a body
    holding one raised a bare TypeError."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.method == "GET":
            return httpx.Response(200, json={"memories": [], "cursor": None})
        return httpx.Response(200, json={"ids": ["m1"], "token": "v1.e30"})

    with client(handler) as sdk:
        assert list(sdk.list_memories(tag={"work", "home"})) == []
        sdk.remember("x", tags={"b", "a"})
    listed, written = seen
    assert listed.url.params.get_list("tag") == ["home", "work"]
    assert json.loads(written.content)["memories"][0]["tags"] == ["a", "b"]


@pytest.mark.parametrize(
    "error",
    [
        MnemostreamError(422, "bad", None, "memories[0].content"),
        Overloaded("busy", 2.0),
        Unreachable(httpx.ConnectError("refused")),
    ],
    ids=["422", "429", "no-reply"],
)
def test_errors_survive_pickling_and_copying(error: MnemostreamError) -> None:
    """An SDK error raised in a process pool's worker broke the pool (unpickling called
    ``__init__`` with the message alone)."""
    for again in (pickle.loads(pickle.dumps(error)), copy.copy(error)):
        assert type(again) is type(error)
        assert str(again) == str(error)
        assert (again.status, again.detail, again.retriable) == (
            error.status,
            error.detail,
            error.retriable,
        )
        assert (again.retry_after_s, again.field) == (error.retry_after_s, error.field)
