"""The service's pure steps: columns from the store's rows, keyword scores of hybrid candidates."""

from __future__ import annotations

import asyncio
import dataclasses
import math
import threading
from collections.abc import Awaitable, Sequence
from datetime import timedelta
from typing import Any, cast

import pytest
import torch

from memcore import Scored
from memcore.keyword import keyword_text
from memcore.policy import (
    DECAY_PRESETS,
    DecayPolicy,
    DecayPreset,
    RecallPolicy,
    RecallPreset,
    recall_decay,
)
from ranker import service as service_module
from ranker.batcher import BatchStats
from ranker.errors import Unavailable
from ranker.kernel import HEAVY_MMR_ROWS, LIGHT_ROWS, RankRequest, heavy, rank_many
from ranker.service import Candidate, RecallQuery, RecallService, _request
from storage import MilvusConfig, to_us
from storage.milvus import Hit
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


def test_the_default_policy_scores_the_candidates_context_as_a_full_text_index_would() -> None:
    # no full-text index (a 2.3/2.4 server): the candidates' own BM25 reads what the index
    # would, the context's words too, stemmed alike
    dated = cand(
        "dated", "We went hiking.", search_text=keyword_text("[8 May 2023]\nWe went hiking.")
    )
    other = cand("other", "We went swimming last May.")
    request = _request(
        [dated, other], (1.0, 0.0), query(text="a trip in 2023", policy=RecallPolicy()), {}
    )
    assert request.keyword[0] > request.keyword[1] == 0.0
    # a named preset scores its source's plain content
    zeph = RecallPolicy(preset=RecallPreset.ZEPH)
    plain = _request([dated, other], (1.0, 0.0), query(text="2023", policy=zeph), {})
    assert plain.keyword.tolist() == [0.0, 0.0]


def test_access_and_archive_columns_follow_the_rows() -> None:
    hits = [
        cand("fresh", "x"),
        cand("used", "y", access_count=3),
        cand("old", "z", state="archived"),
    ]
    request = _request(hits, (1.0, 0.0), query(), {})
    assert request.accessed.tolist() == [False, True, False]
    assert request.archived.tolist() == [False, False, True]


def aged(
    memory_id: str, similarity: float, idle: timedelta, tier: str, tau_hours: float
) -> Candidate:
    """A memory last accessed ``idle`` before T0, with the τ its tenant's decay preset gave it,
    whose cosine to the query (1, 0) is ``similarity``.
    """
    last = to_us(T0 - idle)
    row = make_row(
        "acme",
        memory_id,
        (similarity, math.sqrt(1.0 - similarity**2)),
        tier=tier,
        created_at_us=last,
        last_access_us=last,
        tau_hours=tau_hours,
        access_count=1,
    )
    return Candidate(row, similarity, None)


def test_powermem_and_zeromemory_recalls_decay_at_their_own_rates_on_the_other_s_tenant() -> None:
    # a tenant decaying as zeromemory (working τ 48 h): powermem's own rate (1.2 h) vetoes the
    # half-day-old strong match, and the fresh weaker one ranks first, as in PowerMem
    on_zeromemory = [
        aged("stale", 0.9, timedelta(hours=12), "working", 48.0),
        aged("fresh", 0.5, timedelta(minutes=1), "working", 48.0),
    ]
    powermem = query(
        text=None,
        policy=RecallPolicy.of(RecallPreset.POWERMEM),
        decay=recall_decay(RecallPreset.POWERMEM, DecayPolicy()),
    )
    (ranked,) = rank_many([_request(on_zeromemory, (1.0, 0.0), powermem, {})])
    assert [s.memory_id for s in ranked] == ["fresh", "stale"]
    assert ranked[0].final == pytest.approx(0.5 * math.exp(-1 / 60 / 1.2))
    assert ranked[1].recency == pytest.approx(math.exp(-12 / 1.2))
    # a tenant decaying as powermem (episodic τ 3.6 h): zeromemory's own rate (240 h) keeps a
    # two-day-old memory above its soft-delete line
    on_powermem = [aged("two-days", 0.9, timedelta(days=2), "episodic", 3.6)]
    on_it = recall_decay(RecallPreset.ZEROMEMORY, DECAY_PRESETS[DecayPreset.POWERMEM])
    (kept,) = rank_many([_request(on_powermem, (1.0, 0.0), query(text=None, decay=on_it), {})])
    assert [s.memory_id for s in kept] == ["two-days"]
    assert kept[0].recency == pytest.approx(math.exp(-48 / 240))
    # a tenant that moved from powermem to zeromemory: a memory still holding powermem's τ
    # (1.2 h) is scored at the tenant's rates now, not soft-deleted after half a day
    moved = [aged("moved", 0.9, timedelta(hours=12), "working", 1.2)]
    now = recall_decay(RecallPreset.ZEROMEMORY, DecayPolicy())
    (still,) = rank_many([_request(moved, (1.0, 0.0), query(text=None, decay=now), {})])
    assert [s.memory_id for s in still] == ["moved"]
    assert still[0].recency == pytest.approx(math.exp(-12 / 48))
    # the default preset scores each memory's own τ
    (own,) = rank_many([_request(on_powermem, (1.0, 0.0), query(policy=RecallPolicy()), {})])
    assert own[0].recency == pytest.approx(math.exp(-48 / 3.6))


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


class NoFullText:
    """A Milvus 2.3/2.4 server as a recall sees it: vector hits, no BM25 of its own."""

    config = MilvusConfig("unused.db", dim=2, full_text=False)

    def search(self, tenant_id: str, vectors: object, k: int, filters: object) -> object:
        return [[Hit(cand(f"m{i}", "python tips " * 50).row, 0.9) for i in range(3)]]


def test_keywords_scored_over_the_candidates_are_scored_off_the_event_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """BM25 over the candidates' contents is Python per word: for 100 candidates of 16 KB it held
    the event loop (every tenant's requests, the probes) for most of a second.
    """
    scored_on: list[int] = []

    def bm25(query: str, documents: Sequence[str], **kw: Any) -> list[float]:
        scored_on.append(threading.get_ident())
        return [1.0] * len(documents)

    monkeypatch.setattr(service_module, "bm25_scores", bm25)
    service = RecallService(cast(Any, NoFullText()), cast(Any, None), cast(Any, None))

    async def main() -> tuple[int, list[str]]:
        await service.start()
        try:
            mnemostream = RecallPolicy()  # scores keywords
            text = query(vector=(1.0, 0.0), track=False, policy=mnemostream)
            with_text = await service.recall("acme", text)
            vector_only = query(text=None, vector=(1.0, 0.0), track=False, policy=mnemostream)
            assert (await service.recall("acme", vector_only)).results
        finally:
            await service.stop()
        return threading.get_ident(), [r.row.memory_id for r in with_text.results]

    loop_thread, found = asyncio.run(main())
    assert sorted(found) == ["m0", "m1", "m2"]
    assert len(scored_on) == 1  # the text query's only
    assert scored_on[0] != loop_thread


def test_deliveries_enqueued_before_a_failed_send_are_still_awaited() -> None:
    """The second of a request's events could not be enqueued: the first one's delivery was
    dropped unawaited ("coroutine never awaited", its failure never retrieved nor logged).
    """
    awaited: list[str] = []

    async def delivered(memory_id: str) -> object:
        await asyncio.sleep(0)
        awaited.append(memory_id)
        raise Unavailable("kafka", "produce", "not acknowledged")

    async def send(role: str, key: bytes, value: bytes) -> Awaitable[object]:
        if key.endswith(b"/m2"):
            raise Unavailable("kafka", "produce", "no answer")
        return delivered(key.decode())

    service = RecallService(cast(Any, None), cast(Any, None), send)
    events = [("access-events", {"tenant_id": "acme", "memory_id": m}) for m in ("m1", "m2")]

    async def main() -> None:
        with pytest.raises(Unavailable, match="no answer"):
            await service._produce_all(events)
        for _ in range(10):  # the first delivery ends in the background
            await asyncio.sleep(0)

    asyncio.run(main())
    assert awaited == ["acme/m1"]
    assert not service._orphans


def test_a_usual_recall_is_not_scored_behind_another_tenants_heavy_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """zeph with k 1,000 (MMR over 1,000 candidates) costs ~0.3 s a request; 16 of them held
    another tenant's three-candidate recall for 6.8 s, queued in the same batches.
    """
    heavy_may_end = threading.Event()

    def rank_many(requests: Sequence[RankRequest]) -> list[list[Scored]]:
        if any(len(r) > HEAVY_MMR_ROWS for r in requests):
            assert heavy_may_end.wait(30)
        return [[] for _ in requests]

    monkeypatch.setattr(service_module, "rank_many", rank_many)
    zeph = query(policy=RecallPolicy(preset=RecallPreset.ZEPH))
    big = _request([cand(f"m{i}", "x") for i in range(HEAVY_MMR_ROWS + 1)], (1.0, 0.0), zeph, {})
    usual = _request([cand("a", "x")], (1.0, 0.0), zeph, {})
    assert heavy(big)
    assert not heavy(usual)
    service = RecallService(cast(Any, None), cast(Any, None), cast(Any, None))

    async def main() -> tuple[bool, list[Scored]]:
        await service.start()
        try:
            slow = asyncio.create_task(service._submit(big))
            await asyncio.sleep(0.05)  # the heavy batch is being scored
            answered = await asyncio.wait_for(service._submit(usual), 10)
            waiting = not slow.done()
            heavy_may_end.set()
            await slow
        finally:
            heavy_may_end.set()
            await service.stop()
        return waiting, answered

    heavy_still_scoring, answered = asyncio.run(main())
    assert answered == []
    assert heavy_still_scoring  # the usual recall was answered meanwhile


def test_the_queue_depth_gauge_counts_both_lanes() -> None:
    """A heavy batch set the gauge to its own lane's queue (0) while usual recalls waited."""
    service = RecallService(cast(Any, None), cast(Any, None), cast(Any, None))

    async def main() -> float:
        waiting: asyncio.Queue[object] = asyncio.Queue()
        for n in range(5):
            waiting.put_nowait(n)
        service.batcher._queue = waiting  # type: ignore[assignment]
        service._on_batch(BatchStats(size=1, queued=0))  # the heavy lane's batch ended
        return float(service.metrics.queue_depth._value.get())

    assert asyncio.run(main()) == 5.0
