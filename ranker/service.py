"""Recall, write, access and get for one tenant at a time; the HTTP layer adds auth on top.

Recall: embed the query (unless a vector is given), take the tenant's nearest active memories from
Milvus (request filters applied there), score them in the shared micro-batch (one torch pass for
many requests), and produce one recall access event per returned memory unless ``track`` is off.
Writes and accesses are produced to Kafka; the stream worker applies them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson

from memcore import Candidate, RankParams, Scored, Tier, derive_memory_id
from memcore.keyword import bm25_scores
from memcore.policy import RecallPolicy
from ranker.batcher import Batcher, Overloaded
from ranker.kernel import RankRequest, rank_many
from ranker.metrics import Metrics
from storage import Filters, Hit, MemoryRow, MilvusStore, from_us
from storage.embedding import Embedder

Send = Callable[[str, bytes, bytes], Awaitable[Awaitable[object]]]
"""Enqueue one message (topic role, key, value), in call order; returns its delivery to await."""


@dataclass(frozen=True)
class RecallQuery:
    """One recall request, already validated.

    Attributes:
        text: query text (embedded when ``vector`` is None; also the keyword query).
        vector: query vector, or None.
        k: results wanted.
        at: the time to score at (recency); the event time of the emitted accesses.
        policy: the tenant's recall policy with the request's overrides applied.
        filters: scalar filters applied in Milvus before ranking.
        track: emit a recall access event per returned memory.
    """

    text: str | None
    vector: tuple[float, ...] | None
    k: int
    at: datetime
    policy: RecallPolicy
    filters: Filters = field(default_factory=Filters)
    track: bool = True


@dataclass(frozen=True)
class Recalled:
    """A returned memory with its score breakdown."""

    row: MemoryRow
    score: Scored


class RecallService:
    """Constructors do no I/O; the store and the producer are started by the caller."""

    def __init__(
        self,
        store: MilvusStore,
        embedder: Embedder,
        send: Send,
        *,
        candidates: int = 100,
        batch_max: int = 64,
        batch_wait_s: float = 0.002,
        queue_max: int = 1024,
        metrics: Metrics | None = None,
    ) -> None:
        self.metrics = metrics or Metrics()
        self.store = store
        self.embedder = embedder
        self.send = send
        self.candidates = candidates
        self.batcher: Batcher[RankRequest, list[Scored]] = Batcher(
            self._score,
            max_batch=batch_max,
            max_wait_s=batch_wait_s,
            max_queue=queue_max,
            on_batch=self.metrics.on_batch,
        )

    async def start(self) -> None:
        await self.batcher.start()

    async def stop(self) -> None:
        await self.batcher.stop()

    async def recall(self, tenant_id: str, query: RecallQuery) -> list[Recalled]:
        """The top ``k`` memories of one tenant, best first (raises Overloaded when saturated)."""
        try:
            with self.metrics.latency.time():
                return await self._recall(tenant_id, query)
        except Overloaded:
            self.metrics.overloaded.inc()
            raise

    async def _recall(self, tenant_id: str, query: RecallQuery) -> list[Recalled]:
        vector = query.vector
        if vector is None:
            (vector,) = await asyncio.to_thread(self.embedder.embed, [query.text or ""])
        hits = (
            await asyncio.to_thread(
                self.store.search, tenant_id, [vector], max(self.candidates, query.k), query.filters
            )
        )[0]
        if not hits:
            return []
        keywords = (
            bm25_scores(query.text, [h.row.content for h in hits])
            if query.text and query.policy.weights.keyword > 0
            else [0.0] * len(hits)
        )
        candidates = [_candidate(h, kw) for h, kw in zip(hits, keywords, strict=True)]
        params = RankParams(k=query.k, policy=query.policy)
        scored = await self.batcher.submit(RankRequest(candidates, query.at, params))
        rows = {h.row.memory_id: h.row for h in hits}
        results = [Recalled(rows[s.memory_id], s) for s in scored]
        if query.track:
            await self.access(tenant_id, [r.row.memory_id for r in results], query.at, "recall")
        return results

    async def write(self, tenant_id: str, documents: Sequence[Mapping[str, Any]]) -> list[str]:
        """Produce memory writes; returns their ids (derived from the content when absent)."""
        ids = [d.get("memory_id") or derive_memory_id(tenant_id, d["content"]) for d in documents]
        await self._produce(
            "memory-writes",
            tenant_id,
            [
                {"v": 1, **d, "tenant_id": tenant_id, "memory_id": m}
                for d, m in zip(documents, ids, strict=True)
            ],
        )
        return [str(m) for m in ids]

    async def access(
        self, tenant_id: str, memory_ids: Sequence[str], at: datetime, kind: str
    ) -> None:
        """Produce one access event per id."""
        events = [
            {"v": 1, "tenant_id": tenant_id, "memory_id": m, "at": at.isoformat(), "kind": kind}
            for m in memory_ids
        ]
        await self._produce("access-events", tenant_id, events)

    async def _produce(
        self, role: str, tenant_id: str, values: Sequence[Mapping[str, Any]]
    ) -> None:
        """Enqueue in order (a memory's events keep their order), then wait for all deliveries
        at once: one round trip per call, not one per message.
        """
        deliveries = [
            await self.send(role, f"{tenant_id}/{v['memory_id']}".encode(), orjson.dumps(v))
            for v in values
        ]
        await asyncio.gather(*deliveries)

    async def get(self, tenant_id: str, memory_id: str) -> MemoryRow | None:
        """One memory of this tenant (any state), or None."""
        found = await asyncio.to_thread(self.store.get, tenant_id, [memory_id])
        return found.get(memory_id)

    async def _score(self, requests: Sequence[RankRequest]) -> list[list[Scored]]:
        return await asyncio.to_thread(rank_many, requests)


def _candidate(hit: Hit, keyword: float) -> Candidate:
    row = hit.row
    return Candidate(
        memory_id=row.memory_id,
        similarity=hit.similarity,
        importance=row.importance,
        last_access=from_us(row.last_access_us),
        created_at=from_us(row.created_at_us),
        tau_hours=row.tau_hours,
        tier=Tier(row.tier),
        keyword=keyword,
        vector=tuple(row.vector),
    )
