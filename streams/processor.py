"""What the agents do with a batch, independent of Faust: decode, reduce, assign, describe effects.

The processor works on two mutable mappings (the memory table and the tenant-counter table, bytes to
bytes); the Faust agents pass their tables, unit tests pass dicts. Every assignment writes the whole
new value. Nothing here reads a clock: times come from the events.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, MutableMapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import orjson

from memcore import (
    Access,
    Effect,
    EffectKind,
    ImportanceDecision,
    MemoryState,
    Policy,
    Position,
    Write,
    apply,
    content_hash,
)
from storage import Document, MemoryRow
from streams import codec
from streams.records import (
    AccessRecord,
    Limits,
    RecordError,
    WriteRecord,
    decode_access,
    decode_write,
)


@dataclass(frozen=True)
class Inbound:
    """One consumed Kafka message."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes

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
    value = {
        "v": 1,
        "reason": str(error),
        "field": error.field,
        "topic": message.topic,
        "partition": message.partition,
        "offset": message.offset,
        "key": base64.b64encode(message.key).decode() if message.key is not None else None,
        "payload": base64.b64encode(message.value).decode(),
    }
    return Outbound("dead-letter", message.key, orjson.dumps(value))


@dataclass
class Batch:
    """The result of one batch: messages to produce and memory keys whose rows must be synced."""

    out: list[Outbound] = field(default_factory=list)
    touched: dict[str, None] = field(default_factory=dict)  # ordered set of table keys

    def touch(self, key: str) -> None:
        self.touched[key] = None


class Processor:
    """Applies decoded records to the tables through :func:`memcore.apply`."""

    def __init__(
        self,
        memories: MutableMapping[bytes, bytes],
        counters: MutableMapping[bytes, bytes],
        limits: Limits,
    ) -> None:
        self.memories = memories
        self.counters = counters
        self.limits = limits

    # -- reading -------------------------------------------------------------------------------

    def load(self, key: str) -> tuple[MemoryState, Document] | None:
        raw = self.memories.get(key.encode())
        return codec.decode(raw) if raw is not None else None

    def rows(self, keys: Iterable[str]) -> tuple[list[MemoryRow], list[tuple[str, str]]]:
        """Rows to upsert and (tenant, memory id) pairs to delete, for the current table values."""
        upserts: list[MemoryRow] = []
        deletes: list[tuple[str, str]] = []
        for key in keys:
            found = self.load(key)
            if found is None:
                continue
            state, doc = found
            if state.purged:
                deletes.append((state.tenant_id, state.memory_id))
            else:
                upserts.append(MemoryRow.of(state, doc))
        return upserts, deletes

    # -- writes --------------------------------------------------------------------------------

    def decode_writes(
        self, messages: Sequence[Inbound], batch: Batch
    ) -> list[tuple[Inbound, WriteRecord]]:
        """Valid, correctly keyed writes; the rest become dead letters or re-keyed forwards."""
        accepted = []
        for message in messages:
            try:
                record = decode_write(message.value, self.limits)
            except RecordError as error:
                batch.out.append(dead_letter(message, error))
                continue
            key = record.key.encode()
            if message.key != key:
                # A memory's events must share its partition; forward under the right key.
                batch.out.append(Outbound("memory-writes", key, message.value))
                continue
            accepted.append((message, record))
        return accepted

    def needs_embedding(self, record: WriteRecord) -> bool:
        """True when no vector was given and none is stored for this exact content."""
        if record.embedding is not None:
            return False
        found = self.load(record.key)
        return found is None or found[0].content_hash != content_hash(record.content)

    def write(
        self,
        message: Inbound,
        record: WriteRecord,
        vector: tuple[float, ...] | None,
        importance: ImportanceDecision,
        batch: Batch,
    ) -> None:
        """Apply one write. ``vector`` is the record's or a computed embedding; None keeps the stored one."""
        found = self.load(record.key)
        state, doc = found if found is not None else (None, None)
        event = Write(
            tenant_id=record.tenant_id,
            memory_id=record.memory_id,
            content_hash=content_hash(record.content),
            at=record.at,
            importance=importance,
            memory_type=record.memory_type,
            session_id=record.session_id,
            agent_id=record.agent_id,
            tags=record.tags,
            relations=record.relations,
            summary_of=record.summary_of,
            position=message.position,
        )
        policy = self._policy(record.tenant_id)
        new, effects = apply(state, event, policy)
        assert new is not None  # a write always leaves a state
        if effects[0].kind is not EffectKind.SKIPPED:
            use = vector if vector is not None else (doc.vector if doc is not None else None)
            if use is None:
                missing = RecordError("embedding", None, "no vector given or computed")
                batch.out.append(dead_letter(message, missing))
                return
            replaced = doc is None or effects[0].kind in (EffectKind.CREATED, EffectKind.UPDATED)
            new_doc = (
                Document(record.content, use, record.metadata)
                if replaced or doc is None
                else Document(doc.content, doc.vector, {**doc.metadata, **record.metadata})
            )
            self.memories[record.key.encode()] = codec.encode(new, new_doc)
        self._after(message, record.at, new, effects, batch)

    # -- access --------------------------------------------------------------------------------

    def access(self, message: Inbound, batch: Batch, *, final: bool = True) -> bool:
        """Decode and apply one access event. Returns False, doing nothing, when the memory is
        unknown and ``final`` is False (its write may still be on its way); with ``final`` an
        unknown memory's event goes to dead-letter. Malformed events always go to dead-letter.
        """
        try:
            record: AccessRecord = decode_access(message.value, self.limits)
        except RecordError as error:
            batch.out.append(dead_letter(message, error))
            return True
        key = record.key.encode()
        if message.key != key:
            batch.out.append(Outbound("access-events", key, message.value))
            return True
        found = self.load(record.key)
        if found is None:
            if not final:
                return False
            unknown = RecordError("memory_id", record.memory_id, "unknown memory in this tenant")
            batch.out.append(dead_letter(message, unknown))
            return True
        state, doc = found
        new, effects = apply(
            state, Access(record.at, record.kind, message.position), self._policy(record.tenant_id)
        )
        assert new is not None
        if new != state:
            self.memories[key] = codec.encode(new, doc)
        self._after(message, record.at, new, effects, batch)
        return True

    # -- shared --------------------------------------------------------------------------------

    def _policy(self, tenant_id: str) -> Policy:
        tenant = self.limits.registry.get(tenant_id)
        assert tenant is not None  # decode rejected unknown tenants
        return tenant.policy

    def _after(
        self,
        message: Inbound,
        at: datetime,
        state: MemoryState,
        effects: Sequence[Effect],
        batch: Batch,
    ) -> None:
        key = f"{state.tenant_id}/{state.memory_id}"
        batch.touch(key)
        if effects[0].kind is EffectKind.SKIPPED:
            return
        self._count(state.tenant_id, message.partition, effects)
        for effect in effects:
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


def audit_value(state: MemoryState, effect: Effect, message: Inbound, at: datetime) -> bytes:
    """One audit record: what happened to which memory, why, from which event, and the result."""
    return orjson.dumps(
        {
            "v": 1,
            "tenant_id": state.tenant_id,
            "memory_id": state.memory_id,
            "kind": effect.kind.value,
            "reason": effect.reason,
            "at": at.isoformat(),
            "source": message.position.source,
            "offset": message.position.offset,
            "after": {
                "tier": state.tier.value,
                "state": state.state.value,
                "importance": state.importance,
                "access_count": state.access_count,
                "recall_count": state.recall_count,
                "write_count": state.write_count,
                "last_access": state.last_access.isoformat(),
            },
        }
    )


def tenant_counts(counters: MutableMapping[bytes, bytes], tenant_id: str) -> dict[str, int]:
    """A tenant's counters summed over partitions."""
    total: dict[str, int] = {}
    prefix = f"{tenant_id}@".encode()
    for key, raw in counters.items():
        if key.startswith(prefix):
            for kind, n in orjson.loads(raw).items():
                total[kind] = total.get(kind, 0) + n
    return total
