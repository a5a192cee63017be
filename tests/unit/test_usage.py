"""Service processes answer ``--help`` and refuse unknown arguments instead of starting."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from ranker.settings import RankerSettings
from storage.usage import load_settings, parse_service_args
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


def test_a_refused_setting_ends_the_start_naming_its_variable_and_value(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """It was a pydantic traceback naming the Python field (``port``), not the variable."""
    monkeypatch.setenv("MNEMO_PORT", "80800")
    monkeypatch.setenv("MNEMO_LOG_FORMAT", "xml")
    monkeypatch.setenv("MNEMO_ADMIN_KEY", "")  # accepted: unset
    with pytest.raises(SystemExit) as done:
        load_settings(RankerSettings)
    message = str(done.value.code)
    assert message.startswith("invalid settings:")
    assert "MNEMO_PORT='80800': Input should be less than or equal to 65535" in message
    assert "MNEMO_LOG_FORMAT='xml'" in message
    monkeypatch.delenv("MNEMO_PORT")
    monkeypatch.delenv("MNEMO_LOG_FORMAT")
    assert load_settings(RankerSettings).port == RankerSettings.model_fields["port"].default


def test_a_refused_secret_is_not_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    class Secretive(BaseSettings):
        model_config = SettingsConfigDict(env_prefix="MNEMO_")
        admin_key: SecretStr = Field(min_length=32)
        token: SecretStr

    monkeypatch.setenv("MNEMO_ADMIN_KEY", "hunter2")
    with pytest.raises(SystemExit) as done:
        load_settings(Secretive)
    shown = str(done.value.code)
    assert "MNEMO_ADMIN_KEY=(hidden): Value should have at least 32" in shown
    assert "MNEMO_TOKEN: Field required" in shown  # a missing one shows no values at all
    assert "hunter2" not in shown


def test_a_start_up_check_that_refuses_a_setting_ends_the_process_with_its_message() -> None:
    """``python -m ranker`` with a tenants file that is not there printed a six-frame traceback."""
    env = {
        "PATH": "",
        "MNEMO_PORT": "18931",
        "MNEMO_TENANTS_FILE": "/nonexistent/tenants.yaml",
        "MNEMO_KAFKA_BOOTSTRAP": "127.0.0.1:9",  # never reached: the check comes first
    }
    stderr = refused_start("ranker", env)
    assert stderr.startswith(b"cannot start: tenants_file='/nonexistent/tenants.yaml'")


def refused_start(module: str, env: dict[str, str]) -> bytes:
    """``python -m module`` under ``env`` alone, which must end at start-up with one message (exit
    1, no traceback); its stderr.
    """
    result = subprocess.run(
        [sys.executable, "-m", module],
        cwd=ROOT,
        env=env,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1, result.stderr[-2000:]
    assert b"Traceback" not in result.stderr, result.stderr[-2000:]
    return result.stderr


def test_a_check_of_several_settings_shows_no_value_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its input is every value read: the Kafka password and the Milvus token were printed."""
    monkeypatch.setenv("MNEMO_KAFKA_MIN_INSYNC", "3")
    monkeypatch.setenv("MNEMO_KAFKA_REPLICATION", "1")
    monkeypatch.setenv("MNEMO_KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("MNEMO_KAFKA_SASL_MECHANISM", "PLAIN")
    monkeypatch.setenv("MNEMO_KAFKA_SASL_USERNAME", "mnemo")
    monkeypatch.setenv("MNEMO_KAFKA_SASL_PASSWORD", "s3cr3t-kafka-pw")
    monkeypatch.setenv("MNEMO_MILVUS_TOKEN", "root:Milvus-pw")
    with pytest.raises(SystemExit) as done:
        load_settings(WorkerSettings)
    shown = str(done.value.code)
    assert "kafka_min_insync=3 exceeds kafka_replication=1" in shown
    assert "s3cr3t-kafka-pw" not in shown
    assert "Milvus-pw" not in shown


def test_a_worker_that_cannot_reach_the_broker_ends_with_one_line_naming_the_setting(
    tmp_path: Path,
) -> None:
    """A 30-line KafkaConnectionError traceback was all ``python -m streams`` said."""
    env = {
        "PATH": "",
        "MNEMO_KAFKA_BOOTSTRAP": "127.0.0.1:9",
        "MNEMO_EMBEDDER": "hash",
        "MNEMO_EMBEDDING_DIM": "8",
        "MNEMO_TENANTS": "acme",
        "MNEMO_DATA_DIR": str(tmp_path / "worker"),
        "MNEMO_MILVUS_URI": str(tmp_path / "m.db"),
        "MNEMO_METRICS_PORT": "0",
    }
    assert b"cannot start: Kafka (MNEMO_KAFKA_BOOTSTRAP" in refused_start("streams", env)
