"""The one reducer: ``apply(state, event, policy) -> (new_state, effects)``.

Pure and total over valid events: the same state, event and policy always give the same result,
and only the event's own time is used. An event whose position is at or below the last offset
applied from its source changes nothing (at-least-once delivery is safe).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from memcore import card as cards
from memcore.decay import classify_tier, recency_at, sweep_archive_reason
from memcore.policy import LifecyclePreset, Policy
from memcore.state import (
    MAX_PREDECESSORS,
    MAX_RELATIONS,
    MAX_RELINKS,
    MAX_SUMMARIES,
    MAX_TAGS,
    Absorb,
    Access,
    Effect,
    EffectKind,
    Event,
    Fade,
    MemoryState,
    Promote,
    Purge,
    Reinstate,
    Restore,
    Retire,
    Succeeds,
    Supersede,
    Write,
    absorbed_relations,
    absorbed_tags,
)
from memcore.supersession import GONE, SUPERSEDABLE, Supersession
from memcore.types import AccessKind, Lifecycle, Tier, hours_span

Result = tuple[MemoryState | None, tuple[Effect, ...]]
"""The new state (None only while a memory was never written) and the effects, in order."""

_RETIRE_EFFECT = {
    Lifecycle.ARCHIVED: EffectKind.ARCHIVED,
    Lifecycle.FORGOTTEN: EffectKind.FORGOTTEN,
    Lifecycle.DELETED: EffectKind.DELETED,
}


def apply(state: MemoryState | None, event: Event, policy: Policy) -> Result:
    """Apply one event to one memory's state.

    ``state`` is None for a memory never written. Returns the whole new state and the effects, in
    order. Events for unknown or inactive memories are ignored with a
    reason, never raised: the worker must not crash on input.
    """
    position = event.position
    if state is not None and position is not None:
        last = state.last_offset(position.source)
        if last is not None and position.offset <= last:
            reason = f"redelivered: offset {position.offset} <= applied {last} of {position.source}"
            return state, (Effect(EffectKind.SKIPPED, reason),)
    new_state, effects = _dispatch(state, event, policy)
    if new_state is not None:
        new_state = new_state.at_position(position)
    return new_state, effects


def _dispatch(state: MemoryState | None, event: Event, policy: Policy) -> Result:
    if isinstance(event, Write):
        return _write(state, event, policy)
    if state is None:
        return None, (Effect(EffectKind.IGNORED, "unknown memory"),)
    if isinstance(event, Access):
        return _access(state, event, policy)
    if isinstance(event, Absorb):
        return _absorb(state, event, policy)
    if isinstance(event, Retire):
        return _retire(state, event)
    if isinstance(event, Fade):
        return _fade(state, event, policy)
    if isinstance(event, Supersede):
        return _supersede(state, event)
    if isinstance(event, Promote):
        return _promote(state, event, policy)
    if isinstance(event, Succeeds):
        return _succeeds(state, event)
    if isinstance(event, Reinstate):
        return _reinstate(state, event)
    if isinstance(event, Restore):
        return _restore(state, event)
    return _purge(state, event)


def create(event: Write, policy: Policy) -> MemoryState:
    """The state of a newly written memory: tier, τ and review card from its importance."""
    importance = event.importance.score
    tier = event.memory_type or classify_tier(importance, policy.tiers)
    return MemoryState(
        tenant_id=event.tenant_id,
        memory_id=event.memory_id,
        content_hash=event.content_hash,
        tier=tier,
        importance=importance,
        importance_source=event.importance.source,
        state=Lifecycle.ACTIVE,
        created_at=event.at,
        last_access=event.at,
        state_changed_at=event.at,
        card=cards.new_card(event.at, importance, policy.review),
        tau_hours=policy.decay.tau_hours(tier),
        session_id=event.session_id,
        agent_id=event.agent_id,
        user_id=event.user_id,
        tags=event.tags[-MAX_TAGS:],
        relations=event.relations[-MAX_RELATIONS:],
        summary_of=event.summary_of,
    )


def version_left(state: MemoryState | None, supersedes: str | None) -> bool:
    """An update's write (naming the memory it ``supersedes``) meets its version out of recall
    (deleted or forgotten since; purged too): the same update sent again, which does not make
    the version anew (the user's delete stands). The worker then skips its embedding too.
    """
    return supersedes is not None and state is not None and state.state in GONE


SCOPE_FIELDS = ("user_id", "agent_id", "session_id")
"""A memory's scope, in the order :func:`another_scope` compares it."""

Scope = tuple[str | None, str | None, str | None]
"""``(user_id, agent_id, session_id)``; None or "" for none."""


class Scoped(Protocol):
    """What holds a scope: a memory's state, a write, a stored row."""

    @property
    def user_id(self) -> str | None: ...
    @property
    def agent_id(self) -> str | None: ...
    @property
    def session_id(self) -> str | None: ...


def scope_of(holder: Scoped) -> Scope:
    """The scope a memory holds, or a write gives it, in :data:`SCOPE_FIELDS` order."""
    return (holder.user_id, holder.agent_id, holder.session_id)


def another_scope(kept: Scope, written: Scope) -> str | None:
    """The first of :data:`SCOPE_FIELDS` in which a write naming a memory of scope ``kept``
    gives it another (none, or an empty one, counts as one), or None when they agree:
    :func:`write_refused`'s rule, which the API applies first.
    """
    for name, was, given in zip(SCOPE_FIELDS, kept, written, strict=True):
        if (was or None) != (given or None):
            return name
    return None


def write_refused(state: MemoryState | None, event: Write) -> str | None:
    """Why ``event`` is not applied to ``state`` (None: it is).

    The reducer ignores such a write (audited); the worker skips the embedding of the first
    kind only (a deletion earlier in its batch may free an id for the second).

    - :func:`version_left`: an update sent again after its version left recall;
    - another scope: a memory not deleted, of a ``user_id``, ``agent_id`` or ``session_id``
      other than the write's (none, or an empty one, counts as one). Its words would stand
      under the first scope: another user's words returned by the first user's recall and
      never by the writer's (a caller-chosen id given to two users' memories); a session's
      words found under another session, whose end would not promote them. The memory stays
      as it was (an update, ``PATCH``, writes a version under another scope). The API refuses
      such a write first (409) when it sees the memory; this is the rule for one it did not
      see yet.
    """
    if state is None:
        return None
    if version_left(state, event.supersedes):
        return f"an update of {event.supersedes} made it, and it is {state.state} since: not again"
    if state.state is Lifecycle.DELETED:
        return None
    field = another_scope(scope_of(state), scope_of(event))
    if field is not None:
        return f"written with another {field} than the memory's: a memory's scope is kept"
    return None


def _write(state: MemoryState | None, event: Write, policy: Policy) -> Result:
    why = write_refused(state, event)
    if state is not None and why is not None:
        return state, (Effect(EffectKind.IGNORED, why),)
    if state is None or state.state is Lifecycle.DELETED:
        new = create(event, policy)
        if state is not None:
            # a write after deletion starts afresh; applied offsets carry over, and the count of
            # writes goes on: readers order a memory's versions by it (a hot cache holding the
            # deleted row must see the new one as newer, not as an older version)
            new = dataclasses.replace(new, offsets=state.offsets, write_count=state.write_count + 1)
        why = f"{new.tier} by importance {new.importance:.4g} ({event.importance.reason})"
        if event.memory_type is not None:  # the writer chose the tier, not the importance
            why = (
                f"{new.tier} as written (memory_type); importance {new.importance:.4g} "
                f"({event.importance.reason})"
            )
        if event.supersedes is not None:  # an update: the API wrote the old one's unless given
            why = (
                f"{new.tier}, importance {new.importance:.4g}: the version of"
                f" {event.supersedes} (its tier and importance where the update gave none)"
            )
        return new, (Effect(EffectKind.CREATED, why),)
    if (
        event.summary_of
        and event.summary_of == state.summary_of
        and event.content_hash == state.content_hash
        and state.state is Lifecycle.ACTIVE
    ):  # one archived or forgotten since is brought back: its sources were archived into it again
        return state, (Effect(EffectKind.IGNORED, "this summary exists already"),)
    stronger = event.importance.score > state.importance
    changed = event.content_hash != state.content_hash
    folded = dataclasses.replace(
        state,
        content_hash=event.content_hash,
        write_count=state.write_count + 1,
        importance=event.importance.score if stronger else state.importance,
        importance_source=event.importance.source if stronger else state.importance_source,
        tags=_union(state.tags, event.tags, MAX_TAGS),
        relations=_union(state.relations, event.relations, MAX_RELATIONS),
        stated_at=_restated(state, event.at),
        reasserted_over=None,  # set below when this write makes it current again
    )
    effects = [
        Effect(EffectKind.UPDATED, f"content replaced by write #{folded.write_count}")
        if changed
        else Effect(EffectKind.FOLDED, f"identical rewrite #{folded.write_count}")
    ]
    written_as = event.memory_type
    if written_as is not None and written_as.rank > state.tier.rank:
        # the tier the writer states, up only (as a merge's survivor takes its source's); a
        # higher importance alone leaves the tier to the next access's promote gate
        folded = dataclasses.replace(
            folded,
            tier=written_as,
            tau_hours=policy.decay.tau_hours(written_as),
            card=cards.rescheduled(
                folded.card, max(folded.last_access, event.at), folded.importance, policy.review
            ),
        )
        why = f"{state.tier} -> {written_as}: written again as {written_as}"
        effects.append(Effect(EffectKind.PROMOTED, why))
    if state.state is not Lifecycle.ACTIVE:
        # the decay clock restarts at the revival, never earlier than the last access (a
        # backdated rewrite that arrives late must not age the memory)
        revived_at = max(state.last_access, event.at)
        folded = dataclasses.replace(
            folded, state=Lifecycle.ACTIVE, last_access=revived_at, state_changed_at=event.at
        )
        effects.append(Effect(EffectKind.REVIVED, f"rewritten while {state.state}"))
    if state.valid_to is not None and event.at >= state.valid_to:
        folded = dataclasses.replace(
            folded, valid_to=None, superseded_by=None, reasserted_over=state.superseded_by
        )
        why = f"written again after {state.superseded_by} superseded it: current again"
        effects.append(Effect(EffectKind.REASSERTED, why))
    return folded, tuple(effects)


def _restated(state: MemoryState, at: datetime) -> datetime | None:
    """``stated_at`` after a write at ``at``: the latest statement (None while the creation)."""
    latest = max(state.stated_at or state.created_at, at)
    return latest if latest > state.created_at else None


def _access(state: MemoryState, event: Access, policy: Policy) -> Result:
    if policy.lifecycle.preset is LifecyclePreset.POWERMEM:
        if state.state is not Lifecycle.ACTIVE:
            return state, (Effect(EffectKind.IGNORED, f"access to a {state.state} memory"),)
        return _access_powermem(state, event, policy)
    return _access_default(state, event, policy)


def _access_default(state: MemoryState, event: Access, policy: Policy) -> Result:
    """SPEC section 5, ``default``: an access never archives; an archived memory was needed, so
    it is restored to ``active`` first and then counts. Forgotten and deleted ones ignore an
    access dated after they left ``active``.

    An access dated before the memory left ``active`` (``state_changed_at``) counts as it would
    have then (promotion included), and the memory stays where it is: accesses and decisions
    come on two topics read apart, and a replay (or a lagging access agent) meets them in
    another order than live.
    """
    if state.state is not Lifecycle.ACTIVE and event.at < state.state_changed_at:
        counted, told = _access_default(
            dataclasses.replace(state, state=Lifecycle.ACTIVE), event, policy
        )  # an active memory's access never retires it: its lifecycle fields stay as they were
        assert counted is not None
        return dataclasses.replace(counted, state=state.state), told
    rules = policy.lifecycle
    revived: list[Effect] = []
    if state.state is Lifecycle.ARCHIVED:
        state = _retired(state, Lifecycle.ACTIVE, event)
        revived.append(Effect(EffectKind.REVIVED, f"{event.kind} access to an archived memory"))
    elif state.state is not Lifecycle.ACTIVE:
        return state, (Effect(EffectKind.IGNORED, f"access to a {state.state} memory"),)
    new, effects = _touch(state, event, policy)
    effects = [*revived, *effects]
    if new.tier is not Tier.SEMANTIC and (
        new.access_count >= rules.promote_min_access_count
        or new.importance > rules.promote_above_importance
    ):
        why = (
            f"access_count {new.access_count} >= {rules.promote_min_access_count}"
            if new.access_count >= rules.promote_min_access_count
            else f"importance {new.importance:.4g} > {rules.promote_above_importance}"
        )
        new = dataclasses.replace(new, tier=new.tier.promoted())
        effects.append(Effect(EffectKind.PROMOTED, f"{state.tier} -> {new.tier}: {why}"))
    return _maybe_recompute(state, new, policy, effects)


def _access_powermem(state: MemoryState, event: Access, policy: Policy) -> Result:
    rules = policy.lifecycle
    age = event.at - state.created_at
    rec = recency_at(state.last_access, event.at, state.tau_hours)
    forget_why = None
    if rec < rules.forget_below_recency:
        forget_why = f"recency {rec:.4g} < {rules.forget_below_recency}"
    elif state.access_count == 0 and age > hours_span(rules.forget_unaccessed_after_hours):
        forget_why = f"never accessed in {rules.forget_unaccessed_after_hours:g} h"
    if forget_why is not None:
        forgotten = _retired(state, Lifecycle.FORGOTTEN, event)
        return forgotten, (Effect(EffectKind.FORGOTTEN, forget_why),)
    promote_why = _powermem_promote_reason(state, age, policy)
    archive_why = None
    if age > hours_span(rules.archive_after_hours):
        archive_why = f"age > {rules.archive_after_hours:g} h"
    elif state.importance < rules.archive_below_importance:
        archive_why = f"importance {state.importance:.4g} < {rules.archive_below_importance}"
    new, effects = _touch(state, event, policy)
    if promote_why is not None and new.tier is not Tier.SEMANTIC:
        new = dataclasses.replace(new, tier=new.tier.promoted())
        effects.append(Effect(EffectKind.PROMOTED, f"{state.tier} -> {new.tier}: {promote_why}"))
    new, effects_tuple = _maybe_recompute(state, new, policy, effects)
    if archive_why is not None:
        new = _retired(new, Lifecycle.ARCHIVED, event)
        effects_tuple = (*effects_tuple, Effect(EffectKind.ARCHIVED, archive_why))
    return new, effects_tuple


def _powermem_promote_reason(state: MemoryState, age: timedelta, policy: Policy) -> str | None:
    rules = policy.lifecycle
    if state.access_count >= rules.promote_min_access_count:
        return f"access_count {state.access_count} >= {rules.promote_min_access_count}"
    if age > hours_span(rules.promote_after_hours):
        return f"age > {rules.promote_after_hours:g} h"
    if state.importance >= rules.promote_min_importance:
        return f"importance {state.importance:.4g} >= {rules.promote_min_importance}"
    return None


def settle(value: float) -> float:
    """Round a sum of increments to 12 places, so that 0.65 + 0.05 compares equal to 0.7 at a gate
    (binary floats would make it 0.7000000000000001 and cross a strict threshold).
    """
    return round(value, 12)


def _touch(state: MemoryState, event: Access, policy: Policy) -> tuple[MemoryState, list[Effect]]:
    """Steps 1-3 of an access: counters and clock, auto-boost, review when due."""
    recall = event.kind is AccessKind.RECALL
    new = dataclasses.replace(
        state,
        access_count=state.access_count + 1,
        recall_count=state.recall_count + (1 if recall else 0),
        last_access=max(state.last_access, event.at),
        importance=settle(min(1.0, state.importance + policy.lifecycle.auto_boost)),
    )
    effects = [Effect(EffectKind.ACCESSED, f"{event.kind} access #{new.access_count}")]
    if cards.is_due(state.card, event.at):
        new = dataclasses.replace(new, card=cards.reviewed(state.card, policy.review))
        effects.append(
            Effect(
                EffectKind.REVIEWED,
                f"review #{new.card.review_count}: retention {new.card.retention:.4g}",
            )
        )
    return new, effects


def _maybe_recompute(
    before: MemoryState,
    new: MemoryState,
    policy: Policy,
    effects: list[Effect],
) -> tuple[MemoryState, tuple[Effect, ...]]:
    """Step 5: every n-th access or on a tier change, τ and the review schedule start from now:
    the latest access (``new.last_access``), so that an access that arrives after a later one
    (out of order within its partition) never moves the schedule back.
    """
    tier_changed = new.tier is not before.tier
    nth = new.access_count % policy.lifecycle.recompute_every == 0
    if tier_changed or nth:
        new = dataclasses.replace(
            new,
            tau_hours=policy.decay.tau_hours(new.tier),
            card=cards.rescheduled(new.card, new.last_access, new.importance, policy.review),
        )
        why = "tier change" if tier_changed else f"access #{new.access_count}"
        effects.append(Effect(EffectKind.RESCHEDULED, f"{why}: tau {new.tau_hours:g} h"))
    return new, tuple(effects)


def _retired(
    state: MemoryState, to: Lifecycle, event: Access | Retire | Fade | Restore
) -> MemoryState:
    """``state`` moved to ``to`` at the event's time; back to active, it is archived into no
    summary (an access or a restore brought it back: a restore for the summary it was archived
    into changes nothing), though summaries may still hold its words (``summarised_in``).
    """
    if to is Lifecycle.ACTIVE:
        return dataclasses.replace(state, state=to, state_changed_at=event.at, merged_into=None)
    return dataclasses.replace(state, state=to, state_changed_at=event.at)


def _absorb(state: MemoryState, event: Absorb, policy: Policy) -> Result:
    if event.source in state.merged_from:
        return state, (Effect(EffectKind.IGNORED, f"{event.source} already absorbed"),)
    if state.state in GONE:  # since the plan
        why = f"a {state.state} memory absorbs nothing ({event.source} is kept)"
        return state, (Effect(EffectKind.IGNORED, why),)
    if event.target_hash is not None and event.target_hash != state.content_hash:
        # its words are no longer the duplicate's: retired, the source's would be in no memory
        why = f"rewritten with other words since the merge was planned ({event.source} is kept)"
        return state, (Effect(EffectKind.IGNORED, why),)
    new = dataclasses.replace(
        state,
        access_count=state.access_count + event.access_count,
        recall_count=state.recall_count + event.recall_count,
        write_count=state.write_count + event.write_count,
        importance=max(state.importance, event.importance),
        last_access=max(state.last_access, event.last_access or state.last_access),
        tags=absorbed_tags(state.tags, event.tags),
        relations=absorbed_relations(
            state.relations, event.relations, state.memory_id, event.source, *state.merged_from
        ),
        merged_from=(*state.merged_from, event.source),
    )
    effects = [Effect(EffectKind.ABSORBED, f"{event.reason}: {event.source}")]
    if event.tier is not None and event.tier.rank > state.tier.rank:
        new = dataclasses.replace(
            new,
            tier=event.tier,
            tau_hours=policy.decay.tau_hours(event.tier),
            card=cards.rescheduled(new.card, event.at, new.importance, policy.review),
        )
        why = f"{state.tier} -> {event.tier}: the tier of {event.source}, merged into it"
        effects.append(Effect(EffectKind.PROMOTED, why))
    return new, tuple(effects)


_RETIRED_ORDER = (Lifecycle.ACTIVE, Lifecycle.ARCHIVED, Lifecycle.FORGOTTEN, Lifecycle.DELETED)
"""Retiring only moves a memory forward in this order: a decision planned before a memory was
forgotten or deleted (consolidation archives a summary's sources) never brings it back."""


def _retire(state: MemoryState, event: Retire) -> Result:
    if state.state is event.to:
        return state, (Effect(EffectKind.IGNORED, f"already {state.state}"),)
    if _RETIRED_ORDER.index(event.to) < _RETIRED_ORDER.index(state.state):
        why = f"a {state.state} memory is not moved back to {event.to} ({event.reason})"
        return state, (Effect(EffectKind.IGNORED, why),)
    if event.content_hash is not None and event.content_hash != state.content_hash:
        why = f"rewritten with other words since it was planned ({event.reason})"
        return state, (Effect(EffectKind.IGNORED, why),)
    new = dataclasses.replace(
        _retired(state, event.to, event),
        merged_into=event.merged_into or state.merged_into,
    )
    if event.to is Lifecycle.ARCHIVED and event.merged_into:  # compressed into a summary
        held = (*(s for s in state.summarised_in if s != event.merged_into), event.merged_into)
        new = dataclasses.replace(new, summarised_in=held[-MAX_SUMMARIES:])
    return new, (Effect(_RETIRE_EFFECT[event.to], event.reason),)


def _fade(state: MemoryState, event: Fade, policy: Policy) -> Result:
    if state.state is not Lifecycle.ACTIVE:
        return state, (Effect(EffectKind.IGNORED, f"already {state.state}"),)
    why = sweep_archive_reason(
        state.importance, state.last_access, state.tau_hours, event.at, policy.lifecycle
    )
    if why is None:
        return state, (Effect(EffectKind.IGNORED, f"{event.reason}, but not due any more"),)
    new = _retired(state, Lifecycle.ARCHIVED, event)
    return new, (Effect(EffectKind.ARCHIVED, f"{event.reason}: {why}"),)


def _supersede(state: MemoryState, event: Supersede) -> Result:
    if event.by == state.memory_id:
        return state, (Effect(EffectKind.IGNORED, "a memory cannot supersede itself"),)
    if state.state not in SUPERSEDABLE:  # a decision that raced its deletion or merge
        why = f"a {state.state} memory is not superseded (by {event.by})"
        return state, (Effect(EffectKind.IGNORED, why),)
    if event.at < state.created_at:
        why = f"{event.by} is older than this memory: it cannot supersede it"
        return state, (Effect(EffectKind.IGNORED, why),)
    if state.stated_at is not None and event.at <= state.stated_at:
        # written again after the newer version (or at the same instant: the restatement wins
        # a tie, as relink decides it too; else the two would supersede each other): the
        # restatement is newer still (relink has that version superseded by this one); a move
        # of the chain's included
        why = f"stated again at {state.stated_at.isoformat()}, after {event.by}"
        return state, (Effect(EffectKind.IGNORED, why),)
    displaces = event.replaces is not None and event.replaces == state.superseded_by
    if state.valid_to is not None and not displaces:
        since = f"{state.superseded_by} at {state.valid_to.isoformat()}"
        if state.valid_to <= event.at:
            return state, (Effect(EffectKind.IGNORED, f"already superseded by {since}"),)
        if event.chains:  # relink puts the earlier version between them
            why = f"superseded by {since}, later than {event.by}: chained before it"
            return state, (Effect(EffectKind.IGNORED, why),)
    new = dataclasses.replace(state, valid_to=event.at, superseded_by=event.by)
    return new, (Effect(EffectKind.SUPERSEDED, f"by {event.by}: {event.reason}"),)


@dataclass(frozen=True)
class Relink:
    """A supersession to pass on so that versions of one fact form one chain in time order.

    Attributes:
        target: id of the memory the decision is for (same tenant).
        event: the ``supersede`` decision for it.
    """

    target: str
    event: Supersede


def relink(state: MemoryState, event: Supersede) -> tuple[Relink, ...]:
    """What a supersession passes on when it meets a memory already superseded by another
    version ``P`` (two updates of one memory that both passed the API's check, an update and
    the rule, a rewritten version and the chain after it): without it both newer versions
    would stay current. ``state`` is the memory before the event (:func:`apply` leaves it as it
    is then).

    The new version ``N`` no older than ``P``: ``P`` is superseded by ``N`` from ``N``'s time.
    ``N`` older than ``P``: ``N`` is superseded by ``P`` from ``P``'s time, and the memory is
    superseded by ``N`` in ``P``'s place (``replaces``). Each is decided on the state it meets,
    so a redelivery passes the same decisions again and their targets ignore the copies.

    A memory stated again after ``N`` or at ``N``'s time (``stated_at``): ``N`` is superseded by
    it from that statement, whatever its successor (:func:`apply` ignores the older
    supersession).

    Nothing is passed on when the memory is not superseded, ``N`` is ``P``, the event is the
    chain's own move or an LLM's decision (``chains`` false), ``N`` is older than the memory,
    or the decision was passed on :data:`MAX_RELINKS` times already. The memory's own state
    does not matter: a deleted version's successor is still the chain's next (what is passed
    past a deleted or forgotten memory to the versions it superseded is :func:`bypass`'s).
    """
    if (
        not event.chains
        or event.by == state.memory_id
        or event.at < state.created_at
        or event.hops >= MAX_RELINKS
    ):
        return ()
    hops = event.hops + 1
    if state.stated_at is not None and event.at <= state.stated_at:  # a tie: as _supersede
        why = f"{state.memory_id} was stated again after it: chained after it"
        return (Relink(event.by, Supersede(state.stated_at, state.memory_id, why, hops)),)
    chained = state.superseded_by
    if chained is None or state.valid_to is None or chained in (event.by, event.replaces):
        return ()
    if state.valid_to <= event.at:
        why = f"{state.memory_id} was superseded by it before {event.by}: chained after it"
        return (Relink(chained, Supersede(event.at, event.by, why, hops)),)
    after = f"{state.memory_id} was superseded by it after {event.by}: chained before it"
    before = f"{event.by} is older than {chained}: chained between them"
    return (
        Relink(event.by, Supersede(state.valid_to, chained, after, hops)),
        Relink(state.memory_id, Supersede(event.at, event.by, before, hops, replaces=chained)),
    )


def bypass(state: MemoryState, event: Supersede) -> tuple[Relink, ...]:
    """What a supersession passes on when it meets a memory ``P`` out of recall (:data:`GONE`),
    which ignores it: the versions ``P`` superseded (``predecessors``), reinstated or about to be
    (:func:`reinstatements`), are superseded by ``N`` (``event.by``) in ``P``'s place
    (``replaces``). Without it a new version ``N`` compared with ``P`` while ``P`` was being
    deleted or forgotten stayed current beside the version ``P``'s reinstate made current again.
    The outcome does not depend on which of the two reaches a predecessor first: reinstated, it is
    then superseded by ``N``; still superseded by ``P``, ``N`` takes ``P``'s place and ``P``'s
    reinstate, no longer its successor's, is ignored. Decided on the state the event met, so a
    redelivery passes the same decisions again and their targets ignore the copies; each
    predecessor ignores what it would ignore from ``N`` directly (older than it, stated again
    since, deleted or forgotten), and :func:`relink` walks on from it.

    Nothing is passed on when ``P`` is in recall, ``N`` is ``P``, the decision was passed on
    :data:`MAX_RELINKS` times already, ``P`` was merged into a survivor (which holds its words:
    the check that found ``P`` found it too, and its predecessors are passed to it), or ``P`` was
    superseded itself no later than ``N`` (:func:`relink` passes ``N`` to that successor, which
    its predecessors are passed to; unless the decision was passed on from that successor, gone
    too), or the decision was passed on from one of ``P``'s own predecessors (versions that
    superseded each other in turn, all gone: passing on again would multiply the decisions at
    every hop). The memory it was passed on from is never passed to again. Unlike
    :func:`relink`, an LLM's decision is passed on too (``chains`` as it came): it replaced the
    words ``P`` stood in for.
    """
    came_from_successor = event.replaces is not None and event.replaces == state.superseded_by
    if (
        state.state not in GONE
        or event.by == state.memory_id
        or event.hops >= MAX_RELINKS
        or state.merged_into is not None
        or (state.valid_to is not None and state.valid_to <= event.at and not came_from_successor)
        or event.replaces in state.predecessors  # versions that superseded each other: a cycle
    ):
        return ()
    gone = state.memory_id
    why = f"{gone}, which it superseded, is {state.state}: passed on from it ({event.reason})"
    passed = Supersede(event.at, event.by, why, event.hops + 1, event.chains, replaces=gone)
    skipped = (gone, event.by, event.replaces)
    return tuple(Relink(p, passed) for p in state.predecessors if p not in skipped)


def superseding(found: Supersession) -> Supersede:
    """The ``supersede`` decision for ``found.older`` (the rule's or the LLM's finding)."""
    return Supersede(found.at, found.newer, found.reason, chains=found.chains)


def reassertion(state: MemoryState, at: datetime) -> Relink | None:
    """The supersession a write at ``at`` sends when it made ``state`` current again over the
    successor that had superseded it (``reasserted_over``): that successor is superseded by this
    memory from the write's time, and :func:`relink` walks on to the chain's current end (for
    any memory: the rule would decide it only for a statement of a fact). Decided on the state
    the write left, so a redelivered or retried write sends it again (a copy is ignored); None
    for any other write.
    """
    if state.reasserted_over is None or state.valid_to is not None or state.stated_at != at:
        return None
    why = f"{state.memory_id} was written again after it superseded it"
    return Relink(state.reasserted_over, Supersede(at, state.memory_id, why))


def versioning(state: MemoryState, supersedes: str | None, at: datetime) -> Relink | None:
    """The ``supersede`` a new version sends the memory it versions, ``supersedes`` (named by its
    write: an update through the API), which is valid until ``at`` (the write's time). Sent by
    the worker once the version's write is applied, so a version that never is (dead-lettered,
    refused, erased first) supersedes nothing and the older memory stays current; decided on
    the state the write left (``state``), so a redelivered or retried write sends it again (the
    older memory ignores a copy) and :func:`relink` chains racing updates in time order. None
    when the write names no memory, names the version itself, or left it out of recall, and
    for a write older than the version's life (``created_at`` after ``at``: deleted, then
    written anew under its id, the update's write met again by offset is not its write).
    """
    if (
        supersedes is None
        or supersedes == state.memory_id
        or state.state in GONE
        or state.created_at > at
    ):
        return None
    why = f"updated through the API by {state.memory_id}"
    return Relink(supersedes, Supersede(at, state.memory_id, why))


def revival(state: MemoryState, at: datetime) -> tuple[Relink, ...]:
    """The supersessions a write at ``at`` sends when it brought ``state`` back from forgotten
    (or archived) and left it current: each of its ``predecessors``, reinstated when it was
    forgotten (:func:`reinstatements`), is superseded by it again from the write's time, and
    :func:`relink` walks on from a predecessor superseded by another version since (for any
    memory: a rewrite with the same words is not checked for supersession). A deleted memory
    written again starts afresh, with no predecessors. Decided on the state the write left (it
    changed the lifecycle state at ``at`` and stated the memory at ``at``), so a redelivered or
    retried write sends them again; a predecessor ignores a copy, and one still superseded by
    this memory (revived from archived, which reinstates nothing) ignores it too. Empty for any
    other write, and for a summary's source (``merged_into``): its predecessors were passed to
    the summary, which holds its sentence, and stay with it.
    """
    if (
        state.state is not Lifecycle.ACTIVE
        or state.merged_into is not None
        or state.valid_to is not None
        or state.state_changed_at != at
        or state.stated_at != at
    ):
        return ()
    why = f"{state.memory_id}, which superseded it, was written again after it left recall"
    passed = Supersede(at, state.memory_id, why)
    return tuple(Relink(p, passed) for p in state.predecessors if p != state.memory_id)


def _succeeds(state: MemoryState, event: Succeeds) -> Result:
    if event.predecessor == state.memory_id:
        return state, (Effect(EffectKind.IGNORED, "a memory cannot supersede itself"),)
    if state.state in GONE:  # :func:`reinstatements` sends the predecessor a reinstate
        why = f"a {state.state} memory supersedes nothing: {event.predecessor} is reinstated"
        return state, (Effect(EffectKind.IGNORED, why),)
    if event.predecessor in state.predecessors:
        return state, (Effect(EffectKind.IGNORED, f"{event.predecessor} already recorded"),)
    kept = (*state.predecessors, event.predecessor)[-MAX_PREDECESSORS:]
    new = dataclasses.replace(state, predecessors=kept)
    return new, (Effect(EffectKind.SUCCEEDS, f"supersedes {event.predecessor}: {event.reason}"),)


def _reinstate(state: MemoryState, event: Reinstate) -> Result:
    if state.state in GONE:
        why = f"a {state.state} memory is not reinstated ({event.by} left recall)"
        return state, (Effect(EffectKind.IGNORED, why),)
    if state.superseded_by != event.by:  # relinked, rewritten or reinstated since: a copy
        now = f"superseded by {state.superseded_by}" if state.superseded_by else "current"
        return state, (Effect(EffectKind.IGNORED, f"{now}, not by {event.by}"),)
    successor = event.successor
    if successor is not None and successor != state.memory_id and event.hops < MAX_RELINKS:
        valid_to = state.valid_to
        if event.successor_at is not None and (valid_to is None or event.successor_at > valid_to):
            valid_to = event.successor_at  # as if the version that left had never been
        new = dataclasses.replace(state, valid_to=valid_to, superseded_by=successor)
        why = f"by {successor}: passed on from {event.by}, which left recall ({event.reason})"
        return new, (Effect(EffectKind.SUPERSEDED, why),)
    new = dataclasses.replace(state, valid_to=None, superseded_by=None)
    why = f"current again: {event.by}, which superseded it, left recall ({event.reason})"
    return new, (Effect(EffectKind.REINSTATED, why),)


@dataclass(frozen=True)
class Notice:
    """A decision a memory's change sends another memory of its tenant (:func:`succession`,
    :func:`reinstatements`, :func:`summary_gone`, :func:`summary_outdated`).

    Attributes:
        target: id of the memory the decision is for.
        event: the decision.
    """

    target: str
    event: Succeeds | Reinstate | Restore | Retire


def succession(state: MemoryState, event: Event, effect: Effect) -> Notice | None:
    """The ``succeeds`` decision for the successor that ``event`` (a ``supersede``, or a
    ``reinstate`` passed on) gave ``state`` (the memory after it, ``effect`` its first effect):
    the successor records this memory among its ``predecessors``. Sent when the supersession
    was applied, and again when the event is met again by offset (its first delivery may have
    died before its decisions were sent; the successor ignores a copy); None otherwise.
    """
    if isinstance(event, Supersede):
        successor, hops = event.by, 0
    elif isinstance(event, Reinstate) and event.successor is not None:
        successor, hops = event.successor, event.hops + 1
    else:
        return None
    if (
        effect.kind not in (EffectKind.SUPERSEDED, EffectKind.SKIPPED)
        or state.superseded_by != successor
        or state.valid_to is None
    ):
        return None
    why = f"{state.memory_id} superseded by it"
    return Notice(successor, Succeeds(state.valid_to, state.memory_id, why, hops))


def reinstatements(
    before: MemoryState, after: MemoryState, event: Event, effect: Effect
) -> tuple[Notice, ...]:
    """The ``reinstate`` decisions a memory sends the versions it superseded once it leaves
    recall: ``after`` (its state after ``event``; ``before``, the one the event met; ``effect``,
    the first effect) is deleted or forgotten, and was not before, or the event was met again
    by offset (its first delivery may have died before its decisions were sent; a reinstated
    predecessor ignores a copy). A ``succeeds`` reaching a memory deleted or forgotten already
    answers its predecessor alone. Each names what stands in for the memory: the survivor it
    was merged into (which holds its words), else the version that superseded it, from when.
    A ``supersede`` that reaches the memory after it left recall is passed to the same versions
    (:func:`bypass`), and a write that brings it back from forgotten supersedes them again
    (:func:`revival`).
    """
    if after.state not in GONE:
        return ()
    hops = 0
    if isinstance(event, Succeeds):
        targets: tuple[str, ...] = (event.predecessor,)
        hops = event.hops
    elif _left_recall(before, after, effect):
        targets = after.predecessors
    else:
        return ()
    successor: str | None = after.merged_into
    since: datetime | None = None
    if successor is None:
        successor, since = after.superseded_by, after.valid_to
    why = f"{after.memory_id} is {after.state}"
    return tuple(
        Notice(target, Reinstate(event.at, after.memory_id, why, successor, since, hops))
        for target in targets
        if target != after.memory_id
    )


def unknown_successor(memory_id: str, event: Event) -> Notice | None:
    """The ``reinstate`` a consolidation's recheck (a ``succeeds`` with ``recheck``) gets back from
    ``memory_id`` when no state of it is held: nothing stands in for it, so its predecessor is
    current again, as when a successor left recall (:func:`reinstatements`). None for any other
    event: a ``succeeds`` sent when a supersession was applied can overtake its successor's write
    (an update's write and its ``supersede`` go to two partitions), and reinstating then would
    leave two versions current.
    """
    if not isinstance(event, Succeeds) or not event.recheck or event.predecessor == memory_id:
        return None
    why = f"{memory_id} is not in the tables"
    return Notice(event.predecessor, Reinstate(event.at, memory_id, why, hops=event.hops))


def _left_recall(before: MemoryState, after: MemoryState, effect: Effect) -> bool:
    """The event (first effect ``effect``) took the memory out of recall (deleted, forgotten),
    or was met again by offset once it had: its first delivery may have died before what the
    memory sends as it leaves was sent (a target ignores a copy).
    """
    return after.state in GONE and (before.state not in GONE or effect.kind is EffectKind.SKIPPED)


def _restore(state: MemoryState, event: Restore) -> Result:
    # the summary is gone: it holds this memory's words no more
    kept = tuple(s for s in state.summarised_in if s != event.by)
    if state.state is not Lifecycle.ARCHIVED or state.merged_into != event.by:
        why = f"a {state.state} memory, not archived into {event.by}, stays as it is"
        return dataclasses.replace(state, summarised_in=kept), (Effect(EffectKind.IGNORED, why),)
    new = dataclasses.replace(_retired(state, Lifecycle.ACTIVE, event), summarised_in=kept)
    return new, (Effect(EffectKind.REVIVED, f"active again: {event.reason}"),)


def unkept_summary(
    summary_id: str, sources: Sequence[str], at: datetime, why: str
) -> tuple[Notice, ...]:
    """The ``restore`` each of ``sources`` gets when the summary ``summary_id`` made of them is
    not kept (refused before it was made, or gone since): consolidation archived them into it,
    and without it their sentences would be recalled only at the archive penalty. A source
    archived into another summary since, brought back by an access, or deleted, ignores it.
    """
    return tuple(Notice(s, Restore(at, summary_id, why)) for s in dict.fromkeys(sources))


def summary_gone(
    before: MemoryState, after: MemoryState, event: Event, effect: Effect
) -> tuple[Notice, ...]:
    """What a summary sends its sources (:func:`unkept_summary`) once it leaves recall
    (:func:`_left_recall`: deleted, forgotten, purged, erased; ``before``/``after``: its state
    around ``event``, ``effect``: the first effect), unless merged into a survivor, which holds
    its words.
    """
    if not after.summary_of or after.merged_into is not None:
        return ()
    if not _left_recall(before, after, effect):
        return ()
    why = f"summary {after.memory_id} is {after.state}"
    return unkept_summary(after.memory_id, after.summary_of, event.at, why)


def summary_outdated(
    before: MemoryState, after: MemoryState, event: Event, effect: Effect
) -> tuple[Notice, ...]:
    """The ``retire`` (deleted) a summary gets once a source archived into it is superseded
    (``before``/``after``: the source's state around ``event``, ``effect``: the first effect):
    it states the source's old words as current beside the newer version. Whichever came
    first, the supersession or the archiving, and whether or not the source left the archive
    since (an access or a rewrite revives it; the summary still holds its words:
    ``summarised_in``); again on a redelivery (the summary ignores a copy). Dated no earlier
    than the source's last change (a backdated supersession must not delete the summary
    before it was made). Deleted, the summary gives its other sources their place back
    (:func:`summary_gone`).
    """
    summaries = _summarised_in(after)
    if not summaries or after.valid_to is None:
        return ()
    if effect.kind is not EffectKind.SKIPPED and before.valid_to is not None:
        summaries = tuple(s for s in summaries if s not in _summarised_in(before))  # told
    why = f"its source {after.memory_id} is superseded by {after.superseded_by}: old words"
    at = max(event.at, after.state_changed_at)
    return tuple(Notice(s, Retire(at, Lifecycle.DELETED, why)) for s in summaries)


def _summarised_in(state: MemoryState) -> tuple[str, ...]:
    """The summaries holding ``state``'s words while it is in recall (a state from before
    ``summarised_in`` was kept: the one it is archived into).
    """
    if state.state in GONE:
        return ()
    if state.summarised_in:
        return state.summarised_in
    archived = state.state is Lifecycle.ARCHIVED and state.merged_into is not None
    return (str(state.merged_into),) if archived else ()


def _promote(state: MemoryState, event: Promote, policy: Policy) -> Result:
    """One tier up; the review schedule starts again from the decision's time, or from the last
    access when that is later (a decision dated before an access applied first: a session's
    end, a plan read with lag), so that no review falls due before it.
    """
    if (
        state.state is not Lifecycle.ACTIVE
        or event.to is not state.tier.promoted()
        or (state.tier is Tier.SEMANTIC)
    ):
        why = f"cannot promote a memory {state.state} and {state.tier} to {event.to}"
        return state, (Effect(EffectKind.IGNORED, why),)
    new = dataclasses.replace(
        state,
        tier=event.to,
        tau_hours=policy.decay.tau_hours(event.to),
        card=cards.rescheduled(
            state.card, max(event.at, state.last_access), state.importance, policy.review
        ),
    )
    return new, (Effect(EffectKind.PROMOTED, f"{state.tier} -> {event.to}: {event.reason}"),)


def _purge(state: MemoryState, event: Purge) -> Result:
    """Purged memories stay as a tombstone (deleted, ``purged``) so redelivered events stay skipped.
    A purge planned for a state that changed since (``state_changed_at``) is ignored: the
    retention window was judged from the earlier change.
    """
    if state.purged:
        return state, (Effect(EffectKind.IGNORED, "already purged"),)
    if state.state not in GONE:
        return state, (Effect(EffectKind.IGNORED, f"cannot purge a {state.state} memory"),)
    planned = event.state_changed_at
    if planned is not None and planned != state.state_changed_at:
        why = (
            f"{state.state} at {state.state_changed_at.isoformat()}, not at"
            f" {planned.isoformat()} as planned: its retention window starts again"
        )
        return state, (Effect(EffectKind.IGNORED, why),)
    new = dataclasses.replace(
        state, state=Lifecycle.DELETED, purged=True, state_changed_at=event.at
    )
    return new, (Effect(EffectKind.PURGED, event.reason),)


def _union(older: tuple[str, ...], newer: tuple[str, ...], cap: int) -> tuple[str, ...]:
    """``older`` then what ``newer`` adds, each once, at most ``cap``: past it the oldest of
    ``older`` that ``newer`` does not repeat are dropped (the newest write's own are kept).
    """
    merged = dict.fromkeys((*older, *newer))
    excess = len(merged) - cap
    if excess > 0:
        restated = set(newer)
        for item in [item for item in merged if item not in restated][:excess]:
            del merged[item]
    return tuple(merged)[-cap:]
