"""Consolidation decisions (SPEC section 7) over given hashes and vectors.

The planner is pure: callers give it the tenant's memories (with vectors) and, for large batches, the
neighbour lists an index found (FAISS range search); :func:`pairwise_neighbours` is the small-scale
reference. Every decision names its target, its sources and its reason, and turns into reducer events
with :func:`to_events`, so consolidation never changes state except through the reducer.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum

from memcore.decay import sweep_archive_reason
from memcore.ids import derive_memory_id
from memcore.policy import Policy
from memcore.state import (
    MAX_SUMMARY_SOURCES,
    Absorb,
    Effect,
    EffectKind,
    Event,
    Fade,
    MemoryState,
    Promote,
    Purge,
    Restore,
    Retire,
    Succeeds,
    absorbed_relations,
    absorbed_tags,
)
from memcore.supersession import GONE, SUPERSEDABLE
from memcore.types import Lifecycle, Tier, hours_span
from memcore.vectors import cosine


class Strategy(StrEnum):
    """The consolidation steps, run in this order."""

    EXACT_DEDUP = "exact_dedup"
    SEMANTIC_DEDUP = "semantic_dedup"
    COMPRESS = "compress"
    TIERS = "tiers"
    ARCHIVE = "archive"
    PURGE = "purge"
    SUCCESSORS = "successors"


ALL_STRATEGIES: tuple[Strategy, ...] = tuple(Strategy)


class DecisionKind(StrEnum):
    """What a decision does."""

    MERGE = "merge"
    SUMMARISE = "summarise"
    PROMOTE = "promote"
    ARCHIVE = "archive"
    PURGE = "purge"
    RECHECK = "recheck"
    RESTORE = "restore"


@dataclass(frozen=True)
class Item:
    """A memory as consolidation sees it.

    Attributes:
        memory_id: id within the tenant.
        content_hash: hash of the normalised content.
        vector: embedding (any dimension, the same for all items).
        created_at, last_access, state_changed_at: event times.
        tier, state, importance, tau_hours: as in the memory state.
        access_count, recall_count, write_count: counters that merges add up.
        scope: the writer's ``(agent_id, session_id, user_id)`` ("" for none): memories of
            different scopes are never merged or summarised together.
        superseded: a newer memory has superseded it (``valid_to`` set, SPEC section 6): it is
            kept as it is for history and audit, never merged or summarised.
        superseded_by: id of that newer memory ("" while current or unknown).
        valid_to: when it was superseded (None while current).
        tags: the writer's tags (a merge's survivor takes its sources').
        fact: the content states one fact the supersession rule reads
            (:func:`memcore.supersession.states_fact`): compression leaves it as it is, so that a
            later statement of the fact supersedes it (a summary stating the old value would
            stay current beside the new one).
        relations: the writer's links to other memories (ids); a merge's survivor and a
            summary take their sources'.
        merged_into: the summary it was archived into, or the survivor it was merged into
            ("" for neither).
        summary_of: for a summary, the ids of the memories it compresses (a memory merged into
            it and not among them is a duplicate, :func:`merged_duplicate`).
        claims: what near-identical wording may still differ in (:func:`claims_of`): a near
            duplicate is merged only into a memory with the same.
        chars: the length of its content (characters; 0 unknown): a summary holds at most
            :data:`SUMMARY_MAX_CHARS` of its sources' words.
        context_hash: hash of the writer's ``context`` ("" for none): a duplicate is merged
            only into a memory with the same (the same words said on another day are another
            memory, found by that day's words).
    """

    memory_id: str
    content_hash: str
    vector: tuple[float, ...]
    created_at: datetime
    last_access: datetime
    state_changed_at: datetime
    tier: Tier
    state: Lifecycle
    importance: float
    tau_hours: float
    access_count: int = 0
    recall_count: int = 0
    write_count: int = 1
    scope: tuple[str, str, str] = ("", "", "")
    superseded: bool = False
    tags: tuple[str, ...] = ()
    fact: bool = False
    relations: tuple[str, ...] = ()
    superseded_by: str = ""
    valid_to: datetime | None = None
    merged_into: str = ""
    summary_of: tuple[str, ...] = ()
    claims: tuple[str, ...] = ()
    context_hash: str = ""
    chars: int = 0


SUMMARY_MAX_CHARS = 1000
"""The longest summary written without an LLM (characters): a cluster is cut into parts whose
sources' words all fit, so no source is archived into a summary that leaves its words out."""


_NUMBER = re.compile(r"\d+(?:[.:,/-]\d+)*(?:\s*(?:am|pm)\b)?")
_SEPARATOR = re.compile(r"[.:,/-]")
_WORDS = re.compile(
    r"\b(?:zero|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|twenty|hundred"
    r"|thousand|million|half|once|twice|jan(?:uary)?|feb(?:ruary)?|march|apr(?:il)?|may|june?"
    r"|july?|aug(?:ust)?|sept?(?:ember)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?|monday"
    r"|tuesday|wednesday|thursday|friday|saturday|sunday|today|tomorrow|yesterday)\b"
)
_DENIAL = re.compile(
    r"\b(?:no longer|not|never|no(?!\.?\s*\d)|none|nothing|nobody|neither|nor|without)\b"
)
_NOT = re.compile(r"\bcannot\b|n't\b")


def claims_of(content: str) -> tuple[str, ...]:
    """The numbers (amounts, dates, times with am/pm; number, month and day words) and the
    denials of ``content``, sorted: texts an embedding puts within a near duplicate's cosine
    (0.96-0.99 for "is allergic" and "is not allergic", "at 3pm" and "at 4pm", "May 5" and
    "June 5") that say something else. Case, spacing, a curly apostrophe and a time's separator
    ("9.15", "9:15") aside, and "n't" and "cannot" are "not"; "No. 5" is a number, no denial.
    """
    text = _NOT.sub(" not", content.lower().replace("\u2019", "'"))
    numbers = [_SEPARATOR.sub(":", "".join(m.group(0).split())) for m in _NUMBER.finditer(text)]
    words = [m.group(0) for m in (*_WORDS.finditer(text), *_DENIAL.finditer(text))]
    return tuple(sorted((*numbers, *words)))


@dataclass(frozen=True)
class Decision:
    """One consolidation decision.

    Attributes:
        kind: what it does.
        target: the survivor (merge), the new summary's id (summarise), else the memory itself
            (for a recheck, the superseded memory; its ``succeeds`` goes to its successor).
        sources: the memories folded into or compressed by the target; empty otherwise.
        reason: why, in words, with the numbers that decided it.
        to_tier: the new tier of a promotion.
        erase: a purge that also erases the memory's data key (:func:`purge_erases`).
    """

    kind: DecisionKind
    target: str
    sources: tuple[str, ...]
    reason: str
    to_tier: Tier | None = None
    erase: bool = False


Neighbours = Mapping[str, Iterable[str]]
"""For each memory id, the ids of the memories at or above a cosine threshold from it."""


def age_order(items: Iterable[Item]) -> list[Item]:
    """Oldest first; ties by memory id. Survivors are always the oldest of their group."""
    return sorted(items, key=lambda i: (i.created_at, i.memory_id))


def pairwise_neighbours(items: Sequence[Item], min_cosine: float) -> dict[str, set[str]]:
    """Reference neighbour lists by comparing every pair (O(n²): small inputs and tests only)."""
    out: dict[str, set[str]] = {i.memory_id: set() for i in items}
    for a_index, a in enumerate(items):
        for b in items[a_index + 1 :]:
            if cosine(a.vector, b.vector) >= min_cosine:
                out[a.memory_id].add(b.memory_id)
                out[b.memory_id].add(a.memory_id)
    return out


def greedy_groups(
    items: Sequence[Item], neighbours: Neighbours, *, same_claims: bool = False
) -> list[list[Item]]:
    """Oldest-first greedy grouping: each unassigned memory founds a group that takes its unassigned
    neighbours of the same scope, none a summary of another member or one of its sources
    (:func:`without_kin`); with ``same_claims`` (dedup), those with the founder's
    :attr:`Item.claims` and context, and a summary only into a summary (merged into a memory of
    one text, its sources' words would leave recall with it, and they stay archived into it).
    Groups of one are included; the founder is first.
    """
    by_id = {i.memory_id: i for i in items}
    assigned: set[str] = set()
    groups = []
    for item in age_order(items):
        if item.memory_id in assigned:
            continue
        assigned.add(item.memory_id)
        members = [
            by_id[n]
            for n in neighbours.get(item.memory_id, ())
            if n in by_id
            and n not in assigned
            and by_id[n].scope == item.scope
            and (not same_claims or _same_claims(by_id[n], item))
            and (not same_claims or not by_id[n].summary_of or bool(item.summary_of))
        ]
        group = without_kin([item, *age_order(members)])
        assigned.update(m.memory_id for m in group)
        groups.append(group)
    return groups


def without_kin(group: Sequence[Item]) -> list[Item]:
    """``group`` in order without any member that is a summary of one kept before it or one of
    its sources (a source back in recall by an access, beside the summary that holds its words):
    merged or summarised together, the summary was folded into one of its sources and its other
    sources, archived into it, were left archived into a memory gone (SPEC section 7: sources
    stay reachable).
    """
    kept: list[Item] = []
    ids: set[str] = set()
    sources: set[str] = set()
    for item in group:
        if item.memory_id in sources or ids.intersection(item.summary_of):
            continue
        kept.append(item)
        ids.add(item.memory_id)
        sources.update(item.summary_of)
    return kept


def _same_claims(a: Item, b: Item) -> bool:
    return a.claims == b.claims and a.context_hash == b.context_hash


def _merge(group: Sequence[Item], reason: str) -> Decision:
    return Decision(
        DecisionKind.MERGE, group[0].memory_id, tuple(i.memory_id for i in group[1:]), reason
    )


def exact_duplicates(items: Sequence[Item]) -> list[Decision]:
    """Same content hash, context and scope -> keep the oldest, merge the others into it (but a
    summary and its sources: :func:`without_kin`).
    """
    by_hash: dict[str, list[Item]] = {}
    for item in age_order(items):
        by_hash.setdefault(f"{item.scope}{item.content_hash}/{item.context_hash}", []).append(item)
    groups = [without_kin(group) for group in by_hash.values()]
    return [
        _merge(group, f"exact duplicate: content hash {group[0].content_hash[:12]}")
        for group in groups
        if len(group) > 1
    ]


def semantic_duplicates(
    items: Sequence[Item], neighbours: Neighbours, min_cosine: float
) -> list[Decision]:
    """Groups of near-identical memories (cosine >= ``min_cosine`` to the oldest, the same
    numbers and denials, :func:`claims_of`, and the same context) -> merge. A neighbour that
    says another number or denies what the oldest says is no duplicate: merged, its words
    would leave recall (rule zero); compression may still summarise both.
    """
    return [
        _merge(group, f"near duplicate: cosine >= {min_cosine} to {group[0].memory_id}")
        for group in greedy_groups(items, neighbours, same_claims=True)
        if len(group) > 1
    ]


def compression_clusters(
    tenant_id: str,
    items: Sequence[Item],
    neighbours: Neighbours,
    min_cosine: float,
    min_size: int,
) -> list[Decision]:
    """Greedy clusters of similar memories -> one summary each; the summary id is derived from its
    sources, so planning the same clusters twice names the same summary. A cluster is cut,
    oldest first, into parts of at most :data:`MAX_SUMMARY_SOURCES` whose words fit a summary
    (:func:`fitting_parts`); a part under ``min_size`` is left for a later run, and a memory
    longer than a summary alone is never summarised (archived into one, its words past the cut
    would leave recall).
    """
    out = []
    for group in greedy_groups(items, neighbours):
        for part in fitting_parts(group):
            if len(part) < min_size:
                continue
            sources = tuple(i.memory_id for i in part)
            summary_id = derive_memory_id(tenant_id, "summary-of:" + ",".join(sorted(sources)))
            reason = f"cluster of {len(part)} at cosine >= {min_cosine} to {group[0].memory_id}"
            out.append(Decision(DecisionKind.SUMMARISE, summary_id, sources, reason))
    return out


def fitting_parts(group: Sequence[Item]) -> list[list[Item]]:
    """``group`` in order, cut into parts of at most :data:`MAX_SUMMARY_SOURCES` whose contents,
    a space between each, are at most :data:`SUMMARY_MAX_CHARS` long (an upper bound of their
    extractive summary's length); a memory longer than that alone is in no part.
    """
    parts: list[list[Item]] = []
    part: list[Item] = []
    length = 0
    for item in group:
        if item.chars > SUMMARY_MAX_CHARS:
            continue
        added = item.chars + 1 if part and item.chars else item.chars  # 0: unknown, uncounted
        if part and (length + added > SUMMARY_MAX_CHARS or len(part) == MAX_SUMMARY_SOURCES):
            parts.append(part)
            part, length, added = [], 0, item.chars
        part.append(item)
        length += added
    if part:
        parts.append(part)
    return parts


def tier_promotions(items: Sequence[Item], at: datetime, policy: Policy) -> list[Decision]:
    """Working -> episodic after idle hours; episodic -> semantic by use (a session's end sends
    its own promotions: :func:`session_end`).
    """
    rules = policy.consolidation
    out = []
    for item in age_order(items):
        idle = at - item.last_access
        reason = None
        if item.tier is Tier.WORKING:
            if idle >= hours_span(rules.working_idle_hours):
                reason = f"idle {idle / timedelta(hours=1):.4g} h >= {rules.working_idle_hours:g} h"
        elif item.tier is Tier.EPISODIC:
            if item.access_count >= rules.episodic_min_access_count:
                reason = f"access_count {item.access_count} >= {rules.episodic_min_access_count}"
            elif item.importance > rules.episodic_above_importance:
                reason = f"importance {item.importance:.4g} > {rules.episodic_above_importance}"
        if reason is not None:
            to = item.tier.promoted()
            out.append(Decision(DecisionKind.PROMOTE, item.memory_id, (), reason, to))
    return out


@dataclass(frozen=True)
class SessionMember:
    """A memory of an ending session as :func:`session_end` judges it.

    Attributes:
        memory_id: id within the tenant.
        tier, state: as they are now (the worker's tables, through the ranker's state view).
        last_access: event time of its last access (its creation when it had none).
        superseded: a newer version superseded it (kept for history and as-of recall).
    """

    memory_id: str
    tier: Tier
    state: Lifecycle
    last_access: datetime
    superseded: bool = False


def session_end_time(members: Iterable[SessionMember], now: datetime, latest: datetime) -> datetime:
    """When a session ended if its caller did not say: ``now``, or its members' last access
    when later (turns a writer stamped ahead of the server's clock, within the skew a write
    is allowed, were said before the end, not after it), but not after ``latest`` (the latest
    event time the worker takes now).
    """
    return min(max([now, *(m.last_access for m in members)]), latest)


def session_end(
    members: Iterable[SessionMember], session_id: str, at: datetime, latest: datetime
) -> list[tuple[str, Promote]]:
    """SPEC sections 5 and 7: when a session ends, its working memories move to episodic.

    ``members``: the memories of the session that exist at ``at`` (created at or before it);
    the caller picks them by scope. Each active, current, working one gets a :class:`Promote`
    naming the session, at ``at`` or at its last access when later (an end dated before a
    recall that still used it: a promotion dated before that access would schedule its reviews
    before it), never after ``latest`` (the latest event time the worker takes now). The others
    get nothing: an archived or gone memory (the reducer would ignore it), a version superseded
    (kept as it was, for history), one past working already. The reducer checks each again
    where it applies (a memory an access promoted meanwhile ignores it, audited), so an end
    applied twice promotes once.
    """
    reason = f"session {session_id!r} ended"
    return [
        (m.memory_id, Promote(min(max(at, m.last_access), latest), Tier.EPISODIC, reason))
        for m in members
        if m.tier is Tier.WORKING and m.state is Lifecycle.ACTIVE and not m.superseded
    ]


def archive_sweep(items: Sequence[Item], at: datetime, policy: Policy) -> list[Decision]:
    """Active memories the long-horizon sweep archives (:func:`memcore.decay.sweep_archive_reason`)."""
    out = []
    for item in age_order(items):
        reason = sweep_archive_reason(
            item.importance, item.last_access, item.tau_hours, at, policy.lifecycle
        )
        if reason is not None:
            out.append(Decision(DecisionKind.ARCHIVE, item.memory_id, (), reason))
    return out


def purge_due(
    items: Sequence[Item], at: datetime, policy: Policy, stored: Sequence[Item] = ()
) -> list[Decision]:
    """Forgotten and deleted memories past the retention window, each purge marked when it also
    erases the memory's key (:func:`purge_erases`, judged on ``stored``, every memory of the
    tenant; default: ``items``).
    """
    window = hours_span(policy.consolidation.retention_window_hours)
    every = stored or items
    by_id = {i.memory_id: i for i in every}
    sourced = {s for i in every for s in i.summary_of}  # once, not per purge
    decisions = []
    for item in age_order(items):
        if item.state not in GONE or at - item.state_changed_at <= window:
            continue
        erase = purge_erases(item, by_id, sourced)
        why = f"{item.state} for more than {window / timedelta(hours=1):g} h"
        if erase:
            why += f"; merged into {item.merged_into}: key erased"
        decisions.append(Decision(DecisionKind.PURGE, item.memory_id, (), why, erase=erase))
    return decisions


def purge_erases(item: Item, items: Mapping[str, Item], sourced: Collection[str]) -> bool:
    """The purge of ``item`` also erases its data key: it is a duplicate merged into a survivor
    (:func:`merged_duplicate`, judged on the survivor in ``items``; one not there leaves the key
    as it is), whose words it repeats. Once its row is purged, no link leads an erasure of the
    survivor to it, and its sealed write would stay readable in the log for good. A memory in
    ``sourced`` (listed among a summary's sources: archived into it once, brought back by an
    access, merged since) is kept: the summary's replay opens it by that key.
    """
    survivor = items.get(item.merged_into)
    summary_of = survivor.summary_of if survivor is not None else None
    merged = merged_duplicate(item.memory_id, item.state.value, item.merged_into, summary_of)
    return merged and item.memory_id not in sourced


def orphaned_versions(items: Sequence[Item]) -> list[Decision]:
    """Superseded memories whose successor left recall (deleted, forgotten) or is not in the
    store at all (purged, or its row missing): each is a ``recheck``, which sends the successor
    a ``succeeds`` (:func:`to_events`). A successor gone answers it with a ``reinstate``
    (:func:`memcore.reducer.reinstatements`), so the older version is current again; one still
    in recall records the memory among its ``predecessors`` (a copy is ignored). This catches
    what the decisions at the time missed (rule zero, SPEC section 6): supersessions recorded
    before successors kept their predecessors, a ``succeeds`` or ``reinstate`` dead-lettered by
    an older worker. A memory deleted or forgotten itself is left as it is.
    """
    by_id = {i.memory_id: i for i in items}
    decisions = []
    for item in age_order(items):
        if not item.superseded_by or item.state not in SUPERSEDABLE:
            continue
        successor = by_id.get(item.superseded_by)
        if successor is not None and successor.state not in GONE:
            continue
        where = "not in the store" if successor is None else str(successor.state)
        why = f"superseded by {item.superseded_by}, which is {where}: asked to confirm"
        decisions.append(Decision(DecisionKind.RECHECK, item.memory_id, (), why))
    return decisions


def orphaned_sources(items: Sequence[Item]) -> list[Decision]:
    """Memories archived into a summary that is not in the store, or left recall without
    passing its words to a survivor (:func:`_passed_on`): each is a ``restore``
    (:func:`to_events`), active again (rule zero). This catches what the decisions at the time
    missed: a plan whose summaries were never produced (a failure between its archiving and its
    summaries), summaries that left recall before they told their sources
    (:func:`memcore.reducer.summary_gone`).
    """
    by_id = {i.memory_id: i for i in items}
    decisions = []
    for item in age_order(items):
        if item.state is not Lifecycle.ARCHIVED or not item.merged_into:
            continue
        summary = by_id.get(item.merged_into)
        if summary is not None and (summary.state not in GONE or _passed_on(summary, by_id)):
            continue
        where = "not in the store" if summary is None else str(summary.state)
        why = f"archived into summary {item.merged_into}, which is {where}"
        decisions.append(Decision(DecisionKind.RESTORE, item.memory_id, (), why))
    return decisions


def _passed_on(summary: Item, by_id: Mapping[str, Item]) -> bool:
    """``summary`` was merged into a survivor that holds its words: the first memory in recall
    along its chain of merges (a summary merged into one merged since), none of it missing, a
    loop, or one of the summary's own sources (a merge of a summary into its source, before
    consolidation kept them apart, left the other sources archived into a summary gone).
    """
    seen = {summary.memory_id}
    at = summary
    while at.merged_into:
        survivor = by_id.get(at.merged_into)
        if survivor is None or survivor.memory_id in seen or survivor.memory_id in at.summary_of:
            return False
        if survivor.state not in GONE:
            return True
        seen.add(survivor.memory_id)
        at = survivor
    return False


def merged_duplicate(
    memory_id: str, state: str, merged_into: str, survivor_summary_of: Iterable[str] | None
) -> bool:
    """The memory is a duplicate a merge deleted into ``merged_into`` (its words are the
    survivor's: erasing the survivor erases it), not a summary's source, which is archived into
    the summary and listed in its ``summary_of`` (``survivor_summary_of``; None: the survivor is
    not known, so neither can be told and the memory is not taken for a duplicate).
    """
    if not merged_into or state != Lifecycle.DELETED.value or survivor_summary_of is None:
        return False
    return memory_id not in set(survivor_summary_of)


def _absorbed(target: Item, sources: Sequence[Item]) -> Item:
    """``target`` after it absorbed ``sources`` (as :func:`memcore.reducer.apply` does an Absorb):
    in the highest tier of them all, with the τ of the one in it (the target's on a tie).
    """
    top = max([target, *sources], key=lambda i: i.tier.rank)
    return replace(
        target,
        access_count=target.access_count + sum(s.access_count for s in sources),
        recall_count=target.recall_count + sum(s.recall_count for s in sources),
        write_count=target.write_count + sum(s.write_count for s in sources),
        importance=max([target.importance, *(s.importance for s in sources)]),
        last_access=max([target.last_access, *(s.last_access for s in sources)]),
        tags=absorbed_tags(target.tags, *(s.tags for s in sources)),
        relations=absorbed_relations(
            target.relations,
            (r for s in sources for r in s.relations),
            target.memory_id,
            *(s.memory_id for s in sources),
        ),
        tier=top.tier,
        tau_hours=top.tau_hours,
    )


NeighbourFinder = Callable[[Sequence[Item], float], Neighbours]


def plan(
    tenant_id: str,
    items: Sequence[Item],
    at: datetime,
    policy: Policy,
    strategies: Iterable[Strategy] = ALL_STRATEGIES,
    neighbours: NeighbourFinder = pairwise_neighbours,
) -> list[Decision]:
    """All decisions for one tenant, in strategy order. A memory consumed by one step (merged away,
    compressed, archived) is not offered to later steps; survivors are, as the earlier decisions
    leave them (a merge target with the merged counters, a promoted memory in its new tier).
    Superseded memories are never merged or summarised. Only memories created at or before
    ``at`` are offered (SPEC section 6: a memory written after ``at`` does not exist then; a
    request read with lag, or one for a past ``at``, would else fold a later memory into a
    summary older than it); the successors :func:`orphaned_versions` looks for are all of
    ``items``. ``neighbours`` finds the pairs over a threshold (a FAISS range search in
    production, pairs here by default).
    """
    chosen = set(strategies)
    rules = policy.consolidation
    stored = items
    items = [i for i in items if i.created_at <= at]
    live = [i for i in items if i.state is Lifecycle.ACTIVE]
    decisions: list[Decision] = []

    def consume(new: list[Decision]) -> None:
        gone = {s for d in new for s in d.sources if d.kind is DecisionKind.MERGE}
        gone |= {s for d in new if d.kind is DecisionKind.SUMMARISE for s in d.sources}
        gone |= {d.target for d in new if d.kind is DecisionKind.ARCHIVE}
        # later steps see each survivor as the reducer will leave it: a merge target with its
        # sources' counters folded in (Absorb), a promoted memory in its new tier and τ (Promote)
        by_id = {i.memory_id: i for i in live}
        for d in new:
            if d.kind is DecisionKind.MERGE and d.target in by_id:
                by_id[d.target] = _absorbed(by_id[d.target], [by_id[s] for s in d.sources])
            elif d.kind is DecisionKind.PROMOTE and d.to_tier is not None and d.target in by_id:
                promoted = by_id[d.target]
                by_id[d.target] = replace(
                    promoted, tier=d.to_tier, tau_hours=policy.decay.tau_hours(d.to_tier)
                )
        live[:] = [by_id[i.memory_id] for i in live if i.memory_id not in gone]
        decisions.extend(new)

    def current() -> list[Item]:
        """What dedup and compression may touch: superseded versions stay as they are."""
        return [i for i in live if not i.superseded]

    if Strategy.EXACT_DEDUP in chosen:
        consume(exact_duplicates(current()))
    if Strategy.SEMANTIC_DEDUP in chosen:
        threshold = rules.semantic_dedup_min_cosine
        candidates = current()
        consume(semantic_duplicates(candidates, neighbours(candidates, threshold), threshold))
    if Strategy.COMPRESS in chosen:
        threshold = rules.cluster_min_cosine
        candidates = [i for i in current() if not i.fact]
        found = neighbours(candidates, threshold)
        consume(
            compression_clusters(tenant_id, candidates, found, threshold, rules.min_cluster_size)
        )
    if Strategy.TIERS in chosen:
        consume(tier_promotions(live, at, policy))
    if Strategy.ARCHIVE in chosen:
        consume(archive_sweep(live, at, policy))
    if Strategy.PURGE in chosen:
        consume(purge_due(items, at, policy, stored))
    if Strategy.SUCCESSORS in chosen:
        every = {i.memory_id for i in items}
        consume([d for d in orphaned_versions(stored) if d.target in every])
        consume([d for d in orphaned_sources(stored) if d.target in every])
    return decisions


def fold(items: dict[str, Item], decision: Decision) -> None:
    """Update ``items`` (by id, in place) as the reducer leaves them once ``decision`` is carried
    out, as far as a later decision of the same plan reads them: a merge's survivor holds its
    sources' counters, importance, last access and tags. Events for a plan's decisions are made
    in order, each from the items the decisions before it leave: a survivor merged on into
    another memory passes on what it had absorbed (from its original row, those were lost).
    """
    if decision.kind is DecisionKind.MERGE and decision.target in items:
        sources = [items[s] for s in decision.sources if s in items]
        items[decision.target] = _absorbed(items[decision.target], sources)


def merged_away(survivor: MemoryState, event: Absorb, effect: Effect) -> tuple[str, Retire] | None:
    """The source's ``Retire`` (``deleted``, merged into the survivor) once ``survivor`` (its
    state after ``event``) applied ``event`` with ``effect``: absorbed, or skipped as a
    redelivery or a retried batch (the first try may have died before sending it; the source
    ignores a copy) when the survivor holds the source and is not deleted or forgotten. None
    when the survivor refused it: it was deleted or forgotten since the plan (the duplicate was
    deleted with it, though the user deleted one memory), rewritten with other words since
    (``target_hash``: the duplicate's words would be in no active memory), or it absorbed that
    id before (a memory written again under a merged id lost the counters it gathered since);
    the source is then kept, active. None too for an absorb planned before it carried the
    source's content hash: its plan sent the source's retire itself, which is in the log.

    A refused absorb met again is skipped like a taken one; when its survivor had absorbed
    that id before, the retire is sent then (a memory written again under a merged id, merged
    again, then its batch retried: rare, left).
    """
    if event.content_hash is None:
        return None
    if effect.kind is EffectKind.SKIPPED:
        gone = survivor.state in GONE
        if gone or event.source not in survivor.merged_from:
            return None
    elif effect.kind is not EffectKind.ABSORBED:
        return None
    why = f"merged into {survivor.memory_id}"
    retire = Retire(event.at, Lifecycle.DELETED, why, survivor.memory_id, event.content_hash)
    return event.source, retire


def to_events(
    decision: Decision, items: Mapping[str, Item], at: datetime
) -> list[tuple[str, Event]]:
    """The reducer events that carry out ``decision``, as ``(memory_id, event)`` pairs; ``items``
    as the plan's earlier decisions leave them (:func:`fold`).

    A summary's own creation is a Write that the caller makes (it needs the summary's content and
    importance); this returns the archiving of its sources.
    """
    if decision.kind is DecisionKind.MERGE:
        group = {decision.target, *decision.sources}  # no link to itself survives the merge
        absorb: list[tuple[str, Event]] = [
            (
                decision.target,
                Absorb(
                    at=at,
                    source=s,
                    access_count=items[s].access_count,
                    recall_count=items[s].recall_count,
                    write_count=items[s].write_count,
                    importance=items[s].importance,
                    reason=decision.reason,
                    last_access=items[s].last_access,
                    tags=items[s].tags,
                    tier=items[s].tier,
                    content_hash=items[s].content_hash,
                    relations=tuple(r for r in items[s].relations if r not in group),
                    target_hash=items[decision.target].content_hash,
                ),
            )
            for s in decision.sources
        ]
        return absorb  # each source's Retire follows once its survivor took it (merged_away)
    if decision.kind is DecisionKind.SUMMARISE:
        why = f"compressed into summary {decision.target}"
        return [
            (s, Retire(at, Lifecycle.ARCHIVED, why, decision.target, items[s].content_hash))
            for s in decision.sources
        ]
    if decision.kind is DecisionKind.PROMOTE:
        assert decision.to_tier is not None
        return [(decision.target, Promote(at, decision.to_tier, decision.reason))]
    if decision.kind is DecisionKind.ARCHIVE:
        return [(decision.target, Fade(at, "archive sweep"))]
    if decision.kind is DecisionKind.RECHECK:
        item = items[decision.target]
        confirm = Succeeds(item.valid_to or at, item.memory_id, decision.reason, recheck=True)
        return [(item.superseded_by, confirm)]
    if decision.kind is DecisionKind.RESTORE:
        item = items[decision.target]
        return [(item.memory_id, Restore(at, item.merged_into, decision.reason))]
    item = items[decision.target]  # the window was judged from its state_changed_at
    purge = Purge(at, decision.reason, state_changed_at=item.state_changed_at, erase=decision.erase)
    return [(item.memory_id, purge)]


@dataclass(frozen=True)
class Summary:
    """What a compression writes: the summary's text, its importance (the largest of its
    sources') and its tier (the slowest-decaying of its sources'; None: none given). Classified
    by importance alone, semantic sources of importance 0.45 made a working summary (τ 48 h),
    archived long before the memories it replaced.
    """

    content: str
    importance: float
    tier: Tier | None = None


def summarise(
    contents: Sequence[str],
    importances: Sequence[float],
    tiers: Sequence[Tier] = (),
    max_chars: int = SUMMARY_MAX_CHARS,
) -> Summary:
    """The extractive summary of a cluster, for when no LLM writes one."""
    tier = max(tiers, key=list(Tier).index) if tiers else None
    return Summary(extractive_summary(contents, max_chars), max(importances), tier)


_SENTENCE_RE = re.compile(r"(?<=[.!?])\s+")


def extractive_summary(contents: Sequence[str], max_chars: int = SUMMARY_MAX_CHARS) -> str:
    """A summary without an LLM: the distinct sentences of the sources, oldest first, cut at
    ``max_chars`` on a sentence boundary (the first sentence is always kept, cut if needed).
    """
    seen: set[str] = set()
    sentences: list[str] = []
    for text in contents:
        for sentence in _SENTENCE_RE.split(text.strip()):
            key = sentence.strip().casefold()
            if key and key not in seen:
                seen.add(key)
                sentences.append(sentence.strip())
    out = ""
    for sentence in sentences:
        candidate = f"{out} {sentence}".strip()
        if len(candidate) > max_chars:
            return out or sentence[:max_chars]
        out = candidate
    return out
