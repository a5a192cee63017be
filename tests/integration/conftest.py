from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.integration.harness import Stack, WorkerProcess


@pytest.fixture
def make_stack(
    kafka_bootstrap: str, milvus_server_uri: str, tmp_path: Path
) -> Callable[..., Stack]:
    def make(tenants: tuple[str, ...] = ("acme",), **kw: object) -> Stack:
        return Stack(kafka_bootstrap, milvus_server_uri, tmp_path, tenants, **kw)  # type: ignore[arg-type]

    return make


@pytest.fixture
def workers() -> Iterator[list[WorkerProcess]]:
    """Worker processes started by a test; all are stopped at its end."""
    started: list[WorkerProcess] = []
    yield started
    for worker in started:
        worker.stop()
