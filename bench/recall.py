"""Recall throughput and latency: the ranker vs raw Milvus search vs unbatched scalar scoring (not a test).

    python -m bench.recall [--memories 100000] [--tenants 100] [--concurrency 32] [--requests 2000]
                           [--milvus-server | --milvus-uri URI] [--cached-queries 200]

Loads ``--memories`` rows spread evenly over ``--tenants`` tenants into a fresh Milvus Lite file
(``--milvus-server``: a Milvus 2.3 server process; ``--milvus-uri``: a collection on a running
server): unit vectors clustered around a few centres per tenant, random importance, tier (and its
τ), creation and last access; then flushes (seals the segments). Then, in one run and on the same
query vectors, ``--concurrency`` asyncio clients send ``--requests`` recalls (k=10 out of 100
candidates, a random tenant each, default filter: active memories of that tenant) through:

1. raw Milvus: ``MilvusStore.search`` for 100 candidates in a thread, top 10 by similarity (the
   floor: the ranker does this search and more); also with ``limit=10``;
2. the ranker: ``RecallService.recall`` (search, columns, the shared micro-batch scored by the
   torch kernel), no access events produced;
3. unbatched scalar: the same service with batches of one, each scored by memcore's ``rank`` inline;
4. (``--cached-queries``) 2 and 3 again with the search answered from hits fetched once, cycling
   over that many queries: what the ranker itself costs, Milvus aside;
5. the ranker with its hot cache (``ranker.hotcache``: every tenant's vectors in the ranker's
   memory, exact candidates by one matrix product), every tenant loaded first; its vector top 10
   is checked against brute force over the tenant's rows as Milvus returns them (recall@10).

Each path is warmed up first. Prints QPS, p50 and p99 latency per path, the ratios, the mean batch
size the ranker's batcher formed, and whether the ranker and the scalar path return the same top k.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import cast

import numpy as np
import torch

from bench.stats import p50_p99
from memcore import Candidate, Scored, rank
from memcore.policy import RecallPolicy, RecallPreset
from ranker import kernel
from ranker.hotcache import HotCache, search_device
from ranker.kernel import RankRequest, default_device
from ranker.service import RecallQuery, RecallService
from storage import Filters, Hit, MemoryRow, MilvusConfig, MilvusStore, from_us
from storage.embedding import Hashing
from storage.milvus import ANY_STATE

AT = from_us(1_780_000_000_000_000)  # the fixed scoring time of every request
K = 10
CANDIDATES = 100
CLUSTERS = 16  # centres per tenant
SPREAD = 0.8  # noise norm around a centre: cosine to it ≈ 0.78
TIERS = (("working", 48.0), ("episodic", 240.0), ("semantic", 1200.0))
US_PER_DAY = 86_400_000_000


@dataclass(frozen=True)
class Query:
    tenant: str
    vector: tuple[float, ...]


@dataclass(frozen=True)
class Result:
    name: str
    qps: float
    p50_ms: float
    p99_ms: float


def unit(rows: np.ndarray) -> np.ndarray:
    out: np.ndarray = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    return out


def around(centres: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` unit vectors, each near a random one of ``centres``."""
    dim = centres.shape[1]
    picks = centres[rng.integers(0, len(centres), n)]
    noise = rng.standard_normal((n, dim)) * (SPREAD / np.sqrt(dim))
    return unit(picks + noise).astype(np.float32)


def tenant_rows(
    tenant: str,
    first: int,
    n: int,
    centres: np.ndarray,
    rng: np.random.Generator,
    *,
    float32: bool = False,
) -> list[MemoryRow]:
    """``n`` rows of ``tenant``; ``float32``: each vector a float32 array, not a list of Python
    floats (a million rows of 384 Python floats would take ~9 GB).
    """
    vectors = around(centres, n, rng)
    if float32:
        vectors = vectors.astype(np.float32)
    at = int((AT - from_us(0)) / timedelta(microseconds=1))
    rows = []
    for i in range(n):
        memory_id = f"m{first + i:07d}"
        tier, tau = TIERS[int(rng.integers(0, len(TIERS)))]
        last_access = at - int(rng.uniform(0, 30) * US_PER_DAY)
        created = last_access - int(rng.uniform(0, 30) * US_PER_DAY)
        rows.append(
            MemoryRow(
                key=f"{tenant}/{memory_id}",
                tenant_id=tenant,
                memory_id=memory_id,
                content=f"memory {first + i} of {tenant}: something worth keeping",
                vector=vectors[i] if float32 else vectors[i].tolist(),
                tier=tier,
                state="active",
                importance=float(rng.uniform(0.05, 1.0)),
                access_count=0,
                recall_count=0,
                write_count=1,
                created_at_us=created,
                last_access_us=last_access,
                state_changed_at_us=created,
                tau_hours=tau,
                retention=0.5,
                review_count=0,
                next_review_us=0,
                session_id="",
                agent_id="",
                user_id="",
                tags=(),
                relations=(),
                merged_into="",
                summary_of=(),
                metadata={},
                valid_to_us=0,
                superseded_by="",
                search_text=f"memory {first + i} of {tenant}: something worth keeping",
            )
        )
    return rows


def corpus(
    memories: int, tenants: int, dim: int, seed: int, *, float32: bool = False
) -> tuple[dict[str, np.ndarray], Iterator[list[MemoryRow]]]:
    """Each tenant's centres, and its rows tenant after tenant (the same for the same seed)."""
    rng = np.random.default_rng(seed)
    names = [f"t{j:03d}" for j in range(tenants)]
    centres = {t: unit(rng.standard_normal((CLUSTERS, dim))) for t in names}
    per_tenant = memories // tenants
    rows = (
        tenant_rows(t, j * per_tenant, per_tenant, centres[t], rng, float32=float32)
        for j, t in enumerate(names)
    )
    return centres, rows


def load(
    store: MilvusStore, memories: int, tenants: int, dim: int, batch: int, seed: int
) -> tuple[dict[str, np.ndarray], float]:
    """Upsert the rows, ``batch`` at a time; returns each tenant's centres and the seconds taken."""
    centres, each_tenant = corpus(memories, tenants, dim, seed)
    start = time.perf_counter()
    pending: list[MemoryRow] = []
    done = 0
    for rows in each_tenant:
        pending += rows
        while len(pending) >= batch:
            store.upsert(pending[:batch])
            done += batch
            pending = pending[batch:]
            if done % max(batch, memories // 10) == 0:
                print(f"  loaded {done:,} rows in {time.perf_counter() - start:.1f} s", flush=True)
    if pending:
        store.upsert(pending)
        done += len(pending)
    # Seal the segments: Milvus searches rows still in growing segments by a slow scan (Lite: ~30 µs
    # a row of the whole collection per search); a server seals them itself after a while.
    store.client.flush(store.config.collection)
    return centres, time.perf_counter() - start


class GeneratedStore:
    """The bench's rows in this process, read as the hot cache reads Milvus (count, query, get,
    scan; no filters but the tenant): the ranker's hot path at sizes Milvus Lite cannot load in a
    run (``--no-milvus``). Same rows as :func:`load` writes for the same seed.
    """

    def __init__(self, config: MilvusConfig) -> None:
        self.config = config
        self.rows: dict[str, list[MemoryRow]] = {}

    def count(self, tenant_id: str, filters: Filters = ANY_STATE) -> int:
        del filters  # every generated row is active and current: it passes any filter asked here
        return len(self.rows.get(tenant_id, ()))

    def query(
        self, tenant_id: str, filters: Filters = ANY_STATE, limit: int = 16_384
    ) -> list[MemoryRow]:
        del filters
        return self.rows.get(tenant_id, [])[:limit]

    def get(self, tenant_id: str, memory_ids: Sequence[str]) -> dict[str, MemoryRow]:
        wanted = set(memory_ids)
        return {r.memory_id: r for r in self.rows.get(tenant_id, ()) if r.memory_id in wanted}

    def scan(self) -> Iterator[list[MemoryRow]]:
        yield from self.rows.values()


def generate(
    store: GeneratedStore, memories: int, tenants: int, dim: int, seed: int
) -> tuple[dict[str, np.ndarray], float]:
    """:func:`load`'s rows (same seed, same data), kept in ``store``; (centres, seconds)."""
    centres, each_tenant = corpus(memories, tenants, dim, seed, float32=True)
    start = time.perf_counter()
    for rows in each_tenant:
        store.rows[rows[0].tenant_id] = rows
    return centres, time.perf_counter() - start


def rss_mb() -> float:
    """This process's resident memory now, MB (Linux)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 1e6


def queries(
    centres: dict[str, np.ndarray], n: int, seed: int
) -> list[Query]:  # same list for every path
    rng = np.random.default_rng(seed + 1)
    names = sorted(centres)
    picked = [names[int(i)] for i in rng.integers(0, len(names), n)]
    return [Query(t, tuple(around(centres[t], 1, rng)[0].tolist())) for t in picked]


def scalar_scores(requests: Sequence[RankRequest]) -> list[list[Scored]]:
    """Memcore's scalar ``rank``, one request at a time, inline: the unbatched reference.

    ``RankRequest`` carries columns (``ranker.kernel``); they become memcore ``Candidate``s here, as
    a scalar service would build them from the store's rows. Adapt here if RankRequest changes.
    """
    return [rank(candidates(r), from_us(r.at_us), r.params) for r in requests]


def candidates(r: RankRequest) -> list[Candidate]:
    policy = r.params.policy
    mmr = policy.preset is RecallPreset.ZEPH or policy.mmr_lambda is not None
    vectors = r.vectors.tolist() if mmr and r.vectors is not None else None  # only MMR needs them
    similarity, keyword, importance = (
        r.similarity.tolist(),
        r.keyword.tolist(),
        r.importance.tolist(),
    )
    last_access, created, tau = (
        r.last_access_us.tolist(),
        r.created_at_us.tolist(),
        r.tau_hours.tolist(),
    )
    hops, tiers = r.graph_hops.tolist(), r.tier.tolist()
    return [
        Candidate(
            memory_id=memory_id,
            similarity=similarity[i],
            importance=importance[i],
            last_access=from_us(last_access[i]),
            created_at=from_us(created[i]),
            tau_hours=tau[i],
            tier=kernel.TIERS[tiers[i]],
            keyword=keyword[i],
            graph_hops=None if hops[i] < 0 else hops[i],
            vector=tuple(vectors[i]) if vectors is not None else (),
        )
        for i, memory_id in enumerate(r.ids)
    ]


class ScalarService(RecallService):
    """The recall service with the torch batch replaced by per-request scalar scoring."""

    async def _score(self, requests: Sequence[RankRequest]) -> list[list[Scored]]:
        return scalar_scores(requests)


async def _no_send(role: str, key: bytes, value: bytes) -> Awaitable[object]:
    del role, key, value
    done: asyncio.Future[object] = asyncio.get_running_loop().create_future()
    done.set_result(None)
    return done


def recall_query(q: Query) -> RecallQuery:
    return RecallQuery(text=None, vector=q.vector, k=K, at=AT, policy=RecallPolicy(), track=False)


async def drive(
    call: Callable[[Query], Awaitable[object]], items: Sequence[Query], concurrency: int
) -> tuple[float, list[float]]:
    """Run ``call`` over ``items`` with ``concurrency`` clients; (wall seconds, latencies)."""
    latencies: list[float] = []
    it = iter(items)

    async def client() -> None:
        for q in it:
            t = time.perf_counter()
            await call(q)
            latencies.append(time.perf_counter() - t)

    start = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    return time.perf_counter() - start, latencies


async def measure(
    name: str,
    call: Callable[[Query], Awaitable[object]],
    warm: Sequence[Query],
    items: Sequence[Query],
    concurrency: int,
) -> Result:
    await drive(call, warm, concurrency)
    wall, lat = await drive(call, items, concurrency)
    p50, p99 = p50_p99(x * 1000 for x in lat)
    result = Result(name, len(items) / wall, p50, p99)
    print(f"  {name}: {result.qps:,.0f} QPS, p50 {result.p50_ms:.1f} ms, p99 {p99:.1f} ms")
    return result


def batch_totals(service: RecallService) -> tuple[float, float]:
    """(requests scored, batches) so far, from the service's Prometheus histogram."""
    registry = service.metrics.registry
    total = registry.get_sample_value("mnemostream_recall_batch_size_sum") or 0.0
    count = registry.get_sample_value("mnemostream_recall_batch_size_count") or 0.0
    return total, count


class CachedStore(MilvusStore):
    """Answers ``search`` from hits fetched once: the recall pipeline without Milvus's cost."""

    def __init__(self, config: MilvusConfig, hits: dict[Query, list[Hit]]) -> None:
        super().__init__(config)
        self.hits = hits

    def search(
        self,
        tenant_id: str,
        vectors: Sequence[Sequence[float]],
        k: int,
        filters: Filters = Filters(),  # noqa: B008 - the signature overridden
    ) -> list[list[Hit]]:
        del filters
        return [self.hits[Query(tenant_id, tuple(v))][:k] for v in vectors]


async def services(store: MilvusStore, dim: int) -> tuple[RecallService, ScalarService]:
    embedder = Hashing(dim)  # never called: every query has a vector
    batched = RecallService(
        store, embedder, _no_send, candidates=CANDIDATES, batch_max=64, batch_wait_s=0.002
    )
    scalar = ScalarService(
        store, embedder, _no_send, candidates=CANDIDATES, batch_max=1, batch_wait_s=0.0
    )
    await batched.start()
    await scalar.start()
    return batched, scalar


async def compare(
    label: str,
    batched: RecallService,
    scalar: ScalarService,
    warm: Sequence[Query],
    items: Sequence[Query],
    concurrency: int,
) -> tuple[Result, Result, float, str]:
    """The ranker and the scalar service on the same queries; (ranker, scalar, mean batch, check)."""

    async def ranked(q: Query) -> object:
        return await batched.recall(q.tenant, recall_query(q))

    async def scalar_ranked(q: Query) -> object:
        return await scalar.recall(q.tenant, recall_query(q))

    await drive(ranked, warm, concurrency)
    before = batch_totals(batched)
    ranker = await measure(f"ranker (torch micro-batch){label}", ranked, [], items, concurrency)
    after = batch_totals(batched)
    mean_batch = (after[0] - before[0]) / max(1.0, after[1] - before[1])
    unbatched = await measure(
        f"unbatched scalar memcore.rank{label}", scalar_ranked, warm, items, concurrency
    )
    agree, checked = 0, items[:50]
    for q in checked:
        a = [r.score.memory_id for r in (await batched.recall(q.tenant, recall_query(q))).results]
        b = [r.score.memory_id for r in (await scalar.recall(q.tenant, recall_query(q))).results]
        agree += a == b
    return ranker, unbatched, mean_batch, f"{agree}/{len(checked)}"


async def hot_path(
    store: MilvusStore,
    dim: int,
    warm: Sequence[Query],
    items: Sequence[Query],
    concurrency: int,
    hot_device: str = "cpu",
) -> tuple[Result, float, float, str]:
    """The ranker with the hot cache searching on ``hot_device`` (``MNEMO_HOT_CACHE_DEVICE``):
    (result, load seconds, recall@10 of its vector stage against brute force, cache size).
    """
    device = search_device(hot_device)
    print(f"  hot cache searches on {device or 'the CPU (numpy)'}; kernel on {default_device()}")
    cache = HotCache(store, device=device)
    tenants = sorted({q.tenant for q in items})
    before = rss_mb()
    start = time.perf_counter()
    for tenant in tenants:
        cache.search(tenant, items[0].vector, 1, Filters())
    loaded = time.perf_counter() - start
    print(f"  hot cache: {rss_mb() - before:,.0f} MB more resident memory for {cache.rows:,} rows")
    if device is not None and device.type == "cuda":
        print(f"  hot cache on the GPU: {torch.cuda.memory_allocated(device) / 1e6:,.0f} MB")
    service = RecallService(
        store,
        Hashing(dim),
        _no_send,
        candidates=CANDIDATES,
        batch_max=64,
        batch_wait_s=0.002,
        cache=cache,
    )
    await service.start()
    try:

        async def call(q: Query) -> object:
            return await service.recall(q.tenant, recall_query(q))

        result = await measure("ranker + hot cache", call, warm, items, concurrency)
    finally:
        await service.stop()
    size = f"{cache.rows:,} rows of {len(tenants)} tenants"
    return result, loaded, vector_recall(store, cache, items[:200]), size


def vector_recall(store: MilvusStore, cache: HotCache, items: Sequence[Query]) -> float:
    """Recall@10 of the cache's vector top 10 against float64 brute force over the tenant's rows
    as ``store`` returns them, over ``items``.
    """
    found = total = 0
    by_tenant: dict[str, tuple[list[str], np.ndarray]] = {}
    for q in items:
        if q.tenant not in by_tenant:
            rows = store.query(q.tenant, Filters(), limit=16_384)
            by_tenant[q.tenant] = (
                [r.memory_id for r in rows],
                unit(np.asarray([r.vector for r in rows], dtype=np.float64)),
            )
        ids, vectors = by_tenant[q.tenant]
        exact = {ids[i] for i in np.argsort(-(vectors @ np.asarray(q.vector)))[:K]}
        hits = cache.search(q.tenant, q.vector, K, Filters())
        found += len(exact & {r.memory_id for r in (hits.rows if hits is not None else ())})
        total += K
    return found / total


async def run(args: argparse.Namespace, store: MilvusStore, items: list[Query]) -> None:
    warm, measured = items[: args.warmup], items[args.warmup :]
    c = args.concurrency
    filters = Filters()
    if args.hot_only:
        hot, loaded, recall, size = await hot_path(
            store, args.dim, warm, measured, c, args.hot_device
        )
        print(f"hot cache: {size} loaded in {loaded:.1f} s; vector recall@{K} {recall:.3f}")
        print(f"| {hot.name} | {hot.qps:,.0f} | {hot.p50_ms:.1f} | {hot.p99_ms:.1f} |")
        return

    def raw(limit: int) -> Callable[[Query], Awaitable[object]]:
        async def call(q: Query) -> object:
            hits = (await asyncio.to_thread(store.search, q.tenant, [q.vector], limit, filters))[0]
            return sorted(hits, key=lambda h: -h.similarity)[:K]

        return call

    print(f"measuring: {len(measured):,} requests per path, {c} clients, {len(warm)} warm-up")
    raw_result = await measure(
        f"raw Milvus search, limit {CANDIDATES}", raw(CANDIDATES), warm, measured, c
    )
    raw_k = await measure(f"raw Milvus search, limit {K}", raw(K), warm, measured, c)
    batched, scalar = await services(store, args.dim)
    try:
        ranker, unbatched, mean_batch, agree = await compare("", batched, scalar, warm, measured, c)
    finally:
        await batched.stop()
        await scalar.stop()
    hot, loaded, recall, size = await hot_path(store, args.dim, warm, measured, c, args.hot_device)
    results = [raw_result, raw_k, ranker, unbatched, hot]
    lines = [
        f"ranker + hot cache / raw Milvus (limit {CANDIDATES}) QPS: {hot.qps / raw_result.qps:.2f}",
        f"hot cache: {size} loaded in {loaded:.1f} s; vector recall@{K} against brute force "
        f"{recall:.3f}",
        f"ranker / raw Milvus (limit {CANDIDATES}) QPS: {ranker.qps / raw_result.qps:.2f}",
        f"ranker / raw Milvus (limit {K}) QPS: {ranker.qps / raw_k.qps:.2f}",
        f"ranker / unbatched scalar QPS: {ranker.qps / unbatched.qps:.2f}",
        f"mean batch size the ranker scored: {mean_batch:.1f}",
        f"ranker and scalar top {K} identical on {agree} queries",
    ]
    if args.cached_queries > 0:
        # The same two services with Milvus answered from memory: what the ranker itself costs.
        distinct = list(dict.fromkeys(measured))[: args.cached_queries]
        print(f"fetching {len(distinct)} queries' candidates once for the cached paths")
        hits = {q: store.search(q.tenant, [q.vector], CANDIDATES, filters)[0] for q in distinct}
        cycled = [distinct[i % len(distinct)] for i in range(len(measured))]
        batched, scalar = await services(CachedStore(store.config, hits), args.dim)
        try:
            c_ranker, c_unbatched, c_batch, c_agree = await compare(
                ", Milvus hits cached", batched, scalar, cycled[: len(warm)], cycled, c
            )
        finally:
            await batched.stop()
            await scalar.stop()
        results += [c_ranker, c_unbatched]
        lines += [
            f"cached: ranker / unbatched scalar QPS: {c_ranker.qps / c_unbatched.qps:.2f}",
            f"cached: mean batch size the ranker scored: {c_batch:.1f}",
            f"cached: ranker and scalar top {K} identical on {c_agree} queries",
        ]
    print()
    print("| path | QPS | p50 ms | p99 ms |")
    print("|---|---|---|---|")
    for r in results:
        print(f"| {r.name} | {r.qps:,.0f} | {r.p50_ms:.1f} | {r.p99_ms:.1f} |")
    print()
    print("\n".join(lines))


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--tenants", type=int, default=100)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--requests", type=int, default=2_000)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--upsert-batch", type=int, default=2_000)
    parser.add_argument(
        "--cached-queries",
        type=int,
        default=200,
        help="also run the ranker and the scalar service on this many queries' hits fetched "
        "once (0: skip)",
    )
    parser.add_argument("--seed", type=int, default=4)
    parser.add_argument(
        "--hot-only",
        action="store_true",
        help="only the ranker with its hot cache (no Milvus paths)",
    )
    parser.add_argument(
        "--no-milvus",
        action="store_true",
        help="with --hot-only: the rows stay in this process (GeneratedStore) instead of a Milvus"
        " Lite file: the hot path at a million rows, which Lite cannot load in a run",
    )
    parser.add_argument(
        "--hot-device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="where the hot cache searches (MNEMO_HOT_CACHE_DEVICE); the scoring kernel runs on"
        " CUDA whenever torch sees a GPU",
    )
    target = parser.add_mutually_exclusive_group()
    target.add_argument(
        "--milvus-uri",
        help="a Milvus server (http://host:port) instead of a fresh Milvus Lite file",
    )
    target.add_argument(
        "--milvus-server",
        action="store_true",
        help="start a Milvus 2.3 server process (the tests' one; partition key off) instead of Lite",
    )
    parser.add_argument(
        "--partition-key",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="tenant_id as partition key (default: on, off with --milvus-server: Milvus 2.3 loses "
        "upserted rows from partition-key filters)",
    )
    return parser


def main() -> None:
    parser = arguments()
    args = parser.parse_args()
    if args.no_milvus:
        if not args.hot_only:
            parser.error("--no-milvus needs --hot-only")
        generated = GeneratedStore(MilvusConfig(uri="unused", dim=args.dim, full_text=False))
        print(f"generating {args.memories:,} memories over {args.tenants} tenants in process")
        centres, took = generate(generated, args.memories, args.tenants, args.dim, args.seed)
        print(f"generated in {took:.1f} s; resident memory {rss_mb():,.0f} MB")
        items = queries(centres, args.warmup + args.requests, args.seed)
        asyncio.run(run(args, cast(MilvusStore, generated), items))
        return
    with contextlib.ExitStack() as resources:
        work = Path(resources.enter_context(tempfile.TemporaryDirectory()))
        uri, collection, where = str(work / "milvus.db"), "memories", "Milvus Lite"
        if args.milvus_server:
            from tests.infra import milvus_server

            uri = resources.enter_context(milvus_server(work / "milvus-server"))
            where = "a Milvus 2.3 server"
        elif args.milvus_uri:
            uri, collection = args.milvus_uri, f"bench_recall_{uuid.uuid4().hex[:8]}"
            where = args.milvus_uri
        partition_key = args.partition_key
        if partition_key is None:
            partition_key = not args.milvus_server
        config = MilvusConfig(
            uri=uri,
            collection=collection,
            dim=args.dim,
            partition_key=partition_key,
            full_text=not args.milvus_server,
        )
        store = MilvusStore(config)
        store.connect()
        resources.callback(store.close)
        if args.milvus_uri:
            resources.callback(store.drop)
        print(
            f"loading {args.memories:,} memories over {args.tenants} tenants, dim {args.dim}, "
            f"into {where} (partition key {'on' if partition_key else 'off'})"
        )
        centres, load_s = load(
            store, args.memories, args.tenants, args.dim, args.upsert_batch, args.seed
        )
        print(f"load: {load_s:.1f} s ({args.memories / load_s:,.0f} rows/s), flush included")
        items = queries(centres, args.warmup + args.requests, args.seed)
        asyncio.run(run(args, store, items))


if __name__ == "__main__":
    main()
