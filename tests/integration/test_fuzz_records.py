"""10,000 fuzzed records on memory-writes (garbage bytes, wrong types, odd unicode, huge numbers,
times far in the future or past, wrong sizes) among valid ones: every record either applies or is
on dead-letter with its reason, none is lost, none is both, and the worker never stops.
"""

from __future__ import annotations

import base64
import random
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest

from tests.integration.harness import (
    Stack,
    WorkerProcess,
    dead_letters,
    eventually,
    produce,
    table_states,
)

pytestmark = pytest.mark.integration
N = 10_000
ODD_VALUES: list[Any] = [
    None, True, -1, 0, 2**63, 10**40, -(10**30), 1e308, -0.0, 1.5, "", " ", "\x00", "\ud800",
    "😀" * 50, "x" * 70_000, "../../etc", "a/b", [], {}, [1, "2", None], {"k": {"k": [1e300]}},
    "9999-12-31T23:59:59+00:00", "0001-01-01T00:00:00+00:00", "1969-12-31T23:59:59Z",
    "2026-02-30T00:00:00Z", "not a time", "2026-03-01T12:00:00",
]  # fmt: skip
FIELDS = ["v", "tenant_id", "content", "at", "importance", "embedding", "tags", "metadata",
          "memory_type", "session_id", "agent_id", "user_id", "relations", "context", "kind"]  # fmt: skip


def record(i: int, rng: random.Random, dim: int, at: str) -> tuple[bytes, bytes]:
    """Record ``i`` about memory ``f<i>``: valid about a third of the time, else one to three
    fields fuzzed (its id only ever into one no memory can have), or random bytes.
    """
    key = f"acme/f{i}".encode()
    doc: dict[str, Any] = {
        "v": 1,
        "tenant_id": "acme",
        "memory_id": f"f{i}",
        "content": f"fuzzed memory {i}",
        "at": at,
        "importance": 0.5,
        "embedding": [rng.uniform(-1, 1) for _ in range(dim)],
    }
    roll = rng.random()
    if roll < 0.05:
        return key, rng.randbytes(rng.randint(0, 64))
    if roll < 0.35:
        return key, orjson.dumps(doc)
    if rng.random() < 0.1:  # an id no memory can have: the record must be rejected, not renamed
        doc["memory_id"] = rng.choice(["a/b", "", 5, [], "x" * 200, "\ud800", " "])
    for _ in range(rng.randint(1, 3)):
        name = rng.choice(FIELDS)
        value = rng.choice(ODD_VALUES)
        if name == "embedding" and rng.random() < 0.5:
            value = [rng.choice([1.0, 0.0, 1e39, -1e39]) for _ in range(rng.choice([dim, dim + 1]))]
        doc[name] = value
    try:
        return key, orjson.dumps(doc)
    except orjson.JSONEncodeError:  # a lone surrogate or an integer over 64 bits: by hand
        return key, _by_hand(doc).encode("utf-8", "surrogatepass")


def _by_hand(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ",".join(f"{_by_hand(str(k))}:{_by_hand(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_by_hand(v) for v in value) + "]"
    if isinstance(value, str):
        return '"' + "".join(_escaped(c) for c in value) + '"'
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    return repr(value)


def _escaped(c: str) -> str:
    if c in '"\\' or ord(c) < 0x20 or 0xD800 <= ord(c) <= 0xDFFF:
        return f"\\u{ord(c):04x}"
    return c


def test_every_fuzzed_record_is_applied_or_dead_lettered_and_none_is_lost(
    make_stack: Callable[..., Stack], workers: list[WorkerProcess]
) -> None:
    stack = make_stack(("acme",))
    rng = random.Random(2026)
    at = (datetime.now(UTC) - timedelta(minutes=1)).isoformat()
    records = [record(i, rng, stack.dim, at) for i in range(N)]
    workers.append(worker := WorkerProcess(stack).start())
    produce(stack.bootstrap, stack.topic("memory-writes"), records)

    def settled() -> bool:
        return len(dead_letters(stack)) + len(applied()) == N

    def applied() -> set[int]:
        return {int(k.split("/f")[1]) for k in table_states(stack) if k.startswith("acme/f")}

    eventually(settled, 600, "every record applied or dead-lettered", worker)
    letters = dead_letters(stack)
    rejected = {int(base64.b64decode(d["key"]).decode().split("/f")[1]) for d in letters}
    done = applied()
    assert len(letters) == len(rejected)  # each rejected record once
    assert all(d["reason"] and d["field"] for d in letters)
    crashes = [d["reason"] for d in letters if d["reason"].startswith("internal error")]
    assert crashes == []  # every rejection names bad input, none is a bug caught
    assert not done & rejected  # none both applied and rejected
    assert done | rejected == set(range(N))  # none lost
    assert len(done) >= N // 4  # the valid third applied
    assert worker.proc is not None
    assert worker.proc.poll() is None  # the worker never stopped
