"""Service processes answer ``--help`` and refuse unknown arguments instead of starting."""

from __future__ import annotations

import subprocess
import sys

import pytest

from storage.usage import parse_service_args
from streams.settings import WorkerSettings
from tests.infra import ROOT


def test_help_lists_the_settings_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        parse_service_args("python -m streams", "the worker", [WorkerSettings], ["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "MNEMO_MAX_FUTURE_SKEW_S (default 300.0)" in out
    assert "MNEMO_KAFKA_BOOTSTRAP (default '127.0.0.1:9092')" in out


def test_an_unknown_argument_exits_2_without_starting() -> None:
    with pytest.raises(SystemExit) as done:
        parse_service_args("python -m streams", "the worker", [WorkerSettings], ["--bogus"])
    assert done.value.code == 2
    parse_service_args("python -m streams", "the worker", [WorkerSettings], [])  # runs on


def test_python_m_streams_help_prints_help() -> None:
    # no broker on this port: a process that started the worker instead would never exit 0
    env = {"MNEMO_KAFKA_BOOTSTRAP": "127.0.0.1:9", "PATH": ""}
    result = subprocess.run(
        [sys.executable, "-m", "streams", "--help"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(b"usage: python -m streams")
