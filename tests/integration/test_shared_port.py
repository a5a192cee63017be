"""Several HTTP processes on one port (``make up STACK_EDGES=1``): ``python -m server`` (worker,
ranker, Milvus Lite) writes the local address of its Milvus Lite to a file, and a ``python -m
ranker`` reaches the same collection through it and serves the same port (``MNEMO_REUSE_PORT``).
Real broker, real processes: a write acknowledged by either process is recalled, with its
read-your-writes token, through whichever process a new connection lands on.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.infra import ROOT
from tests.integration.harness import Stack, terminate
from tests.integration.test_durability import DIM, KEY, Server

pytestmark = pytest.mark.integration


class Edge:
    """``python -m ranker`` on the server's port and its Milvus Lite endpoint."""

    def __init__(self, server: Server, endpoint: str, workdir: Path) -> None:
        self.env = {
            **server.env,
            "MNEMO_MILVUS_URI": endpoint,
            "MNEMO_REUSE_PORT": "true",
            "MNEMO_AFTER_TIMEOUT_S": "30",
        }
        self.log_path = workdir / "edge.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "ranker"], cwd=ROOT, env=self.env, stdout=log, stderr=log
            )
        deadline = time.monotonic() + 120
        while not re.search(r"hot cache: \d+ rows|preload failed", self.log()):
            assert self.proc.poll() is None, self.log()
            assert time.monotonic() < deadline, self.log()
            time.sleep(0.2)
        assert "preload failed" not in self.log(), self.log()

    def stop(self) -> None:
        terminate(self.proc)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@pytest.fixture
def processes(kafka_bootstrap: str, tmp_path: Path) -> Iterator[tuple[Server, Edge]]:
    stack = Stack(kafka_bootstrap, "milvus-lite", tmp_path, ("acme",), dim=DIM)
    stack.create_topics()
    server = Server(stack, tmp_path)
    endpoint_file = tmp_path / "milvus.endpoint"
    server.env["MNEMO_REUSE_PORT"] = "true"
    server.env["MNEMO_MILVUS_ENDPOINT_FILE"] = str(endpoint_file)
    server.env["MNEMO_COMMIT_INTERVAL_S"] = "0.5"  # an edge's `after` waits for the commit
    server.start()
    edge = Edge(server, endpoint_file.read_text().strip(), tmp_path)
    try:
        edge.start()
        yield server, edge
    finally:
        edge.stop()
        server.stop()


def axis(i: int) -> list[float]:
    return [1.0 if j == i else 0.0 for j in range(DIM)]


def fresh(url: str) -> httpx.Client:
    """A client on a connection of its own (the kernel picks a process per connection)."""
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {KEY}"}, timeout=60)


def test_both_processes_serve_the_port_and_read_each_others_writes(
    processes: tuple[Server, Edge],
) -> None:
    server, edge = processes
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+", edge.env["MNEMO_MILVUS_URI"])
    written: list[tuple[str, str]] = []
    for i in range(DIM):
        with fresh(server.url) as client:
            answer = client.post(
                "/v1/memories",
                json={"memories": [{"content": f"shared note {i}", "embedding": axis(i)}]},
            )
            assert answer.status_code == 200, answer.text
            (memory_id,) = answer.json()["ids"]
            written.append((memory_id, answer.json()["token"]))
    for _ in range(3):
        for i, (memory_id, token) in enumerate(written):
            with fresh(server.url) as client:
                body = {"vector": axis(i), "k": 1, "track": False, "after": [token]}
                answer = client.post("/v1/recall", json=body)
                assert answer.status_code == 200, answer.text
                found = [r["memory_id"] for r in answer.json()["results"]]
                assert found == [memory_id], (server.log(), edge.log()[-4000:])
    # 24 recalls on connections of their own: both processes answered some (p of not: 2^-23)
    for name, log in (
        ("server", server.log_path.read_text(errors="replace")),
        ("edge", edge.log()),
    ):
        assert "POST /v1/recall 200" in log, f"the {name} answered no recall:\n{log[-4000:]}"
