"""Builders shared by the unit tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from memcore import (
    ImportanceDecision,
    ImportanceSource,
    MemoryState,
    Policy,
    Tier,
    Write,
    apply,
    content_hash,
)

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


def hours(h: float) -> timedelta:
    return timedelta(hours=h)


def write(
    memory_id: str = "m1",
    importance: float = 0.5,
    tier: Tier | None = None,
    at: datetime = T0,
    tenant_id: str = "t1",
    content: str | None = None,
) -> Write:
    return Write(
        tenant_id=tenant_id,
        memory_id=memory_id,
        content_hash=content_hash(content or memory_id),
        at=at,
        importance=ImportanceDecision(importance, ImportanceSource.EXPLICIT, "test"),
        memory_type=tier,
    )


def created(
    importance: float = 0.5,
    tier: Tier | None = None,
    policy: Policy | None = None,
    at: datetime = T0,
    memory_id: str = "m1",
) -> MemoryState:
    state, _ = apply(None, write(memory_id, importance, tier, at), policy or Policy())
    assert state is not None
    return state


def matches_printed(value: float, printed: str) -> bool:
    """``value`` shown to the printed number of decimals equals ``printed``, rounded or truncated.

    The source documents print some figures truncated (0.8 × e^-0.14 = 0.6955 is printed 0.69),
    so both readings of the printed digits are accepted, and nothing looser.
    """
    decimals = len(printed.split(".")[1]) if "." in printed else 0
    rounded = f"{value:.{decimals}f}"
    scale = 10**decimals
    truncated = f"{int(value * scale) / scale:.{decimals}f}"
    return printed in (rounded, truncated)


class CountingDict(dict[bytes, bytes]):
    """A table that counts its reads."""

    reads = 0

    def get(self, key: bytes, default: object = None) -> object:  # type: ignore[override]
        self.reads += 1
        return super().get(key, default)
