"""The stream worker's Prometheus metrics: counting, labels, lag from a fake consumer, serving."""

from __future__ import annotations

from collections import defaultdict

import httpx
import pytest
from faust.types import TP
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from pydantic import ValidationError

from ranker.metrics import Metrics
from storage.records import RecordError
from streams.metrics import WorkerMetrics, consumer_lag, field_label
from streams.processor import Inbound, Outbound, dead_letter
from streams.settings import WorkerSettings

WRITES, ACCESS = "p.memory-writes", "p.access-events"


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


def lag_samples(registry: CollectorRegistry) -> dict[tuple[str, str], float]:
    return {
        (s.labels["topic"], s.labels["partition"]): s.value
        for metric in registry.collect()
        if metric.name == "mnemostream_worker_consumer_lag"
        for s in metric.samples
    }


class FakeConsumer:
    """What the lag reads of a Faust consumer: assignment, highwater, committed offsets."""

    def __init__(
        self, ends: dict[TP, int | None], committed: dict[TP, int | None] | None = None
    ) -> None:
        self.ends = ends
        self._committed_offset: defaultdict[TP, int | None] = defaultdict(lambda: None)
        self._committed_offset.update(committed or {})

    def assignment(self) -> set[TP]:
        return set(self.ends)

    def highwater(self, tp: TP) -> int | None:
        return self.ends[tp]


def letter(topic: str, field: str) -> Outbound:
    return dead_letter(Inbound(topic, 0, 7, b"acme/m1", b"{}"), RecordError(field, "v", "bad"))


def test_a_batch_counts_its_events_per_topic_and_its_size_per_agent() -> None:
    m = WorkerMetrics()
    with m.batch("writes", WRITES, 3):
        pass
    with m.batch("writes", WRITES, 2):
        pass
    with m.batch("access", ACCESS, 10):
        pass
    r = m.registry
    assert sample(r, "mnemostream_worker_events_total", topic=WRITES) == 5
    assert sample(r, "mnemostream_worker_events_total", topic=ACCESS) == 10
    assert sample(r, "mnemostream_worker_batch_size_count", agent="writes") == 2
    assert sample(r, "mnemostream_worker_batch_size_sum", agent="writes") == 5
    assert sample(r, "mnemostream_worker_batch_size_bucket", agent="writes", le="2.0") == 1
    assert sample(r, "mnemostream_worker_batch_size_count", agent="access") == 1
    assert sample(r, "mnemostream_worker_batch_seconds_count", agent="writes") == 2
    assert sample(r, "mnemostream_worker_batch_seconds_count", agent="access") == 1


def test_a_watched_topics_events_are_counted_from_zero_before_any_batch() -> None:
    """No series until the first batch ended: the stalled-worker alert (a rate of 0 while the
    lag grows) could not fire for a worker stuck since its start."""
    m = WorkerMetrics()
    m.watch(FakeConsumer({}), [WRITES, ACCESS])
    assert sample(m.registry, "mnemostream_worker_events_total", topic=WRITES) == 0
    assert sample(m.registry, "mnemostream_worker_events_total", topic=ACCESS) == 0


def test_a_failed_batch_counts_nothing() -> None:
    m = WorkerMetrics()
    with pytest.raises(RuntimeError), m.batch("writes", WRITES, 4):
        raise RuntimeError("milvus down for good")
    assert sample(m.registry, "mnemostream_worker_events_total", topic=WRITES) is None
    assert sample(m.registry, "mnemostream_worker_batch_seconds_count", agent="writes") is None


def test_milvus_sync_times_and_counts_rows() -> None:
    m = WorkerMetrics()
    with m.milvus_sync(upserts=3, deletes=1):
        pass
    with m.milvus_sync(upserts=2, deletes=0):
        pass
    r = m.registry
    assert sample(r, "mnemostream_worker_milvus_sync_seconds_count") == 2
    assert sample(r, "mnemostream_worker_milvus_rows_total", operation="upsert") == 5
    assert sample(r, "mnemostream_worker_milvus_rows_total", operation="delete") == 1


@pytest.mark.parametrize(
    ("field", "label"),
    [
        ("$", "$"),
        ("v", "v"),
        ("tenant_id", "tenant_id"),
        ("embedding[3]", "embedding"),
        ("tags[12]", "tags"),
        ("metadata.score.deep", "metadata"),
        ("kind", "kind"),
        ("strategies[0]", "strategies"),
        ("decision", "decision"),
        # a name from the input (an unknown field) must not become a label value
        ("key", "key"),  # the record's key: a misrouted or another tenant's
        ("surprise", "other"),
        ("surprise.x", "other"),
        ("", "other"),
    ],
)
def test_the_field_label_is_bounded(field: str, label: str) -> None:
    assert field_label(field) == label


def test_dead_letters_are_counted_by_source_topic_and_field_never_by_value() -> None:
    m = WorkerMetrics()
    audit = Outbound("audit", b"acme/m1", b'{"v": 1}')
    m.emitted(
        [
            letter(WRITES, "embedding[2]"),
            audit,
            letter(WRITES, "embedding"),
            letter(WRITES, "x-user-supplied-name"),
            letter(ACCESS, "memory_id"),
        ]
    )
    r = m.registry
    dl = "mnemostream_worker_dead_letter_total"
    assert sample(r, dl, topic=WRITES, field="embedding") == 2
    assert sample(r, dl, topic=WRITES, field="other") == 1
    assert sample(r, dl, topic=ACCESS, field="memory_id") == 1
    series = {
        tuple(sorted(s.labels.items()))
        for metric in r.collect()
        if metric.name == "mnemostream_worker_dead_letter"
        for s in metric.samples
        if s.name == dl
    }
    assert len(series) == 3


def test_lag_is_end_offset_minus_committed_for_the_consumed_topics() -> None:
    consumer = FakeConsumer(
        ends={
            TP(WRITES, 0): 100,
            TP(WRITES, 1): 50,
            TP(WRITES, 2): 30,  # nothing committed yet: all of it is lag
            TP(WRITES, 3): None,  # end offset not fetched yet: no sample
            TP(ACCESS, 0): 10,
            TP("app-memories-changelog", 0): 999,  # a table changelog: not ours to report
        },
        committed={TP(WRITES, 0): 40, TP(WRITES, 1): 50, TP(ACCESS, 0): 10},
    )
    assert consumer_lag(consumer, {WRITES, ACCESS}) == {
        (WRITES, 0): 60,
        (WRITES, 1): 0,
        (WRITES, 2): 30,
        (ACCESS, 0): 0,
    }
    m = WorkerMetrics()
    assert lag_samples(m.registry) == {}  # nothing watched yet
    m.watch(consumer, [WRITES, ACCESS])
    assert lag_samples(m.registry) == {
        (WRITES, "0"): 60,
        (WRITES, "1"): 0,
        (WRITES, "2"): 30,
        (ACCESS, "0"): 0,
    }
    # computed at scrape time: a commit and a revoked partition show at the next scrape
    consumer._committed_offset[TP(WRITES, 0)] = 100
    del consumer.ends[TP(WRITES, 2)]
    assert lag_samples(m.registry)[(WRITES, "0")] == 0
    assert (WRITES, "2") not in lag_samples(m.registry)


def test_a_consumer_that_is_not_ready_leaves_the_lag_empty_and_the_scrape_working() -> None:
    class NotStarted(FakeConsumer):
        def assignment(self) -> set[TP]:
            raise RuntimeError("Consumer thread not yet started")

    m = WorkerMetrics()
    m.watch(NotStarted({}), [WRITES])
    with m.batch("writes", WRITES, 1):
        pass
    text = Metrics(m.registry).render().decode()
    assert "mnemostream_worker_consumer_lag" in text  # the family, without samples
    assert lag_samples(m.registry) == {}
    assert sample(m.registry, "mnemostream_worker_events_total", topic=WRITES) == 1


def test_each_worker_has_its_own_registry() -> None:
    a, b = WorkerMetrics(), WorkerMetrics()
    with a.batch("writes", WRITES, 2):
        pass
    assert sample(a.registry, "mnemostream_worker_events_total", topic=WRITES) == 2
    assert sample(b.registry, "mnemostream_worker_events_total", topic=WRITES) is None


def test_the_ranker_serves_the_worker_metrics_it_is_given() -> None:
    worker = WorkerMetrics()
    with worker.batch("access", ACCESS, 7):
        pass
    ranker = Metrics(worker.registry)
    ranker.overloaded.inc()
    families = {f.name: f for f in text_string_to_metric_families(ranker.render().decode())}
    assert families["mnemostream_recall_overloaded"].samples[0].value == 1
    events = families["mnemostream_worker_events"].samples
    assert [(s.labels, s.value) for s in events if s.name.endswith("_total")] == [
        ({"topic": ACCESS}, 7)
    ]
    assert "mnemostream_worker_events_total" not in Metrics().render().decode()


def test_the_metrics_port_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MNEMO_METRICS_PORT", raising=False)
    assert WorkerSettings().metrics_port == 9102
    monkeypatch.setenv("MNEMO_METRICS_PORT", "0")
    assert WorkerSettings().metrics_port == 0
    monkeypatch.setenv("MNEMO_METRICS_PORT", "19102")
    assert WorkerSettings().metrics_port == 19102
    monkeypatch.setenv("MNEMO_METRICS_PORT", "-1")
    with pytest.raises(ValidationError):
        WorkerSettings()


def test_serve_answers_get_metrics() -> None:
    m = WorkerMetrics()
    with m.batch("writes", WRITES, 3):
        pass
    server = m.serve("127.0.0.1", 0)
    try:
        port = server.server_address[1]
        response = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
    finally:
        server.shutdown()
        server.server_close()
    assert response.status_code == 200
    families = {f.name: f for f in text_string_to_metric_families(response.text)}
    [total] = [
        s for s in families["mnemostream_worker_events"].samples if s.name.endswith("_total")
    ]
    assert total.labels == {"topic": WRITES}
    assert total.value == 3
