"""What it costs to rebuild Milvus from the worker's tables, and to flush Milvus Lite (not a test).

    python -m bench.resync [--memories 10000 100000] [--dim 384] [--flush-batches 20]
                           [--tenants 1] [--once]

For each size: tables (dicts of codec bytes, as the worker's RocksDB tables hold them) filled with
that many memories of one tenant (``--tenants``: spread over that many); then, on a fresh Milvus
Lite file, the worker's resync path (``Processor.rows`` over every key, upserts of 1,000 rows)
timed twice (once with ``--once``): into an empty collection (a lost store) and over the rows
already there (the restart after a kill -9 before the start-up check); then the start-up
check that finds every row there (``streams.rebuild.catch_up``: a count, nothing rewritten),
alone and filling a hot cache (``python -m server``). Then the cost of
``flush`` on Milvus Lite: ``--flush-batches`` upserts of 64 rows with and without a flush after
each (a flush seals the memtable into a Parquet file and rewrites the manifest).
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from memcore import ImportanceDecision, ImportanceSource, Policy, Write, apply, content_hash
from ranker.hotcache import HotCache
from storage import Document, MilvusConfig, MilvusStore, codec
from storage.changelogs import Tables
from storage.records import Limits
from storage.tenants import TenantRegistry
from streams.processor import Processor
from streams.rebuild import catch_up

CHUNK = 1000


def tenant_names(n: int) -> list[str]:
    """``acme`` alone, or ``t0000``... for more than one tenant."""
    return ["acme"] if n == 1 else [f"t{j:04d}" for j in range(n)]


def tables(n: int, dim: int, tenants: int = 1) -> tuple[dict[bytes, bytes], dict[bytes, bytes]]:
    """``n`` memories spread round-robin over ``tenants`` tenants."""
    rng = random.Random(n)
    names = tenant_names(tenants)
    at = datetime(2026, 3, 1, tzinfo=UTC)
    decision = ImportanceDecision(0.6, ImportanceSource.EXPLICIT, "bench")
    write = Write("acme", "m0", content_hash("m0"), at, decision)
    base, _ = apply(None, write, Policy())
    assert base is not None
    memories: dict[bytes, bytes] = {}
    documents: dict[bytes, bytes] = {}
    for i in range(n):
        memory_id, tenant_id = f"m{i}", names[i % len(names)]
        key = f"{tenant_id}/{memory_id}".encode()
        state = dataclasses.replace(
            base, tenant_id=tenant_id, memory_id=memory_id, content_hash=content_hash(memory_id)
        )
        memories[key] = codec.encode(state)
        vector = tuple(rng.uniform(-1, 1) for _ in range(dim))
        documents[key] = codec.encode_document(Document(f"memory {i} " * 8, vector, {"i": i}))
    return memories, documents


def resync(processor: Processor, store: MilvusStore) -> tuple[float, float]:
    """Seconds reading rows from the tables, seconds upserting them."""
    keys = [k.decode() for k in processor.memories]
    reading = upserting = 0.0
    for i in range(0, len(keys), CHUNK):
        started = time.perf_counter()
        upserts, _ = processor.rows(keys[i : i + CHUNK])
        read = time.perf_counter()
        store.upsert(upserts)
        reading += read - started
        upserting += time.perf_counter() - read
    return reading, upserting


def checked(tables: Tables, store: MilvusStore) -> tuple[float, float]:
    """Seconds of the start-up check over a store that holds every row: alone, and filling a
    hot cache as ``python -m server`` does.
    """
    started = time.perf_counter()
    assert catch_up(store, tables).upserted == 0
    alone = time.perf_counter() - started
    cache = HotCache(store, sole_writer=True, tenant_max=len(tables.memories))  # all of them
    started = time.perf_counter()
    assert catch_up(store, tables, into=cache.fill).upserted == 0
    assert cache.rows == len(tables.memories)
    return alone, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--flush-batches", type=int, default=20)
    parser.add_argument("--tenants", type=int, default=1, help="memories spread over this many")
    parser.add_argument(
        "--once", action="store_true", help="no second full rewrite over the rows there"
    )
    args = parser.parse_args()
    limits = Limits(args.dim, 16_384, TenantRegistry.open_to(tenant_names(args.tenants)))
    for n in args.memories:
        memories, documents = tables(n, args.dim, args.tenants)
        processor = Processor(memories, documents, {}, {}, limits)
        with tempfile.TemporaryDirectory() as tmp:
            config = MilvusConfig(str(Path(tmp) / "m.db"), collection="resync", dim=args.dim)
            store = MilvusStore(config)
            store.connect()
            empty = resync(processor, store)
            again = (0.0, 0.0) if args.once else resync(processor, store)
            check = checked(Tables(memories, documents), store)
            store.close()
        print(
            f"{n:>7,} memories: into an empty collection read {empty[0]:.1f} s + upsert "
            f"{empty[1]:.1f} s; over existing rows read {again[0]:.1f} s + upsert {again[1]:.1f} s;"
            f" the start-up check (counted, not rewritten) {check[0]:.1f} s, with the hot cache"
            f" filled {check[1]:.1f} s"
        )
    memories, documents = tables(64 * args.flush_batches * 2, args.dim)
    processor = Processor(memories, documents, {}, {}, limits)
    rows, _ = processor.rows(k.decode() for k in memories)
    with tempfile.TemporaryDirectory() as tmp:
        config = MilvusConfig(str(Path(tmp) / "m.db"), collection="flush", dim=args.dim)
        store = MilvusStore(config)
        store.connect()
        timings = {}
        for flush, part in ((False, rows[: len(rows) // 2]), (True, rows[len(rows) // 2 :])):
            started = time.perf_counter()
            for i in range(0, len(part), 64):
                store.upsert(part[i : i + 64])
                if flush:
                    store.client.flush(config.collection)
            timings[flush] = (time.perf_counter() - started) / args.flush_batches
        store.close()
    print(
        f"upsert of 64 rows: {timings[False] * 1000:.1f} ms; with a flush after it: "
        f"{timings[True] * 1000:.1f} ms ({args.flush_batches} batches each)"
    )


if __name__ == "__main__":
    main()
