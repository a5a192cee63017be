"""Latency figures every bench reports the same way."""

from __future__ import annotations

import statistics
from collections.abc import Iterable


def p50_p99(ms: Iterable[float]) -> tuple[float, float]:
    """Median and 99th percentile (the value at rank ``int(0.99 n)`` of the sorted ``ms``, the
    highest for fewer than 100); NaN for none.
    """
    values = sorted(ms)
    if not values:
        return float("nan"), float("nan")
    return statistics.median(values), values[min(len(values) - 1, int(0.99 * len(values)))]
