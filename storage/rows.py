"""The row a memory has in the vector store: its content, vector and the state recall needs.

Times are integer microseconds since the Unix epoch (exact for event times); ``next_review_us`` is
0 when no review is due any more; ``valid_to_us`` is 0 while the memory is the current version of
its fact (:data:`CURRENT`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from memcore import MAX_RELATIONS, MAX_TAGS, MemoryState
from memcore.ids import indexed_text
from memcore.keyword import keyword_text

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def to_us(at: datetime) -> int:
    """Microseconds since the epoch of an aware datetime."""
    return (at - _EPOCH) // timedelta(microseconds=1)


def from_us(us: int) -> datetime:
    """Inverse of :func:`to_us`, in UTC."""
    return _EPOCH + timedelta(microseconds=us)


@dataclass(frozen=True)
class Document:
    """What a memory says, as its writer gave it.

    Attributes:
        content: the text.
        vector: its embedding (the collection's dimension).
        metadata: free JSON-able metadata.
        context: words to find it by, embedded and indexed with the content, never returned as
            content (``memcore.ids.indexed_text``).
        key_id: the data key it is sealed under in the documents table (None: kept in the clear;
            :mod:`storage.sealing`).
    """

    content: str
    vector: tuple[float, ...]
    metadata: Mapping[str, Any] = field(default_factory=dict)
    context: str | None = None
    key_id: str | None = None


CURRENT = 0
"""``valid_to_us`` of a memory no newer memory has superseded."""


def ended_us(valid_to_us: int) -> int:
    """A superseded version's ``valid_to_us`` as a row holds it: at least 1 µs, since
    :data:`CURRENT` is 0 (an end at the epoch itself, which event times allow, read as current).
    """
    return max(1, valid_to_us)


MAX_CONTENT_BYTES = 65_535
"""The collection's ``content`` and ``search_text`` capacity, in UTF-8 bytes."""


def search_text_of(content: str, context: str | None) -> str:
    """A memory's ``search_text``: its indexed text as :func:`memcore.keyword.keyword_text`,
    its words past :data:`MAX_CONTENT_BYTES` left out. Writes are refused before that
    (``storage.records``); a memory accepted under an older analysis whose words now normalise
    longer (a rebuild after an upgrade) is still stored, its last words not keyword-indexed.
    """
    text = keyword_text(indexed_text(content, context))
    data = text.encode("utf-8")
    if len(data) <= MAX_CONTENT_BYTES:
        return text
    kept = data[: MAX_CONTENT_BYTES + 1].decode("utf-8", errors="ignore")
    return kept[: kept.rfind(" ")] if " " in kept else ""


@dataclass(frozen=True)
class MemoryRow:
    """One row of the collection; ``key`` is ``tenant_id/memory_id``.

    ``valid_to_us`` (µs, :data:`CURRENT` while current) and ``superseded_by`` ("" while current)
    record supersession (SPEC section 6). ``search_text`` is what the full-text index reads: the
    document's context and content as :func:`memcore.keyword.keyword_text` (stemmed tokens).
    """

    key: str
    tenant_id: str
    memory_id: str
    content: str
    vector: Sequence[float]
    tier: str
    state: str
    importance: float
    access_count: int
    recall_count: int
    write_count: int
    created_at_us: int
    last_access_us: int
    state_changed_at_us: int
    tau_hours: float
    retention: float
    review_count: int
    next_review_us: int
    session_id: str
    agent_id: str
    user_id: str
    tags: Sequence[str]
    relations: Sequence[str]
    merged_into: str
    summary_of: Sequence[str]
    metadata: Mapping[str, Any]
    valid_to_us: int
    superseded_by: str
    search_text: str

    @classmethod
    def of(cls, state: MemoryState, doc: Document) -> MemoryRow:
        """The row of a memory from its state and document."""
        return cls(
            key=f"{state.tenant_id}/{state.memory_id}",
            tenant_id=state.tenant_id,
            memory_id=state.memory_id,
            content=doc.content,
            vector=doc.vector,
            created_at_us=to_us(state.created_at),
            session_id=state.session_id or "",
            agent_id=state.agent_id or "",
            user_id=state.user_id or "",
            # the newest (last) ones: a state written before the reducer kept them within these
            # holds more than the collection's arrays take
            tags=state.tags[-MAX_TAGS:],
            relations=state.relations[-MAX_RELATIONS:],
            merged_into=state.merged_into or "",
            summary_of=state.summary_of,
            metadata=dict(doc.metadata),
            search_text=search_text_of(doc.content, doc.context),
            **dict(zip(LIVE_FIELDS, live_values(state), strict=True)),
        )

    def to_entity(self) -> dict[str, Any]:
        """The row as the dict the vector store takes."""
        out = {name: getattr(self, name) for name in self.__dataclass_fields__}
        out["vector"] = [float(x) for x in self.vector]
        out["tags"] = list(self.tags)
        out["relations"] = list(self.relations)
        out["summary_of"] = list(self.summary_of)
        return out

    @classmethod
    def from_entity(cls, entity: Mapping[str, Any]) -> MemoryRow:
        """Inverse of :meth:`to_entity` (missing output fields raise KeyError)."""
        values = {name: entity[name] for name in cls.__dataclass_fields__}
        values["vector"] = tuple(map(float, values["vector"]))
        for name in ("tags", "relations", "summary_of"):
            values[name] = tuple(values[name])
        values["metadata"] = dict(values["metadata"] or {})
        return cls(**values)


ROW_FIELDS: tuple[str, ...] = tuple(MemoryRow.__dataclass_fields__)

LIVE_FIELDS: tuple[str, ...] = (
    "tier",
    "state",
    "importance",
    "access_count",
    "recall_count",
    "write_count",
    "last_access_us",
    "state_changed_at_us",
    "tau_hours",
    "retention",
    "review_count",
    "next_review_us",
    "valid_to_us",
    "superseded_by",
)
"""The row fields an access or a fold changes: the tables (and the ranker's state view) are their
source of truth; a Milvus row may hold older values of all but ``tier`` and ``state``."""


def live_values(state: MemoryState) -> tuple[Any, ...]:
    """The :data:`LIVE_FIELDS` of a memory's row, from its state, in that order."""
    next_review = state.card.next_review
    return (
        state.tier.value,
        state.state.value,
        state.importance,
        state.access_count,
        state.recall_count,
        state.write_count,
        to_us(state.last_access),
        to_us(state.state_changed_at),
        state.tau_hours,
        state.card.retention,
        state.card.review_count,
        to_us(next_review) if next_review is not None else 0,
        ended_us(to_us(state.valid_to)) if state.valid_to is not None else CURRENT,
        state.superseded_by or "",
    )


def row_live_values(row: MemoryRow) -> tuple[Any, ...]:
    """The :data:`LIVE_FIELDS` a row holds, in that order (the values it was written with)."""
    return tuple(getattr(row, name) for name in LIVE_FIELDS)


def with_live(row: MemoryRow, values: Sequence[Any]) -> MemoryRow:
    """``row`` with its :data:`LIVE_FIELDS` replaced by ``values`` (from :func:`live_values`).
    A copy of the row's fields (``dataclasses.replace`` re-runs ``__init__``: ~10x the cost,
    paid per returned memory of every recall); the values are trusted as the view's.
    """
    if len(values) != len(LIVE_FIELDS):
        raise ValueError(f"expected {len(LIVE_FIELDS)} live values, got {len(values)}")
    out = object.__new__(MemoryRow)
    fields = out.__dict__
    fields.update(row.__dict__)
    fields.update(zip(LIVE_FIELDS, values, strict=True))
    return out


def serving_changed(before: MemoryState, after: MemoryState) -> bool:
    """True when ``after`` changes what a Milvus row is searched or filtered by (state, tier,
    validity, scope, links, content): only then must the row be rewritten. Counters, importance,
    the decay clock and the review card live in the tables (SPEC: an access writes no row).
    """
    return _serving(before) != _serving(after)


def _serving(s: MemoryState) -> tuple[Any, ...]:
    return (
        s.content_hash,
        s.state,
        s.tier,
        s.valid_to,
        s.superseded_by,
        s.tags,
        s.relations,
        s.session_id,
        s.agent_id,
        s.user_id,
        s.merged_into,
        s.summary_of,
        s.purged,
    )
