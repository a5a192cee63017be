"""Enumerations and checked conversions shared by the whole model.

Everything here is pure: no clock, no environment. Times are timezone-aware ``datetime`` values
carried by events; a naive datetime is rejected because it has no defined instant.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from enum import StrEnum

from memcore.errors import InvalidField

SECONDS_PER_HOUR = 3600.0
HOURS_PER_DAY = 24.0


class Tier(StrEnum):
    """Memory tier, slowest-decaying last. Order matters: promotion moves one step right."""

    WORKING = "working"
    EPISODIC = "episodic"
    SEMANTIC = "semantic"

    @classmethod
    def parse(cls, value: object, field: str = "memory_type") -> Tier:
        """Accept a tier name or an alias (``short_term`` = episodic, ``long_term`` = semantic)."""
        if isinstance(value, Tier):
            return value
        if isinstance(value, str):
            name = value.strip().lower()
            name = _TIER_ALIASES.get(name, name)
            for tier in cls:
                if tier.value == name:
                    return tier
        raise InvalidField(
            field, value, "expected working, episodic, semantic, short_term or long_term"
        )

    def promoted(self) -> Tier:
        """The next tier up; semantic stays semantic."""
        order = list(Tier)
        return order[min(order.index(self) + 1, len(order) - 1)]

    @property
    def rank(self) -> int:
        """0 for working, 1 for episodic, 2 for semantic."""
        return list(Tier).index(self)


_TIER_ALIASES = {"short_term": "episodic", "long_term": "semantic"}


class Lifecycle(StrEnum):
    """Where a memory stands. Only ``active`` memories are recall candidates."""

    ACTIVE = "active"
    ARCHIVED = "archived"
    FORGOTTEN = "forgotten"
    DELETED = "deleted"


class ImportanceSource(StrEnum):
    """Which path produced the write-time importance."""

    EXPLICIT = "explicit"
    LLM = "llm"
    LLM_REGEX = "llm_regex"
    RULES = "rules"


class AccessKind(StrEnum):
    """What kind of access an access event reports; only ``recall`` counts as a recall."""

    RECALL = "recall"
    GET = "get"
    EXPLICIT = "explicit"


def require_aware(field: str, value: object) -> datetime:
    """Return ``value`` if it is a timezone-aware datetime, else raise :class:`InvalidField`."""
    if not isinstance(value, datetime):
        raise InvalidField(field, value, "expected a timezone-aware datetime")
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidField(field, value, "naive datetime: give a timezone (UTC recommended)")
    return value


def require_unit(field: str, value: object) -> float:
    """Return ``value`` as a float in [0, 1], else raise :class:`InvalidField` (NaN included)."""
    number = require_finite(field, value)
    if not 0.0 <= number <= 1.0:
        raise InvalidField(field, value, "must be within [0, 1]")
    return number


def require_finite(field: str, value: object) -> float:
    """Return ``value`` as a finite float; booleans, NaN and infinities are rejected."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidField(field, value, "expected a number")
    number = float(value)
    if not math.isfinite(number):
        raise InvalidField(field, value, "must be finite (no NaN or infinity)")
    return number


def require_positive(field: str, value: object) -> float:
    """Return ``value`` as a finite float > 0."""
    number = require_finite(field, value)
    if number <= 0.0:
        raise InvalidField(field, value, "must be greater than 0")
    return number


def require_non_negative(field: str, value: object) -> float:
    """Return ``value`` as a finite float >= 0."""
    number = require_finite(field, value)
    if number < 0.0:
        raise InvalidField(field, value, "must not be negative")
    return number


MAX_SPAN_HOURS = 2e10
"""The longest span :func:`hours_span` gives (~2.3 million years, under ``timedelta``'s own limit):
a policy may say "never" with a huge number of hours, which raised OverflowError in every event
of the tenant, a dead letter naming no field."""
MAX_REVIEW_HOURS = 100 * 365.25 * HOURS_PER_DAY
"""The furthest a review is scheduled (100 years: never due); event times run to the year 9000,
and a review time past 9999 raised OverflowError in every write of the tenant."""


def hours_span(value: float, limit: float = MAX_SPAN_HOURS) -> timedelta:
    """``value`` hours as a timedelta, at most ``limit`` hours."""
    return timedelta(hours=min(value, limit))


def hours_between(start: datetime, end: datetime) -> float:
    """Hours from ``start`` to ``end`` (negative when ``end`` is earlier). Exact to the microsecond."""
    return (end - start) / timedelta(hours=1)
