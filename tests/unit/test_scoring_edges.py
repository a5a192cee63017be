"""Scoring rules at their edges, through the scalar reference (``memcore.rank``) and the kernel
(``ranker.kernel.rank_many``) alike: each case is one a change to both could break together
unseen by the test that only compares them (found by mutating both sides at once)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest

from memcore import Candidate, RankParams, Scored, rank, versions_by_fact
from memcore.policy import RecallPolicy, RecallPreset
from ranker.kernel import RankRequest, rank_many

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


def both(candidates: Sequence[Candidate], params: RankParams) -> list[list[Scored]]:
    """The reference's answer and the kernel's, for the same request."""
    (kernel,) = rank_many([RankRequest.of(list(candidates), T0, params)])
    return [rank(candidates, T0, params), kernel]


def test_a_memory_never_accessed_has_no_access_recency_in_the_default_preset() -> None:
    """Recency counts from the last access: a memory written just now and never read is not
    "recently used", and must not outrank a well-used one on recency it never earned."""
    fresh = Candidate("fresh-unread", 0.80, 0.5, T0, T0, 240.0, access_count=0)
    used = Candidate(
        "used-often",
        0.82,
        0.5,
        T0 - timedelta(days=20),
        T0 - timedelta(days=30),
        240.0,
        access_count=9,
    )
    for answer in both([fresh, used], RankParams(k=2)):
        by_id = {s.memory_id: s for s in answer}
        assert by_id["fresh-unread"].recency == 0.0
        assert by_id["used-often"].recency > 0.0
        assert [s.memory_id for s in answer] == ["used-often", "fresh-unread"]


@pytest.mark.parametrize("preset", list(RecallPreset))
def test_an_archived_memory_scores_below_its_active_twin_by_the_penalty(
    preset: RecallPreset,
) -> None:
    """The final score is multiplied by ``archived_penalty`` (zeph: its relevance, before MMR
    and the importance and tier bonuses)."""
    policy = RecallPolicy.of(preset)
    assert 0.0 < policy.archived_penalty < 1.0
    active = Candidate("active", 0.8, 0.5, T0, T0, 240.0, access_count=1)
    archived = dataclasses.replace(active, memory_id="archived", archived=True)
    for answer in both([active, archived], RankParams(k=2, policy=policy)):
        by_id = {s.memory_id: s.final for s in answer}
        assert [s.memory_id for s in answer] == ["active", "archived"]
        if preset is not RecallPreset.ZEPH:
            assert by_id["archived"] == pytest.approx(by_id["active"] * policy.archived_penalty)


def test_a_score_equal_to_min_score_is_kept() -> None:
    """``min_score`` drops scores below it: one exactly at it stays (zeph, min_score 0)."""
    policy = dataclasses.replace(RecallPolicy.of(RecallPreset.ZEPH), min_score=0.0)
    kept = Candidate("a", 0.9, 0.5, T0, T0, 240.0)
    zero = Candidate("z", 0.0, 0.0, T0, T0, 240.0)
    for answer in both([kept, zero], RankParams(k=5, policy=policy)):
        assert [s.memory_id for s in answer] == ["a", "z"]
        assert answer[1].final == 0.0


def test_an_access_dated_after_the_recall_time_counts_as_now_not_as_more_than_fresh() -> None:
    """An as-of recall can meet a memory last accessed after its ``at``: recency is at most 1
    (no negative idle time), in the reference and the kernel alike."""
    later = Candidate(
        "a", 0.8, 0.5, T0 + timedelta(hours=5), T0 - timedelta(days=1), 24.0, access_count=2
    )
    for answer in both([later], RankParams()):
        assert answer[0].recency == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("ranked", "order"),
    [
        # best first: "paris" and "rome" were superseded by "berlin", which matched worse; the
        # fact keeps its three places, newest first, and "other" keeps its own
        (
            [("paris", "berlin"), ("rome", "berlin"), ("other", None), ("berlin", None)],
            ["berlin", "paris", "other", "rome"],
        ),
        # a chain a -> b -> c: newest first, in the places its versions hold
        ([("x", None), ("a", "b"), ("c", None), ("b", "c")], ["x", "c", "b", "a"]),
        # two facts interleaved: each fact's places, newest first; "o" keeps its own
        (
            [("a1", "a2"), ("b1", "b2"), ("a2", None), ("o", None), ("b2", None)],
            ["a2", "b2", "a1", "o", "b1"],
        ),
        # the price: an older version that matched well gives its place to its newer one, and
        # leaves a top 2 the older order would have kept it in
        ([("paris", "berlin"), ("o1", None), ("berlin", None)], ["berlin", "o1", "paris"]),
        # a successor not among the results: the version stays where it is
        ([("a", "gone"), ("b", None)], ["a", "b"]),
        # a cycle (a racing rewrite) is cut where it closes; a memory naming itself is alone
        ([("a", "b"), ("b", "a"), ("s", "s")], ["b", "a", "s"]),
        ([], []),
    ],
)
def test_a_history_recall_gives_a_fact_s_places_to_its_versions_newest_first(
    ranked: list[tuple[str, str | None]], order: list[str]
) -> None:
    assert [ranked[i][0] for i in versions_by_fact(ranked)] == order


def test_a_long_chain_of_versions_is_ordered_without_recursion() -> None:
    chain = [(f"v{i}", f"v{i + 1}") for i in range(5_000)]  # each superseded by the next
    assert versions_by_fact(chain) == list(range(4_999, -1, -1))
