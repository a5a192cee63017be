"""SPEC's thresholds at their edges: the powermem lifecycle gates (section 5), the consolidation
cosines and the retention window (section 7), and the LLM's supersession of an older memory only
(section 6). The worked examples exercise each rule away from its edge; a mutation review found
that a `>` for a `>=`, or another default, changed no test's outcome. Expected values follow from
SPEC's own words; each case says which.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

import pytest

from memcore import Access, Lifecycle, MemoryState, Policy, Tier, apply
from memcore.consolidation import Item, Strategy, plan
from memcore.supersession import SupersessionPolicy, Version, decide

from .helpers import T0, hours, write

# zeromemory's slow decay keeps recency over the forget gate's 0.3 in these cases: only the gate
# under test decides
POWERMEM = Policy.build(decay="zeromemory", lifecycle="powermem")


def accessed(
    policy: Policy, importance: float, after: list[timedelta], tier: Tier | None = None
) -> MemoryState:
    """A memory written at T0 with ``importance`` (``tier``), then accessed ``after`` T0."""
    state, _ = apply(None, write("m1", importance, tier, T0), policy)
    for at in after:
        assert state is not None
        state, _ = apply(state, Access(T0 + at), policy)
    assert state is not None
    return state


def test_powermem_forgets_an_unaccessed_memory_only_older_than_seven_days() -> None:
    """Section 5: forget a memory "never accessed and older than 7 days": at 7 days it stays."""
    assert accessed(POWERMEM, 0.9, [timedelta(days=7)]).state is Lifecycle.ACTIVE


def test_powermem_promotes_at_importance_point_six_but_not_inside_a_day() -> None:
    """Section 5: promote when "importance >= 0.6" (0.6 itself promotes) and "age > 24 h" (a
    day old, at importance 0.5 and below the gate anyway, stays working).
    """
    promoted = accessed(POWERMEM, 0.6, [hours(1)], Tier.WORKING)
    assert promoted.tier is Tier.EPISODIC
    assert accessed(POWERMEM, 0.5, [hours(24)]).tier is Tier.WORKING


@pytest.mark.parametrize(
    ("importance", "second_access", "state"),
    [
        (0.3, None, Lifecycle.ACTIVE),  # "importance < 0.3": 0.3 itself is kept
        (0.9, timedelta(days=30), Lifecycle.ACTIVE),  # "age > 30 days": 30 days is kept
        (0.9, timedelta(days=31), Lifecycle.ARCHIVED),  # the default gate is 30 days, not more
    ],
)
def test_powermem_archives_past_thirty_days_below_importance_point_three(
    importance: float, second_access: timedelta | None, state: Lifecycle
) -> None:
    """Section 5's archive gate, at its edges; the first access (6 days, or an hour) is inside
    every gate.
    """
    after = [timedelta(days=6), second_access] if second_access else [hours(1)]
    assert accessed(POWERMEM, importance, after).state is state


def test_powermem_measures_recency_from_the_last_access_not_the_creation() -> None:
    """Section 4: recency = exp(-(t - last_access)/tau), and an access resets last_access. With
    powermem's own decay (tau 4.8 h at importance 0.72), accesses every 3 hours keep recency at
    0.535, over the forget gate's 0.3; measured from the creation (7 h) it is 0.233: forgotten.
    """
    policy = Policy.build(decay="powermem", lifecycle="powermem")
    state = accessed(policy, 0.72, [hours(1), hours(4), hours(7)])
    assert state.tau_hours == pytest.approx(4.8)
    assert math.exp(-3 / state.tau_hours) > 0.3 > math.exp(-7 / state.tau_hours)
    assert state.state is Lifecycle.ACTIVE


def item(
    memory_id: str,
    vector: tuple[float, ...],
    state: Lifecycle = Lifecycle.ACTIVE,
    changed: datetime | None = None,
) -> Item:
    """An episodic memory of importance 0.5; ``b`` is written half an hour after ``a``."""
    created = T0 + (hours(0.5) if memory_id == "b" else timedelta(0))
    at = changed or created
    return Item(
        memory_id, f"hash-{memory_id}", vector, created, created, at, Tier.EPISODIC, state, 0.5, 240
    )


def kinds(items: list[Item], strategy: Strategy, policy: Policy | None = None) -> list[str]:
    at = T0 + hours(1)
    return [d.kind.value for d in plan("t1", items, at, policy or Policy(), [strategy])]


def test_compression_clusters_at_cosine_point_eight_five_and_not_below() -> None:
    """Section 7: greedy clusters at cosine >= 0.85 (the default; 17/20 is exactly 0.85)."""
    a = item("a", (1.0, 0.0, 0.0, 0.0, 0.0))
    at_threshold = item("b", (17.0, 10.0, 3.0, 1.0, 1.0))
    assert kinds([a, at_threshold], Strategy.COMPRESS) == ["summarise"]
    below = item("b", (0.82, math.sqrt(1 - 0.82**2), 0.0, 0.0, 0.0))
    assert kinds([a, below], Strategy.COMPRESS) == []


def test_semantic_dedup_merges_at_cosine_point_nine_five() -> None:
    """Section 7: near duplicates at cosine >= 0.95 merge (19/20 is exactly 0.95)."""
    a = item("a", (1.0, 0.0, 0.0, 0.0, 0.0))
    at_threshold = item("b", (19.0, 6.0, 1.0, 1.0, 1.0))
    assert kinds([a, at_threshold], Strategy.SEMANTIC_DEDUP) == ["merge"]


def test_purge_takes_only_what_is_older_than_the_retention_window() -> None:
    """Section 7: purge what is forgotten or deleted for longer than the window, not at it."""
    policy = Policy().with_overrides({"consolidation": {"retention_window_hours": 720}})
    forgotten = item("f", (1.0,), Lifecycle.FORGOTTEN, T0)
    at_window = plan("t1", [forgotten], T0 + timedelta(days=30), policy, [Strategy.PURGE])
    assert at_window == []
    past = T0 + timedelta(days=30, microseconds=1)
    assert [d.kind.value for d in plan("t1", [forgotten], past, policy, [Strategy.PURGE])] == [
        "purge"
    ]


def test_the_llm_supersedes_only_an_older_memory_not_one_of_the_same_instant() -> None:
    """Section 6: a write supersedes the *older* memory. One written at the same instant would
    get valid_to = its own creation: never current. The rule skips equal times; so does the LLM.
    """
    new = Version("n", "Alice lives in Lisbon", T0 + hours(1), 1.0)
    same_instant = Version("o", "Alice lives in Osaka", T0 + hours(1), 0.9)
    older = Version("p", "Alice lives in Paris", T0, 0.9)
    answer = '{"replaces": [1], "reason": "moved"}'
    assert decide(new, [same_instant], SupersessionPolicy(), llm_answer=answer) == []
    found = decide(new, [older], SupersessionPolicy(), llm_answer=answer)
    assert [(s.older, s.newer) for s in found] == [("p", "n")]
