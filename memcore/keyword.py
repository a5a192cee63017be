"""A small BM25 for keyword scores; recall normalises them by the batch maximum."""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from collections.abc import Sequence

_TOKEN_RE = re.compile(r"\w+", re.UNICODE)


_KEEP_DOUBLE = frozenset("lsz")

_STOP_WORDS = """i me my myself we our ours ourselves you your yours yourself yourselves he him his himself
    she her hers herself it its itself they them their theirs themselves what which who whom this
    that these those am is are was were be been being have has had having do does did doing a an
    the and but if or because as until while of at by for with about against between into through
    during before after above below to from up down in out on off over under again further then
    once here there when where why how all any both each few more most other some such no nor not
    only own same so than too very s t just should now"""
STOP_WORDS = frozenset(_STOP_WORDS.split())
"""Words a stemmed keyword match drops from texts and queries alike: NLTK's English stop words
less ``can``, ``will`` and ``don`` (nouns and names too). Offline LoCoMo, default blend: R@10 .687 -> .708
(docs/quality-study.md); a question of stop words only matches by its vector alone."""

MAX_GROWTH = 11
"""The most times longer in UTF-8 that :func:`keyword_text` makes a text (U+FDFA: 3 bytes, 33
normalised; every code point checked): the stemmer and the single spaces between tokens only
shorten it."""

# four-letter words whose final ``s`` is no plural's
_KEEP_S = frozenset({"news", "does", "goes", "lens"})


def stem(token: str) -> str:
    """A light, deterministic English suffix stemmer for keyword matching (case-folded input).

    Plural and verb endings, then a final ``e``: lives, lived, living, live -> ``liv``; works,
    worked, working -> ``work``; running -> ``run``; studies, studied, studying -> ``study``;
    pets -> ``pet``. Tokens of three characters or fewer and tokens with digits are kept as they
    are. Conflating two different words now and then costs a keyword score a little; missing
    ``live`` for ``lives`` costs the answer (measured in docs/quality.md).
    """
    if len(token) <= 3 or not token.isalpha():
        return token
    word = token
    if word.endswith(("ies", "ied")) and len(word) > 5:
        return word[:-3] + "y"
    if word.endswith(("sses", "xes", "zes", "ches", "shes")):
        word = word[:-2]
    elif word.endswith("s") and word not in _KEEP_S and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    for suffix in ("ing", "ed"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            if len(word) > 3 and word[-1] == word[-2] and word[-1] not in _KEEP_DOUBLE:
                word = word[:-1]
            break
    if word.endswith("e") and len(word) > 3:
        word = word[:-1]
    return word


def tokenize(text: str, *, stemmed: bool = False) -> list[str]:
    """Word tokens of ``text`` normalised (NFKC: a decomposed ``é``, a ligature and full-width
    digits read as their plain forms) and case-folded (``ß`` as ``ss``), each :func:`stem`-med
    when ``stemmed`` (:data:`STOP_WORDS` dropped then). Normalising may lengthen a text up to
    :data:`MAX_GROWTH` times in UTF-8.
    """
    # NFKC again: case folding may decompose (``ΐ``), and a lone combining mark splits a word
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())
    tokens = _TOKEN_RE.findall(folded)
    return [stem(t) for t in tokens if t not in STOP_WORDS] if stemmed else tokens


def keyword_text(text: str) -> str:
    """``text`` as the full-text index keeps it and as keyword queries are sent: stemmed tokens
    separated by single spaces, so an engine whose analyzer only splits on spaces and lower-cases
    (Milvus Lite's standard analyzer) matches ``live`` with ``lives``.
    """
    return " ".join(tokenize(text, stemmed=True))


def bm25_scores(
    query: str,
    documents: Sequence[str],
    *,
    k1: float = 1.2,
    b: float = 0.75,
    stemmed: bool = False,
    indexed: bool = False,
) -> list[float]:
    """BM25 of ``query`` against each document, with IDF taken over ``documents`` themselves
    (tokens :func:`stem`-med when ``stemmed``, as the default policy's full-text index has them).
    ``indexed``: the documents are :func:`keyword_text` already (a row's ``search_text``), so
    their tokens are taken as they are and only the query is stemmed.

    Scores are >= 0; a batch of candidates is its own corpus, so scores compare within a batch only.
    """
    docs = [d.split() if indexed else tokenize(d, stemmed=stemmed) for d in documents]
    if not docs:
        return []
    n = len(docs)
    avg_len = sum(len(d) for d in docs) / n or 1.0
    df: Counter[str] = Counter()
    for d in docs:
        df.update(set(d))
    terms = set(tokenize(query, stemmed=stemmed or indexed))
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
