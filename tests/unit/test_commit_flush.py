"""The producer flush before each offset commit (``streams.flush.exact_flush``) over Faust's own
``ProducerBuffer`` and its sending loop, with the broker replaced by a slow one: each record is
handed over after 0.15 s (longer than the 0.1 s after which Faust's own flush gives up) and
acknowledged 0.05 s later.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import faust
import pytest
from faust.transport.producer import ProducerBuffer
from faust.types.tuples import FutureMessage, PendingMessage

from storage import StorageError
from streams.app import StreamWorker
from streams.flush import ExactFlush, exact_flush
from streams.metrics import WorkerMetrics
from streams.processor import Batch, Outbound

pytestmark = pytest.mark.anyio

HAND_OVER_S = 0.15
ACK_S = 0.05
ACKNOWLEDGED: Any = "acknowledged"  # stands for the broker's RecordMetadata


def record(n: int) -> FutureMessage:
    # no channel: the broker is fake
    pending = PendingMessage(None, f"k{n}".encode(), b"v", None, None, None, None, None, None)  # type: ignore[arg-type]
    return FutureMessage(pending)


class SlowBroker:
    """Replaces the buffer's hand-over to aiokafka: records in ``refuse`` fail on delivery,
    those in ``hold`` hold the sending loop forever.
    """

    def __init__(self, refuse: set[bytes] | None = None, hold: set[bytes] | None = None) -> None:
        self.refuse = refuse or set()
        self.hold = hold or set()  # never handed over
        self.handed: list[FutureMessage] = []

    async def send(self, fut: FutureMessage) -> None:
        if fut.message.key in self.hold:
            await asyncio.Event().wait()
        await asyncio.sleep(HAND_OVER_S)
        self.handed.append(fut)
        if fut.message.key in self.refuse:
            asyncio.get_running_loop().call_later(ACK_S, fut.set_exception, OSError("refused"))
        else:
            asyncio.get_running_loop().call_later(ACK_S, fut.set_result, ACKNOWLEDGED)


async def started(broker: SlowBroker) -> tuple[faust.App, ProducerBuffer, ExactFlush]:
    app = faust.App("flush", broker="kafka://localhost:1")  # the producer is never started
    buffer = app.producer.buffer
    assert isinstance(buffer, ProducerBuffer)
    buffer._send_pending = broker.send  # type: ignore[method-assign]  # before its loop starts
    exact = exact_flush(app)
    await buffer.start()
    return app, buffer, exact


@pytest.fixture
async def slow() -> AsyncIterator[tuple[faust.App, ProducerBuffer, ExactFlush, SlowBroker]]:
    broker = SlowBroker(refuse={b"k1"})
    app, buffer, exact = await started(broker)
    try:
        yield app, buffer, exact, broker
    finally:
        await buffer.stop()


async def test_the_commit_flush_returns_once_every_record_buffered_before_it_is_acknowledged(
    slow: tuple[faust.App, ProducerBuffer, ExactFlush, SlowBroker],
) -> None:
    app, buffer, _, _ = slow
    records = [record(n) for n in (0, 2, 3)]
    for fut in records:
        buffer.put(fut)
    await app.producer.flush()  # what the consumer awaits before it commits offsets
    assert [fut.result() for fut in records] == ["acknowledged"] * 3


async def test_each_commit_flush_reports_its_wait_and_the_records_it_waited_for(
    slow: tuple[faust.App, ProducerBuffer, ExactFlush, SlowBroker],
) -> None:
    _, buffer, exact, _ = slow
    metrics = WorkerMetrics()
    exact.flushed = metrics.flushed
    for n in (0, 2, 3):
        buffer.put(record(n))
    await exact.flush()
    await exact.flush()  # nothing left to wait for
    sample = metrics.registry.get_sample_value
    assert sample("mnemostream_worker_commit_flush_records_count") == 2
    assert sample("mnemostream_worker_commit_flush_records_sum") == 3
    assert (sample("mnemostream_worker_commit_flush_seconds_sum") or 0) >= HAND_OVER_S * 3


async def test_records_put_after_the_flush_began_do_not_hold_it(
    slow: tuple[faust.App, ProducerBuffer, ExactFlush, SlowBroker],
) -> None:
    _, buffer, exact, broker = slow
    first = record(0)
    buffer.put(first)
    flush = asyncio.ensure_future(exact.flush())
    await asyncio.sleep(0)  # the flush began
    later = [record(n) for n in range(2, 6)]
    for fut in later:  # a steady flow of table writes while the commit flushes
        buffer.put(fut)
    await flush
    assert first.done()
    assert not later[-1].done()  # the buffer still held it: the flush did not wait for it
    await exact.flush()
    assert [fut.result() for fut in later] == ["acknowledged"] * 4
    assert exact.unconfirmed == []
    assert len(broker.handed) == 5


async def test_a_record_that_failed_stops_every_commit_until_the_worker_restarts(
    slow: tuple[faust.App, ProducerBuffer, ExactFlush, SlowBroker],
) -> None:
    _, buffer, exact, _ = slow
    buffer.put(record(0))
    buffer.put(record(1))  # the broker refuses it
    for _ in range(2):
        with pytest.raises(StorageError) as failed:
            await exact.flush()
        assert failed.value.retriable
        assert "refused" in str(failed.value)


async def test_a_cancelled_flush_cancels_no_record(
    slow: tuple[faust.App, ProducerBuffer, ExactFlush, SlowBroker],
) -> None:
    _, buffer, exact, _ = slow
    fut = record(0)
    buffer.put(fut)
    flush = asyncio.ensure_future(exact.flush())
    await asyncio.sleep(0)
    flush.cancel()
    with pytest.raises(asyncio.CancelledError):
        await flush
    assert await fut == "acknowledged"


@pytest.mark.parametrize("end", ["stop", "crash"])
async def test_a_flush_raises_once_the_producer_ends_with_records_unacknowledged(end: str) -> None:
    """Its sending loop has ended: they never will be, and the commit must not happen (nor the
    flush wait forever: the worker could then never stop).
    """
    broker = SlowBroker(hold={b"k0"})  # never handed over, as to a broker that is gone
    _, buffer, exact = await started(broker)
    buffer.put(record(0))
    buffer.put(record(2))
    flush = asyncio.ensure_future(exact.flush())
    await asyncio.sleep(0)
    if end == "crash":
        await buffer.crash(RuntimeError("another service crashed"))
    else:
        stopping = asyncio.ensure_future(buffer.stop())
    with pytest.raises(StorageError) as failed:
        await asyncio.wait_for(flush, timeout=30)  # a guard against a hang, not a timing
    assert "2 records" in str(failed.value)
    if end == "stop":  # the buffer's own flush, Faust's, refuses to flush a stopping buffer
        (stopped,) = await asyncio.gather(stopping, return_exceptions=True)
        assert "Cannot flush" in str(stopped)


async def test_acknowledged_records_are_let_go_without_a_commit(
    slow: tuple[faust.App, ProducerBuffer, ExactFlush, SlowBroker],
) -> None:
    _, buffer, exact, _ = slow
    exact.prune_at = 3
    first = [record(0), record(1)]  # the broker refuses record 1
    for fut in first:
        buffer.put(fut)
    await asyncio.wait(first)
    later = record(2)
    buffer.put(later)  # the third put prunes: the failed and the open record stay
    assert exact.unconfirmed == [first[1], later]
    assert exact.prune_at == 4


def test_exact_flush_replaces_the_buffer_s_put_and_the_producer_s_flush() -> None:
    """On the instances Faust calls: the consumer and the app flush ``app.producer``; tables put
    into ``app.producer.buffer``. The buffer's own flush (run when it stops) stays Faust's.
    """
    app: Any = faust.App("flush-path", broker="kafka://localhost:1")  # no I/O
    exact = exact_flush(app)
    assert app.producer.buffer.put == exact.put
    assert app.producer.flush == exact.flush
    assert app.producer.buffer.flush.__func__ is ProducerBuffer.flush


@pytest.mark.parametrize("setting", ["producer_threaded", "stream_publish_on_commit"])
def test_a_setting_under_which_records_never_resolve_here_is_refused(setting: str) -> None:
    settings: dict[str, Any] = {"broker": "kafka://localhost:1", setting: True}
    app: Any = faust.App("flush-path", **settings)
    with pytest.raises(ValueError, match=setting):
        exact_flush(app)


async def test_the_records_a_batch_emits_are_waited_for_by_the_commit_flush() -> None:
    """Audit, dead-letter and derived records go past the buffer (``Topic.send``): a failed
    delivery of one must stop the commit as a table write's does.
    """
    loop = asyncio.get_running_loop()
    sent: list[asyncio.Future[Any]] = []

    class Topic:
        async def send(self, key: bytes, value: bytes) -> asyncio.Future[Any]:
            sent.append(loop.create_future())
            return sent[-1]

    buffer = SimpleNamespace(put=lambda fut: None, flush=None, should_stop=False)
    exact = ExactFlush(buffer)
    worker = SimpleNamespace(
        topics={"audit": Topic(), "dead-letter": Topic()},
        deliveries=exact,
        replay=False,
        applied=None,
        owed=[],
        services=SimpleNamespace(metrics=SimpleNamespace(emitted=lambda out: None)),
    )
    out = [Outbound("audit", b"acme/m1", b"{}"), Outbound("dead-letter", b"acme/m2", b"{}")]
    await StreamWorker.emit(worker, Batch(out=out))  # type: ignore[arg-type]
    flush = asyncio.ensure_future(exact.flush())
    await asyncio.sleep(0)
    sent[0].set_result(ACKNOWLEDGED)
    await asyncio.sleep(0)
    assert not flush.done()
    sent[1].set_exception(OSError("refused"))
    with pytest.raises(StorageError):
        await flush
