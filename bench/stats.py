"""Latency figures every bench reports the same way."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable


def p50_p99(ms: Iterable[float]) -> tuple[float, float]:
    """Median and 99th percentile (nearest rank: the ``ceil(0.99 n)``-th smallest of ``ms``, so
    the 99th of 100 values, the highest for fewer than 100); NaN for none.
    """
    values = sorted(ms)
    if not values:
        return float("nan"), float("nan")
    return statistics.median(values), values[max(0, math.ceil(0.99 * len(values)) - 1)]
