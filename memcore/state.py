"""A memory's state, the events that change it, and the effects the reducer reports.

All of these are frozen data. Times are event times (timezone-aware); counts are plain integers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from memcore.card import ReviewCard
from memcore.importance import ImportanceDecision
from memcore.types import AccessKind, ImportanceSource, Lifecycle, Tier

MAX_TAGS = 64
"""Tags a memory holds at most (and a write carries; the serving store's array capacity). A rewrite
adds its tags to the memory's; past this, the oldest that the rewrite does not repeat are dropped."""
MAX_RELATIONS = 64
"""Relations a memory holds at most, kept as :data:`MAX_TAGS` keeps tags."""
MAX_SUMMARY_SOURCES = 1024
"""Memories one summary compresses at most (the serving store's array capacity): consolidation
splits a larger cluster into summaries of at most this many."""
MAX_RELINKS = 16
"""How many times one supersession is passed along a chain of versions (a bound against versions
that supersede each other in a cycle, which a memory rewritten back to an older value can make)."""
MAX_PREDECESSORS = 64
"""The versions a memory records as superseded by it (``predecessors``), at most: past this, the
oldest are dropped (one whose successor leaves recall then stays superseded)."""

MAX_SUMMARIES = 8
"""The summaries a memory records as holding its words (``summarised_in``), at most: past this,
the oldest are dropped (then not deleted when the memory is superseded)."""


def _kept_then_added(kept: Iterable[str], added: Iterable[str], cap: int) -> tuple[str, ...]:
    """``kept``, then what ``added`` brings, each once, up to ``cap`` (``kept`` comes first: it
    is never what is dropped).
    """
    return tuple(dict.fromkeys((*kept, *added)))[:cap]


def absorbed_tags(kept: tuple[str, ...], *added: tuple[str, ...]) -> tuple[str, ...]:
    """A merge's survivor's tags: its own (``kept``), then those its sources bring, up to
    :data:`MAX_TAGS`.
    """
    return _kept_then_added(kept, (t for tags in added for t in tags), MAX_TAGS)


def absorbed_relations(
    kept: tuple[str, ...], added: Iterable[str], *not_to: str
) -> tuple[str, ...]:
    """A merge's survivor's relations: its own (``kept``), then those its sources bring, each
    once, none to ``not_to`` (itself, the memories merged into it), up to :data:`MAX_RELATIONS`.
    """
    skip = set(not_to)
    return _kept_then_added(kept, (r for r in added if r not in skip), MAX_RELATIONS)


@dataclass(frozen=True)
class Position:
    """Where an event came from, for idempotence.

    Attributes:
        source: the ordered stream it was read from, e.g. ``memory-writes/3`` (topic/partition).
        offset: its offset in that stream; an event at or below the last applied one is skipped.
    """

    source: str
    offset: int


@dataclass(frozen=True)
class MemoryState:
    """Everything the model keeps about one memory (content and vector live in storage).

    Attributes:
        tenant_id: owner.
        memory_id: stable id within the tenant.
        content_hash: hash of the normalised content (exact dedup).
        tier: working, episodic or semantic.
        importance: [0, 1].
        importance_source: how the write-time importance was found.
        state: active, archived, forgotten or deleted.
        created_at: event time of the first write.
        last_access: event time of the last access (the decay clock); starts at ``created_at``.
        state_changed_at: event time the ``state`` last changed (the purge window counts from it).
        card: the review card.
        tau_hours: decay constant in hours, recomputed on tier change and every n-th access.
        access_count: accesses of any kind.
        recall_count: accesses that were recall hits.
        write_count: writes folded into this memory (1 for a single write), and so the
            version readers order its rows by: a write after deletion starts a new memory whose
            count goes on from the deleted one's.
        session_id, agent_id, tags, relations: writer's metadata; ``relations`` are memory ids.
            A rewrite adds those it brings, up to :data:`MAX_TAGS` and :data:`MAX_RELATIONS`:
            past these, the oldest it does not repeat are dropped.
        user_id: the end user the memory is about (mem0's ``user_id``): with ``agent_id`` and
            ``session_id``, the memory's scope.
        merged_from: ids of memories merged into this one.
        merged_into: the survivor this memory was merged into, if any.
        summary_of: ids of the memories this summary compresses.
        offsets: last applied offset per source (see :class:`Position`).
        purged: removed from the serving store; the state stays as a tombstone for idempotence.
        valid_to: event time from which a newer memory states a newer value of the same fact
            (SPEC section 6, supersession); None while this memory is the current version.
        superseded_by: the id of that newer memory.
        stated_at: event time of the latest write that stated this memory's content again (an
            identical rewrite included), when later than its creation; None: stated at
            ``created_at`` only. A supersession dated before it is of an older statement.
        reasserted_over: the successor a write made this memory current again over (it is to
            be superseded by this memory from ``stated_at``), kept so that a redelivered or
            retried write sends that decision again; None: no such write.
        predecessors: the memories this one superseded (their ``succeeds`` decisions), oldest
            first, at most :data:`MAX_PREDECESSORS`: when this memory leaves recall (deleted,
            forgotten), each is sent a ``reinstate`` (:func:`memcore.reducer.reinstatements`).
            Kept as recorded: one superseded by another since ignores the reinstate.
        summarised_in: the summaries this memory was archived into (a ``retire`` to archived
            naming one), oldest first, at most :data:`MAX_SUMMARIES`, kept while an access, a
            rewrite or a sweep moves the memory since (``merged_into`` is cleared by an
            access): each still states its words, and is deleted once this memory is
            superseded (:func:`memcore.reducer.summary_outdated`). One leaves when its
            ``restore`` comes (it is gone).
    """

    tenant_id: str
    memory_id: str
    content_hash: str
    tier: Tier
    importance: float
    importance_source: ImportanceSource
    state: Lifecycle
    created_at: datetime
    last_access: datetime
    state_changed_at: datetime
    card: ReviewCard
    tau_hours: float
    access_count: int = 0
    recall_count: int = 0
    write_count: int = 1
    session_id: str | None = None
    agent_id: str | None = None
    user_id: str | None = None
    tags: tuple[str, ...] = ()
    relations: tuple[str, ...] = ()
    merged_from: tuple[str, ...] = ()
    merged_into: str | None = None
    summary_of: tuple[str, ...] = ()
    offsets: tuple[tuple[str, int], ...] = ()
    purged: bool = False
    valid_to: datetime | None = None
    superseded_by: str | None = None
    stated_at: datetime | None = None
    reasserted_over: str | None = None
    predecessors: tuple[str, ...] = ()
    summarised_in: tuple[str, ...] = ()

    def last_offset(self, source: str) -> int | None:
        """The last applied offset from ``source``, or None when nothing from it was applied."""
        for name, offset in self.offsets:
            if name == source:
                return offset
        return None

    def at_position(self, position: Position | None) -> MemoryState:
        """A copy that records ``position`` as applied."""
        if position is None:
            return self
        rest = tuple((s, o) for s, o in self.offsets if s != position.source)
        offsets = tuple(sorted((*rest, (position.source, position.offset))))
        return dataclasses.replace(self, offsets=offsets)


@dataclass(frozen=True)
class Write:
    """A memory written. A rewrite of an existing memory folds into it (write_count + 1, importance
    the larger); when its content hash differs, the content is replaced (an update).

    Attributes:
        at: event time of the write.
        importance: the resolved write-time importance.
        memory_type: the writer's tier, or None to classify by importance.
        summary_of: for a summary memory, the ids it compresses.
        session_id, agent_id, user_id: the writer's scope (see :class:`MemoryState`).
        supersedes: the memory this write is a new version of (an update through the API); a
            version deleted or forgotten since is not made again by it (:func:`memcore.apply`).
    """

    tenant_id: str
    memory_id: str
    content_hash: str
    at: datetime
    importance: ImportanceDecision
    memory_type: Tier | None = None
    session_id: str | None = None
    agent_id: str | None = None
    user_id: str | None = None
    tags: tuple[str, ...] = ()
    relations: tuple[str, ...] = ()
    summary_of: tuple[str, ...] = ()
    supersedes: str | None = None
    position: Position | None = None


@dataclass(frozen=True)
class Access:
    """One access: a recall hit, a get, or an explicit access from an app."""

    at: datetime
    kind: AccessKind = AccessKind.EXPLICIT
    position: Position | None = None


@dataclass(frozen=True)
class Absorb:
    """A survivor takes over the counters of one memory merged into it. Idempotent: a source
    already in the survivor's ``merged_from`` is not absorbed again.

    Attributes:
        source: id of the merged memory.
        access_count, recall_count, write_count: its counters, added to the survivor's.
        importance: its importance; the survivor keeps the larger.
        last_access: its last access; the survivor keeps the later (a duplicate used yesterday
            merged into one idle for months would otherwise leave it to fade). None: not known.
        tags: its tags; the survivor's are kept and these added after them, up to ``MAX_TAGS``
            (a recall filtered by a tag only the duplicate had would otherwise find neither).
        tier: its tier; the survivor moves up to it (with that tier's τ), never down: a fact
            written as semantic that duplicates an older episodic copy stays semantic. None:
            not known (the survivor keeps its own).
        content_hash: the source's content hash as planned, carried on to the source's
            ``Retire`` (:func:`memcore.consolidation.merged_away`), which its survivor sends once
            it took the absorb. None: not known.
        relations: its relations (memory ids); the survivor adds them after its own, up to
            ``MAX_RELATIONS``, but for itself and the source (graph proximity lost the
            duplicate's links once it was purged).
        target_hash: the survivor's content hash as planned: a survivor rewritten with other
            words since absorbs nothing, and the source is kept (retired, its words would be in
            no active memory). None: not known (an absorb planned before it carried it), taken
            whatever the survivor says.
    """

    at: datetime
    source: str
    access_count: int
    recall_count: int
    write_count: int
    importance: float
    reason: str
    last_access: datetime | None = None
    tags: tuple[str, ...] = ()
    position: Position | None = None
    tier: Tier | None = None
    content_hash: str | None = None
    relations: tuple[str, ...] = ()
    target_hash: str | None = None


@dataclass(frozen=True)
class Retire:
    """Move a memory out of recall: archived (kept), forgotten (soft delete) or deleted (tombstone).

    ``content_hash``: what the memory said when the decision was planned (consolidation's merges
    and summaries); a memory rewritten with other words since is left as it is (its new words
    are in no survivor or summary). None: retire whatever it says (a user's delete).
    """

    at: datetime
    to: Lifecycle
    reason: str
    merged_into: str | None = None
    content_hash: str | None = None
    position: Position | None = None


@dataclass(frozen=True)
class Fade:
    """The archive sweep's decision for one memory: archive it if it is due by ``at``
    (:func:`memcore.decay.sweep_archive_reason`). The gate is decided again on the state the event
    meets (an access applied in between keeps the memory), so a stale plan never archives a
    memory in use.
    """

    at: datetime
    reason: str
    position: Position | None = None


@dataclass(frozen=True)
class Supersede:
    """A newer memory (``by``, written at ``at``) states a newer value of the same fact: this one
    is valid until ``at``. Kept for history and audit; current recall no longer returns it.
    A memory superseded already keeps its successor; what the new version is passed on to
    chain the versions in time order is :func:`memcore.reducer.relink`'s, and what a deleted or
    forgotten memory passes on to the versions it superseded :func:`memcore.reducer.bypass`'s.

    Attributes:
        chains: the versions state one fact each and are chained (False: the LLM's decision,
            for which the earliest supersession wins and nothing is passed on).
        replaces: set by :func:`memcore.reducer.relink` and :func:`memcore.reducer.bypass`
            only: the successor this memory had when the decision was passed on (an earlier
            version than ``by``, or one deleted or forgotten since); while it still has it,
            ``by`` takes its place.
        hops: how many times this decision was passed along a chain of versions; a chain is
            followed at most :data:`MAX_RELINKS` times.
    """

    at: datetime
    by: str
    reason: str
    hops: int = 0
    chains: bool = True
    replaces: str | None = None
    position: Position | None = None


@dataclass(frozen=True)
class Promote:
    """Tier consolidation: move exactly one tier up."""

    at: datetime
    to: Tier
    reason: str
    position: Position | None = None


@dataclass(frozen=True)
class Purge:
    """Remove a forgotten or deleted memory from the serving store (the log keeps its history).

    ``state_changed_at``: when the memory was forgotten or deleted as the plan saw it (the
    retention window was judged from it); a memory whose state changed since (written again,
    then deleted again inside the window) is left as it is. None: purge it whatever its state's
    time (a purge through the API, one planned before it carried the time).

    ``erase``: the memory is a duplicate a merge deleted into a survivor, which holds its words
    (:func:`memcore.consolidation.purge_erases`): the worker that purges it also erases the
    data key of its stored document, so that its sealed write in the log opens no more (once
    its row is gone, erasing the survivor could not find it). The reducer's decision is the same.
    """

    at: datetime
    reason: str
    position: Position | None = None
    state_changed_at: datetime | None = None
    erase: bool = False


@dataclass(frozen=True)
class Succeeds:
    """This memory superseded ``predecessor`` (from ``at``, the predecessor's ``valid_to``): it
    records it in ``predecessors``, so that it can reinstate it when it leaves recall. Sent by the
    predecessor once a supersession (or a reinstate's pass-on) made this memory its successor
    (:func:`memcore.reducer.succession`). A memory deleted or forgotten records nothing: the
    predecessor is sent a ``reinstate`` at once.

    Attributes:
        hops: how many reinstates passed this supersession on before it (bounded by
            :data:`MAX_RELINKS`, against versions deleted in a cycle).
        recheck: asked by a consolidation's recheck (:func:`memcore.orphaned_versions`) of a
            version the store shows superseded by this memory: the worker answers one for a
            memory its tables do not hold with a ``reinstate`` too. Any other ``succeeds`` for
            an unknown memory may have overtaken its write, and changes nothing.
    """

    at: datetime
    predecessor: str
    reason: str
    hops: int = 0
    recheck: bool = False
    position: Position | None = None


@dataclass(frozen=True)
class Reinstate:
    """The successor ``by`` that superseded this memory left recall (deleted, forgotten, purged,
    erased): forgetting never costs recall (SPEC section 6, rule zero), so this memory is current
    again, or, when ``by`` had a successor of its own, superseded by that one instead. Ignored
    by a memory superseded by another than ``by`` (relinked, rewritten since) and by one deleted
    or forgotten itself.

    Attributes:
        successor: what stands in for ``by``: the version that superseded it, or the survivor it
            was merged into (which holds its words). None: nothing; this memory is current again.
        successor_at: when ``successor`` superseded ``by`` (this memory's ``valid_to`` moves to
            it, as if ``by`` had never been); None: ``valid_to`` is kept (a merge's survivor).
        hops: how many reinstates were passed on before this one; at :data:`MAX_RELINKS`, this
            memory is made current instead of passed on again.
    """

    at: datetime
    by: str
    reason: str
    successor: str | None = None
    successor_at: datetime | None = None
    hops: int = 0
    position: Position | None = None


@dataclass(frozen=True)
class Restore:
    """The summary ``by`` this memory was compressed into (archived, ``merged_into``) was not
    kept: refused, or erased with a memory it quoted. Forgetting never costs recall (SPEC section
    6, rule zero): the memory is active again. Ignored by a memory archived into another summary,
    or not archived (restored by an access since, or deleted).
    """

    at: datetime
    by: str
    reason: str
    position: Position | None = None


Event = (
    Write
    | Access
    | Absorb
    | Retire
    | Fade
    | Supersede
    | Promote
    | Purge
    | Succeeds
    | Reinstate
    | Restore
)


class EffectKind(StrEnum):
    """What the reducer did; each effect becomes an audit record."""

    CREATED = "created"
    FOLDED = "folded"
    UPDATED = "updated"
    REVIVED = "revived"
    ACCESSED = "accessed"
    REVIEWED = "reviewed"
    PROMOTED = "promoted"
    RESCHEDULED = "rescheduled"
    ARCHIVED = "archived"
    FORGOTTEN = "forgotten"
    DELETED = "deleted"
    ABSORBED = "absorbed"
    PURGED = "purged"
    SUPERSEDED = "superseded"
    REASSERTED = "reasserted"
    SUCCEEDS = "succeeds"
    REINSTATED = "reinstated"
    SKIPPED = "skipped"
    IGNORED = "ignored"


@dataclass(frozen=True)
class Effect:
    """One thing the reducer did, with the reason in words (for audit)."""

    kind: EffectKind
    reason: str
