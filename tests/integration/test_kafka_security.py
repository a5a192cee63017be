"""The whole service on a broker that requires SASL: configured once (``MNEMO_KAFKA_*``), every
client (the worker's Faust app and topic admin, the ranker's producer, state view, offsets and
audit reader) authenticates; a client without credentials is refused by the broker.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from mnemostream import Client
from tests.integration.harness import Stack
from tests.integration.test_end_to_end import DIM, KEY, e, serve
from tests.integration.test_faults import Broker, running_broker
from tests.integration.test_streams import T0

pytestmark = pytest.mark.integration
SASL = {
    "MNEMO_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
    "MNEMO_KAFKA_SASL_MECHANISM": "PLAIN",
    "MNEMO_KAFKA_SASL_USERNAME": "mnemo",
    "MNEMO_KAFKA_SASL_PASSWORD": "mnemo-secret-1",
}


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    yield from running_broker(tmp_path / "kafka", KAFKA_SASL_PLAIN_USERS="mnemo:mnemo-secret-1")


@pytest.fixture
def server(broker: Broker, milvus_server_uri: str, tmp_path: Path) -> Iterator[str]:
    stack = Stack(broker.bootstrap, milvus_server_uri, tmp_path, ("acme",), dim=DIM)
    yield from serve(stack, tmp_path, **SASL)


def test_the_service_runs_on_a_sasl_broker(broker: Broker, server: str) -> None:
    with Client(server, KEY) as client:
        memory_id = client.remember("Dana keeps bees", embedding=e(0.0, 1.0), at=T0)
        found = client.recall(vector=e(0.0, 1.0), k=1, at=T0, track=False)
        assert [m.memory_id for m in found] == [memory_id]
        assert [h["kind"] for h in client.history(memory_id)][:1] == ["created"]
    assert asyncio.run(plaintext_refused(broker.bootstrap))


async def plaintext_refused(bootstrap: str) -> bool:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, request_timeout_ms=3000)
    try:
        await asyncio.wait_for(producer.start(), 10)
    except (KafkaError, TimeoutError):
        return True
    finally:
        await producer.stop()
    return False
