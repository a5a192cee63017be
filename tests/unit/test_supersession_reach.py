"""bench.supersession_reach: what its figures count (docs/quality.md publishes them)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

import numpy as np

from bench.quality import START, Workload, Write
from bench.quality_study import Matrix
from bench.supersession_reach import pairs, summary
from memcore.supersession import SupersessionPolicy
from storage.embedding import Hashing

QUESTIONS = ("Do I live in Hanoi now?", "Can I live in Hanoi now?", "Should I live in Hanoi now?")


def hashed(texts: Sequence[str]) -> Matrix:
    """Two texts' cosine is their shared words' (384 hashed dimensions)."""
    return np.asarray(Hashing(384).embed(texts), dtype=np.float64)


def zed() -> Workload:
    """Toronto, three questions nearer Hanoi than Toronto is, Hanoi, then Oslo; of user zed, and
    one of another user nearer still, which zed's search never sees.
    """
    said = [
        ("t-zed-city-1", "I live in Toronto."),
        *((f"t-zed-crowd-{n}", q) for n, q in enumerate(QUESTIONS)),
        ("t-zed-city-2", "I live in Hanoi now."),
        ("t-zed-city-3", "I live in Oslo now."),
    ]
    writes = [
        Write(m, text, START + timedelta(days=i), user_id="zed") for i, (m, text) in enumerate(said)
    ]
    writes.insert(0, Write("t-amy-crowd-0", "I live in Hanoi now.", START, user_id="amy"))
    return Workload("t", writes)


def test_a_pair_crowded_out_of_its_statement_s_nearest_is_counted_found_by_its_stem() -> None:
    first, second = pairs(zed(), hashed, SupersessionPolicy())
    assert (first.older, first.newer) == ("I live in Toronto.", "I live in Hanoi now.")
    assert round(first.cosine, 3) == 0.671  # 3 shared words of 4 and 5
    assert first.rank == 4  # behind the three questions (.913); amy's memory is no candidate
    assert first.stem_rank == 1  # "i lives in": Toronto .577, the questions .471
    assert (first.decided, first.decided_at_min) == (True, True)
    # Toronto, superseded by then, is no candidate: Hanoi is the stem's nearest, not its second
    assert (second.older, second.stem_rank) == ("I live in Hanoi now.", 1)
    figures = summary([first, second], neighbours=2)
    assert figures["found by statement"] == 0.5
    assert figures["found by stem"] == figures["found by either"] == figures["reached"] == 1.0
    assert figures["reached (statement only, min_cosine only)"] == 0.5
    assert figures["lowest pair"] == ["I live in Toronto.", "I live in Hanoi now."]


def test_a_far_pair_is_decided_by_the_speaker_floor_only_and_an_unmarked_one_counts_nothing_by_its_stem() -> (
    None
):
    w = Workload(
        "t",
        [
            Write("t-zed-city-1", "I live in Toronto.", START, user_id="zed"),
            Write("t-zed-city-2", "I live in Hanoi now.", START + timedelta(days=1), user_id="zed"),
            Write("t-zed-food-1", "My favourite food is ramen.", START, user_id="zed"),
            Write(
                "t-zed-food-2",
                "My favourite food is pho.",
                START + timedelta(days=2),
                user_id="zed",
            ),
        ],
    )
    far = SupersessionPolicy(min_cosine=0.9)  # the city pair (.671) is under it, over 0.1
    city, food = pairs(w, hashed, far)
    assert (city.decided, city.decided_at_min) == (True, False)
    assert (food.stem_rank, food.decided) == (None, False)  # no "now": the floor is min_cosine
    assert summary([city, food], neighbours=10)["cosine >= 0.5"] == 1.0
