"""``scripts/demo.py`` (README, "Quick start"): the records it produces are ones the worker
applies, and it reads the audit topic past records that name no memory."""

from __future__ import annotations

import importlib.util
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType

import orjson
import pytest

from storage.records import Limits, RecordError, check_time, decode_access, decode_write
from storage.tenants import TenantRegistry
from tests.infra import free_port

DEMO = Path(__file__).resolve().parents[2] / "scripts" / "demo.py"
NOW = datetime(2026, 12, 4, 12, tzinfo=UTC)
LIMITS = Limits(384, 16_384, TenantRegistry.open_to(["demo"]))


def demo() -> ModuleType:
    spec = importlib.util.spec_from_file_location("demo", DEMO)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_record_the_demo_produces_is_one_the_worker_applies() -> None:
    """Its access was dated two hours ahead: past the worker's skew, always dead-lettered."""
    produced = demo().records("demo", NOW)
    assert [topic for topic, _, _ in produced] == ["memory-writes"] * 3 + ["access-events"]
    received = NOW + timedelta(milliseconds=50)  # the Kafka timestamp, a moment later
    for topic, key, value in produced:
        decoded = (
            decode_write(value, LIMITS)
            if topic == "memory-writes"
            else decode_access(value, LIMITS)
        )
        assert decoded.key.encode() == key
        try:
            check_time("at", decoded.at, received, LIMITS)
        except RecordError as error:  # pragma: no cover - the failure's message
            raise AssertionError(f"{topic}: {error}") from error


def test_the_audit_trail_skips_consolidation_reports_and_other_memories() -> None:
    module = demo()
    ids = ["m-1"]
    report = {"v": 1, "kind": "consolidation", "tenant_id": "demo", "decisions": []}
    assert module.describe(report, ids, "demo") is None
    other = {"tenant_id": "demo", "memory_id": "m-2", "kind": "created", "after": {}}
    assert module.describe(other, ids, "demo") is None
    mine = {**other, "memory_id": "m-1", "reason": "new", "after": {"tier": "episodic"}}
    line = module.describe(orjson.loads(orjson.dumps(mine)), ids, "demo")
    assert line is not None
    assert line.startswith("m-1  created")
    assert "episodic" in line


def test_a_broker_it_cannot_reach_is_one_line_and_exit_1(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """It ended in a traceback and aiokafka's "Unclosed AIOKafkaProducer" warning (an error
    here: warnings are errors in tests)."""
    assert demo().cli(["--bootstrap", f"127.0.0.1:{free_port()}"]) == 1
    error = capsys.readouterr().err
    assert error.startswith("cannot reach Kafka at 127.0.0.1:")
    assert "Traceback" not in error
