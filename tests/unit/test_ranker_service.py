"""The service's pure steps: columns from the store's rows, keyword scores of hybrid candidates."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Sequence
from datetime import timedelta
from typing import Any, cast

import pytest
import torch

from memcore import Scored
from memcore.policy import RecallPolicy, RecallPreset
from ranker import service as service_module
from ranker.kernel import LIGHT_ROWS, RankRequest
from ranker.service import Candidate, RecallQuery, RecallService, _request
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


def _recording(monkeypatch: pytest.MonkeyPatch, device: str) -> list[int]:
    """Threads ``rank_many`` is called on, with torch on ``device``."""
    scored_on: list[int] = []

    def rank_many(requests: Sequence[RankRequest]) -> list[list[Scored]]:
        scored_on.append(threading.get_ident())
        return [[] for _ in requests]

    monkeypatch.setattr(service_module, "rank_many", rank_many)
    monkeypatch.setattr(service_module, "default_device", lambda: torch.device(device))
    return scored_on


@pytest.mark.parametrize(
    ("device", "kernel_thread", "on_the_loop"),
    [
        ("cpu", None, True),  # unset on the CPU: a light batch on the loop
        ("cuda", None, False),  # unset on CUDA: the kernel's thread (a batch waits on the GPU)
        ("cpu", False, True),
        ("cuda", False, True),
        ("cpu", True, False),
    ],
)
def test_a_light_batch_is_scored_on_the_event_loop_unless_a_thread_is_asked(
    monkeypatch: pytest.MonkeyPatch, device: str, kernel_thread: bool | None, on_the_loop: bool
) -> None:
    scored_on = _recording(monkeypatch, device)
    request = _request([cand("a", "x")], (1.0, 0.0), query(), {})
    loop_thread = _submit_one(request, kernel_thread=kernel_thread)
    assert len(scored_on) == 1
    assert (scored_on[0] == loop_thread) is on_the_loop


def test_a_heavy_batch_goes_to_the_kernels_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """MMR (pairwise cosines) or many candidates would hold the loop for tens of milliseconds
    or more: such a batch is scored in the kernel's thread even where light ones are not.
    """
    scored_on = _recording(monkeypatch, "cpu")
    mmr = query(policy=RecallPolicy(mmr_lambda=0.7))
    many = [cand(f"m{i}", "x") for i in range(LIGHT_ROWS + 1)]
    for request in (
        _request([cand("a", "x")], (1.0, 0.0), mmr, {}),
        _request(many, (1.0, 0.0), query(), {}),
    ):
        loop_thread = _submit_one(request)
        assert scored_on[-1] != loop_thread


def _submit_one(request: RankRequest, kernel_thread: bool | None = None) -> int:
    """Start a service, score ``request`` through its batcher, stop; the loop's thread."""
    none = cast(Any, None)  # the store, embedder and producer: a batch reads none of them
    service = RecallService(none, none, none, kernel_thread=kernel_thread)

    async def main() -> int:
        await service.start()
        try:
            assert await service.batcher.submit(request) == []
        finally:
            await service.stop()
        return threading.get_ident()

    return asyncio.run(main())
