"""Poison records on a real broker: one batch mixing records that used to crash the writes agent
with valid writes; every valid write applies and each bad record is on dead-letter with its field."""

from __future__ import annotations

import base64
import random
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import orjson
import pytest

from memcore import Lifecycle
from storage.milvus import ANY_STATE
from tests.integration.harness import (
    Stack,
    WorkerProcess,
    dead_letters,
    eventually,
    produce,
    table_states,
)

pytestmark = pytest.mark.integration

KAFKA_MESSAGE_LIMIT = 1_048_576


def doc_bytes(memory_id: str, at: str, rng: random.Random, dim: int, **kw: object) -> bytes:
    doc: dict[str, object] = {
        "v": 1,
        "tenant_id": "acme",
        "memory_id": memory_id,
        "content": f"memory {memory_id}",
        "at": at,
        "importance": 0.5,
        "embedding": [rng.uniform(-1, 1) for _ in range(dim)],
    }
    doc.update(kw)
    return orjson.dumps(doc)


def test_a_poisoned_batch_loses_no_valid_write(
    make_stack: Callable[..., Stack], workers: list[WorkerProcess]
) -> None:
    stack = make_stack(("acme",))
    rng = random.Random(11)
    # event times: the records are produced now, so "now" is their receive time
    now = datetime.now(UTC)
    at = (now - timedelta(minutes=5)).isoformat()
    good = [(f"acme/ok{i}".encode(), doc_bytes(f"ok{i}", at, rng, stack.dim)) for i in range(30)]
    surrogate = doc_bytes("x5", at, rng, stack.dim, content="SURROGATE").replace(
        b"SURROGATE", b"\\ud800"
    )
    bad = {
        "year 9999": (b"acme/x1", doc_bytes("x1", "9999-12-31T23:00:00+00:00", rng, stack.dim)),
        "900 KB": (b"acme/x2", doc_bytes("x2", at, rng, stack.dim, content="x" * 900_000)),
        "a day ahead": (
            b"acme/x3",
            doc_bytes("x3", (now + timedelta(days=1)).isoformat(), rng, stack.dim),
        ),
        "over 64 bits": (
            b"acme/x4",
            doc_bytes("x4", at, rng, stack.dim).replace(
                b'"importance":0.5', b'"importance":' + b"9" * 40
            ),
        ),
        "lone surrogate": (b"acme/x5", surrogate),
        "year 1": (b"acme/x6", doc_bytes("x6", "0001-01-01T00:00:00+00:00", rng, stack.dim)),
    }
    fields = {
        "year 9999": "at",
        "900 KB": "content",
        "a day ahead": "at",
        "over 64 bits": "importance",
        "lone surrogate": "$",
        "year 1": "at",
    }
    mixed = good[:10] + list(bad.values())[:3] + good[10:20] + list(bad.values())[3:] + good[20:]
    # MNEMO_LOG_FORMAT=json: the worker's lines (Faust's too) are JSON objects (checked below)
    workers.append(worker := WorkerProcess(stack, env={"MNEMO_LOG_FORMAT": "json"}).start())
    # a tombstone amid them (no value: another producer's null): dead-lettered, nothing lost
    tombstone: list[tuple[bytes | None, bytes | None]] = [(b"acme/x7", None)]
    produce(stack.bootstrap, stack.topic("memory-writes"), [*mixed[:15], *tombstone, *mixed[15:]])
    # an access dated a year ahead must archive nothing; the one after it counts
    ahead = {"v": 1, "tenant_id": "acme", "memory_id": "ok0", "kind": "recall"}
    produce(
        stack.bootstrap,
        stack.topic("access-events"),
        [
            (b"acme/ok0", orjson.dumps({**ahead, "at": (now + timedelta(days=365)).isoformat()})),
            (b"acme/ok0", orjson.dumps({**ahead, "at": now.isoformat()})),
        ],
    )
    store = stack.store()
    want = {f"ok{i}" for i in range(len(good))}

    def applied() -> bool:
        rows = {r.memory_id for r in store.query("acme", ANY_STATE)}
        state = table_states(stack).get("acme/ok0")  # counters live in the table, not the row
        return rows == want and state is not None and state.access_count == 1

    eventually(applied, 180, "every valid write in Milvus and the valid access", worker)
    eventually(lambda: len(dead_letters(stack)) == len(bad) + 2, 60, "dead letters", worker)
    letters = dead_letters(stack)
    by_payload = {}
    for letter in letters:
        assert letter["reason"].startswith(letter["field"])
        by_payload[base64.b64decode(letter["payload"])] = letter
    for name, (_, value) in bad.items():
        letter = by_payload[value[: 256 * 1024]]  # streams.processor.MAX_DEAD_LETTER_PAYLOAD
        assert letter["field"] == fields[name], name
        assert letter["payload_bytes"] == len(value)
        assert letter["payload_truncated"] is (name == "900 KB")
    (empty,) = [d for d in letters if d["payload_bytes"] == 0]
    assert (empty["field"], base64.b64decode(empty["key"])) == ("$", b"acme/x7")
    (access_letter,) = [d for d in letters if d["topic"] == stack.topic("access-events")]
    assert access_letter["field"] == "at"
    eventually(lambda: {s.memory_id for s in table_states(stack).values()} == want, 60, "the table")
    states = table_states(stack)
    assert states["acme/ok0"].state is Lifecycle.ACTIVE
    assert (states["acme/ok0"].access_count, states["acme/ok0"].recall_count) == (1, 1)
    assert all(len(v) < KAFKA_MESSAGE_LIMIT for _, v in mixed)
    assert worker.proc is not None
    assert worker.proc.poll() is None  # still running
    lines = [orjson.loads(line) for line in worker.log().splitlines() if line.strip()]
    loggers = {line["logger"].split(".")[0] for line in lines}
    assert {"streams", "faust"} <= loggers, loggers
    assert all(line["level"] and "message" in line for line in lines)
