"""The SDK against replies shaped like the API's and like what stands in front of it (a proxy's
page, a dropped connection): errors come out as the SDK's types, tokens stay one token long,
and what the caller passes reaches the server (the real server: tests/integration).
"""

from __future__ import annotations

import asyncio
import base64
import json
import pickle
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import cast

import httpx
import numpy as np
import pytest

from mnemostream import (
    AsyncClient,
    Client,
    Erasure,
    History,
    Memory,
    MnemostreamError,
    Overloaded,
    Recalled,
    Unreachable,
    UserErasure,
)
from mnemostream.client import DEFAULT_TIMEOUT_S, FOLD_WHILE_WRITING, MAX_AFTER

Handler = Callable[[httpx.Request], httpx.Response]


def token(offsets: dict[str, dict[str, int]]) -> str:
    """A token as these stand-ins write it (the service's are sealed: ranker.tokens); the SDK
    never reads one."""
    plain = json.dumps(offsets).encode()
    return "v2." + base64.urlsafe_b64encode(plain).decode().rstrip("=")


def offsets(text: str) -> dict[str, dict[str, int]]:
    body = text[3:]
    decoded: dict[str, dict[str, int]] = json.loads(
        base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
    )
    return decoded


def both(handler: Handler, call: Callable[[Client | AsyncClient], object]) -> list[object]:
    """What ``call`` returns or raises through the sync and the async client."""
    out: list[object] = []
    with Client("http://x", "k" * 16, transport=httpx.MockTransport(handler)) as client:
        try:
            out.append(call(client))
        except Exception as exc:
            out.append(exc)

    async def run() -> None:
        transport = httpx.MockTransport(handler)
        async with AsyncClient("http://x", "k" * 16, transport=transport) as client:
            try:
                result = call(client)
                out.append(await result if asyncio.iscoroutine(result) else result)
            except Exception as exc:
                out.append(exc)

    asyncio.run(run())
    return out


def folded(texts: list[str]) -> str:
    """One token covering ``texts``, as the service's ``POST /v1/tokens`` folds them."""
    out: dict[str, dict[str, int]] = {}
    for text in texts:
        for role, parts in offsets(text).items():
            for partition, offset in parts.items():
                mine = out.setdefault(role, {})
                mine[partition] = max(mine.get(partition, -1), offset)
    return token(out)


class Writes:
    """Answers writes with tokens over several partitions, folds tokens, records each read's
    ``after`` and the size of each fold; ``fold_fails``: the status folds answer (503: the keys
    topic is down; 404: a ranker from before folds).
    """

    def __init__(self, fold_fails: int | None = None) -> None:
        self.writes = 0
        self.after: list[list[str]] = []
        self.folds: list[int] = []
        self.fold_fails = fold_fails

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/memories":
            self.writes += 1
            t = token({"memory-writes": {str(self.writes % 3): self.writes}})
            return httpx.Response(200, json={"ids": ["m1"], "token": t})
        if request.url.path == "/v1/tokens":
            given = json.loads(request.content)["after"]
            self.folds.append(len(given))
            if self.fold_fails is not None:
                return httpx.Response(self.fold_fails, json={"detail": "refused"})
            return httpx.Response(200, json={"token": folded(given)})
        self.after.append(request.url.params.get_list("after"))
        return httpx.Response(404, json={"detail": "no such memory"})


@pytest.mark.parametrize("writes", [3, 9, 2_000])
def test_many_writes_before_a_read_send_one_token_covering_them_all(writes: int) -> None:
    """Tokens are sealed: the server folds them (``POST /v1/tokens``), before a read that would
    send more than FOLD_BEFORE_READ (8) and whenever the session holds more than 256."""
    seen = Writes()
    with Client("http://x", "k" * 16, transport=httpx.MockTransport(seen)) as client:
        for i in range(writes):  # each its own token: the read's URL held all 2,000 once
            client.remember(f"memory {i}")
        assert client.get("m1") is None
        client.get("m1")
    sent, nothing = seen.after
    assert offsets(folded(sent)) == offsets(
        folded([token({"memory-writes": {str(i % 3): i}}) for i in range(1, writes + 1)])
    )
    assert len(sent) == (writes if writes <= 8 else 1)
    assert nothing == []  # the read waited for them: the next one need not
    # 2,000: folded before each write that found 257 held (the first fold's one token and 256
    # more), and before the read
    assert seen.folds == {3: [], 9: [9], 2_000: [257] * 7 + [208]}[writes]


@pytest.mark.parametrize("status", [503, 404])
def test_a_fold_that_fails_costs_no_call_and_a_read_sends_a_few_tokens_unfolded(
    status: int,
) -> None:
    """503 (the keys topic down), 404 (a ranker from before folds): every write answers, the
    fold is tried again 256 tokens later, and a read sends up to 128 tokens unfolded."""
    seen = Writes(fold_fails=status)
    with Client("http://x", "k" * 16, transport=httpx.MockTransport(seen)) as client:
        for i in range(100):
            client.remember(f"memory {i}")
        assert client.get("m1") is None  # its fold failed: the 100 went unfolded
        ids = [client.remember(f"memory {i}") for i in range(600)]
        assert ids == ["m1"] * 600
        with pytest.raises(MnemostreamError) as failed:
            client.get("m1")  # 600 do not fit a URL: a read cannot go on without them
        assert failed.value.status == status
        assert len(client._session.pending) == 600  # kept for a read once folds work again
        seen.fold_fails = None
        assert client.get("m1") is None
    sent, one = seen.after
    assert len(sent) == 100
    assert offsets(folded(one)) == offsets(
        folded([token({"memory-writes": {str(i % 3): i}}) for i in range(101, 701)])
    )
    # the read's fold failed at 100 tokens: the next one 256 later (357), then 613 (never)
    assert seen.folds == [100, 357, 600, 600]


def test_a_fold_sends_at_most_what_a_request_takes() -> None:
    """Past failed folds, a session held more than 1,024 tokens; its fold was a 422 naming
    ``after``, which dropped them all (read-your-writes lost for 1,100 writes)."""
    seen = Writes(fold_fails=503)
    with Client("http://x", "k" * 16, transport=httpx.MockTransport(seen)) as client:
        for i in range(1_100):
            client.remember(f"memory {i}")
        seen.fold_fails = None
        assert client.get("m1") is None
    (sent,) = seen.after
    assert offsets(folded(sent)) == offsets(
        folded([token({"memory-writes": {str(i % 3): i}}) for i in range(1, 1_101)])
    )
    assert seen.folds[-2:] == [1_024, 77]  # the oldest 1,024, then the one they became and 76


def test_a_client_without_read_your_writes_keeps_no_token() -> None:
    seen = Writes()
    transport = httpx.MockTransport(seen)
    with Client("http://x", "k" * 16, transport=transport, read_your_writes=False) as client:
        client.remember("a")
        client.get("m1")
        assert client._session.pending == []
    assert seen.after == [[]]


def reply(status: int, body: bytes, headers: dict[str, str] | None = None) -> Handler:
    return lambda _request: httpx.Response(status, content=body, headers=headers or {})


def test_a_429_or_503_without_a_json_body_is_still_the_sdks_error() -> None:
    for error in both(reply(429, b"<html>slow down</html>"), lambda c: c.recall("q")):
        assert isinstance(error, Overloaded)
        assert error.retry_after_s == 1.0
        assert error.detail == "<html>slow down</html>"
    for error in both(reply(502, b'"bad gateway"'), lambda c: c.recall("q")):
        assert isinstance(error, MnemostreamError)
        assert error.detail == "bad gateway"
        assert error.retriable


def test_the_service_s_500_is_a_refusal_no_retry_mends_and_gateways_5xx_are_retriable() -> None:
    """The service answers 503 for "not now" and 500 for a refusal no retry mends (an ACL, a
    size limit): every 5xx was retriable, and a caller's retry loop spun on a 500.
    """
    refused = b'{"detail": "refused for good: TopicAuthorizationFailedError"}'
    for error in both(reply(500, refused), lambda c: c.remember("a")):
        assert isinstance(error, MnemostreamError)
        assert (error.status, error.retriable) == (500, False)
    for status in (502, 503, 504):
        for error in both(reply(status, b"{}"), lambda c: c.recall("q")):
            assert isinstance(error, MnemostreamError)
            assert (error.status, error.retriable) == (status, True)
    assert not MnemostreamError(501, "not implemented").retriable


def test_retry_after_is_read_as_seconds_or_as_a_date_on_429_and_503() -> None:
    later = format_datetime(datetime.now(UTC) + timedelta(seconds=120), usegmt=True)
    for error in both(reply(429, b"{}", {"Retry-After": later}), lambda c: c.recall("q")):
        assert isinstance(error, Overloaded)
        assert error.retry_after_s is not None
        assert 60 < error.retry_after_s <= 120
    body = b'{"detail": "the worker has not applied the write yet"}'
    for error in both(reply(503, body, {"Retry-After": "7"}), lambda c: c.get("m1")):
        assert isinstance(error, MnemostreamError)
        assert (error.status, error.retry_after_s, error.retriable) == (503, 7.0, True)
    for error in both(reply(503, b"{}", {"Retry-After": "soon"}), lambda c: c.get("m1")):
        assert isinstance(error, MnemostreamError)
        assert error.retry_after_s is None


def test_no_reply_is_unreachable_and_retriable() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    def slow(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    for handler in (refuse, slow):
        for call in (lambda c: c.remember("a"), lambda c: c.get("m1")):
            for error in both(handler, call):
                assert isinstance(error, Unreachable)
                assert (error.status, error.retriable) == (0, True)
    assert DEFAULT_TIMEOUT_S > 10.0  # above the server's read-your-writes wait


def test_a_reply_whose_body_cannot_be_decoded_is_unreachable_and_retriable() -> None:
    """A proxy's broken gzip escaped both clients as a bare httpx.DecodingError, and ``mnemo
    load`` ended in a traceback."""

    def broken(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-encoding": "gzip"}, content=b"not gzip")

    for call in (lambda c: c.remember("a"), lambda c: c.get("m1")):
        for error in both(broken, call):
            assert isinstance(error, Unreachable), error
            assert (error.status, error.retriable) == (0, True)
            assert "DecodingError" in str(error)


def test_a_408_is_retriable_and_a_url_without_its_scheme_is_not_unreachable() -> None:
    """The server's 408 (the body did not arrive in time: nothing was read) was not retriable,
    and "localhost:8080" was Unreachable, retriable: a retry loop spun on a setting."""
    body = b'{"detail": "the request body did not arrive within 30 s"}'
    for error in both(reply(408, body), lambda c: c.remember("a")):
        assert isinstance(error, MnemostreamError)
        assert (error.status, error.retriable) == (408, True)
    for url in ("localhost:8080", "127.0.0.1:8080", "ftp://m"):  # refused made, not at a call
        for make in (Client, AsyncClient):
            with pytest.raises(ValueError, match="base_url: the service's URL needs http"):
                make(url, "k" * 16)


def test_the_export_stream_cut_by_the_network_is_unreachable() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    with (
        Client("http://x", "k" * 16, transport=httpx.MockTransport(refuse)) as client,
        pytest.raises(Unreachable),
    ):
        list(client.export())


class Bodies:
    """Records each request's path and JSON body; answers every route plausibly."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, dict[str, object]]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else {}
        self.seen.append((request.url.raw_path.decode(), body))
        if request.url.path == "/v1/memories":
            return httpx.Response(200, json={"ids": ["m1"], "token": token({"x": {"0": 5}})})
        if request.url.path == "/v1/recall":
            return httpx.Response(200, json={"results": [], "token": None})
        if request.method == "PATCH":
            return httpx.Response(200, json={"memory_id": "m2", "token": None})
        return httpx.Response(200, json={"memory_ids": []})


def test_the_callers_own_after_is_sent_with_the_sessions() -> None:
    seen = Bodies()
    mine = token({"memory-writes": {"0": 9}})
    with Client("http://x", "k" * 16, transport=httpx.MockTransport(seen)) as client:
        client.recall("q", after=mine)
        client.remember("a")
        client.update("m1", content="b", after=[mine])
    (_, recall), _, (_, patch) = seen.seen
    assert recall["after"] == [mine]
    session, caller = cast(list[str], patch["after"])
    assert offsets(session) == {"x": {"0": 5}}  # the write's token
    assert caller == mine


def test_dot_segments_stay_in_the_path() -> None:
    seen = Bodies()
    with Client("http://x", "k" * 16, transport=httpx.MockTransport(seen)) as client:
        client.erase_user(".")
        client.erase_user("..")
        client.erase_user("a/b")
    assert [path for path, _ in seen.seen] == [
        "/v1/users/%2E",
        "/v1/users/%2E%2E",
        "/v1/users/a%2Fb",
    ]


def test_float32_vectors_are_sent_as_numbers() -> None:
    seen = Bodies()
    vector = np.asarray([0.5, 0.25], dtype=np.float32)
    with Client("http://x", "k" * 16, transport=httpx.MockTransport(seen)) as client:
        client.remember("a", embedding=vector)
        client.recall(vector=cast(Sequence[float], vector))
    (_, written), (_, recalled) = seen.seen
    assert written["memories"] == [{"content": "a", "embedding": [0.5, 0.25]}]
    assert recalled["vector"] == [0.5, 0.25]


def test_a_memory_keeps_the_fields_the_api_returns() -> None:
    shown = Memory.of(
        {
            "memory_id": "m1",
            "content": "c",
            "memory_type": "episodic",
            "state": "archived",
            "importance": 0.5,
            "access_count": 1,
            "recall_count": 2,
            "write_count": 3,
            "retention": 0.9,
            "review_count": 4,
            "run_id": "s1",
            "merged_into": "m9",
            "last_access": "2026-01-01T00:00:00+00:00",
            "unknown": "ignored",
        }
    )
    assert (shown.merged_into, shown.write_count, shown.review_count) == ("m9", 3, 4)
    assert (shown.run_id, shown.retention, shown.last_access) == (
        "s1",
        0.9,
        "2026-01-01T00:00:00+00:00",
    )


def test_an_export_waits_for_this_clients_writes() -> None:
    """``update`` then ``export`` (README's example) could miss the new version."""
    sent: list[list[str]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/memories":
            return httpx.Response(200, json={"ids": ["m1"], "token": token({"x": {"0": 3}})})
        sent.append(request.url.params.get_list("after"))
        if request.url.path == "/v1/export":
            return httpx.Response(200, content=b'{"memory_id": "m1"}\n{"end": true, "count": 1}\n')
        return httpx.Response(404, json={"detail": "no such memory"})

    with Client("http://x", "k" * 16, transport=httpx.MockTransport(handler)) as client:
        client.remember("a")
        assert [doc["memory_id"] for doc in client.export()] == ["m1"]
        client.get("m1")
    (exported,), after_export = sent
    assert offsets(exported) == {"x": {"0": 3}}
    assert after_export == []  # the export waited for it


async def _exported(client: AsyncClient) -> list[dict[str, object]]:
    return [doc async for doc in client.export()]


def test_an_export_line_holding_unicode_line_separators_stays_one_memory() -> None:
    """httpx's line iterators also split at U+2028, U+2029 and U+0085, which JSON leaves raw."""
    words = ["line one\u2028line two", "para\u2029graph", "price\x85total"]
    body = b"".join(
        json.dumps({"memory_id": f"m{i}", "content": w}, ensure_ascii=False).encode() + b"\n"
        for i, w in enumerate(words)
    )

    # in small pieces: a line (and a UTF-8 character) may span chunks
    chunks = [body[i : i + 7] for i in range(0, len(body), 7)] + [b'{"end": true, "count": 3}\n']

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=iter(chunks))

    async def pieces() -> AsyncIterator[bytes]:
        for chunk in chunks:
            yield chunk

    def async_handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=pieces())

    with Client("http://x", "k" * 16, transport=httpx.MockTransport(handler)) as client:
        assert [doc["content"] for doc in client.export()] == words

    async def run() -> list[dict[str, object]]:
        transport = httpx.MockTransport(async_handler)
        async with AsyncClient("http://x", "k" * 16, transport=transport) as client:
            return await _exported(client)

    assert [doc["content"] for doc in asyncio.run(run())] == words


def test_an_unknown_list_filter_is_refused_before_anything_is_sent() -> None:
    """The server ignores a query parameter it does not know: ``tags=`` would list everything."""
    sent: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(str(request.url))
        return httpx.Response(200, json={"memories": [], "cursor": None})

    with Client("http://x", "k" * 16, transport=httpx.MockTransport(handler)) as client:
        with pytest.raises(TypeError, match="'tags'"):
            list(client.list_memories(tags=["temp"]))
        assert list(client.list_memories(tag=["temp"], include_history=True)) == []
    assert len(sent) == 1
    assert "tag=temp" in sent[0]


@pytest.mark.parametrize(
    ("status", "reply"),
    [
        (308, {"headers": {"Location": "https://x/v1/memories"}}),
        (200, {"text": "<html>a proxy's page</html>"}),
    ],
)
def test_a_redirect_or_a_page_that_is_not_json_is_the_sdks_error(
    status: int, reply: dict[str, object]
) -> None:
    def handler(_: httpx.Request) -> httpx.Response:
        return httpx.Response(status, **reply)  # type: ignore[arg-type]

    for got in both(handler, lambda c: c.remember("a")):
        assert isinstance(got, MnemostreamError)
        assert got.status == status


def test_a_422_names_its_field_on_the_error() -> None:
    body = {"title": "Unprocessable Entity", "detail": "memories[0].importance=2: at most 1"}

    def handler(_: httpx.Request) -> httpx.Response:
        return httpx.Response(422, json={**body, "field": "memories[0].importance"})

    for got in both(handler, lambda c: c.remember("a", importance=2)):
        assert isinstance(got, MnemostreamError)
        assert (got.status, got.field, got.retriable) == (422, "memories[0].importance", False)


def test_an_export_whose_closing_line_lacks_its_newline_still_ends() -> None:
    def handler(_: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=b'{"memory_id": "m1"}\n{"end": true, "count": 1}')

    with Client("http://x", "k" * 16, transport=httpx.MockTransport(handler)) as client:
        assert list(client.export()) == [{"memory_id": "m1"}]

    async def run() -> list[dict[str, object]]:
        transport = httpx.MockTransport(handler)
        async with AsyncClient("http://x", "k" * 16, transport=transport) as client:
            return await _exported(client)

    assert asyncio.run(run()) == [{"memory_id": "m1"}]


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b'{"memory_id": "m1"}\n', "before its closing line"),  # the stream was cut short
        (b'{"memory_id": "m1"}\n[1, 2]\n{"end": true}\n', "not a JSON object"),
        (b'{"memory_id": "m1"}\n{"memory_id": \n{"end": true}\n', "not a JSON line"),
    ],
)
def test_an_export_cut_short_or_holding_a_line_that_is_no_memory_is_a_502(
    body: bytes, says: str
) -> None:
    def handler(_: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=body)

    with (
        Client("http://x", "k" * 16, transport=httpx.MockTransport(handler)) as client,
        pytest.raises(MnemostreamError, match=says) as sync,
    ):
        list(client.export())

    async def run() -> None:
        async with AsyncClient("http://x", "k" * 16, transport=httpx.MockTransport(handler)) as c:
            await _exported(c)

    with pytest.raises(MnemostreamError, match=says) as async_:
        asyncio.run(run())
    assert sync.value.status == async_.value.status == 502


def test_a_history_says_when_its_oldest_records_were_left_out() -> None:
    """The route answers the newest 10,000 with ``total`` and ``truncated``; the SDK returned the
    events alone, so a cut history looked complete.
    """

    def handler(request: httpx.Request) -> httpx.Response:
        events = [{"kind": "created"}, {"kind": "accessed"}]
        return httpx.Response(200, json={"events": events, "total": 25_000, "truncated": True})

    for history in both(handler, lambda c: c.history("m1")):
        assert isinstance(history, History)
        assert [e["kind"] for e in history] == ["created", "accessed"]
        assert (history.total, history.truncated) == (25_000, True)


def test_a_call_cancelled_during_a_fold_was_not_sent() -> None:
    """The fold ran after the call: a caller's time-out during it lost the answer of a write the
    server had taken (retried: a duplicate). It runs before the call now."""
    seen = Writes()
    stuck = asyncio.Event()

    async def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/tokens":
            await stuck.wait()  # never set: the fold outlives the caller's patience
        return seen(request)

    async def run() -> None:
        transport = httpx.MockTransport(handler)
        async with AsyncClient("http://x", "k" * 16, transport=transport) as client:
            for i in range(257):
                await client.remember(f"memory {i}")
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(client.remember("the 258th"), 0.05)
            assert seen.writes == 257  # the 258th was never sent: its retry is no duplicate
            assert len(client._session.pending) == 257

    asyncio.run(run())


class Reads(Writes):
    """:class:`Writes`, and an empty answer of each read route, recording its ``after``."""

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/v1/memories/get":
            self.after.append(json.loads(request.content).get("after") or [])
            return httpx.Response(200, json={"memories": []})
        answers = {
            "list": {"memories": [], "cursor": None},
            "history": {"events": [], "total": 0, "truncated": False},
            "users": {"memory_ids": []},
        }
        if request.method == "GET" and path == "/v1/memories":
            route = "list"
        elif path.endswith("/history"):
            route = "history"
        elif path.startswith("/v1/users/"):
            route = "users"
        else:
            return super().__call__(request)
        self.after.append(request.url.params.get_list("after"))
        return httpx.Response(200, json=answers[route])


def test_a_client_hands_its_writes_token_to_another_which_reads_after_it() -> None:
    """An agent whose session ends hands on to a new client (another process): the SDK kept
    its tokens to itself, so the new one's first reads missed the last writes. ``token()``
    gives one (folded by the server when several) and every read takes ``after=``.
    """
    seen = Reads()
    transport = httpx.MockTransport(seen)
    with Client("http://x", "k" * 16, transport=transport) as first:
        assert first.token() is None  # nothing written
        first.remember("a")
        (one,) = seen_tokens = [token({"memory-writes": {"1": 1}})]
        assert first.token() == one  # one token: no fold asked
        first.remember("b")
        handed = first.token()
        assert seen.folds == [2]
        assert handed is not None
        assert offsets(handed) == offsets(
            folded([*seen_tokens, token({"memory-writes": {"2": 2}})])
        )
        assert first.token() == handed  # the session holds the fold, not both
    with Client("http://x", "k" * 16, transport=transport) as second:
        second.get("m1", after=handed)
        second.get_many(["m1"], after=[handed])
        second.history("m1", after=handed)
        list(second.list_memories(after=handed))
        second.erase_user("ann", after=handed)
    assert seen.after == [[handed]] * 5

    async def run() -> list[str | None]:
        async with AsyncClient("http://x", "k" * 16, transport=transport) as client:
            await client.remember("c")
            await client.remember("d")
            mine = await client.token()
            await client.get("m1", after="v1.other")
            return [mine]

    (mine,) = asyncio.run(run())
    assert mine is not None
    assert seen.folds == [2, 2]
    assert seen.after[-1] == [mine, "v1.other"]  # the session's first, then the caller's


@pytest.mark.parametrize("size", [0, 1001, True, 2.5])
def test_a_page_size_out_of_range_is_refused_naming_page_size(size: object) -> None:
    """The server's 422 named its query parameter ``limit``, which no caller wrote."""
    client = Client("http://x", "k" * 16, transport=httpx.MockTransport(Writes()))
    with client, pytest.raises(ValueError, match="page_size"):
        next(iter(client.list_memories(page_size=size)))  # type: ignore[arg-type]


def test_remember_sends_after_beside_the_memories_not_in_one() -> None:
    bodies: list[dict[str, object]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return httpx.Response(200, json={"ids": ["card"], "token": "v1.w"})

    with Client("http://x", "k" * 16, transport=httpx.MockTransport(answer)) as client:
        client.remember("Ned's", memory_id="card", after="v1.deleted")
        client.remember_many([{"content": "Ned's", "memory_id": "card"}], after=["v1.d"])
        client.remember("plain")
    # the second rewrites the card the first wrote: the session's token first
    assert [b.get("after") for b in bodies] == [["v1.deleted"], ["v1.w", "v1.d"], None]
    assert all("after" not in m for b in bodies for m in b["memories"])  # type: ignore[attr-defined]


def test_a_writes_after_is_not_taken_for_waited_and_token_folds_its_own_snapshot() -> None:
    """A write's ``after`` is waited for only to check given ids, but the session dropped those
    tokens as waited for: the next read no longer waited for the deletion they covered. And
    ``token()`` returned the session's newest token, which another thread's write could be.
    """
    seen = Reads()
    transport = httpx.MockTransport(seen)
    with Client("http://x", "k" * 16, transport=transport) as client:
        client.remember("a")
        deleted = client.token()
        assert deleted is not None
        client.remember("unrelated", after=deleted)
        client.get("m1")
    assert seen.after[-1][0] == deleted  # still waited for, with the write's own

    other: list[str] = []

    def racing(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/tokens" and not other:  # another thread writes meanwhile
            other.append(client.remember("b"))
        return seen(request)

    with Client("http://x", "k" * 16, transport=httpx.MockTransport(racing)) as client:
        client.remember("a")
        client.remember("c")
        mine = client.token()
    assert mine is not None
    assert offsets(mine) == offsets(
        folded(
            [token({"memory-writes": {str(n % 3): n}}) for n in (seen.writes - 2, seen.writes - 1)]
        )
    )


def test_a_422_naming_after_for_many_tokens_drops_none_of_the_session_s() -> None:
    """Too many tokens (or too long) is named ``after``, no token's fault: the SDK dropped every
    token it sent, the session's included, when a caller's own list was too long.
    """
    sent: list[list[str]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/memories" and request.method == "POST":
            return httpx.Response(200, json={"ids": ["m1"], "token": "v2.w"})
        sent.append(request.url.params.get_list("after"))
        detail = {"detail": "after=...: at most 1024 tokens", "field": "after"}
        return httpx.Response(422, json=detail if len(sent) == 1 else {"memories": []})

    with Client("http://x", "k" * 16, transport=httpx.MockTransport(answer)) as client:
        client.remember("a")
        with pytest.raises(MnemostreamError):
            client.history("m1", after=["v2.c1", "v2.c2"])
        with pytest.raises(MnemostreamError):
            client.history("m1")
    assert sent == [["v2.w", "v2.c1", "v2.c2"], ["v2.w"]]


@pytest.mark.parametrize("url", ["http://", "https:localhost:8080", "http:/x"])
def test_a_base_url_without_a_host_is_refused_when_the_client_is_made(url: str) -> None:
    """It failed every call as a retriable Unreachable: a retry loop spun on a setting."""
    with pytest.raises(ValueError, match="base_url"):
        Client(url, "k" * 16)


def test_a_base_url_may_be_an_httpx_url_and_a_page_size_a_numpy_int() -> None:
    pages: list[str | None] = []

    def answer(request: httpx.Request) -> httpx.Response:
        pages.append(request.url.params.get("limit"))
        return httpx.Response(200, json={"memories": [], "cursor": None})

    url = httpx.URL("http://x:8080/prefix")
    with Client(url, "k" * 16, transport=httpx.MockTransport(answer)) as client:
        assert list(client.list_memories(page_size=np.int64(50))) == []  # type: ignore[arg-type]
    assert pages == ["50"]


def test_a_good_fold_in_token_resets_the_fold_threshold_a_failed_one_raised() -> None:
    """``token()`` folded outside the session's own folding, which resets its threshold after a
    good fold: a session that had one failed fold then held twice the 256 tokens documented.
    """
    seen = Writes(fold_fails=503)
    with Client("http://x", "k" * 16, transport=httpx.MockTransport(seen)) as client:
        for i in range(258):
            client.remember(f"memory {i}")  # the 258th finds 257 held: a fold, refused
        assert seen.folds == [257]
        seen.fold_fails = None
        assert client.token() is not None
        assert seen.folds == [257, 258]
        for i in range(257):
            client.remember(f"more {i}")
    assert seen.folds == [257, 258, 257]  # folded at 257 held again, not at 513


def test_end_session_waits_for_the_session_s_writes_and_its_token_joins_the_session() -> None:
    """The session's last writes must be applied before the server looks for its working
    memories, and a read after the end sees the promotions (its token is the session's).
    """
    sent: list[tuple[str, object]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        if request.url.path == "/v1/memories":
            return httpx.Response(200, json={"ids": ["m1"], "token": "v1.write"})
        if request.url.path == "/v1/sessions/end":
            sent.append(("end", body))
            return httpx.Response(200, json={"promoted": ["m1"], "token": "v1.end"})
        sent.append(("get", body.get("after")))
        return httpx.Response(200, json={"memories": [], "missing": ["m1"]})

    at = datetime(2026, 5, 1, tzinfo=UTC)
    expected = [
        (
            "end",
            {
                "session_id": "s1",
                "user_id": "ann",
                "at": "2026-05-01T00:00:00+00:00",
                "after": ["v1.write", "v1.mine"],
            },
        ),
        ("get", ["v1.end"]),  # the write was waited for; the end's token was not yet
    ]
    with Client("http://x", "k" * 16, transport=httpx.MockTransport(answer)) as client:
        client.remember("a", session_id="s1")
        assert client.end_session("s1", user_id="ann", at=at, after="v1.mine") == ["m1"]
        client.get_many(["m1"])
    assert sent == expected

    async def run() -> list[str]:
        transport = httpx.MockTransport(answer)
        async with AsyncClient("http://x", "k" * 16, transport=transport) as client:
            await client.remember("a", session_id="s1")
            promoted = await client.end_session("s1", user_id="ann", at=at, after="v1.mine")
            await client.get_many(["m1"])
            return promoted

    sent.clear()
    assert asyncio.run(run()) == ["m1"]
    assert sent == expected
    with Client("http://x", "k" * 16, transport=httpx.MockTransport(answer)) as client:
        sent.clear()
        client.end_session(run_id="r1", agent_id="bot")  # mem0's name; nothing to wait for
    assert sent == [("end", {"run_id": "r1", "agent_id": "bot"})]


def test_a_rewrite_of_an_id_this_client_wrote_sends_the_session_s_tokens() -> None:
    """A client writing its own id under one session, then at once under another: the server's
    check did not see the first write yet, answered 200, and the worker ignored the second (a
    memory keeps its scope). The rewrite now sends the session's tokens for the check to wait
    for; writes of other ids, or without ids, wait for nothing.
    """
    bodies: list[dict[str, object]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        bodies.append(body)
        n = len(bodies)
        ids = [m.get("memory_id", f"m-{n}") for m in body.get("memories", [])]
        return httpx.Response(200, json={"ids": ids, "token": f"v1.t{n}"})

    with Client("http://x", "k" * 16, transport=httpx.MockTransport(answer)) as client:
        client.remember("Alice prefers tea", memory_id="pref", session_id="s1")
        client.remember("Alice has a cat")  # no id given: nothing to check
        client.remember("Bob's", memory_id="other")  # an id this client did not write
        client.remember("Alice prefers coffee", memory_id="pref", session_id="s2")
        # m-2, a derived id given: its write was waited for by the rewrite before
        client.remember_many([{"content": "again", "memory_id": "m-2"}])
        client.remember("Alice prefers water", memory_id="pref")  # t4 wrote it: not waited yet
    assert [b.get("after") for b in bodies] == [
        None,
        None,
        None,
        ["v1.t1", "v1.t2", "v1.t3"],
        None,
        ["v1.t4", "v1.t5"],
    ]
    assert client._session.written == {"v1.t6": frozenset({"pref"})}  # of pending tokens only

    async def run() -> list[object]:
        bodies.clear()
        transport = httpx.MockTransport(answer)
        async with AsyncClient("http://x", "k" * 16, transport=transport) as client:
            await client.remember("a", memory_id="pref")
            await client.remember_many([{"content": "b", "memory_id": "pref"}])
        return [b.get("after") for b in bodies]

    assert asyncio.run(run()) == [None, ["v1.t1"]]


def test_a_rewrite_finds_its_write_in_a_fold_and_a_failed_fold_does_not_fail_it() -> None:
    """A fold's token covers the ids of the writes it folded; a ranker that cannot fold (404)
    still takes the write, with the newest tokens that fit beside the caller's ``after``.
    """
    bodies: list[dict[str, object]] = []
    folds = {"ok": True}

    def answer(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        if request.url.path == "/v1/tokens":
            if not folds["ok"]:
                return httpx.Response(404, json={"detail": "Not Found"})
            return httpx.Response(200, json={"token": f"v1.fold{len(bodies)}"})
        bodies.append(body)
        ids = [m.get("memory_id", f"m-{len(bodies)}") for m in body["memories"]]
        return httpx.Response(200, json={"ids": ids, "token": f"v1.t{len(bodies)}"})

    with Client("http://x", "k" * 16, transport=httpx.MockTransport(answer)) as client:
        client.remember("a", memory_id="card")
        client.remember("b")
        handed = client.token()  # folds t1 and t2
        client.remember("c", memory_id="card", session_id="s2")
    assert bodies[-1]["after"] == [handed]

    folds["ok"] = False
    bodies.clear()
    with Client("http://x", "k" * 16, transport=httpx.MockTransport(answer)) as client:
        for n in range(FOLD_WHILE_WRITING + 2):
            client.remember(f"w{n}", memory_id=f"id{n}")
        mine = [f"v1.mine{n}" for n in range(MAX_AFTER - 3)]
        client.remember(
            "again", memory_id="id0", after=mine
        )  # the fold fails: written all the same
    sent = bodies[-1]["after"]
    assert isinstance(sent, list)
    assert len(sent) == MAX_AFTER
    assert sent[-len(mine) :] == mine
    # the token that wrote id0 first, then the newest others that fit
    assert sent[: -len(mine)] == ["v1.t1", "v1.t257", "v1.t258"]
    with Client("http://x", "k" * 16, transport=httpx.MockTransport(answer)) as client:
        client.remember("a", memory_id="card")
        full = [f"v1.m{n}" for n in range(MAX_AFTER)]  # no room for the token that wrote card
        with pytest.raises(ValueError, match="after"):
            client.remember("b", memory_id="card", after=full)


def test_a_write_after_a_deletion_or_an_update_of_its_id_sends_their_tokens() -> None:
    """README's way to give an id another scope, "delete it, then write it again with the
    deletion's token as after", needed the caller to pass ``token()``: without it the check
    saw the memory not deleted yet (a 409). A deletion's and an update's tokens now cover the
    ids they touched, as a write's do.
    """
    bodies: list[tuple[str, str, object]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        n = len(bodies) + 1
        body = json.loads(request.content) if request.content else {}
        bodies.append((request.method, request.url.path, body.get("after")))
        if request.method == "DELETE":
            memory_id = request.url.path.rsplit("/", 1)[-1]
            return httpx.Response(200, json={"memory_id": memory_id, "token": f"v1.t{n}"})
        if request.method == "PATCH":
            return httpx.Response(200, json={"memory_id": "m-v2", "token": f"v1.t{n}"})
        if request.url.path == "/v1/access":
            return httpx.Response(200, json={"accepted": 1, "token": f"v1.t{n}"})
        return httpx.Response(200, json={"ids": ["x"], "token": f"v1.t{n}"})

    with Client("http://x", "k" * 16, transport=httpx.MockTransport(answer)) as client:
        client.forget("card")
        client.remember("Ned's", memory_id="card", user_id="ned")
        client.update("fact", content="new")
        client.remember("moved", memory_id="m-v2", session_id="s2")
        client.access(["m-v2"], "explicit")  # an access touches no id: nothing recorded
        client.remember("other", memory_id="zzz")
    writes = [after for method, path, after in bodies if path == "/v1/memories"]
    assert writes == [["v1.t1"], ["v1.t3"], None]  # the update waited for t2 itself


def test_erasures_and_a_tracked_recall_keep_what_their_reply_says() -> None:
    """``forget`` returned the keys erased alone and ``erase_user`` the ids alone: the summaries
    and copies erased with them, which the HTTP reply lists, were lost to SDK callers; and a
    tracked recall's token, which README tells callers to pass on, could not be had.
    """

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/recall":
            found: dict[str, object] = {"memory_id": "m1", "content": "c", "state": "active"}
            found |= {"memory_type": "working", "importance": 0.5}
            found |= {"access_count": 0, "recall_count": 0}
            return httpx.Response(200, json={"results": [found], "token": "v1.recall"})
        if request.url.path.startswith("/v1/users/"):
            erased = {"memory_ids": ["m1", "m2"], "keys_erased": 2, "token": "v1.user"}
            return httpx.Response(200, json={**erased, "summaries_erased": ["s9"]})
        body = {"memory_id": "m1", "keys_erased": 1, "token": "v1.one"}
        body |= {"summaries_erased": ["s1"], "copies_erased": ["c1", "c2"]}
        return httpx.Response(200, json=body)

    def calls(client: Client) -> list[object]:
        return [client.forget("m1", erase=True), client.erase_user("ann"), client.recall("q")]

    async def async_calls(client: AsyncClient) -> list[object]:
        one = await client.forget("m1", erase=True)
        return [one, await client.erase_user("ann"), await client.recall("q")]

    with Client("http://x", "k" * 16, transport=httpx.MockTransport(answer)) as client:
        results = [calls(client)]

    async def run() -> None:
        async with AsyncClient("http://x", "k" * 16, transport=httpx.MockTransport(answer)) as c:
            results.append(await async_calls(c))

    asyncio.run(run())
    for one, user, recalled in results:
        assert isinstance(one, Erasure)
        assert one == 1
        assert (one.summaries_erased, one.copies_erased) == (["s1"], ["c1", "c2"])
        assert one.token == "v1.one"
        assert isinstance(user, UserErasure)
        assert user == ["m1", "m2"]
        assert (user.keys_erased, user.summaries_erased, user.copies_erased) == (2, ["s9"], [])
        assert user.token == "v1.user"
        assert isinstance(recalled, Recalled)
        assert [m.memory_id for m in recalled] == ["m1"]
        assert recalled.token == "v1.recall"
    copied = pickle.loads(pickle.dumps(results[0][0]))
    assert (copied, copied.copies_erased) == (1, ["c1", "c2"])


def test_result_types_made_by_hand_have_every_attribute_and_copy_whole() -> None:
    """A test double (``Recalled([...])``, ``Erasure(0)``) type-checked and then raised
    AttributeError at ``.token``: the attributes were set by ``of`` alone.
    """
    recalled, one = Recalled(token="t"), Erasure(2, copies_erased=["c"])
    user = UserErasure(["m1"], keys_erased=1)
    assert (recalled, recalled.token, Recalled().token) == ([], "t", None)
    assert (one, one.summaries_erased, one.copies_erased, one.token) == (2, [], ["c"], None)
    assert (user, user.keys_erased, user.summaries_erased, user.token) == (["m1"], 1, [], None)
    for made in (recalled, one, user):
        again = pickle.loads(pickle.dumps(made))
        assert (type(again), again, vars(again)) == (type(made), made, vars(made))
