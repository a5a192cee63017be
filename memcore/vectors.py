"""Small vector helpers in pure Python: the scalar reference for the vectorised ranker."""

from __future__ import annotations

import math
from collections.abc import Sequence


def dot(a: Sequence[float], b: Sequence[float]) -> float:
    """Inner product; raises ValueError when the lengths differ."""
    if len(a) != len(b):
        msg = f"vector lengths differ: {len(a)} != {len(b)}"
        raise ValueError(msg)
    return math.fsum(x * y for x, y in zip(a, b, strict=True))


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine similarity in [-1, 1]; 0 when either vector is all zeros."""
    na = math.sqrt(dot(a, a))
    nb = math.sqrt(dot(b, b))
    if na == 0.0 or nb == 0.0:
        return 0.0
    return max(-1.0, min(1.0, dot(a, b) / (na * nb)))
