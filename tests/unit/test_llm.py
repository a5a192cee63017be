"""The LLM importance client against a real HTTP server on loopback (an OpenAI-compatible stand-in)."""

from __future__ import annotations

import asyncio
import gzip
import json
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from memcore import ImportanceSource, resolve_importance
from memcore.supersession import SupersessionPolicy, Version
from storage.usage import load_settings
from streams.app import _llm_answers
from streams.llm import CONCURRENCY, MAX_ANSWER_BYTES, LlmImportance
from streams.settings import WorkerSettings
from tests.infra import free_port

TIMEOUT_S = 1.5
"""The client's timeout: the loopback answers in ms, with room for a loaded machine (at 0.3 s
a busy CI machine could time the fast answers out too)."""
SLOW_S = 2 * TIMEOUT_S
"""How long the slow answer takes: past the timeout."""


class Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        prompt = body["messages"][0]["content"]
        if "slow" in prompt:
            time.sleep(SLOW_S)
            return  # the client gave up; answering would hit a closed socket
        if "broken" in prompt:
            self.send_response(500)
            self.end_headers()
            return
        answer = '{"importance_score": 0.9, "reasoning": "a key fact"}'
        if "prose" in prompt:
            answer = "I would say importance: 0.4 overall."
        if "huge" in prompt:
            answer += " " * MAX_ANSWER_BYTES
        payload = json.dumps({"choices": [{"message": {"content": answer}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if "gzipped" in prompt:  # whatever the client asked for
            payload = gzip.compress(payload)
            self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


class Server(ThreadingHTTPServer):
    request_queue_size = 512  # the listen backlog: 5 kept a batch's questions waiting to connect
    daemon_threads = True


@pytest.fixture
def llm_url() -> Iterator[str]:
    server = Server(("127.0.0.1", free_port()), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()
    thread.join()


def answers(url: str, texts: list[str], timeout_s: float = TIMEOUT_S) -> list[str | None]:
    async def run() -> list[str | None]:
        llm = LlmImportance(url, "test-model", "secret", timeout_s)
        await llm.start()
        try:
            return await llm.answers(texts)
        finally:
            await llm.close()

    return asyncio.run(run())


def in_loop(
    reply: Callable[[httpx.Request], Coroutine[None, None, httpx.Response]],
    timeout_s: float,
    ask: Callable[[LlmImportance], Awaitable[list[str | None]]],
) -> list[str | None]:
    """What ``ask`` gets from an LLM that answers with ``reply`` inside the event loop (no
    sockets, no threads: only the loop's own work can eat a timeout's margin).
    """

    async def run() -> list[str | None]:
        llm = LlmImportance("http://llm.invalid/v1", "test-model", "", timeout_s)
        await llm.start()  # its turns, on this loop
        await llm.close()
        llm._client = httpx.AsyncClient(transport=httpx.MockTransport(reply))
        try:
            return await ask(llm)
        finally:
            await llm.close()

    return asyncio.run(run())


def test_answers_feed_the_importance_chain(llm_url: str) -> None:
    json_answer, prose, slow, broken = answers(
        llm_url, ["a fact", "prose please", "slow one", "broken one"]
    )
    assert json_answer is not None
    assert resolve_importance("a fact", llm_answer=json_answer).score == 0.9
    decision = resolve_importance("prose", llm_answer=prose)
    assert (decision.score, decision.source) == (0.4, ImportanceSource.LLM_REGEX)
    assert slow is None  # over the timeout: the rule engine decides
    assert broken is None
    fallback = resolve_importance("remember: slow one", llm_answer=slow)
    assert fallback.source is ImportanceSource.RULES


def test_unreachable_endpoint_never_raises() -> None:
    assert answers(f"http://127.0.0.1:{free_port()}/v1", ["x"]) == [None]


def test_a_reply_nested_deeper_than_the_json_parser_goes_is_no_answer() -> None:
    """A broken or hostile endpoint's body: the rules decide, as for any unreadable reply."""
    nested = b'{"choices": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"

    async def reply(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=nested)

    assert in_loop(reply, 1.0, lambda llm: llm.answers(["a fact"])) == [None]


def test_questions_past_the_pool_wait_their_turn_without_spending_their_timeout() -> None:
    """The timeout ran while a question waited for one of the pool's 100 connections: in a batch
    of more, those past 100 timed out unasked (1.2 s waited + 1.2 s answering > 2 s) and the
    rules decided. The LLM answers inside the event loop (:func:`in_loop`), so nothing but the
    loop's own work can eat the 0.8 s margin: with a real server and 120 threads on two loaded
    cores it did (every question timed out in a CI run)."""
    in_flight: list[int] = [0, 0]  # now, most at once

    async def answer(request: httpx.Request) -> httpx.Response:
        in_flight[0] += 1
        in_flight[1] = max(in_flight)
        try:
            await asyncio.sleep(1.2)
        finally:
            in_flight[0] -= 1
        content = '{"importance_score": 0.9, "reasoning": "a key fact"}'
        return httpx.Response(200, json={"choices": [{"message": {"content": content}}]})

    facts = [f"fact {i}" for i in range(CONCURRENCY + 20)]
    replies = in_loop(answer, 2.0, lambda llm: llm.answers(facts))
    assert replies.count(None) == 0
    assert in_flight[1] == CONCURRENCY  # the pool's size, never more


def hanging(
    ask: Callable[[LlmImportance], Awaitable[list[str | None]]],
) -> tuple[list[str | None], int]:
    """What ``ask`` gets from an LLM that answers nothing (0.2 s timeout), and how many
    questions were sent to it.
    """
    asked: list[httpx.Request] = []

    async def hang(request: httpx.Request) -> httpx.Response:
        asked.append(request)
        await asyncio.sleep(3600)
        raise AssertionError("never answered")

    return in_loop(hang, 0.2, ask), len(asked)


def test_a_hanging_llm_costs_a_batch_one_timeout_not_one_per_hundred_questions() -> None:
    """Questions past the pool's 100 waited their turn, then each spent a whole timeout of its
    own on an LLM that answers nothing: a batch of 300 took three timeouts."""
    facts = [f"fact {i}" for i in range(3 * CONCURRENCY)]
    answered, asked = hanging(lambda llm: llm.answers(facts))
    assert answered == [None] * len(facts)
    assert asked == CONCURRENCY  # the first turns timed out; the rest were never sent


def test_a_hanging_llm_costs_a_batchs_supersession_questions_one_timeout() -> None:
    """The supersession check asks through the same pool: 250 questions took three timeouts."""
    at = datetime(2026, 3, 1, 12, tzinfo=UTC)
    older = Version("old", "Alice lives in Osaka", at, similarity=0.9)
    compared = [
        (Version(f"n{i}", f"Alice lives in city {i}", at + timedelta(hours=1)), [older])
        for i in range(CONCURRENCY + 150)
    ]
    answered, asked = hanging(
        lambda llm: _llm_answers(llm, compared, SupersessionPolicy(), asyncio.Event())
    )
    assert answered == [None] * len(compared)  # the rule decides each
    assert asked == CONCURRENCY


def test_a_url_the_http_client_refuses_is_no_answer_not_a_failed_batch() -> None:
    """httpx.InvalidURL is not an httpx.HTTPError: it escaped the batch's questions, and the
    writes of the batch were given up (already acknowledged)."""
    assert answers("http://llm.internal:8000/v1\n", ["a fact", "another"]) == [None, None]


@pytest.mark.parametrize(
    "url", ["http://llm.internal:8000/v1\n", " http://llm/v1", "llm.internal:8000", "ftp://llm/v1"]
)
def test_an_llm_url_the_client_cannot_use_is_refused_at_start_up_naming_it(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MNEMO_LLM_URL", url)
    with pytest.raises(SystemExit, match="MNEMO_LLM_URL"):
        load_settings(WorkerSettings)
    monkeypatch.setenv("MNEMO_LLM_URL", "https://llm.internal:8000/v1")
    assert load_settings(WorkerSettings).llm_url == "https://llm.internal:8000/v1"
    monkeypatch.setenv("MNEMO_LLM_URL", "")  # unset: the rules decide
    assert not load_settings(WorkerSettings).llm_url


@pytest.mark.parametrize(
    ("size", "read"), [(MAX_ANSWER_BYTES - 1024, True), (MAX_ANSWER_BYTES, False)]
)
def test_a_reply_longer_than_the_limit_is_no_answer(size: int, read: bool) -> None:
    """A reply of any length was read whole and parsed (a million-entry list: 0.4 s of the
    worker's loop); one past :data:`MAX_ANSWER_BYTES` is now no answer, and the rules decide,
    read no further than the limit, and asked for uncompressed.
    """
    answer = '{"replaces": [1], "reason": "' + "x" * size + '"}'
    body = json.dumps({"choices": [{"message": {"content": answer}}]}).encode()
    chunk = 64 * 1024
    sent: list[int] = []
    asked: list[str | None] = []

    async def chunks() -> AsyncIterator[bytes]:
        more = 0 if read else 10 * chunk  # past the limit: 10 chunks more than the body
        for at in range(0, len(body) + more, chunk):
            sent.append(at)
            yield body[at : at + chunk] if at < len(body) else b" " * chunk

    async def reply(request: httpx.Request) -> httpx.Response:
        asked.append(request.headers.get("accept-encoding"))
        return httpx.Response(200, content=chunks())

    got = in_loop(reply, TIMEOUT_S, lambda llm: llm.answers(["fact"]))
    assert got == ([answer] if read else [None])
    assert asked == ["identity"]
    if not read:
        assert len(sent) <= MAX_ANSWER_BYTES // chunk + 1  # no chunk read past the limit's


def test_an_error_reply_is_no_answer_and_read_whole() -> None:
    """Its body is read (up to the limit) before the status is looked at, so that the
    connection goes back to the pool; the answer is None and the rules decide.
    """
    read: list[bool] = []

    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"error": "overloaded"}'
        read.append(True)

    async def reply(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503, content=chunks())

    assert in_loop(reply, TIMEOUT_S, lambda llm: llm.answers(["fact"])) == [None]
    assert read == [True]


@pytest.mark.parametrize(
    ("coding", "read"),
    [("gzip", False), ("identity, gzip", False), ("none", True), ("UTF-8", True), ("", True)],
)
def test_a_compressed_reply_is_no_answer(coding: str, read: bool) -> None:
    """Asked for none, a server may still compress: a 61 KB gzip reply was inflated to 60 MiB,
    a chunk at a time, before the limit counted it (137 MiB at peak). A coding httpx does not
    inflate ("none", "UTF-8") is read as it is.
    """
    content = '{"replaces": [1]}'
    answer = json.dumps({"choices": [{"message": {"content": content}}]}).encode()

    async def reply(request: httpx.Request) -> httpx.Response:
        body = gzip.compress(answer) if "gzip" in coding else answer
        return httpx.Response(200, content=body, headers={"Content-Encoding": coding})

    got = in_loop(reply, TIMEOUT_S, lambda llm: llm.answers(["fact"]))
    assert got == ([content] if read else [None])


def test_a_reply_over_the_limit_or_compressed_is_no_answer_over_a_socket(llm_url: str) -> None:
    """The same limits through a real HTTP server on loopback (the tests above use a mock
    transport): a reply over :data:`MAX_ANSWER_BYTES`, or compressed though asked for none, is
    no answer; the next question is answered.
    """
    got = answers(llm_url, ["huge fact", "gzipped fact", "a fact"])
    assert got[:2] == [None, None]
    assert got[2] is not None
    assert "importance_score" in got[2]
