"""The producer flush before each offset commit (``streams.app.bound_flush``) over Faust's own
``ProducerBuffer.flush_atmost`` and a buffer that never empties (a steady flow of table writes).
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

import faust
import pytest
from faust.transport.producer import ProducerBuffer

from streams.app import bound_flush

pytestmark = pytest.mark.anyio


class FlowingBuffer:
    """Faust's sending loop (take one, send it, signal) over a deque, where each of the first
    ``flow`` sends is followed by a new message: until then the buffer never empties. Each
    signal is seen by the flush before the next send begins, the tightest case for a flush
    that counts signals.
    """

    state = "running"
    flush_atmost: Any = ProducerBuffer.flush_atmost
    flush: Any = ProducerBuffer.flush  # replaced by bound_flush

    def __init__(self, held: int, flow: int = 0) -> None:
        self.pending = deque(range(held))
        self.flow = flow
        self.sent: list[int] = []
        self.message_sent = asyncio.Event()
        self.written = held

    @property
    def size(self) -> int:
        return len(self.pending)

    async def run(self) -> None:
        while self.pending:
            message = self.pending.popleft()
            await asyncio.sleep(0)  # the send: another message is taken meanwhile
            self.sent.append(message)
            if len(self.sent) < self.flow:
                self.pending.append(self.written)
                self.written += 1
            self.message_sent.set()
            while self.message_sent.is_set():
                await asyncio.sleep(0)


async def test_a_commit_flush_sends_what_the_buffer_held_and_ends_under_a_steady_flow() -> None:
    buffer = FlowingBuffer(held=50, flow=1000)
    sender = asyncio.create_task(buffer.run())
    try:
        await asyncio.sleep(0)  # message 0 is being sent: the buffer holds 1..49
        held = set(range(50))
        bound_flush(buffer)
        await buffer.flush()  # Faust's own flush would wait until the flow ends
        assert held <= set(buffer.sent)
        assert len(buffer.sent) < buffer.flow  # it ended while the flow went on
    finally:
        sender.cancel()


async def test_a_commit_flush_of_an_empty_buffer_waits_for_no_send() -> None:
    buffer = FlowingBuffer(held=0)
    bound_flush(buffer)
    waits: list[int | None] = []

    async def flush_atmost(max_messages: int | None) -> int:
        waits.append(max_messages)
        return 0

    buffer.flush_atmost = flush_atmost
    await buffer.flush()
    assert waits == []


async def test_the_producer_flush_before_a_commit_goes_through_the_buffer_flush_replaced() -> None:
    """``bound_flush`` replaces ``buffer.flush`` on the instance: Faust's producer (the aiokafka
    driver, which the consumer flushes before each commit) must call it there, not around it.
    """
    producer = faust.App("flush-path", broker="kafka://localhost:1").producer  # no I/O
    bound_flush(producer.buffer)
    flushes: list[int] = []

    async def flush_atmost(max_messages: int | None) -> int:
        flushes.append(max_messages or 0)
        return 0

    producer.buffer.flush_atmost = flush_atmost  # type: ignore[method-assign,assignment]
    producer.buffer.pending.put_nowait(object())  # one message held, none being sent
    await producer.flush()
    assert flushes == [2]
