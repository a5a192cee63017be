"""Poison containment: every record applies or goes to dead-letter naming its field, whatever its
content; the event-time window; dead letters that always fit in a Kafka message; one record's
internal error never costs its neighbours."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta, timezone

import orjson
import pytest

from memcore import MAX_SUMMARY_SOURCES, InvalidField, Lifecycle, resolve_importance
from memcore.timecheck import check_event_time
from storage.records import DecisionRecord, Limits, RecordError, encode_access
from storage.tenants import TenantRegistry
from streams.app import received_at
from streams.processor import (
    MAX_DEAD_LETTER_PAYLOAD,
    Batch,
    Inbound,
    Processor,
    contained,
    dead_letter,
)

SKEW = timedelta(seconds=300)
LIMITS = Limits(4, 16_384, TenantRegistry.open_to(["acme"]), SKEW)
RECEIVED = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
AT = RECEIVED.isoformat()
KAFKA_LIMIT = 1_048_576


# -- the pure window ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("at", "now", "reason"),
    [
        (datetime(9999, 12, 31, 23, tzinfo=UTC), None, "after 9000-01-01"),
        (datetime(9999, 12, 31, 23, tzinfo=timezone(-timedelta(hours=5))), RECEIVED, "more than"),
        (datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=5))), None, "before 1970"),
        (datetime(1969, 12, 31, 23, 59, tzinfo=UTC), RECEIVED, "before 1970"),
        (RECEIVED + SKEW + timedelta(microseconds=1), RECEIVED, "more than 300 s after"),
        (RECEIVED.replace(tzinfo=None), RECEIVED, "naive"),
        ("2026-03-01T12:00:00+00:00", RECEIVED, "timezone-aware"),
    ],
)
def test_event_times_outside_the_window_are_refused(
    at: object, now: datetime | None, reason: str
) -> None:
    with pytest.raises(InvalidField) as err:
        check_event_time("at", at, now, SKEW)
    assert err.value.field == "at"
    assert reason in str(err.value)


def test_event_times_inside_the_window_are_kept() -> None:
    edge = RECEIVED + SKEW
    assert check_event_time("at", edge, RECEIVED, SKEW) is edge
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    assert check_event_time("at", epoch, RECEIVED, SKEW) is epoch
    far = datetime(2400, 1, 1, tzinfo=UTC)
    assert check_event_time("at", far, None, SKEW) is far  # no receive time: fixed bounds only
    with pytest.raises(InvalidField, match="max_skew"):
        check_event_time("at", RECEIVED, RECEIVED, timedelta(seconds=-1))


def test_the_receive_time_is_the_kafka_timestamp_capped_by_the_clock() -> None:
    now = RECEIVED + timedelta(hours=1)
    assert received_at(RECEIVED.timestamp(), now) == RECEIVED
    assert received_at((now + timedelta(days=9)).timestamp(), now) == now  # producer ahead
    assert received_at(None, now) == now
    assert received_at(1e300, now) == now  # past datetime's range


# -- records through the processor ----------------------------------------------------------------


class Tables:
    def __init__(self) -> None:
        self.memories: dict[bytes, bytes] = {}
        self.documents: dict[bytes, bytes] = {}
        self.processor = Processor(self.memories, self.documents, {}, {}, LIMITS)
        self.offset = 0

    def message(self, raw: bytes, key: bytes | None = b"acme/m1") -> Inbound:
        self.offset += 1
        return Inbound("w", 0, self.offset, key, raw, RECEIVED)

    def writes(self, messages: list[Inbound]) -> Batch:
        """The writes agent's loop body, one record contained at a time."""
        batch = Batch()
        for message, record in self.processor.decode_writes(messages, batch):
            with contained(message, batch):
                assert not isinstance(record, DecisionRecord)
                vector = record.embedding or (1.0, 0.0, 0.0, 0.0)
                importance = resolve_importance(record.content, explicit=record.importance)
                self.processor.write(message, record, vector, importance, batch)
        return batch

    def access(self, at: str) -> Batch:
        batch = Batch()
        raw = encode_access({"tenant_id": "acme", "memory_id": "m1", "at": at, "kind": "get"})
        self.processor.access(
            Inbound("a", 0, self.offset, b"acme/m1", raw, RECEIVED), batch, writes_caught_up=True
        )
        self.offset += 1
        return batch


def write(memory_id: str = "m1", **fields: object) -> bytes:
    doc = {"v": 1, "tenant_id": "acme", "memory_id": memory_id, "content": "hello", "at": AT}
    doc["importance"] = 0.5
    doc.update(fields)
    return orjson.dumps(doc)


def raw_write(fragment: str) -> bytes:
    """A write whose JSON text carries ``fragment`` verbatim (what orjson would not produce)."""
    return (
        '{"v":1,"tenant_id":"acme","memory_id":"m1","content":"x","at":"'
        + AT
        + '",'
        + fragment
        + "}"
    ).encode()


POISON = [
    ("year 9999", write(at="9999-12-31T23:00:00+00:00"), "at"),
    ("year 9999, negative offset", write(at="9999-12-31T23:00:00-05:00"), "at"),
    ("year 1", write(at="0001-01-01T00:00:00+05:00"), "at"),
    ("beyond the skew", write(at=(RECEIVED + timedelta(hours=1)).isoformat()), "at"),
    ("importance over 64 bits", raw_write('"importance":' + "9" * 40), "importance"),
    ("metadata integer over 64 bits", raw_write('"metadata":{"n":' + "9" * 40 + "}"), "metadata"),
    (
        "metadata nested 33 deep",
        raw_write('"metadata":' + '{"a":' * 33 + "1" + "}" * 33),
        "metadata",
    ),
    (
        "metadata nested 300 deep",
        raw_write('"metadata":' + '{"a":' * 300 + "1" + "}" * 300),
        "metadata",
    ),
    ("NaN importance", raw_write('"importance":NaN'), "$"),
    ("NaN in the embedding", raw_write('"embedding":[NaN,1,1,1]'), "$"),
    ("embedding past float32", write(embedding=[1e308, 1, 1, 1]), "embedding[0]"),
    ("embedding that float32 zeroes", write(embedding=[1e-320, 0, 0, 0]), "embedding"),
    ("lone surrogate in session_id", raw_write('"session_id":"\\ud800"'), "$"),
    ("lone surrogate in a tag", raw_write('"tags":["\\udc00"]'), "$"),
    ("lone surrogate in a metadata key", raw_write('"metadata":{"\\udc00":1}'), "$"),
    # NUL joins a derived id's parts: unscoped "user:bob\0..." derived Bob's memory's id
    (
        "NUL in the content, its id derived",
        orjson.dumps(
            {
                k: v
                for k, v in orjson.loads(write(content="user:bob\x00PIN")).items()
                if k != "memory_id"
            }
        ),
        "content",
    ),
    ("NUL in session_id", write(agent_id="a", session_id="b\x00"), "session_id"),
    ("NUL in agent_id", write(agent_id="a\x00b"), "agent_id"),
    ("NUL in user_id", write(user_id="bob\x00"), "user_id"),
    ("a time of digits only", write(at="1772366400"), "at"),  # read as Unix seconds
    ("a time of decimal seconds", write(at="1772366400.5"), "at"),
    ("a time in exponent form", write(at="1.7e9"), "at"),
    ("a negative time", write(at="-1.0"), "at"),
    ("a time given as a number", write(at=1772366400), "at"),
    ("version given as true", write(v=True), "v"),
    ("version given as 1.0", write(v=1.0), "v"),
    ("newline ending the id", write(memory_id="m1\n"), "memory_id"),
    ("control character in the id", write(memory_id="m\x001"), "memory_id"),
    ("900 KB content", write(content="x" * 900_000), "content"),
    ("session id over 256 bytes", write(session_id="é" * 200), "session_id"),
    ("user id over 256 bytes", write(user_id="é" * 200), "user_id"),
    ("lone surrogate in user_id", raw_write('"user_id":"\\ud800"'), "$"),
    ("tag over 128 bytes", write(tags=["é" * 100]), "tags[0]"),
    ("metadata over 32 KiB", write(metadata={"a": "x" * 40_000}), "metadata"),
    (
        "more summary sources than a row holds",
        write(summary_of=[f"s{i}" for i in range(MAX_SUMMARY_SOURCES + 1)]),
        "summary_of",
    ),
    (
        "an unknown field named by 50,000 characters",
        orjson.dumps({**orjson.loads(write()), "k" * 50_000: 1}),
        "k" * 197 + "...",
    ),
]


@pytest.mark.parametrize(("name", "raw", "field"), POISON, ids=[p[0] for p in POISON])
def test_poison_goes_to_dead_letter_and_its_neighbours_apply(
    name: str, raw: bytes, field: str
) -> None:
    t = Tables()
    before = t.message(write("before"), b"acme/before")
    poison = t.message(raw, b"acme/m1")
    after = t.message(write("after"), b"acme/after")
    batch = t.writes([before, poison, after])
    letters = [orjson.loads(o.value) for o in batch.out if o.role == "dead-letter"]
    assert [(d["offset"], d["field"]) for d in letters] == [(poison.offset, field)], name
    assert len(letters[0]["reason"]) <= 1000
    assert sorted(t.memories) == [b"acme/after", b"acme/before"]
    assert all(len(o.value) + len(o.key or b"") < KAFKA_LIMIT for o in batch.out)


@pytest.mark.parametrize("place", ["tenant_id", "memory_id", "content", "at"])
def test_a_lone_surrogate_in_any_field_is_a_dead_letter(place: str) -> None:
    fields = {"tenant_id": '"acme"', "memory_id": '"m1"', "content": '"hello"', "at": f'"{AT}"'}
    fields[place] = '"a\\udfffb"'
    text = '{"v":1,' + ",".join(f'"{k}":{v}' for k, v in fields.items()) + "}"
    t = Tables()
    batch = t.writes([t.message(text.encode())])
    assert [o.role for o in batch.out] == ["dead-letter"]
    assert t.memories == {}


def test_a_dead_letter_fits_in_a_kafka_message_whatever_it_carries() -> None:
    value = write(content="x" * 900_000)
    key = b"k" * 500_000
    letter = dead_letter(Inbound("w", 2, 9, key, value), RecordError("content", "x", "too long"))
    body = orjson.loads(letter.value)
    assert len(letter.value) + len(letter.key or b"") < KAFKA_LIMIT // 2
    assert body["payload_truncated"] is True
    assert body["payload_bytes"] == len(value)
    assert base64.b64decode(body["payload"]) == value[:MAX_DEAD_LETTER_PAYLOAD]
    assert (body["key_truncated"], body["key_bytes"]) == (True, len(key))
    small = orjson.loads(
        dead_letter(Inbound("w", 0, 1, None, b"{}"), RecordError("v", 0, "no")).value
    )
    assert (small["payload_truncated"], small["payload_bytes"], small["key"]) == (False, 2, None)
    assert base64.b64decode(small["payload"]) == b"{}"


def test_a_future_access_archives_nothing_and_later_accesses_count() -> None:
    t = Tables()
    t.writes([t.message(write())])
    future = t.access((RECEIVED + timedelta(days=400)).isoformat())
    (letter,) = [orjson.loads(o.value) for o in future.out]
    assert letter["field"] == "at"
    assert "after the time it was received" in letter["reason"]
    t.access((RECEIVED + timedelta(seconds=1)).isoformat())
    state = t.processor.state("acme/m1")
    assert state is not None
    assert (state.state, state.access_count) == (Lifecycle.ACTIVE, 1)


def test_an_absorb_with_a_future_last_access_goes_to_dead_letter_naming_it() -> None:
    """Only the 1970-9000 bounds held it: a survivor given a last access in 8999 never decayed."""
    t = Tables()
    t.writes([t.message(write())])
    batch = Batch()
    for last_access in ("8999-12-31T00:00:00+00:00", AT):
        absorb = {
            "v": 1,
            "kind": "decision",
            "tenant_id": "acme",
            "memory_id": "m1",
            "at": AT,
            "decision": "absorb",
            "source": f"m-{last_access[:4]}",
            "access_count": 2,
            "reason": "exact duplicate",
            "last_access": last_access,
        }
        for message, record in t.processor.decode_writes([t.message(orjson.dumps(absorb))], batch):
            assert isinstance(record, DecisionRecord)
            t.processor.decision(message, record, batch)
    (letter,) = [orjson.loads(o.value) for o in batch.out if o.role == "dead-letter"]
    assert letter["field"] == "last_access"
    state = t.processor.state("acme/m1")
    assert state is not None
    assert (state.access_count, state.merged_from) == (2, (f"m-{AT[:4]}",))


def test_an_internal_error_costs_only_its_own_record() -> None:
    t = Tables()
    messages = [t.message(write(f"m{i}"), f"acme/m{i}".encode()) for i in range(3)]
    batch = Batch()
    for i, (message, record) in enumerate(t.processor.decode_writes(messages, batch)):
        with contained(message, batch):
            assert not isinstance(record, DecisionRecord)
            importance = resolve_importance(record.content, explicit=record.importance)
            t.processor.write(message, record, (1.0, 0.0, 0.0, 0.0), importance, batch)
            if i == 1:
                msg = "boom"
                raise ZeroDivisionError(msg)  # after its audit record was added
    kinds = [(o.role, orjson.loads(o.value).get("reason")) for o in batch.out]
    assert kinds == [
        ("audit", kinds[0][1]),
        ("dead-letter", "internal error: ZeroDivisionError: boom"),
        ("audit", kinds[2][1]),
    ]
    assert orjson.loads(batch.out[1].value)["offset"] == messages[1].offset
