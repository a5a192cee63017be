"""The torch kernel equals memcore's scalar reference: same order, scores within 1e-6."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from memcore import Candidate, InvalidField, RankParams, Tier, rank
from memcore.policy import RecallPolicy, RecallPreset, RecallWeights
from ranker.kernel import RankRequest, rank_many

from .helpers import T0


def random_request(rng: random.Random, n: int) -> RankRequest:
    candidates = [
        Candidate(
            memory_id=f"m{rng.randrange(10_000)}-{i}",
            similarity=rng.uniform(-0.3, 1.0),
            importance=rng.random(),
            last_access=T0 - timedelta(hours=rng.uniform(-2, 2000)),
            created_at=T0 - timedelta(days=rng.uniform(0, 100)),
            tau_hours=rng.choice([1.2, 2.4, 48.0, 240.0, 1200.0]),
            tier=rng.choice(list(Tier)),
            keyword=rng.choice([0.0, rng.uniform(0, 12)]),
            graph_hops=rng.choice([None, 0, 1, 2]),
            vector=tuple(rng.gauss(0, 1) for _ in range(4)),
        )
        for i in range(n)
    ]
    preset = rng.choice([RecallPreset.ZEROMEMORY] * 3 + [RecallPreset.POWERMEM, RecallPreset.ZEPH])
    weights = RecallWeights(*(rng.choice([0.0, rng.random()]) for _ in range(5)))
    policy = RecallPolicy(
        preset=preset,
        weights=weights,
        graphrag=rng.random() < 0.3,
        mmr_lambda=rng.choice([None, None, None, 0.6]),
        min_score=rng.choice([0.0, 0.0, 0.3]),
    )
    return RankRequest(candidates, T0, RankParams(k=rng.randrange(1, 20), policy=policy))


def test_kernel_equals_the_scalar_reference() -> None:
    rng = random.Random(9)
    requests = [random_request(rng, rng.randrange(0, 60)) for _ in range(200)]
    ties = random_request(rng, 10)
    tied = [Candidate(c.memory_id, 0.5, 0.5, T0, T0, 48.0) for c in ties.candidates]
    requests.append(RankRequest(tied, T0, RankParams(k=5)))
    results = rank_many(requests)
    vectorised = 0
    for request, got in zip(requests, results, strict=True):
        want = rank(request.candidates, request.at, request.params)
        assert [s.memory_id for s in got] == [s.memory_id for s in want]
        for g, w in zip(got, want, strict=True):
            for field in ("similarity", "keyword", "importance", "recency", "graph", "final"):
                assert getattr(g, field) == pytest.approx(getattr(w, field), abs=1e-6), field
        policy = request.params.policy
        vectorised += policy.preset is not RecallPreset.ZEPH and policy.mmr_lambda is None
    assert vectorised > 100  # most requests went through torch, not the fallback


def test_the_alice_example_through_the_kernel() -> None:
    import math

    tau = 1200.0
    rows = [(0.92, 0.8, 0.9), (0.75, 0.4, 0.3), (0.70, 0.5, 0.7)]
    candidates = [
        Candidate(f"m{i}", s, imp, T0 - timedelta(hours=-tau * math.log(rec)), T0, tau)
        for i, (s, imp, rec) in enumerate(rows)
    ]
    (ranked,) = rank_many([RankRequest(candidates, T0, RankParams(k=3))])
    assert [(s.memory_id, round(s.final, 3)) for s in ranked] == [
        ("m0", 0.88),
        ("m2", 0.64),
        ("m1", 0.555),
    ]


def test_nan_similarity_is_rejected() -> None:
    bad = Candidate("x", float("nan"), 0.5, T0, T0, 48.0)
    with pytest.raises(InvalidField, match="similarity"):
        rank_many([RankRequest([bad], T0, RankParams())])
