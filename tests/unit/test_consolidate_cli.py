"""When ``python -m streams consolidate`` stops waiting for reports, and the arguments it
refuses before sending anything (the Kafka half is tested in tests/integration)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from storage.tenant_log import TenantLogError
from streams import cli
from streams.cli import QUIET_S, arguments, complete, main


def test_one_tenant_ends_at_its_report() -> None:
    assert not complete(0, 1, False, None, 10.0)
    assert complete(1, 1, False, 10.0, 10.0)


def test_every_tenant_waits_past_the_tenants_known_here_for_the_workers_others() -> None:
    # two tenants known here, the worker knows a third: the two reports alone do not end it
    assert not complete(2, 2, True, 10.0, 10.0 + QUIET_S / 2)
    assert not complete(3, 2, True, 10.0 + QUIET_S / 2, 10.0 + QUIET_S)  # a third came
    assert complete(3, 2, True, 10.0 + QUIET_S / 2, 11.0 + QUIET_S * 1.5)
    assert not complete(1, 2, True, 10.0, 100.0)  # fewer than known: the deadline ends it


def test_every_tenant_with_none_known_here_waits_for_a_first_report() -> None:
    assert not complete(0, 0, True, None, 100.0)
    assert complete(1, 0, True, 10.0, 10.0 + QUIET_S + 0.1)


@pytest.mark.parametrize("at", ["2026-03-01T12:00", "2026-03-01", "noon"])
def test_a_decision_time_without_a_timezone_is_refused_naming_at(
    at: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # the worker would dead-letter the request, and the command wait for a report in vain
    with pytest.raises(SystemExit) as exited:
        arguments().parse_args(["--tenant", "acme", "--at", at])
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert "argument --at" in error
    assert repr(at) in error


def test_a_decision_time_with_its_timezone_is_taken() -> None:
    for at in ("2026-03-01T12:00Z", "2026-03-01T14:00+02:00"):
        args = arguments().parse_args(["--tenant", "acme", "--at", at])
        assert args.at == datetime(2026, 3, 1, 12, tzinfo=UTC)


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--strategies", "dedup"], "argument --strategies"),  # the worker refuses it: 60 s wasted
        (["--wait", "-5"], "argument --wait"),
        (["--wait", "nan"], "argument --wait"),
    ],
)
def test_a_strategy_or_wait_the_worker_cannot_use_is_refused(
    extra: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        arguments().parse_args(["--tenant", "acme", *extra])
    assert exited.value.code == 2
    assert named in capsys.readouterr().err


def test_every_strategy_of_the_core_is_accepted() -> None:
    args = arguments().parse_args(["--tenant", "acme", "--strategies", "exact_dedup", "purge"])
    assert args.strategies == ["exact_dedup", "purge"]


@pytest.mark.parametrize("at", ["1969-12-31T23:00Z", "2999-01-01T00:00Z"])
def test_a_decision_time_the_worker_would_refuse_is_refused_before_sending(
    at: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before 1970, or past the worker's allowed skew after now: the worker dead-letters such a
    request, and the command waited out --wait for a report that never comes.
    """
    with pytest.raises(SystemExit) as exited:
        main(["--tenant", "acme", "--at", at])
    assert exited.value.code == 2
    assert "argument --at" in capsys.readouterr().err


@pytest.mark.parametrize("tenant", ["", "a b/c"])
def test_a_tenant_id_the_worker_would_refuse_is_refused_before_sending(
    tenant: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The worker dead-letters the request, and the command waited out --wait for nothing."""
    with pytest.raises(SystemExit) as exited:
        main(["--tenant", tenant, "--dry-run"])
    assert exited.value.code == 2
    assert "argument --tenant" in capsys.readouterr().err


def test_no_report_says_the_request_is_queued_under_its_id(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """ "no consolidation report" read as a failure: run again, the request was applied twice."""
    sent: list[str | None] = []

    async def unanswered(
        settings: object, args: object, request_id: str | None = None
    ) -> list[object]:
        sent.append(request_id)
        return []

    monkeypatch.setattr(cli, "consolidate", unanswered)
    assert main(["--tenant", "acme", "--wait", "1"]) == 1
    error = capsys.readouterr().err
    assert f"request {sent[0]}" in error
    assert "stays queued" in error
    assert "dead-letter" in error


def test_every_tenant_whose_count_fails_sends_nothing_and_says_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The tenants were counted after the request was sent: a count that failed ended in a
    traceback naming no request, and a user sent it again."""

    async def unreadable(settings: object) -> frozenset[str]:
        raise TenantLogError("no answer from the broker")

    def no_client(*args: object, **kwargs: object) -> object:
        raise AssertionError("a Kafka client was made: the request could have been sent")

    monkeypatch.setattr(cli, "_tenant_ids", unreadable)
    monkeypatch.setattr(cli, "AIOKafkaProducer", no_client)
    monkeypatch.setattr(cli, "AIOKafkaConsumer", no_client)
    assert main(["--tenant", "*", "--wait", "1"]) == 2
    error = capsys.readouterr().err
    assert "nothing was sent" in error
    assert "no answer from the broker" in error


def test_a_tenant_neither_the_file_nor_the_topic_holds_is_refused_before_anything_is_sent(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """README: a tenant id the worker would refuse is refused at once. An unknown tenant was
    sent, dead-lettered by the worker, and the command waited out ``--wait`` (60 s by default)
    for a report that never came.
    """

    async def known(settings: object) -> frozenset[str]:
        return frozenset({"acme"})

    def no_client(*args: object, **kwargs: object) -> object:
        raise AssertionError("a Kafka client was made: the request could have been sent")

    monkeypatch.setattr(cli, "_tenant_ids", known)
    monkeypatch.setattr(cli, "AIOKafkaProducer", no_client)
    monkeypatch.setattr(cli, "AIOKafkaConsumer", no_client)
    monkeypatch.setenv("MNEMO_TENANTS", "acme")
    with pytest.raises(SystemExit) as refused:
        main(["--tenant", "nosuch", "--dry-run"])
    assert refused.value.code == 2
    assert "argument --tenant: no tenant 'nosuch'" in capsys.readouterr().err


class SentError(Exception):
    """The command went on to send its request (its Kafka clients were asked for)."""


def test_a_tenant_unknown_to_a_shell_that_names_no_tenants_file_is_sent_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``make up`` gives its tenants file to the worker alone: README's own
    ``python -m streams consolidate --tenant demo`` from a plain shell was refused, the worker
    knowing ``demo``. A tenants file this shell cannot read is one line, not a traceback.
    """

    async def topic_only(settings: object) -> frozenset[str]:
        return frozenset({"other"})

    def sending(*args: object, **kwargs: object) -> object:
        raise SentError

    monkeypatch.delenv("MNEMO_TENANTS", raising=False)
    monkeypatch.delenv("MNEMO_TENANTS_FILE", raising=False)
    monkeypatch.setattr(cli, "_tenant_ids", topic_only)
    monkeypatch.setattr(cli, "AIOKafkaConsumer", sending)
    with pytest.raises(SentError):
        main(["--tenant", "demo", "--dry-run"])
    assert "'demo' is not on the tenants topic" in capsys.readouterr().err
    monkeypatch.undo()
    monkeypatch.setenv("MNEMO_TENANTS_FILE", "/nonexistent/tenants.json")
    assert main(["--tenant", "demo", "--dry-run"]) == 2
    error = capsys.readouterr().err
    assert "cannot read the tenants, nothing was sent" in error
    assert "tenants_file" in error


def test_a_tenants_file_that_is_not_an_object_is_one_line_naming_tenants(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A tenants file holding ``[]`` ended the command in an AttributeError traceback."""
    listed = tmp_path / "tenants.json"
    listed.write_text("[]")
    monkeypatch.setenv("MNEMO_TENANTS_FILE", str(listed))
    assert main(["--tenant", "demo", "--dry-run"]) == 2
    error = capsys.readouterr().err
    assert "cannot read the tenants, nothing was sent: tenants=[]" in error
    assert "Traceback" not in error
