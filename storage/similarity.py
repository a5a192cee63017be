"""Exact cosine neighbours over many vectors with FAISS (flat inner product on normalised vectors).

Used where every pair above a threshold must be found (semantic dedup, compression clusters): a
range search over a flat index is exact and vectorised, where a pairwise Python loop is O(n²) in the
interpreter. It stays on the CPU even where ``faiss`` has GPU support: FAISS's GPU indexes have no
range search (``faiss::Index::range_search`` raises "range search not implemented").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt


def _faiss() -> Any:  # noqa: ANN401 - faiss is untyped
    import faiss  # noqa: PLC0415 - heavy; loaded on first use

    return faiss


def cosine_neighbours(
    ids: Sequence[str],
    vectors: Sequence[Sequence[float]] | npt.NDArray[np.floating[Any]],
    min_cosine: float,
) -> dict[str, set[str]]:
    """For each id, the other ids whose cosine similarity to it is at least ``min_cosine``.

    Exact (no approximation). Zero vectors have no neighbours. Memory: the index holds n × dim
    float32; the result holds the pairs found.
    """
    out: dict[str, set[str]] = {i: set() for i in ids}
    if len(ids) < 2:
        return out
    faiss = _faiss()
    x = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    x = np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)
    index = faiss.IndexFlatIP(x.shape[1])  # on the CPU: see the module's doc
    index.add(x)
    # float32 rounding can put an exact-threshold pair a hair below it: search a hair lower and
    # keep the pairs whose float64 cosine, of the vectors as given and clipped to [-1, 1] as the
    # reference's, reaches the threshold (of the float32 unit vectors, two identical vectors
    # came out ~1e-7 under 1.0 and missed min_cosine 1.0)
    exact = np.asarray(vectors, dtype=np.float64)
    lengths = np.linalg.norm(exact, axis=1, keepdims=True)
    exact = np.divide(exact, lengths, out=np.zeros_like(exact), where=lengths > 0)
    lims, _, found = index.range_search(x, float(min_cosine) - 1e-5)
    for row in range(len(ids)):
        for col in found[lims[row] : lims[row + 1]]:
            cosine = min(1.0, max(-1.0, float(np.dot(exact[row], exact[col]))))
            if col != row and cosine >= min_cosine - 1e-9:
                out[ids[row]].add(ids[int(col)])
    return out
