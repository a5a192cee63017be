"""Semantic dedup at scale: FAISS range search vs the pairwise greedy loop (not a test).

    python -m bench.consolidation [--n 100000] [--pairwise 1000 2000]

Data: one tenant, 384-d unit vectors; 10 % of them are near-copies (cosine > 0.95) of another.
FAISS: ``storage.similarity.cosine_neighbours`` (flat inner-product range search, exact) and
memcore's greedy grouping, as the consolidation agent runs them. Pairwise: PowerMem's loop, every
pair's cosine computed one by one (numpy per pair), measured at small n and extrapolated as n².
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from memcore.consolidation import Item, greedy_groups
from memcore.types import Lifecycle, Tier
from storage.rows import from_us
from storage.similarity import cosine_neighbours

DIM = 384


def dataset(n: int, rng: np.random.Generator) -> np.ndarray:
    base = rng.standard_normal((n, DIM)).astype(np.float32)
    copies = rng.choice(n, size=n // 10, replace=False)
    originals = rng.choice(n, size=n // 10, replace=False)
    base[copies] = base[originals] + 0.1 * rng.standard_normal((n // 10, DIM)).astype(np.float32)
    out: np.ndarray = base / np.linalg.norm(base, axis=1, keepdims=True)
    return out


def items_of(ids: list[str]) -> list[Item]:
    t = from_us(0)
    return [Item(i, i, (), t, t, t, Tier.EPISODIC, Lifecycle.ACTIVE, 0.5, 240.0) for i in ids]


def faiss_dedup(vectors: np.ndarray) -> tuple[float, int]:
    ids = [f"m{i}" for i in range(len(vectors))]
    start = time.perf_counter()
    neighbours = cosine_neighbours(ids, vectors, 0.95)
    groups = greedy_groups(items_of(ids), neighbours)
    merged = sum(len(g) - 1 for g in groups)
    return time.perf_counter() - start, merged


def pairwise_dedup(vectors: np.ndarray) -> tuple[float, int]:
    start = time.perf_counter()
    removed: set[int] = set()
    for i in range(len(vectors)):
        if i in removed:
            continue
        for j in range(i + 1, len(vectors)):
            if j not in removed:
                a, b = vectors[i], vectors[j]
                if float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b))) >= 0.95:
                    removed.add(j)
    return time.perf_counter() - start, len(removed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--pairwise", type=int, nargs="+", default=[1_000, 2_000])
    args = parser.parse_args()
    rng = np.random.default_rng(3)
    print(f"{'method':<28} {'n':>8} {'seconds':>10} {'merged':>8}")
    for n in args.pairwise:
        vectors = dataset(n, rng)
        seconds, merged = pairwise_dedup(vectors)
        f_seconds, f_merged = faiss_dedup(vectors)
        assert merged == f_merged, (merged, f_merged)  # same data, same answer
        print(f"{'pairwise loop (PowerMem)':<28} {n:>8} {seconds:>10.2f} {merged:>8}")
        print(f"{'FAISS range search':<28} {n:>8} {f_seconds:>10.3f} {f_merged:>8}")
        per_pair = seconds / (n * (n - 1) / 2)
    for n in args.n:
        vectors = dataset(n, rng)
        seconds, merged = faiss_dedup(vectors)
        print(f"{'FAISS range search':<28} {n:>8} {seconds:>10.2f} {merged:>8}")
        estimate = per_pair * n * (n - 1) / 2
        print(f"{'pairwise loop, extrapolated':<28} {n:>8} {estimate:>10.0f} {'':>8}")


if __name__ == "__main__":
    main()
