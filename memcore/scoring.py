"""Recall ranking (SPEC section 6): the scalar reference the vectorised ranker is tested against.

``rank(candidates, at, params)`` scores a batch of one request's candidates and returns the top k
with a breakdown of every term. Only ``at`` (the scoring time) is used as time.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from memcore.decay import effective_importance, recency_at
from memcore.errors import InvalidField
from memcore.graph import proximity
from memcore.keyword import normalise_by_max
from memcore.policy import DecayPolicy, RecallPolicy, RecallPreset, RecallWeights
from memcore.types import HOURS_PER_DAY, Tier, hours_between, require_finite
from memcore.vectors import cosine


@dataclass(frozen=True)
class Candidate:
    """One memory as recall sees it.

    Attributes:
        memory_id: id within the tenant.
        similarity: cosine similarity to the query in [-1, 1]; negatives count as 0.
        importance: [0, 1].
        last_access: decay clock (event time).
        created_at: creation (event time); the ``zeph`` preset decays on age.
        tau_hours: the memory's decay constant, hours.
        tier: the memory's tier.
        keyword: raw keyword score (e.g. BM25), >= 0; normalised by the batch maximum.
        graph_hops: hops from the query's best hits over relations, None when unreached.
        vector: the memory's vector, needed only for MMR.
        access_count: accesses so far; ``mnemostream``'s access recency is 0 for a memory never
            accessed (creation alone is no sign of relevance).
        archived: the memory is archived; its score is multiplied by the archived penalty.
    """

    memory_id: str
    similarity: float
    importance: float
    last_access: datetime
    created_at: datetime
    tau_hours: float
    tier: Tier = Tier.EPISODIC
    keyword: float = 0.0
    graph_hops: int | None = None
    vector: tuple[float, ...] = ()
    access_count: int = 0
    archived: bool = False


@dataclass(frozen=True)
class Scored:
    """A ranked memory with every term of its score (all in the preset's own units).

    Attributes:
        similarity: clamped cosine in [0, 1] (``zeph``: divided by the batch maximum).
        keyword: keyword score divided by the batch maximum, [0, 1].
        importance: the memory's importance.
        recency: ``exp(-idle/τ)`` (``zeph``: the age decay factor; ``mnemostream``: access
            recency, 0 for a memory never accessed).
        graph: graph proximity ``1/(1+hops)``.
        final: the score results are ordered by.
    """

    memory_id: str
    similarity: float
    keyword: float
    importance: float
    recency: float
    graph: float
    final: float


@dataclass(frozen=True)
class RankParams:
    """One request's ranking settings; defaults come from the tenant's :class:`RecallPolicy`.

    Attributes:
        k: number of results, >= 1.
        policy: preset, weights, GraphRAG, MMR and minimum score.
        decay: the rates recency is scored with, by each candidate's tier (the service passes
            :func:`memcore.policy.recall_decay`); None: each candidate's own τ.
    """

    k: int = 10
    policy: RecallPolicy = field(default_factory=RecallPolicy)
    decay: DecayPolicy | None = None

    def __post_init__(self) -> None:
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 1:
            raise InvalidField("k", self.k, "expected an integer >= 1")


def clamp_similarity(cos: float) -> float:
    """Cosine as a similarity in [0, 1]: negative cosines count as no similarity."""
    return min(1.0, max(0.0, cos))


def blend(
    similarity: float,
    keyword: float,
    importance: float,
    recency: float,
    graph: float,
    weights: RecallWeights,
) -> float:
    """``w_sim·sim + w_kw·kw + w_imp·imp + w_rec·rec + w_graph·graph``."""
    return (
        weights.similarity * similarity
        + weights.keyword * keyword
        + weights.importance * importance
        + weights.recency * recency
        + weights.graph * graph
    )


def graphrag(vector_part: float, graph: float, graph_weight: float) -> float:
    """``vector_part × (1 - graph_weight) + graph × graph_weight``."""
    return vector_part * (1.0 - graph_weight) + graph * graph_weight


def mnemostream(
    relevance: float, importance: float, access_recency: float, graph: float, weights: RecallWeights
) -> float:
    """SPEC section 6, the default: ``relevance × (1 + b_imp·(importance − 0.5) +
    b_rec·access_recency + b_graph·graph)`` with the boosts taken from ``weights``.
    """
    boost = (
        weights.importance * (importance - 0.5)
        + weights.recency * access_recency
        + weights.graph * graph
    )
    return relevance * (1.0 + boost)


def rank(candidates: Sequence[Candidate], at: datetime, params: RankParams) -> list[Scored]:
    """Score, drop scores under the minimum, optionally diversify (MMR), keep the top k.

    The minimum applies to the score before MMR (MMR only reorders for diversity and may push a
    near-copy's score below zero); for ``zeph``, whose pipeline includes MMR, to its final score.
    An archived candidate's score (before MMR; ``zeph``: its relevance) is multiplied by the
    archived penalty. ``zeromemory`` drops candidates under its soft-delete line.

    Ties are broken by memory id so the order is total and reproducible.
    """
    policy = params.policy
    if params.decay is not None:
        decay = params.decay
        candidates = [replace(c, tau_hours=decay.tau_hours(c.tier)) for c in candidates]
    floor = -sys.float_info.max if policy.min_score is None else policy.min_score  # not -inf
    if policy.preset is RecallPreset.ZEPH:
        kept = [s for s in _zeph(candidates, at, policy) if s.final >= floor]
    else:
        base = _BASE[policy.preset]
        pairs = [
            (s, c)
            for s, c in zip(base(candidates, at, policy), candidates, strict=True)
            if s.final >= floor
        ]
        kept = [s for s, _ in pairs]
        if policy.mmr_lambda is not None:
            pairs.sort(key=lambda pair: pair[0].memory_id)  # MMR's ties go to the lower id
            kept = _with_mmr([s for s, _ in pairs], [c for _, c in pairs], policy.mmr_lambda)
    kept.sort(key=lambda s: (-s.final, s.memory_id))
    return kept[: params.k]


def _penalised(c: Candidate, value: float, policy: RecallPolicy) -> float:
    return value * policy.archived_penalty if c.archived else value


def _mnemostream(
    candidates: Sequence[Candidate], at: datetime, policy: RecallPolicy
) -> list[Scored]:
    keywords = normalise_by_max([c.keyword for c in candidates])
    w = policy.weights
    out = []
    for c, kw in zip(candidates, keywords, strict=True):
        sim = clamp_similarity(require_finite("similarity", c.similarity))
        rec = recency_at(c.last_access, at, c.tau_hours) if c.access_count > 0 else 0.0
        graph = proximity(c.graph_hops)
        final = mnemostream(w.similarity * sim + w.keyword * kw, c.importance, rec, graph, w)
        if policy.graphrag:
            final = graphrag(final, graph, policy.graph_weight)
        out.append(
            Scored(c.memory_id, sim, kw, c.importance, rec, graph, _penalised(c, final, policy))
        )
    return out


def _zeromemory(
    candidates: Sequence[Candidate], at: datetime, policy: RecallPolicy
) -> list[Scored]:
    keywords = normalise_by_max([c.keyword for c in candidates])
    out = []
    for c, kw in zip(candidates, keywords, strict=True):
        sim = clamp_similarity(require_finite("similarity", c.similarity))
        rec = recency_at(c.last_access, at, c.tau_hours)
        graph = proximity(c.graph_hops)
        final = blend(sim, kw, c.importance, rec, graph, policy.weights)
        if policy.graphrag:
            final = graphrag(final, graph, policy.graph_weight)
        if effective_importance(c.importance, rec) < policy.soft_delete_below:
            final = -math.inf  # zeromemory's soft delete: never returned
        out.append(
            Scored(c.memory_id, sim, kw, c.importance, rec, graph, _penalised(c, final, policy))
        )
    return out


def _powermem(
    candidates: Sequence[Candidate],
    at: datetime,
    policy: RecallPolicy,
) -> list[Scored]:
    out = []
    for c in candidates:
        sim = clamp_similarity(require_finite("similarity", c.similarity))
        rec = recency_at(c.last_access, at, c.tau_hours)
        graph = proximity(c.graph_hops) if policy.graphrag else 0.0
        final = _graphrag(sim * rec, graph, policy)
        out.append(
            Scored(c.memory_id, sim, 0.0, c.importance, rec, graph, _penalised(c, final, policy))
        )
    return out


def _graphrag(vector_part: float, graph: float, policy: RecallPolicy) -> float:
    """SPEC section 6, "GraphRAG (any preset)": the preset's own score blended with the graph
    proximity when the request turns GraphRAG on (before the archived penalty, MMR and bonuses).
    """
    return graphrag(vector_part, graph, policy.graph_weight) if policy.graphrag else vector_part


def zeph_age_factor(created_at: datetime, at: datetime, half_life_days: float) -> float:
    """``exp(-ln 2 × age_days / half_life)``; age never counts as negative, and age 0 gives 1
    however short the half-life (``ln 2 / half_life`` first overflowed to inf, and inf × 0 is NaN).
    """
    age_days = max(hours_between(created_at, at), 0.0) / HOURS_PER_DAY
    return math.exp(-math.log(2.0) * (age_days / half_life_days))


def _zeph(candidates: Sequence[Candidate], at: datetime, policy: RecallPolicy) -> list[Scored]:
    sims = normalise_by_max(
        [clamp_similarity(require_finite("similarity", c.similarity)) for c in candidates]
    )
    keywords = normalise_by_max([c.keyword for c in candidates])
    relevance = []
    for c, sim, kw in zip(candidates, sims, keywords, strict=True):
        age = zeph_age_factor(c.created_at, at, policy.zeph_half_life_days)
        graph = proximity(c.graph_hops) if policy.graphrag else 0.0
        value = _graphrag((0.7 * sim + 0.3 * kw) * age, graph, policy)
        relevance.append(
            Scored(c.memory_id, sim, kw, c.importance, age, graph, _penalised(c, value, policy))
        )
    by_id = sorted(range(len(candidates)), key=lambda i: candidates[i].memory_id)  # MMR's ties
    diversified = _with_mmr(
        [relevance[i] for i in by_id], [candidates[i] for i in by_id], policy.zeph_mmr_lambda
    )
    tier_of = {c.memory_id: c.tier for c in candidates}
    out = []
    for s in diversified:
        bonus = policy.zeph_importance_weight * s.importance
        if tier_of[s.memory_id] is Tier.SEMANTIC:
            bonus += policy.zeph_semantic_bonus
        out.append(_with_final(s, s.final + bonus))
    return out


_BASE = {
    RecallPreset.MNEMOSTREAM: _mnemostream,
    RecallPreset.ZEROMEMORY: _zeromemory,
    RecallPreset.POWERMEM: _powermem,
}


def _with_final(s: Scored, final: float) -> Scored:
    return Scored(s.memory_id, s.similarity, s.keyword, s.importance, s.recency, s.graph, final)


def _with_mmr(scored: list[Scored], candidates: Sequence[Candidate], lam: float) -> list[Scored]:
    vectors = [c.vector for c in candidates]
    order = mmr([s.final for s in scored], vectors, lam)
    return [_with_final(scored[i], value) for i, value in order]


def mmr(
    relevance: Sequence[float], vectors: Sequence[Sequence[float]], lam: float
) -> list[tuple[int, float]]:
    """Maximal marginal relevance over all items, greedily.

    At each step picks the item maximising ``lam·relevance − (1−lam)·max cosine to those already
    picked`` (0 for the first); ties go to the lower index. Returns ``(index, mmr_score)`` in pick
    order; scores never increase along the order. Items without a vector are never penalised.
    """
    remaining = list(range(len(relevance)))
    penalty = [0.0] * len(relevance)
    picked: list[tuple[int, float]] = []
    while remaining:
        best = max(remaining, key=lambda i: (lam * relevance[i] - (1 - lam) * penalty[i], -i))
        value = lam * relevance[best] - (1 - lam) * penalty[best]
        picked.append((best, value))
        remaining.remove(best)
        if vectors[best]:
            for i in remaining:
                if vectors[i]:
                    penalty[i] = max(penalty[i], cosine(vectors[i], vectors[best]))
    return picked


def versions_by_fact(ranked: Sequence[tuple[str, str | None]]) -> list[int]:
    """The order of a history recall's results (``include_history``), each a ``(memory_id,
    superseded_by)`` pair, best first: returns their indices with the places the versions of
    one fact hold given to them newest first (the current version, then the ones it
    superseded, then theirs), every other result keeping its place. So the top k hold a fact's
    current version before any older one however much better the older words match ("I live
    in Paris" over "I live in Berlin now" for "Where do I live?"), and a fact takes no more of
    the top k than its versions' scores gave it (an older version that matched well can give
    its place to its newer one and leave the top k). A fact is followed through
    ``superseded_by`` among the results only; a cycle (a racing rewrite) is cut where it closes.
    """
    at = {memory_id: i for i, (memory_id, _) in enumerate(ranked)}
    head: dict[int, int] = {}  # the newest version among the results of each one's fact
    depth: dict[int, int] = {}  # its hops to that version
    for first in range(len(ranked)):
        path: list[int] = []  # ``first`` and its successors not followed yet
        i: int | None = first
        while i is not None and i not in head and i not in path:
            path.append(i)
            i = at.get(ranked[i][1] or "")
        if i is not None and i in head:
            top, hops = head[i], depth[i] + 1
        else:  # the end of the chain, or where a cycle closes: its last version is the newest
            top, hops = path.pop(), 1
            head[top], depth[top] = top, 0
        for j in reversed(path):
            head[j], depth[j] = top, hops
            hops += 1
    facts: dict[int, list[int]] = {}
    for i in range(len(ranked)):
        facts.setdefault(head[i], []).append(i)
    order = list(range(len(ranked)))
    for versions in facts.values():  # the fact's places (ascending), newest version first
        for place, i in zip(versions, sorted(versions, key=lambda j: (depth[j], j)), strict=True):
            order[place] = i
    return order
