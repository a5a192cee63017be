"""Prometheus metrics of the ranker (served at ``GET /metrics``, on the API's port or its own)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    start_http_server,
)
from prometheus_client.registry import Collector

from ranker.batcher import BatchStats

log = logging.getLogger(__name__)


class Metrics:
    """One registry per app (tests build many apps in one process).

    ``also``: more registries served after this one at ``/metrics`` (``python -m server`` passes the
    stream worker's, which runs in the same process); their metric names must differ from ours.
    """

    def __init__(self, *also: Collector) -> None:
        self.registry = CollectorRegistry()
        self.served = CollectorRegistry(support_collectors_without_names=True)
        """What ``/metrics`` serves: this registry's metrics, then those of ``also`` (a registry
        of registries: a scrape may ask it for a subset, ``?name[]=``)."""
        for collector in (self.registry, *also):
            self.served.register(collector)
        self.batch_size = Histogram(
            "mnemostream_recall_batch_size",
            "requests scored in one torch pass",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
            registry=self.registry,
        )
        self.queue_depth = Gauge(
            "mnemostream_recall_queue_depth", "requests waiting for a batch", registry=self.registry
        )
        self.latency = Histogram(
            "mnemostream_recall_seconds",
            "recall latency, end to end: the read-your-writes wait, the candidate search, scoring",
            registry=self.registry,
        )
        self.overloaded = Counter(
            "mnemostream_recall_overloaded",
            "recalls refused with 429 because the batcher's queue was full (the other 429s: in"
            " flight, per tenant, rate limits, are in mnemostream_http_responses_total)",
            registry=self.registry,
        )
        self.http_responses = Counter(
            "mnemostream_http_responses",
            "HTTP responses by route (its path template) and status",
            ["route", "status"],
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "mnemostream_http_in_flight",
            "API requests being served (admission control refuses more than MNEMO_MAX_IN_FLIGHT)",
            registry=self.registry,
        )
        self.body_bytes_in_flight = Gauge(
            "mnemostream_http_body_bytes_in_flight",
            "request body bytes the API requests being served hold (declared or arrived; admission"
            " control refuses more than MNEMO_MAX_BODY_BYTES_IN_FLIGHT, but for bodies of at most"
            " 64 KiB, which may add up to MNEMO_MAX_IN_FLIGHT times that)",
            registry=self.registry,
        )

        self.vector_searches = Counter(
            "mnemostream_vector_searches",
            "vector candidate searches by where they were answered: hot (the ranker's cache) or"
            " milvus (a large or cold tenant, or a filter the cache does not evaluate)",
            ["source"],
            registry=self.registry,
        )
        self.hot_rows = Gauge(
            "mnemostream_hot_cache_rows", "rows the hot cache holds", registry=self.registry
        )
        self.hot_loads = Gauge(
            "mnemostream_hot_cache_loads",
            "tenants the hot cache has read whole from Milvus since start (a preload counts each"
            " tenant it met); a tenant its process alone writes starts from those writes instead",
            registry=self.registry,
        )

    def on_batch(self, stats: BatchStats) -> None:
        self.batch_size.observe(stats.size)
        self.queue_depth.set(stats.queued)

    def render(self) -> bytes:
        return generate_latest(self.served)


class MetricsPort:
    """``GET /metrics`` of ``metrics`` on a port of its own (``MNEMO_RANKER_METRICS_PORT``),
    served from a daemon thread between :meth:`start` and :meth:`stop`; the constructor does no
    I/O.
    """

    def __init__(self, metrics: Metrics, host: str, port: int) -> None:
        self.metrics, self.host, self.port = metrics, host, port
        self._server: Any = None

    async def start(self) -> None:
        """Listen; raises OSError naming the setting when the port is taken."""
        try:
            self._server, _ = start_http_server(
                self.port, addr=self.host, registry=self.metrics.served
            )
        except OSError as exc:
            where = f"MNEMO_RANKER_METRICS_PORT={self.port} on {self.host}"
            raise OSError(exc.errno, f"{where}: {exc.strerror}") from exc
        log.info("ranker metrics on http://%s:%d/metrics", self.host, self.bound_port)

    @property
    def bound_port(self) -> int:
        """The port listened on (``port`` 0: the one the system gave); 0 when not started."""
        return int(self._server.server_port) if self._server is not None else 0

    async def stop(self) -> None:
        if self._server is not None:
            await asyncio.to_thread(self._server.shutdown)
            self._server.server_close()
            self._server = None
