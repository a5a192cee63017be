"""Table values as compact JSON (orjson): a memory's state, and its document (content, vector,
metadata) in a table of its own, so that an access rewrites only the small state.

Times are integer microseconds (exact); the vector is little-endian float32, base64-encoded.
Decoding what was encoded gives an equal state and document. A document written from a sealed
write stays sealed under that write's key (:mod:`storage.sealing`): the table's changelog never
holds a memory's words in the clear.
"""

from __future__ import annotations

import base64
import sys
from array import array
from typing import Any, NamedTuple

import orjson

from memcore import ImportanceSource, Lifecycle, MemoryState, ReviewCard, Tier
from storage.rows import CURRENT, Document, ended_us, from_us, to_us
from storage.sealing import DataKey, Opener, SealError, seal

_FORMAT = 1


def encode_vector(vector: tuple[float, ...]) -> str:
    """Base64 of the vector as little-endian float32."""
    values = array("f", vector)
    if sys.byteorder != "little":  # pragma: no cover - every supported platform is little-endian
        values.byteswap()
    return base64.b64encode(values.tobytes()).decode("ascii")


def decode_vector(text: str) -> tuple[float, ...]:
    """Inverse of :func:`encode_vector` (values rounded to float32)."""
    values = array("f")
    values.frombytes(base64.b64decode(text))
    if sys.byteorder != "little":  # pragma: no cover
        values.byteswap()
    return tuple(values)


def encode_document(doc: Document, key: DataKey | None = None) -> bytes:
    """Bytes of a documents-table value: sealed under ``key`` when given (``doc.key_id`` should
    name it), else in the clear.
    """
    value = {
        "content": doc.content,
        "vector": encode_vector(doc.vector),
        "metadata": doc.metadata,
        "context": doc.context,
    }
    if key is None:
        return orjson.dumps({"f": _FORMAT, **value})
    return orjson.dumps({"f": _FORMAT, "sealed": seal(value, key)})


def decode_document(
    raw: bytes, keys: Opener | None = None, memory: tuple[str, str] | None = None
) -> Document:
    """Inverse of :func:`encode_document`; a sealed value is opened with ``keys`` for
    ``memory`` (tenant, memory id). Raises Erased when its key was erased, SealError when it
    cannot be opened (no keys, unknown key, does not open).
    """
    d = orjson.loads(raw)
    key_id = None
    if "sealed" in d:
        if keys is None or memory is None:
            raise SealError("sealed", "a sealed document and no keys to open it")
        key_id = str(d["sealed"].get("key_id"))
        d = keys.open(memory[0], memory[1], d["sealed"])
    return Document(
        d["content"], decode_vector(d["vector"]), d["metadata"], d.get("context"), key_id
    )


def encode(state: MemoryState) -> bytes:
    """Bytes of a memories-table value."""
    card = state.card
    value: dict[str, Any] = {
        "f": _FORMAT,
        "tenant_id": state.tenant_id,
        "memory_id": state.memory_id,
        "content_hash": state.content_hash,
        "tier": state.tier.value,
        "importance": state.importance,
        "importance_source": state.importance_source.value,
        "state": state.state.value,
        "created_at": to_us(state.created_at),
        "last_access": to_us(state.last_access),
        "state_changed_at": to_us(state.state_changed_at),
        "card": [
            card.retention,
            [to_us(t) for t in card.schedule],
            to_us(card.next_review) if card.next_review is not None else None,
            card.review_count,
        ],
        "tau_hours": state.tau_hours,
        "access_count": state.access_count,
        "recall_count": state.recall_count,
        "write_count": state.write_count,
        "session_id": state.session_id,
        "agent_id": state.agent_id,
        "tags": state.tags,
        "relations": state.relations,
        "merged_from": state.merged_from,
        "merged_into": state.merged_into,
        "summary_of": state.summary_of,
        "offsets": state.offsets,
        "purged": state.purged,
        "valid_to": to_us(state.valid_to) if state.valid_to is not None else None,
        "superseded_by": state.superseded_by,
    }
    if state.user_id is not None:  # left out when absent: states from before user scopes
        value["user_id"] = state.user_id  # encode, and hash, as they did
    if state.stated_at is not None:  # likewise: states never restated encode as before
        value["stated_at"] = to_us(state.stated_at)
    if state.reasserted_over is not None:
        value["reasserted_over"] = state.reasserted_over
    if state.predecessors:  # likewise: a memory that superseded none encodes as before
        value["predecessors"] = state.predecessors
    if state.summarised_in:  # likewise: one never summarised
        value["summarised_in"] = state.summarised_in
    return orjson.dumps(value)


def decode_live(raw: bytes) -> tuple[Any, ...]:
    """What ``live_values(decode(raw))`` gives (:data:`storage.rows.LIVE_FIELDS`, in order),
    read straight from the encoded value: the ranker's state view takes one per change and needs
    no state built. Only the live fields are read, and not checked (an unknown tier or state
    passes); raises KeyError, TypeError or ValueError when one of them is missing or malformed.
    """
    return _live_of(orjson.loads(raw))


PURGED: tuple[Any, ...] = (
    Tier.WORKING.value,
    Lifecycle.DELETED.value,
    0.0,
    0,
    0,
    0,
    0,
    0,
    1.0,
    0.0,
    0,
    0,
    CURRENT,
    "",
)
"""The live values a reader answers for a purged memory whose own it no longer holds: deleted
(no recall or listing serves it), the rest placeholders no filter or score reads for a deleted
memory; in :data:`storage.rows.LIVE_FIELDS` order."""


class Purged(NamedTuple):
    """What a reader keeps of a purged memory's state."""

    at_us: int
    """When it was purged (its ``state_changed_at``), µs since the epoch."""
    write_count: int
    """Its writes until then: a write of it after the purge counts more, a row of it from
    before (an upsert retried past the purge) no more."""


def decode_served(raw: bytes) -> tuple[Any, ...] | Purged:
    """:func:`decode_live`, or :class:`Purged` for a purged memory's state (a tombstone the
    worker keeps for idempotence: the memory left the serving store, and a reader holding its
    values would hold every memory ever purged; ``ranker.view`` keeps this of the latest ones,
    answering :data:`PURGED`). Raises as :func:`decode_live`.
    """
    v = orjson.loads(raw)
    if v.get("purged") is True:
        return Purged(int(v["state_changed_at"]), int(v["write_count"]))
    return _live_of(v)


def _live_of(v: dict[str, Any]) -> tuple[Any, ...]:
    retention, _, next_review, review_count = v["card"]
    valid_to = v.get("valid_to")
    return (
        v["tier"],
        v["state"],
        v["importance"],
        v["access_count"],
        v["recall_count"],
        v["write_count"],
        v["last_access"],
        v["state_changed_at"],
        v["tau_hours"],
        retention,
        review_count,
        next_review if next_review is not None else 0,
        ended_us(valid_to) if valid_to is not None else CURRENT,
        v.get("superseded_by") or "",
    )


def decode(raw: bytes) -> MemoryState:
    """The state in a memories-table value."""
    v = orjson.loads(raw)
    retention, schedule, next_review, review_count = v["card"]
    return MemoryState(
        tenant_id=v["tenant_id"],
        memory_id=v["memory_id"],
        content_hash=v["content_hash"],
        tier=Tier(v["tier"]),
        importance=v["importance"],
        importance_source=ImportanceSource(v["importance_source"]),
        state=Lifecycle(v["state"]),
        created_at=from_us(v["created_at"]),
        last_access=from_us(v["last_access"]),
        state_changed_at=from_us(v["state_changed_at"]),
        card=ReviewCard(
            retention=retention,
            schedule=tuple(from_us(t) for t in schedule),
            next_review=from_us(next_review) if next_review is not None else None,
            review_count=review_count,
        ),
        tau_hours=v["tau_hours"],
        access_count=v["access_count"],
        recall_count=v["recall_count"],
        write_count=v["write_count"],
        session_id=v["session_id"],
        agent_id=v["agent_id"],
        user_id=v.get("user_id"),  # absent from states written before user scopes
        tags=tuple(v["tags"]),
        relations=tuple(v["relations"]),
        merged_from=tuple(v["merged_from"]),
        merged_into=v["merged_into"],
        summary_of=tuple(v["summary_of"]),
        offsets=tuple((s, o) for s, o in v["offsets"]),
        purged=v["purged"],
        valid_to=from_us(v["valid_to"]) if v.get("valid_to") is not None else None,
        superseded_by=v.get("superseded_by"),
        stated_at=from_us(v["stated_at"]) if v.get("stated_at") is not None else None,
        reasserted_over=v.get("reasserted_over"),
        predecessors=tuple(v.get("predecessors", ())),  # absent: it superseded none
        summarised_in=_summaries(v.get("summarised_in")),
    )


def _summaries(value: list[str] | str | None) -> tuple[str, ...]:
    """A state's ``summarised_in``: absent (in none, or from before it was kept), one id (as
    a build of 2026-12-06 wrote it), or a list.
    """
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)
