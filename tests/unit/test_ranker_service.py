"""The service's pure steps: columns from the store's rows, keyword scores of hybrid candidates."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from memcore.policy import RecallPolicy, RecallPreset
from ranker.service import Candidate, RecallQuery, _request
from storage import to_us
from tests.rows import make_row

from .helpers import T0


def cand(memory_id: str, content: str, keyword: float | None = None, **kw: object) -> Candidate:
    """A working memory last accessed at T0 (tau 48 h), similarity 0.9."""
    last = to_us(T0 - timedelta(hours=1))
    row = make_row(
        "acme",
        memory_id,
        (1.0, 0.0),
        content=content,
        tier="working",
        created_at_us=last,
        last_access_us=last,
        tau_hours=48.0,
        **kw,
    )
    return Candidate(row, 0.9, keyword)


def query(**kw: object) -> RecallQuery:
    base = RecallQuery("python tips", None, 5, T0, RecallPolicy.of(RecallPreset.ZEROMEMORY))
    return dataclasses.replace(base, **kw)  # type: ignore[arg-type]


def test_zeph_counts_keywords_even_with_a_zero_keyword_weight() -> None:
    hits = [cand("a", "python tips and tricks"), cand("b", "gardening")]
    plain = _request(hits, (1.0, 0.0), query(), {})
    assert plain.keyword.tolist() == [0.0, 0.0]  # the blend's keyword weight is 0: not computed
    zeph = _request(hits, (1.0, 0.0), query(policy=RecallPolicy(preset=RecallPreset.ZEPH)), {})
    assert zeph.keyword[0] > 0 == zeph.keyword[1]


def test_the_store_bm25_is_used_when_the_candidates_carry_it() -> None:
    hits = [cand("a", "gardening", 3.5), cand("b", "python tips", 0.0), cand("c", "x", None)]
    request = _request(hits, (1.0, 0.0), query(policy=RecallPolicy()), {})
    assert request.keyword.tolist() == [3.5, 0.0, 0.0]


def test_access_and_archive_columns_follow_the_rows() -> None:
    hits = [
        cand("fresh", "x"),
        cand("used", "y", access_count=3),
        cand("old", "z", state="archived"),
    ]
    request = _request(hits, (1.0, 0.0), query(), {})
    assert request.accessed.tolist() == [False, True, False]
    assert request.archived.tolist() == [False, False, True]
