"""``scripts/kafka.sh`` signals only the broker it started, never whatever process holds its pid now.

A pid file outlives its process (a reboot, a ``kill -9``, a machine restored from a snapshot), and
the pid is then free for any other process: ``stop`` would send it SIGTERM, then SIGKILL. The start
time recorded beside the pid (``broker.pid.start``) tells the two apart. ``scripts/stack.sh``
(``make down``) uses the same check for the server and its extra HTTP processes. Nothing here starts
a broker: ``status`` and ``stop`` only read the pid file.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KAFKA = ROOT / "scripts" / "kafka.sh"

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")


def start_time(pid: int) -> str:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(") ", 1)[1].split()[19]  # field 22


@pytest.fixture
def bystander() -> Iterator[subprocess.Popen[bytes]]:
    """A process of this user that is not a broker, reaped as soon as it ends (a zombie would
    still answer ``kill -0``, as a broker reparented to init never does).
    """
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    threading.Thread(target=process.wait, daemon=True).start()
    try:
        yield process
    finally:
        process.kill()
        process.wait()


def kafka_sh(command: str, home: Path) -> int:
    env = {**os.environ, "KAFKA_HOME": str(home)}
    return subprocess.run([KAFKA, command], env=env, capture_output=True, check=False).returncode


def test_a_stale_pid_file_names_no_broker(
    tmp_path: Path, bystander: subprocess.Popen[bytes]
) -> None:
    (tmp_path / "broker.pid").write_text(f"{bystander.pid}\n")
    (tmp_path / "broker.pid.start").write_text("1\n")  # the broker that wrote it started long ago
    assert kafka_sh("status", tmp_path) == 1
    assert kafka_sh("stop", tmp_path) == 0
    assert bystander.returncode is None, "kafka.sh stop signalled a process it did not start"
    assert not (tmp_path / "broker.pid").exists()
    assert not (tmp_path / "broker.pid.start").exists()


def test_the_recorded_process_is_stopped(
    tmp_path: Path, bystander: subprocess.Popen[bytes]
) -> None:
    (tmp_path / "broker.pid").write_text(f"{bystander.pid}\n")
    (tmp_path / "broker.pid.start").write_text(start_time(bystander.pid) + "\n")
    assert kafka_sh("status", tmp_path) == 0
    assert kafka_sh("stop", tmp_path) == 0
    assert bystander.wait(timeout=30) == -signal.SIGTERM
    assert not (tmp_path / "broker.pid").exists()


def test_a_pid_file_without_a_start_time_is_trusted_as_before(
    tmp_path: Path, bystander: subprocess.Popen[bytes]
) -> None:
    """A broker started by the script before the start time was recorded can still be stopped."""
    (tmp_path / "broker.pid").write_text(f"{bystander.pid}\n")
    assert kafka_sh("status", tmp_path) == 0
    assert kafka_sh("stop", tmp_path) == 0
    assert bystander.wait(timeout=30) == -signal.SIGTERM


@pytest.mark.parametrize("script", ["kafka.sh", "stack.sh"])
def test_both_scripts_record_and_check_the_start_time(script: str) -> None:
    """Both use scripts/pidfile.sh (whose behaviour the tests above check through kafka.sh)."""
    text = (ROOT / "scripts" / script).read_text()
    assert '. "$root/scripts/pidfile.sh"' in text
    assert "record_pid " in text
    assert "running() { pid_running " in text
    assert "started_at() {" not in text  # one definition, in pidfile.sh
