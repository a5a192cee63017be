"""The ranker's Kafka producer: bounded in time, aiokafka's errors translated at this boundary.

Every send (enqueue and delivery) finishes within ``timeout_s`` or raises
:class:`~ranker.errors.Unavailable`; so does every aiokafka error. A broker that is down at
start-up does not stop the producer: it connects in the background, sends answer Unavailable
until then, and :meth:`EventProducer.ready` says so (``GET /readyz``). (The ranker's followers
of the tenants, keys and state topics do need the broker at start-up: README, readiness.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from ranker.errors import Unavailable, kafka_error
from storage.compacted import cancelled
from storage.kafka import PRODUCER_BATCH_BYTES, KafkaConnection

log = logging.getLogger(__name__)


class EventProducer:
    """``send(role, key, value)`` matches :data:`ranker.service.Send`. ``topic`` maps a role to
    its topic; ``timeout_s`` bounds each send and the start-up attempt; ``check_every_s`` is how
    long a readiness answer is cached.
    """

    def __init__(
        self,
        kafka: KafkaConnection | str,
        topic: Callable[[str], str],
        *,
        timeout_s: float = 5.0,
        check_every_s: float = 5.0,
    ) -> None:
        self.kafka = KafkaConnection.of(kafka)
        self.bootstrap = self.kafka.bootstrap
        self.topic = topic
        self.timeout_s = timeout_s
        self.check_every_s = check_every_s
        self._producer: AIOKafkaProducer | None = None
        self._connecting: asyncio.Task[None] | None = None
        self._checked: tuple[float, bool] = (float("-inf"), False)

    def _make(self) -> AIOKafkaProducer:
        timeout_ms = max(1000, int(self.timeout_s * 1000))
        return AIOKafkaProducer(
            **self.kafka.client(),
            acks="all",
            linger_ms=2,
            max_batch_size=PRODUCER_BATCH_BYTES,
            request_timeout_ms=timeout_ms,  # a batch stuck in the accumulator expires too
        )

    async def start(self) -> None:
        """Connect, or keep trying in the background when the broker does not answer now."""
        if not await self._connect():
            self._connecting = asyncio.create_task(self._reconnect(), name="producer-connect")

    async def _connect(self) -> bool:
        producer = self._make()
        try:
            await asyncio.wait_for(producer.start(), self.timeout_s)
        except (KafkaError, TimeoutError, OSError) as exc:
            log.warning("kafka producer: %s at %s; retrying", type(exc).__name__, self.bootstrap)
            with contextlib.suppress(Exception):
                await producer.stop()
            return False
        self._producer = producer
        return True

    async def _reconnect(self) -> None:
        delay = 0.5
        while not await self._connect():
            await asyncio.sleep(delay)
            delay = min(delay * 2, 10.0)
        log.info("kafka producer connected to %s", self.bootstrap)

    async def stop(self) -> None:
        if self._connecting is not None:
            await cancelled(self._connecting)
            self._connecting = None
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None

    @property
    def connected(self) -> bool:
        """True once the producer started (the broker answered at least once)."""
        return self._producer is not None

    async def ready(self) -> bool:
        """True when the broker answers a metadata request now (cached ``check_every_s``)."""
        at, ok = self._checked
        if time.monotonic() - at < self.check_every_s:
            return ok
        ok = False
        if self._producer is not None:
            try:
                client: Any = self._producer.client
                await asyncio.wait_for(client.fetch_all_metadata(), self.timeout_s)
                ok = True
            except (KafkaError, TimeoutError, OSError):
                ok = False
        self._checked = (time.monotonic(), ok)
        return ok

    async def send(self, role: str, key: bytes, value: bytes) -> Awaitable[object]:
        """Enqueue one message; its delivery (``RecordMetadata``) to await. Both raise
        Unavailable after ``timeout_s`` or on a Kafka error.
        """
        if self._producer is None:
            raise Unavailable("kafka", "produce", f"not connected to {self.bootstrap}")
        try:
            delivery = await asyncio.wait_for(
                self._producer.send(self.topic(role), key=key, value=value), self.timeout_s
            )
        except TimeoutError as exc:
            raise Unavailable("kafka", "produce", f"no answer in {self.timeout_s:g} s") from exc
        except KafkaError as exc:
            raise kafka_error("produce", exc) from exc
        return self._delivered(delivery)

    async def _delivered(self, delivery: Awaitable[object]) -> object:
        try:
            return await asyncio.wait_for(asyncio.shield(delivery), self.timeout_s)
        except TimeoutError as exc:
            msg = f"not acknowledged in {self.timeout_s:g} s"
            raise Unavailable("kafka", "produce", msg) from exc
        except KafkaError as exc:
            raise kafka_error("produce", exc) from exc
