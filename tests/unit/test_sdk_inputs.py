"""What SDK users pass that the SDK sent wrong or refused badly (a review drove both clients):
a key read from a file, one id given as a str, sets, a 404 of no route, errors that cross a
process boundary."""

from __future__ import annotations

import asyncio
import copy
import datetime
import json
import pickle
import re
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


def recorder() -> tuple[list[httpx.Request], Handler]:
    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        if request.url.path == "/v1/memories" and request.method == "GET":
            return httpx.Response(200, json={"memories": [], "cursor": None})
        return httpx.Response(200, json={"ids": ["m1"], "memory_id": "m1", "token": "v1.e30"})

    return sent, handler


@pytest.mark.parametrize(
    ("call", "error", "named"),
    [
        # a setting read as text: "false" is truthy, and the memory was purged or erased for good
        (lambda c: c.forget("m1", purge="false"), TypeError, "purge"),
        (lambda c: c.forget("m1", erase="false"), TypeError, "erase"),
        (lambda c: list(c.export(vectors="no")), TypeError, "vectors"),
        # the page's size is page_size: limit=5 listed every memory
        (lambda c: list(c.list_memories(limit=5)), TypeError, "page_size"),
        # an empty id named another route, or none: a 307 or a 404 that said nothing of it
        (lambda c: c.get(""), ValueError, "memory_id"),
        (lambda c: c.forget(""), ValueError, "memory_id"),
        (lambda c: c.update("", content="x"), ValueError, "memory_id"),
        (lambda c: c.history(""), ValueError, "memory_id"),
        (lambda c: c.erase_user(""), ValueError, "user_id"),
        # an id that is not text was called empty ("expected a non-empty id, not 123")
        (lambda c: c.get(123), TypeError, "memory_id: expected text (str), not int 123"),
        # the encoder's errors named nothing
        (lambda c: c.remember("x", importance=float("nan")), ValueError, "memories[0].importance"),
        (lambda c: c.remember("x", embedding=[0.1, float("inf")]), ValueError, "embedding[1]"),
        (lambda c: c.remember("x", at=datetime.date(2024, 1, 1)), TypeError, "memories[0].at"),
        (lambda c: c.remember_many(["a"]), TypeError, "memories[0]"),
    ],
)
def test_arguments_the_sdk_would_send_wrong_are_refused_naming_them_before_sending(
    call: Callable[[Client], object], error: type[Exception], named: str
) -> None:
    sent, handler = recorder()
    with client(handler) as sdk, pytest.raises(error, match=re.escape(named)):
        call(sdk)
    assert sent == []


@pytest.mark.parametrize("timeout_s", [0, -1, float("nan"), float("inf")])
def test_a_timeout_of_no_seconds_is_refused_at_construction(timeout_s: float) -> None:
    """0 (meant as "no limit") failed every call as a retriable Unreachable: retry loops spun."""
    with pytest.raises(ValueError, match="timeout_s"):
        Client("http://x", KEY, timeout_s=timeout_s)
    with pytest.raises(ValueError, match="timeout_s"):
        AsyncClient("http://x", KEY, timeout_s=timeout_s)
    Client("http://x", KEY, timeout_s=None).close()  # no limit, as httpx says it


def test_the_arguments_still_go_as_before() -> None:
    sent, handler = recorder()
    with client(handler) as sdk:
        sdk.forget("m1", purge=True, erase=True)
        list(sdk.list_memories(page_size=5, tag=["a", "b"]))
        sdk.remember(
            "x", embedding=[0.5, 0.25], at=datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)
        )
    queries = [str(r.url.query, "ascii") for r in sent]
    assert queries[0] == "purge=true&erase=true"
    assert queries[1].startswith("tag=a&tag=b&limit=5&after=")  # the forget's token
    body = json.loads(sent[2].content)["memories"][0]
    assert (body["embedding"], body["at"]) == ([0.5, 0.25], "2024-01-01T00:00:00+00:00")


@pytest.mark.parametrize("body", [[], "text", 5, {}, {"detail": "ok"}])
def test_a_success_whose_body_is_no_json_object_is_an_error_of_the_sdk(body: object) -> None:
    """A proxy's 200 of a list, text or another object escaped as a bare TypeError or KeyError
    from the reply's lookup."""
    with (
        client(lambda _: httpx.Response(200, json=body)) as sdk,
        pytest.raises(MnemostreamError, match="not a reply of the API"),
    ):
        sdk.remember("x")


def test_the_async_client_says_what_the_sync_one_says() -> None:
    for name in ("recall", "get", "list_memories", "export", "forget", "__init__"):
        doc = getattr(AsyncClient, name).__doc__
        assert doc, name
        assert doc == getattr(Client, name).__doc__, name
