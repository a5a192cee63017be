"""Recall, write, access and get for one tenant at a time; the HTTP layer adds auth on top.

Recall: embed the query (unless a vector is given), take the tenant's nearest active memories from
Milvus (request filters applied there), set aside the candidates that have faded (the default
lifecycle archives them instead of returning them), count graph hops over the candidates'
relations when the policy uses graph proximity, score the rest in the shared micro-batch (one
torch pass for many requests, exact similarity by FAISS), and produce one recall access event per
returned memory and one ``fade`` decision per faded candidate, unless ``track`` is off.
Writes and accesses are produced to Kafka; the stream worker applies them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
import orjson

from memcore import RankParams, Scored, derive_memory_id, faded
from memcore.graph import MAX_HOPS, recall_hops
from memcore.keyword import bm25_scores
from memcore.policy import RecallPolicy, RecallPreset
from ranker.batcher import Batcher, Overloaded
from ranker.kernel import RankRequest, rank_many
from ranker.metrics import Metrics
from storage import Filters, Hit, MemoryRow, MilvusStore, from_us, to_us
from storage.embedding import Embedder

GRAPH_FETCH_MAX = 1_000
"""Memories beyond the candidates whose relations one recall reads, per hop, at most."""

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
        track: emit a recall access event per returned memory (and a ``fade`` decision per
            faded candidate).
        archive_below: effective importance under which a candidate has faded and is archived
            instead of returned (the tenant's default lifecycle); None: no such gate (the
            ``powermem`` lifecycle, archive search).
        archive_faded: write the ``fade`` decisions (with ``track``); off for a scoring time in
            the future, so that a what-if recall never archives anything.
    """

    text: str | None
    vector: tuple[float, ...] | None
    k: int
    at: datetime
    policy: RecallPolicy
    filters: Filters = field(default_factory=Filters)
    track: bool = True
    archive_below: float | None = None
    archive_faded: bool = True


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
        hits, fading = _set_aside_faded(hits, query)
        results: list[Recalled] = []
        if hits:
            relations: Mapping[str, Sequence[str]] = {}
            if query.policy.graphrag or query.policy.weights.graph > 0:
                relations = await self._relations(tenant_id, hits)
            request = _request(hits, vector, query, relations)
            scored = await self.batcher.submit(request)
            rows = {h.row.memory_id: h.row for h in hits}
            results = [Recalled(rows[s.memory_id], s) for s in scored]
        if query.track:
            await self._produce_all(
                [
                    ("access-events", _access(tenant_id, r.row.memory_id, query.at, "recall"))
                    for r in results
                ]
                + [
                    ("memory-writes", _fade(tenant_id, h.row.memory_id, query.at))
                    for h in (fading if query.archive_faded else [])
                ]
            )
        return results

    async def _relations(self, tenant_id: str, hits: Sequence[Hit]) -> dict[str, Sequence[str]]:
        """The candidates' relations, and those of the memories a path of at most ``MAX_HOPS``
        from a candidate passes through (read from the store, this tenant only, a bounded number
        per hop). Links *into* a memory from outside the candidates are not followed.
        """
        relations: dict[str, Sequence[str]] = {h.row.memory_id: h.row.relations for h in hits}
        frontier = {t for targets in relations.values() for t in targets} - relations.keys()
        for _ in range(MAX_HOPS - 1):
            if not frontier:
                break
            wanted = sorted(frontier)[:GRAPH_FETCH_MAX]
            found = await asyncio.to_thread(self.store.relations, tenant_id, wanted)
            for memory_id in wanted:
                relations[memory_id] = found.get(memory_id, ())
            frontier = {t for targets in found.values() for t in targets} - relations.keys()
        return relations

    async def write(self, tenant_id: str, documents: Sequence[Mapping[str, Any]]) -> list[str]:
        """Produce memory writes; returns their ids (derived from the content when absent)."""
        ids = [d.get("memory_id") or derive_memory_id(tenant_id, d["content"]) for d in documents]
        await self._produce_all(
            [
                ("memory-writes", {"v": 1, **d, "tenant_id": tenant_id, "memory_id": m})
                for d, m in zip(documents, ids, strict=True)
            ]
        )
        return [str(m) for m in ids]

    async def access(
        self, tenant_id: str, memory_ids: Sequence[str], at: datetime, kind: str
    ) -> None:
        """Produce one access event per id."""
        await self._produce_all(
            [("access-events", _access(tenant_id, m, at, kind)) for m in memory_ids]
        )

    async def _produce_all(self, messages: Sequence[tuple[str, Mapping[str, Any]]]) -> None:
        """Enqueue ``(topic role, value)`` in order (a memory's events keep their order), then
        wait for all deliveries at once: one round trip per call, not one per message.
        """
        deliveries = [
            await self.send(role, f"{v['tenant_id']}/{v['memory_id']}".encode(), orjson.dumps(v))
            for role, v in messages
        ]
        await asyncio.gather(*deliveries)

    async def get(self, tenant_id: str, memory_id: str) -> MemoryRow | None:
        """One memory of this tenant (any state), or None."""
        found = await asyncio.to_thread(self.store.get, tenant_id, [memory_id])
        return found.get(memory_id)

    async def _score(self, requests: Sequence[RankRequest]) -> list[list[Scored]]:
        return await asyncio.to_thread(rank_many, requests)


def _access(tenant_id: str, memory_id: str, at: datetime, kind: str) -> dict[str, Any]:
    return {
        "v": 1,
        "tenant_id": tenant_id,
        "memory_id": memory_id,
        "at": at.isoformat(),
        "kind": kind,
    }


def _fade(tenant_id: str, memory_id: str, at: datetime) -> dict[str, Any]:
    """A ``fade`` decision: the worker archives the memory if it is still faded when applied."""
    return {
        "v": 1,
        "kind": "decision",
        "decision": "fade",
        "tenant_id": tenant_id,
        "memory_id": memory_id,
        "at": at.isoformat(),
        "reason": "faded recall candidate",
    }


def _set_aside_faded(hits: Sequence[Hit], query: RecallQuery) -> tuple[list[Hit], list[Hit]]:
    """(candidates to rank, candidates that have faded by ``query.at``)."""
    if query.archive_below is None:
        return list(hits), []
    keep: list[Hit] = []
    fading: list[Hit] = []
    for h in hits:
        row = h.row
        why = faded(
            row.importance,
            from_us(row.last_access_us),
            row.tau_hours,
            query.at,
            query.archive_below,
        )
        (keep if why is None else fading).append(h)
    return keep, fading


def _request(
    hits: Sequence[Hit],
    vector: Sequence[float],
    query: RecallQuery,
    relations: Mapping[str, Sequence[str]],
) -> RankRequest:
    """The kernel's columns, straight from the store's rows (graph hops over ``relations``)."""
    rows = [h.row for h in hits]
    policy = query.policy
    keywords = (
        bm25_scores(query.text, [r.content for r in rows])
        if query.text and (policy.preset is RecallPreset.ZEPH or policy.weights.keyword > 0)
        else [0.0] * len(rows)
    )
    hops: dict[str, int] = {}
    if relations:
        hops = recall_hops({h.row.memory_id: h.similarity for h in hits}, relations)
    return RankRequest(
        ids=tuple(r.memory_id for r in rows),
        at_us=to_us(query.at),
        params=RankParams(k=query.k, policy=policy),
        similarity=np.fromiter((h.similarity for h in hits), np.float64, len(hits)),
        keyword=np.asarray(keywords, dtype=np.float64),
        importance=np.fromiter((r.importance for r in rows), np.float64, len(rows)),
        last_access_us=np.fromiter((r.last_access_us for r in rows), np.int64, len(rows)),
        created_at_us=np.fromiter((r.created_at_us for r in rows), np.int64, len(rows)),
        tau_hours=np.fromiter((r.tau_hours for r in rows), np.float64, len(rows)),
        graph_hops=np.fromiter((hops.get(r.memory_id, -1) for r in rows), np.int64, len(rows)),
        semantic=np.fromiter((r.tier == "semantic" for r in rows), np.bool_, len(rows)),
        vectors=np.asarray([r.vector for r in rows], dtype=np.float32),
        query=np.asarray(vector, dtype=np.float32),
    )
