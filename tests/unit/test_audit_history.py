"""Which of a memory's audit records the history route shows (the Kafka read: tests/integration)."""

from __future__ import annotations

import orjson

from ranker.history import Newest


def record(kind: str, n: int, tenant_id: str = "acme") -> bytes:
    return orjson.dumps({"tenant_id": tenant_id, "kind": kind, "reason": f"#{n}", "at": None})


def test_a_memory_past_the_limit_shows_its_newest_records_and_says_how_many_it_has() -> None:
    """The oldest 10,000 were kept: a memory recalled ~50,000 times (a "rescheduled" record every
    5th access) showed none of what explains its state now, its deletion, and said nothing.
    """
    newest = Newest(b"acme/m1", "acme", limit=100)
    newest.add(b"acme/m1", record("created", 0), 0)
    for n in range(1, 150):
        newest.add(b"acme/m1", record("rescheduled", n), 0)
        newest.add(b"acme/m2", record("rescheduled", n), 0)  # another memory of the partition
        newest.add(b"acme/m1", record("rescheduled", n, tenant_id="globex"), 0)  # not this tenant's
        newest.add(b"acme/m1", b"not json", 0)
    newest.add(b"acme/m1", record("deleted", 150), 0)
    found = newest.history()
    assert found.total == 151
    assert [e["reason"] for e in found.events] == [f"#{n}" for n in range(51, 151)]
    assert found.events[-1]["kind"] == "deleted"


def test_a_memory_within_the_limit_shows_every_record_oldest_first() -> None:
    newest = Newest(b"acme/m1", "acme")
    for n, kind in enumerate(("created", "superseded")):
        newest.add(b"acme/m1", record(kind, n), 0)
    found = newest.history()
    assert ([e["kind"] for e in found.events], found.total) == (["created", "superseded"], 2)
