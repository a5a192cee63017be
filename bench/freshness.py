"""Write -> searchable through the HTTP API of a running service (``make up``): issue 12's
freshness figure.

    make up
    .venv/bin/python -m bench.freshness [--rates 20 50 100] [--seconds 20] [--tenant demo]

At each rate, writes one memory per tick (``POST /v1/memories``, a given random unit vector of the
service's dimension, so no embedding) for ``--seconds``; right after each write is acknowledged, a
recall of that vector (k 1, ``track`` false) with the write's read-your-writes token as
``after``. The figure of a write is the time from sending it until that recall returns it; a recall
that answers without it, or not within ``--patience`` seconds, counts as not searchable. Prints
p50/p99 per rate, the writes acknowledged per second and how many were not searchable. Client and
service share the machine's cores. ``--acks N`` instead times N sequential writes until each is
acknowledged (what sealing adds to a write: minting its key).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from pathlib import Path

import httpx
import numpy as np

from bench.quality import DEFAULT_TENANTS, api_keys, require_keys


async def one(
    client: httpx.AsyncClient, key: str, memory_id: str, vector: list[float], patience_s: float
) -> float | None:
    """Seconds from the write until its recall returns it; None when it did not."""
    headers = {"Authorization": f"Bearer {key}"}
    start = time.perf_counter()
    body = {"memories": [{"memory_id": memory_id, "content": f"fresh {memory_id}",
                          "embedding": vector}]}  # fmt: skip
    try:
        written = await client.post("/v1/memories", json=body, headers=headers)
        if written.status_code != 200:
            return None
        query = {"vector": vector, "k": 1, "track": False, "after": written.json()["token"]}
        found = await client.post("/v1/recall", json=query, headers=headers, timeout=patience_s)
    except httpx.HTTPError:
        return None
    if found.status_code != 200:
        return None
    ids = [r["memory_id"] for r in found.json()["results"]]
    return time.perf_counter() - start if memory_id in ids else None


async def at_rate(
    client: httpx.AsyncClient,
    key: str,
    rate: float,
    seconds: float,
    dim: int,
    args: argparse.Namespace,
) -> str:
    rng = np.random.default_rng(int(rate))
    n = int(rate * seconds)
    vectors = rng.standard_normal((n, dim))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    tasks: list[asyncio.Task[float | None]] = []
    start = time.perf_counter()
    for i in range(n):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        memory_id = f"fresh-{int(rate)}-{args.seed}-{i:06d}"
        tasks.append(
            asyncio.create_task(one(client, key, memory_id, vectors[i].tolist(), args.patience))
        )
    results = await asyncio.gather(*tasks)
    wall = time.perf_counter() - start
    ms = sorted(r * 1000 for r in results if r is not None)
    missing = sum(r is None for r in results)
    p50 = statistics.median(ms) if ms else float("nan")
    p99 = ms[min(len(ms) - 1, int(0.99 * len(ms)))] if ms else float("nan")
    return f"| {rate:g} | {n} | {len(ms) / wall:.1f} | {p50:.0f} | {p99:.0f} | {missing} |"


async def acknowledged(client: httpx.AsyncClient, key: str, n: int, dim: int, seed: int) -> str:
    """``n`` writes one after another (one memory each, a given vector): p50/p99 milliseconds
    until each is acknowledged (produced with acks=all; sealed writes mint their key first).
    """
    rng = np.random.default_rng(seed)
    headers = {"Authorization": f"Bearer {key}"}
    ms = []
    for i in range(n):
        vector = rng.standard_normal(dim)
        vector /= np.linalg.norm(vector)
        body = {"memories": [{"memory_id": f"ack-{seed}-{i:06d}", "content": f"ack {i}",
                              "embedding": vector.tolist()}]}  # fmt: skip
        start = time.perf_counter()
        (await client.post("/v1/memories", json=body, headers=headers)).raise_for_status()
        ms.append((time.perf_counter() - start) * 1000)
    ms.sort()
    p99 = ms[min(n - 1, int(0.99 * n))]
    return (
        f"{n} sequential writes acknowledged: p50 {statistics.median(ms):.1f} ms, p99 {p99:.1f} ms"
    )


async def run(args: argparse.Namespace) -> None:
    keys = api_keys(args.tenants_file, [])
    require_keys(keys, [args.tenant], args.tenants_file)
    limits = httpx.Limits(max_connections=512, max_keepalive_connections=512)
    async with httpx.AsyncClient(base_url=args.base_url, timeout=60, limits=limits) as client:
        if args.acks:
            print(await acknowledged(client, keys[args.tenant], args.acks, args.dim, args.seed))
            return
        print("| writes/s asked | writes | searchable/s | p50 ms | p99 ms | not searchable |")
        print("|---|---|---|---|---|---|")
        for rate in args.rates:
            print(
                await at_rate(client, keys[args.tenant], rate, args.seconds, args.dim, args),
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--base-url", default="http://127.0.0.1:8080")
    parser.add_argument("--tenants-file", type=Path, default=DEFAULT_TENANTS)
    parser.add_argument("--tenant", default="demo")
    parser.add_argument("--rates", type=float, nargs="+", default=[20.0, 50.0, 100.0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--patience", type=float, default=30.0)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument(
        "--acks", type=int, default=0, help="instead: N sequential writes, time to acknowledge"
    )
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
