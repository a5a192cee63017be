"""The per-tenant request rate limit: a token bucket per tenant, refilled at the tenant's rate.

A tenant's rate is its record's ``rate_limit_per_s``, else the ranker's
``MNEMO_TENANT_RATE_LIMIT_PER_S``; 0 is unlimited. A bucket holds one second of requests (at
least one), so a tenant may burst to its rate at once and then goes at the rate. The clock is
read by the caller (the HTTP edge) and passed in: the logic here is pure.
"""

from __future__ import annotations

from dataclasses import dataclass


class RateLimited(Exception):  # noqa: N818 - the condition, as callers catch it
    """A tenant over its rate limit; the same request is accepted after ``retry_after_s``."""

    def __init__(self, tenant_id: str, rate_per_s: float, retry_after_s: float) -> None:
        self.tenant_id = tenant_id
        self.rate_per_s = rate_per_s
        self.retry_after_s = retry_after_s
        super().__init__(
            f"tenant {tenant_id} is over its rate limit of {rate_per_s:g} requests/s;"
            f" retry after {retry_after_s:.2f} s"
        )


@dataclass
class TokenBucket:
    """``tokens`` of at most ``capacity``, refilled at ``rate_per_s`` since ``at`` (seconds on
    the caller's monotonic clock).
    """

    rate_per_s: float
    capacity: float
    tokens: float
    at: float

    @classmethod
    def full(cls, rate_per_s: float, now: float) -> TokenBucket:
        capacity = max(1.0, rate_per_s)
        return cls(rate_per_s, capacity, capacity, now)

    def take(self, now: float) -> float:
        """Take one token: 0.0 when there was one, else the seconds until there is one (and
        nothing is taken).
        """
        elapsed = max(0.0, now - self.at)  # a clock that went back refills nothing
        self.tokens = min(self.capacity, self.tokens + elapsed * self.rate_per_s)
        self.at = max(self.at, now)
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return 0.0
        return (1.0 - self.tokens) / self.rate_per_s


class RateLimiter:
    """One bucket per tenant; a tenant whose rate changed starts again with a full bucket."""

    def __init__(self, default_per_s: float = 0.0) -> None:
        self.default_per_s = default_per_s
        self._buckets: dict[str, TokenBucket] = {}

    def rate(self, given: float | None) -> float:
        """The rate that applies: the tenant's own, else the default (0: unlimited)."""
        return self.default_per_s if given is None else given

    def check(self, tenant_id: str, given: float | None, now: float) -> None:
        """Count one request of ``tenant_id`` at ``now``; raise RateLimited when over its rate."""
        rate = self.rate(given)
        if rate <= 0:
            self._buckets.pop(tenant_id, None)
            return
        bucket = self._buckets.get(tenant_id)
        if bucket is None or bucket.rate_per_s != rate:
            bucket = self._buckets[tenant_id] = TokenBucket.full(rate, now)
        wait = bucket.take(now)
        if wait > 0:
            raise RateLimited(tenant_id, rate, wait)
