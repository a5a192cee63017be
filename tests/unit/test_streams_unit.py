"""The stream processor and wire records with in-memory tables (the Faust wiring is tested in
tests/integration against a real broker)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from memcore import (
    MAX_RELATIONS,
    MAX_TAGS,
    Absorb,
    Decision,
    DecisionKind,
    Effect,
    EffectKind,
    Fade,
    ImportanceSource,
    Lifecycle,
    Policy,
    Promote,
    Purge,
    Reinstate,
    Restore,
    Retire,
    Strategy,
    Succeeds,
    Supersede,
    SupersessionPolicy,
    Tier,
    merged_away,
    resolve_importance,
)
from memcore.consolidation import plan
from memcore.ids import content_hash, derive_memory_id, indexed_text
from memcore.keyword import keyword_text
from ranker.hotcache import live_passes
from storage import Document, Filters, Hit, MemoryRow, StorageError, codec
from storage.changelogs import Tables as ChangelogTables
from storage.milvus import ANY_STATE
from storage.records import (
    MAX_METADATA_BYTES,
    ConsolidationRequest,
    DecisionEvent,
    DecisionRecord,
    Limits,
    RecordError,
    WriteRecord,
    decision_value,
    decode_access,
    decode_consolidation,
    decode_decision,
    decode_memory_event,
    decode_write,
    encode_access,
    encode_write,
)
from storage.rows import CURRENT, LIVE_FIELDS, from_us, live_values, to_us
from storage.tenants import TenantRegistry
from streams.app import (
    Services,
    consolidatable,
    consolidation_requests,
    nearest,
    stored_rows,
    supersedable,
)
from streams.consolidation import decision_records, item_of, plan_tenant, report
from streams.processor import Batch, Inbound, Outbound, Processor, tenant_counts
from streams.rebuild import ResyncMarker, catch_up, resync_on_failure, write_rows
from tests.rows import make_row

from .helpers import T0, CountingDict, created

T = datetime(2026, 3, 1, 12, tzinfo=UTC)
LIMITS = Limits(4, 64, TenantRegistry.open_to(["acme", "globex"]))
AT = "2026-03-01T12:00:00+00:00"


def write_bytes(**kw: object) -> bytes:
    doc: dict[str, object] = {"tenant_id": "acme", "memory_id": "m1", "content": "hello", "at": AT}
    doc.update(kw)
    return encode_write({k: v for k, v in doc.items() if v is not None})


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (b"\xff", "$"),
        (b"[1]", "$"),
        (b'{"v": 2}', "v"),
        (write_bytes(tenant_id="nobody"), "tenant_id"),
        (write_bytes(tenant_id="a/b"), "tenant_id"),
        (write_bytes(memory_id="bad id"), "memory_id"),
        (write_bytes(content=""), "content"),
        (write_bytes(content="x" * 65), "content"),
        (write_bytes(at="2026-03-01T12:00:00"), "at"),
        (write_bytes(at=5), "at"),
        (write_bytes(embedding=[1, 2]), "embedding"),
        (write_bytes(embedding=[0, 0, 0, 0]), "embedding"),
        (write_bytes(embedding=[1, "2", 3, 4]), "embedding[1]"),
        (write_bytes(importance=-0.1), "importance"),
        (write_bytes(importance=True), "importance"),
        (write_bytes(memory_type="procedural"), "memory_type"),
        (write_bytes(tags=["ok", ""]), "tags[1]"),
        (write_bytes(relations=["a b"]), "relations[0]"),
        (write_bytes(supersedes="a b"), "supersedes"),
        (write_bytes(supersedes="m1"), "supersedes"),  # itself
        (write_bytes(supersedes=7), "supersedes"),
        (write_bytes(extra=1), "extra"),
        (write_bytes(content=None), "content"),
        (
            b'{"v":1,"tenant_id":"acme","content":"x","at":"2026-03-01T12:00:00Z","importance":NaN}',
            "$",
        ),
    ],
)
def test_bad_writes_name_their_field(raw: bytes, field: str) -> None:
    with pytest.raises(RecordError) as err:
        decode_write(raw, LIMITS)
    assert err.value.field == field
    assert str(err.value).startswith(field)


def test_good_write_and_derived_id() -> None:
    record = decode_write(write_bytes(memory_id=None, memory_type="long_term", tags=["a"]), LIMITS)
    assert record.memory_id.startswith("m-")
    assert record.memory_type is not None
    assert record.memory_type.value == "semantic"
    assert record.at == datetime(2026, 3, 1, 12, tzinfo=UTC)


def test_a_write_repeating_a_tag_holds_it_once_in_the_order_first_given() -> None:
    """("a", "a", "a") was stored as given: each repeat took a place of the 64 a memory keeps."""
    record = decode_write(write_bytes(tags=["b", "a", "b", "a", "c"]), LIMITS)
    assert record.tags == ("b", "a", "c")


def test_access_records() -> None:
    good = encode_access({"tenant_id": "acme", "memory_id": "m1", "at": AT, "kind": "recall"})
    assert decode_access(good, LIMITS).kind.value == "recall"
    bad = encode_access({"tenant_id": "acme", "memory_id": "m1", "at": AT, "kind": "peek"})
    with pytest.raises(RecordError, match=r"^kind"):
        decode_access(bad, LIMITS)


def test_codec_round_trip() -> None:
    state = dataclasses.replace(
        created(0.7), tags=("a",), relations=("m2",), offsets=(("w/0", 3),), merged_from=("x",)
    )
    doc = Document("hello", (0.5, -0.25, 1.0), {"k": [1, 2]}, "said by Ann")
    superseded = dataclasses.replace(state, valid_to=state.created_at, superseded_by="m9")
    assert codec.decode(codec.encode(state)) == state
    assert codec.decode(codec.encode(superseded)) == superseded
    restated = dataclasses.replace(
        state, stated_at=state.created_at + timedelta(hours=1), reasserted_over="m8"
    )
    assert codec.decode(codec.encode(restated)) == restated
    assert b"stated_at" not in codec.encode(state)  # a state never restated encodes as before
    assert b"reasserted_over" not in codec.encode(state)
    assert codec.decode_document(codec.encode_document(doc)) == doc
    successor = dataclasses.replace(state, predecessors=("m7", "m8"))
    assert codec.decode(codec.encode(successor)) == successor
    assert b"predecessors" not in codec.encode(state)  # one that superseded none: as before
    summarised = dataclasses.replace(state, summarised_in=("s1", "s2"))
    assert codec.decode(codec.encode(summarised)) == summarised
    assert b"summarised_in" not in codec.encode(state)  # in no summary: as before
    one = orjson.loads(codec.encode(state)) | {"summarised_in": "s1"}  # one id, as once written
    assert codec.decode(orjson.dumps(one)).summarised_in == ("s1",)


def test_a_state_written_before_predecessors_were_kept_decodes_with_none() -> None:
    older = orjson.loads(codec.encode(created(0.7)))
    assert "predecessors" not in older
    assert codec.decode(orjson.dumps(older)).predecessors == ()


@given(
    tier=st.sampled_from(list(Tier)),
    state=st.sampled_from(list(Lifecycle)),
    importance=st.floats(0, 1),
    counts=st.tuples(*[st.integers(0, 2**40)] * 3),
    micros=st.tuples(*[st.integers(0, 2**52)] * 4),
    superseded_by=st.none() | st.sampled_from(["m9", ""]),
    with_ends=st.booleans(),
)
def test_the_live_values_read_from_an_encoded_state_are_those_of_the_state(
    tier: Tier,
    state: Lifecycle,
    importance: float,
    counts: tuple[int, int, int],
    micros: tuple[int, int, int, int],
    superseded_by: str | None,
    with_ends: bool,
) -> None:
    base = created(0.5)
    last, changed, review, valid_to = (from_us(us) for us in micros)
    decoded = dataclasses.replace(
        base,
        tier=tier,
        state=state,
        importance=importance,
        access_count=counts[0],
        recall_count=counts[1],
        write_count=counts[2],
        last_access=last,
        state_changed_at=changed,
        card=dataclasses.replace(base.card, next_review=review if with_ends else None),
        valid_to=valid_to if with_ends else None,
        superseded_by=superseded_by,
    )
    assert codec.decode_live(codec.encode(decoded)) == live_values(decoded)


def test_a_version_superseded_at_the_epoch_itself_is_not_read_as_current() -> None:
    """Event times may be 1970-01-01T00:00:00Z (an import's placeholder): a version superseded
    then had ``valid_to_us`` 0, which is CURRENT, and recall served both versions as current."""
    ended = dataclasses.replace(created(0.5), valid_to=from_us(0), superseded_by="m2")
    at_recall = Filters(current_at_us=to_us(datetime(2026, 1, 1, tzinfo=UTC)))
    for values in (live_values(ended), codec.decode_live(codec.encode(ended))):
        assert values[LIVE_FIELDS.index("valid_to_us")] != CURRENT
        assert not live_passes(values, at_recall)  # the hot path and the Milvus rows alike


def test_codec_keeps_the_user_scope_and_reads_states_written_before_it() -> None:
    state = dataclasses.replace(created(0.7), agent_id="bot", session_id="run-1", user_id="ann")
    assert codec.decode(codec.encode(state)).user_id == "ann"
    assert codec.decode(codec.encode(state)) == state
    unscoped = dataclasses.replace(state, user_id=None)
    older = orjson.loads(codec.encode(unscoped))
    # a state without a user encodes (and so hashes) as before user scopes existed
    assert "user_id" not in older
    assert orjson.loads(codec.encode(state)).keys() - older.keys() == {"user_id"}
    decoded = codec.decode(orjson.dumps(older))
    assert decoded.user_id is None
    assert decoded == unscoped


def test_a_user_scoped_write_keeps_its_user_and_derives_its_id_from_it() -> None:
    ann = decode_write(write_bytes(memory_id=None, user_id="ann", agent_id="bot"), LIMITS)
    bob = decode_write(write_bytes(memory_id=None, user_id="bob", agent_id="bot"), LIMITS)
    unscoped = decode_write(write_bytes(memory_id=None, agent_id="bot"), LIMITS)
    assert (ann.user_id, bob.user_id, unscoped.user_id) == ("ann", "bob", None)
    assert ann.memory_id == derive_memory_id("acme", "hello", "bot", None, "ann")
    assert len({ann.memory_id, bob.memory_id, unscoped.memory_id}) == 3
    assert unscoped.memory_id == derive_memory_id("acme", "hello", "bot")  # as before users
    for bad in ("é" * 129, 5):
        with pytest.raises(RecordError) as err:
            decode_write(write_bytes(user_id=bad), LIMITS)
        assert err.value.field == "user_id"
    t = Tables()
    t.write(write_bytes(user_id="ann", agent_id="bot", session_id="run-1"))
    found = t.processor.load("acme/m1")
    assert found is not None
    assert found[0].user_id == "ann"
    row = MemoryRow.of(*found)
    assert (row.user_id, row.agent_id, row.session_id) == ("ann", "bot", "run-1")
    assert MemoryRow.of(created(), found[1]).user_id == ""  # no user: the empty VARCHAR


def test_context_is_indexed_with_the_content_and_kept_apart() -> None:
    record = decode_write(
        write_bytes(content="I went there", context="[8 May] Ann: the gym"), LIMITS
    )
    assert record.indexed_text == "[8 May] Ann: the gym\nI went there"
    t = Tables()
    t.write(write_bytes(content="I went there", context="[8 May] Ann: the gym"))
    found = t.processor.load("acme/m1")
    assert found is not None
    row = MemoryRow.of(*found)
    assert (row.content, row.search_text) == ("I went there", "8 may ann gym went")
    too_big = write_bytes(context="x" * (LIMITS.max_content_bytes + 1))
    with pytest.raises(RecordError, match=r"^context"):
        decode_write(too_big, LIMITS)


def test_a_write_stating_a_fact_is_noted_for_supersession() -> None:
    t = Tables()
    assert list(t.write(write_bytes(content="Alice lives in Osaka")).stated) == ["acme/m1"]
    assert list(t.write(write_bytes(content="Alice lives in Osaka")).stated) == []  # a fold
    assert list(t.write(write_bytes(content="Alice lives in Lisbon")).stated) == ["acme/m1"]


@given(st.lists(st.floats(width=32, allow_nan=False, allow_infinity=False), max_size=64))
def test_vectors_round_trip_as_float32(values: list[float]) -> None:
    assert codec.decode_vector(codec.encode_vector(tuple(values))) == tuple(values)


class Tables:
    def __init__(self) -> None:
        self.memories: dict[bytes, bytes] = {}
        self.documents: dict[bytes, bytes] = {}
        self.counters: dict[bytes, bytes] = {}
        self.pending: dict[bytes, bytes] = {}
        self.processor = Processor(
            self.memories, self.documents, self.counters, self.pending, LIMITS
        )
        self.offset = 0

    def message(
        self, topic: str, raw: bytes, key: bytes | None = b"acme/m1", partition: int = 0
    ) -> Inbound:
        self.offset += 1
        return Inbound(topic, partition, self.offset, key, raw)

    def write(self, raw: bytes, key: bytes | None = b"acme/m1") -> Batch:
        batch = Batch()
        for message, record in self.processor.decode_writes([self.message("w", raw, key)], batch):
            if isinstance(record, DecisionRecord):
                self.processor.decision(message, record, batch)
                continue
            vector = record.embedding or (1.0, 0.0, 0.0, 0.0)
            importance = resolve_importance(record.content, explicit=record.importance)
            self.processor.write(message, record, vector, importance, batch)
        return batch

    def carry_out(self, out: Sequence[Outbound]) -> None:
        """Apply the ``memory-writes`` records of ``out``, and those they derive, in order."""
        todo = [o for o in out if o.role == "memory-writes"]
        while todo:
            record = todo.pop(0)
            todo.extend(
                o for o in self.write(record.value, record.key).out if o.role == "memory-writes"
            )

    def access(
        self, raw: bytes, key: bytes | None = b"acme/m1", *, caught_up: bool = True
    ) -> Batch:
        batch = Batch()
        self.processor.access(self.message("a", raw, key), batch, writes_caught_up=caught_up)
        return batch


def access_bytes(kind: str = "recall", memory_id: str = "m1") -> bytes:
    return encode_access({"tenant_id": "acme", "memory_id": memory_id, "at": AT, "kind": kind})


def test_write_access_and_counters() -> None:
    t = Tables()
    batch = t.write(write_bytes(importance=0.5))
    assert list(batch.touched) == ["acme/m1"]
    assert [orjson.loads(o.value)["kind"] for o in batch.out] == ["created"]
    for kind in ("recall", "get"):
        accessed = t.access(access_bytes(kind))
        assert accessed.out == []  # a plain access is no decision: no audit record
    found = t.processor.load("acme/m1")
    assert found is not None
    state, doc = found
    assert (state.access_count, state.recall_count) == (2, 1)
    assert doc.vector == (1.0, 0.0, 0.0, 0.0)
    assert tenant_counts(t.counters, "acme") == {"created": 1, "accessed": 2}
    upserts, deletes = t.processor.rows(["acme/m1"])
    assert [r.access_count for r in upserts] == [2]
    assert deletes == []


def test_redelivered_access_is_skipped_and_rewrites_the_row() -> None:
    t = Tables()
    t.write(write_bytes(importance=0.5))
    message = t.message("a", access_bytes())
    first = Batch()
    t.processor.access(message, first, writes_caught_up=True)
    assert list(first.touched) == []  # counters only: no row
    again = Batch()
    t.processor.access(message, again, writes_caught_up=True)
    state = t.processor.load("acme/m1")
    assert state is not None
    assert state[0].access_count == 1
    assert again.out == []  # no audit for a skipped event
    # its first delivery may have died between the table and the row: the row is written
    # (the start-up resync only counts rows)
    assert list(again.touched) == ["acme/m1"]
    upserts, _ = t.processor.rows(again.touched)
    assert [r.access_count for r in upserts] == [1]


def test_only_an_access_that_changes_a_served_field_rewrites_the_row() -> None:
    t = Tables()
    t.write(write_bytes(importance=0.5, memory_type="semantic"))
    assert list(t.access(access_bytes()).touched) == []  # counters live in the tables
    t.write(decision_bytes())  # archived
    revived = t.access(access_bytes())
    assert list(revived.touched) == ["acme/m1"]  # state: archived -> active
    state = t.processor.state("acme/m1")
    assert state is not None
    assert (state.state.value, state.access_count) == ("active", 2)


def test_bad_and_misrouted_messages() -> None:
    t = Tables()
    # forwarded under its right key, a copy was applied again whenever the original was read
    # again (a redelivery, a replay): a mis-keyed event is a dead letter naming the key
    misrouted = t.write(write_bytes(), key=b"acme/other")
    (wrong,) = [orjson.loads(o.value) for o in misrouted.out]
    assert [o.role for o in misrouted.out] == ["dead-letter"]
    assert (wrong["field"], "'acme/m1'" in wrong["reason"]) == ("key", True)
    unkeyed = t.access(access_bytes(), key=None, caught_up=True)
    assert [orjson.loads(o.value)["field"] for o in unkeyed.out] == ["key"]
    assert t.memories == t.documents == {}
    bad = t.write(b"{}")
    (letter,) = bad.out
    assert letter.role == "dead-letter"
    assert orjson.loads(letter.value)["field"] == "v"
    unknown = t.access(access_bytes(memory_id="m9"), key=b"acme/m9", caught_up=True)
    assert orjson.loads(unknown.out[0].value)["reason"].startswith("memory_id='m9'")
    assert t.pending == {}


def test_embedding_needed_only_for_new_content() -> None:
    t = Tables()
    record = decode_write(write_bytes(), LIMITS)
    assert t.processor.needs_embedding(record)
    t.write(write_bytes())
    assert not t.processor.needs_embedding(record)
    assert t.processor.needs_embedding(decode_write(write_bytes(content="changed"), LIMITS))
    assert not t.processor.needs_embedding(
        decode_write(write_bytes(embedding=[1, 1, 1, 1]), LIMITS)
    )


def test_identical_rewrite_folds_and_keeps_one_copy() -> None:
    t = Tables()
    t.write(write_bytes(importance=0.2))
    batch = t.write(write_bytes(importance=0.6, metadata={"x": 1}))
    assert [orjson.loads(o.value)["kind"] for o in batch.out] == [EffectKind.FOLDED.value]
    found = t.processor.load("acme/m1")
    assert found is not None
    state, doc = found
    assert (state.write_count, state.importance) == (2, 0.6)
    assert state.importance_source is ImportanceSource.EXPLICIT
    assert doc.metadata == {"x": 1}
    assert len(t.memories) == len(t.documents) == 1


def test_access_rewrites_the_state_but_not_the_document() -> None:
    t = Tables()
    t.write(write_bytes(importance=0.5))
    document = dict(t.documents)
    state = dict(t.memories)
    t.access(access_bytes())
    assert t.documents == document
    assert t.memories != state


def test_a_state_without_its_document_is_restored_by_the_redelivered_write() -> None:
    t = Tables()
    raw = write_bytes(importance=0.5)
    message = t.message("w", raw)
    record = decode_write(raw, LIMITS)
    importance = resolve_importance(record.content, explicit=0.5)
    t.processor.write(message, record, (1.0, 0.0, 0.0, 0.0), importance, Batch())
    t.documents.clear()  # the crash lost the document's changelog record, not the state's
    assert t.processor.load("acme/m1") is None
    assert t.processor.needs_embedding(record)
    redelivered = Batch()
    t.processor.write(message, record, (0.0, 1.0, 0.0, 0.0), importance, redelivered)
    found = t.processor.load("acme/m1")
    assert found is not None
    assert found[0].write_count == 1  # the write itself was not applied twice
    assert found[1].vector == (0.0, 1.0, 0.0, 0.0)
    assert list(redelivered.touched) == ["acme/m1"]


@pytest.mark.parametrize("summary_of", [None, ["s1", "s2"]], ids=["version", "summary"])
def test_a_write_redelivered_without_its_document_makes_its_decisions_again(
    summary_of: list[str] | None,
) -> None:
    """A crash kept a write's state record and lost its document's. The redelivered write put
    the document back but, skipped by offset, ran neither the supersession check nor a
    summary's recheck against erasures, as a redelivery with its document does: the decisions
    its first delivery died before sending were lost for good (two versions of one fact both
    current; a summary quoting a memory erased meanwhile served).
    """
    t = Tables()
    raw = write_bytes(importance=0.5, summary_of=summary_of)
    message = t.message("w", raw)
    record = decode_write(raw, LIMITS)
    importance = resolve_importance(record.content, explicit=0.5)
    first = Batch()
    t.processor.write(message, record, (1.0, 0.0, 0.0, 0.0), importance, first)
    assert "acme/m1" in first.stated
    assert [r.memory_id for r in first.made] == (["m1"] if summary_of else [])
    t.documents.clear()  # the crash lost the document's changelog record, not the state's
    redelivered = Batch()
    t.processor.write(message, record, (1.0, 0.0, 0.0, 0.0), importance, redelivered)
    assert "acme/m1" in redelivered.stated  # checked for versions it supersedes again
    assert [r.memory_id for r in redelivered.made] == (["m1"] if summary_of else [])
    found = t.processor.load("acme/m1")
    assert found is not None
    assert found[0].write_count == 1


def test_a_write_redelivered_after_its_memorys_purge_restores_nothing_and_states_nothing() -> None:
    """A purged memory has no document by design: the redelivered write took that for a crash's
    loss, put its words back, and ran the supersession check for a memory no longer served.
    """
    t = Tables()
    raw = write_bytes(importance=0.5, content="Alice lives in Osaka")
    message = t.message("w", raw)
    record = decode_write(raw, LIMITS)
    importance = resolve_importance(record.content, explicit=0.5)
    t.processor.write(message, record, (1.0, 0.0, 0.0, 0.0), importance, Batch())
    t.write(decision_bytes(to="deleted", at="2026-06-03T12:00:00+00:00"))
    t.write(decision_bytes(decision="purge", to=None, at="2026-06-03T12:00:00+00:00"))
    assert b"acme/m1" not in t.documents
    again = Batch()
    t.processor.write(message, record, (1.0, 0.0, 0.0, 0.0), importance, again)
    assert b"acme/m1" not in t.documents
    assert dict(again.stated) == {}
    state = t.processor.state("acme/m1")
    assert state is not None
    assert state.purged


def test_a_rewrite_whose_document_was_lost_is_written_again_by_its_redelivery() -> None:
    t = Tables()
    t.write(write_bytes(content="Alice lives in Osaka"))
    before = dict(t.documents)
    raw = write_bytes(content="Alice lives in Lisbon", at="2026-03-02T12:00:00+00:00")
    message = t.message("w", raw)
    record = decode_write(raw, LIMITS)
    importance = resolve_importance(record.content)
    t.processor.write(message, record, (0.0, 1.0, 0.0, 0.0), importance, Batch())
    t.documents.update(before)  # the crash kept the state's changelog record, not the document's
    assert t.processor.needs_embedding(record)  # the stored vector is the old words'
    redelivered = Batch()
    t.processor.write(message, record, (0.0, 0.0, 1.0, 0.0), importance, redelivered)
    found = t.processor.load("acme/m1")
    assert found is not None
    assert found[0].write_count == 2  # the rewrite itself was not applied twice
    assert (found[1].content, found[1].vector) == ("Alice lives in Lisbon", (0.0, 0.0, 1.0, 0.0))
    assert list(redelivered.touched) == ["acme/m1"]


def test_an_access_that_overtakes_its_write_is_parked_then_applied_in_order() -> None:
    t = Tables()
    early = [t.message("a", access_bytes(kind)) for kind in ("recall", "get")]
    batch = Batch()
    for message in early:
        t.processor.access(message, batch, writes_caught_up=False)
    t.processor.access(early[0], batch, writes_caught_up=False)  # redelivered: parked once
    assert batch.parked == {0}
    assert [m.offset for m in t.processor.parked(b"acme/m1")] == [1, 2]
    assert t.memories == {}
    written = t.write(write_bytes(importance=0.5))
    found = t.processor.load("acme/m1")
    assert found is not None
    assert (found[0].access_count, found[0].recall_count) == (2, 1)
    assert "acme/m1" in written.touched
    assert [m.offset for m in t.processor.parked(b"acme/m1")] == [1, 2]  # until acknowledged
    late = t.access(access_bytes("get"))  # meanwhile, a later access is applied after them
    assert late.parked == set()
    assert t.processor.state("acme/m1").access_count == 3  # type: ignore[union-attr]
    t.processor.drop_released(late, partition=1)  # another partition: kept
    assert t.processor.has_pending()
    t.processor.drop_released(written, partition=0)
    assert t.pending == {}


def test_the_same_access_parked_again_keeps_its_offset_only_and_each_is_applied_once_a_batch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One request naming an unwritten id 1,000 times parked 1,000 copies of the whole value,
    each rewriting the key's list (196 MB of changelog); a batch writing the memory twice applied
    them twice (counted right: skipped by offset).
    """
    t = Tables()
    batch = Batch()
    same = access_bytes()
    for _ in range(1_000):
        t.processor.access(t.message("a", same), batch, writes_caught_up=False)
    t.processor.access(t.message("a", access_bytes("get")), batch, writes_caught_up=False)
    assert len(t.pending[b"acme/m1"]) < 8_000  # 1,000 offsets, two values
    assert [m.offset for m in t.processor.parked(b"acme/m1")] == list(range(1, 1_002))
    applied: list[int] = []
    apply_access = t.processor._apply_access

    def counted(message: Inbound, *args: Any) -> None:
        applied.append(message.offset)
        apply_access(message, *args)

    monkeypatch.setattr(t.processor, "_apply_access", counted)
    written = Batch()
    for content in ("Alice drinks tea", "Alice drinks green tea"):  # one batch, two writes
        raw = write_bytes(content=content, importance=0.5)
        (message, record), *_ = t.processor.decode_writes([t.message("w", raw)], written)
        assert isinstance(record, WriteRecord)
        importance = resolve_importance(record.content, explicit=record.importance)
        t.processor.write(message, record, (1.0, 0.0, 0.0, 0.0), importance, written)
    assert applied == list(range(1, 1_002))  # once each, in order
    state = t.processor.state("acme/m1")
    assert state is not None
    assert (state.access_count, state.recall_count) == (1_001, 1_000)
    partly = Batch(released={b"acme/m1": (0, frozenset(range(1, 501)))})
    t.processor.drop_released(partly, partition=0)  # another batch released the first 500
    assert [m.offset for m in t.processor.parked(b"acme/m1")] == list(range(501, 1_002))
    t.processor.drop_released(written, partition=0)
    assert t.pending == {}


def test_parked_accesses_of_a_never_written_memory_expire_to_dead_letter() -> None:
    t = Tables()
    batch = Batch()
    t.processor.access(t.message("a", access_bytes(memory_id="m7"), b"acme/m7"), batch)
    assert t.processor.has_pending()
    t.processor.expire_pending(partition=1, batch=batch)  # another partition: untouched
    assert t.processor.has_pending()
    t.processor.expire_pending(partition=0, batch=batch)
    assert t.processor.has_pending()  # until the dead letter is acknowledged
    t.processor.drop_released(batch, partition=0)
    assert not t.processor.has_pending()
    (letter,) = batch.out
    assert orjson.loads(letter.value)["field"] == "memory_id"


def decision_bytes(**kw: object) -> bytes:
    doc: dict[str, object] = {
        "v": 1,
        "kind": "decision",
        "tenant_id": "acme",
        "memory_id": "m1",
        "at": AT,
        "decision": "retire",
        "to": "archived",
        "reason": "test",
    }
    doc.update(kw)
    return orjson.dumps({k: v for k, v in doc.items() if v is not None})


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"decision": "explode"}, "decision"),
        ({"to": "gone"}, "to"),
        ({"decision": "promote", "to": "cosmic"}, "to"),
        ({"decision": "absorb", "source": None}, "source"),
        ({"decision": "absorb", "source": "x", "access_count": -1}, "access_count"),
        # past 64 bits once summed: the state's codec could store no later access
        ({"decision": "absorb", "source": "x", "access_count": 2**64 - 1}, "access_count"),
        ({"decision": "absorb", "source": "x", "recall_count": 2**31}, "recall_count"),
        ({"decision": "absorb", "source": "x", "write_count": 2**63}, "write_count"),
        ({"v": True}, "v"),
        ({"v": 1.0}, "v"),
        ({"reason": ""}, "reason"),
        ({"decision": "purge", "erase": "yes"}, "erase"),
        # pydantic reads number text as Unix seconds: a time the producer never meant
        ({"decision": "purge", "state_changed_at": "1700000000"}, "state_changed_at"),
        ({"decision": "reinstate", "by": "m2", "successor_at": "1.7e9"}, "successor_at"),
        # naming its own memory as the other one: it absorbed itself, doubling its counters
        ({"decision": "absorb", "source": "m1", "to": None}, "source"),
        ({"merged_into": "m1"}, "merged_into"),
        ({"decision": "supersede", "by": "m1"}, "by"),
        ({"decision": "succeeds", "predecessor": "m1"}, "predecessor"),
        ({"decision": "reinstate", "by": "m1"}, "by"),
        ({"decision": "restore", "by": "m1"}, "by"),
    ],
)
def test_bad_decisions_name_their_field(kw: dict[str, object], field: str) -> None:
    with pytest.raises(RecordError) as err:
        decode_memory_event(decision_bytes(**kw), LIMITS)
    assert err.value.field == field


def test_decisions_apply_through_the_reducer() -> None:
    t = Tables()
    t.write(write_bytes(importance=0.5))
    t.write(decision_bytes(decision="absorb", source="m2", access_count=3, recall_count=2, to=None))
    t.write(decision_bytes(decision="absorb", source="m2", access_count=3, recall_count=2, to=None))
    found = t.processor.load("acme/m1")
    assert found is not None
    assert (found[0].access_count, found[0].recall_count, found[0].merged_from) == (3, 2, ("m2",))
    t.write(decision_bytes())
    state = t.processor.state("acme/m1")
    assert state is not None
    assert state.state.value == "archived"
    t.write(write_bytes(memory_id="m3", importance=0.4), key=b"acme/m3")
    t.write(decision_bytes(memory_id="m3", decision="fade", to=None), key=b"acme/m3")
    kept = t.processor.state("acme/m3")
    assert kept is not None
    assert kept.state.value == "active"  # written at AT, not due at AT
    later = "2027-03-01T12:00:00+00:00"  # over 90 days idle, faded, importance < 0.5
    t.write(decision_bytes(memory_id="m3", decision="fade", to=None, at=later), key=b"acme/m3")
    faded = t.processor.state("acme/m3")
    assert faded is not None
    assert faded.state.value == "archived"
    unknown = t.write(decision_bytes(memory_id="nope"), key=b"acme/nope")
    assert unknown.out == []
    assert t.processor.state("acme/nope") is None


def test_a_source_of_a_summary_updated_since_sends_the_summary_a_delete() -> None:
    """The summary stated the source's old words ("Dinner at 7pm") as current beside the new
    version ("Dinner at 8pm"): the worker now deletes it (its other sources come back)."""
    t = Tables()
    t.write(write_bytes(importance=0.5))
    t.write(decision_bytes(merged_into="s1", reason="compressed into s1"))
    later = "2026-03-02T12:00:00+00:00"
    batch = t.write(decision_bytes(decision="supersede", by="m2", to=None, at=later))
    told = [orjson.loads(o.value) for o in batch.out if o.role == "memory-writes"]
    assert ("s1", "retire", "deleted") in [
        (v["memory_id"], v["decision"], v.get("to")) for v in told
    ]


def test_consolidation_requests() -> None:
    raw = orjson.dumps(
        {
            "v": 1,
            "tenant_id": "*",
            "at": AT,
            "strategies": ["exact_dedup"],
            "cluster_min_cosine": 0.9,
        }
    )
    request = decode_consolidation(raw, LIMITS)
    assert request.tenant_ids == ("acme", "globex")
    assert [s.value for s in request.strategies] == ["exact_dedup"]
    assert request.overrides == {"cluster_min_cosine": 0.9}
    assert not request.dry_run
    cases: list[tuple[dict[str, object], str]] = [
        ({"tenant_id": "nobody"}, "tenant_id"),
        ({"strategies": ["shred"]}, "strategies[0]"),
        ({"strategies": []}, "strategies"),  # it ran every strategy: dedup deletes, purge
        ({"cluster_min_cosine": 1.5}, "cluster_min_cosine"),
        ({"dry_run": "yes"}, "dry_run"),
    ]
    for bad, field in cases:
        doc = {"v": 1, "tenant_id": "acme", "at": AT, **bad}
        with pytest.raises(RecordError) as err:
            decode_consolidation(orjson.dumps(doc), LIMITS)
        assert err.value.field == field


def test_a_summary_is_written_once() -> None:
    t = Tables()
    summary = write_bytes(memory_id="s1", content="a. b.", summary_of=["m1", "m2"], importance=0.5)
    t.write(summary, key=b"acme/s1")
    again = t.write(summary, key=b"acme/s1")
    state = t.processor.state("acme/s1")
    assert state is not None
    assert state.write_count == 1
    assert [orjson.loads(o.value)["kind"] for o in again.out] == ["ignored"]


def test_a_supersede_decision_marks_the_older_version() -> None:
    t = Tables()
    t.write(write_bytes(content="Alice lives in Osaka"))
    later = "2026-06-01T12:00:00+00:00"
    batch = t.write(decision_bytes(decision="supersede", to=None, by="m2", at=later))
    state = t.processor.state("acme/m1")
    assert state is not None
    assert (state.superseded_by, state.valid_to) == ("m2", datetime.fromisoformat(later))
    assert [orjson.loads(o.value)["kind"] for o in batch.out if o.role == "audit"] == ["superseded"]
    with pytest.raises(RecordError, match=r"^by"):
        decode_decision(decision_bytes(decision="supersede", to=None, by="no/slash"), LIMITS)


def test_a_second_supersede_of_one_memory_is_passed_to_the_version_that_superseded_it() -> None:
    # two updates of m1 both passed the API's check: m2 at t2, then m3 at t3 reach m1
    t = Tables()
    t2, t3 = "2026-06-01T12:00:00+00:00", "2026-06-02T12:00:00+00:00"
    t.write(write_bytes(content="Alice lives in Osaka"))
    t.write(write_bytes(memory_id="m2", content="Alice lives in Lisbon", at=t2), key=b"acme/m2")
    t.write(write_bytes(memory_id="m3", content="Alice lives in Tokyo", at=t3), key=b"acme/m3")
    t.write(decision_bytes(decision="supersede", to=None, by="m2", at=t2))
    batch = t.write(decision_bytes(decision="supersede", to=None, by="m3", at=t3))
    (passed,) = [o for o in batch.out if o.role == "memory-writes"]
    assert passed.key == b"acme/m2"
    value = orjson.loads(passed.value)
    assert (value["memory_id"], value["by"], value["at"], value["hops"]) == ("m2", "m3", t3, 1)
    t.write(passed.value, key=passed.key)
    m1, m2, m3 = (t.processor.state(f"acme/{m}") for m in ("m1", "m2", "m3"))
    assert m1 is not None
    assert m2 is not None
    assert m3 is not None
    assert (m1.superseded_by, m2.superseded_by, m3.superseded_by) == ("m2", "m3", None)
    assert m2.valid_to == datetime.fromisoformat(t3)
    again = t.write(passed.value, key=passed.key)  # the same decision again passes nothing on
    assert [o for o in again.out if o.role == "memory-writes"] == []
    for hops in (-1, 17, True, "1"):
        with pytest.raises(RecordError, match=r"^hops"):
            decode_decision(
                decision_bytes(decision="supersede", to=None, by="m2", hops=hops), LIMITS
            )


def test_an_earlier_version_arriving_late_is_put_between_and_a_rewritten_one_goes_last() -> None:
    t = Tables()
    t2, t3, t4 = (f"2026-06-0{d}T12:00:00+00:00" for d in (2, 3, 4))
    t.write(write_bytes(content="draft one"))
    for m, at in (("m2", t2), ("m3", t3)):
        t.write(write_bytes(memory_id=m, content=f"draft {m}", at=at), key=f"acme/{m}".encode())
    t.write(decision_bytes(decision="supersede", to=None, by="m3", at=t3))
    late = decision_bytes(decision="supersede", to=None, by="m2", at=t2)
    for _ in range(2):  # a redelivery before the chain moved passes the same decisions again
        batch = t.write(late)
        moves = [orjson.loads(o.value) for o in batch.out if o.role == "memory-writes"]
        assert [(v["memory_id"], v["by"], v["at"], v.get("replaces")) for v in moves] == [
            ("m2", "m3", t3, None),
            ("m1", "m2", t2, "m3"),
        ]
    for value in moves:
        t.write(orjson.dumps(value), key=f"acme/{value['memory_id']}".encode())
    states = {m: t.processor.state(f"acme/{m}") for m in ("m1", "m2", "m3")}
    assert {m: s.superseded_by for m, s in states.items() if s} == {
        "m1": "m2",
        "m2": "m3",
        "m3": None,
    }
    # m2 written again after m3 superseded it: it is current again and supersedes m3
    batch = t.write(write_bytes(memory_id="m2", content="draft m2", at=t4), key=b"acme/m2")
    (again,) = [orjson.loads(o.value) for o in batch.out if o.role == "memory-writes"]
    assert (again["memory_id"], again["by"], again["at"]) == ("m3", "m2", t4)
    decoded = decode_decision(orjson.dumps({**moves[1], "chains": False}), LIMITS).event
    assert isinstance(decoded, Supersede)
    assert (decoded.chains, decoded.replaces) == (False, "m3")


def test_a_reassertion_is_sent_again_on_redelivery_and_a_write_after_a_delete_sends_none() -> None:
    t = Tables()
    t.write(write_bytes(content="draft one"))
    t.write(write_bytes(memory_id="m2", content="draft two", at=AT), key=b"acme/m2")
    t.write(decision_bytes(decision="supersede", to=None, by="m2", at=AT))
    again_at = "2026-03-05T12:00:00+00:00"
    raw = write_bytes(content="draft one", at=again_at)
    message = t.message("w", raw)
    record = decode_write(raw, LIMITS)
    importance = resolve_importance(record.content)
    for delivery in ("first", "redelivered"):  # the first died before its records were sent
        batch = Batch()
        t.processor.write(message, record, (1.0, 0.0, 0.0, 0.0), importance, batch)
        sent = [orjson.loads(o.value) for o in batch.out if o.role == "memory-writes"]
        assert [(v["memory_id"], v["by"], v["at"]) for v in sent] == [("m2", "m1", again_at)], (
            delivery
        )
    # deleted, then written afresh under the same id: a new memory, which supersedes nothing
    t.write(decision_bytes(decision="supersede", to=None, by="m2", at=again_at, hops=None))
    t.write(decision_bytes(decision="retire", to="deleted"))
    fresh = t.write(write_bytes(content="buy milk on Friday", at="2026-03-06T12:00:00+00:00"))
    assert [o for o in fresh.out if o.role == "memory-writes"] == []


def test_deleting_the_newer_version_makes_the_older_current_and_updatable_again() -> None:
    from ranker.hotcache import live_passes  # as the hot cache and the filters judge it

    t = Tables()
    t2, t3 = "2026-06-01T12:00:00+00:00", "2026-07-01T12:00:00+00:00"
    t.write(write_bytes(content="Alice lives in Osaka"))
    t.write(write_bytes(memory_id="m2", content="Alice now lives in Lisbon", at=t2), key=b"acme/m2")
    batch = t.write(decision_bytes(decision="supersede", to=None, by="m2", at=t2))
    sent = [orjson.loads(o.value) for o in batch.out if o.role == "memory-writes"]
    assert [(v["memory_id"], v["decision"], v["predecessor"], v["at"]) for v in sent] == [
        ("m2", "succeeds", "m1", t2)
    ]
    t.carry_out(batch.out)
    m2 = t.processor.state("acme/m2")
    assert m2 is not None
    assert m2.predecessors == ("m1",)
    now = datetime(2026, 8, 1, tzinfo=UTC)  # after both versions, and the deletion
    recall = Filters(states=("active", "archived"), current_at_us=to_us(now))
    m1 = t.processor.state("acme/m1")
    assert m1 is not None
    assert not live_passes(live_values(m1), recall)
    # the API's DELETE with purge: a retire, then a purge
    deleted = t.write(decision_bytes(memory_id="m2", to="deleted", at=t3), key=b"acme/m2")
    (reinstate,) = [orjson.loads(o.value) for o in deleted.out if o.role == "memory-writes"]
    assert (reinstate["memory_id"], reinstate["decision"], reinstate["by"]) == (
        "m1",
        "reinstate",
        "m2",
    )
    purged = t.write(
        decision_bytes(memory_id="m2", decision="purge", to=None, at=t3), key=b"acme/m2"
    )
    assert [o for o in purged.out if o.role == "memory-writes"] == []
    back = t.write(orjson.dumps(reinstate), key=b"acme/m1")
    assert [orjson.loads(o.value)["kind"] for o in back.out if o.role == "audit"] == ["reinstated"]
    assert "acme/m1" in back.touched  # its row is written again: valid_to and superseded_by
    m1 = t.processor.state("acme/m1")
    assert m1 is not None
    assert (m1.valid_to, m1.superseded_by) == (None, None)
    assert live_passes(live_values(m1), recall)
    again = t.write(orjson.dumps(reinstate), key=b"acme/m1")  # a copy: nothing changes
    assert [orjson.loads(o.value)["kind"] for o in again.out if o.role == "audit"] == ["ignored"]


def test_a_deleted_middle_version_hands_its_predecessor_to_its_successor() -> None:
    t = Tables()
    t2, t3, t4 = (f"2026-06-0{d}T12:00:00+00:00" for d in (2, 3, 4))
    t.write(write_bytes(content="Alice lives in Osaka"))
    for m, at in (("m2", t2), ("m3", t3)):
        t.write(
            write_bytes(memory_id=m, content=f"Alice lives in {m}", at=at), key=f"acme/{m}".encode()
        )
    t.carry_out(t.write(decision_bytes(decision="supersede", to=None, by="m2", at=t2)).out)
    t.carry_out(
        t.write(
            decision_bytes(memory_id="m2", decision="supersede", to=None, by="m3", at=t3),
            key=b"acme/m2",
        ).out
    )
    t.carry_out(t.write(decision_bytes(memory_id="m2", to="deleted", at=t4), key=b"acme/m2").out)
    m1, m3 = t.processor.state("acme/m1"), t.processor.state("acme/m3")
    assert m1 is not None
    assert m3 is not None
    assert (m1.superseded_by, m1.valid_to) == ("m3", datetime.fromisoformat(t3))
    assert m3.predecessors == ("m2", "m1")
    t.carry_out(t.write(decision_bytes(memory_id="m3", to="deleted", at=t4), key=b"acme/m3").out)
    m1 = t.processor.state("acme/m1")
    assert m1 is not None
    assert (m1.superseded_by, m1.valid_to) == (None, None)


def superseded_pair(t: Tables, t2: str) -> None:
    """m1 (Osaka, at ``AT``) superseded by m2 (Lisbon, at ``t2``), which records it."""
    t.write(write_bytes(content="Alice lives in Osaka"))
    t.write(write_bytes(memory_id="m2", content="Alice now lives in Lisbon", at=t2), key=b"acme/m2")
    t.carry_out(t.write(decision_bytes(decision="supersede", to=None, by="m2", at=t2)).out)
    m2 = t.processor.state("acme/m2")
    assert m2 is not None
    assert m2.predecessors == ("m1",)


@pytest.mark.parametrize("reinstate_first", [True, False])
def test_a_version_checked_against_one_being_deleted_supersedes_the_one_reinstated(
    reinstate_first: bool,
) -> None:
    t = Tables()
    t2, t3, t4 = (f"2026-06-0{d}T12:00:00+00:00" for d in (2, 3, 4))
    superseded_pair(t, t2)
    t.write(write_bytes(memory_id="m3", content="Alice now lives in Tokyo", at=t3), key=b"acme/m3")
    # m3's check found m2 current; m2 is deleted before its supersede reaches it
    deleted = t.write(decision_bytes(memory_id="m2", to="deleted", at=t4), key=b"acme/m2")
    late = decision_bytes(memory_id="m2", decision="supersede", to=None, by="m3", at=t3)
    passed = t.write(late, key=b"acme/m2")
    again = t.write(late, key=b"acme/m2")  # met again (by a later offset): the same again
    assert [o.value for o in again.out if o.role == "memory-writes"] == [
        o.value for o in passed.out if o.role == "memory-writes"
    ]
    first, then = (deleted, passed) if reinstate_first else (passed, deleted)
    t.carry_out([*first.out, *then.out, *again.out])
    m1, m3 = t.processor.state("acme/m1"), t.processor.state("acme/m3")
    assert m1 is not None
    assert m3 is not None
    assert (m1.superseded_by, m1.valid_to, m3.superseded_by) == (
        "m3",
        datetime.fromisoformat(t3),
        None,
    )
    assert m3.predecessors == ("m1",)
    sent = [orjson.loads(o.value) for o in passed.out if o.role == "memory-writes"]
    assert [(v["memory_id"], v["by"], v["at"], v.get("replaces")) for v in sent] == [
        ("m1", "m3", t3, "m2")
    ]


def test_a_forgotten_version_written_again_supersedes_the_one_it_reinstated() -> None:
    t = Tables()
    t2, t3, t4 = (f"2026-06-0{d}T12:00:00+00:00" for d in (2, 3, 4))
    superseded_pair(t, t2)
    t.carry_out(t.write(decision_bytes(memory_id="m2", to="forgotten", at=t3), key=b"acme/m2").out)
    m1 = t.processor.state("acme/m1")
    assert m1 is not None
    assert m1.superseded_by is None
    # the same words again: folded, so the write-time check does not run
    raw = write_bytes(memory_id="m2", content="Alice now lives in Lisbon", at=t4)
    message = t.message("w", raw, b"acme/m2")
    record = decode_write(raw, LIMITS)
    importance = resolve_importance(record.content)
    for delivery in ("first", "redelivered"):  # the first died before its records were sent
        batch = Batch()
        t.processor.write(message, record, (1.0, 0.0, 0.0, 0.0), importance, batch)
        assert ("acme/m2" in batch.stated) is (delivery == "redelivered")  # checked again
        sent = [orjson.loads(o.value) for o in batch.out if o.role == "memory-writes"]
        assert [(v["memory_id"], v["decision"], v["by"], v["at"]) for v in sent] == [
            ("m1", "supersede", "m2", t4)
        ], delivery
        t.carry_out(batch.out)
        m1, m2 = t.processor.state("acme/m1"), t.processor.state("acme/m2")
        assert m1 is not None
        assert m2 is not None
        assert (m1.superseded_by, m1.valid_to) == ("m2", datetime.fromisoformat(t4))
        assert (m2.state, m2.superseded_by, m2.predecessors) == ("active", None, ("m1",))


def test_consolidation_plans_on_the_tables_live_state_not_a_stale_row() -> None:
    t = Tables()
    t.write(write_bytes(importance=0.5))
    found = t.processor.load("acme/m1")
    assert found is not None
    stale = MemoryRow.of(*found)  # as Milvus holds it: no access since the write
    for _ in range(3):
        t.access(access_bytes())
    (live,) = consolidatable([stale], t.processor.state)
    assert (stale.access_count, live.access_count, live.recall_count) == (0, 3, 3)
    assert live.importance > stale.importance
    assert (live.content, live.vector) == (stale.content, stale.vector)
    unknown = dataclasses.replace(stale, key="acme/other", memory_id="other")
    assert consolidatable([unknown], t.processor.state) == [unknown]


def test_scheduled_consolidation_spreads_one_request_per_tenant() -> None:
    registry = TenantRegistry.of({"tenants": {"globex": {}, "acme": {}}})
    at = datetime(2026, 3, 1, tzinfo=UTC)
    requests = consolidation_requests(registry, at)
    assert [key for key, _ in requests] == [b"acme", b"globex"]  # keyed by tenant: spread
    for key, value in requests:
        decoded = decode_consolidation(value, Limits(8, 16_384, registry))
        assert decoded.tenant_ids == (key.decode(),)
        assert decoded.at == at


@pytest.mark.parametrize(
    "event",
    [
        Absorb(T, "m2", 3, 1, 2, 0.7, "merged"),
        Absorb(T, "m2", 3, 1, 2, 0.7, "merged", T - timedelta(days=1), ("tea", "ann")),
        Absorb(T, "m2", 3, 1, 2, 0.7, "merged", tier=Tier.SEMANTIC),
        Absorb(T, "m2", 3, 1, 2, 0.7, "merged", content_hash="0" * 64, relations=("m7", "m8")),
        Absorb(T, "m2", 3, 1, 2, 0.7, "merged", content_hash="0" * 64, target_hash="1" * 64),
        Retire(T, Lifecycle.DELETED, "deleted through the API", "m3"),
        Retire(T, Lifecycle.ARCHIVED, "compressed into s", "s", content_hash("Ann likes tea.")),
        Fade(T, "swept"),
        Supersede(T, "m9", "newer value"),
        # an LLM's: it does not chain (lost on the wire, it acted as the rule's)
        Supersede(T, "m9", "llm: newer value", hops=2, chains=False, replaces="m8"),
        Promote(T, Tier.SEMANTIC, "accessed often"),
        Purge(T, "purged"),
        Purge(T, "window", state_changed_at=T - timedelta(days=31, microseconds=7)),
        Purge(T, "window; merged into m2: key erased", state_changed_at=T, erase=True),
        Succeeds(T, "m0", "m0 superseded by it"),
        Succeeds(T, "m0", "passed on", hops=3),
        Succeeds(T, "m0", "asked by a recheck", recheck=True),
        Reinstate(T, "m9", "m9 is deleted"),
        Reinstate(T, "m9", "m9 is deleted", "m8", T - timedelta(hours=2), hops=2),
        Reinstate(T, "m9", "m9 is deleted", "s1"),  # merged into s1: valid_to kept
        Restore(T, "s1", "summary s1 not kept: erased with a memory it quoted"),
    ],
)
def test_decision_values_decode_to_the_same_event(event: DecisionEvent) -> None:
    value = decision_value("acme", "m1", event, "req-1")
    decoded = decode_decision(orjson.dumps(value), LIMITS)
    assert (decoded.tenant_id, decoded.memory_id, decoded.request_id) == ("acme", "m1", "req-1")
    assert decoded.event == event


def test_a_decision_with_a_reason_past_the_records_limit_is_sent_cut_not_dead_lettered() -> None:
    """A supersession passed past many deleted versions nests each hop's reason: past the
    record's 1,000 characters the worker dead-lettered it, and the supersession was lost."""
    event = Supersede(T, "m9", "passed on: " * 150)
    decoded = decode_decision(orjson.dumps(decision_value("acme", "m1", event)), LIMITS).event
    assert isinstance(decoded, Supersede)
    assert decoded.by == "m9"
    assert decoded.reason == event.reason[:1000]


def test_a_survivor_merged_on_in_the_same_plan_passes_on_what_it_absorbed() -> None:
    """Exact dedup folds b into a, then semantic dedup merges a into z (or compression summarises
    a): z and the summary get b's counters and importance, which a's own row does not hold.
    """
    z = make_row("acme", "z", (1.0, 0.0, 0.0, 0.0), importance=0.3)
    a = make_row("acme", "a", (1.0, 0.05, 0.0, 0.0), importance=0.3)
    b = make_row("acme", "b", (1.0, 0.05, 0.0, 0.0), importance=0.9, access_count=5, recall_count=4)
    first = Decision(DecisionKind.MERGE, "a", ("b",), "exact duplicate")
    on = Decision(DecisionKind.MERGE, "z", ("a",), "near duplicate")
    out = decision_records("acme", [first, on], [z, a, b], T, None)
    absorbs = [decode_decision(o.value, LIMITS) for o in out]
    into_z = [d.event for d in absorbs if isinstance(d.event, Absorb) and d.memory_id == "z"]
    assert [(e.source, e.access_count, e.recall_count, e.write_count) for e in into_z] == [
        ("a", 5, 4, 2)
    ]
    assert [e.importance for e in into_z] == [0.9]
    summary = Decision(DecisionKind.SUMMARISE, "s-1", ("a", "z"), "a cluster")
    written = decision_records("acme", [first, summary], [z, a, b], T, None)
    (made,) = [decode_write(o.value, LIMITS) for o in written if b'"summary_of"' in o.value]
    assert made.importance == 0.9


def test_a_summary_takes_the_tags_a_merge_earlier_in_the_plan_gave_its_sources() -> None:
    """A recall filtered by a tag only the merged duplicate had found the archived source alone,
    at the archive penalty, not the summary.
    """
    a = make_row("acme", "a", (1.0, 0.0, 0.0, 0.0), tags=("work",))
    b = make_row("acme", "b", (1.0, 0.0, 0.0, 0.0), tags=("zeta-launch",))
    c = make_row("acme", "c", (1.0, 0.2, 0.0, 0.0), tags=("work",))
    merge = Decision(DecisionKind.MERGE, "a", ("b",), "exact duplicate")
    summary = Decision(DecisionKind.SUMMARISE, "s-1", ("a", "c"), "a cluster")
    written = decision_records("acme", [merge, summary], [a, b, c], T, None)
    (made,) = [decode_write(o.value, LIMITS) for o in written if b'"summary_of"' in o.value]
    assert made.tags == ("work", "zeta-launch")


def test_a_merge_s_survivor_and_a_summary_keep_their_sources_links() -> None:
    """Graph proximity lost a duplicate's relations once it was merged away and purged, and a
    summary had none of its sources'.
    """
    t = Tables()
    for m, links in (("a", ["x"]), ("b", ["y", "a"]), ("c", ["z"])):
        raw = write_bytes(memory_id=m, content="Ann likes tea.", relations=links)
        t.write(raw, key=f"acme/{m}".encode())
    rows = [
        make_row("acme", m, (1.0, 0.0, 0.0, 0.0), content="Ann likes tea.", relations=links)
        for m, links in (("a", ("x",)), ("b", ("y", "a")), ("c", ("z",)))
    ]
    merge = Decision(DecisionKind.MERGE, "a", ("b",), "exact duplicate")
    summary = Decision(DecisionKind.SUMMARISE, "s-1", ("a", "c"), "a cluster")
    out = decision_records("acme", [merge, summary], rows, T, None)
    (made,) = [decode_write(o.value, LIMITS) for o in out if b'"summary_of"' in o.value]
    assert made.relations == ("x", "y", "z")  # not to its own sources
    t.carry_out([o for o in out if b'"summary_of"' not in o.value])
    survivor = t.processor.state("acme/a")
    assert survivor is not None
    assert survivor.relations == ("x", "y")  # b's, but for the link to a itself


def test_a_merge_of_three_keeps_no_link_inside_its_group() -> None:
    rows = [
        make_row("acme", m, (1.0, 0.0, 0.0, 0.0), content="Ann likes tea.", relations=links)
        for m, links in (("a", ("x",)), ("b", ("c", "y")), ("c", ("b", "a", "z")))
    ]
    merge = Decision(DecisionKind.MERGE, "a", ("b", "c"), "exact duplicate")
    absorbed = [
        decode_decision(o.value, LIMITS).event
        for o in decision_records("acme", [merge], rows, T, None)
    ]
    assert [e.relations for e in absorbed if isinstance(e, Absorb)] == [("y",), ("z",)]


def test_a_row_stating_a_fact_the_rule_reads_is_left_out_of_compression() -> None:
    rows = [
        make_row("acme", "a", (1.0, 0.0, 0.0, 0.0), content="Alice lives in Osaka."),
        make_row("acme", "b", (1.0, 0.2, 0.0, 0.0), content="We ate ramen by the river."),
        make_row("acme", "c", (1.0, 0.3, 0.0, 0.0), content="We had ramen near the river!"),
        make_row("acme", "d", (1.0, 0.1, 0.0, 0.0), content="Alice plays squash."),  # generic
    ]
    rules = SupersessionPolicy()
    assert [item_of(r, rules).fact for r in rows] == [True, False, False, True]
    request = ConsolidationRequest(("acme",), T, (Strategy.COMPRESS,), {}, False, None)
    (summary,) = plan_tenant("acme", rows, request, Policy())
    assert summary.sources == ("b", "c")
    off = Policy.build(overrides={"supersession": {"enabled": False}})
    (all_four,) = plan_tenant("acme", rows, request, off)  # no rule: nothing to supersede them
    assert sorted(all_four.sources) == ["a", "b", "c", "d"]


def test_a_summary_keeps_the_highest_tier_of_its_sources() -> None:
    """Classified by importance alone, semantic sources of importance 0.45 made a working summary
    (τ 48 h instead of 1,200 h), archived long before the memories it replaced would have been.
    """
    x = make_row("acme", "x", (1.0, 0.0, 0.0, 0.0), importance=0.45, tier="semantic")
    y = make_row("acme", "y", (1.0, 0.1, 0.0, 0.0), importance=0.45, tier="episodic")
    summary = Decision(DecisionKind.SUMMARISE, "s-1", ("x", "y"), "a cluster")
    (written,) = [
        o for o in decision_records("acme", [summary], [x, y], T, None) if o.key == b"acme/s-1"
    ]
    assert decode_write(written.value, LIMITS).memory_type is Tier.SEMANTIC


def two_duplicates_planned() -> tuple[Tables, list[MemoryRow], ConsolidationRequest, Decision]:
    """Memories a and b both saying "Ann likes tea.", and the plan merging b into a."""
    t = Tables()
    for m in ("a", "b"):
        t.write(write_bytes(memory_id=m, content="Ann likes tea."), key=f"acme/{m}".encode())
    rows = [
        make_row("acme", m, (1.0, 0.0, 0.0, 0.0), content="Ann likes tea.", created_at_us=us)
        for m, us in (("a", 1_000_000), ("b", 2_000_000))
    ]
    request = ConsolidationRequest(("acme",), T, (Strategy.EXACT_DEDUP,), {}, False, None)
    (merge,) = plan_tenant("acme", rows, request, Policy())
    assert (merge.target, merge.sources) == ("a", ("b",))
    return t, rows, request, merge


def test_a_source_rewritten_since_the_plan_is_not_merged_away() -> None:
    """The plan reads rows that may lag the tables (Milvus, the hot cache): a duplicate
    rewritten with new words meanwhile was deleted "as a duplicate", its new words in no memory.
    """
    t, rows, request, merge = two_duplicates_planned()
    t.write(write_bytes(memory_id="b", content="Ann likes coffee now."), key=b"acme/b")
    t.carry_out(decision_records("acme", [merge], rows, T, None))
    rewritten = t.processor.state("acme/b")
    assert rewritten is not None
    assert rewritten.state is Lifecycle.ACTIVE
    assert rewritten.content_hash == content_hash("Ann likes coffee now.")
    t.write(write_bytes(memory_id="c", content="Ann likes tea."), key=b"acme/c")  # unchanged:
    rows.append(make_row("acme", "c", (1.0, 0.0, 0.0, 0.0), content="Ann likes tea."))
    (again,) = plan_tenant("acme", rows[::2], request, Policy())
    t.carry_out(decision_records("acme", [again], rows, T, None))
    merged = t.processor.state("acme/c")
    assert merged is not None
    assert (merged.state, merged.merged_into) == (Lifecycle.DELETED, "a")  # merged as planned


def test_a_survivor_rewritten_since_the_plan_absorbs_nothing_and_its_duplicate_stays() -> None:
    """The survivor took the duplicate whatever it said by then, and the duplicate was retired
    as merged into it: its words ("Ann likes tea.") were in no active memory. An absorb recorded
    before it carried the survivor's hash decodes and applies as it did.
    """
    t, rows, _, merge = two_duplicates_planned()
    records = decision_records("acme", [merge], rows, T, None)
    t.write(write_bytes(memory_id="a", content="Ann likes coffee now."), key=b"acme/a")
    t.carry_out(records)
    survivor, kept = t.processor.state("acme/a"), t.processor.state("acme/b")
    assert survivor is not None
    assert kept is not None
    assert (survivor.merged_from, survivor.access_count) == ((), 0)
    assert (kept.state, kept.merged_into) == (Lifecycle.ACTIVE, None)
    assert kept.content_hash == content_hash("Ann likes tea.")
    (absorb,) = records
    legacy = orjson.loads(absorb.value)
    assert legacy.pop("target_hash") == content_hash("Ann likes tea.")
    old = dataclasses.replace(absorb, value=orjson.dumps(legacy))
    t.carry_out([old])  # at a later offset (no redelivery): taken, as before
    survivor, merged = t.processor.state("acme/a"), t.processor.state("acme/b")
    assert survivor is not None
    assert merged is not None
    assert survivor.merged_from == ("b",)
    assert (merged.state, merged.merged_into) == (Lifecycle.DELETED, "a")


def test_a_duplicate_leaves_only_once_its_survivor_took_it() -> None:
    """Both went when the user deleted the survivor between the plan and its decisions (the
    source's retire was planned beside the absorb, on another partition); and a memory written
    again under a merged id, then merged again, lost the counters it had gathered since.
    """
    t = Tables()
    for m in ("a", "b", "c"):
        t.write(write_bytes(memory_id=m, content="Ann likes tea."), key=f"acme/{m}".encode())
    rows = [
        make_row("acme", m, (1.0, 0.0, 0.0, 0.0), content="Ann likes tea.", created_at_us=us)
        for us, m in enumerate(("a", "b", "c"), start=1)
    ]
    request = ConsolidationRequest(("acme",), T, (Strategy.EXACT_DEDUP,), {}, False, None)
    (merge,) = plan_tenant("acme", rows[:2], request, Policy())
    records = decision_records("acme", [merge], rows, T, None)
    assert [orjson.loads(o.value)["decision"] for o in records] == ["absorb"]
    t.carry_out(records)
    assert t.processor.state("acme/b").state is Lifecycle.DELETED  # type: ignore[union-attr]
    again = write_bytes(memory_id="b", content="Ann likes tea.", at="2026-03-02T12:00:00+00:00")
    t.write(again, key=b"acme/b")  # b again, as a new memory after its deletion
    t.access(access_bytes(memory_id="b"), key=b"acme/b")
    t.carry_out(decision_records("acme", [merge], rows, T, None))  # a absorbed b before
    found = t.processor.state("acme/b")
    assert found is not None
    assert (found.state, found.access_count) == (Lifecycle.ACTIVE, 1)
    (late,) = plan_tenant("acme", rows[::2], request, Policy())  # a and c, then a is deleted
    t.write(decision_bytes(memory_id="a", decision="retire", to="deleted"), key=b"acme/a")
    t.carry_out(decision_records("acme", [late], rows, T, None))
    kept = t.processor.state("acme/c")
    assert kept is not None
    assert (kept.state, kept.merged_into) == (Lifecycle.ACTIVE, None)


def test_an_absorb_its_survivor_refused_retires_nothing_when_it_is_met_again() -> None:
    """Met again (a retried batch, a redelivery), it was skipped like a taken one and sent the
    duplicate's retire: b went, though its survivor had been deleted since the plan.
    """
    t = Tables()
    for m in ("a", "b"):
        t.write(write_bytes(memory_id=m, content="Ann likes tea."), key=f"acme/{m}".encode())
    rows = [
        make_row("acme", m, (1.0, 0.0, 0.0, 0.0), content="Ann likes tea.", created_at_us=us)
        for us, m in enumerate(("a", "b"), start=1)
    ]
    request = ConsolidationRequest(("acme",), T, (Strategy.EXACT_DEDUP,), {}, False, None)
    (merge,) = plan_tenant("acme", rows, request, Policy())
    t.write(decision_bytes(memory_id="a", decision="retire", to="deleted"), key=b"acme/a")
    (absorb,) = decision_records("acme", [merge], rows, T, None)
    for _ in range(2):  # the same record, at the same offset: the second is skipped
        batch = Batch()
        message = Inbound("w", 0, 1_000, absorb.key, absorb.value)
        for got, record in t.processor.decode_writes([message], batch):
            assert isinstance(record, DecisionRecord)
            t.processor.decision(got, record, batch)
        assert [o for o in batch.out if o.role == "memory-writes"] == []
    assert t.processor.state("acme/b").state is Lifecycle.ACTIVE  # type: ignore[union-attr]
    old = decode_decision(absorb.value, LIMITS).event
    assert isinstance(old, Absorb)
    legacy = dataclasses.replace(old, content_hash=None)  # planned with its own retire, logged
    taken = t.processor.state("acme/a")
    assert taken is not None
    assert merged_away(taken, legacy, Effect(EffectKind.ABSORBED, "")) is None


def test_summaries_keep_their_sources_scope_and_users_are_consolidated_apart() -> None:
    def row(memory_id: str, user_id: str, content: str = "Ann likes tea.") -> MemoryRow:
        vector = (1.0, 0.0, 0.0, 0.0)
        scope = {"agent_id": "bot", "session_id": "run-1", "user_id": user_id}
        return make_row("acme", memory_id, vector, content=content, **scope)

    ann, ann2, bob = row("a", "ann"), row("c", "ann", "Ann drinks tea."), row("b", "bob")
    assert item_of(ann).scope == ("bot", "run-1", "ann")
    assert item_of(row("x", "")).scope == ("bot", "run-1", "")
    request = ConsolidationRequest(("acme",), T, (Strategy.EXACT_DEDUP,), {}, False, None)
    assert plan_tenant("acme", [ann, bob], request, Policy()) == []  # one sentence, two users
    (merge,) = plan_tenant("acme", [ann, row("a2", "ann")], request, Policy())
    assert merge.kind is DecisionKind.MERGE
    summary = Decision(DecisionKind.SUMMARISE, "s-1", ("a", "c"), "a cluster")
    out = decision_records("acme", [summary], [ann, ann2], T, "req-1")
    value = orjson.loads(out[0].value)
    assert (value["user_id"], value["agent_id"], value["session_id"]) == ("ann", "bot", "run-1")
    written = decode_write(out[0].value, LIMITS)
    assert (written.memory_id, written.user_id) == ("s-1", "ann")
    plain = [dataclasses.replace(r, user_id="") for r in (ann, ann2)]
    unscoped = orjson.loads(decision_records("acme", [summary], plain, T, None)[0].value)
    assert "user_id" not in unscoped


def test_a_remembering_batch_reads_each_state_once_and_sees_every_change() -> None:
    t = Tables()
    memories = t.processor.memories = CountingDict()
    with t.processor.remembering():
        t.write(write_bytes(importance=0.5))
        reads = memories.reads
        t.access(access_bytes("recall"))  # an access between the batch's steps (another agent)
        t.access(access_bytes("get"))
        state = t.processor.state("acme/m1")
        assert state is not None
        assert (state.access_count, state.recall_count) == (2, 1)
        upserts, _ = t.processor.rows(["acme/m1"])
        assert [r.access_count for r in upserts] == [2]
        assert memories.reads == reads  # every look after the write came from memory
    assert codec.decode(memories[b"acme/m1"]) == state  # and the table has the same


def test_a_remembering_batch_looks_for_parked_accesses_once_and_sees_new_ones() -> None:
    t = Tables()
    pending = t.processor.pending = CountingDict()
    with t.processor.remembering():
        for i in range(3):
            t.write(write_bytes(memory_id=f"w{i}"), key=f"acme/w{i}".encode())
        assert pending.reads == 0  # found empty once, not read per write
        parked = t.access(access_bytes(memory_id="m1"), caught_up=False)
        assert parked.parked == {0}
        batch = t.write(write_bytes(importance=0.5))  # the memory it waited for
    state = t.processor.state("acme/m1")
    assert state is not None
    assert state.access_count == 1
    t.processor.drop_released(batch, partition=0)
    assert pending == {}
    assert list(batch.touched) == ["acme/m1"]


def test_what_a_batch_keeps_is_what_the_tables_give_back() -> None:
    t = Tables()
    with t.processor.remembering():
        t.write(write_bytes(at="2026-03-01T14:00:00+02:00", embedding=[0.1, 0.2, 0.3, 0.4]))
        kept, doc = t.processor.state("acme/m1"), t.processor.document("acme/m1")
    assert kept == codec.decode(t.memories[b"acme/m1"])
    assert kept is not None
    assert (
        kept.last_access.utcoffset() == codec.decode(t.memories[b"acme/m1"]).last_access.utcoffset()
    )
    assert doc == codec.decode_document(t.documents[b"acme/m1"])  # float32, as stored


class SearchedStore:
    """A store whose search answers every vector with one fixed hit and counts its calls."""

    def __init__(self, hit: Hit) -> None:
        self.hit = hit
        self.searches = 0

    def search(
        self, tenant_id: str, vectors: list[list[float]], k: int, filters: Filters
    ) -> list[list[Hit]]:
        self.searches += 1
        return [[self.hit] for _ in vectors]


def test_the_supersession_search_asks_milvus_only_where_the_neighbours_cannot_answer() -> None:
    stored = Hit(make_row("acme", "in-milvus", [1.0, 0, 0, 0]), 0.9)
    cached = Hit(make_row("acme", "in-cache", [1.0, 0, 0, 0]), 0.9)
    store = SearchedStore(stored)
    answers: dict[str, list[list[Hit]] | None] = {"acme": [[cached]], "globex": None}
    services = Services(
        store,  # type: ignore[arg-type]
        embedder=None,  # type: ignore[arg-type]
        neighbours=lambda tenant, vectors, n, filters: answers[tenant],
    )
    filters = Filters(states=("active", "archived"))
    assert nearest(services, "acme", [[1.0, 0, 0, 0]], 3, filters) == [[cached]]
    assert store.searches == 0
    assert nearest(services, "globex", [[1.0, 0, 0, 0]], 3, filters) == [[stored]]
    assert store.searches == 1
    without = Services(store, embedder=None)  # type: ignore[arg-type]
    assert nearest(without, "acme", [[1.0, 0, 0, 0]], 3, filters) == [[stored]]
    assert store.searches == 2
    registry = services.metrics.registry
    name = "mnemostream_worker_supersession_searches_total"
    assert [registry.get_sample_value(name, {"source": s}) for s in ("hot", "milvus")] == [1, 1]


class QueriedStore:
    """A store whose query answers one fixed row and counts its calls."""

    def __init__(self, row: MemoryRow) -> None:
        self.row = row
        self.queries = 0

    def every_row(self, tenant_id: str, filters: Filters) -> list[MemoryRow]:
        assert filters == ANY_STATE  # every row a consolidation may decide about
        self.queries += 1
        return [self.row]


def test_consolidation_reads_milvus_only_where_the_tenant_rows_cannot_answer() -> None:
    stored = make_row("acme", "in-milvus", [1.0, 0, 0, 0])
    cached = make_row("acme", "in-cache", [1.0, 0, 0, 0])
    store = QueriedStore(stored)
    answers: dict[str, list[MemoryRow] | None] = {"acme": [cached], "globex": None}
    services = Services(
        store,  # type: ignore[arg-type]
        embedder=None,  # type: ignore[arg-type]
        tenant_rows=lambda tenant: answers[tenant],
    )
    assert stored_rows(services, "acme") == [cached]
    assert store.queries == 0
    assert stored_rows(services, "globex") == [stored]
    assert store.queries == 1
    without = Services(store, embedder=None)  # type: ignore[arg-type]
    assert stored_rows(without, "acme") == [stored]
    assert store.queries == 2
    name = "mnemostream_worker_consolidation_reads_total"
    registry = services.metrics.registry
    assert [registry.get_sample_value(name, {"source": s}) for s in ("hot", "milvus")] == [1, 1]


def test_consolidation_takes_the_tables_live_fields_and_leaves_purged_memories_out() -> None:
    stored = {name: make_row("acme", name, [1.0, 0, 0, 0]) for name in ("kept", "gone", "other")}
    accessed = dataclasses.replace(created(memory_id="kept"), access_count=7)
    purged = dataclasses.replace(created(memory_id="gone"), state=Lifecycle.DELETED, purged=True)
    tables = {"acme/kept": accessed, "acme/gone": purged}  # "other": another worker's
    rows = consolidatable(list(stored.values()), tables.get)
    assert [r.memory_id for r in rows] == ["kept", "other"]
    assert rows[0].access_count == 7
    assert rows[1] == stored["other"]


def test_a_memory_the_tables_hold_as_forgotten_deleted_or_superseded_is_not_supersedable() -> None:
    """The search's view of a state can lag the tables: theirs decides, where they hold one."""
    names = ("active", "archived", "forgotten", "deleted", "elsewhere", "before", "after")
    hits = {name: Hit(make_row("acme", name, [1.0, 0, 0, 0]), 0.9) for name in names}
    tables = {
        f"acme/{name}": dataclasses.replace(created(memory_id=name), state=Lifecycle(name))
        for name in ("active", "archived", "forgotten", "deleted")
    }
    at = T0 + timedelta(days=2)
    for name, until in (("before", at), ("after", at + timedelta(seconds=1))):
        superseded = dataclasses.replace(created(memory_id=name), valid_to=until, superseded_by="x")
        tables[f"acme/{name}"] = superseded
    kept = supersedable(list(hits.values()), tables.get, at)
    # superseded by the statement's time: its chain's current end is the one to compare with
    assert [h.row.memory_id for h in kept] == ["active", "archived", "elsewhere", "after"]


def test_a_failed_batch_sets_the_resync_marker_and_a_good_one_does_not(tmp_path: Path) -> None:
    marker = ResyncMarker(tmp_path / "worker" / "app.milvus-resync")
    with resync_on_failure(marker):
        pass
    assert marker.reason() is None
    for failure in (RuntimeError("Milvus gone"), asyncio.CancelledError()):
        with pytest.raises(type(failure)), resync_on_failure(marker):
            raise failure
        reason = marker.reason()
        assert reason is not None
        assert type(failure).__name__ in reason
        marker.clear()
        assert marker.reason() is None


# -- what a memory's rewrites add up to stays storable ----------------------------------------------


def test_a_memory_rewritten_with_many_tags_and_relations_keeps_a_row_milvus_takes() -> None:
    t = Tables()
    for i in range(3):
        tags = [f"t{i}-{j}" for j in range(MAX_TAGS)]
        relations = [f"r{i}-{j}" for j in range(MAX_RELATIONS)]
        batch = t.write(write_bytes(tags=tags, relations=relations))
        assert [o.role for o in batch.out] == ["audit"]
    (row,), _ = t.processor.rows(["acme/m1"])
    # the collection's arrays hold MAX_TAGS and MAX_RELATIONS: the newest write's are kept
    assert row.tags == tuple(f"t2-{j}" for j in range(MAX_TAGS))
    assert row.relations == tuple(f"r2-{j}" for j in range(MAX_RELATIONS))
    state = t.processor.state("acme/m1")
    assert state is not None
    assert (state.tags, state.relations) == (row.tags, row.relations)  # the tables hold as many


def test_a_rewrite_whose_metadata_merged_would_be_over_the_limit_goes_to_dead_letter() -> None:
    t = Tables()
    t.write(write_bytes(metadata={"a": "x" * 20_000}))
    batch = t.write(write_bytes(metadata={"b": "y" * 20_000}))  # each alone is within the limit
    (letter,) = [orjson.loads(o.value) for o in batch.out]
    assert letter["field"] == "metadata"
    assert "40015 bytes" in letter["reason"]
    assert f"over {MAX_METADATA_BYTES} bytes" in letter["reason"]
    found = t.processor.load("acme/m1")
    assert found is not None
    assert (found[0].write_count, found[1].metadata) == (1, {"a": "x" * 20_000})
    t.write(write_bytes(metadata={"a": "z", "b": "y" * 20_000}))  # a value replaced: it fits
    found = t.processor.load("acme/m1")
    assert found is not None
    assert (found[0].write_count, found[1].metadata) == (2, {"a": "z", "b": "y" * 20_000})


class RefusingStore:
    """Refuses (not retriably) an upsert holding a row of ``refuse``, as Milvus refuses a row it
    cannot take; ``down``: every upsert fails retriably.
    """

    def __init__(self, refuse: Sequence[str] = (), *, down: bool = False) -> None:
        self.rows: dict[str, MemoryRow] = {}
        self.refuse = set(refuse)
        self.down = down

    def upsert(self, rows: list[MemoryRow]) -> int:
        if self.down:
            raise StorageError("upsert", "unavailable", retriable=True)
        for row in rows:
            if row.key in self.refuse:
                raise StorageError("upsert", f"row {row.key} refused", retriable=False)
        self.rows.update((row.key, row) for row in rows)
        return len(rows)

    def delete(self, tenant_id: str, memory_ids: list[str]) -> int:
        return len(memory_ids)

    def total(self) -> int:
        return len(self.rows)


def test_a_row_milvus_refuses_at_start_up_is_left_out_and_the_start_goes_on(
    tmp_path: Path,
) -> None:
    t = Tables()
    for memory_id in ("m1", "m2", "m3"):
        t.write(write_bytes(memory_id=memory_id), key=f"acme/{memory_id}".encode())
    marker = ResyncMarker(tmp_path / "app.milvus-resync")
    marker.ask("Milvus refused the row of acme/m2")
    store = RefusingStore(["acme/m2"])
    tables = ChangelogTables(t.memories, t.documents)
    done = catch_up(store, tables, marker=marker)  # type: ignore[arg-type]
    assert sorted(store.rows) == ["acme/m1", "acme/m3"]
    assert (done.rows, done.upserted, done.held) == (3, 2, 2)
    assert write_rows(store, tables) == (2, 0)  # type: ignore[arg-type]
    with pytest.raises(StorageError, match="unavailable"):  # Milvus down: the start waits
        catch_up(RefusingStore(down=True), tables, always=True)  # type: ignore[arg-type]


class DeletingStore(RefusingStore):
    def delete(self, tenant_id: str, memory_ids: list[str]) -> int:
        for memory_id in memory_ids:
            self.rows.pop(f"{tenant_id}/{memory_id}", None)
        return len(memory_ids)


def test_a_start_beside_running_workers_writes_again_what_they_changed_meanwhile() -> None:
    """The snapshot a starting worker rewrites from is older than rows other workers wrote
    since: without the catch-up rounds a rewrite brought back an old version and a purged
    memory, for good.
    """
    t = Tables()
    t.write(write_bytes(content="Alice lives in Osaka"))
    t.write(write_bytes(memory_id="m2", content="my code is 1234"), key=b"acme/m2")
    snapshot = ChangelogTables(dict(t.memories), dict(t.documents))
    # meanwhile another worker rewrites m1, deletes and purges m2, and writes their rows
    t.write(write_bytes(content="Alice lives in Lisbon", at="2026-03-02T12:00:00+00:00"))
    for decision in ("retire", "purge"):
        t.write(decision_bytes(memory_id="m2", decision=decision, to="deleted"), key=b"acme/m2")
    t.documents.pop(b"acme/m2", None)
    now = ChangelogTables(dict(t.memories), dict(t.documents))
    store = DeletingStore()
    store.upsert(list(now.iter_rows()))
    reads: list[ChangelogTables] = []

    def refresh(tables: ChangelogTables) -> tuple[ChangelogTables, set[bytes]]:
        reads.append(tables)
        if len(reads) == 1:  # what changed since the snapshot
            return now, {b"acme/m1", b"acme/m2"}
        return tables, set()

    done = catch_up(store, snapshot, always=True, refresh=refresh)  # type: ignore[arg-type]
    assert done.upserted == 2  # the snapshot's rows: m1's old words, m2 back
    assert [(k, r.content) for k, r in store.rows.items()] == [("acme/m1", "Alice lives in Lisbon")]
    assert len(reads) == 2  # the second read found nothing of what the first round wrote changed


def test_the_row_of_a_state_holding_more_tags_than_the_collection_takes_keeps_the_newest() -> None:
    t = Tables()
    t.write(write_bytes())
    # a state written before the reducer capped its tags and relations
    state = codec.decode(t.memories[b"acme/m1"])
    tags = tuple(f"t{j}" for j in range(MAX_TAGS + 16))
    relations = tuple(f"r{j}" for j in range(MAX_RELATIONS + 16))
    t.memories[b"acme/m1"] = codec.encode(
        dataclasses.replace(state, tags=tags, relations=relations)
    )
    (row,), _ = t.processor.rows(["acme/m1"])
    assert (row.tags, row.relations) == (tags[16:], relations[16:])


def test_a_large_plans_report_fits_in_one_kafka_record() -> None:
    """6,000 archive decisions made a 1.1 MB report, past Kafka's 1 MB default: it was lost."""
    decisions = [
        Decision(DecisionKind.ARCHIVE, f"m-{i:032x}", (), "faded: importance 0.0123 after 2400 h")
        for i in range(6_000)
    ]
    request = ConsolidationRequest(("acme",), T, tuple(Strategy), {}, False, "req-1")
    out = report("acme", request, decisions)
    value = orjson.loads(out.value)
    assert len(out.value) < 1_000_000 - 1_000
    assert (value["decisions_total"], value["truncated"]) == (6_000, True)
    assert 0 < len(value["decisions"]) < 6_000
    assert value["decisions"][0]["target"] == decisions[0].target  # in plan order
    few = orjson.loads(report("acme", request, decisions[:3]).value)
    assert (len(few["decisions"]), few["decisions_total"], few["truncated"]) == (3, 3, False)


def test_near_duplicate_rows_merge_unless_their_numbers_denials_or_context_differ() -> None:
    """Read from rows (``item_of``): a paraphrase merges; another number, a denial or another
    context keeps both. A hash of the whole indexed text had let no paraphrase merge at all."""

    def rows(newer: str, context: str | None = None) -> list[MemoryRow]:
        older = "User likes green tea."
        return [
            make_row(
                "acme",
                memory_id,
                vector,
                content=text,
                created_at_us=to_us(T) + i,
                search_text=keyword_text(indexed_text(text, ctx)),
            )
            for i, (memory_id, vector, text, ctx) in enumerate(
                [
                    ("old", (1.0, 0.0, 0.0, 0.0), older, None),
                    ("new", (1.0, 0.01, 0.0, 0.0), newer, context),
                ]
            )
        ]

    def merged(newer: str, context: str | None = None) -> list[tuple[str, tuple[str, ...]]]:
        items = [item_of(r) for r in rows(newer, context)]
        decisions = plan("acme", items, T + timedelta(days=1), Policy(), [Strategy.SEMANTIC_DEDUP])
        return [(d.target, d.sources) for d in decisions]

    assert merged("The user really likes green tea!") == [("old", ("new",))]
    assert merged("User does not like green tea.") == []
    assert merged("User likes 2 green teas.") == []
    assert merged("User likes green tea.", context="[8 May] at the cafe") == []
