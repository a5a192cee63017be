"""End to end: `python -m server` (worker + ranker + embedded Milvus Lite) on a real broker, via the SDK."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from mnemostream import Client
from tests.infra import ROOT, free_port
from tests.integration.harness import Stack, eventually, wait_for_http
from tests.integration.test_streams import T0

pytestmark = pytest.mark.integration
KEY = "e2e-key-0123456789abcdef"
DIM = 8


@pytest.fixture
def server(make_stack: Callable[..., Stack], tmp_path: Path) -> Iterator[str]:
    stack = make_stack(("acme",), dim=DIM)
    tenants = tmp_path / "tenants.json"
    tenants.write_text(json.dumps({"tenants": {"acme": {"api_keys": [KEY]}}}))
    port = free_port()
    env = {
        **stack.env(),
        "MNEMO_MILVUS_URI": str(tmp_path / "milvus.db"),
        "MNEMO_MILVUS_PARTITION_KEY": "true",
        "MNEMO_TENANTS_FILE": str(tenants),
        "MNEMO_TENANTS": "",
        "MNEMO_PORT": str(port),
    }
    log_path = tmp_path / "server.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "server"], cwd=ROOT, env=env, stdout=log, stderr=log
        )
    url = f"http://127.0.0.1:{port}"
    wait_for_http(url, proc, log_path)
    yield url
    proc.terminate()
    proc.wait(60)


def test_write_recall_and_recall_counts_grow(server: str) -> None:
    query = [1.0, *([0.0] * (DIM - 1))]
    with Client(server, KEY) as client:
        ids = [
            client.remember(
                f"note {i}",
                embedding=[1.0, i / 10, *([0.0] * (DIM - 2))],
                importance=0.6,
                memory_type="semantic",
                at=T0,
            )
            for i in range(3)
        ]
        eventually(
            lambda: len(client.recall(vector=query, k=5, at=T0, track=False)) == 3, 60, "written"
        )
        first = client.recall(vector=query, k=2, at=T0)
        assert [m.memory_id for m in first] == ids[:2]  # most similar first, equal otherwise

        def recalls() -> list[int]:
            found = [client.get(i) for i in ids]
            return [m.recall_count if m is not None else -1 for m in found]

        eventually(lambda: recalls() == [1, 1, 0], 60, "recall access events applied")
        client.recall(vector=query, k=1, at=T0)
        eventually(lambda: recalls() == [2, 1, 0], 60, "second recall applied")

        # a weak working memory fades out of recall: archived by the worker, not returned
        weak = client.remember(
            "a passing remark",
            embedding=[1.0, 0.05, *([0.0] * (DIM - 2))],
            importance=0.1,
            memory_type="working",
            at=T0,
        )
        eventually(
            lambda: (
                weak in {m.memory_id for m in client.recall(vector=query, k=5, at=T0, track=False)}
            ),
            60,
            "weak memory written",
        )
        later = T0 + timedelta(days=30)
        assert weak not in {m.memory_id for m in client.recall(vector=query, k=5, at=later)}

        def weak_state() -> str | None:
            found = client.get(weak)
            return None if found is None else found.state

        eventually(lambda: weak_state() == "archived", 60, "faded candidate archived")
