"""Prometheus metrics of the ranker (served at ``GET /metrics``)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from ranker.batcher import BatchStats


class Metrics:
    """One registry per app (tests build many apps in one process)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
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
            "mnemostream_recall_seconds", "recall latency, end to end", registry=self.registry
        )
        self.overloaded = Counter(
            "mnemostream_recall_overloaded", "recalls refused with 429", registry=self.registry
        )

    def on_batch(self, stats: BatchStats) -> None:
        self.batch_size.observe(stats.size)
        self.queue_depth.set(stats.queued)

    def render(self) -> bytes:
        return generate_latest(self.registry)
