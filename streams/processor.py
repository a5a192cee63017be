"""What the agents do with a batch, independent of Faust: decode, reduce, assign, describe effects.

The processor works on two mutable mappings (the memory table and the tenant-counter table, bytes to
bytes); the Faust agents pass their tables, unit tests pass dicts. Every assignment writes the whole
new value. Nothing here reads a clock: times come from the events.
"""

from __future__ import annotations

import base64
import dataclasses
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

import orjson

from memcore import (
    GONE,
    Absorb,
    Access,
    Effect,
    EffectKind,
    Event,
    ImportanceDecision,
    MemoryState,
    Policy,
    Position,
    Purge,
    Supersede,
    Write,
    apply,
    bypass,
    content_hash,
    merged_away,
    reassertion,
    reinstatements,
    relink,
    revival,
    succession,
    summary_gone,
    summary_outdated,
    unkept_summary,
    unknown_successor,
    version_left,
    versioning,
    write_refused,
)
from storage import Document, MemoryRow, codec
from storage.records import (
    MAX_METADATA_BYTES,
    AccessRecord,
    DecisionEvent,
    DecisionRecord,
    Limits,
    RecordError,
    WriteRecord,
    check_time,
    decision_value,
    decode_access,
    decode_memory_event,
)
from storage.rows import from_us, serving_changed, to_us
from storage.sealing import DataKey, Erased, SealError

R = TypeVar("R", WriteRecord | DecisionRecord, AccessRecord)

_STATED = frozenset({EffectKind.CREATED, EffectKind.UPDATED, EffectKind.REASSERTED})
"""Effects after which a write's content is checked for supersession (SPEC section 6)."""
log = logging.getLogger(__name__)

MAX_DEAD_LETTER_PAYLOAD = 256 * 1024
"""Bytes of the original value copied into a dead letter, at most (base64 makes them 4/3 as many):
a dead letter must stay under the broker's message limit (1 MiB by default) whatever it carries."""
MAX_DEAD_LETTER_KEY = 1024
"""Bytes of the original key copied into a dead letter (and used as its key), at most."""
MAX_REASON_CHARS = 1000
MAX_PARKED_BYTES = 512 * 1024
"""The most the accesses parked under one memory take in the pending table (thousands of
distinct ones): past it an access goes to dead-letter (naming ``memory_id``), since a changelog
record over the broker's limit (1 MiB by default) failed the batch on every try and stopped the
worker. Only accesses that wait long for a write reach it; a replay, whose timing differs, may
park one that the live run dead-lettered."""


@dataclass(frozen=True)
class Inbound:
    """One consumed Kafka message."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    received_at: datetime | None = None  # when the log received it (None: unknown)

    @property
    def position(self) -> Position:
        return Position(f"{self.topic}/{self.partition}", self.offset)


@dataclass(frozen=True)
class Outbound:
    """A message to produce: topic role (``audit``, ``dead-letter``, ``memory-writes``...), key, value."""

    role: str
    key: bytes | None
    value: bytes


def dead_letter(message: Inbound, error: RecordError) -> Outbound:
    """The dead-letter record of a rejected message: reason, field, and the original bytes."""
    return rejected(message, error.field, str(error))


def internal_error(message: Inbound, exc: Exception) -> Outbound:
    """The dead-letter record of a message whose application raised ``exc`` (a bug, not input)."""
    return rejected(message, "$", f"internal error: {type(exc).__name__}: {exc}")


def unchecked(message: Inbound, exc: Exception) -> Outbound:
    """The dead-letter record of a write that was applied but whose supersession check raised
    ``exc`` (a bug, not input): the decisions it would have derived are not made.
    """
    why = f"{type(exc).__name__}: {exc}"
    return rejected(
        message, "$", f"internal error in the supersession check (write applied): {why}"
    )


def rejected(message: Inbound, field_name: str, reason: str) -> Outbound:
    """A dead letter naming the field and the reason, with the original key and value; each is cut
    to its limit (``*_truncated`` true, ``*_bytes`` the original size) so that the dead letter
    always fits in a Kafka message.
    """
    key = message.key[:MAX_DEAD_LETTER_KEY] if message.key is not None else None
    payload = message.value[:MAX_DEAD_LETTER_PAYLOAD]
    if len(reason) > MAX_REASON_CHARS:
        reason = reason[: MAX_REASON_CHARS - 3] + "..."
    value = {
        "v": 1,
        "reason": reason,
        "field": field_name,
        "topic": message.topic,
        "partition": message.partition,
        "offset": message.offset,
        "key": base64.b64encode(key).decode() if key is not None else None,
        "key_bytes": len(message.key) if message.key is not None else 0,
        "key_truncated": key != message.key,
        "payload": base64.b64encode(payload).decode(),
        "payload_bytes": len(message.value),
        "payload_truncated": len(payload) < len(message.value),
    }
    return Outbound("dead-letter", key, orjson.dumps(value))


@contextmanager
def contained(message: Inbound, batch: Batch) -> Iterator[None]:
    """Apply one record in isolation: an unexpected exception is logged with its traceback, what
    the record had added to the batch's output is dropped, and the record goes to dead-letter
    (``internal error: <type>: <message>``); the rest of the batch goes on.
    """
    mark = len(batch.out)
    try:
        yield
    except Exception as exc:
        log.exception(
            "internal error applying %s/%d@%d; sent to dead-letter",
            message.topic,
            message.partition,
            message.offset,
        )
        del batch.out[mark:]
        batch.out.append(internal_error(message, exc))


def _vector_of(
    hashed: str, vector: tuple[float, ...] | None, doc: Document | None
) -> tuple[float, ...] | None:
    """``vector`` (the record's or a computed one), else the stored document's when it holds the
    words hashed ``hashed``; None otherwise.
    """
    if vector is None and doc is not None and content_hash(doc.content) == hashed:
        return doc.vector
    return vector


def _with_metadata(
    message: Inbound, record: WriteRecord, doc: Document, key_id: str | None, batch: Batch
) -> Document | None:
    """``doc`` with ``record``'s metadata merged over its own; None after sending the write to
    dead-letter naming ``metadata`` when the merge is over ``MAX_METADATA_BYTES`` as JSON (a
    stored memory's metadata is one a write may carry).
    """
    merged = {**doc.metadata, **record.metadata}
    size = len(orjson.dumps(merged))
    if size > MAX_METADATA_BYTES:
        why = f"merged with the stored metadata over {MAX_METADATA_BYTES} bytes as JSON"
        batch.out.append(
            dead_letter(message, RecordError("metadata", f"<{size} bytes merged>", why))
        )
        return None
    return Document(doc.content, doc.vector, merged, doc.context, key_id)


def decision_record(tenant_id: str, memory_id: str, event: DecisionEvent) -> Outbound:
    """A decision for one memory on ``memory-writes``, keyed by it (on its partition)."""
    value = decision_value(tenant_id, memory_id, event)
    return Outbound("memory-writes", f"{tenant_id}/{memory_id}".encode(), orjson.dumps(value))


@dataclass(frozen=True)
class Statement:
    """A write that (re)stated a memory's content, for the supersession check.

    Attributes:
        message: the write (its dead letter names it when the check fails).
        at: its event time: when the memory stated its fact (a rewrite that reasserts a
            superseded memory states it again, later than its creation).
        embedded: the service embedded its vector (none was given), so a query the service
            embeds is in its vector's space (:func:`memcore.fact_stem`): false for a vector
            given or kept from an earlier write; a redelivered write without one counts as
            embedded.
    """

    message: Inbound
    at: datetime
    embedded: bool = False


@dataclass
class Batch:
    """The result of one batch: messages to produce and memory keys whose rows must be synced
    (a first delivery of an access that changes no served field,
    :func:`storage.rows.serving_changed`, syncs none).
    """

    out: list[Outbound] = field(default_factory=list)
    touched: dict[str, None] = field(default_factory=dict)  # ordered set of table keys
    stated: dict[str, Statement] = field(default_factory=dict)  # key -> its latest statement
    parked: set[int] = field(default_factory=set)  # partitions where accesses were parked
    # memory key -> (partition, offsets) of the parked accesses this batch applied or
    # dead-lettered: dropped from the pending table once the batch's records are acknowledged
    released: dict[bytes, tuple[int, frozenset[int]]] = field(default_factory=dict)
    erased: int = 0  # sealed writes skipped because their memory was erased since
    # (tenant, summary id) of summaries refused for quoting an erased memory: their keys to erase
    unwritten: list[tuple[str, str]] = field(default_factory=list)
    # (tenant, memory id) -> key ids of merged duplicates purged: their documents' keys to erase
    dropped_keys: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    # summaries this batch made (anew) or met again by offset: rechecked after the Milvus sync
    made: list[WriteRecord] = field(default_factory=list)
    # produced once ``out`` is acknowledged: a consolidation's summaries, after the archiving of
    # their sources (a summary refused sends them a restore, which must come after it)
    deferred: list[Outbound] = field(default_factory=list)
    superseding: set[tuple[str, str]] = field(default_factory=set)  # (older key, newer id) sent
    sent: int = 0  # how many of ``out`` were handed to the producer (``StreamWorker.emit``)
    emitting: bool = False  # ``out`` holds the audit records earlier tries owed, first
    taken: int = 0  # how many of ``out``, first, its emit took from those owed
    # its states are written by a flush (an access batch): ``flushed`` holds the keys written
    buffered: bool = False
    flushed: set[bytes] = field(default_factory=set)
    owes: bool = True  # its own audit records are owed when it fails (not a consolidation's)

    def written(self, key: bytes | None) -> bool:
        """The state of memory ``key`` this batch changed is in its table."""
        return not self.buffered or key in self.flushed

    def supersede(self, tenant_id: str, older: str, event: Supersede) -> None:
        """Send a ``supersede`` decision for ``older``, once per batch for the same pair."""
        pair = (f"{tenant_id}/{older}", event.by)
        if pair not in self.superseding:
            self.superseding.add(pair)
            self.out.append(decision_record(tenant_id, older, event))

    def touch(self, key: str) -> None:
        self.touched[key] = None


class WriteBack(MutableMapping[bytes, bytes]):
    """A table seen through a batch's buffer: reads see the batch's own writes, and each key is
    written to the table once, by :meth:`flush`, however many events changed it.
    """

    def __init__(self, table: MutableMapping[bytes, bytes]) -> None:
        self.table = table
        self.dirty: dict[bytes, bytes] = {}

    def __getitem__(self, key: bytes) -> bytes:
        if key in self.dirty:
            return self.dirty[key]
        return self.table[key]

    def get(self, key: bytes, default: Any = None) -> Any:  # noqa: ANN401 - Mapping.get's own
        found = self.dirty.get(key)
        return found if found is not None else self.table.get(key, default)

    def __setitem__(self, key: bytes, value: bytes) -> None:
        self.dirty[key] = value

    def __delitem__(self, key: bytes) -> None:  # not used by the access path
        raise NotImplementedError

    def __iter__(self) -> Iterator[bytes]:
        """The batch's keys, then the table's others, lazily (``has_pending`` reads one)."""
        yield from self.dirty
        yield from (key for key in self.table if key not in self.dirty)

    def __len__(self) -> int:
        return len(set(self.table) | set(self.dirty))

    def flush(self, context: Callable[[bytes], AbstractContextManager[object]]) -> int:
        """Write every buffered key to the table inside ``context(key)`` (the Faust event whose
        partition the key's changelog record belongs to); returns how many.
        """
        for key, value in self.dirty.items():
            with context(key):
                self.table[key] = value
        written = len(self.dirty)
        self.dirty.clear()
        return written


@dataclass
class Recent:
    """What a processor read or wrote while remembering (:meth:`Processor.remembering`): the
    current state and opened document of each memory key it looked at (None: there is none).
    ``parked`` is False once the pending table was found empty and nothing was parked since.
    """

    states: dict[str, MemoryState | None] = field(default_factory=dict)
    documents: dict[str, Document | None] = field(default_factory=dict)
    parked: bool | None = None  # None: not looked yet


class Processor:
    """Applies decoded records to the tables through :func:`memcore.apply`."""

    def __init__(
        self,
        memories: MutableMapping[bytes, bytes],
        documents: MutableMapping[bytes, bytes],
        counters: MutableMapping[bytes, bytes],
        pending: MutableMapping[bytes, bytes],
        limits: Limits,
    ) -> None:
        self.memories = memories
        self.documents = documents
        self.counters = counters
        self.pending = pending  # memory key -> accesses that arrived before the memory's write
        # memory key -> offsets of parked accesses a batch of either agent released and has not
        # dropped yet (:meth:`releasing`): the other agent's batch does not release them again
        self.in_flight: dict[bytes, set[int]] = {}
        self.limits = limits
        self.recent: Recent | None = None  # see remembering()

    @contextmanager
    def remembering(self) -> Iterator[None]:
        """Within, the states and opened documents this processor reads or writes are kept in
        memory (:class:`Recent`), so that a batch reads and unseals each memory once however many
        steps look at it (write, Milvus rows, supersession). Every change to the memory and
        document tables must go through this processor meanwhile (all of the agents' do; Faust
        restores a partition's tables between batches); what is kept is forgotten when the
        context ends.
        """
        self.recent = Recent()
        try:
            yield
        finally:
            self.recent = None

    @contextmanager
    def buffered(self) -> Iterator[tuple[WriteBack, WriteBack, WriteBack]]:
        """Buffer the memory, counter and pending tables for one batch (see :class:`WriteBack`):
        accesses parked under one memory rewrote its whole list once each (thousands in one
        request made gigabytes of changelog). The caller flushes all three before the batch is
        acknowledged, and before it releases parked accesses (which reads the tables).
        """
        memories, counters, pending = self.memories, self.counters, self.pending
        self.memories, self.counters = WriteBack(memories), WriteBack(counters)
        self.pending = WriteBack(pending)
        try:
            yield self.memories, self.counters, self.pending
        finally:
            self.memories, self.counters, self.pending = memories, counters, pending

    # -- reading -------------------------------------------------------------------------------

    def purged(self, key: bytes | None) -> bool:
        """True when the tables hold the memory keyed ``key`` as purged."""
        if key is None:
            return False
        state = self.state(key.decode("utf-8", "replace"))
        return state is not None and state.purged

    def load(self, key: str) -> tuple[MemoryState, Document] | None:
        """State and document; None when either is missing (a crash between the two changelog
        writes can leave a state without its document: the redelivered write restores it) or the
        document's key was erased.
        """
        state = self.state(key)
        if state is None:
            return None
        doc = self.document(key)
        return (state, doc) if doc is not None else None

    def document(self, key: str) -> Document | None:
        """The stored document of ``key`` opened; None when there is none or it cannot be opened
        (its key erased, or unknown here).
        """
        recent = self.recent
        if recent is not None and key in recent.documents:
            doc = recent.documents[key]
            return doc if doc is None or self.openable(key, doc.key_id) else None
        raw = self.documents.get(key.encode())
        doc = self._open(key, raw) if raw is not None else None
        if recent is not None and (doc is not None or raw is None):  # a key may come later
            recent.documents[key] = doc
        return doc

    def _open(self, key: str, raw: bytes) -> Document | None:
        tenant_id, _, memory_id = key.partition("/")
        try:
            return codec.decode_document(raw, self.limits.keys, (tenant_id, memory_id))
        except (Erased, SealError) as exc:
            log.debug("document of %s not opened: %s", key, exc)
            return None

    def openable(self, key: str, key_id: str | None) -> bool:
        """False when the document of ``key`` is sealed under ``key_id`` and that key is gone
        (erased since it was opened).
        """
        tenant_id, _, memory_id = key.partition("/")
        try:
            self.data_key(tenant_id, memory_id, key_id)
        except Erased:
            return False
        return True

    def data_key(self, tenant_id: str, memory_id: str, key_id: str | None) -> DataKey | None:
        """The data key to seal a document under; raises Erased when it is gone since the write
        was opened (None ``key_id``: the document stays in the clear).
        """
        if key_id is None:
            return None
        found = (
            self.limits.keys.data_key(tenant_id, memory_id, key_id) if self.limits.keys else None
        )
        if found is None:
            raise Erased(tenant_id, memory_id, key_id)
        return found

    def state(self, key: str) -> MemoryState | None:
        """The state alone (an access needs no document)."""
        recent = self.recent
        if recent is not None and key in recent.states:
            return recent.states[key]
        raw = self.memories.get(key.encode())
        state = codec.decode(raw) if raw is not None else None
        if recent is not None:
            recent.states[key] = state
        return state

    def put_state(self, key: str, state: MemoryState) -> None:
        """Assign ``state`` to the memory table (its whole value: one changelog record); what is
        kept is the state as the table gives it back (times in UTC).
        """
        raw = codec.encode(state)
        self.memories[key.encode()] = raw
        if self.recent is not None:
            self.recent.states[key] = codec.decode(raw)

    def put_document(self, key: str, doc: Document, sealer: DataKey | None) -> None:
        """Assign ``doc`` to the document table, sealed under ``sealer`` (None: in the clear);
        what is kept is the document as the table gives it back (its vector in float32).
        """
        self.documents[key.encode()] = codec.encode_document(doc, sealer)
        if self.recent is not None:
            stored = codec.decode_vector(codec.encode_vector(doc.vector))
            self.recent.documents[key] = dataclasses.replace(doc, vector=stored)

    def drop_document(self, key: str) -> None:
        """Delete the document of ``key`` (a tombstone on the changelog)."""
        del self.documents[key.encode()]
        if self.recent is not None:
            self.recent.documents[key] = None

    def rows(self, keys: Iterable[str]) -> tuple[list[MemoryRow], list[tuple[str, str]]]:
        """Rows to upsert and (tenant, memory id) pairs to delete, for the current table values."""
        upserts: list[MemoryRow] = []
        deletes: list[tuple[str, str]] = []
        for key in keys:
            state = self.state(key)
            if state is not None and state.purged:
                deletes.append((state.tenant_id, state.memory_id))
                continue
            doc = self.document(key) if state is not None else None
            if state is not None and doc is not None:
                upserts.append(MemoryRow.of(state, doc))
        return upserts, deletes

    # -- writes --------------------------------------------------------------------------------

    def decode_writes(
        self, messages: Sequence[Inbound], batch: Batch
    ) -> list[tuple[Inbound, WriteRecord | DecisionRecord]]:
        """Valid, correctly keyed writes and decisions; the rest become dead letters."""
        accepted = []
        for message in messages:
            record = self._accept(message, decode_memory_event, batch)
            if record is not None:
                accepted.append((message, record))
        return accepted

    def _accept(
        self,
        message: Inbound,
        decode: Callable[[bytes, Limits], R],
        batch: Batch,
    ) -> R | None:
        """The decoded record, or None after sending the message to dead-letter: invalid, or
        keyed other than ``tenant_id/memory_id``. A memory's events must share a partition, and
        forwarding a copy under the right key applied the event twice whenever the original
        was read again (a redelivery after a crash, a replay into a new app id).
        """
        try:
            record = decode(message.value, self.limits)
            if isinstance(record, DecisionRecord):
                self.check_time(message, record.event.at)
                if isinstance(record.event, Absorb) and record.event.last_access is not None:
                    # a future last access would keep the survivor from ever decaying
                    self.check_time(message, record.event.last_access, "last_access")
            else:
                self.check_time(message, record.at)
        except RecordError as error:
            batch.out.append(dead_letter(message, error))
            return None
        except Erased:
            batch.erased += 1  # erased since it was written: nothing of it is to be applied
            return None
        except Exception as exc:  # a decoder's bug, not input: this record's alone, not the batch's
            where = (message.topic, message.partition, message.offset)
            log.exception("internal error decoding %s/%d@%d; sent to dead-letter", *where)
            batch.out.append(internal_error(message, exc))
            return None
        if message.key != record.key.encode():
            given = None if message.key is None else message.key.decode("utf-8", "replace")
            why = f"expected {record.key!r}: a memory's events are keyed tenant_id/memory_id"
            batch.out.append(dead_letter(message, RecordError("key", given, why)))
            return None
        return record

    def check_time(self, message: Inbound, at: datetime, field_name: str = "at") -> None:
        """Raise RecordError unless ``at`` lies in the window the model accepts: from 1970 to the
        time the message was received plus the allowed skew (a future-dated event would archive,
        or never decay, what it touches).
        """
        check_time(field_name, at, message.received_at, self.limits)

    def needs_embedding(self, record: WriteRecord) -> bool:
        """True when no vector was given and none is stored for this exact content (the state
        says so, and the document too: a crash can keep a rewrite's state and lose its document),
        but for an update's write whose version left recall (:meth:`write` ignores it).
        """
        if record.embedding is not None:
            return False
        state = self.state(record.key)
        # an update sent again after its version left recall is ignored; a write of another user
        # is embedded all the same: a deletion earlier in its batch may free the id for it
        if version_left(state, record.supersedes):
            return False
        hashed = content_hash(record.content)
        if state is None or state.content_hash != hashed:
            return True
        doc = self.document(record.key)
        return doc is None or content_hash(doc.content) != hashed

    def to_embed(self, records: Sequence[WriteRecord | DecisionRecord]) -> list[WriteRecord]:
        """The writes of one batch (``records``: its writes and decisions, in order) whose vector
        must be computed: those :meth:`needs_embedding` names, those whose content differs from an
        earlier write of the same memory in the batch (which replaces the stored document before
        they apply), and those after a purge of their memory in the batch (which drops the stored
        document before they apply: a delete with purge, then the same words written again).
        """
        last: dict[str, str] = {}  # memory key -> content hash of its batch's latest write
        purged: set[str] = set()  # memory keys a purge of this batch reaches before their writes
        todo = []
        for record in records:
            if isinstance(record, DecisionRecord):
                if isinstance(record.event, Purge):
                    purged.add(record.key)
                continue
            hashed = content_hash(record.content)
            earlier = last.get(record.key, hashed)
            if record.embedding is None and (
                earlier != hashed or record.key in purged or self.needs_embedding(record)
            ):
                todo.append(record)
            last[record.key] = hashed
        return todo

    def write(
        self,
        message: Inbound,
        record: WriteRecord,
        vector: tuple[float, ...] | None,
        importance: ImportanceDecision,
        batch: Batch,
    ) -> None:
        """Apply one write. ``vector`` is the record's or a computed embedding; None keeps the
        stored one where it is of the same content, else the write goes to dead-letter naming
        ``embedding``. A write whose metadata, merged with the stored metadata, would be over
        ``MAX_METADATA_BYTES`` as JSON goes to dead-letter naming ``metadata``.
        """
        key = record.key.encode()
        state = self.state(record.key)
        anew = state is None or state.state in GONE  # a write makes a gone memory anew
        if anew and self._refused(record, batch):
            return
        doc = self.document(record.key)
        event = Write(
            tenant_id=record.tenant_id,
            memory_id=record.memory_id,
            content_hash=content_hash(record.content),
            at=record.at,
            importance=importance,
            memory_type=record.memory_type,
            session_id=record.session_id,
            agent_id=record.agent_id,
            user_id=record.user_id,
            tags=record.tags,
            relations=record.relations,
            summary_of=record.summary_of,
            supersedes=record.supersedes,
            position=message.position,
        )
        policy = self.policy(record.tenant_id)
        new, effects = apply(state, event, policy)
        assert new is not None  # a write always leaves a state
        refused = write_refused(state, event)
        if refused is not None:
            self._ignored(message, record, refused, new, effects, batch)
            return
        skipped = effects[0].kind is EffectKind.SKIPPED
        # a document of other words than the state's: a crash kept a rewrite's state record and
        # lost its document's; the redelivered rewrite writes it again
        stale = doc is not None and content_hash(doc.content) != new.content_hash
        if skipped and ((doc is not None and not stale) or new.purged):
            # a purged memory has no document by design: none is restored
            self._redelivered(message, record, new, effects, batch)
            return
        new_doc = None
        key_id = record.key_id or (doc.key_id if doc is not None else None)
        if doc is None or stale or effects[0].kind in (EffectKind.CREATED, EffectKind.UPDATED):
            use = _vector_of(event.content_hash, vector, doc)
            if use is None:  # never the vector of other content: it would find the old words
                missing = RecordError("embedding", None, "no vector given or computed")
                batch.out.append(dead_letter(message, missing))
                return
            new_doc = Document(record.content, use, record.metadata, record.context, key_id)
        elif record.metadata:
            new_doc = _with_metadata(message, record, doc, key_id, batch)
            if new_doc is None:
                return
        if new_doc is not None:
            try:
                sealer = self.data_key(record.tenant_id, record.memory_id, key_id)
            except Erased:
                batch.erased += 1  # erased while this batch was embedded: keep nothing of it
                self.release(key, batch)
                return
            self.put_document(record.key, new_doc, sealer)
        if skipped:  # applied before, its document lost to a crash and written again above
            self._redelivered(message, record, new, effects, batch)
            return
        self.put_state(record.key, new)
        if any(e.kind in _STATED for e in effects):
            # embedded in this batch, by us, and kept (a reassertion keeps its stored vector)
            embedded = record.embedding is None and new_doc is not None and new_doc.vector is vector
            batch.stated[record.key] = Statement(message, record.at, embedded)
        self._after(message, record.at, new, effects, batch)
        self._reasserted(record, new, batch)
        self._versioned(record, new, batch)
        if anew and record.summary_of and new.state not in GONE:
            batch.made.append(record)
        self.release(key, batch)

    def _ignored(
        self,
        message: Inbound,
        record: WriteRecord,
        why: str,
        state: MemoryState,
        effects: Sequence[Effect],
        batch: Batch,
    ) -> None:
        """Keep a write the reducer ignored (:func:`memcore.write_refused`) as applied (its
        offset: a redelivery is skipped) and audited; a summary not made tells its sources,
        which consolidation archived into it (:meth:`unkept`).
        """
        if record.summary_of:
            self.unkept(record, why, batch)
        self.put_state(record.key, state)
        self._after(message, record.at, state, effects, batch, sync=False)
        self.release(record.key.encode(), batch)

    def _refused(self, record: WriteRecord, batch: Batch) -> bool:
        """True when ``record`` would make a summary quoting an erased memory: not applied, its
        keys to erase, its sources told (:meth:`quotes_erased`, :meth:`unkept`).
        """
        if not self.quotes_erased(record):
            return False
        batch.erased += 1
        batch.unwritten.append((record.tenant_id, record.memory_id))
        self.unkept(record, "it quoted a memory erased since it was planned", batch)
        self.release(record.key.encode(), batch)
        return True

    def unkept(self, record: WriteRecord, why: str, batch: Batch) -> None:
        """Send the sources of the summary ``record`` what :func:`memcore.unkept_summary`
        decides (those not erased themselves): consolidation archived them into it.
        """
        kept = [s for s in record.summary_of if not self._erased_source(record, s)]
        why = f"summary {record.memory_id} not kept: {why}"
        for notice in unkept_summary(record.memory_id, kept, record.at, why):
            batch.out.append(decision_record(record.tenant_id, notice.target, notice.event))

    def _drop_key(self, record: DecisionRecord, batch: Batch) -> None:
        """Queue the erasure of the key sealing ``record``'s memory's document (a merged
        duplicate's purge, :class:`memcore.Purge`): the words it was merged with, erased right
        after the batch's records are applied (``streams.app.StreamWorker.erase_dropped``).
        Only when that is the one key the memory has: with another, the memory was written more
        than once (a replay would apply its other writes, and not the merge, whose words were
        the erased ones: the memory back, active) or a write of its id is on its way (its key
        minted, the write not applied yet: erased, an acknowledged write would be lost). Those
        keep every key; erase them by id.
        """
        doc = self.document(record.key)
        keys = self.limits.keys
        if doc is None or doc.key_id is None or keys is None:
            return
        if [k.key_id for k in keys.of_memory(record.tenant_id, record.memory_id)] == [doc.key_id]:
            batch.dropped_keys.setdefault((record.tenant_id, record.memory_id), set()).add(
                doc.key_id
            )

    def quotes_erased(self, record: WriteRecord) -> bool:
        """True for a summary (``summary_of``) of a memory erased since it was planned: its words
        quote the erased memory's. An erasure erases the summaries Milvus holds then
        (``ranker.service.RecallService.erase``); one this worker would make after is never
        made, and its key is erased (:attr:`Batch.unwritten`), so no replay opens it either;
        one made while the erasure ran is erased by the worker once its row is in Milvus
        (``streams.app.StreamWorker.recheck_summaries``). A source counts as erased too when the
        key the summary names for it (``source_keys``, a key it had when planned) is: written
        again under its id since, it has a live key, but the summary quotes the erased words.
        Read the keys topic through before asking.
        """
        return any(self._erased_source(record, s) for s in record.summary_of)

    def _erased_source(self, record: WriteRecord, source: str) -> bool:
        """The summary ``record``'s ``source`` was erased since it was planned (as read so far)."""
        keys = self.limits.keys
        if keys is None:
            return False
        key_id = record.source_keys.get(source)
        return keys.erased_memory(record.tenant_id, source) or (
            key_id is not None and keys.is_erased(record.tenant_id, source, key_id)
        )

    def _redelivered(
        self,
        message: Inbound,
        record: WriteRecord,
        state: MemoryState,
        effects: Sequence[Effect],
        batch: Batch,
    ) -> None:
        """A write applied before (skipped by offset) whose document is the state's (restored
        if a crash lost it; a purged memory has none, by design): its first delivery may have
        died after the tables and before its decisions were sent, so they are made again (for a
        current memory the supersession check and the reassertion's and revival's decisions; for
        a version in recall the ``supersede`` of the memory it versions; copies are ignored; a
        summary's check against erasures) and its row is rewritten.
        """
        current = state.valid_to is None and state.state not in GONE
        if current and state.content_hash == content_hash(record.content):
            # the stored vector is taken as this record's, given or embedded (an earlier write
            # of the same words may have given it: its stem then finds another model's rows)
            batch.stated[record.key] = Statement(message, record.at, record.embedding is None)
            self._reasserted(record, state, batch)
        self._versioned(record, state, batch)
        if record.summary_of and state.state not in GONE:
            batch.made.append(record)
        self._after(message, record.at, state, effects, batch)
        self.release(record.key.encode(), batch)

    @staticmethod
    def _reasserted(record: WriteRecord, state: MemoryState, batch: Batch) -> None:
        """Send what :func:`memcore.reassertion` and :func:`memcore.revival` decide for the
        state ``record`` left.
        """
        for passed in (reassertion(state, record.at), *revival(state, record.at)):
            if passed is not None:
                batch.supersede(record.tenant_id, passed.target, passed.event)

    @staticmethod
    def _versioned(record: WriteRecord, state: MemoryState, batch: Batch) -> None:
        """Send the ``supersede`` :func:`memcore.versioning` decides for the state ``record`` (a
        new version, naming the memory it ``supersedes``) left: after every delivery, its first
        may have died before its decisions were sent (the older memory ignores a copy).
        """
        passed = versioning(state, record.supersedes, record.at)
        if passed is not None:
            batch.supersede(record.tenant_id, passed.target, passed.event)

    def decision(self, message: Inbound, record: DecisionRecord, batch: Batch) -> None:
        """Apply a consolidation decision; one for an unknown memory changes nothing (but a
        recheck's ``succeeds``, whose predecessor is reinstated: :func:`memcore.unknown_successor`). A
        ``supersede`` that meets a memory superseded by another version also sends what
        :func:`memcore.relink` passes on, one that meets a memory deleted or forgotten what
        :func:`memcore.bypass` passes on, and an ``absorb`` its source's ``retire``
        (:func:`memcore.merged_away`); a memory superseded sends its successor a ``succeeds``
        (:func:`memcore.succession`), and one that leaves recall the versions it superseded a
        ``reinstate`` (:func:`memcore.reinstatements`) and, a summary, its sources a ``restore``
        (:func:`memcore.summary_gone`); again on a redelivery (the target ignores a copy).
        """
        state = self.state(record.key)
        if state is None:
            answer = unknown_successor(record.memory_id, record.event)
            if answer is not None:
                batch.out.append(decision_record(record.tenant_id, answer.target, answer.event))
            return
        event = dataclasses.replace(record.event, position=message.position)
        new, effects = apply(state, event, self.policy(record.tenant_id))
        assert new is not None
        if new != state:
            self.put_state(record.key, new)
        if new.purged and record.key.encode() in self.documents:
            if isinstance(event, Purge) and event.erase:  # a merged duplicate: its words too
                self._drop_key(record, batch)
            self.drop_document(record.key)  # its words leave the table
        self._after(message, event.at, new, effects, batch)
        if isinstance(event, Supersede):  # along the chain, and past a version that left recall
            for passed in (*relink(state, event), *bypass(state, event)):
                batch.out.append(decision_record(record.tenant_id, passed.target, passed.event))
        away = merged_away(new, event, effects[0]) if isinstance(event, Absorb) else None
        if away is not None:  # the source leaves once its survivor holds what it had
            batch.out.append(decision_record(record.tenant_id, *away))
        successor = succession(new, event, effects[0])
        if successor is not None:  # it records this memory, to reinstate it when it leaves
            batch.out.append(decision_record(record.tenant_id, successor.target, successor.event))
        self._reinstate(state, new, event, effects[0], batch)

    @staticmethod
    def _reinstate(
        before: MemoryState, after: MemoryState, event: Event, effect: Effect, batch: Batch
    ) -> None:
        """Send what :func:`memcore.reinstatements`, :func:`memcore.summary_gone` and
        :func:`memcore.summary_outdated` decide for a memory ``event`` changed.
        """
        for notice in (
            *reinstatements(before, after, event, effect),
            *summary_gone(before, after, event, effect),
            *summary_outdated(before, after, event, effect),
        ):
            batch.out.append(decision_record(after.tenant_id, notice.target, notice.event))

    # -- access --------------------------------------------------------------------------------

    def access(
        self,
        message: Inbound,
        batch: Batch,
        *,
        writes_caught_up: bool = False,
        releasing: bool = False,
    ) -> None:
        """Decode and apply one access event.

        An access can overtake its memory's write (the topics are consumed independently). When
        the memory is unknown and the writes of its partition are not caught up, the event is
        parked under the memory's key and applied, in order, right after the write; later accesses
        to a parked key are parked behind it while the memory is unknown, and applied after the
        parked ones once it is known. When the writes are caught up, an unknown memory's access
        goes to dead-letter. Malformed events always go to dead-letter. ``releasing``: a parked
        access being applied (:meth:`release`).
        """
        record = self._accept(message, decode_access, batch)
        if record is None:
            return
        key = record.key.encode()
        if not releasing and key in self.pending:
            if self.state(record.key) is None:
                self._park(key, record.memory_id, message, batch)
                return
            self.release(key, batch)  # those first (each applied once: by its offset)
        state = self.state(record.key)
        if state is None:
            if writes_caught_up:
                unknown = RecordError(
                    "memory_id", record.memory_id, "unknown memory in this tenant"
                )
                batch.out.append(dead_letter(message, unknown))
            else:
                self._park(key, record.memory_id, message, batch)
            return
        self._apply_access(message, record, state, batch)

    def _apply_access(
        self, message: Inbound, record: AccessRecord, state: MemoryState, batch: Batch
    ) -> None:
        policy = self.policy(record.tenant_id)
        event = Access(record.at, record.kind, message.position)
        new, effects = apply(state, event, policy)
        assert new is not None
        if new != state:
            self.put_state(record.key, new)
        self._reinstate(state, new, event, effects[0], batch)  # forgotten (powermem)
        # a redelivered access (skipped) rewrites the row too: its first delivery may have
        # changed the state in the table and died before the row (streams.rebuild.catch_up)
        redelivered = effects[0].kind is EffectKind.SKIPPED
        sync = redelivered or serving_changed(state, new)
        self._after(message, record.at, new, effects, batch, sync=sync)

    def _park(self, key: bytes, memory_id: str, message: Inbound, batch: Batch) -> None:
        """Add ``message`` to the accesses parked under ``key``. The same access again (one
        request naming a memory many times) adds only its offset to the entry before it (1,000
        copies of the whole value took 196 MB of changelog when each park wrote the table; the
        access agent now buffers it per batch, :meth:`buffered`). Past
        :data:`MAX_PARKED_BYTES` under one memory, the access goes to dead-letter.
        """
        batch.parked.add(message.partition)
        if self.recent is not None:
            self.recent.parked = True
        raw = self.pending.get(key)
        parked = orjson.loads(raw) if raw is not None else []
        if any(p["topic"] == message.topic and _offsets(p)[-1] >= message.offset for p in parked):
            return  # redelivered: already parked
        if raw is not None and len(raw) >= MAX_PARKED_BYTES:
            why = f"{len(raw)} bytes of accesses already wait for this memory's write"
            batch.out.append(dead_letter(message, RecordError("memory_id", memory_id, why)))
            return
        value = base64.b64encode(message.value).decode()
        last = parked[-1] if parked else None
        if last is not None and (last["topic"], last["value"]) == (message.topic, value):
            last["more"] = [*last.get("more", ()), message.offset]
        else:
            entry = {
                "topic": message.topic,
                "partition": message.partition,
                "offset": message.offset,
                "value": value,
            }
            if message.received_at is not None:
                entry["received_us"] = to_us(message.received_at)
            parked.append(entry)
        self.pending[key] = orjson.dumps(parked)

    def has_pending(self) -> bool:
        """True when any access is parked (reads at most one key)."""
        return next(iter(self.pending), None) is not None

    def parked(self, key: bytes) -> list[Inbound]:
        """The access messages parked under ``key``, in arrival order."""
        raw = self.pending.get(key)
        out: list[Inbound] = []
        for p in orjson.loads(raw) if raw is not None else []:
            value = base64.b64decode(p["value"])
            received = from_us(p["received_us"]) if "received_us" in p else None
            out.extend(
                Inbound(p["topic"], p["partition"], offset, key, value, received)
                for offset in _offsets(p)
            )
        return out

    def release(self, key: bytes, batch: Batch, only: frozenset[int] | None = None) -> None:
        """Apply the accesses parked under ``key`` now that its memory exists (or dead-letter them
        when it still does not: called only once the writes are caught up). ``only``: the offsets
        of those to release (None: every one parked).
        """
        recent = self.recent
        if recent is not None:  # one look at the whole table per batch, not one read per write
            if recent.parked is None:
                recent.parked = self.has_pending()
            if not recent.parked:
                return
        _, done = batch.released.get(key, (0, frozenset[int]()))
        busy = self.in_flight.get(key, set())  # another batch's, waiting for its acknowledgement
        messages = [
            m
            for m in self.parked(key)
            if m.offset not in done and m.offset not in busy and (only is None or m.offset in only)
        ]
        if not messages:
            return
        # kept until :meth:`drop_released`: a crash before the states they made are durable
        # finds them again (the write is redelivered; what was applied is skipped by offset)
        released = {m.offset for m in messages}
        batch.released[key] = (messages[0].partition, done | released)
        self.in_flight.setdefault(key, set()).update(released)
        for message in messages:
            with contained(message, batch):
                self.access(message, batch, writes_caught_up=True, releasing=True)

    @contextmanager
    def releasing(self, batch: Batch) -> Iterator[None]:
        """Within, what ``batch`` releases is in flight: a batch of the other agent leaves it
        (applied already, or dead-lettered: it sent the same dead letter twice). Once the body
        ends, dropped or not (the batch failed: a retry or a redelivery releases it again), it
        is not.
        """
        try:
            yield
        finally:
            for key, (_, offsets) in batch.released.items():
                left = self.in_flight.get(key, set()) - offsets
                if left:
                    self.in_flight[key] = left
                else:
                    self.in_flight.pop(key, None)

    def drop_released(self, batch: Batch, partition: int) -> None:
        """Drop from the pending table what ``batch`` released in ``partition``; call it once
        the batch's table writes and records are acknowledged, inside an event of ``partition``.
        Accesses parked since (another agent's batch) stay.
        """
        for key, (part, offsets) in batch.released.items():
            if part != partition:
                continue
            raw = self.pending.get(key)
            if raw is None:
                continue
            left = []
            for p in orjson.loads(raw):
                kept = [o for o in _offsets(p) if o not in offsets]
                if kept:
                    p.pop("more", None)
                    left.append(
                        {**p, "offset": kept[0], **({"more": kept[1:]} if kept[1:] else {})}
                    )
            if left:
                self.pending[key] = orjson.dumps(left)
            else:
                del self.pending[key]

    def parked_in(self, partition: int) -> dict[bytes, frozenset[int]]:
        """The accesses parked in ``partition`` now: each key's offsets (a snapshot)."""
        return {
            key: frozenset(m.offset for m in self.parked(key))
            for key, raw in self.pending.items()
            if orjson.loads(raw)[0]["partition"] == partition
        }

    def expire_pending(
        self, partition: int, batch: Batch, parked: Mapping[bytes, frozenset[int]] | None = None
    ) -> None:
        """Release the parked accesses of ``partition`` (its writes are caught up): the writes
        that were awaited are applied, so what is still unknown goes to dead-letter. ``parked``:
        those parked when the end offset was asked for (:meth:`parked_in`); an access parked
        since may await a write produced after it, and stays parked. None: every one.
        """
        for key, offsets in (parked if parked is not None else self.parked_in(partition)).items():
            self.release(key, batch, offsets)

    # -- shared --------------------------------------------------------------------------------

    def policy(self, tenant_id: str) -> Policy:
        """The policy of a tenant the decoder accepted (the default one if it was deleted since)."""
        tenant = self.limits.registry.get(tenant_id)
        return tenant.policy if tenant is not None else Policy()

    def _after(
        self,
        message: Inbound,
        at: datetime,
        state: MemoryState,
        effects: Sequence[Effect],
        batch: Batch,
        *,
        sync: bool = True,
    ) -> None:
        """Count and audit the effects; with ``sync``, the memory's Milvus row is rewritten."""
        key = f"{state.tenant_id}/{state.memory_id}"
        if sync:
            batch.touch(key)
        if effects[0].kind is EffectKind.SKIPPED:
            return
        self._count(state.tenant_id, message.partition, effects)
        for effect in effects:
            if effect.kind is EffectKind.ACCESSED:
                continue  # not a decision: the access-events topic is its record
            value = audit_value(state, effect, message, at)
            batch.out.append(Outbound("audit", key.encode(), value))

    def _count(self, tenant_id: str, partition: int, effects: Sequence[Effect]) -> None:
        """Per-tenant counters, one row per (tenant, partition) so each row lives with its events."""
        ckey = f"{tenant_id}@{partition}".encode()
        raw = self.counters.get(ckey)
        counts: dict[str, int] = orjson.loads(raw) if raw is not None else {}
        for effect in effects:
            counts[effect.kind.value] = counts.get(effect.kind.value, 0) + 1
        self.counters[ckey] = orjson.dumps(counts)


def _offsets(parked: dict[str, Any]) -> list[int]:
    """The offsets of a parked entry: its own, then those of the same access again."""
    return [parked["offset"], *parked.get("more", ())]


def audit_value(state: MemoryState, effect: Effect, message: Inbound, at: datetime) -> bytes:
    """One audit record: what happened to which memory, why, from which event, and the result."""
    return orjson.dumps(
        {
            "v": 1,
            "tenant_id": state.tenant_id,
            "memory_id": state.memory_id,
            "kind": effect.kind.value,
            "reason": effect.reason,
            "at": at.astimezone(UTC).isoformat(),  # in UTC, as every route shows times
            "source": message.position.source,
            "offset": message.position.offset,
            "after": {
                "tier": state.tier.value,
                "state": state.state.value,
                "importance": state.importance,
                "access_count": state.access_count,
                "recall_count": state.recall_count,
                "write_count": state.write_count,
                "last_access": state.last_access.astimezone(UTC).isoformat(),
                # what a purge, a supersession or a merge left (a purged memory reads
                # ``deleted`` above)
                "purged": state.purged,
                "valid_to": _utc(state.valid_to),
                "superseded_by": state.superseded_by,
                "merged_into": state.merged_into,
            },
        }
    )


def _utc(at: datetime | None) -> str | None:
    return at.astimezone(UTC).isoformat() if at is not None else None


def tenant_counts(counters: MutableMapping[bytes, bytes], tenant_id: str) -> dict[str, int]:
    """A tenant's counters summed over partitions."""
    total: dict[str, int] = {}
    prefix = f"{tenant_id}@".encode()
    for key, raw in counters.items():
        if key.startswith(prefix):
            for kind, n in orjson.loads(raw).items():
                total[kind] = total.get(kind, 0) + n
    return total
