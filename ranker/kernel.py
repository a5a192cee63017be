"""Recall scoring for many requests in one torch pass: the vectorised twin of :func:`memcore.rank`.

A request arrives as columns (the service builds them straight from the store's rows; tests and
benchmarks use :meth:`RankRequest.of`). A batch of requests (any tenants) is padded into
``[requests × candidates]`` tensors and scored together, on CUDA when present, else the CPU, in
float64 so that scores equal memcore's scalar reference to 1e-6 (tested). Every preset, GraphRAG,
MMR and the minimum score are vectorised; ordering, ties (by memory id) and ``k`` follow memcore exactly.

FAISS does the vector products on the CPU: the exact cosine of each query with its own candidates
(``fvec_inner_products_by_idx`` over the batch's padded id matrix, so Milvus's index never decides
a similarity, however approximate it is) and, for MMR, each candidate with the others of its
request. On CUDA those products are batched matmuls on the GPU instead (copying the vectors back to
the host for FAISS would cost more than the products).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from memcore import Candidate, RankParams, Scored, Tier
from memcore.errors import InvalidField
from memcore.policy import RecallPolicy, RecallPreset
from storage.rows import to_us

OUT_OF_MEMORY = torch.OutOfMemoryError
"""What torch raises when the device (a GPU) cannot hold a batch: retriable, once memory frees."""

MNEMOSTREAM, ZEROMEMORY, ZEPH, POWERMEM = (
    RecallPreset.MNEMOSTREAM,
    RecallPreset.ZEROMEMORY,
    RecallPreset.ZEPH,
    RecallPreset.POWERMEM,
)
_US_PER_HOUR = 3.6e9
_HOURS_PER_DAY = 24.0

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
F32 = npt.NDArray[np.float32]
TIERS = tuple(Tier)
"""The tiers in code order (a :attr:`RankRequest.tier` value is a place in it)."""
_SEMANTIC = TIERS.index(Tier.SEMANTIC)


@dataclass(frozen=True, eq=False)
class RankRequest:
    """One request: its candidates as columns of equal length ``n``, the scoring time, settings.

    Attributes:
        ids: memory ids (ties are broken by them).
        at_us: scoring time, µs since the epoch.
        params: ``k`` and the recall policy.
        similarity: cosine to the query as the store gave it, [n]; replaced by the exact cosine
            when ``query`` and ``vectors`` are both given.
        keyword: raw keyword scores (BM25), >= 0, [n].
        importance: [0, 1], [n].
        last_access_us, created_at_us: µs since the epoch, [n].
        tau_hours: decay constants, hours, [n] (replaced by the rates of ``params.decay``, when
            set, for each memory whose tier is known).
        graph_hops: hops from the query's best hits over relations, -1 when unreached, [n].
        tier: each memory's tier as its place in :data:`TIERS`, any other value when unknown
            (``zeph``'s semantic bonus, ``params.decay``), [n].
        accessed: whether each memory was ever accessed (``mnemostream`` access recency), [n].
        archived: whether each memory is archived (its score takes the archived penalty), [n].
        vectors: candidate vectors ``[n, dim]`` (exact similarity, MMR), or None.
        query: the query vector ``[dim]``, or None.
    """

    ids: tuple[str, ...]
    at_us: int
    params: RankParams
    similarity: F64
    keyword: F64
    importance: F64
    last_access_us: I64
    created_at_us: I64
    tau_hours: F64
    graph_hops: I64
    tier: npt.NDArray[np.int8]
    accessed: npt.NDArray[np.bool_]
    archived: npt.NDArray[np.bool_]
    vectors: F32 | None = None
    query: F32 | None = None

    def __post_init__(self) -> None:
        n = len(self.ids)
        for name in ("similarity", "keyword", "importance", "tau_hours", "tier"):
            column = getattr(self, name)
            if column.shape != (n,):
                raise InvalidField(name, column.shape, f"expected {n} values")
            bad = ~np.isfinite(column)
            if bad.any():
                raise InvalidField(name, float(column[bad][0]), "expected a finite number")
        if self.vectors is not None:
            if self.vectors.ndim != 2 or self.vectors.shape[0] != n:
                raise InvalidField("vectors", self.vectors.shape, f"expected {n} rows")
            if self.query is not None and self.query.shape != (self.vectors.shape[1],):
                why = f"expected {self.vectors.shape[1]} values, as the candidate vectors"
                raise InvalidField("query", self.query.shape, why)

    def __len__(self) -> int:
        return len(self.ids)

    @classmethod
    def of(
        cls,
        candidates: Sequence[Candidate],
        at: datetime,
        params: RankParams,
        query: Sequence[float] | None = None,
    ) -> RankRequest:
        """From memcore candidates (tests, benchmarks). Candidates without a vector get zeros
        (cosine 0: never penalised by MMR, as in memcore); vectors are kept only when some exist.
        With a ``query``, every similarity becomes the exact cosine, so a candidate without a
        vector then scores similarity 0 (memcore would use its given similarity).
        """
        dims = {len(c.vector) for c in candidates if c.vector}
        if len(dims) > 1:
            raise InvalidField("vector", sorted(dims), "candidate vectors differ in length")
        vectors = None
        if dims:
            (dim,) = dims
            vectors = np.asarray(
                [c.vector if c.vector else (0.0,) * dim for c in candidates], dtype=np.float32
            )
        return cls(
            ids=tuple(c.memory_id for c in candidates),
            at_us=to_us(at),
            params=params,
            similarity=np.asarray([c.similarity for c in candidates], dtype=np.float64),
            keyword=np.asarray([c.keyword for c in candidates], dtype=np.float64),
            importance=np.asarray([c.importance for c in candidates], dtype=np.float64),
            last_access_us=np.asarray([to_us(c.last_access) for c in candidates], dtype=np.int64),
            created_at_us=np.asarray([to_us(c.created_at) for c in candidates], dtype=np.int64),
            tau_hours=np.asarray([c.tau_hours for c in candidates], dtype=np.float64),
            graph_hops=np.asarray(
                [-1 if c.graph_hops is None else c.graph_hops for c in candidates], dtype=np.int64
            ),
            tier=np.asarray([TIERS.index(c.tier) for c in candidates], dtype=np.int8),
            accessed=np.asarray([c.access_count > 0 for c in candidates], dtype=np.bool_),
            archived=np.asarray([c.archived for c in candidates], dtype=np.bool_),
            vectors=vectors,
            query=None if query is None else np.asarray(query, dtype=np.float32),
        )


#: The most candidates (summed over its requests) a batch :func:`light` still calls light: 64
#: requests of 128 candidates, a few milliseconds on one CPU thread here.
LIGHT_ROWS = 8_192
PAIRWISE_BUDGET = 1 << 24
"""Candidate cosines one scoring pass holds for its MMR requests at most (float32: 64 MiB): a
batch past it is scored in several passes (the pairwise block is M × W² for M MMR requests
padded to the widest candidate list W, so 64 requests of 2,000 candidates would take 1 GiB)."""


def diversifies(policy: RecallPolicy) -> bool:
    """Whether a request of ``policy`` is re-ordered by MMR (``zeph`` always is)."""
    return policy.preset is RecallPreset.ZEPH or policy.mmr_lambda is not None


HEAVY_MMR_ROWS = 256
"""Candidates past which a request diversified by MMR is heavy (:func:`heavy`)."""


def heavy(request: RankRequest) -> bool:
    """Whether one request costs far more than a usual batch: MMR over more than
    :data:`HEAVY_MMR_ROWS` candidates (``zeph`` with ``k`` 1,000: ~0.3 s here, against ~2 ms for
    a batch of 32 usual requests). Such requests are batched and scored on their own, so that
    the usual ones never wait behind them.
    """
    return len(request) > HEAVY_MMR_ROWS and diversifies(request.params.policy)


def light(requests: Sequence[RankRequest], max_rows: int = LIGHT_ROWS) -> bool:
    """Whether scoring ``requests`` costs about what handing them to a thread does: at most
    ``max_rows`` candidates in all and no MMR (its pairwise cosines grow with the square of a
    request's candidates: one request of 1,000 took ~200 ms here).
    """
    rows = sum(len(r) for r in requests)
    return rows <= max_rows and not any(diversifies(r.params.policy) for r in requests)


def set_threads(n: int) -> None:
    """CPU threads torch and FAISS use (process-wide; set once at start-up)."""
    torch.set_num_threads(n)
    _faiss().omp_set_num_threads(n)


def default_device() -> torch.device:
    """CUDA when torch sees a GPU, else the CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def rank_many(
    requests: Sequence[RankRequest],
    device: torch.device | None = None,
    *,
    use_faiss: bool | None = None,
    pairwise_budget: int = PAIRWISE_BUDGET,
) -> list[list[Scored]]:
    """Rank every request; results in request order, each as :func:`memcore.rank` would give
    (with ``similarity`` the exact cosine where a query vector and candidate vectors are given).

    ``use_faiss``: vector products by FAISS (default on the CPU) or by torch (default on CUDA).
    ``pairwise_budget``: see :func:`passes`.
    """
    out: list[list[Scored]] = [[] for _ in requests]
    live = [i for i, r in enumerate(requests) if len(r)]
    for part in passes([requests[i] for i in live], pairwise_budget):
        batch = [requests[live[j]] for j in part]
        scores = score(batch, device or default_device(), use_faiss=use_faiss)
        for j, rows in zip(part, top_k(batch, scores), strict=True):
            out[live[j]] = rows
    return out


def passes(requests: Sequence[RankRequest], budget: int = PAIRWISE_BUDGET) -> list[list[int]]:
    """The scoring passes of a batch, as runs of indices in order: each pass's MMR requests
    hold at most ``budget`` pairwise cosines once padded to its widest request (one request
    over it alone is a pass of its own). A batch within the budget is one pass.
    """
    out: list[list[int]] = []
    part: list[int] = []
    width = diversified = 0
    for i, r in enumerate(requests):
        wider = max(width, len(r))
        mmr = diversified + diversifies(r.params.policy)
        if part and mmr * wider * wider > budget:
            out.append(part)
            part, wider, mmr = [], len(r), int(diversifies(r.params.policy))
        part.append(i)
        width, diversified = wider, mmr
    if part:
        out.append(part)
    return out


@dataclass(frozen=True)
class Scores:
    """A batch's score terms, ``[requests × candidates]`` float64 on the CPU; ``final`` is -inf
    for padding and for the candidates the minimum score drops.
    """

    similarity: list[list[float]]
    keyword: list[list[float]]
    importance: list[list[float]]
    recency: list[list[float]]
    graph: list[list[float]]
    final: list[list[float]]
    order: list[list[int]]  # per request, candidate indices by final score, best first


def score(
    requests: Sequence[RankRequest], device: torch.device, *, use_faiss: bool | None = None
) -> Scores:
    """Score a batch of non-empty requests in one pass."""
    cols = Columns.build(requests, device, use_faiss=use_faiss)
    terms = kernel(cols)
    order = torch.argsort(terms[-1], dim=1, descending=True, stable=True)
    sim, keyword, importance, recency, graph, final = (t.cpu().tolist() for t in terms)
    return Scores(sim, keyword, importance, recency, graph, final, order.cpu().tolist())


def top_k(requests: Sequence[RankRequest], scores: Scores) -> list[list[Scored]]:
    """Each request's top ``k`` by final score, ties by memory id (only ~k objects are built)."""
    out = []
    for row, request in enumerate(requests):
        final = scores.final[row]
        chosen: list[int] = []
        for i in scores.order[row]:
            value = final[i]
            if value == -math.inf or (
                len(chosen) >= request.params.k and value < final[chosen[-1]]
            ):
                break
            chosen.append(i)
        chosen.sort(key=lambda i: (-final[i], request.ids[i]))
        out.append(
            [
                Scored(
                    request.ids[i],
                    scores.similarity[row][i],
                    scores.keyword[row][i],
                    scores.importance[row][i],
                    scores.recency[row][i],
                    scores.graph[row][i],
                    final[i],
                )
                for i in chosen[: request.params.k]
            ]
        )
    return out


def _padded(
    requests: Sequence[RankRequest],
    name: str,
    width: int,
    dtype: npt.DTypeLike,
    fill: float = 0,
) -> npt.NDArray[Any]:
    out = np.full((len(requests), width), fill, dtype=dtype)
    for row, r in enumerate(requests):
        out[row, : len(r)] = getattr(r, name)
    return out


def _tau_hours(requests: Sequence[RankRequest], width: int, tier: npt.NDArray[np.int8]) -> F64:
    """``[R, width]`` decay constants: each candidate's own, or its request's ``params.decay``
    rate for its tier when both are known (as :func:`memcore.rank`).
    """
    tau = _padded(requests, "tau_hours", width, np.float64, 1.0)
    for row, r in enumerate(requests):
        if r.params.decay is not None:
            rates = np.asarray([r.params.decay.tau_hours(t) for t in TIERS], dtype=np.float64)
            codes = tier[row, : len(r)]
            known = (codes >= 0) & (codes < len(TIERS))
            tau[row, : len(r)] = np.where(known, rates[np.where(known, codes, 0)], r.tau_hours)
    return tau


@dataclass(frozen=True)
class Columns:
    """A batch as padded ``[requests × candidates]`` tensors (per-request ones ``[R]``)."""

    similarity: torch.Tensor
    keyword: torch.Tensor
    importance: torch.Tensor
    idle_hours: torch.Tensor
    age_days: torch.Tensor
    tau_hours: torch.Tensor
    graph: torch.Tensor
    semantic: torch.Tensor
    accessed: torch.Tensor
    archived: torch.Tensor
    mask: torch.Tensor
    pairwise: torch.Tensor | None  # [M, W, W] float32 candidate cosines of the M MMR requests
    mmr_rows: torch.Tensor  # [M] the rows of the MMR requests (zeph always diversifies)
    id_rank: torch.Tensor  # [M, W] each MMR candidate's place in its request's id order (ties)
    weights: torch.Tensor  # [R, 5]: similarity, keyword, importance, recency, graph
    graph_weight: torch.Tensor
    graphrag: torch.Tensor
    powermem: torch.Tensor
    zeph: torch.Tensor
    mnemostream: torch.Tensor
    zeromemory: torch.Tensor
    archived_penalty: torch.Tensor
    soft_delete_below: torch.Tensor
    mmr_lambda: torch.Tensor
    min_score: torch.Tensor
    half_life_days: torch.Tensor
    importance_weight: torch.Tensor
    semantic_bonus: torch.Tensor
    presets: frozenset[RecallPreset]  # the presets of the batch's requests
    graphrag_any: bool  # whether some request blends in GraphRAG

    @classmethod
    def build(
        cls, requests: Sequence[RankRequest], device: torch.device, *, use_faiss: bool | None = None
    ) -> Columns:
        """Pad the requests' columns and compute the exact similarities (the host-side part)."""
        width = max(len(r) for r in requests)
        f64 = np.float64
        at = np.asarray([r.at_us for r in requests], dtype=np.int64)[:, None]
        idle = (at - _padded(requests, "last_access_us", width, np.int64)).astype(f64)
        age = (at - _padded(requests, "created_at_us", width, np.int64)).astype(f64)
        hops = _padded(requests, "graph_hops", width, np.int64, -1)
        tier = _padded(requests, "tier", width, np.int8, -1)
        similarity = _padded(requests, "similarity", width, f64)
        policies = [r.params.policy for r in requests]
        mmr = [diversifies(p) for p in policies]
        if use_faiss if use_faiss is not None else device.type == "cpu":
            _faiss_similarity(requests, similarity)
            sim = torch.from_numpy(similarity)
            pairwise = torch.from_numpy(_faiss_pairwise(requests, width, mmr)) if any(mmr) else None
        else:
            sim, pairwise = _torch_similarity(requests, similarity, width, mmr, device)
        lengths = np.asarray([len(r) for r in requests])

        def t(array: npt.NDArray[Any]) -> torch.Tensor:
            return torch.from_numpy(array).to(device)

        # the per-request settings as two tensors (one copy each), handed out as column views
        flags = torch.tensor([_flags(p) for p in policies], dtype=torch.bool, device=device)
        numbers = torch.tensor([_numbers(p) for p in policies], dtype=torch.float64, device=device)
        by_name = dict(zip(_FLAGS + _NUMBERS, (*flags.unbind(1), *numbers.unbind(1)), strict=True))

        return cls(
            similarity=sim.to(device),
            keyword=t(_padded(requests, "keyword", width, f64)),
            importance=t(_padded(requests, "importance", width, f64)),
            idle_hours=t(np.maximum(idle, 0.0) / _US_PER_HOUR),
            age_days=t(np.maximum(age, 0.0) / _US_PER_HOUR / _HOURS_PER_DAY),
            tau_hours=t(_tau_hours(requests, width, tier)),
            graph=t(np.where(hops >= 0, 1.0 / (1.0 + np.maximum(hops, 0)), 0.0)),
            semantic=t(tier == _SEMANTIC),
            accessed=t(_padded(requests, "accessed", width, np.bool_, False)),
            archived=t(_padded(requests, "archived", width, np.bool_, False)),
            mask=t(np.arange(width)[None, :] < lengths[:, None]),
            pairwise=None if pairwise is None else pairwise.to(device),
            mmr_rows=torch.tensor(
                [i for i, wanted in enumerate(mmr) if wanted], dtype=torch.long, device=device
            ),
            id_rank=t(
                _id_ranks([r for r, wanted in zip(requests, mmr, strict=True) if wanted], width)
            ),
            weights=numbers[:, : len(_WEIGHTS)],
            graph_weight=by_name["graph_weight"],
            graphrag=by_name["graphrag"],
            powermem=by_name["powermem"],
            zeph=by_name["zeph"],
            mnemostream=by_name["mnemostream"],
            zeromemory=by_name["zeromemory"],
            archived_penalty=by_name["archived_penalty"],
            soft_delete_below=by_name["soft_delete_below"],
            mmr_lambda=by_name["mmr_lambda"],
            min_score=by_name["min_score"],
            half_life_days=by_name["half_life_days"],
            importance_weight=by_name["importance_weight"],
            semantic_bonus=by_name["semantic_bonus"],
            presets=frozenset(p.preset for p in policies),
            graphrag_any=any(p.graphrag for p in policies),
        )


_NO_MINIMUM = -sys.float_info.max
"""The minimum score of a policy that sets none: below every finite score and above -inf, which
marks a candidate left out (padding, a soft delete)."""
_FLAGS = ("graphrag", "powermem", "zeph", "mnemostream", "zeromemory")
_WEIGHTS = ("similarity", "keyword", "importance", "recency", "graph")
_NUMBERS = (
    *(f"weight_{w}" for w in _WEIGHTS),
    "graph_weight",
    "archived_penalty",
    "soft_delete_below",
    "mmr_lambda",
    "min_score",
    "half_life_days",
    "importance_weight",
    "semantic_bonus",
)


def _flags(p: RecallPolicy) -> tuple[bool, ...]:
    """A policy's per-request switches, in :data:`_FLAGS` order."""
    return (
        p.graphrag,
        p.preset is POWERMEM,
        p.preset is ZEPH,
        p.preset is MNEMOSTREAM,
        p.preset is ZEROMEMORY,
    )


def _numbers(p: RecallPolicy) -> tuple[float, ...]:
    """A policy's per-request numbers, in :data:`_NUMBERS` order."""
    mmr_lambda = p.zeph_mmr_lambda if p.preset is ZEPH else p.mmr_lambda
    return (
        *(getattr(p.weights, w) for w in _WEIGHTS),
        p.graph_weight,
        p.archived_penalty,
        p.soft_delete_below,
        1.0 if mmr_lambda is None else mmr_lambda,
        _NO_MINIMUM if p.min_score is None else p.min_score,
        p.zeph_half_life_days,
        p.zeph_importance_weight,
        p.zeph_semantic_bonus,
    )


def _faiss() -> Any:  # noqa: ANN401 - faiss is untyped
    import faiss  # noqa: PLC0415 - heavy; loaded on first use

    return faiss


def _unit(x: F32) -> F32:
    x = np.ascontiguousarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    out: F32 = np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)
    return out


def _norms(x: F32) -> F32:
    """L2 norm of each row (FAISS, SIMD)."""
    faiss = _faiss()
    out = np.empty(x.shape[0], dtype=np.float32)
    faiss.fvec_norms_L2(faiss.swig_ptr(out), faiss.swig_ptr(x), x.shape[1], x.shape[0])
    return out


def _cosines_by_idx(x: F32, y: F32, ids: I64) -> F32:
    """``out[i, j] = cos(x[i], y[ids[i, j]])`` in [-1, 1]; 0 where ``ids`` is -1 or a vector is
    all zeros. Inner products and norms by FAISS (SIMD, no normalised copy of ``y``).
    """
    faiss = _faiss()
    x = np.ascontiguousarray(x, dtype=np.float32)
    y = np.ascontiguousarray(y, dtype=np.float32)
    ids = np.ascontiguousarray(ids, dtype=np.int64)
    ip = np.empty(ids.shape, dtype=np.float32)
    faiss.fvec_inner_products_by_idx(
        faiss.swig_ptr(ip),
        faiss.swig_ptr(x),
        faiss.swig_ptr(y),
        faiss.swig_ptr(ids),
        x.shape[1],
        ids.shape[0],
        ids.shape[1],
    )
    scale = _norms(x)[:, None] * _norms(y)[np.maximum(ids, 0)]
    live = (ids >= 0) & (scale > 0)
    out: F32 = np.divide(ip, scale, out=np.zeros_like(ip), where=live)
    return np.clip(out, -1.0, 1.0, out=out)


def _stacked(requests: Sequence[RankRequest]) -> tuple[F32, list[int]]:
    """All candidate vectors of requests that have them, in one array, and each one's offset."""
    offsets, blocks, total = [], [], 0
    for r in requests:
        offsets.append(total)
        if r.vectors is not None:
            blocks.append(r.vectors)
            total += len(r)
    return (np.concatenate(blocks) if blocks else np.zeros((0, 1), np.float32)), offsets


def _faiss_similarity(requests: Sequence[RankRequest], similarity: F64) -> None:
    """Overwrite ``similarity`` rows with the exact cosine where query and vectors are given."""
    by_dim: dict[int, list[tuple[int, RankRequest, F32]]] = {}
    for i, r in enumerate(requests):
        if r.query is not None and r.vectors is not None:
            by_dim.setdefault(r.query.shape[0], []).append((i, r, r.query))
    for group in by_dim.values():
        subset = [r for _, r, _ in group]
        y, offsets = _stacked(subset)
        width = max(len(r) for r in subset)
        ids = np.full((len(subset), width), -1, dtype=np.int64)
        for row, (r, off) in enumerate(zip(subset, offsets, strict=True)):
            ids[row, : len(r)] = np.arange(off, off + len(r))
        cos = _cosines_by_idx(np.stack([q for _, _, q in group]), y, ids)
        for row, (i, r, _) in enumerate(group):
            similarity[i, : len(r)] = cos[row, : len(r)]


def _faiss_pairwise(requests: Sequence[RankRequest], width: int, mmr: Sequence[bool]) -> F32:
    """``[M, W, W]`` float32 cosines between the candidates of each of the M MMR requests, in
    request order (zeros for a request without vectors). Memory: 4·M·W² bytes.
    """
    rows = [i for i, wanted in enumerate(mmr) if wanted]
    out = np.zeros((len(rows), width, width), dtype=np.float32)
    by_dim: dict[int, list[tuple[int, RankRequest]]] = {}
    for slot, i in enumerate(rows):
        r = requests[i]
        if r.vectors is not None:
            by_dim.setdefault(r.vectors.shape[1], []).append((slot, r))
    for group in by_dim.values():
        subset = [r for _, r in group]
        y, offsets = _stacked(subset)
        ids = np.full((len(y), width), -1, dtype=np.int64)
        for r, off in zip(subset, offsets, strict=True):
            ids[off : off + len(r), : len(r)] = np.arange(off, off + len(r))[None, :]
        cos = _cosines_by_idx(y, y, ids)
        for (slot, r), off in zip(group, offsets, strict=True):
            n = len(r)
            out[slot, :n, :n] = cos[off : off + n, :n]
    return out


def _torch_similarity(
    requests: Sequence[RankRequest],
    similarity: F64,
    width: int,
    mmr: Sequence[bool],
    device: torch.device,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The same products as the FAISS path, as batched matmuls on the device."""
    dims = {r.vectors.shape[1] for r in requests if r.vectors is not None}
    if len(dims) > 1:  # one matmul per dimension is not worth it: the host path groups by dim
        _faiss_similarity(requests, similarity)
        host = _faiss_pairwise(requests, width, mmr) if any(mmr) else None
        return (
            torch.from_numpy(similarity).to(device),
            None if host is None else torch.from_numpy(host).to(device),
        )
    sim = torch.from_numpy(similarity).to(device)
    if not dims:
        return sim, None
    (dim,) = dims
    vectors = np.zeros((len(requests), width, dim), dtype=np.float32)
    has = np.zeros(len(requests), dtype=np.bool_)
    query = np.zeros((len(requests), dim), dtype=np.float32)
    for row, r in enumerate(requests):
        if r.vectors is not None:
            vectors[row, : len(r)] = _unit(r.vectors)
            if r.query is not None and r.query.shape[0] == dim:
                query[row] = _unit(r.query)
                has[row] = True
    v = torch.from_numpy(vectors).to(device)
    exact = torch.einsum("rwd,rd->rw", v, torch.from_numpy(query).to(device)).double()
    sim = torch.where(torch.from_numpy(has).to(device)[:, None], exact.clamp(-1.0, 1.0), sim)
    pairwise = None
    if any(mmr):
        rows = torch.tensor([i for i, wanted in enumerate(mmr) if wanted], device=device)
        picked = v[rows]
        pairwise = torch.bmm(picked, picked.transpose(1, 2)).clamp(-1.0, 1.0)
    return sim, pairwise


def _normalised(x: torch.Tensor) -> torch.Tensor:
    """Each row divided by its maximum (negatives as 0); all zeros when the maximum is not positive."""
    x = x.clamp(min=0.0)
    top = x.max(dim=1, keepdim=True).values
    return torch.where(top > 0, x / torch.where(top > 0, top, 1.0), 0.0)


def _choose(
    rows: torch.Tensor,
    kinds: frozenset[RecallPreset],
    preset: RecallPreset,
    yes: Callable[[], torch.Tensor],
    no: torch.Tensor,
) -> torch.Tensor:
    """``torch.where(rows, yes(), no)`` for the batch's ``[R, 1]`` rows of ``preset``; ``yes`` is
    not computed when the batch has no such row, and ``no`` is not consulted when every row is one.
    """
    if preset not in kinds:
        return no
    if kinds == {preset}:
        return yes()
    return torch.where(rows, yes(), no)


def kernel(c: Columns) -> tuple[torch.Tensor, ...]:
    """The scores: (similarity, keyword, importance, recency, graph, final); ``final`` is -inf
    for padding and for candidates the minimum score (or MMR's absence) drops.

    Each preset's terms are computed only when the batch has a request of it (a batch of one
    preset, the usual case, costs a third fewer tensor operations than a mixed one).
    """
    mask, kinds, w = c.mask, c.presets, c.weights
    mnemo, pm, zeph = c.mnemostream[:, None], c.powermem[:, None], c.zeph[:, None]
    sim = torch.where(mask, c.similarity.clamp(0.0, 1.0), 0.0)
    keyword = _normalised(torch.where(mask, c.keyword, 0.0))
    recency = torch.exp(-c.idle_hours / c.tau_hours)
    # mnemostream: relevance × (1 + bounded boosts); access recency only for accessed memories
    access_recency = torch.where(c.accessed, recency, 0.0) if MNEMOSTREAM in kinds else recency

    def boosted() -> torch.Tensor:
        boost = w[:, 2:3] * (c.importance - 0.5) + w[:, 3:4] * access_recency + w[:, 4:5] * c.graph
        return (w[:, 0:1] * sim + w[:, 1:2] * keyword) * (1.0 + boost)

    plain = None
    if kinds != {MNEMOSTREAM}:
        plain = (
            w[:, 0:1] * sim
            + w[:, 1:2] * keyword
            + w[:, 2:3] * c.importance
            + w[:, 3:4] * recency
            + w[:, 4:5] * c.graph
        )
    blend = boosted() if plain is None else _choose(mnemo, kinds, MNEMOSTREAM, boosted, plain)
    base = _choose(pm, kinds, POWERMEM, lambda: sim * recency, blend)
    if ZEPH in kinds:
        # zeph: 0.7·sim/max + 0.3·keyword/max, times the age factor
        age = torch.exp(-math.log(2.0) * (c.age_days / c.half_life_days[:, None]))
        zeph_sim = _normalised(sim)
        base = _choose(zeph, kinds, ZEPH, lambda: (0.7 * zeph_sim + 0.3 * keyword) * age, base)
    if c.graphrag_any:  # any preset's own score (SPEC section 6), before penalty, MMR, bonuses
        gw = c.graph_weight[:, None]
        base = torch.where(c.graphrag[:, None], base * (1.0 - gw) + c.graph * gw, base)
    base = torch.where(c.archived, base * c.archived_penalty[:, None], base)
    # the minimum applies before MMR, except for zeph (to its final score, below)
    kept = _choose(zeph, kinds, ZEPH, lambda: mask, mask & (base >= c.min_score[:, None]))
    if ZEROMEMORY in kinds:
        # zeromemory's soft delete: effective importance under its line is never returned
        low = c.importance * recency < c.soft_delete_below[:, None]
        kept = kept & ~(c.zeromemory[:, None] & low)
    final = torch.where(kept, base, -math.inf)
    rows = c.mmr_rows
    if rows.numel():
        pairwise = c.pairwise
        if pairwise is None:  # no vectors: nothing is penalised, MMR only scales by λ
            width = final.shape[1]
            pairwise = torch.zeros((rows.numel(), width, width), device=final.device)
        final = final.clone()
        final[rows] = _mmr(final[rows], pairwise, c.mmr_lambda[rows], c.id_rank)
    if ZEPH in kinds:
        bonus = c.importance_weight[:, None] * c.importance + torch.where(
            c.semantic, c.semantic_bonus[:, None], 0.0
        )
        final = torch.where(zeph, final + bonus, final)
        final = torch.where(zeph & (final < c.min_score[:, None]), -math.inf, final)
        sim = torch.where(zeph, zeph_sim, sim)
        recency = torch.where(zeph, age, torch.where(mnemo, access_recency, recency))
    else:
        recency = _choose(mnemo, kinds, MNEMOSTREAM, lambda: access_recency, recency)
    if POWERMEM in kinds:
        keyword = torch.where(pm, 0.0, keyword)
    if kinds & {POWERMEM, ZEPH}:  # their scores take no graph term unless GraphRAG is on
        graph = torch.where((pm | zeph) & ~c.graphrag[:, None], 0.0, c.graph)
    else:
        graph = c.graph
    return sim, keyword, c.importance, recency, graph, final


_NO_RANK = torch.iinfo(torch.int64).max


def _id_ranks(requests: Sequence[RankRequest], width: int) -> npt.NDArray[np.int64]:
    """``[len(requests), width]``: each candidate's place in its request's ids in sorted order
    (padding after them all), so that MMR breaks ties by memory id, not by where the store put
    the candidate (the hot cache and Milvus give them in different orders).
    """
    ranks = np.full((len(requests), width), width, dtype=np.int64)
    for row, request in enumerate(requests):
        order = sorted(range(len(request.ids)), key=request.ids.__getitem__)
        ranks[row, order] = np.arange(len(order))
    return ranks


def _mmr(
    relevance: torch.Tensor, pairwise: torch.Tensor, lam: torch.Tensor, id_rank: torch.Tensor
) -> torch.Tensor:
    """Greedy MMR on every row at once (as :func:`memcore.mmr` over candidates in id order):
    each step picks, per row, the remaining item maximising ``λ·relevance − (1−λ)·max cosine to
    those picked`` (ties to the lower ``id_rank``) and records that value as its score. Items at
    -inf are never picked.
    """
    remaining = torch.isfinite(relevance)
    rel = torch.where(remaining, relevance, 0.0)
    lam = lam[:, None]
    penalty = torch.zeros_like(rel)
    out = torch.full_like(rel, -math.inf)
    rows = torch.arange(rel.shape[0], device=rel.device)
    for _ in range(rel.shape[1]):
        live = remaining.any(dim=1)
        if not bool(live.any()):
            break
        value = torch.where(remaining, lam * rel - (1.0 - lam) * penalty, -math.inf)
        tied = remaining & (value == value.max(dim=1, keepdim=True).values)
        best = torch.where(tied, id_rank, _NO_RANK).argmin(dim=1)
        picked = value[rows, best]
        out[rows[live], best[live]] = picked[live]
        remaining[rows[live], best[live]] = False
        penalty = torch.maximum(penalty, pairwise[rows, best].to(rel.dtype).clamp(min=0.0))
    return out
