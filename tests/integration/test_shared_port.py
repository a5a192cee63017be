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
from types import SimpleNamespace

import httpx
import pytest

from mnemostream import Client
from tests.infra import ROOT, free_port
from tests.integration.harness import Stack, terminate
from tests.integration.test_durability import DIM, KEY, N, Server, embedding, write_memories
from tests.integration.test_read_your_writes import metric

pytestmark = pytest.mark.integration


class Edge:
    """``python -m ranker`` on the server's port and its Milvus Lite endpoint."""

    def __init__(
        self, server: Server, endpoint: str, workdir: Path, port: int | None = None
    ) -> None:
        """``port``: listen there alone, not on the server's port."""
        self.env = {
            **server.env,
            "MNEMO_MILVUS_URI": endpoint,
            "MNEMO_REUSE_PORT": "true" if port is None else "false",
            "MNEMO_AFTER_TIMEOUT_S": "30",
        }
        if port is not None:
            self.env["MNEMO_PORT"] = str(port)
        self.url = f"http://127.0.0.1:{self.env['MNEMO_PORT']}"
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


def sharing_server(kafka_bootstrap: str, workdir: Path) -> tuple[Server, Path]:
    """``python -m server`` (not started) that publishes its Milvus Lite endpoint to a file."""
    stack = Stack(kafka_bootstrap, "milvus-lite", workdir, ("acme",), dim=DIM)
    stack.create_topics()
    server = Server(stack, workdir)
    endpoint_file = workdir / "milvus.endpoint"
    server.env["MNEMO_REUSE_PORT"] = "true"
    server.env["MNEMO_MILVUS_ENDPOINT_FILE"] = str(endpoint_file)
    server.env["MNEMO_COMMIT_INTERVAL_S"] = "0.5"  # an edge's `after` waits for the commit
    return server, endpoint_file


@pytest.fixture
def processes(kafka_bootstrap: str, tmp_path: Path) -> Iterator[tuple[Server, Edge]]:
    server, endpoint_file = sharing_server(kafka_bootstrap, tmp_path)
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


def test_a_ranker_started_over_written_memories_fills_its_cache_from_the_changelogs(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """A ``python -m ranker`` that starts while the worker's tables hold memories warms its hot
    cache from their changelogs (no pass over Milvus: no tenant loaded from it), serves them
    from the cache, and takes a memory written after it started. Its metrics are served on a
    port of their own (``MNEMO_RANKER_METRICS_PORT``), not on the API's.
    """
    server, endpoint_file = sharing_server(kafka_bootstrap, tmp_path)
    server.start()
    edge = Edge(server, endpoint_file.read_text().strip(), tmp_path, port=free_port())
    own = free_port()
    while f":{own}" in edge.url:
        own = free_port()
    edge.env["MNEMO_RANKER_METRICS_PORT"] = str(own)
    scraped = SimpleNamespace(url=f"http://127.0.0.1:{own}")
    try:
        with Client(server.url, KEY) as client:
            written = write_memories(client)
            assert len(client.get_many(written)) == N  # applied (the token of the write)
        edge.start()
        assert f"hot cache filled from the changelogs: {N} rows of 1 tenants" in edge.log()
        with Client(edge.url, KEY) as client:
            for i in (0, 17, N - 1):
                found = client.recall(vector=embedding(i), k=1, track=False)
                assert [m.memory_id for m in found] == [written[i]], edge.log()[-4000:]
            late = client.remember("written after the ranker started", embedding=axis(5))
            found = client.recall(vector=axis(5), k=1, track=False)
            assert [m.memory_id for m in found] == [late], edge.log()[-4000:]
        assert metric(scraped, "mnemostream_hot_cache_loads") == 0, edge.log()[-4000:]
        searches = httpx.get(f"{scraped.url}/metrics", timeout=10).text
        assert 'mnemostream_vector_searches_total{source="milvus"}' not in searches
        assert metric(scraped, "mnemostream_hot_cache_rows") == N + 1
        # every tenant's traffic counted together: no longer on the port tenants reach
        assert httpx.get(f"{edge.url}/metrics", timeout=10).status_code == 404
    finally:
        edge.stop()
        server.stop()
