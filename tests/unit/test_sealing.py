"""Crypto-shredding (storage.sealing): sealed writes and documents open with their key only, and
once the key is erased nothing opens them again; the processor keeps no words in the clear."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
from collections.abc import Awaitable, Sequence
from datetime import UTC, datetime
from types import SimpleNamespace

import httpx
import orjson
import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from memcore import Lifecycle, Purge, Retire, resolve_importance
from memcore.policy import RecallPolicy
from ranker.api import create_api
from ranker.service import RecallQuery, RecallService
from storage import Document, Filters, MemoryRow, MilvusConfig, StorageError, codec
from storage.changelogs import DocumentRows, Record, Unreadable
from storage.changelogs import Tables as RebuildTables
from storage.embedding import Hashing
from storage.key_log import KeyLog, KeyLogError
from storage.milvus import Hit
from storage.records import DecisionRecord, Limits, RecordError, decision_value, decode_write
from storage.sealing import (
    NONCE_BYTES,
    PRIVATE_FIELDS,
    DataKey,
    Erased,
    KeyRing,
    SealError,
    erasure_record,
    key_record,
    new_key,
    seal,
    seal_write,
    unseal,
)
from storage.tenants import TenantRegistry
from streams.processor import Batch, Inbound, Processor
from tests.rows import make_row

from .helpers import CountingDict

AT = "2026-03-01T12:00:00+00:00"
AT_TIME = datetime(2026, 3, 1, 12, 30, tzinfo=UTC)
SECRET_WORDS = "Ann's PIN is 4711"


def clear_write(**kw: object) -> dict[str, object]:
    doc: dict[str, object] = {
        "v": 1,
        "tenant_id": "acme",
        "memory_id": "m1",
        "content": SECRET_WORDS,
        "context": "said at the bank",
        "embedding": [1.0, 0.0, 0.0, 0.0],
        "metadata": {"card": "visa"},
        "tags": ["money"],
        "user_id": "ann",
        "at": AT,
    }
    doc.update(kw)
    return doc


def ring_with(*keys: object) -> KeyRing:
    ring = KeyRing()
    for key in keys:
        assert ring.apply(*key_record(key))  # type: ignore[arg-type]
    return ring


def limits(ring: KeyRing | None) -> Limits:
    return Limits(4, 64, TenantRegistry.open_to(["acme"]), keys=ring)


def test_a_sealed_value_opens_with_its_key_for_its_memory_only() -> None:
    key = new_key("acme", "m1", "ann")
    sealed = seal({"content": SECRET_WORDS}, key)
    assert SECRET_WORDS not in orjson.dumps(sealed).decode()
    assert unseal(sealed, key.secret, "acme", "m1") == {"content": SECRET_WORDS}
    with pytest.raises(SealError, match="does not open"):
        unseal(sealed, key.secret, "acme", "m2")  # copied onto another memory
    with pytest.raises(SealError, match="does not open"):
        unseal(sealed, new_key("acme", "m1").secret, "acme", "m1")
    tampered = {**sealed, "data": sealed["data"][:-4] + "AAA="}
    with pytest.raises(SealError):
        unseal(tampered, key.secret, "acme", "m1")
    assert new_key("acme", "m1").key_id != key.key_id


def test_seal_write_moves_the_private_fields_only() -> None:
    key = new_key("acme", "m1", "ann")
    sealed = seal_write(clear_write(), key)
    assert not set(PRIVATE_FIELDS) & set(sealed)
    assert (sealed["tags"], sealed["user_id"], sealed["memory_id"]) == (["money"], "ann", "m1")
    assert SECRET_WORDS not in orjson.dumps(sealed).decode()
    opened = unseal(sealed["sealed"], key.secret, "acme", "m1")
    assert set(opened) == {"content", "context", "embedding", "metadata"}


def test_a_sealed_write_decodes_as_its_clear_form() -> None:
    key = new_key("acme", "m1", "ann")
    clear = decode_write(orjson.dumps(clear_write()), limits(None))
    sealed = decode_write(orjson.dumps(seal_write(clear_write(), key)), limits(ring_with(key)))
    assert sealed == dataclasses.replace(clear, key_id=key.key_id)


@pytest.mark.parametrize(
    ("change", "ring", "field"),
    [
        ({}, None, "sealed"),  # this process holds no keys
        ({"memory_id": None}, "ring", "memory_id"),
        ({"content": "in the clear too"}, "ring", "content"),
        ({"sealed": "x"}, "ring", "sealed"),
        ({"tenant_id": "nobody"}, "ring", "tenant_id"),
    ],
)
def test_bad_sealed_writes_name_their_field(
    change: dict[str, object], ring: str | None, field: str
) -> None:
    key = new_key("acme", "m1")
    doc = {**seal_write(clear_write(), key), **change}
    with pytest.raises(RecordError) as err:
        decode_write(
            orjson.dumps({k: v for k, v in doc.items() if v is not None}),
            limits(ring_with(key) if ring else None),
        )
    assert err.value.field == field


@pytest.mark.parametrize(("name", "field"), [("tags", "tags"), ("extra", "extra")])
def test_a_sealed_write_nested_past_what_json_writes_names_its_field(name: str, field: str) -> None:
    """An opened sealed write is encoded again to be validated; orjson writes at most 254
    levels (it reads 1,024): one plain field nested 300 deep raised a TypeError, which failed
    the worker's whole batch, good records and all.
    """
    key = new_key("acme", "m1")
    raw = orjson.dumps(seal_write(clear_write(), key))[:-1]
    raw += f',"{name}":'.encode() + b"[" * 300 + b"]" * 300 + b"}"
    with pytest.raises(RecordError) as err:
        decode_write(raw, limits(ring_with(key)))
    assert err.value.field == field


def test_an_erasure_marker_with_a_bad_list_of_users_still_erases() -> None:
    """Its users only let a failed user erasure be repeated; its key ids are what a reader
    that missed the tombstones must not open.
    """
    key = new_key("acme", "m1")
    ring = ring_with(key)
    assert ring.apply(b"acme/m1", orjson.dumps({"erased": [key.key_id], "users": [None]}))
    assert ring.is_erased("acme", "m1", key.key_id)
    assert ring.of_memory("acme", "m1") == []
    assert not ring.erased_users


def test_an_erased_memory_costs_a_reader_its_marker_alone() -> None:
    """A tombstoned key left an empty entry for its memory: every memory ever erased grew
    every process by ~1 KB beyond its marker, for good.
    """
    one, two, kept = new_key("acme", "m1"), new_key("acme", "m2"), new_key("acme", "m3")
    ring = ring_with(one, two, kept)
    record, _ = key_record(one)
    assert ring.apply(record, None)  # its tombstone
    assert ring.apply(b"acme/m2", orjson.dumps({"erased": [two.key_id]}))  # a marker alone
    assert set(ring.keys) == {("acme", "m3")}
    assert ring.of_memory("acme", "m3") == [kept]


@pytest.mark.parametrize(
    "marker",
    [
        {"erased": "abcdef"},  # a string's characters are no key ids
        {"erased": ["k1", 7]},
        {"erased": {"k1": 1}},
    ],
)
def test_an_erasure_marker_of_other_types_is_not_applied(marker: dict[str, object]) -> None:
    key = new_key("acme", "m1")
    ring = ring_with(key)
    assert not ring.apply(b"acme/m1", orjson.dumps(marker))
    assert ring.of_memory("acme", "m1") == [key]  # the key stays live, nothing marked
    assert not ring.erased
    assert not ring.erased_users


def test_an_unknown_key_is_an_error_and_an_erased_one_is_not() -> None:
    key = new_key("acme", "m1")
    raw = orjson.dumps(seal_write(clear_write(), key))
    with pytest.raises(RecordError) as err:
        decode_write(raw, limits(KeyRing()))
    assert err.value.field == "sealed.key_id"
    ring = ring_with(key)
    ring.apply(key.record_key, None)  # the key's tombstone
    ring.apply(*erasure_record("acme", "m1", [key.key_id]))
    with pytest.raises(Erased):
        decode_write(raw, limits(ring))
    wrong = seal_write(clear_write(), key)
    for private, field in (
        ({"content": 5}, "content"),
        ({"context": 4711}, "context"),
        ({"embedding": [1.0, "4711", 0.0, 0.0]}, "embedding"),  # not embedding[1]: no path
    ):
        wrong["sealed"] = seal({"content": SECRET_WORDS, **private}, key)
        with pytest.raises(RecordError) as err:
            decode_write(orjson.dumps(wrong), limits(ring_with(key)))
        assert (err.value.field, err.value.value) == (field, "<sealed>")
        assert "4711" not in str(err.value)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"at": None}, "at"),  # missing: its "input" was the whole opened write
        ({"kind": "bogus"}, "kind"),
        ({"zz": 1}, "zz"),
        ({"session_id": 5}, "session_id"),
    ],
)
def test_a_sealed_write_refused_for_a_clear_field_keeps_its_sealed_fields_out_of_the_reason(
    change: dict[str, object], field: str
) -> None:
    """A sealed write missing ``at`` was dead-lettered with its opened content and metadata in
    the reason, in the clear, for the dead-letter topic's 30 days (erasure never reaches it)."""
    key = new_key("acme", "m1")
    doc = {k: v for k, v in clear_write(**change).items() if v is not None}
    with pytest.raises(RecordError) as err:
        decode_write(orjson.dumps(seal_write(doc, key)), limits(ring_with(key)))
    assert err.value.field == field
    for secret in (SECRET_WORDS, "visa", "said at the bank"):
        assert secret not in str(err.value)
        assert secret not in repr(err.value.value)


def test_a_missing_field_of_a_clear_write_is_named_without_the_object_around_it() -> None:
    doc = {k: v for k, v in clear_write().items() if k != "at"}
    with pytest.raises(RecordError) as err:
        decode_write(orjson.dumps(doc), limits(KeyRing()))
    assert (err.value.field, err.value.value) == ("at", "<missing>")


def test_a_marker_wins_over_a_key_read_after_its_tombstone_was_compacted_away() -> None:
    key = new_key("acme", "m1")
    raw = orjson.dumps(seal_write(clear_write(), key))
    late = KeyRing()  # a reader that meets the marker, then the key (its tombstone gone)
    late.apply(*erasure_record("acme", "m1", [key.key_id]))
    late.apply(*key_record(key))
    assert late.of_memory("acme", "m1") == []
    with pytest.raises(Erased):
        decode_write(raw, limits(late))
    stale = ring_with(key)  # a reader that holds the key and never sees its tombstone
    stale.apply(*erasure_record("acme", "m1", [key.key_id]))
    assert stale.of_memory("acme", "m1") == []
    with pytest.raises(Erased):
        decode_write(raw, limits(stale))


def test_the_ring_follows_keys_tombstones_and_markers() -> None:
    ann, bob = new_key("acme", "m1", "ann"), new_key("acme", "m2", "bob")
    other = new_key("globex", "m3", "ann")
    ring = ring_with(ann, bob, other)
    assert ring.memories("acme") == {"m1", "m2"}
    assert ring.memories("acme", "ann") == {"m1"}
    assert ring.apply(ann.record_key, None)
    assert ring.memories("acme", "ann") == set()
    assert ring.apply(*erasure_record("acme", "m1", [ann.key_id, "older"]))
    assert ring.is_erased("acme", "m1", "older")
    assert not ring.is_erased("acme", "m2", bob.key_id)
    assert not ring.apply(b"acme/m9/k", b"not json")
    assert not ring.apply(b"no-slashes", b"{}")


def test_a_sealed_document_round_trips_and_hides_its_words() -> None:
    key = new_key("acme", "m1")
    doc = Document(SECRET_WORDS, (0.5, -0.25, 1.0), {"k": 1}, "ctx", key.key_id)
    raw = codec.encode_document(doc, key)
    assert SECRET_WORDS.encode() not in raw
    assert b"ctx" not in raw
    assert codec.decode_document(raw, ring_with(key), ("acme", "m1")) == doc
    with pytest.raises(SealError):
        codec.decode_document(raw)  # no keys
    clear = Document("hello", (1.0,), {}, None)
    assert codec.decode_document(codec.encode_document(clear)) == clear


class Tables:
    def __init__(self, ring: KeyRing) -> None:
        self.memories: dict[bytes, bytes] = {}
        self.documents: dict[bytes, bytes] = {}
        self.processor = Processor(self.memories, self.documents, {}, {}, limits(ring))
        self.offset = 0

    def write(self, value: dict[str, object]) -> Batch:
        batch = Batch()
        self.offset += 1
        key = f"{value['tenant_id']}/{value['memory_id']}".encode()
        inbound = Inbound("w", 0, self.offset, key, orjson.dumps(value))
        for message, record in self.processor.decode_writes([inbound], batch):
            if isinstance(record, DecisionRecord):
                self.processor.decision(message, record, batch)
                continue
            importance = resolve_importance(record.content, explicit=0.5)
            self.processor.write(message, record, record.embedding, importance, batch)
        return batch


def test_the_processor_keeps_sealed_words_sealed_and_forgets_them_on_erasure() -> None:
    key = new_key("acme", "m1", "ann")
    ring = ring_with(key)
    t = Tables(ring)
    t.write(seal_write(clear_write(), key))
    (raw,) = t.documents.values()
    assert SECRET_WORDS.encode() not in raw
    found = t.processor.load("acme/m1")
    assert found is not None
    assert found[1].content == SECRET_WORDS
    assert found[1].key_id == key.key_id
    upserts, _ = t.processor.rows(["acme/m1"])
    assert [r.content for r in upserts] == [SECRET_WORDS]  # Milvus serves the words
    # a metadata-only rewrite in the clear keeps the document sealed under the memory's key
    t.write({**clear_write(metadata={"more": 1})})
    (raw,) = t.documents.values()
    assert SECRET_WORDS.encode() not in raw
    # erasure: the key goes, the document no longer opens, the purge drops it and the row
    ring.apply(key.record_key, None)
    ring.apply(*erasure_record("acme", "m1", [key.key_id]))
    assert t.processor.load("acme/m1") is None
    at = datetime(2026, 3, 1, 12, 1, tzinfo=UTC)
    t.write(decision_value("acme", "m1", Retire(at, Lifecycle.DELETED, "erased")))
    batch = t.write(decision_value("acme", "m1", Purge(at, "erased")))
    assert t.documents == {}
    assert t.processor.rows(batch.touched) == ([], [("acme", "m1")])
    # a replay meeting the sealed write skips it: nothing comes back, nothing is dead-lettered
    replay = Tables(ring)
    batch = replay.write(seal_write(clear_write(), key))
    assert (batch.erased, batch.out, replay.documents) == (1, [], {})


def test_a_key_erased_between_decode_and_apply_keeps_nothing() -> None:
    key = new_key("acme", "m1")
    ring = ring_with(key)
    t = Tables(ring)
    batch = Batch()
    message = Inbound("w", 0, 1, b"acme/m1", orjson.dumps(seal_write(clear_write(), key)))
    ((message, record),) = t.processor.decode_writes([message], batch)
    ring.apply(key.record_key, None)  # erased while the batch was being embedded
    assert not isinstance(record, DecisionRecord)
    t.processor.write(message, record, record.embedding, resolve_importance("x"), batch)
    assert (batch.erased, t.documents) == (1, {})


def test_aesgcm_is_what_seals() -> None:  # the algorithm is part of the wire contract
    key = new_key("acme", "m1")
    sealed = seal({"content": "x"}, key)
    plain = AESGCM(key.secret).decrypt(
        base64.b64decode(sealed["nonce"]),
        base64.b64decode(sealed["data"]),
        b"acme/m1/" + key.key_id.encode(),
    )
    assert orjson.loads(plain) == {"content": "x"}


# -- the ranker's side: writes sealed under minted keys, erasure publishes tombstones first ------


class LocalKeys(KeyLog):
    """A keys log that applies what it publishes itself (no broker)."""

    def __init__(self) -> None:
        super().__init__("127.0.0.1:1", "t.memory-keys")
        self.published: list[tuple[bytes, bytes | None]] = []

    async def catch_up(self, timeout_s: float | None = None, *, refresh: bool = False) -> None:
        return None

    async def publish(
        self, records: Sequence[tuple[bytes, bytes | None]], *, applied: bool = True
    ) -> list[int]:
        self.published.extend(records)
        for key, value in records:
            self.apply(key, value)
        return []


def test_an_erasure_of_some_keys_leaves_the_memorys_other_keys_live() -> None:
    """A merged duplicate's purge erases the key of its words alone (``only``): a key minted
    since, for a write of the same id, seals other words and stays live.
    """
    keys = LocalKeys()
    old, new = new_key("acme", "d1"), new_key("acme", "d1")
    other = new_key("acme", "m2")
    for key in (old, new, other):
        keys.ring.add(key)
    erased = asyncio.run(keys.erase("acme", ["d1", "m2"], only={"d1": {old.key_id}}))
    assert erased == {"d1": 1, "m2": 0}
    assert keys.ring.is_erased("acme", "d1", old.key_id)
    assert not keys.ring.is_erased("acme", "d1", new.key_id)
    assert [k.key_id for k in keys.ring.of_memory("acme", "d1")] == [new.key_id]
    assert not keys.ring.erased_memory("acme", "d1")  # written again: a live key
    assert keys.ring.of_memory("acme", "m2") == [other]  # no key of it named: none erased
    assert (old.record_key, None) in keys.published


class Sent:
    def __init__(self) -> None:
        self.values: list[dict[str, object]] = []

    async def __call__(self, role: str, key: bytes, value: bytes) -> Awaitable[object]:
        self.values.append(orjson.loads(value))
        meta = SimpleNamespace(partition=0, offset=len(self.values))

        async def delivered() -> object:
            return meta

        return delivered()


class UserRows:
    def get(self, tenant_id: str, memory_ids: Sequence[str]) -> dict[str, MemoryRow]:
        return {}

    def get_slim(self, tenant_id: str, memory_ids: Sequence[str]) -> dict[str, MemoryRow]:
        return {}

    def every_row(self, tenant_id: str, filters: Filters) -> list[MemoryRow]:
        return [make_row(tenant_id, "summary-1", (1.0, 0.0, 0.0, 0.0))] if filters.user_id else []

    def every_id(self, tenant_id: str, filters: Filters) -> list[str]:
        return [r.memory_id for r in self.every_row(tenant_id, filters)]


def test_the_ranker_seals_writes_and_erases_keys_before_it_purges() -> None:
    keys, sent = LocalKeys(), Sent()
    service = RecallService(UserRows(), Hashing(4), sent, keys=keys)  # type: ignore[arg-type]
    doc = {"content": SECRET_WORDS, "at": AT, "user_id": "ann", "metadata": {"k": 1}}
    at = datetime(2026, 3, 1, 13, tzinfo=UTC)
    ids, _ = asyncio.run(service.write("acme", [doc]))
    written = sent.values[0]
    assert not {"content", "metadata"} & set(written)
    assert SECRET_WORDS not in orjson.dumps(written).decode()
    assert decode_write(orjson.dumps(written), limits(keys.ring)).content == SECRET_WORDS
    (minted,) = keys.published
    assert minted[0].decode().split("/")[:2] == ["acme", ids[0]]

    mine = asyncio.run(service.user_memories("acme", "ann"))
    assert mine == sorted([ids[0], "summary-1"])  # the user's keys and the user's Milvus rows
    destroyed = asyncio.run(service.erase("acme", mine, at)).keys
    assert destroyed == 1  # the summary was written without a key here
    assert keys.published[1] == (minted[0], None)  # the key's tombstone, then the marker
    assert keys.ring.of_memory("acme", ids[0]) == []
    assert keys.ring.is_erased("acme", ids[0], minted[0].decode().split("/")[2])
    decisions = [(v["memory_id"], v["decision"]) for v in sent.values[1:]]
    assert decisions == [(m, d) for m in mine for d in ("retire", "purge")]
    with pytest.raises(Erased):
        decode_write(orjson.dumps(written), limits(keys.ring))
    # until the worker purges its row, a PATCH must not carry its words into a new version
    assert asyncio.run(service.erased("acme", ids[0])) is True
    assert asyncio.run(service.erased("acme", "never-erased")) is False
    asyncio.run(keys.mint([("acme", ids[0], "ann")]))  # written again since: a new memory
    assert asyncio.run(service.erased("acme", ids[0])) is False


def kept_and_erased() -> tuple[Tables, KeyRing]:
    """Tables with m1 sealed under a key the ring holds and m2 sealed under an erased one."""
    kept, gone = new_key("acme", "m1"), new_key("acme", "m2")
    ring = ring_with(kept, gone)
    t = Tables(ring)
    t.write(seal_write(clear_write(), kept))
    t.write(seal_write(clear_write(memory_id="m2", content="gone words"), gone))
    ring.apply(gone.record_key, None)
    ring.apply(*erasure_record("acme", "m2", [gone.key_id]))
    return t, ring


def test_a_rebuild_opens_sealed_documents_and_leaves_erased_ones_out() -> None:
    t, ring = kept_and_erased()
    assert set(t.documents) == {b"acme/m1", b"acme/m2"}
    tables = RebuildTables(dict(t.memories), dict(t.documents), ring)
    upserts, purged = tables.rows()
    assert [(r.memory_id, r.content) for r in upserts] == [("m1", SECRET_WORDS)]
    assert purged == []
    without_keys = RebuildTables(dict(t.memories), dict(t.documents))
    with pytest.raises(Unreadable, match="acme/m1"):  # a rebuild would lose it: refused
        without_keys.rows()
    assert without_keys.rows(strict=False) == ([], [])  # a start-up resync leaves it out


def test_a_streamed_fill_opens_sealed_documents_and_leaves_erased_ones_out() -> None:
    """:class:`storage.changelogs.DocumentRows` (a ranker's fill) keeps the rebuild's rules: an
    erased memory has no row and is met; one whose key the reader lacks is left to Milvus.
    """
    t, ring = kept_and_erased()
    stream: list[list[Record]] = [list(t.documents.items())]
    rows = DocumentRows(dict(t.memories), ring)
    assert [(r.memory_id, r.content) for p in rows.pages(stream) for r in p] == [
        ("m1", SECRET_WORDS)
    ]
    assert rows.unseen() == []
    keyless = DocumentRows(dict(t.memories), KeyRing())
    assert list(keyless.pages(stream)) == []
    assert (keyless.unreadable, keyless.unseen()) == (2, [b"acme/m1", b"acme/m2"])
    # an earlier version opened, then a later one sealed under a key minted after the keys' read
    newer = codec.encode_document(Document("newer", (1.0, 0, 0, 0)), new_key("acme", "m1"))
    later = DocumentRows(dict(t.memories), ring)
    both: list[list[Record]] = [*stream, [(b"acme/m1", newer)]]
    assert [r.content for p in later.pages(both) for r in p] == [SECRET_WORDS]
    assert later.unseen() == [b"acme/m1"]  # the row laid is stale: read back from Milvus


def test_a_batch_opens_each_document_once_and_still_sees_an_erasure() -> None:
    key = new_key("acme", "m1", "ann")
    ring = ring_with(key)
    t = Tables(ring)
    counted = t.processor.documents = CountingDict()
    with t.processor.remembering():
        t.write(seal_write(clear_write(), key))
        reads = counted.reads
        for _ in range(3):  # the Milvus rows and the supersession check read it back
            found = t.processor.load("acme/m1")
            assert found is not None
            assert found[1].content == SECRET_WORDS
            upserts, _ = t.processor.rows(["acme/m1"])
            assert [r.content for r in upserts] == [SECRET_WORDS]
        assert counted.reads == reads  # from memory: not read and opened again
        ring.apply(key.record_key, None)  # erased while the batch goes on
        ring.apply(*erasure_record("acme", "m1", [key.key_id]))
        assert t.processor.load("acme/m1") is None
        assert t.processor.rows(["acme/m1"]) == ([], [])
    assert t.processor.recent is None
    assert t.processor.load("acme/m1") is None


def test_a_document_whose_key_comes_later_in_the_batch_opens_then() -> None:
    key = new_key("acme", "m1", "ann")
    t = Tables(ring_with(key))
    t.write(seal_write(clear_write(), key))
    ring = KeyRing()
    late = Tables(ring)  # a process that has not read the key yet
    late.documents.update(t.documents)
    late.memories.update(t.memories)
    with late.processor.remembering():
        assert late.processor.document("acme/m1") is None
        ring.apply(*key_record(key))  # read from the keys topic meanwhile
        found = late.processor.document("acme/m1")
        assert found is not None
        assert found.content == SECRET_WORDS


@pytest.mark.parametrize("plain", [b"hello", b'{"content": "\\ud800"}', b'{"embedding": [NaN]}'])
def test_a_sealed_value_that_opens_to_no_json_is_a_record_error(plain: bytes) -> None:
    """Another producer's sealed write whose data opens but is not JSON goes to dead-letter naming
    ``sealed.data``; it does not fail the batch it came in.
    """
    key = new_key("acme", "m1")
    nonce = b"\x01" * NONCE_BYTES
    data = AESGCM(key.secret).encrypt(nonce, plain, b"acme/m1/" + key.key_id.encode())
    doc = seal_write(clear_write(), key)
    doc["sealed"] = {
        **doc["sealed"],
        "nonce": base64.b64encode(nonce).decode(),
        "data": base64.b64encode(data).decode(),
    }
    with pytest.raises(SealError, match="not to JSON"):
        unseal(doc["sealed"], key.secret, "acme", "m1")
    with pytest.raises(RecordError) as err:
        decode_write(orjson.dumps(doc), limits(ring_with(key)))
    assert err.value.field == "sealed.data"


class RowsNotPurgedYet:
    """Milvus before the worker applied the erasure's purge: the rows are still there."""

    config = MilvusConfig("unused.db", dim=4, full_text=False)

    def __init__(self, rows: Sequence[MemoryRow]) -> None:
        self.rows = {r.memory_id: r for r in rows}

    def search(self, tenant_id: str, vectors: object, k: int, filters: Filters) -> list[list[Hit]]:
        return [[Hit(r, 0.9) for r in self.rows.values()]]

    def get(self, tenant_id: str, memory_ids: Sequence[str]) -> dict[str, MemoryRow]:
        return {m: self.rows[m] for m in memory_ids if m in self.rows}

    def get_slim(self, tenant_id: str, memory_ids: Sequence[str]) -> dict[str, MemoryRow]:
        """As Milvus reads them for an erasure: no vector or metadata."""
        found = self.get(tenant_id, memory_ids).items()
        return {m: dataclasses.replace(r, vector=(), metadata={}) for m, r in found}

    def query(self, tenant_id: str, filters: Filters, limit: int) -> list[MemoryRow]:
        return [self.rows[m] for m in filters.memory_ids if m in self.rows][:limit]

    def every_id(self, tenant_id: str, filters: Filters) -> list[str]:
        return [r.memory_id for r in self.every_row(tenant_id, filters)]

    def every_row(self, tenant_id: str, filters: Filters) -> list[MemoryRow]:
        """The summaries made from ``summary_of_any``, or the memories merged into or superseded
        by ``derived_from_any`` (the filters an erasure asks)."""
        linked = set(filters.derived_from_any)
        if linked:
            return [r for r in self.rows.values() if linked & {r.merged_into, r.superseded_by}]
        wanted = set(filters.summary_of_any)
        return [r for r in self.rows.values() if wanted & set(r.summary_of)]


def test_an_erased_memory_is_not_read_back_while_its_row_awaits_the_purge() -> None:
    """GET, get-many, the listing and export showed an erased memory's words (state active)
    until the worker purged its row; only PATCH checked the erasure.
    """
    keys, sent = LocalKeys(), Sent()
    service = RecallService(UserRows(), Hashing(4), sent, keys=keys)  # type: ignore[arg-type]
    docs = [{"content": w, "at": AT, "user_id": "ann"} for w in (SECRET_WORDS, "kept words")]
    ids, _ = asyncio.run(service.write("acme", docs))
    vectors = [(1.0, 0.0, 0.0, 0.0), (0.6, 0.8, 0.0, 0.0)]  # the erased one is the best match
    rows = [
        make_row("acme", m, v, content=d["content"])
        for m, v, d in zip(ids, vectors, docs, strict=True)
    ]
    service.store = RowsNotPurgedYet(rows)  # type: ignore[assignment]
    asyncio.run(service.erase("acme", [ids[0]], datetime(2026, 3, 1, 13, tzinfo=UTC)))

    async def reads() -> tuple[object, list[str], list[str], list[str]]:
        one = await service.get("acme", ids[0])
        many = await service.get_many("acme", ids)
        listed = await service.list_page("acme", Filters(states=()), None, 10, ordered=sorted(ids))
        # k 1: the best match left out before scoring, not after (that answered none)
        query = RecallQuery(None, (1.0, 0.0, 0.0, 0.0), 1, AT_TIME, RecallPolicy(), track=False)
        await service.start()
        try:
            recalled = await service.recall("acme", query)
        finally:
            await service.stop()
        return (
            one,
            sorted(many),
            [r.memory_id for r in listed.rows],
            [r.row.memory_id for r in recalled.results],
        )

    one, many, listed, recalled = asyncio.run(reads())
    assert one is None
    assert many == listed == recalled == [ids[1]]

    # written again through another ranker since: this one reads the new key, and shows it
    async def reads_the_other_rankers_key(
        timeout_s: float | None = None, *, refresh: bool = False
    ) -> None:
        del keys.catch_up
        await keys.mint([("acme", ids[0], "ann")])

    keys.catch_up = reads_the_other_rankers_key  # type: ignore[method-assign]
    assert asyncio.run(service.get("acme", ids[0])) is not None


def test_erasing_a_memory_erases_the_summaries_made_from_it() -> None:
    """A consolidation summary quotes its sources' sentences: erasing a source left them
    readable (served, and opened from the log by the summary's own live key).
    """
    keys, sent = LocalKeys(), Sent()
    service = RecallService(UserRows(), Hashing(4), sent, keys=keys)  # type: ignore[arg-type]
    docs = [{"content": w, "at": AT} for w in (SECRET_WORDS, "kept words", "other words")]
    m1, m2, m3 = asyncio.run(service.write("acme", docs))[0]
    # a summary of a summary, and so on: each run may summarise the last one with new notes
    chain = [f"g{i:02d}" for i in range(12)]
    made = ["s1", "s2", *chain]
    asyncio.run(keys.mint([("acme", s, None) for s in (*made, "s3")]))  # sealed summaries
    v = (1.0, 0.0, 0.0, 0.0)
    service.store = RowsNotPurgedYet(  # type: ignore[assignment]
        [
            make_row("acme", m1, v),
            make_row("acme", "s1", v, summary_of=(m1, m2), state="archived"),
            make_row("acme", "s2", v, summary_of=("s1", m3)),
            *(
                make_row("acme", g, v, summary_of=(f, m3))
                for f, g in zip(made[1:-1], chain, strict=True)
            ),
            make_row("acme", "s3", v, summary_of=(m2, m3)),  # quotes nothing erased
        ]
    )
    erasure = asyncio.run(service.erase("acme", [m1], datetime(2026, 3, 1, 13, tzinfo=UTC)))
    assert (erasure.summaries, erasure.keys) == (tuple(made), 1 + len(made))
    purged = [v["memory_id"] for v in sent.values if v.get("decision") == "purge"]
    assert purged == [m1, *made]
    assert all(keys.ring.erased_memory("acme", m) for m in (m1, *made))
    assert not keys.ring.erased_memory("acme", "s3")
    assert erasure.token.offsets == {"memory-writes": {0: len(sent.values)}}  # the last purge


class WholeRowsRefused(RowsNotPurgedYet):
    """A store whose rows read by id whole (vectors and all) are refused."""

    def get(self, tenant_id: str, memory_ids: Sequence[str]) -> dict[str, MemoryRow]:
        raise AssertionError("rows an erasure compares read whole, vectors and all")

    def get_slim(self, tenant_id: str, memory_ids: Sequence[str]) -> dict[str, MemoryRow]:
        found = [self.rows[m] for m in memory_ids if m in self.rows]
        return {r.memory_id: dataclasses.replace(r, vector=(), metadata={}) for r in found}


def test_an_erasure_reads_the_rows_it_compares_without_their_vectors() -> None:
    """An erasure read its memories' and summaries' rows by id whole, then dropped their
    vectors and metadata: each crossed the wire (~17 KB a memory) for nothing.
    """
    keys, sent = LocalKeys(), Sent()
    service = RecallService(UserRows(), Hashing(4), sent, keys=keys)  # type: ignore[arg-type]
    m1, m2 = asyncio.run(service.write("acme", [{"content": w, "at": AT} for w in ("a b", "c d")]))[
        0
    ]
    asyncio.run(keys.mint([("acme", "s1", None)]))
    v = (1.0, 0.0, 0.0, 0.0)
    service.store = WholeRowsRefused(  # type: ignore[assignment]
        [make_row("acme", m1, v), make_row("acme", "s1", v, summary_of=(m1, m2))]
    )
    erasure = asyncio.run(service.erase("acme", [m1], datetime(2026, 3, 1, 13, tzinfo=UTC)))
    assert erasure.summaries == ("s1",)
    purged = [v["memory_id"] for v in sent.values if v.get("decision") == "purge"]
    assert purged == [m1, "s1"]


class SummariesUnanswered(RowsNotPurgedYet):
    """Milvus answering every query but the search for summaries, until told to."""

    answers = False

    def every_row(self, tenant_id: str, filters: Filters) -> list[MemoryRow]:
        if filters.summary_of_any and not self.answers:
            raise StorageError("search", "milvus did not answer", retriable=True)
        if filters.user_id is not None:  # the user's rows: its memory until purged
            return [r for r in self.rows.values() if r.user_id == filters.user_id]
        return super().every_row(tenant_id, filters)


def test_a_user_erasure_that_failed_on_the_summaries_is_repeated_whole() -> None:
    """The user's memories erased, the search for their summaries unanswered (503): repeating
    ``DELETE /v1/users/{id}`` found nothing of the user left and never looked for the summaries,
    which stayed served, quoting the erased words.
    """
    keys, sent = LocalKeys(), Sent()
    service = RecallService(UserRows(), Hashing(4), sent, keys=keys)  # type: ignore[arg-type]
    docs = [{"content": SECRET_WORDS, "at": AT, "user_id": "ann"}]
    ((m1,), _) = asyncio.run(service.write("acme", docs))
    asyncio.run(keys.mint([("acme", "s1", None)]))  # a summary of ann's and others' memories
    v = (1.0, 0.0, 0.0, 0.0)
    store = SummariesUnanswered(
        [make_row("acme", m1, v, user_id="ann"), make_row("acme", "s1", v, summary_of=(m1, "b2"))]
    )
    service.store = store  # type: ignore[assignment]
    api = create_api(
        service, TenantRegistry.of({"tenants": {"acme": {"api_keys": ["key-acme-0123456789"]}}})
    )

    async def erase_ann() -> httpx.Response:
        transport = httpx.ASGITransport(app=api)
        async with httpx.AsyncClient(transport=transport, base_url="http://m") as http:
            return await http.delete(
                "/v1/users/ann", headers={"Authorization": "Bearer key-acme-0123456789"}
            )

    failed = asyncio.run(erase_ann())
    assert failed.status_code == 503, failed.text
    assert keys.ring.erased_memory("acme", m1)  # the memory went, the summary not
    assert not keys.ring.erased_memory("acme", "s1")
    assert keys.ring.erased_of_user("acme", "ann") == {m1}  # its marker names ann, for now
    del store.rows[m1]  # purged by the worker since
    store.answers = True
    again = asyncio.run(erase_ann())
    assert again.status_code == 200, again.text
    assert again.json()["erased"] == 0  # nothing of ann's left to erase
    assert again.json()["summaries_erased"] == ["s1"]
    assert keys.ring.erased_memory("acme", "s1")
    # done: no marker names ann any more (a marker is never compacted away)
    assert keys.ring.erased_of_user("acme", "ann") == set()
    last = dict(keys.published)  # what compaction keeps
    assert not [v for v in last.values() if v is not None and b"ann" in v]
    assert keys.ring.erased_memory("acme", m1)


def test_erasing_a_memory_erases_the_memories_holding_its_words() -> None:
    """Erasing a merge survivor left the duplicates merged into it readable (their own keys
    live, their rows and documents there), and erasing the newest version of a ``PATCH`` that
    changed only tags reinstated the older one, with the same words, into recall.
    """
    keys, sent = LocalKeys(), Sent()
    service = RecallService(UserRows(), Hashing(4), sent, keys=keys)  # type: ignore[arg-type]
    every = ("a1", "a2", "a3", "p0", "p1", "q", "n1", "n2", "s1", "c1", "c2")
    asyncio.run(keys.mint([("acme", m, None) for m in every]))
    v = (1.0, 0.0, 0.0, 0.0)

    def row(memory_id: str, content: str = SECRET_WORDS, **kw: object) -> MemoryRow:
        return make_row("acme", memory_id, v, content=content, **kw)

    service.store = RowsNotPurgedYet(  # type: ignore[assignment]
        [
            row("a1", superseded_by="n1"),
            row("a2", merged_into="a1", state="deleted"),  # an exact duplicate
            row("a3", "Ann's PIN: 4711", merged_into="a1", state="deleted"),  # a near one
            row("p1", superseded_by="a1"),  # a1 is its PATCH (tags only): the same words
            row("p0", superseded_by="p1"),  # and p1 of p0
            row("q", "Ann had no PIN yet", superseded_by="a1"),  # other words: kept
            row("n1", superseded_by="n2"),  # a1's PATCH: the same words
            row("n2", "Ann changed her PIN"),  # other words: kept
            row("s1", "A summary", summary_of=("a1", "c1", "c2")),  # quotes a1: erased
            row("c1", "Other notes", merged_into="s1", state="archived"),  # its source: kept
            row("c2", "More notes", merged_into="s1", state="deleted"),  # deleted since: kept
        ]
    )
    erasure = asyncio.run(service.erase("acme", ["a1"], datetime(2026, 3, 1, 13, tzinfo=UTC)))
    assert erasure.copies == ("a2", "a3", "n1", "p1", "p0")
    assert erasure.summaries == ("s1",)
    assert erasure.keys == 7
    erased = {m for m in every if keys.ring.erased_memory("acme", m)}
    assert erased == {"a1", "a2", "a3", "n1", "p1", "s1", "p0"}
    purged = [v["memory_id"] for v in sent.values if v.get("decision") == "purge"]
    assert purged == ["a1", "a2", "a3", "n1", "p1", "p0", "s1"]  # the copies read first
    # each one's history says why it went (it said "deleted through the API", as a user's
    # delete of that memory would, for the summary and copies the user never named)
    why = {v["memory_id"]: v["reason"] for v in sent.values if v.get("decision") == "retire"}
    assert why == {
        "a1": "erased through the API",
        **dict.fromkeys(
            ("a2", "a3", "n1", "p1", "p0"), "erased: a copy of an erased memory's words"
        ),
        "s1": "erased: a summary of an erased memory",
    }
    assert {v["reason"] for v in sent.values if v.get("decision") == "purge"} <= set(why.values())


def test_an_erasure_finds_copies_whatever_the_order_of_its_ids_and_leaves_unknown_merges() -> None:
    """Two erased versions superseded by one memory with the words of the first: found or not
    by the order of the ids. A deleted row merged into a summary whose row is gone (purged)
    was taken for a duplicate and erased, where it may be a source the user deleted.
    """
    v = (1.0, 0.0, 0.0, 0.0)

    def erased(ids: list[str]) -> set[str]:
        keys, sent = LocalKeys(), Sent()
        service = RecallService(UserRows(), Hashing(4), sent, keys=keys)  # type: ignore[arg-type]
        every = ("A", "B", "C", "c9")
        asyncio.run(keys.mint([("acme", m, None) for m in every]))
        service.store = RowsNotPurgedYet(  # type: ignore[assignment]
            [
                make_row("acme", "A", v, content=SECRET_WORDS, superseded_by="C"),
                make_row("acme", "B", v, content="other words", superseded_by="C"),
                make_row("acme", "C", v, content=SECRET_WORDS),
                make_row("acme", "c9", v, merged_into="s9", state="deleted"),  # s9: no row
            ]
        )
        asyncio.run(service.erase("acme", ids, datetime(2026, 3, 1, 13, tzinfo=UTC)))
        return {m for m in every if keys.ring.erased_memory("acme", m)}

    assert erased(["A", "B"]) == erased(["B", "A"]) == {"A", "B", "C"}
    assert erased(["s9"]) == set()


# -- what a mutation review found no test pinned: erasure's order and its reads of the keys topic --

ERASED_AT = datetime(2026, 3, 1, 13, tzinfo=UTC)
V4 = (1.0, 0.0, 0.0, 0.0)


def service_on(keys: KeyLog) -> tuple[RecallService, Sent]:
    sent = Sent()
    return RecallService(UserRows(), Hashing(4), sent, keys=keys), sent  # type: ignore[arg-type]


def test_erasing_a_source_erases_the_copies_of_its_summaries_too() -> None:
    """A summary's copies (a duplicate merged into it, a tags-only PATCH version) hold the
    source's words as much as the summary does: erasing the source erases them as well.
    """
    keys = LocalKeys()
    service, _ = service_on(keys)
    asyncio.run(keys.mint([("acme", m, None) for m in ("m1", "s1", "d1", "s1v2")]))
    summary = "Summary. " + SECRET_WORDS
    service.store = RowsNotPurgedYet(  # type: ignore[assignment]
        [
            make_row("acme", "m1", V4, content=SECRET_WORDS),
            make_row(
                "acme", "s1", V4, content=summary, summary_of=("m1", "c1"), superseded_by="s1v2"
            ),
            make_row("acme", "s1v2", V4, content=summary),
            make_row("acme", "d1", V4, content=summary, merged_into="s1", state="deleted"),
        ]
    )
    erasure = asyncio.run(service.erase("acme", ["m1"], ERASED_AT))
    assert erasure.summaries == ("s1",)
    assert set(erasure.copies) == {"d1", "s1v2"}
    assert keys.ring.erased_memory("acme", "d1")
    assert keys.ring.erased_memory("acme", "s1v2")


def test_an_erasure_the_keys_topic_refuses_deletes_nothing() -> None:
    """Keys first, then the delete and purge: a keys topic that refuses the tombstones leaves the
    memory as it was (the call can be repeated), never deleted with its words readable in the log.
    """

    class Refusing(LocalKeys):
        refuse = False

        async def publish(
            self, records: Sequence[tuple[bytes, bytes | None]], *, applied: bool = True
        ) -> list[int]:
            if self.refuse:
                raise KeyLogError("NotEnoughReplicas")
            return await super().publish(records, applied=applied)

    keys = Refusing()
    service, sent = service_on(keys)
    write = {"content": SECRET_WORDS, "at": "2026-03-01T12:00:00+00:00"}
    (m1,), _ = asyncio.run(service.write("acme", [write]))
    service.store = RowsNotPurgedYet([make_row("acme", m1, V4, content=SECRET_WORDS)])  # type: ignore[assignment]
    keys.refuse = True
    with pytest.raises(KeyLogError):
        asyncio.run(service.erase("acme", [m1], ERASED_AT))
    assert [v["decision"] for v in sent.values if "decision" in v] == []


def test_an_erasure_reads_the_keys_minted_elsewhere_first() -> None:
    """A key another ranker minted and this one has not read yet is erased too: the erasure
    reads the topic to its end before it tombstones.
    """
    elsewhere = new_key("acme", "m1", "ann")

    class Behind(LocalKeys):
        async def catch_up(self, timeout_s: float | None = None, *, refresh: bool = False) -> None:
            self.apply(*key_record(elsewhere))

    keys = Behind()
    assert asyncio.run(keys.erase("acme", ["m1"])) == {"m1": 1}
    assert (elsewhere.record_key, None) in keys.published
    assert keys.ring.is_erased("acme", "m1", elsewhere.key_id)


def test_a_sealed_write_under_a_key_not_read_yet_reads_the_keys_topic_once() -> None:
    """A worker meeting a write sealed under a key it has not read reads the topic through
    (else the write were dead-lettered for want of it); a known key costs no read.
    """
    keys = KeyLog("127.0.0.1:1", "t.memory-keys")
    reads: list[int] = []

    async def read_through(*_: object, **__: object) -> None:
        reads.append(1)

    keys.read_through = read_through  # type: ignore[method-assign]
    key = new_key("acme", "m1")
    value = orjson.dumps(seal_write(clear_write(), key))
    asyncio.run(keys.know([value]))
    assert reads == [1]
    keys.ring.add(key)
    asyncio.run(keys.know([value]))
    assert reads == [1]


def test_an_erased_memory_counts_as_keyed_no_more() -> None:
    """A tenant's erasure erases until no memory has a key; an erased one left counted (its
    keys' dict empty) made every such erasure answer 503 after its rounds.
    """
    keys = LocalKeys()
    service, _ = service_on(keys)
    asyncio.run(keys.mint([("acme", "m1", None)]))
    asyncio.run(keys.erase("acme", ["m1"]))
    assert keys.ring.memories("acme") == set()
    assert asyncio.run(service.keyed_memories("acme")) == []


def test_a_repeated_user_erasure_reads_the_markers_of_other_rankers() -> None:
    """A user's erasure that failed on another ranker is found by the repeat on this one: it
    reads the keys topic before it looks for the user's erased memories.
    """

    class Behind(LocalKeys):
        async def catch_up(self, timeout_s: float | None = None, *, refresh: bool = False) -> None:
            self.apply(*erasure_record("acme", "m1", ["k1"], ["ann"]))

    service, _ = service_on(Behind())
    assert asyncio.run(service.erased_user_memories("acme", "ann")) == ["m1"]


def test_a_memory_written_again_after_a_failed_user_erasure_is_not_that_users() -> None:
    """Its new version (another user's, or the same user's new words) has a live key: the
    repeat of the failed erasure must not take it for erased and erase its summaries.
    """
    ring = KeyRing()
    ring.apply(*erasure_record("acme", "m1", ["k1"], ["ann"]))
    ring.add(new_key("acme", "m1", "bob"))
    assert ring.erased_of_user("acme", "ann") == set()


def test_an_erased_memory_stays_hidden_while_the_keys_topic_cannot_be_read() -> None:
    """Its row awaits the worker's purge; while the keys topic does not answer, the markers read
    so far still hide it from reads (it was shown again, words and all).
    """
    keys = LocalKeys()
    service, _ = service_on(keys)
    writes = [{"content": c, "at": "2026-03-01T12:00:00+00:00"} for c in (SECRET_WORDS, "kept")]
    (m1, m2), _ = asyncio.run(service.write("acme", writes))
    rows = [make_row("acme", m1, V4, content=SECRET_WORDS), make_row("acme", m2, V4)]
    service.store = RowsNotPurgedYet(rows)  # type: ignore[assignment]
    asyncio.run(service.erase("acme", [m1], ERASED_AT))

    async def down(timeout_s: float | None = None, *, refresh: bool = False) -> None:
        raise KeyLogError("the keys topic does not answer")

    keys.catch_up = down  # type: ignore[method-assign]
    assert asyncio.run(service.get("acme", m1)) is None
    assert sorted(asyncio.run(service.get_many("acme", [m1, m2]))) == [m2]


class GatedKeys(LocalKeys):
    """Keys whose next mint waits for ``gate`` (a PATCH between its checks and its produce)."""

    gate: asyncio.Event | None = None
    minting = asyncio.Event()

    async def mint(self, memories: Sequence[tuple[str, str, str | None]]) -> list[DataKey]:
        if self.gate is not None:
            gate, self.gate = self.gate, None
            self.minting.set()
            await gate.wait()
        return await super().mint(memories)


def test_a_version_made_while_its_memory_was_erased_is_erased_too() -> None:
    """A PATCH in flight as ``DELETE ?erase=true`` was answered wrote a new version, under a new
    key, holding the erased words: the erasure had looked for copies before it existed, and
    recall, GET and list served it for good."""
    words = "Ann's HIV test came back positive"
    auth = {"Authorization": "Bearer key-acme-0123456789"}

    async def main() -> tuple[int, int, str, GatedKeys]:
        keys, sent = GatedKeys(), Sent()
        service = RecallService(UserRows(), Hashing(4), sent, keys=keys)  # type: ignore[arg-type]
        doc = {"content": words, "at": "2026-03-01T12:00:00+00:00", "user_id": "ann"}
        (m1,), _ = await service.write("acme", [doc])
        row = make_row("acme", m1, (1.0, 0, 0, 0), content=words, user_id="ann")
        service.store = RowsNotPurgedYet([row])  # type: ignore[assignment]
        registry = TenantRegistry.of({"tenants": {"acme": {"api_keys": ["key-acme-0123456789"]}}})
        api = create_api(service, registry)
        gate = asyncio.Event()
        keys.gate, keys.minting = gate, asyncio.Event()
        transport = httpx.ASGITransport(app=api)
        async with httpx.AsyncClient(transport=transport, base_url="http://m") as http:
            patch = asyncio.create_task(
                http.patch(f"/v1/memories/{m1}", headers=auth, json={"tags": ["health"]})
            )
            await keys.minting.wait()
            erased = await http.delete(f"/v1/memories/{m1}?erase=true", headers=auth)
            gate.set()
            updated = await patch
        new_ids = [str(v["memory_id"]) for v in sent.values if v["memory_id"] != m1]
        return erased.status_code, updated.status_code, new_ids[0], keys

    erased, updated, new_id, keys = asyncio.run(main())
    assert (erased, updated) == (200, 404)
    assert keys.ring.erased_memory("acme", new_id)  # its write opens nowhere
    assert keys.ring.of_memory("acme", new_id) == []


class IdsOnly(UserRows):
    """A store whose rows of a user are read by id alone: reading them whole is refused."""

    def every_row(self, tenant_id: str, filters: Filters) -> list[MemoryRow]:
        raise AssertionError("a user's rows read whole, vectors and all")

    def every_id(self, tenant_id: str, filters: Filters) -> list[str]:
        return ["s2", "s1"] if filters.user_id == "ann" else []


def test_a_users_memories_are_listed_by_id_without_reading_their_rows() -> None:
    """``DELETE /v1/users/{id}`` read every row of the user, vectors included (~17 KB each):
    1.7 GB held for a user of 100,000 memories, from a request of 100 bytes."""
    keys = LocalKeys()
    service = RecallService(IdsOnly(), Hashing(4), Sent(), keys=keys)  # type: ignore[arg-type]
    asyncio.run(keys.mint([("acme", "m1", "ann"), ("acme", "m9", "bob")]))
    assert asyncio.run(service.user_memories("acme", "ann")) == ["m1", "s1", "s2"]
