"""Properties of the model that must hold for every input, checked with Hypothesis."""

from __future__ import annotations

import dataclasses
import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from memcore import (
    Access,
    AccessKind,
    Candidate,
    EffectKind,
    Event,
    Lifecycle,
    MemoryState,
    Policy,
    Position,
    RankParams,
    Tier,
    apply,
    rank,
    recency,
    rule_importance,
)
from memcore.policy import RecallPolicy, RecallPreset, RecallWeights

from .helpers import T0, hours, write

POLICIES = st.sampled_from(
    [
        Policy(),
        Policy.build(decay="powermem", lifecycle="powermem"),
        Policy.build(decay="powermem"),
        Policy.build(lifecycle="powermem"),
    ]
)
unit = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
tiers = st.sampled_from([None, *Tier])
accesses = st.lists(
    st.tuples(
        st.floats(
            min_value=0.0, max_value=400.0, allow_nan=False
        ),  # hours after the previous event
        st.sampled_from(list(AccessKind)),
    ),
    max_size=40,
)


def events_of(
    importance: float, tier: Tier | None, steps: list[tuple[float, AccessKind]]
) -> list[Event]:
    out: list[Event] = [
        dataclasses.replace(write(importance=importance, tier=tier), position=Position("w/0", 0))
    ]
    at = T0
    for offset, (gap, kind) in enumerate(steps):
        at += hours(gap)
        out.append(Access(at, kind, Position("a/0", offset)))
    return out


def run(events: list[Event], policy: Policy) -> list[MemoryState]:
    states = []
    state: MemoryState | None = None
    for event in events:
        state, _ = apply(state, event, policy)
        assert state is not None
        states.append(state)
    return states


@given(st.text(max_size=400), st.sampled_from([None, "high", "medium", "low"]), st.lists(st.text()))
def test_rule_importance_in_range(text: str, priority: str | None, tags: list[str]) -> None:
    value = rule_importance(text, {"priority": priority}, tags)
    assert 0.0 <= value <= 1.0


@given(
    st.floats(min_value=0, max_value=1e6, allow_nan=False),
    st.floats(min_value=0, max_value=1e6, allow_nan=False),
    st.floats(min_value=1e-3, max_value=1e5, allow_nan=False),
)
def test_recency_is_monotone_in_idle_time(a: float, b: float, tau: float) -> None:
    low, high = sorted((a, b))
    assert 0.0 <= recency(high, tau) <= recency(low, tau) <= 1.0


@given(unit, tiers, accesses, POLICIES)
@settings(max_examples=150)
def test_state_stays_in_range_and_tiers_move_one_step_up(
    importance: float, tier: Tier | None, steps: list[tuple[float, AccessKind]], policy: Policy
) -> None:
    states = run(events_of(importance, tier, steps), policy)
    for before, after in itertools.pairwise(states):
        assert 0.0 <= after.importance <= 1.0
        assert 0.0 <= after.card.retention <= 1.0
        assert after.tier.rank - before.tier.rank in (0, 1)
        assert after.access_count - before.access_count in (0, 1)
        assert after.recall_count <= after.access_count
        assert after.last_access >= before.last_access
        if before.state is not Lifecycle.ACTIVE:
            assert after.state is before.state


@given(unit, tiers, accesses, POLICIES)
@settings(max_examples=100)
def test_replay_gives_the_same_state(
    importance: float, tier: Tier | None, steps: list[tuple[float, AccessKind]], policy: Policy
) -> None:
    events = events_of(importance, tier, steps)
    assert run(events, policy) == run(list(events), policy)


@given(unit, tiers, accesses, POLICIES, st.data())
@settings(max_examples=100)
def test_redelivered_events_change_nothing(
    importance: float,
    tier: Tier | None,
    steps: list[tuple[float, AccessKind]],
    policy: Policy,
    data: st.DataObject,
) -> None:
    events = events_of(importance, tier, steps)
    # at-least-once delivery: any already-delivered event may come again, any number of times
    delivered: list[Event] = []
    for event in events:
        delivered.append(event)
        delivered.extend(data.draw(st.lists(st.sampled_from(delivered), max_size=2)))
    clean = run(events, policy)[-1]
    state: MemoryState | None = None
    for event in delivered:
        state, effects = apply(state, event, policy)
        if effects[0].kind is EffectKind.SKIPPED:
            assert effects == (effects[0],)
    assert state == clean


@given(
    st.lists(
        st.tuples(
            unit, unit, st.floats(min_value=0, max_value=1e4), st.floats(min_value=0, max_value=50)
        ),
        min_size=1,
        max_size=20,
    ),
    st.sampled_from(list(RecallPreset)),
    st.booleans(),
)
def test_recall_scores_stay_in_range(
    rows: list[tuple[float, float, float, float]], preset: RecallPreset, graphrag: bool
) -> None:
    candidates = [
        Candidate(str(i), sim, imp, T0 - hours(idle), T0 - hours(idle), 240.0, keyword=kw)
        for i, (sim, imp, idle, kw) in enumerate(rows)
    ]
    weights = RecallWeights(similarity=0.4, keyword=0.1, importance=0.3, recency=0.2)
    policy = RecallPolicy(
        preset=preset, weights=weights, graphrag=graphrag, soft_delete_below=0.0
    )  # no zeromemory soft delete: every candidate is ranked
    ranked = rank(candidates, T0, RankParams(k=len(rows), policy=policy))
    assert len(ranked) == len(rows)
    upper = 1.0 + 0.15 + 0.3 if preset is RecallPreset.ZEPH else 1.0
    for s in ranked:
        assert 0.0 <= s.similarity <= 1.0
        assert 0.0 <= s.keyword <= 1.0
        assert 0.0 <= s.recency <= 1.0
        assert -1.0 <= s.final <= upper + 1e-12
    assert [s.final for s in ranked] == sorted((s.final for s in ranked), reverse=True)
