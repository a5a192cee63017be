"""Prometheus metrics of the stream worker.

``python -m streams`` serves them at ``GET /metrics`` on ``MNEMO_METRICS_PORT`` (:meth:`WorkerMetrics.
serve`); ``python -m server`` adds them to the ranker's ``/metrics`` instead. Every name starts with
``mnemostream_worker_``; label values are bounded: topic names, agent names, record field names
(never a value), partitions.

Consumer lag is computed when scraped, from the Faust consumer given to :meth:`WorkerMetrics.watch`:
for every assigned partition of the consumed topics, the broker's end offset as last seen by the
fetcher (``consumer.highwater(tp)``) minus the offset Faust committed, or found committed when the
partition was assigned (``consumer._committed_offset``, the value Faust itself commits from). Both are
the next offset to read, so a caught-up partition has lag 0.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any
from wsgiref.simple_server import WSGIServer

import orjson
from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from storage.records import AccessEventV1, ConsolidationRequestV1, DecisionV1, MemoryWriteV1
from streams import topics
from streams.processor import Outbound

log = logging.getLogger(__name__)

SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)

#: The ``field`` label of a dead letter: a top-level field of some record schema, ``$`` (the record
#: as a whole), ``key`` (the record's key), or ``other`` (a field no schema has: its name came
#: from the input).
KNOWN_FIELDS = frozenset(
    {"$", "key"}  # the record's key (another tenant's, a misrouted one)
    | {
        name
        for model in (MemoryWriteV1, DecisionV1, ConsolidationRequestV1, AccessEventV1)
        for name in model.model_fields
    }
)
OTHER_FIELD = "other"


def field_label(field: str) -> str:
    """The first segment of a field path (``embedding[3]`` -> ``embedding``, ``metadata.a.b`` ->
    ``metadata``) when it is a schema field; otherwise ``other``.
    """
    head = re.split(r"[.\[]", field, maxsplit=1)[0]
    return head if head in KNOWN_FIELDS else OTHER_FIELD


def consumer_lag(consumer: Any, consumed: Collection[str]) -> dict[tuple[str, int], int]:  # noqa: ANN401 - faust ConsumerT
    """Lag per (topic, partition) of the assigned partitions of the ``consumed`` topics.

    A partition whose end offset the fetcher has not seen yet is left out; a partition with no
    committed offset counts from 0 (the worker reads from the earliest offset).
    """
    committed: Mapping[Any, int | None] = dict(getattr(consumer, "_committed_offset", {}))
    lags: dict[tuple[str, int], int] = {}
    for tp in consumer.assignment():
        if tp.topic not in consumed:
            continue  # table changelogs: Faust reads them without committing
        end = consumer.highwater(tp)
        if end is None:
            continue
        lags[(tp.topic, tp.partition)] = max(0, end - (committed.get(tp) or 0))
    return lags


class _LagCollector:
    """The lag gauge, computed at each scrape from the watched consumer."""

    NAME = "mnemostream_worker_consumer_lag"
    HELP = "records not yet committed, per consumed partition (end offset minus committed offset)"

    def __init__(self) -> None:
        self.consumer: Any = None
        self.consumed: frozenset[str] = frozenset()

    def describe(self) -> Iterable[Metric]:
        return [GaugeMetricFamily(self.NAME, self.HELP, labels=["topic", "partition"])]

    def collect(self) -> Iterable[Metric]:
        family = GaugeMetricFamily(self.NAME, self.HELP, labels=["topic", "partition"])
        if self.consumer is not None:
            try:
                lags = consumer_lag(self.consumer, self.consumed)
            except Exception:  # a scrape must not fail while the consumer starts or rebalances
                log.debug("consumer lag not available", exc_info=True)
                lags = {}
            for (topic, partition), lag in sorted(lags.items()):
                family.add_metric([topic, str(partition)], lag)
        return [family]


class WorkerMetrics:
    """One registry per worker (tests build many in one process). The constructor does no I/O."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.events = Counter(
            "mnemostream_worker_events",
            "events consumed and processed, per topic",
            ["topic"],
            registry=self.registry,
        )
        self.dead_letters = Counter(
            "mnemostream_worker_dead_letter",
            "records sent to dead-letter, per source topic and rejected field",
            ["topic", "field"],
            registry=self.registry,
        )
        self.batch_size = Histogram(
            "mnemostream_worker_batch_size",
            "events per batch, per agent",
            ["agent"],
            buckets=SIZE_BUCKETS,
            registry=self.registry,
        )
        self.batch_seconds = Histogram(
            "mnemostream_worker_batch_seconds",
            "time to process one batch (decode, embed, reduce, sync, emit), per agent",
            ["agent"],
            buckets=SECONDS_BUCKETS,
            registry=self.registry,
        )
        self.sync_seconds = Histogram(
            "mnemostream_worker_milvus_sync_seconds",
            "time to sync one batch's touched memories to Milvus, retries included",
            buckets=SECONDS_BUCKETS,
            registry=self.registry,
        )
        self.synced_rows = Counter(
            "mnemostream_worker_milvus_rows",
            "rows sent to Milvus, per operation (upsert, delete)",
            ["operation"],
            registry=self.registry,
        )
        self.supersession_searches = Counter(
            "mnemostream_worker_supersession_searches",
            "searches for the memories a batch's stated facts may supersede, one per tenant, user"
            " and agent in the batch, by where"
            " they were answered: hot (the ranker's cache in this process) or milvus",
            ["source"],
            registry=self.registry,
        )
        self.consolidation_reads = Counter(
            "mnemostream_worker_consolidation_reads",
            "reads of a tenant's rows for its consolidation, by where they were answered: hot"
            " (the ranker's cache in this process) or milvus",
            ["source"],
            registry=self.registry,
        )
        self.flush_seconds = Histogram(
            "mnemostream_worker_commit_flush_seconds",
            "time a flush before an offset commit (or a Milvus sync, or dropping released parked"
            " accesses) waited for the broker to acknowledge the records buffered or emitted"
            " before it",
            buckets=SECONDS_BUCKETS,
            registry=self.registry,
        )
        self.flush_records = Histogram(
            "mnemostream_worker_commit_flush_records",
            "records a flush before an offset commit (or a Milvus sync, or dropping released parked"
            " accesses) waited for (not yet acknowledged when it began)",
            buckets=SIZE_BUCKETS,
            registry=self.registry,
        )
        self._lag = _LagCollector()
        self.registry.register(self._lag)

    def flushed(self, seconds: float, records: int) -> None:
        """Record one flush that took ``seconds`` waiting for ``records``."""
        self.flush_seconds.observe(seconds)
        self.flush_records.observe(records)

    @contextmanager
    def batch(self, agent: str, topic: str, size: int) -> Iterator[None]:
        """Time a batch of ``size`` events of ``topic``; counted only when it completes."""
        started = time.perf_counter()
        yield
        self.batch_seconds.labels(agent).observe(time.perf_counter() - started)
        self.batch_size.labels(agent).observe(size)
        self.events.labels(topic).inc(size)

    @contextmanager
    def milvus_sync(self, upserts: int, deletes: int) -> Iterator[None]:
        """Time one Milvus sync of ``upserts`` rows and ``deletes`` deletions."""
        started = time.perf_counter()
        yield
        self.sync_seconds.observe(time.perf_counter() - started)
        self.synced_rows.labels("upsert").inc(upserts)
        self.synced_rows.labels("delete").inc(deletes)

    def emitted(self, out: Sequence[Outbound]) -> None:
        """Count the dead letters among produced records (by source topic and field)."""
        for message in out:
            if message.role == topics.DEAD_LETTER:
                letter = orjson.loads(message.value)
                self.dead_letters.labels(letter["topic"], field_label(letter["field"])).inc()

    def watch(self, consumer: Any, consumed: Iterable[str]) -> None:  # noqa: ANN401 - faust ConsumerT
        """Report the lag of ``consumer`` on the ``consumed`` topics from now on (call it once the
        app runs: reading ``app.consumer`` earlier would create it), and count each topic's events
        from 0: a worker stalled since its start had no ``events_total`` series, and the stalled
        worker's alert (a rate of 0) could not fire.
        """
        self._lag.consumed = frozenset(consumed)
        self._lag.consumer = consumer
        for topic in self._lag.consumed:  # 0 until a batch ends: a rate over no series is no 0
            self.events.labels(topic)

    def serve(self, host: str, port: int) -> WSGIServer:
        """Serve ``GET /metrics`` on ``host:port`` from a daemon thread (start-up code only);
        returns the server (``shutdown()`` stops it).
        """
        server, _ = start_http_server(port, addr=host, registry=self.registry)
        log.info("worker metrics on http://%s:%d/metrics", host, port)
        return server
