"""The torch kernel equals memcore's scalar reference: same order, scores within 1e-6, for every
preset, GraphRAG, MMR (vectorised over the batch) and the exact similarity FAISS computes.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
from datetime import timedelta

import pytest
import torch

from memcore import Candidate, InvalidField, RankParams, Scored, Tier, rank
from memcore.policy import (
    DECAY_PRESETS,
    DecayPreset,
    RecallPolicy,
    RecallPreset,
    RecallWeights,
)
from memcore.vectors import cosine
from ranker.kernel import RankRequest, diversifies, passes, rank_many

from .helpers import T0


def random_candidates(rng: random.Random, n: int, dim: int = 8) -> list[Candidate]:
    return [
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
            vector=tuple(rng.gauss(0, 1) for _ in range(dim)),
            access_count=rng.choice([0, 0, 1, 7]),
            archived=rng.random() < 0.2,
        )
        for i in range(n)
    ]


def random_params(rng: random.Random) -> RankParams:
    preset = rng.choice(
        [RecallPreset.MNEMOSTREAM] * 3
        + [RecallPreset.ZEROMEMORY] * 2
        + [RecallPreset.POWERMEM, RecallPreset.ZEPH]
    )
    weights = RecallWeights(*(rng.choice([0.0, rng.random()]) for _ in range(5)))
    policy = RecallPolicy(
        preset=preset,
        weights=weights,
        graphrag=rng.random() < 0.3,
        mmr_lambda=rng.choice([None, None, None, 0.6, 0.0, 1.0]),
        min_score=rng.choice([None, 0.0, 0.3]),
        archived_penalty=rng.choice([0.5, 0.0, 1.0]),
        soft_delete_below=rng.choice([0.05, 0.3]),
    )
    decay = rng.choice(
        [None, DECAY_PRESETS[DecayPreset.ZEROMEMORY], DECAY_PRESETS[DecayPreset.POWERMEM]]
    )
    return RankParams(k=rng.randrange(1, 20), policy=policy, decay=decay)


def assert_same(got: list[Scored], want: list[Scored]) -> None:
    assert [s.memory_id for s in got] == [s.memory_id for s in want]
    for g, w in zip(got, want, strict=True):
        for field in ("similarity", "keyword", "importance", "recency", "graph", "final"):
            assert getattr(g, field) == pytest.approx(getattr(w, field), abs=1e-6), field


def test_kernel_equals_the_scalar_reference() -> None:
    rng = random.Random(9)
    cases = [(random_candidates(rng, rng.randrange(0, 60)), random_params(rng)) for _ in range(200)]
    tied = [Candidate(f"t{i}", 0.5, 0.5, T0, T0, 48.0) for i in range(10)]
    cases.append((tied, RankParams(k=5)))
    cases.append((tied, RankParams(k=5, policy=RecallPolicy(mmr_lambda=0.5))))  # no vectors
    results = rank_many([RankRequest.of(c, T0, p) for c, p in cases])
    for (candidates, params), got in zip(cases, results, strict=True):
        assert_same(got, rank(candidates, T0, params))
    diversified = sum(
        bool(c) and (p.policy.mmr_lambda is not None or p.policy.preset is RecallPreset.ZEPH)
        for c, p in cases
    )
    assert diversified > 20  # MMR and zeph requests were in the batch too


@pytest.mark.parametrize(
    "presets", [(p,) for p in RecallPreset] + list(itertools.combinations(RecallPreset, 2))
)
@pytest.mark.parametrize("graphrag", [False, True])
def test_a_batch_of_some_presets_equals_the_scalar_reference(
    presets: tuple[RecallPreset, ...], graphrag: bool
) -> None:
    """The kernel leaves out the terms of presets (and GraphRAG) no request of a batch uses: a
    batch of one preset or two, with and without GraphRAG, still ranks as memcore does.
    """
    rng = random.Random("-".join(presets) + str(graphrag))
    cases = []
    for _ in range(40):
        params = random_params(rng)
        policy = dataclasses.replace(
            params.policy, preset=rng.choice(presets), graphrag=graphrag and rng.random() < 0.7
        )
        candidates = random_candidates(rng, rng.randrange(1, 40))
        cases.append((candidates, RankParams(k=params.k, policy=policy)))
    assert {p.policy.preset for _, p in cases} == set(presets)
    results = rank_many([RankRequest.of(c, T0, p) for c, p in cases])
    for (candidates, params), got in zip(cases, results, strict=True):
        assert_same(got, rank(candidates, T0, params))


@pytest.mark.parametrize("preset", [RecallPreset.MNEMOSTREAM, RecallPreset.ZEPH])
def test_mmr_breaks_ties_by_id_whatever_order_the_store_gave(preset: RecallPreset) -> None:
    """Two copies of one memory (one sentence in two scopes): which is shown and which is
    penalised followed the order the hot cache or Milvus returned them in.
    """
    same = (1.0, 0.0, 0.0)
    made = {
        "a": Candidate("a", 0.9, 0.5, T0, T0, 48.0, vector=same),
        "b": Candidate("b", 0.9, 0.5, T0, T0, 48.0, vector=same),
        "z": Candidate("z", 0.2, 0.5, T0, T0, 48.0, vector=(0.0, 1.0, 0.0)),
    }
    params = RankParams(k=2, policy=RecallPolicy(preset=preset, mmr_lambda=0.6))
    orders = [list(p) for p in itertools.permutations("abz")]
    cases = [[made[m] for m in order] for order in orders]
    kernel = rank_many([RankRequest.of(c, T0, params) for c in cases])
    shown = {tuple(s.memory_id for s in got) for got in kernel}
    assert shown == {tuple(s.memory_id for s in rank(c, T0, params)) for c in cases}
    assert len(shown) == 1
    assert next(iter(shown))[0] == "a"


@pytest.mark.parametrize("use_faiss", [True, False])
def test_similarity_is_the_exact_cosine_to_the_query(use_faiss: bool) -> None:
    """With a query vector, the store's similarity is replaced by the exact cosine (FAISS on the
    CPU, batched matmuls as on CUDA), so a wrong similarity from an approximate index does not
    change the ranking; MMR's pairwise cosines come from the same products.
    """
    rng = random.Random(4)
    cases = []
    for _ in range(50):
        candidates = random_candidates(rng, rng.randrange(1, 40))
        noisy = [dataclasses.replace(c, similarity=rng.random()) for c in candidates]
        cases.append(([rng.gauss(0, 1) for _ in range(8)], noisy, random_params(rng)))
    assert_equals_memcore_on_exact_cosines(cases, use_faiss)


def assert_equals_memcore_on_exact_cosines(
    cases: list[tuple[list[float], list[Candidate], RankParams]], use_faiss: bool
) -> None:
    """Each (query, candidates, params) ranks as memcore does with similarity = exact cosine."""
    requests = [RankRequest.of(c, T0, p, query=q) for q, c, p in cases]
    ranked = rank_many(requests, torch.device("cpu"), use_faiss=use_faiss)
    for (query, candidates, params), got in zip(cases, ranked, strict=True):
        exact = [dataclasses.replace(c, similarity=cosine(query, c.vector)) for c in candidates]
        assert_same(got, rank(exact, T0, params))


def test_the_alice_example_through_the_kernel() -> None:
    import math

    tau = 1200.0
    rows = [(0.92, 0.8, 0.9), (0.75, 0.4, 0.3), (0.70, 0.5, 0.7)]
    candidates = [
        Candidate(f"m{i}", s, imp, T0 - timedelta(hours=-tau * math.log(rec)), T0, tau)
        for i, (s, imp, rec) in enumerate(rows)
    ]
    zeromemory = RankParams(k=3, policy=RecallPolicy.of(RecallPreset.ZEROMEMORY))
    (ranked,) = rank_many([RankRequest.of(candidates, T0, zeromemory)])
    assert [(s.memory_id, round(s.final, 3)) for s in ranked] == [
        ("m0", 0.88),
        ("m2", 0.64),
        ("m1", 0.555),
    ]


def test_a_zeph_half_life_however_short_keeps_a_memory_of_age_zero() -> None:
    # ln 2 / half-life overflowed to inf, and inf x age 0 is NaN: the fresh, better match was
    # dropped by the scalar reference and the kernel alike
    policy = RecallPolicy(preset=RecallPreset.ZEPH, zeph_half_life_days=5e-324)
    candidates = [
        Candidate("fresh", 0.9, 0.5, T0, T0, 48.0),
        Candidate("old", 0.1, 0.5, T0 - timedelta(days=1), T0 - timedelta(days=1), 48.0),
    ]
    params = RankParams(k=5, policy=policy)
    (ranked,) = rank_many([RankRequest.of(candidates, T0, params)])
    assert_same(ranked, rank(candidates, T0, params))
    assert [s.memory_id for s in ranked][:1] == ["fresh"]
    assert all(s.final == s.final for s in ranked)  # no NaN


def test_nan_similarity_is_rejected() -> None:
    bad = Candidate("x", float("nan"), 0.5, T0, T0, 48.0)
    with pytest.raises(InvalidField, match="similarity"):
        rank_many([RankRequest.of([bad], T0, RankParams())])


@pytest.mark.parametrize("use_faiss", [True, False])
def test_a_batch_may_mix_vector_dimensions(use_faiss: bool) -> None:
    rng = random.Random(5)
    params = RankParams(k=12, policy=RecallPolicy(mmr_lambda=0.5))
    cases = [
        ([rng.gauss(0, 1) for _ in range(dim)], random_candidates(rng, 12, dim), params)
        for dim in (4, 8, 4, 8)
    ]
    assert_equals_memcore_on_exact_cosines(cases, use_faiss)


def test_bad_columns_are_refused_naming_the_field() -> None:
    good = Candidate("x", 0.5, 0.5, T0, T0, 48.0, vector=(1.0, 0.0))
    with pytest.raises(InvalidField, match="importance"):
        RankRequest.of([dataclasses.replace(good, importance=float("nan"))], T0, RankParams())
    with pytest.raises(InvalidField, match="query"):
        RankRequest.of([good], T0, RankParams(), query=[1.0, 0.0, 0.0])


def test_a_batch_past_the_pairwise_budget_is_scored_in_passes_with_the_same_results() -> None:
    rng = random.Random(4)
    cases = [(random_candidates(rng, rng.randrange(1, 60)), random_params(rng)) for _ in range(80)]
    requests = [RankRequest.of(c, T0, p) for c, p in cases]
    budget = 3 * 40 * 40
    parts = passes(requests, budget)
    assert [i for part in parts for i in part] == list(range(len(requests)))
    for part in parts:
        width = max(len(requests[i]) for i in part)
        mmr = sum(diversifies(requests[i].params.policy) for i in part)
        assert len(part) == 1 or mmr * width * width <= budget
    assert len(parts) > 1
    assert passes(requests) == [list(range(len(requests)))]  # the default holds this batch
    for (candidates, params), got in zip(
        cases, rank_many(requests, pairwise_budget=budget), strict=True
    ):
        assert_same(got, rank(candidates, T0, params))
