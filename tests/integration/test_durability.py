"""The serving store is a view the worker rebuilds: memories acknowledged before a kill -9 of
``python -m server``, or before its Milvus Lite files were lost, are served again after a restart.
"""

from __future__ import annotations

import asyncio
import json
import random
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

from mnemostream import Client
from storage.changelogs import read_changelog
from streams.rebuild import state_hash
from tests.infra import ROOT, free_port
from tests.integration.harness import (
    Stack,
    WorkerProcess,
    eventually,
    produce,
    read_all,
    terminate,
    wait_for_http,
)
from tests.integration.test_streams import (
    T0,
    milvus_counts,
    plan_accesses,
    table_counts,
    vector,
    write_msg,
)

pytestmark = pytest.mark.integration
KEY = "durability-key-0123456789abcdef"
DIM = 8
N = 60


class Server:
    """``python -m server`` on its own Milvus Lite directory (``lite``), else on the stack's
    Milvus server; restartable on the same state.
    """

    def __init__(self, stack: Stack, workdir: Path, *, lite: bool = True) -> None:
        tenants = workdir / "tenants.json"
        tenants.write_text(json.dumps({"tenants": {"acme": {"api_keys": [KEY]}}}))
        self.milvus_path = workdir / "milvus.db"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        on_lite = {
            "MNEMO_MILVUS_URI": str(self.milvus_path),
            "MNEMO_MILVUS_PARTITION_KEY": "true",
            "MNEMO_MILVUS_FULL_TEXT": "true",
        }
        self.env = {
            **stack.env(),
            **(on_lite if lite else {}),
            "MNEMO_TENANTS_FILE": str(tenants),
            "MNEMO_TENANTS": "",
            "MNEMO_PORT": str(self.port),
        }
        self.log_path = workdir / "server.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "server"], cwd=ROOT, env=self.env, stdout=log, stderr=log
            )
        wait_for_http(self.url, self.proc, self.log_path)

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        terminate(self.proc)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]


@pytest.fixture
def server(kafka_bootstrap: str, tmp_path: Path) -> Iterator[Server]:
    stack = Stack(kafka_bootstrap, "milvus-lite", tmp_path, ("acme",), dim=DIM)  # no server
    stack.create_topics()
    server = Server(stack, tmp_path)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def server_on_milvus_server(
    kafka_bootstrap: str, milvus_server_uri: str, tmp_path: Path
) -> Iterator[Server]:
    stack = Stack(kafka_bootstrap, milvus_server_uri, tmp_path, ("acme",), dim=DIM)
    stack.create_topics()
    server = Server(stack, tmp_path, lite=False)
    server.start()
    yield server
    server.stop()


def embedding(i: int) -> list[float]:
    return [1.0, i / N, *([0.0] * (DIM - 2))]


def write_memories(client: Client) -> list[str]:
    memories = [
        {
            "content": f"durable note {i}",
            "embedding": embedding(i),
            "importance": 0.7,
            "memory_type": "semantic",
            "at": T0,
        }
        for i in range(N)
    ]
    return client.remember_many(memories)


def served(client: Client, ids: list[str]) -> tuple[int, int]:
    """How many of ``ids`` are gettable, and how many one recall returns."""
    gettable = sum(client.get(i, track=False) is not None for i in ids)
    recalled = client.recall(vector=embedding(0), k=N, at=T0, track=False)
    return gettable, len({m.memory_id for m in recalled} & set(ids))


def assert_served_again(server: Server, ids: list[str]) -> None:
    with Client(server.url, KEY) as client:
        eventually(
            lambda: served(client, ids) == (N, N),
            180,
            f"all {N} memories gettable and recallable after the restart",
            show=lambda: (served(client, ids), server.log()),
        )


def write_and_restart(server: Server, stop: Callable[[], None]) -> str:
    """Write N memories and wait until they are served; ``stop`` the server, start it again and
    wait until all N are served again. Returns the server's whole log.
    """
    with Client(server.url, KEY) as client:
        ids = write_memories(client)
        eventually(lambda: served(client, ids) == (N, N), 120, "written", show=server.log)
    stop()
    server.start()
    assert_served_again(server, ids)
    return server.log_path.read_text(errors="replace")


def test_memories_acknowledged_before_a_kill_9_are_served_after_the_restart(
    server: Server,
) -> None:
    log = write_and_restart(server, server.kill9)
    # Milvus Lite kept every row it acknowledged: the start-up check counted them and rewrote
    # none, the hot cache was filled from the changelogs, not read back from Milvus, and the
    # state view took the same read instead of replaying the changelog
    assert f"Milvus holds the {N} rows the changelogs hold: not rewritten" in log, server.log()
    assert f"hot cache filled from the changelogs: {N} rows of 1 tenants" in log, server.log()
    assert f"state view seeded from the changelog: {N} memories" in log, server.log()


def test_on_a_milvus_server_the_restart_fills_the_hot_cache_from_the_changelogs(
    server_on_milvus_server: Server,
) -> None:
    """Against a Milvus server, ``python -m server``'s hot cache takes the rows its start-up
    check read, as on Milvus Lite, instead of reading them back from Milvus (a 2.3 server answers
    that with a query per tenant: 331 s at 1M memories, docs/benchmarks.md); a memory written
    after the restart is recalled too (the state view marks it for a read from Milvus).
    """
    server = server_on_milvus_server
    log = write_and_restart(server, server.stop)
    assert f"Milvus holds the {N} rows the changelogs hold: not rewritten" in log, server.log()
    assert f"hot cache filled from the changelogs: {N} rows of 1 tenants" in log, server.log()
    with Client(server.url, KEY) as client:
        (late,) = client.remember_many(
            [{"content": "written after the restart", "embedding": embedding(0), "at": T0}]
        )

        def recalled() -> set[str]:
            found = client.recall(vector=embedding(0), k=N + 1, at=T0, track=False)
            return {m.memory_id for m in found}

        eventually(
            lambda: late in recalled(),
            60,
            "the memory written after the restart recalled",
            show=server.log,
        )


def test_a_lost_milvus_store_is_rebuilt_from_the_tables(server: Server) -> None:
    def stop_and_lose_milvus() -> None:
        server.stop()
        shutil.rmtree(server.milvus_path)

    log = write_and_restart(server, stop_and_lose_milvus)
    assert f"(it held 0 rows, they hold {N}): {N} rows upserted" in log, server.log()
    assert f"hot cache filled from the changelogs: {N} rows of 1 tenants" in log, server.log()


def run_cli(env: Mapping[str, str], *args: str, code: int = 0) -> str:
    """``python -m streams ARGS`` under ``env``, which must exit with ``code``; its stdout (its
    stderr when ``code`` is not 0; a failure shows its stderr).
    """
    result = subprocess.run(
        [sys.executable, "-m", "streams", *args],
        cwd=ROOT,
        env=dict(env),
        capture_output=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == code, result.stderr.decode(errors="replace")[-3000:]
    return (result.stdout if code == 0 else result.stderr).decode()


def table_hash(stack: Stack) -> str:
    topic = f"{stack.app_id}-memories-changelog"
    return state_hash(asyncio.run(read_changelog(stack.bootstrap, topic)))


def test_a_replay_has_the_live_state_hash_and_rebuild_restores_milvus(
    kafka_bootstrap: str, tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    # Milvus Lite: one process per file, so the test reads it only once the workers stopped
    stack = Stack(kafka_bootstrap, str(tmp_path / "live.db"), tmp_path, ("acme",))
    rng = random.Random(3)
    memories = [("acme", f"m{j}") for j in range(30)]
    workers.append(worker := WorkerProcess(stack).start())
    writes = [write_msg(t, m, vector(rng, stack.dim)) for t, m in memories]
    produce(stack.bootstrap, stack.topic("memory-writes"), writes)
    accesses, expected = plan_accesses(rng, memories, 300)
    produce(stack.bootstrap, stack.topic("access-events"), accesses)
    eventually(
        lambda: table_counts(stack) == expected, 180, "the live worker applied every access", worker
    )
    worker.stop()
    live = table_hash(stack)
    assert run_cli(stack.env(), "state-hash").split() == [live, "30", "memories"]

    replay = Stack(
        stack.bootstrap,
        str(tmp_path / "replay.db"),
        stack.workdir,
        stack.tenants,
        name=stack.name,
        app_id=f"{stack.app_id}r",
        replay=True,
    )
    audited = len(read_all(stack.bootstrap, stack.topic("audit")))
    workers.append(again := WorkerProcess(replay).start())
    eventually(lambda: table_hash(replay) == live, 180, "the replay reached the live hash", again)
    again.stop()
    assert table_hash(replay) == live
    # the replay produced nothing: the audit trail holds each decision once
    assert len(read_all(stack.bootstrap, stack.topic("audit"))) == audited > 0

    # a mistyped app id has no tables: refused, the collection left as it is (it was emptied)
    for command in (("rebuild", "--drop"), ("state-hash",)):
        typo = run_cli(stack.env(), *command, "--app-id", f"{stack.app_id}x", code=2)
        assert f"no {stack.app_id}x-memories-changelog on " in typo, typo
    rebuilt = run_cli(stack.env(), "rebuild", "--drop")  # the live collection, dropped and rebuilt
    assert rebuilt.splitlines()[0].startswith(f"rebuilt c_{stack.app_id}: 30 rows, 0 purged")
    assert rebuilt.splitlines()[1].split() == [live, "30", "memories"]
    store = stack.store()
    try:
        assert milvus_counts(store, ("acme",)) == expected
    finally:
        store.close()


def test_a_sigterm_lets_the_http_server_stop_before_the_worker(server: Server) -> None:
    """``python -m server`` stops uvicorn itself when Faust begins its shutdown: requests in flight
    finish and the ranker's lifespan shutdown runs (Faust used to cancel the HTTP task instead).
    """
    with Client(server.url, KEY) as client:
        write_memories(client)  # the ranker's producer, view and batcher have work behind them
    assert server.proc is not None
    server.proc.terminate()
    assert server.proc.wait(90) == 0, server.log()
    log = server.log_path.read_text(errors="replace")
    assert "mnemostream ranker stopped" in log, log[-4000:]
    assert "CancelledError" not in log, log[-4000:]
