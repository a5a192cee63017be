"""A request holds its in-flight slot for a bounded time and memory: a client that sends headers
and then nothing, a body of any size, or a request with no key at all cannot lock every tenant
out or grow the process (each held a slot until its socket closed, or read the whole body first).
"""

from __future__ import annotations

import asyncio

import orjson
import pytest
from fastapi import FastAPI
from pydantic import ValidationError
from starlette.types import Message

from ranker.api import create_api
from ranker.service import RecallService
from ranker.settings import RankerSettings
from storage import Filters, MilvusConfig
from storage.embedding import Hashing
from storage.milvus import Hit
from storage.tenants import TenantRegistry
from tests.rows import make_row

pytestmark = pytest.mark.anyio
KEY = "key-acme-0123456789"
ROW = make_row("acme", "m1", (1.0, 0.0, 0.0, 0.0))


class Store:
    config = MilvusConfig("unused.db", dim=4, full_text=False)

    def search(self, tenant_id: str, vectors: object, k: int, f: Filters | None = None) -> object:
        return [[Hit(ROW, 0.5)]]

    def relations(self, tenant_id: str, ids: object) -> dict[str, list[str]]:
        return {}


async def no_send(*_: object) -> None:
    raise AssertionError("untracked recalls send nothing")


def scope(headers: dict[str, str]) -> dict[str, object]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/recall",
        "raw_path": b"/v1/recall",
        "query_string": b"",
        "root_path": "",
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 8080),
    }


class Client:
    """One request to the app: ``chunks`` are its body's pieces (then it sends nothing more,
    without ending the body, when ``stall``); what the app read and answered is kept.
    """

    def __init__(self, chunks: list[bytes], *, stall: bool = False) -> None:
        self.chunks = list(chunks)
        self.stall = stall
        self.reads = 0
        self.sent: list[Message] = []

    async def receive(self) -> Message:
        self.reads += 1
        if self.chunks:
            chunk = self.chunks.pop(0)
            return {
                "type": "http.request",
                "body": chunk,
                "more_body": bool(self.chunks) or self.stall,
            }
        await asyncio.Event().wait()  # headers sent, then nothing (or the client's disconnect)
        raise AssertionError

    async def send(self, message: Message) -> None:
        self.sent.append(message)

    @property
    def status(self) -> int:
        return int(next(m["status"] for m in self.sent if m["type"] == "http.response.start"))

    @property
    def problem(self) -> dict[str, object]:
        body = b"".join(m.get("body", b"") for m in self.sent if m["type"] == "http.response.body")
        return dict(orjson.loads(body))


async def started(**limits: object) -> tuple[RecallService, FastAPI]:
    service = RecallService(Store(), Hashing(4), no_send, kernel_thread=False)  # type: ignore[arg-type]
    registry = TenantRegistry.of({"tenants": {"acme": {"api_keys": [KEY]}}})
    api = create_api(service, registry, **limits)  # type: ignore[arg-type]
    await service.start()
    return service, api


RECALL = orjson.dumps({"query": "x", "track": False})


async def test_a_body_that_never_arrives_gives_its_slot_back_after_the_body_timeout() -> None:
    service, api = await started(max_in_flight=1, body_timeout_s=0.2)
    try:
        stalled = Client([b'{"query": '], stall=True)
        headers = {"X-API-Key": KEY, "Content-Type": "application/json", "Content-Length": "100"}
        await asyncio.wait_for(api(scope(headers), stalled.receive, stalled.send), 5)
        assert stalled.status == 408
        assert "0.2 s" in str(stalled.problem["detail"])
        after = Client([RECALL])
        headers["Content-Length"] = str(len(RECALL))
        await api(scope(headers), after.receive, after.send)
        assert after.status == 200  # the one slot was given back
    finally:
        await service.stop()


async def test_a_body_over_the_limit_is_refused_unread_or_as_soon_as_it_is_over() -> None:
    service, api = await started(max_body_bytes=1024)
    try:
        declared = Client([b"x" * 2048])
        headers = {"X-API-Key": KEY, "Content-Type": "application/json", "Content-Length": "2048"}
        await api(scope(headers), declared.receive, declared.send)
        assert (declared.status, declared.reads) == (413, 0)
        assert "MNEMO_MAX_BODY_BYTES" in str(declared.problem["detail"])
        streamed = Client([b"x" * 600, b"x" * 600], stall=True)  # no length said: chunked
        headers.pop("Content-Length")
        await asyncio.wait_for(api(scope(headers), streamed.receive, streamed.send), 5)
        assert (streamed.status, streamed.reads) == (413, 2)
    finally:
        await service.stop()


async def test_a_request_without_a_key_is_answered_401_before_its_body_is_read() -> None:
    service, api = await started(max_in_flight=1)
    try:
        keyless = Client([RECALL])
        headers = {"Content-Type": "application/json", "Content-Length": str(len(RECALL))}
        await api(scope(headers), keyless.receive, keyless.send)
        assert (keyless.status, keyless.reads) == (401, 0)
        start = next(m for m in keyless.sent if m["type"] == "http.response.start")
        assert (b"www-authenticate", b"Bearer") in start["headers"]
    finally:
        await service.stop()


@pytest.mark.parametrize(
    "headers",
    [
        {"Authorization": "Bearer key-of-nobody-0123"},
        {"Authorization": "bearer  key-of-nobody-0123 "},
        {"X-API-Key": "key-of-nobody-0123"},
        {"Authorization": "Basic abc", "X-API-Key": "key-of-nobody-0123"},
    ],
)
async def test_a_key_no_tenant_holds_is_answered_401_before_its_body_is_read(
    headers: dict[str, str],
) -> None:
    """A body is parsed at ~21 times its size before its route authenticates it: anyone
    reaching the port made the ranker hold 1.3 GiB per 64 MiB request with any key at all.
    """
    service, api = await started(max_in_flight=1)
    try:
        stranger = Client([RECALL])
        sent = {**headers, "Content-Type": "application/json", "Content-Length": str(len(RECALL))}
        await api(scope(sent), stranger.receive, stranger.send)
        assert (stranger.status, stranger.reads) == (401, 0)
        assert stranger.problem["detail"] == "missing or unknown API key"
    finally:
        await service.stop()


@pytest.mark.parametrize(
    "headers",
    [
        {"Authorization": f"Bearer {KEY}"},
        {"Authorization": f"bearer {KEY} "},
        {"X-API-Key": f" {KEY}"},
        {"Authorization": "Basic abc", "X-API-Key": KEY},
    ],
)
async def test_a_tenants_key_in_any_form_the_routes_take_is_served(
    headers: dict[str, str],
) -> None:
    service, api = await started(max_in_flight=1)
    try:
        tenant = Client([RECALL])
        sent = {**headers, "Content-Type": "application/json", "Content-Length": str(len(RECALL))}
        await api(scope(sent), tenant.receive, tenant.send)
        assert tenant.status == 200
    finally:
        await service.stop()


async def test_keys_are_told_apart_at_the_edge_only_once_the_tenants_topic_is_read() -> None:
    """Before that, a key added on the topic may act: its route answers (503 until read)."""
    service = RecallService(Store(), Hashing(4), no_send, kernel_thread=False)  # type: ignore[arg-type]
    registry = TenantRegistry.of({"tenants": {"acme": {"api_keys": [KEY]}}})
    read = asyncio.Event()
    api = create_api(service, registry, tenants_read=read)
    await service.start()
    try:
        early = Client([RECALL])
        sent = {"X-API-Key": "key-added-on-the-topic", "Content-Length": str(len(RECALL))}
        await api(scope(sent), early.receive, early.send)
        assert early.status == 503
        read.set()
        late = Client([RECALL])
        await api(scope(sent), late.receive, late.send)
        assert (late.status, late.reads) == (401, 0)
    finally:
        await service.stop()


async def test_a_stalled_body_through_uvicorn_is_answered_408_and_frees_its_slot() -> None:
    """The same through the server that runs the API: its connection gets the problem reply."""
    import uvicorn

    from tests.infra import free_port

    service, api = await started(max_in_flight=1, body_timeout_s=0.3)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(api, host="127.0.0.1", port=port, log_level="error"))
    serving = asyncio.create_task(server.serve())
    try:
        while not server.started:
            await asyncio.sleep(0.01)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        head = f"POST /v1/recall HTTP/1.1\r\nHost: m\r\nX-API-Key: {KEY}\r\n"
        writer.write(
            f"{head}Content-Type: application/json\r\nContent-Length: 100\r\n\r\n".encode()
        )
        await writer.drain()  # and then nothing
        answer = await asyncio.wait_for(reader.read(4096), 10)
        writer.close()
        assert answer.startswith(b"HTTP/1.1 408 ")
        assert b"did not arrive within 0.3 s" in answer
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            f"{head}Content-Type: application/json\r\nContent-Length: {len(RECALL)}\r\n\r\n".encode()
            + RECALL
        )
        await writer.drain()
        again = await asyncio.wait_for(reader.read(4096), 10)
        writer.close()
        assert again.startswith(b"HTTP/1.1 200 ")  # the one slot was given back
    finally:
        server.should_exit = True
        await serving
        await service.stop()


def padded(size: int) -> bytes:
    """A recall body of ``size`` bytes (JSON takes trailing whitespace)."""
    return RECALL + b" " * (size - len(RECALL))


def declaring(size: int) -> dict[str, str]:
    return {"X-API-Key": KEY, "Content-Type": "application/json", "Content-Length": str(size)}


def retry_after(client: Client) -> bytes | None:
    start = next(m for m in client.sent if m["type"] == "http.response.start")
    return next((v for k, v in start["headers"] if k == b"retry-after"), None)


async def holder(api: FastAPI, request: dict[str, object], client: Client) -> asyncio.Task[None]:
    """``client``'s request served in the background, once it holds its share of the budget."""
    task = asyncio.create_task(api(request, client.receive, client.send))
    await asyncio.sleep(0.05)
    return task


def held(service: RecallService) -> float:
    return float(service.metrics.body_bytes_in_flight._value.get())


async def test_bodies_past_the_process_budget_are_answered_429_unread_until_it_comes_back() -> None:
    """Every tenant's bodies together hold at most MNEMO_MAX_BODY_BYTES_IN_FLIGHT: before, 256
    requests in flight could each hold a 64 MiB body (parsed at ~20 times its size).
    """
    service, api = await started(
        max_body_bytes=200_000, max_body_bytes_in_flight=300_000, body_timeout_s=0.3
    )
    try:
        stalled = Client([b'{"query": '], stall=True)  # holds its declared 200,000 bytes
        holding = await holder(api, scope(declaring(200_000)), stalled)
        assert held(service) == 200_000
        refused = Client([padded(150_000)])
        await api(scope(declaring(150_000)), refused.receive, refused.send)
        assert (refused.status, refused.reads) == (429, 0)
        assert "MNEMO_MAX_BODY_BYTES_IN_FLIGHT" in str(refused.problem["detail"])
        assert "200000" not in str(refused.problem["detail"])  # other tenants' bytes: theirs
        assert (refused.problem["retry_after_s"], retry_after(refused)) == (1, b"1")
        fits = Client([padded(100_000)])  # 200,000 + 100,000 is the budget
        await api(scope(declaring(100_000)), fits.receive, fits.send)
        assert fits.status == 200
        await asyncio.wait_for(holding, 5)
        assert stalled.status == 408
        again = Client([padded(150_000)])
        await api(scope(declaring(150_000)), again.receive, again.send)
        assert again.status == 200  # the stalled body's bytes were given back
        assert held(service) == 0
    finally:
        await service.stop()


async def test_a_small_body_is_never_refused_by_the_budget() -> None:
    """A tenant's large batches fill the budget: every tenant's recalls still pass."""
    service, api = await started(
        max_body_bytes=200_000, max_body_bytes_in_flight=200_000, body_timeout_s=0.3
    )
    try:
        stalled = Client([b'{"query": '], stall=True)
        holding = await holder(api, scope(declaring(200_000)), stalled)
        small = Client([padded(64 * 1024)])
        await api(scope(declaring(64 * 1024)), small.receive, small.send)
        assert small.status == 200
        larger = Client([padded(64 * 1024 + 1)])
        await api(scope(declaring(64 * 1024 + 1)), larger.receive, larger.send)
        assert (larger.status, larger.reads) == (429, 0)
        await asyncio.wait_for(holding, 5)
    finally:
        await service.stop()


async def test_a_chunked_body_is_refused_429_as_soon_as_its_bytes_pass_the_budget() -> None:
    service, api = await started(
        max_body_bytes=200_000, max_body_bytes_in_flight=200_000, body_timeout_s=0.3
    )
    try:
        chunked = {"X-API-Key": KEY, "Content-Type": "application/json"}
        stalled = Client([b'{"query": ' + b" " * 149_990], stall=True)  # holds the 150,000
        holding = await holder(api, scope(chunked), stalled)
        refused = Client([b" " * 60_000, b" " * 60_000, b" " * 60_000])
        await api(scope(chunked), refused.receive, refused.send)
        assert (refused.status, refused.reads) == (429, 2)  # 60,000 is small; 120,000 is not
        assert (refused.problem["retry_after_s"], retry_after(refused)) == (1, b"1")
        await asyncio.wait_for(holding, 5)
        again = Client([padded(100_000), b" " * 100_000])
        await api(scope(chunked), again.receive, again.send)
        assert again.status == 200
        assert held(service) == 0
    finally:
        await service.stop()


async def test_a_declared_body_no_route_reads_holds_nothing() -> None:
    """A GET of a long read (an export, a wait for a token) or a path no route serves, with a
    Content-Length, held its bytes for the whole request, past the body's timeout.
    """
    service, api = await started(max_body_bytes=200_000, max_body_bytes_in_flight=200_000)
    try:
        for method, path in (("GET", "/v1/recall"), ("POST", "/v1/nowhere")):
            client = Client([padded(200_000)])
            request = {**scope(declaring(200_000)), "method": method, "path": path}
            request["raw_path"] = path.encode()
            await api(request, client.receive, client.send)
            assert (client.status, client.reads) == ({"GET": 405, "POST": 404}[method], 0)
        assert held(service) == 0
    finally:
        await service.stop()


def test_a_body_budget_under_the_largest_body_is_refused_naming_it() -> None:
    with pytest.raises(ValidationError, match="MNEMO_MAX_BODY_BYTES_IN_FLIGHT=2048 is under"):
        RankerSettings(max_body_bytes=4096, max_body_bytes_in_flight=2048)
    assert RankerSettings(max_body_bytes=4096, max_body_bytes_in_flight=4096)
    with pytest.raises(ValueError, match="max_body_bytes_in_flight=2048: must be at least"):
        create_api(
            RecallService(Store(), Hashing(4), no_send),  # type: ignore[arg-type]
            TenantRegistry.of({"tenants": {}}),
            max_body_bytes=4096,
            max_body_bytes_in_flight=2048,
        )


async def test_a_body_past_the_budget_through_uvicorn_is_answered_429_with_retry_after() -> None:
    import uvicorn

    from tests.infra import free_port

    service, api = await started(
        max_body_bytes=200_000, max_body_bytes_in_flight=200_000, body_timeout_s=0.3
    )
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(api, host="127.0.0.1", port=port, log_level="error"))
    serving = asyncio.create_task(server.serve())
    head = f"POST /v1/recall HTTP/1.1\r\nHost: m\r\nX-API-Key: {KEY}\r\n"
    head += "Content-Type: application/json\r\n"
    try:
        while not server.started:
            await asyncio.sleep(0.01)
        _, holder = await asyncio.open_connection("127.0.0.1", port)
        holder.write(f"{head}Content-Length: 150000\r\n\r\n".encode() + b'{"query": ')
        await holder.drain()  # and then nothing: its 150,000 bytes are held
        await asyncio.sleep(0.1)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(f"{head}Content-Length: 100000\r\n\r\n".encode())
        await writer.drain()  # the headers alone are answered
        answer = await asyncio.wait_for(reader.read(4096), 10)
        writer.close()
        assert answer.startswith(b"HTTP/1.1 429 ")
        assert b"\r\nretry-after: 1\r\n" in answer.lower()
        holder.close()
        await asyncio.sleep(0.5)  # the holder's body timeout (or its disconnect) frees its bytes
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(f"{head}Content-Length: 100000\r\n\r\n".encode() + padded(100_000))
        await writer.drain()
        again = await asyncio.wait_for(reader.read(4096), 10)
        writer.close()
        assert again.startswith(b"HTTP/1.1 200 ")
    finally:
        server.should_exit = True
        await serving
        await service.stop()


async def test_a_length_with_leading_zeros_is_read_as_its_number() -> None:
    service, api = await started(max_body_bytes=1024)
    try:
        zeros = Client([RECALL])
        headers = {**declaring(len(RECALL)), "Content-Length": "0" * 30 + str(len(RECALL))}
        await api(scope(headers), zeros.receive, zeros.send)
        assert zeros.status == 200
    finally:
        await service.stop()


async def test_a_streamed_export_declaring_a_body_holds_none_and_streams_to_its_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A streamed reply reads the request for the client's disconnect: an export (a route that
    takes no body) declaring one took its share there, and with the budget full the refusal
    was raised inside the stream: a 200 cut off.
    """
    from ranker.listing import Page

    service, api = await started(
        max_body_bytes=200_000, max_body_bytes_in_flight=200_000, body_timeout_s=0.5
    )

    async def memory_ids(tenant_id: str) -> list[str]:
        return ["m1"]

    async def list_page(*_: object, **__: object) -> Page:
        return Page([ROW], None)

    monkeypatch.setattr(service, "memory_ids", memory_ids)
    monkeypatch.setattr(service, "list_page", list_page)
    try:
        stalled = Client([b'{"query": '], stall=True)
        holding = await holder(api, scope(declaring(200_000)), stalled)
        export = Client([b" " * 150_000])
        request = {**scope(declaring(150_000)), "method": "GET", "path": "/v1/export"}
        request["raw_path"] = b"/v1/export"
        await asyncio.wait_for(api(request, export.receive, export.send), 5)
        assert export.status == 200
        body = b"".join(m.get("body", b"") for m in export.sent if m["type"].endswith("body"))
        assert body.endswith(b'{"end":true,"count":1}\n')
        assert held(service) == 200_000  # the stalled body's alone
        await asyncio.wait_for(holding, 5)
    finally:
        await service.stop()


async def test_an_admin_body_over_the_largest_size_is_413_unread_with_the_admin_key() -> None:
    from tests.unit.test_tenant_admin import ADMIN, LocalLog

    log = LocalLog("127.0.0.1:1", "t.tenants", TenantRegistry.of({"tenants": {}}))
    service = RecallService(Store(), Hashing(4), no_send, kernel_thread=False)  # type: ignore[arg-type]
    api = create_api(service, log, admin_key=ADMIN, max_body_bytes=100_000)
    await service.start()
    try:
        for length in ("100001", "250000", "9" * 30):
            put = Client([b"{}"])
            headers = {"Authorization": f"Bearer {ADMIN}", "Content-Length": length}
            request = {**scope(headers), "method": "PUT", "path": "/v1/admin/tenants/initech"}
            request["raw_path"] = b"/v1/admin/tenants/initech"
            await api(request, put.receive, put.send)
            assert (put.status, put.reads) == (413, 0), length
    finally:
        await service.stop()


async def test_a_tenant_s_slow_bodies_hold_its_share_of_the_slots_not_every_tenant_s() -> None:
    """A walk sent 256 requests of one tenant that declared a body and sent one byte: each held
    a slot of the process, none of its tenant (taken as the route authenticates, after the body
    is read), so every other tenant was answered 429 for the 30 s body timeout. The share is
    now taken from the key before the body is read.
    """
    service = RecallService(Store(), Hashing(4), no_send, kernel_thread=False)  # type: ignore[arg-type]
    other = "key-globex-0123456789"
    keys = {"acme": {"api_keys": [KEY]}, "globex": {"api_keys": [other]}}
    api = create_api(service, TenantRegistry.of({"tenants": keys}), max_in_flight=4)
    slots = api.state.tenant_slots
    await service.start()
    try:
        stalled = [Client([b'{"query": '], stall=True) for _ in range(2)]  # acme's share: 2 of 4
        held_by = [await holder(api, scope(declaring(len(RECALL))), c) for c in stalled]
        assert slots.held == {"acme": 2}
        refused = Client([RECALL])
        await api(scope(declaring(len(RECALL))), refused.receive, refused.send)
        assert (refused.status, refused.reads) == (429, 0)
        assert "acme" in str(refused.problem["detail"])
        assert retry_after(refused) == b"1"
        served = Client([RECALL])
        globex = {**declaring(len(RECALL)), "X-API-Key": other}
        await api(scope(globex), served.receive, served.send)
        assert served.status == 200
        for task in held_by:
            task.cancel()
        await asyncio.gather(*held_by, return_exceptions=True)
        assert slots.held == {}
    finally:
        await service.stop()
