"""The service's pure steps: columns from the store's rows and the faded-candidate gate."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from memcore.policy import RecallPolicy, RecallPreset
from ranker.service import RecallQuery, _request, _set_aside_faded
from storage import Hit, to_us
from tests.rows import make_row

from .helpers import T0


def hit(memory_id: str, content: str, importance: float = 0.5, idle_h: float = 0.0) -> Hit:
    """A working memory last accessed ``idle_h`` hours before T0 (tau 48 h), similarity 0.9."""
    last = to_us(T0 - timedelta(hours=idle_h))
    row = make_row(
        "acme",
        memory_id,
        (1.0, 0.0),
        content=content,
        tier="working",
        importance=importance,
        created_at_us=last,
        last_access_us=last,
        tau_hours=48.0,
    )
    return Hit(row, 0.9)


def query(**kw: object) -> RecallQuery:
    base = RecallQuery("python tips", None, 5, T0, RecallPolicy(), archive_below=0.05)
    return dataclasses.replace(base, **kw)  # type: ignore[arg-type]


def test_zeph_counts_keywords_even_with_a_zero_keyword_weight() -> None:
    hits = [hit("a", "python tips and tricks"), hit("b", "gardening")]
    plain = _request(hits, (1.0, 0.0), query(), {})
    assert plain.keyword.tolist() == [0.0, 0.0]  # the blend's keyword weight is 0: not computed
    zeph = _request(hits, (1.0, 0.0), query(policy=RecallPolicy(preset=RecallPreset.ZEPH)), {})
    assert zeph.keyword[0] > 0 == zeph.keyword[1]


def test_faded_candidates_are_set_aside_only_under_the_gate() -> None:
    fresh, faded = hit("fresh", "x"), hit("faded", "y", importance=0.1, idle_h=200)
    keep, fading = _set_aside_faded([fresh, faded], query())
    assert ([h.row.memory_id for h in keep], [h.row.memory_id for h in fading]) == (
        ["fresh"],
        ["faded"],
    )
    keep, fading = _set_aside_faded([fresh, faded], query(archive_below=None))
    assert (len(keep), fading) == (2, [])
