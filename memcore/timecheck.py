"""The window an event time must lie in before the model accepts it.

Pure: the caller passes ``now`` (the time the edge received the event) and the allowed skew; the
model never reads a clock. The window keeps every later computation in range: review schedules
and decay add up to years to an event time, and ``datetime`` stops at the year 9999.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from memcore.errors import InvalidField
from memcore.types import require_aware

EARLIEST_EVENT_TIME = datetime(1970, 1, 1, tzinfo=UTC)
"""No event time before the Unix epoch (stored times are microseconds since it)."""

LATEST_EVENT_TIME = datetime(9000, 1, 1, tzinfo=UTC)
"""No event time after this whatever ``now`` says: leaves room for schedules counted from it."""

MAX_SKEW = timedelta(days=366)
"""The largest skew a caller may allow."""


def check_event_time(field: str, at: object, now: datetime | None, max_skew: timedelta) -> datetime:
    """Return ``at`` if it is an aware time within [1970-01-01, ``now`` + ``max_skew``], else raise
    :class:`InvalidField` naming ``field``. With ``now`` None only the fixed bounds apply
    (1970-01-01 to 9000-01-01).
    """
    if not timedelta(0) <= max_skew <= MAX_SKEW:
        raise InvalidField("max_skew", max_skew, f"must be within [0, {MAX_SKEW}]")
    when = require_aware(field, at)
    if when < EARLIEST_EVENT_TIME:
        raise InvalidField(field, when.isoformat(), "before 1970-01-01T00:00:00+00:00")
    if now is None or require_aware("now", now) >= LATEST_EVENT_TIME - max_skew:
        if when > LATEST_EVENT_TIME:
            raise InvalidField(field, when.isoformat(), f"after {LATEST_EVENT_TIME.isoformat()}")
        return when
    if when > now + max_skew:
        seconds = f"{max_skew.total_seconds():g}"
        reason = f"more than {seconds} s after the time it was received ({now.isoformat()})"
        raise InvalidField(field, when.isoformat(), reason)
    return when
