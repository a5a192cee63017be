"""``mnemo``'s command line refuses what it would otherwise ignore (the commands themselves run in
tests/integration); ``python -m streams``'s start-up checks its settings before it creates
anything."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from ranker.settings import RankerSettings
from server import cli
from streams import __main__ as streams_main
from streams.settings import WorkerSettings


@pytest.mark.parametrize(
    "argv",
    [
        ["up", "--bogus"],
        ["down", "now"],
        ["load", "f.jsonl", "--api-key", "K", "--batch-size", "50"],
        ["load", "f.jsonl", "--api-key", "K", "--batch", "0"],
        ["load", "f.jsonl", "--api-key", "K", "--batch", "1001"],
        ["serve", "--port", "9999"],  # settings are MNEMO_* variables: a flag was ignored
        ["ranker", "--bogus"],
    ],
)
def test_an_option_a_command_does_not_take_is_refused(
    argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "argv", ["mnemo"])  # a service command sets it for its own parser
    with pytest.raises(SystemExit) as exited:
        cli.main(argv)
    assert exited.value.code == 2
    assert "error" in capsys.readouterr().err


def test_a_service_command_shows_its_settings_on_help(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "argv", ["mnemo"])
    with pytest.raises(SystemExit) as exited:
        cli.main(["worker", "--help"])
    assert exited.value.code == 0
    assert "MNEMO_" in capsys.readouterr().out


@pytest.mark.parametrize(
    "command", ["serve", "worker", "ranker", "consolidate", "state-hash", "rebuild", "tenants"]
)
def test_a_command_names_itself_as_the_user_called_it(
    command: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``mnemo consolidate --help`` said ``usage: python -m streams consolidate``, and its errors
    named a command the user had not typed."""
    monkeypatch.setattr(sys, "argv", ["mnemo"])
    with pytest.raises(SystemExit) as exited:
        cli.main([command, "--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: mnemo {command} ")
    assert "``" not in out  # the docstrings' reST quoting
    with pytest.raises(SystemExit) as exited:
        cli.main([command, "--bogus"])
    assert exited.value.code == 2
    assert f"mnemo {command}: error" in capsys.readouterr().err


def test_mnemo_help_lists_every_command_with_what_it_does(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    listed = " ".join(out.split())  # argparse wraps the lines
    for command, does in {**cli.COMMANDS, **cli.TOOLS, "load": "write a JSONL"}.items():
        assert f" {command} {does}" in listed, f"mnemo --help does not say what {command} does"


def test_a_wrong_embedding_dimension_stops_the_start_before_anything_is_created(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The collection was made at the wrong dimension before the check refused the start, and
    every later start, the setting mended, was refused by that collection."""
    created: list[str] = []

    async def topics(_: object) -> None:
        created.append("topics")

    monkeypatch.setattr(streams_main, "ensure_topics", topics)
    monkeypatch.setattr(streams_main, "MilvusStore", lambda _: created.append("milvus"))
    settings = WorkerSettings(
        embedder="minilm", embedding_dim=128, data_dir=tmp_path, kafka_bootstrap="127.0.0.1:1"
    )
    with pytest.raises(SystemExit, match="MNEMO_EMBEDDING_DIM is 128"):
        streams_main.prepare(settings)
    missing = WorkerSettings(
        embedder="hash",
        embedding_dim=16,
        data_dir=tmp_path,
        tenants_file=tmp_path / "no-such.yaml",
    )
    with pytest.raises(ValueError, match="tenants_file"):
        streams_main.prepare(missing)
    assert created == []


@pytest.mark.parametrize(("name", "value"), [("log_level", "verbose"), ("session_timeout_s", 120)])
def test_settings_faust_or_logging_would_refuse_late_are_refused_at_once(
    name: str, value: object
) -> None:
    with pytest.raises(ValueError, match=name):
        WorkerSettings(**{name: value})  # type: ignore[arg-type]


def test_the_log_level_is_read_in_any_case() -> None:
    assert WorkerSettings(log_level="WARNING").log_level == "warning"


@pytest.mark.parametrize("settings", [WorkerSettings, RankerSettings])
def test_every_process_reads_the_log_level_and_format(
    settings: type[WorkerSettings | RankerSettings], monkeypatch: pytest.MonkeyPatch
) -> None:
    """k8s's ConfigMap gives both processes the same variables: MNEMO_LOG_FORMAT was the ranker's
    alone (the worker kept Faust's text lines) and MNEMO_LOG_LEVEL the worker's alone."""
    monkeypatch.setenv("MNEMO_LOG_LEVEL", "DEBUG")
    monkeypatch.setenv("MNEMO_LOG_FORMAT", "json")
    read = settings()
    assert (read.log_level, read.log_format) == ("debug", "json")


def test_the_worker_logs_json_lines_when_asked() -> None:
    assert streams_main.worker_logging(WorkerSettings()) is None  # Faust's own lines
    config = streams_main.worker_logging(WorkerSettings(log_format="json", log_level="warning"))
    assert config is not None
    assert config["root"]["level"] == "WARNING"
    assert config["formatters"]["line"]["()"] == "storage.logs.JsonFormatter"


def test_the_kafka_commands_answer_a_broker_they_cannot_reach_with_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """consolidate and state-hash ended in a KafkaConnectionError traceback (and consolidate
    left its clients unclosed)."""
    from streams import cli as consolidate_cli
    from streams import rebuild

    monkeypatch.setenv("MNEMO_KAFKA_BOOTSTRAP", "127.0.0.1:1")  # nothing listens there
    assert consolidate_cli.main(["--tenant", "demo", "--wait", "1"]) == 2
    assert "cannot read the tenants from 127.0.0.1:1" in capsys.readouterr().err
    assert rebuild.main("state-hash", []) == 2
    assert "cannot read the tables from 127.0.0.1:1" in capsys.readouterr().err
    monkeypatch.setenv("MNEMO_KAFKA_SSL_CAFILE", "/etc/ca.pem")  # TLS asked, PLAINTEXT kept
    commands: list[Callable[[], int]] = [
        lambda: consolidate_cli.main(["--tenant", "demo", "--wait", "1"]),
        lambda: rebuild.main("state-hash", []),
    ]
    for command in commands:
        with pytest.raises(SystemExit) as refused:  # one line per setting, as for a bad value
            command()
        lines = str(refused.value.code).splitlines()
        assert lines[0] == "invalid settings:"
        assert "kafka_ssl_cafile is given: TLS needs SSL or SASL_SSL" in lines[1]
