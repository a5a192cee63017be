"""Recall scoring for many requests in one torch pass: the vectorised twin of :func:`memcore.rank`.

Requests (any tenants) are padded into ``[requests × candidates]`` tensors and scored together, on
CUDA when present, else the CPU, in float64 so that scores equal memcore's scalar reference to 1e-6
(tested). Ordering, ties (by memory id), the minimum score and ``k`` follow memcore exactly.
Requests that ask for MMR, or the ``zeph`` preset (whose pipeline includes MMR), are sequential by
nature and are scored by memcore itself.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import torch

from memcore import Candidate, RankParams, Scored, rank
from memcore.policy import RecallPreset
from memcore.types import require_finite

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US_PER_HOUR = 3.6e9


@dataclass(frozen=True)
class RankRequest:
    """One request's candidates, scoring time and settings."""

    candidates: Sequence[Candidate]
    at: datetime
    params: RankParams


def default_device() -> torch.device:
    """CUDA when torch sees a GPU, else the CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _us(at: datetime) -> int:
    return (at - _EPOCH) // timedelta(microseconds=1)


def _vectorisable(request: RankRequest) -> bool:
    policy = request.params.policy
    return policy.preset is not RecallPreset.ZEPH and policy.mmr_lambda is None


def rank_many(
    requests: Sequence[RankRequest], device: torch.device | None = None
) -> list[list[Scored]]:
    """Rank every request; results in request order, each as :func:`memcore.rank` would give."""
    out: list[list[Scored] | None] = [None] * len(requests)
    batch = [i for i, r in enumerate(requests) if _vectorisable(r) and r.candidates]
    scalar = set(range(len(requests))) - set(batch)
    for i in sorted(scalar):
        out[i] = rank(requests[i].candidates, requests[i].at, requests[i].params)
    if batch:
        scored = _score([requests[i] for i in batch], device or default_device())
        for i, rows in zip(batch, scored, strict=True):
            out[i] = rows
    return [rows if rows is not None else [] for rows in out]


@dataclass(frozen=True)
class Columns:
    """A batch as padded ``[requests × candidates]`` float64 tensors (per-request ones ``[R]``)."""

    similarity: torch.Tensor
    keyword: torch.Tensor
    importance: torch.Tensor
    idle_us: torch.Tensor
    tau_hours: torch.Tensor
    graph: torch.Tensor
    mask: torch.Tensor
    weights: torch.Tensor  # [R, 5]: similarity, keyword, importance, recency, graph
    graph_weight: torch.Tensor
    graphrag: torch.Tensor
    powermem: torch.Tensor


def columns(requests: Sequence[RankRequest], device: torch.device) -> Columns:
    """Pad the requests' candidates into tensors (the Python-to-tensor part of a batch)."""
    width = max(len(r.candidates) for r in requests)
    f64 = torch.float64

    def padded(values: Sequence[Sequence[float]], fill: float = 0.0) -> torch.Tensor:
        rows = [list(v) + [fill] * (width - len(v)) for v in values]
        return torch.tensor(rows, dtype=f64, device=device).reshape(len(requests), width)

    cands = [r.candidates for r in requests]
    for c in cands:
        for x in c:
            require_finite("similarity", x.similarity)
    policies = [r.params.policy for r in requests]
    return Columns(
        similarity=padded([[x.similarity for x in c] for c in cands]),
        keyword=padded([[x.keyword for x in c] for c in cands]),
        importance=padded([[x.importance for x in c] for c in cands]),
        idle_us=padded(
            [[float(_us(r.at) - _us(x.last_access)) for x in r.candidates] for r in requests]
        ),
        tau_hours=padded([[x.tau_hours for x in c] for c in cands], fill=1.0),
        graph=padded(
            [
                [0.0 if x.graph_hops is None else 1.0 / (1.0 + x.graph_hops) for x in c]
                for c in cands
            ]
        ),
        mask=padded([[1.0] * len(c) for c in cands]) > 0,
        weights=torch.tensor(
            [
                [
                    p.weights.similarity,
                    p.weights.keyword,
                    p.weights.importance,
                    p.weights.recency,
                    p.weights.graph,
                ]
                for p in policies
            ],
            dtype=f64,
            device=device,
        ),
        graph_weight=torch.tensor([p.graph_weight for p in policies], dtype=f64, device=device),
        graphrag=torch.tensor([p.graphrag for p in policies], device=device),
        powermem=torch.tensor([p.preset is RecallPreset.POWERMEM for p in policies], device=device),
    )


def kernel(c: Columns) -> tuple[torch.Tensor, ...]:
    """The scores: (similarity, keyword, importance, recency, graph, final), padding at -inf."""
    sim = c.similarity.clamp(0.0, 1.0)
    keyword = c.keyword.clamp(min=0.0)
    top = keyword.max(dim=1, keepdim=True).values
    keyword = torch.where(top > 0, keyword / torch.where(top > 0, top, 1.0), 0.0)
    recency = torch.exp(-(c.idle_us.clamp(min=0.0) / _US_PER_HOUR) / c.tau_hours)
    w = c.weights
    blend = (
        w[:, 0:1] * sim
        + w[:, 1:2] * keyword
        + w[:, 2:3] * c.importance
        + w[:, 3:4] * recency
        + w[:, 4:5] * c.graph
    )
    gw = c.graph_weight[:, None]
    blend = torch.where(c.graphrag[:, None], blend * (1.0 - gw) + c.graph * gw, blend)
    pm = c.powermem[:, None]
    final = torch.where(c.mask, torch.where(pm, sim * recency, blend), -math.inf)
    keyword = torch.where(pm, 0.0, keyword)
    graph = torch.where(pm, 0.0, c.graph)
    return sim, keyword, c.importance, recency, graph, final


def _score(requests: Sequence[RankRequest], device: torch.device) -> list[list[Scored]]:
    result = [t.cpu().tolist() for t in kernel(columns(requests, device))]
    return [_top(request, row, result) for row, request in enumerate(requests)]


def _top(request: RankRequest, row: int, columns: list[list[list[float]]]) -> list[Scored]:
    sim, keyword, importance, recency, graph, final = (c[row] for c in columns)
    policy = request.params.policy
    scored = [
        Scored(x.memory_id, sim[i], keyword[i], importance[i], recency[i], graph[i], final[i])
        for i, x in enumerate(request.candidates)
        if final[i] >= policy.min_score
    ]
    scored.sort(key=lambda s: (-s.final, s.memory_id))
    return scored[: request.params.k]
