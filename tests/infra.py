"""Real components for integration and contract tests: a Milvus server and a Kafka broker.

Each starts once per test session, on loopback, in a folder of its own, and stops by pid at the end.
"""

from __future__ import annotations

import gc
import os
import socket
import subprocess
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


@contextmanager
def milvus_server(base_dir: Path) -> Iterator[str]:
    """A real Milvus 2.3 server (C++) from the PyPI package ``milvus``; yields its URI."""
    from milvus import default_server

    default_server.set_base_dir(str(base_dir))
    default_server.listen_port = free_port()
    with warnings.catch_warnings():
        # the package leaves probe sockets unclosed while it picks its ports; collect them here
        warnings.simplefilter("ignore", ResourceWarning)
        default_server.start()
        gc.collect()
    try:
        yield f"http://127.0.0.1:{default_server.listen_port}"
    finally:
        default_server.stop()


@contextmanager
def kafka_broker(home: Path) -> Iterator[str]:
    """A real Kafka 4 broker started by ``scripts/kafka.sh``; yields its bootstrap address.

    Reuses a broker given in ``MNEMO_TEST_KAFKA`` (host:port) instead of starting one.
    """
    given = os.environ.get("MNEMO_TEST_KAFKA")
    if given:
        yield given
        return
    port = free_port()
    env = {**os.environ, "KAFKA_HOME": str(home), "KAFKA_PORT": str(port)}
    env["KAFKA_CONTROLLER_PORT"] = str(free_port())
    # the jars are shared with `make up` so that they are fetched once per machine
    lib = ROOT / "var" / "kafka" / "lib"
    subprocess.run([ROOT / "scripts" / "kafka.sh", "fetch"], check=True, env={**os.environ})
    home.mkdir(parents=True, exist_ok=True)
    if not (home / "lib").exists():
        (home / "lib").symlink_to(lib)
    subprocess.run([ROOT / "scripts" / "kafka.sh", "start"], check=True, env=env)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        subprocess.run([ROOT / "scripts" / "kafka.sh", "stop"], check=False, env=env)
