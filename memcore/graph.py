"""Graph proximity over ``relations``: ``1 / (1 + hops)`` from the query's best vector hits."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence

MAX_HOPS = 3
"""Memories further than this from every seed have graph proximity 0."""


def hops_from(
    seeds: Iterable[str], relations: Mapping[str, Sequence[str]], max_hops: int = MAX_HOPS
) -> dict[str, int]:
    """Breadth-first hop counts from ``seeds`` (0 hops) over relations, followed in both directions.

    Memories further than ``max_hops`` are absent (their proximity is 0).
    """
    neighbours: dict[str, set[str]] = {}
    for source, targets in relations.items():
        for target in targets:
            neighbours.setdefault(source, set()).add(target)
            neighbours.setdefault(target, set()).add(source)
    hops: dict[str, int] = {}
    queue: deque[str] = deque()
    for seed in seeds:
        if seed not in hops:
            hops[seed] = 0
            queue.append(seed)
    while queue:
        node = queue.popleft()
        if hops[node] >= max_hops:
            continue
        for nxt in sorted(neighbours.get(node, ())):
            if nxt not in hops:
                hops[nxt] = hops[node] + 1
                queue.append(nxt)
    return hops


def proximity(hops: int | None) -> float:
    """``1 / (1 + hops)``; 0 for a memory not reached."""
    if hops is None:
        return 0.0
    return 1.0 / (1.0 + hops)


def recall_hops(
    similarities: Mapping[str, float],
    relations: Mapping[str, Sequence[str]],
    seeds: int = 3,
    max_hops: int = MAX_HOPS,
) -> dict[str, int]:
    """Hops of recall candidates from the query's best vector hits (SPEC section 6).

    ``similarities``: each candidate's cosine to the query; the ``seeds`` most similar (ties by
    id) are the 0-hop seeds. ``relations``: the relations of the candidates (and of any other
    memories a path may pass through). Memories not reached within ``max_hops`` are absent
    (proximity 0).
    """
    best = sorted(similarities, key=lambda m: (-similarities[m], m))[:seeds]
    return hops_from(best, relations, max_hops)
