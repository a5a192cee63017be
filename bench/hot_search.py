"""The hot cache's vector search alone, numpy on the CPU against a torch device (not a test).

    python -m bench.hot_search [--device cuda] [--memories 100000] [--tenants 100] [--group 64]
                               [--queries 2000] [--dim 384]

The rows and queries of ``python -m bench.recall --no-milvus`` (same seed, in this process), every
tenant loaded into one :class:`ranker.hotcache.HotCache` first. Then, for each place the cache
searches (numpy; ``--device``, ``MNEMO_HOT_CACHE_DEVICE``'s other value), on the same queries:
one query per call (:meth:`HotCache.search`, what a recall does), and ``--group`` queries of one
tenant per call (:meth:`HotCache.search_many`, what the worker's supersession check does per
batch), each for 100 candidates. Prints queries/s, p50 and p99 per call (ms), recall@10 of the
vector top 10 against float64 brute force (200 queries), and on CUDA the memory the cache's
device copies take.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import cast

import torch

from bench.recall import (
    CANDIDATES,
    GeneratedStore,
    Query,
    generate,
    queries,
    rss_mb,
    vector_recall,
)
from bench.stats import p50_p99
from ranker.hotcache import HotCache, search_device
from storage import Filters, MilvusConfig, MilvusStore

ALL = Filters()


def timed(calls: Sequence[Callable[[], object]], answered: int) -> tuple[float, float, float]:
    """(queries/s, p50 ms, p99 ms per call) over ``calls``, which answer ``answered`` queries."""
    lat = []
    start = time.perf_counter()
    for call in calls:
        t0 = time.perf_counter()
        call()
        lat.append(time.perf_counter() - t0)
    wall = time.perf_counter() - start
    p50, p99 = p50_p99(x * 1000 for x in lat)
    return answered / wall, p50, p99


def groups(items: Sequence[Query], size: int) -> list[tuple[str, list[tuple[float, ...]]]]:
    """The queries by tenant, in chunks of at most ``size``."""
    by_tenant: dict[str, list[tuple[float, ...]]] = defaultdict(list)
    for q in items:
        by_tenant[q.tenant].append(q.vector)
    return [
        (tenant, vectors[i : i + size])
        for tenant, vectors in by_tenant.items()
        for i in range(0, len(vectors), size)
    ]


def one_place(cache: HotCache, items: Sequence[Query], group: int) -> list[str]:
    """The table rows of the place ``cache.device`` names."""
    where = str(cache.device or "numpy (CPU)")
    for tenant in sorted({q.tenant for q in items}):  # device copies made, kernels loaded
        cache.search_many(tenant, [items[0].vector], CANDIDATES, ALL)
    single = [(lambda q=q: cache.search(q.tenant, q.vector, CANDIDATES, ALL)) for q in items]
    many = [
        (lambda t=t, v=v: cache.search_many(t, v, CANDIDATES, ALL)) for t, v in groups(items, group)
    ]
    recall = vector_recall(cache.store, cache, items[:200])
    out = []
    for name, calls in (
        ("one query a call", single),
        (f"up to {group} queries of a tenant a call", many),
    ):
        timed(calls[: max(1, len(calls) // 10)], 0)  # warm-up
        qps, p50, p99 = timed(calls, len(items))
        out.append(f"| {where} | {name} | {qps:,.0f} | {p50:.2f} | {p99:.2f} | {recall:.3f} |")
        print(out[-1], flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--tenants", type=int, default=100)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=2_000)
    parser.add_argument("--group", type=int, default=64)
    parser.add_argument("--seed", type=int, default=4)
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    store = GeneratedStore(MilvusConfig(uri="unused", dim=args.dim, full_text=False))
    centres, took = generate(store, args.memories, args.tenants, args.dim, args.seed)
    items = queries(centres, args.queries, args.seed)
    cache = HotCache(cast(MilvusStore, store), tenant_max=16_384, total_max=args.memories)
    start = time.perf_counter()
    for tenant in sorted(centres):
        cache.search(tenant, items[0].vector, 1, ALL)
    print(
        f"{args.memories:,} memories of {args.tenants} tenants generated in {took:.1f} s, loaded "
        f"in {time.perf_counter() - start:.1f} s; resident {rss_mb():,.0f} MB; "
        f"{len(items):,} queries, {CANDIDATES} candidates each",
        flush=True,
    )
    header = ["| searched on | calls | queries/s | p50 ms a call | p99 ms a call | recall@10 |"]
    header.append("|---|---|---|---|---|---|")
    rows = one_place(cache, items, args.group)
    cache.device = search_device(args.device) or torch.device("cpu")
    rows += one_place(cache, items, args.group)
    if cache.device.type == "cuda":
        print(
            f"device copies: {torch.cuda.memory_allocated(cache.device) / 1e6:,.0f} MB on the GPU"
        )
    print("\n".join(header + rows))


if __name__ == "__main__":
    main()
