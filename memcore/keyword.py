"""A small BM25 for keyword scores; recall normalises them by the batch maximum."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

_TOKEN_RE = re.compile(r"\w+", re.UNICODE)


def tokenize(text: str) -> list[str]:
    """Lower-cased word tokens."""
    return _TOKEN_RE.findall(text.lower())


def bm25_scores(
    query: str, documents: Sequence[str], *, k1: float = 1.2, b: float = 0.75
) -> list[float]:
    """BM25 of ``query`` against each document, with IDF taken over ``documents`` themselves.

    Scores are >= 0; a batch of candidates is its own corpus, so scores compare within a batch only.
    """
    docs = [tokenize(d) for d in documents]
    if not docs:
        return []
    n = len(docs)
    avg_len = sum(len(d) for d in docs) / n or 1.0
    df: Counter[str] = Counter()
    for d in docs:
        df.update(set(d))
    terms = set(tokenize(query))
    scores = []
    for d in docs:
        tf = Counter(d)
        score = 0.0
        for term in terms:
            f = tf.get(term, 0)
            if f:
                idf = math.log(1.0 + (n - df[term] + 0.5) / (df[term] + 0.5))
                score += idf * f * (k1 + 1) / (f + k1 * (1 - b + b * len(d) / avg_len))
        scores.append(score)
    return scores


def normalise_by_max(values: Sequence[float]) -> list[float]:
    """Each value divided by the batch maximum; all zeros when the maximum is not positive."""
    top = max(values, default=0.0)
    if top <= 0.0:
        return [0.0 for _ in values]
    return [max(v, 0.0) / top for v in values]
