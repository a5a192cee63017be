"""The Ebbinghaus review card (SPEC section 4): retention, review schedule, reinforcement."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from memcore.policy import ReviewPolicy
from memcore.types import MAX_REVIEW_HOURS, hours_span


@dataclass(frozen=True)
class ReviewCard:
    """Spaced-repetition state of one memory.

    Attributes:
        retention: current retention in [0, 1]; starts at importance × initial factor.
        schedule: absolute review times (event time), ascending.
        next_review: the next due review time, or None after the last one.
        review_count: reviews done so far (never reset).
    """

    retention: float
    schedule: tuple[datetime, ...]
    next_review: datetime | None
    review_count: int = 0


def review_intervals_hours(importance: float, review: ReviewPolicy) -> tuple[float, ...]:
    """Each base interval × ``(1 - importance × adjustment_factor)``, floored at the minimum."""
    scale = 1.0 - importance * review.adjustment_factor
    return tuple(max(h * scale, review.min_interval_hours) for h in review.intervals_hours)


def schedule_from(start: datetime, importance: float, review: ReviewPolicy) -> tuple[datetime, ...]:
    """Absolute review times counted from ``start``."""
    intervals = review_intervals_hours(importance, review)
    return tuple(start + hours_span(h, MAX_REVIEW_HOURS) for h in intervals)


def new_card(created_at: datetime, importance: float, review: ReviewPolicy) -> ReviewCard:
    """The card written at creation: retention = importance × factor; next review = the first."""
    schedule = schedule_from(created_at, importance, review)
    return ReviewCard(
        retention=min(1.0, importance * review.initial_retention_factor),
        schedule=schedule,
        next_review=schedule[0],
    )


def is_due(card: ReviewCard, at: datetime) -> bool:
    """True when an access at ``at`` is a review (at or after ``next_review``)."""
    return card.next_review is not None and at >= card.next_review


def reviewed(card: ReviewCard, review: ReviewPolicy) -> ReviewCard:
    """A review: retention reinforced, count + 1, ``next_review`` one step on (None after the last).

    Steps whose floored intervals coincide (a custom ``intervals_hours`` such as
    ``[0.2, 0.3, ...]`` floored at 0.5 h) are still one review each: the step done is dropped
    from ``schedule`` and ``next_review`` stays at the same time until its last copy is done.
    A schedule of distinct times, the default's, is kept whole, so its states encode as before.
    """
    schedule, following = _one_step_on(card.schedule, card.next_review)
    return ReviewCard(
        retention=round(card.retention + review.reinforcement * (1.0 - card.retention), 12),
        schedule=schedule,
        next_review=following,
        review_count=card.review_count + 1,
    )


def _one_step_on(
    schedule: tuple[datetime, ...], due: datetime | None
) -> tuple[tuple[datetime, ...], datetime | None]:
    """The schedule and the next review time once the step due at ``due`` is done."""
    if due is None:
        return schedule, None
    if schedule.count(due) > 1:
        at = schedule.index(due)
        return schedule[:at] + schedule[at + 1 :], due
    later = [t for t in schedule if t > due]
    return schedule, later[0] if later else None


def rescheduled(
    card: ReviewCard, at: datetime, importance: float, review: ReviewPolicy
) -> ReviewCard:
    """The schedule recomputed from ``at`` with the current importance; retention and count kept."""
    schedule = schedule_from(at, importance, review)
    return ReviewCard(
        retention=card.retention,
        schedule=schedule,
        next_review=schedule[0],
        review_count=card.review_count,
    )
