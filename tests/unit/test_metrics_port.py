"""The ranker's metrics count every tenant's traffic together: with ``MNEMO_RANKER_METRICS_PORT``
they are served on a port of their own and no longer on the API's, which tenants reach."""

from __future__ import annotations

import httpx
import pytest
from prometheus_client import CollectorRegistry, Counter
from pydantic import ValidationError

from ranker.api import create_api
from ranker.metrics import Metrics, MetricsPort
from ranker.service import RecallService
from ranker.settings import RankerSettings
from storage import MilvusConfig, MilvusStore
from storage.embedding import Hashing
from storage.tenants import TenantRegistry

pytestmark = pytest.mark.anyio


async def _no_send(*_: object) -> object:
    raise AssertionError("nothing is produced here")


def service(metrics: Metrics) -> RecallService:
    store = MilvusStore(MilvusConfig("unused.db", dim=4))
    return RecallService(store, Hashing(4), _no_send, metrics=metrics)  # type: ignore[arg-type]


async def test_the_metrics_leave_the_api_port_for_their_own() -> None:
    worker = CollectorRegistry()  # python -m server serves the worker's too
    Counter("mnemostream_worker_events", "events", registry=worker).inc(3)
    metrics = Metrics(worker)
    registry = TenantRegistry.of({"tenants": {"acme": {"api_keys": ["key-acme-0123456789"]}}})
    for route, status in ((True, 200), (False, 404)):
        api = create_api(service(metrics), registry, metrics_route=route)
        transport = httpx.ASGITransport(app=api)
        async with httpx.AsyncClient(transport=transport, base_url="http://m") as http:
            assert (await http.get("/metrics")).status_code == status
    port = MetricsPort(metrics, "127.0.0.1", 0)
    await port.start()
    try:
        url = f"http://127.0.0.1:{port.bound_port}/metrics"
        async with httpx.AsyncClient() as http:
            served = await http.get(url)
            # a subset by name (a 500 when the server was handed Metrics itself)
            some = await http.get(url, params={"name[]": "mnemostream_worker_events_total"})
        taken = MetricsPort(metrics, "127.0.0.1", port.bound_port)
        with pytest.raises(OSError, match="MNEMO_RANKER_METRICS_PORT="):
            await taken.start()
    finally:
        await port.stop()
    assert served.status_code == 200
    assert "mnemostream_recall_batch_size" in served.text
    assert "mnemostream_worker_events_total 3.0" in served.text
    assert some.status_code == 200
    samples = [line for line in some.text.splitlines() if not line.startswith("#")]
    assert samples == ["mnemostream_worker_events_total 3.0"]
    assert port.bound_port == 0  # stopped


def test_the_metrics_port_is_not_the_apis() -> None:
    """Both on one port: the metrics took it before the API listened, which then failed to
    start with a bare "address already in use", after every client had connected."""
    with pytest.raises(ValidationError, match="MNEMO_RANKER_METRICS_PORT=8080 is MNEMO_PORT"):
        RankerSettings(port=8080, ranker_metrics_port=8080)
    assert RankerSettings(port=8080, ranker_metrics_port=9103).ranker_metrics_port == 9103
