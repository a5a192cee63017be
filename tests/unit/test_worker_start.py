"""What a process does at start besides serving: the compaction a stopped worker owed, the hot
cache's warm-up."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, cast

import faust
import httpx
import orjson
import pytest

from ranker import warmup
from ranker.__main__ import TenantsRead
from ranker.api import create_api
from ranker.service import RecallService
from storage import StorageError
from storage.embedding import Hashing
from storage.tenant_log import TenantLog, TenantLogError
from storage.tenants import TenantRegistry
from streams import __main__ as worker_main
from streams import rebuild
from streams.app import Services, StreamWorker
from streams.rebuild import Resynced
from streams.settings import WorkerSettings

KEY = "key-acme-0123456789"
pytestmark = pytest.mark.anyio


class Store:
    def __init__(self, fails: bool = False) -> None:
        self.asked = 0
        self.fails = fails

    def compact(self) -> None:
        self.asked += 1
        if self.fails:
            raise StorageError("compact", "Milvus is busy", retriable=True)


@pytest.mark.parametrize(("interval_s", "asked"), [(600.0, 1), (0.0, 0)])
def test_a_start_asks_milvus_to_compact_what_the_stopped_worker_owed(
    monkeypatch: pytest.MonkeyPatch, interval_s: float, asked: int
) -> None:
    """A compaction waiting out its interval ended with the process (SIGTERM, a rolling
    restart), and the restarted worker asked again only at its next delete, which might never
    come: an erased memory's words stayed in a Milvus server's segments.
    """
    monkeypatch.setattr(rebuild, "resync", lambda *a, **kw: Resynced(0, 0, 0, 0, 0))
    store = Store()
    settings = WorkerSettings(milvus_compact_interval_s=interval_s)
    worker_main.resync_milvus(settings, cast(Any, store))
    assert store.asked == asked


def test_a_failed_ask_at_start_is_logged_and_the_start_goes_on(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(rebuild, "resync", lambda *a, **kw: Resynced(3, 3, 3, 0, 0))
    done = worker_main.resync_milvus(WorkerSettings(), cast(Any, Store(fails=True)))
    assert done.rows == 3
    assert "asking Milvus to compact at start failed" in caplog.text


def test_a_hot_cache_preload_failing_in_any_way_is_logged_as_it_fails(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A row that did not decode (a TypeError, not a StorageError) ended the warm-up silently:
    readiness passed, the ready line ``make up`` waits for never came, and the error was logged
    only at shutdown.
    """

    class Broken:
        def preload(self, tenant_ids: object) -> tuple[int, int]:
            raise TypeError("'NoneType' object is not iterable")

    asyncio.run(warmup._preload(cast(Any, Broken()), []))
    assert "hot cache preload failed" in caplog.text
    assert "NoneType" in caplog.text


async def test_a_ranker_answers_503_until_the_tenants_topic_is_read_then_serves() -> None:
    """The topic could not be read at start-up: the ranker served the tenants file's view, in
    which a key the topic revoked still acted and a tenant made through the admin API got 401.
    """
    attempts = []

    class Log(TenantLog):
        async def start(self) -> None:
            return None

        async def catch_up(self, timeout_s: float | None = None, *, refresh: bool = False) -> None:
            attempts.append(1)
            if len(attempts) == 1:
                raise TenantLogError("partitions [0] not read within 10 s")
            self.apply(b"acme", orjson.dumps({"v": 1, "tenant_id": "acme", "deleted": True}))
            self.refresh()

        async def stop(self) -> None:
            return None

    registry = Log(
        "127.0.0.1:1", "t.tenants", TenantRegistry.of({"tenants": {"acme": {"api_keys": [KEY]}}})
    )
    read = TenantsRead(registry)
    service = RecallService(cast(Any, None), Hashing(4), cast(Any, None))
    api = create_api(service, registry, tenants_read=read.done)
    transport = httpx.ASGITransport(app=api)
    async with httpx.AsyncClient(transport=transport, base_url="http://m") as http:
        await read.start()
        assert not read.done.is_set()
        early = await http.get("/v1/memories", headers={"X-API-Key": KEY})
        for _ in range(200):  # the background read, retried a second later
            if read.done.is_set():
                break
            await asyncio.sleep(0.01)
        await asyncio.wait_for(read.done.wait(), 5)
        later = await http.get("/v1/memories", headers={"X-API-Key": KEY})
        await read.stop()
    assert early.status_code == 503, early.text
    assert "tenants topic" in early.json()["detail"]
    assert early.headers["retry-after"] == "1"
    assert later.status_code == 401  # the topic deleted acme: its file key no longer acts


def test_the_worker_is_built_from_the_tenants_read_at_start_up_without_reading_again(
    tmp_path: Path,
) -> None:
    """Constructors do no I/O: the worker's app read ``MNEMO_TENANTS_FILE`` again when built,
    a second reading of a file the start-up had checked (and a file replaced in between made
    the worker's tenants differ from the ones the start-up validated).
    """
    gone = tmp_path / "tenants.json"  # never written: building must not read it
    settings = WorkerSettings(
        tenants_file=gone, data_dir=tmp_path, milvus_uri=str(tmp_path / "m.db")
    )
    registry = TenantRegistry.open_to(["acme"])
    services = Services(cast(Any, None), Hashing(settings.embedding_dim), registry=registry)
    app = faust.App("built", store="memory://", datadir=str(tmp_path), web_enabled=False)
    worker = StreamWorker(app, settings, services)
    assert worker.tenants.base is registry
    assert worker.tenants.get("acme") is not None
