"""Write-time importance (SPEC section 2): explicit, else an LLM answer, else the rule engine.

memcore never calls an LLM; the caller passes the LLM's raw answer text (or None when no LLM is
configured, it timed out or failed), and :func:`resolve_importance` decides.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from memcore.types import ImportanceSource, require_unit

#: The six criteria the LLM prompt asks for, with their weights (they sum to 1).
CRITERIA_WEIGHTS: Mapping[str, float] = {
    "relevance": 0.30,
    "novelty": 0.20,
    "emotional_impact": 0.15,
    "actionable": 0.15,
    "factual": 0.10,
    "personal": 0.10,
}

#: Rule-engine keywords; each counts once, matched as a whole word, case-insensitively.
KEYWORDS: tuple[str, ...] = (
    "important",
    "critical",
    "urgent",
    "remember",
    "note",
    "preference",
    "like",
    "dislike",
    "hate",
    "love",
    "password",
    "secret",
    "private",
    "confidential",
)

#: Markers that count (once) when they start a line, case-insensitively.
MARKERS: tuple[str, ...] = ("remember:", "important:", "always:", "never:")

# The rule engine adds in hundredths so that sums are exact before the single division.
_LONG, _MEDIUM = 10, 5
_KEYWORD = 10
_MARKER = 20
_PUNCT = 5
_PRIORITY = {"high": 20, "medium": 10}
_TAGS = 5
_CAP = 100

_KEYWORD_RES = {kw: re.compile(rf"\b{re.escape(kw)}\b", re.IGNORECASE) for kw in KEYWORDS}
_MARKER_RE = re.compile(
    r"^[ \t]*(?:" + "|".join(re.escape(m) for m in MARKERS) + ")", re.IGNORECASE | re.MULTILINE
)
_NUMBER = r"([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)"
# quotes, spaces and markdown emphasis may stand around the separator: ``"score": 0.5``,
# ``**Importance:** 0.8``, ``**Importance**: 0.8``, ``importance = *0.8*``
_SCORE_RE = re.compile(
    r"(?:importance_score|importance|score)[\"'\s*_]*[:=][\"'\s*_]*" + _NUMBER, re.IGNORECASE
)


@dataclass(frozen=True)
class ImportanceDecision:
    """The importance a write gets and where it came from.

    Attributes:
        score: importance in [0, 1].
        source: the path that produced it.
        reason: one line for the audit log.
    """

    score: float
    source: ImportanceSource
    reason: str


def rule_importance(
    content: str,
    metadata: Mapping[str, object] | None = None,
    tags: Sequence[str] = (),
) -> float:
    """The rule engine: additive signals in [0, 1]. Deterministic, total, never raises on text."""
    points = 0
    length = len(content)
    if length > 100:
        points += _LONG
    elif length > 50:
        points += _MEDIUM
    points += _KEYWORD * sum(1 for rx in _KEYWORD_RES.values() if rx.search(content))
    if _MARKER_RE.search(content):
        points += _MARKER
    if "?" in content:
        points += _PUNCT
    if "!" in content:
        points += _PUNCT
    priority = (metadata or {}).get("priority")
    if isinstance(priority, str):
        points += _PRIORITY.get(priority.strip().lower(), 0)
    if any(tags):
        points += _TAGS
    return min(points, _CAP) / 100


def parse_llm_answer(answer: str) -> tuple[float, ImportanceSource] | None:
    """Read an importance out of an LLM answer, or None when no step finds one.

    Steps: (1) a JSON object (bare, fenced or embedded in prose) whose ``importance_score`` is a
    number in [0, 1], else the weighted mean of its ``criteria_scores`` (known criteria with numeric
    values in [0, 1]; others ignored); (2) a regex for a number in [0, 1] next to
    ``importance_score``/``importance``/``score``. Out-of-range or non-numeric values count as absent.
    """
    obj = _first_json_object(answer)
    if obj is not None:
        direct = _unit_or_none(obj.get("importance_score"))
        if direct is not None:
            return direct, ImportanceSource.LLM
        criteria = obj.get("criteria_scores")
        if isinstance(criteria, Mapping):
            mean = weighted_criteria_mean(criteria)
            if mean is not None:
                return mean, ImportanceSource.LLM
    for match in _SCORE_RE.finditer(answer):
        value = _unit_or_none(float(match.group(1)))
        if value is not None:
            return value, ImportanceSource.LLM_REGEX
    return None


def weighted_criteria_mean(criteria: Mapping[str, object]) -> float | None:
    """Weighted mean of the known criteria present; None when none is usable."""
    total = 0.0
    weight = 0.0
    for name, w in CRITERIA_WEIGHTS.items():
        value = _unit_or_none(criteria.get(name))
        if value is not None:
            total += w * value
            weight += w
    if weight == 0.0:
        return None
    # settled to 12 places (as the reducer settles boosts): a mean of exactly 0.8 came out as
    # 0.7999999999999999 and classified episodic, not semantic
    return round(total / weight, 12)


def resolve_importance(
    content: str,
    *,
    explicit: float | None = None,
    llm_answer: str | None = None,
    metadata: Mapping[str, object] | None = None,
    tags: Sequence[str] = (),
) -> ImportanceDecision:
    """Explicit first, then the LLM answer, then the rule engine.

    ``llm_answer`` is None when no LLM is configured or it failed (timeout, transport error): the
    rule engine then decides. Raises InvalidField only for an explicit value outside [0, 1] or NaN.
    """
    if explicit is not None:
        return ImportanceDecision(
            require_unit("importance", explicit), ImportanceSource.EXPLICIT, "given by the writer"
        )
    if llm_answer is not None:
        parsed = parse_llm_answer(llm_answer)
        if parsed is not None:
            score, source = parsed
            how = "JSON" if source is ImportanceSource.LLM else "regex"
            return ImportanceDecision(score, source, f"LLM answer, read by {how}")
        score = rule_importance(content, metadata, tags)
        return ImportanceDecision(score, ImportanceSource.RULES, "LLM answer unreadable; rules")
    score = rule_importance(content, metadata, tags)
    return ImportanceDecision(score, ImportanceSource.RULES, "rule engine")


def _unit_or_none(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    if not math.isfinite(number) or not 0.0 <= number <= 1.0:
        return None
    return number


def _first_json_object(text: str) -> Mapping[str, object] | None:
    """The first JSON object in ``text``; None when there is none, or once a ``{`` opens JSON
    nested deeper than the parser goes (the answer is unreadable as JSON: reading on from each
    later ``{`` of such a nest would cost a parse per character).
    """
    decoder = json.JSONDecoder()
    start = text.find("{")
    while start != -1:
        try:
            obj, _ = decoder.raw_decode(text, start)
        except RecursionError:
            return None
        except ValueError:
            start = text.find("{", start + 1)
            continue
        if isinstance(obj, dict):
            return obj
        start = text.find("{", start + 1)
    return None
