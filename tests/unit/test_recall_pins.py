"""Recall behaviour a mutation review found no unit test pinned (SPEC sections 4-7, README's
recall section): scopes on every candidate path, an erased memory awaiting its purge, as-of
bounds, the hybrid candidates (BM25 over the whole corpus), candidate counts, the state view's
newest value, GraphRAG on the hot path, the Milvus expression. Each test failed on its mutant.

The store is a fake Milvus that honours the filters recall asks (as the expression does: the
contract tests check the expression on a real Milvus) and searches exactly.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, cast

import httpx
import pytest

from memcore import ImportanceDecision, ImportanceSource, Policy, Write, apply
from memcore.ids import content_hash
from memcore.keyword import bm25_scores, keyword_text
from memcore.policy import RecallPolicy
from ranker.api import create_api
from ranker.hotcache import HotCache
from ranker.service import Recall, Recalled, RecallQuery, RecallService
from ranker.view import StateView
from storage import Filters, Hit, MemoryRow, MilvusConfig, codec, filter_expression, to_us
from storage.embedding import Hashing
from storage.milvus import ANY_STATE, KeywordHit
from storage.rows import LIVE_FIELDS
from storage.tenants import TenantRegistry
from tests.rows import make_row

DIM = 4
AT = datetime(1970, 1, 1, 0, 0, 5, tzinfo=UTC)
RECALL = Filters(states=("active", "archived"), current_at_us=to_us(AT))
KEY = "key-acme-0123456789"


def kept(row: MemoryRow, f: Filters) -> bool:
    """What Milvus's expression keeps of ``row`` under ``f`` (the fields recall filters by)."""
    scopes = ("session_id", "agent_id", "user_id")
    return (
        (not f.states or row.state in f.states)
        and (not f.tiers or row.tier in f.tiers)
        and (
            f.current_at_us is None or row.valid_to_us in (0,) or row.valid_to_us > f.current_at_us
        )
        and (f.created_to_inclusive_us is None or row.created_at_us <= f.created_to_inclusive_us)
        and all(getattr(f, s) is None or getattr(row, s) == getattr(f, s) for s in scopes)
        and (not f.memory_ids or row.memory_id in f.memory_ids)
    )


class Store:
    """Milvus as a fake: exact cosine, BM25 over ``search_text`` (with ``full_text``)."""

    def __init__(self, *rows: MemoryRow, full_text: bool = True) -> None:
        self.config = MilvusConfig(uri="unused", dim=DIM, full_text=full_text)
        self.rows = {r.memory_id: r for r in rows}

    def _of(self, tenant_id: str, f: Filters) -> list[MemoryRow]:
        return [r for r in self.rows.values() if r.tenant_id == tenant_id and kept(r, f)]

    def search(
        self, tenant_id: str, vectors: Sequence[Sequence[float]], k: int, f: Filters
    ) -> list[list[Hit]]:
        def cosine(v: Sequence[float]) -> float:
            q = vectors[0]
            dot = sum(a * b for a, b in zip(q, v, strict=True))
            return dot / (math.hypot(*q) * (math.hypot(*v) or 1.0))

        hits = [Hit(r, cosine(r.vector)) for r in self._of(tenant_id, f)]
        return [sorted(hits, key=lambda h: (-h.similarity, h.row.memory_id))[:k]]

    def keyword_search(
        self, tenant_id: str, texts: Sequence[str], k: int, f: Filters
    ) -> list[list[KeywordHit]]:
        rows = self._of(tenant_id, f)
        scores = bm25_scores(texts[0], [r.search_text for r in rows], indexed=True)
        hits = [KeywordHit(r, s) for r, s in zip(rows, scores, strict=True) if s > 0]
        return [sorted(hits, key=lambda h: -h.score)[:k]]

    def count(self, tenant_id: str, f: Filters = ANY_STATE) -> int:
        return len(self._of(tenant_id, f))

    def query(self, tenant_id: str, f: Filters = ANY_STATE, limit: int = 16384) -> list[MemoryRow]:
        return self._of(tenant_id, f)[:limit]

    def get(self, tenant_id: str, memory_ids: Sequence[str]) -> dict[str, MemoryRow]:
        return {m: self.rows[m] for m in memory_ids if m in self.rows}

    get_slim = get

    def relations(self, tenant_id: str, memory_ids: Sequence[str]) -> dict[str, Sequence[str]]:
        return {m: self.rows[m].relations for m in memory_ids if m in self.rows}


def row(memory_id: str, *head: float, **kw: Any) -> MemoryRow:
    return make_row("acme", memory_id, [*head, *([0.0] * (DIM - len(head)))], **kw)


def service(store: Store, *, cache: bool = False, **kw: Any) -> RecallService:
    hot = HotCache(cast(Any, store), lambda t, m: None) if cache else None
    none = cast(Any, None)
    return RecallService(cast(Any, store), none, none, kernel_thread=False, cache=hot, **kw)


def recall(
    svc: RecallService,
    text: str | None = None,
    *,
    k: int = 10,
    filters: Filters = RECALL,
    policy: RecallPolicy | None = None,
    times: int = 1,
) -> list[Recalled]:
    """The results of ``times`` equal recalls (the hot cache answers from the second on)."""
    query = RecallQuery(text, (1.0, 0.0, 0.0, 0.0), k, AT, policy or RecallPolicy(), filters)
    query = dataclasses.replace(query, track=False)

    async def main() -> list[Recalled]:
        await svc.start()
        try:
            answer = None
            for _ in range(times):
                answer = await svc.recall("acme", query)
            assert answer is not None
            return list(answer.results)
        finally:
            await svc.stop()

    return asyncio.run(main())


def ids(results: Sequence[Recalled]) -> list[str]:
    return [r.row.memory_id for r in results]


@pytest.mark.parametrize("cache", [False, True])
def test_a_users_recall_never_returns_another_users_memory(cache: bool) -> None:
    """The service's recheck after the store looks at state and validity only: the scope is
    the filters' alone, on the vector, the keyword and the hot cache's paths alike.
    """
    store = Store(
        row("mine", 0.6, 0.8, content="Ann likes green tea", user_id="ann"),
        row("theirs", 1.0, content="Bob likes green tea", user_id="bob"),
        full_text=not cache,
    )
    ann = dataclasses.replace(RECALL, user_id="ann")
    assert ids(recall(service(store, cache=cache), "green tea", filters=ann, times=2)) == ["mine"]


def test_an_erased_memory_awaiting_its_purge_is_not_recalled() -> None:
    class Keys:
        async def catch_up(self) -> None:
            return None

        def erased_memory(self, tenant_id: str, memory_id: str) -> bool:
            return memory_id == "erased"

    svc = service(Store(row("erased", 1.0), row("kept", 0.9, 0.1), full_text=False))
    svc.keys = cast(Any, Keys())
    assert ids(recall(svc)) == ["kept"]


def test_an_as_of_recall_asks_the_versions_current_then_and_written_by_then() -> None:
    """SPEC section 6: as of ``at``, the versions valid then, of memories written by then."""
    store = cast(Any, Store())
    svc = RecallService(store, Hashing(DIM), cast(Any, None))
    asked: list[Filters] = []

    async def answer(tenant_id: str, query: RecallQuery) -> Recall:
        asked.append(query.filters)
        return Recall([])

    svc.recall = answer  # type: ignore[method-assign]
    api = create_api(svc, TenantRegistry.of({"tenants": {"acme": {"api_keys": [KEY]}}}))

    async def post() -> httpx.Response:
        transport = httpx.ASGITransport(app=api)
        async with httpx.AsyncClient(transport=transport, base_url="http://m") as http:
            body = {"query": "x", "at": "2024-01-01T00:00:00Z", "track": False}
            return await http.post("/v1/recall", json=body, headers={"X-API-Key": KEY})

    reply = asyncio.run(post())
    assert reply.status_code == 200, reply.text
    at = to_us(datetime(2024, 1, 1, tzinfo=UTC))
    assert (asked[0].current_at_us, asked[0].created_to_inclusive_us) == (at, at)


def test_the_hot_cache_keeps_the_bounds_of_validity_creation_and_session() -> None:
    """At T the superseded version (valid to T) is no longer current and its successor
    (written at T) is; ``created_from`` includes T, ``created_to`` excludes it; a session
    filter leaves out another session's memory.
    """
    t = 3_000_000
    store = Store(
        row("old", 1.0, created_at_us=1_000_000, valid_to_us=t, superseded_by="new"),
        row("new", 1.0, created_at_us=t, session_id="s1"),
        row("other", 1.0, created_at_us=t, session_id="s2"),
    )
    cache = HotCache(cast(Any, store), lambda tenant, memory: None)

    def found(**bounds: Any) -> list[str]:
        filters = Filters(states=("active",), **bounds)
        hits = cache.search("acme", (1.0, 0.0, 0.0, 0.0), 10, filters)
        assert hits is not None
        return sorted(hits.ids)

    assert found(current_at_us=t, created_to_inclusive_us=t, session_id="s1") == ["new"]
    assert found(created_from_us=t, session_id="s1") == ["new"]
    assert found(created_to_us=t) == ["old"]


@pytest.mark.parametrize("cache", [False, True])
def test_a_memory_found_by_its_words_alone_is_a_candidate(cache: bool) -> None:
    """SPEC section 6: the union of the vector's best N and BM25's best N over the whole
    corpus: the answer, far from the query's vector, is found by its words.
    """
    rows = [row(f"v{i}", 1.0, 0.01 * i, content=f"note {i}") for i in range(3)]
    rows.append(row("answer", 0.0, 1.0, content="Alice lives in Lisbon"))
    svc = service(Store(*rows), cache=cache, candidates=2)
    assert ids(recall(svc, "where does Alice live", k=3, times=2))[0] == "answer"


def test_vector_candidates_are_scored_by_their_words_too() -> None:
    store = Store(row("m1", 1.0, content="cats"), row("m2", 1.0, content="Alice lives in Lisbon"))
    assert ids(recall(service(store), "Lisbon")) == ["m2", "m1"]


def test_a_memory_found_by_its_words_is_judged_on_the_state_view() -> None:
    """Deleted in the worker's table (the view), still active in Milvus: not recalled."""
    gone = row("gone", 0.0, 1.0, content="Alice lives in Lisbon")
    deleted = dataclasses.replace(gone, state="deleted")
    live = {("acme", "gone"): tuple(getattr(deleted, name) for name in LIVE_FIELDS)}

    class View:
        def values(self, tenant_id: str, memory_id: str) -> tuple[Any, ...] | None:
            return live.get((tenant_id, memory_id))

        def overlay(self, r: MemoryRow) -> MemoryRow:
            return r

    svc = service(Store(row("v", 1.0), gone), candidates=1, view=cast(Any, View()))
    assert "gone" not in ids(recall(svc, "Lisbon"))


def test_k_over_the_candidate_count_still_returns_k() -> None:
    store = Store(*[row(f"m{i}", 1.0, 0.1 * i) for i in range(5)], full_text=False)
    assert len(recall(service(store, candidates=2), k=4)) == 4


def test_the_hot_cache_gives_n_candidates_not_k() -> None:
    """k 1: the archived memory nearest the query (score .5 x .5 by the archived penalty) must
    not win because the cache offered only it; the active one scores about .45.
    """
    store = Store(row("old", 1.0, state="archived"), row("new", 0.9, 0.44))
    assert ids(recall(service(store, cache=True), "zzz", k=1)) == ["new"]


def test_graphrag_recall_is_not_served_from_the_hot_cache_without_its_graph() -> None:
    rows = [row(f"m{i}", 1.0, 0.1 * i) for i in range(4)] + [row("far", 0.0, 1.0)]
    rows[0] = dataclasses.replace(rows[0], relations=("far",))
    svc = service(Store(*rows, full_text=False), cache=True)
    results = recall(svc, policy=RecallPolicy(graphrag=True), times=2)
    assert {r.row.memory_id: r.score.graph for r in results}["far"] == 0.5


def test_the_state_view_overlays_a_memorys_newest_state() -> None:
    decision = ImportanceDecision(0.6, ImportanceSource.EXPLICIT, "test")
    first, _ = apply(None, Write("acme", "a", content_hash("a"), AT, decision), Policy())
    assert first is not None
    view = StateView("unused:9092", "t")
    view.apply(b"acme/a", codec.encode(first))
    view.apply(b"acme/a", codec.encode(dataclasses.replace(first, importance=0.9, access_count=7)))
    shown = view.overlay(row("a", 1.0, importance=0.1))
    assert (shown.importance, shown.access_count) == (0.9, 7)


def test_a_question_is_stemmed_against_indexed_text() -> None:
    texts = [keyword_text("Alice lives in Lisbon"), keyword_text("Bob works")]
    scores = bm25_scores("Where does Alice live?", texts, indexed=True)
    assert scores[0] > 0
    assert scores[1] == 0


def test_the_milvus_expression_of_every_filter() -> None:
    """The contract tests run it on a real Milvus; here each term and its bound, exactly."""
    filters = Filters(
        states=("active", "archived"),
        current_at_us=5,
        created_to_inclusive_us=6,
        tiers=("semantic",),
        tags_any=("x", "y"),
        session_id="s",
        agent_id="a",
        user_id="u",
        created_from_us=1,
        created_to_us=9,
        memory_ids=("m",),
        derived_from_any=("d",),
    )
    assert filter_expression("acme", filters) == (
        'tenant_id == "acme" and state in ["active", "archived"] and (valid_to_us == 0 or'
        ' valid_to_us > 5) and created_at_us <= 6 and tier in ["semantic"] and'
        ' array_contains_any(tags, ["x", "y"]) and session_id == "s" and agent_id == "a" and'
        ' user_id == "u" and created_at_us >= 1 and created_at_us < 9 and memory_id in ["m"]'
        ' and (merged_into in ["d"] or superseded_by in ["d"])'
    )


@pytest.mark.parametrize("cache", [False, True])
def test_a_history_recall_follows_a_fact_past_a_version_it_left_out(cache: bool) -> None:
    """Paris was superseded by Rome, Rome by Berlin; ``min_score`` leaves Rome out. The fact was
    followed among the results alone, so Paris stood as a fact of its own, and ``k=1``
    returned it, not Berlin; on the hot cache's path the kernel scored the top 1 alone.
    """
    rows = [
        row("paris", 1.0, valid_to_us=2_000_000, superseded_by="rome"),
        row("rome", 0.3, 0.95, valid_to_us=3_000_000, superseded_by="berlin"),
        row("berlin", 0.8, 0.6, created_at_us=3_000_000),
        row("other", 0.7, 0.0, 0.71),
    ]
    history = Filters(states=("active", "archived"))  # no current_at_us: every version
    policy = RecallPolicy(min_score=0.3)  # relevance is half the cosine: Rome's .15 is cut
    svc = service(Store(*rows), cache=cache)
    query = RecallQuery(None, (1.0, 0.0, 0.0, 0.0), 1, AT, policy, history, track=False)
    asked = dataclasses.replace(query, include_history=True)

    async def main() -> list[list[str]]:
        await svc.start()
        try:
            queries = (asked, asked, dataclasses.replace(asked, k=3), query)
            return [ids((await svc.recall("acme", q)).results) for q in queries]
        finally:
            await svc.stop()

    first, again, three, plain = asyncio.run(main())
    assert first == again == ["berlin"]  # the second from the hot cache when it holds them
    assert three == ["berlin", "paris", "other"]  # best first here; the route sorts by time
    assert plain == ["paris"]  # not asked for history: best first, as it was
