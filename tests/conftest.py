"""Session-wide real components, started only when a test asks for them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.infra import kafka_broker, milvus_server


@pytest.fixture(scope="session")
def milvus_server_uri(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with milvus_server(tmp_path_factory.mktemp("milvus-server")) as uri:
        yield uri


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    home: Path = tmp_path_factory.mktemp("kafka")
    with kafka_broker(home) as bootstrap:
        yield bootstrap


@pytest.fixture
def anyio_backend() -> str:
    """``pytest.mark.anyio`` tests run on asyncio only (Faust, aiokafka and uvicorn are asyncio)."""
    return "asyncio"
