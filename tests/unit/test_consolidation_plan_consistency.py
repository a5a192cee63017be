"""A consolidation plan agrees with itself and with the reducer that carries it out (SPEC section 7):
later steps see what earlier decisions leave, and superseded versions are left as they are."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

from memcore import (
    Decision,
    DecisionKind,
    EffectKind,
    Item,
    Lifecycle,
    MemoryState,
    Policy,
    Strategy,
    Tier,
    apply,
    plan,
    to_events,
)
from memcore.consolidation import fold
from storage import Document, MemoryRow
from storage.rows import to_us
from streams.consolidation import item_of
from tests.rows import make_row

from .helpers import T0, hours, write

POLICY = Policy()
LATER = T0 + timedelta(days=100)


def stored(
    memory_id: str, importance: float, tier: Tier, content: str | None = None, **kw: object
) -> MemoryState:
    state, _ = apply(None, write(memory_id, importance, tier, content=content), POLICY)
    assert state is not None
    return dataclasses.replace(state, **kw)  # type: ignore[arg-type]


def as_item(state: MemoryState, vector: tuple[float, ...], content: str | None = None) -> Item:
    """The item the worker's consolidation makes of the memory's stored row (``content``: as
    written, the memory id when not given, as :func:`stored` hashes it)."""
    return item_of(MemoryRow.of(state, Document(content or state.memory_id, vector)))


def carry_out(
    decisions: list[Decision], states: dict[str, MemoryState], items: list[Item], at: datetime
) -> list[EffectKind]:
    """Apply the plan's events through the reducer; the effect kinds, in order."""
    by_id = {i.memory_id: i for i in items}
    kinds: list[EffectKind] = []
    for decision in decisions:
        for memory_id, event in to_events(decision, by_id, at):
            new, effects = apply(states[memory_id], event, POLICY)
            assert new is not None
            states[memory_id] = new
            kinds.extend(e.kind for e in effects)
        fold(by_id, decision)  # as the worker's decision_records does
    return kinds


def test_the_sweep_sees_a_memory_promoted_in_the_same_plan_in_its_new_tier() -> None:
    # episodic, 3 accesses, importance 0.4, idle 100 days: promoted to semantic (τ 1200 h), where
    # 0.4 × exp(-2400/1200) = 0.054 has not faded under 0.05 (under episodic τ 240 h it had).
    # A working one idle as long goes to episodic, where 0.4 × exp(-2400/240) still has.
    used = stored("used", 0.4, Tier.EPISODIC, access_count=3)
    idle = stored("idle", 0.4, Tier.WORKING, created_at=T0 + hours(1), last_access=T0 + hours(1))
    items = [as_item(used, (1.0, 0.0)), as_item(idle, (0.0, 1.0))]
    decisions = plan("t", items, LATER, POLICY, [Strategy.TIERS, Strategy.ARCHIVE])
    assert [(d.kind, d.target, d.to_tier) for d in decisions] == [
        (DecisionKind.PROMOTE, "used", Tier.SEMANTIC),
        (DecisionKind.PROMOTE, "idle", Tier.EPISODIC),
        (DecisionKind.ARCHIVE, "idle", None),
    ]
    states = {"used": used, "idle": idle}
    assert EffectKind.IGNORED not in carry_out(decisions, states, items, LATER)
    assert (states["used"].state, states["used"].tier) == (Lifecycle.ACTIVE, Tier.SEMANTIC)
    assert (states["idle"].state, states["idle"].tier) == (Lifecycle.ARCHIVED, Tier.EPISODIC)


def test_the_sweep_sees_a_merge_survivor_with_the_importance_it_absorbed() -> None:
    # the oldest copy (importance 0.3) survives and absorbs its duplicate's 0.9: not archivable
    old = stored("old", 0.3, Tier.SEMANTIC, content="same")
    dup = stored("dup", 0.9, Tier.SEMANTIC, content="same", created_at=T0 + hours(1))
    items = [as_item(old, (1.0, 0.0), "same"), as_item(dup, (1.0, 0.0), "same")]
    decisions = plan("t", items, LATER, POLICY, [Strategy.EXACT_DEDUP, Strategy.ARCHIVE])
    assert [(d.kind, d.target, d.sources) for d in decisions] == [
        (DecisionKind.MERGE, "old", ("dup",))
    ]
    states = {"old": old, "dup": dup}
    assert EffectKind.IGNORED not in carry_out(decisions, states, items, LATER)
    assert (states["old"].state, states["old"].importance) == (Lifecycle.ACTIVE, 0.9)


def test_tier_consolidation_counts_the_accesses_a_merge_folded_in() -> None:
    # 1 + 2 accesses after the merge: episodic -> semantic (SPEC: "after >= 3 accesses")
    old = stored("old", 0.5, Tier.EPISODIC, content="same", access_count=1)
    dup = stored(
        "dup", 0.5, Tier.EPISODIC, content="same", access_count=2, created_at=T0 + hours(1)
    )
    at = T0 + hours(2)
    items = [as_item(old, (1.0, 0.0), "same"), as_item(dup, (1.0, 0.0), "same")]
    decisions = plan("t", items, at, POLICY, [Strategy.EXACT_DEDUP, Strategy.TIERS])
    assert [(d.kind, d.target, d.to_tier) for d in decisions] == [
        (DecisionKind.MERGE, "old", None),
        (DecisionKind.PROMOTE, "old", Tier.SEMANTIC),
    ]
    states = {"old": old, "dup": dup}
    carry_out(decisions, states, items, at)
    assert (states["old"].access_count, states["old"].tier) == (3, Tier.SEMANTIC)


def test_superseded_versions_are_never_merged_or_summarised() -> None:
    # "Alice lives in Osaka" (superseded by the newer "Alice lives in Lisbon"): near-identical
    # vectors. Keeping the oldest would delete the current version into the superseded one.
    osaka = stored("osaka", 0.5, Tier.SEMANTIC, valid_to=T0 + hours(1), superseded_by="lisbon")
    lisbon = stored("lisbon", 0.5, Tier.SEMANTIC, created_at=T0 + hours(1))
    items = [as_item(osaka, (1.0, 0.0)), as_item(lisbon, (1.0, 0.01))]
    dedup_and_compress = [Strategy.EXACT_DEDUP, Strategy.SEMANTIC_DEDUP, Strategy.COMPRESS]
    assert plan("t", items, T0 + hours(2), POLICY, dedup_and_compress) == []
    # the same words written again under another id: the current copy is not merged into it
    again = stored("again", 0.5, Tier.SEMANTIC, content="osaka", created_at=T0 + hours(3))
    items = [as_item(osaka, (1.0, 0.0)), as_item(again, (1.0, 0.0), "osaka")]
    assert plan("t", items, T0 + hours(4), POLICY, dedup_and_compress) == []


def test_consolidation_items_of_stored_rows_know_superseded_versions() -> None:
    current = make_row("acme", "lisbon", (1.0, 0.0))
    old = make_row("acme", "osaka", (1.0, 0.0), valid_to_us=to_us(T0), superseded_by="lisbon")
    assert (item_of(current).superseded, item_of(old).superseded) == (False, True)


def test_a_survivor_is_not_archived_in_the_plan_that_merges_a_used_duplicate_into_it() -> None:
    """The survivor (the oldest) idle 100 days, its exact duplicate used yesterday: the merge
    carries the duplicate's last access, so the same plan's sweep leaves the survivor active.
    """
    old = stored("old", 0.4, Tier.EPISODIC, content="same words")
    used = stored(
        "used", 0.4, Tier.EPISODIC, content="same words",
        created_at=T0 + hours(1), last_access=LATER - hours(24), access_count=1,
    )  # fmt: skip
    items = [as_item(old, (1.0, 0.0), "same words"), as_item(used, (1.0, 0.0), "same words")]
    decisions = plan("t", items, LATER, POLICY, [Strategy.EXACT_DEDUP, Strategy.ARCHIVE])
    assert [(d.kind, d.target) for d in decisions] == [(DecisionKind.MERGE, "old")]
    states = {"old": old, "used": used}
    carry_out(decisions, states, items, LATER)
    assert (states["old"].state, states["old"].last_access) == (Lifecycle.ACTIVE, used.last_access)
