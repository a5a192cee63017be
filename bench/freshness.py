"""Write -> searchable through the HTTP API of a running service (``make up``): issue 12's
freshness figure.

    make up
    .venv/bin/python -m bench.freshness [--rates 20 50 100] [--seconds 20] [--per-request 1] [--tenant demo]

At each rate (memories a second), writes ``--per-request`` memories per request (``POST
/v1/memories``, given random unit vectors of the service's dimension, so no embedding) for
``--seconds``; right after each write is acknowledged, a recall of the request's last vector (k 1,
``track`` false) with the write's read-your-writes token as ``after``. The figure of a request is
the time from sending it until that recall returns its memory; a recall that answers without it,
or not within ``--patience`` seconds, counts as not searchable. Prints p50/p99 per rate, the
memories made searchable per second and how many requests were not. Client and service share the
machine's cores; the client is a lean keep-alive one (httpx alone took a core at 50 writes/s).
``--acks N`` instead times N sequential writes until each is acknowledged (what sealing adds
to a write: minting its key). ``--sequential N`` instead writes N memories one after another on
an otherwise idle service and times, from each acknowledgement, a recall with ``after`` (half of
them) against polling without a token until the memory comes back (the other half): what the
read-your-writes wait adds to the time a write takes to become searchable.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import numpy as np
import orjson

from bench.quality import DEFAULT_TENANTS, api_keys, require_keys
from bench.recall import unit
from bench.recall_http import Connection
from bench.stats import p50_p99


class Pool:
    """Keep-alive connections of the lean client (:class:`bench.recall_http.Connection`; httpx
    took a whole core of the two at 50 writes/s), one per operation in flight.
    """

    def __init__(self, base_url: str, key: str, *, keep_alive: bool = True) -> None:
        """``keep_alive`` off: each request on a new connection (with several HTTP processes on
        one port, ``make up STACK_EDGES=N``, the kernel picks a process per connection).
        """
        url = urlsplit(base_url)
        self.keep_alive = keep_alive
        self.host, self.port = url.hostname or "127.0.0.1", url.port or 80
        self.headers = f"Authorization: Bearer {key}\r\nContent-Type: application/json\r\n".encode()
        self.idle: list[Connection] = []

    async def post(self, path: str, body: object) -> tuple[int, Any]:
        """POST ``body`` as JSON; a kept-alive connection the server has closed meanwhile (its
        keep-alive timeout) is replaced once: the request never reached the server.
        """
        data = orjson.dumps(body)
        while True:
            reused = bool(self.idle)
            connection = self.idle.pop() if reused else Connection(self.host, self.port)
            try:
                status, answer = await connection.post(path, data, self.headers)
            except asyncio.IncompleteReadError as exc:
                connection.close()
                if reused and not exc.partial:
                    continue
                raise
            except OSError:
                connection.close()
                raise
            if self.keep_alive:
                self.idle.append(connection)
            else:
                connection.close()
            return status, orjson.loads(answer) if answer else None

    def close(self) -> None:
        for connection in self.idle:
            connection.close()


async def one(
    pool: Pool, memory_ids: list[str], vectors: np.ndarray, patience_s: float
) -> float | None:
    """Seconds from the write of ``memory_ids`` (one request) until a recall of the last one's
    vector returns it; None when it did not.
    """
    start = time.perf_counter()
    body = {"memories": [{"memory_id": m, "content": f"fresh {m}", "embedding": v.tolist()}
                         for m, v in zip(memory_ids, vectors, strict=True)]}  # fmt: skip
    try:
        status, written = await pool.post("/v1/memories", body)
        if status != 200:
            return None
        query = {"vector": vectors[-1].tolist(), "k": 1, "track": False, "after": written["token"]}
        status, found = await asyncio.wait_for(pool.post("/v1/recall", query), patience_s)
    except (OSError, asyncio.IncompleteReadError, TimeoutError):
        return None
    if status != 200:
        return None
    ids = [r["memory_id"] for r in found["results"]]
    return time.perf_counter() - start if memory_ids[-1] in ids else None


async def at_rate(pool: Pool, rate: float, args: argparse.Namespace) -> str:
    """``rate`` memories a second for ``args.seconds``, ``args.per_request`` to a request."""
    rng = np.random.default_rng([int(rate), args.seed])  # a rerun must not repeat a vector
    per = args.per_request
    requests = max(1, int(rate * args.seconds / per))
    vectors = unit(rng.standard_normal((requests * per, args.dim)))
    tasks: list[asyncio.Task[float | None]] = []
    start = time.perf_counter()
    for i in range(requests):
        delay = start + i * per / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        ids = [f"fresh-{int(rate)}-{args.seed}-{i:06d}-{j}" for j in range(per)]
        chunk = vectors[i * per : (i + 1) * per]
        tasks.append(asyncio.create_task(one(pool, ids, chunk, args.patience)))
    results = await asyncio.gather(*tasks)
    wall = time.perf_counter() - start
    ms = [r * 1000 for r in results if r is not None]
    missing = sum(r is None for r in results)
    p50, p99 = p50_p99(ms)
    return (
        f"| {rate:g} | {per} | {requests * per} | {len(ms) * per / wall:.1f} | {p50:.0f} "
        f"| {p99:.0f} | {missing} of {requests} |"
    )


async def acknowledged(client: httpx.AsyncClient, key: str, n: int, dim: int, seed: int) -> str:
    """``n`` writes one after another (one memory each, a given vector): p50/p99 milliseconds
    until each is acknowledged (produced with acks=all; sealed writes mint their key first).
    """
    vectors = unit(np.random.default_rng(seed).standard_normal((n, dim)))
    headers = {"Authorization": f"Bearer {key}"}
    ms = []
    for i, vector in enumerate(vectors):
        body = {"memories": [{"memory_id": f"ack-{seed}-{i:06d}", "content": f"ack {i}",
                              "embedding": vector.tolist()}]}  # fmt: skip
        start = time.perf_counter()
        (await client.post("/v1/memories", json=body, headers=headers)).raise_for_status()
        ms.append((time.perf_counter() - start) * 1000)
    p50, p99 = p50_p99(ms)
    return f"{n} sequential writes acknowledged: p50 {p50:.1f} ms, p99 {p99:.1f} ms"


async def sequential(pool: Pool, n: int, dim: int, seed: int, patience_s: float) -> str:
    """``n`` writes one after another (one memory each, a given vector, 0.1 s apart): after each
    is acknowledged, every other one is recalled with its token as ``after`` (the read-your-writes
    wait), the rest by recalling without a token every 5 ms until the memory comes back (when it
    became searchable). p50/p99 milliseconds from the acknowledgement.
    """
    vectors = unit(np.random.default_rng(seed).standard_normal((n, dim)))
    waited: list[float] = []
    polled: list[float] = []
    for i, vector in enumerate(vectors):
        memory_id = f"seq-{seed}-{i:06d}"
        body = {"memories": [{"memory_id": memory_id, "content": f"seq {i}",
                              "embedding": vector.tolist()}]}  # fmt: skip
        status, written = await pool.post("/v1/memories", body)
        if status != 200:
            raise SystemExit(f"write answered {status}: {written}")
        acked = time.perf_counter()
        query: dict[str, Any] = {"vector": vector.tolist(), "k": 1, "track": False}
        if i % 2 == 0:
            status, found = await pool.post("/v1/recall", {**query, "after": written["token"]})
            if status != 200 or [r["memory_id"] for r in found["results"]] != [memory_id]:
                raise SystemExit(f"a recall after its write's token missed it: {status} {found}")
            waited.append((time.perf_counter() - acked) * 1000)
        else:
            while True:
                status, found = await pool.post("/v1/recall", query)
                if status == 200 and [r["memory_id"] for r in found["results"]] == [memory_id]:
                    break
                if time.perf_counter() - acked > patience_s:
                    raise SystemExit(f"{memory_id} not searchable after {patience_s:g} s")
                await asyncio.sleep(0.005)
            polled.append((time.perf_counter() - acked) * 1000)
        await asyncio.sleep(0.1)
    return f"{n} sequential writes: recall with after {_p50_p99(waited)}; searchable {_p50_p99(polled)}"


def _p50_p99(ms: list[float]) -> str:
    p50, p99 = p50_p99(ms)
    return f"p50 {p50:.0f} ms, p99 {p99:.0f} ms"


async def run(args: argparse.Namespace) -> None:
    keys = api_keys(args.tenants_file, [])
    require_keys(keys, [args.tenant], args.tenants_file)
    if args.acks:
        limits = httpx.Limits(max_connections=8)
        async with httpx.AsyncClient(base_url=args.base_url, timeout=60, limits=limits) as client:
            print(await acknowledged(client, keys[args.tenant], args.acks, args.dim, args.seed))
        return
    pool = Pool(args.base_url, keys[args.tenant], keep_alive=not args.new_connections)
    if args.sequential:
        try:
            print(await sequential(pool, args.sequential, args.dim, args.seed, args.patience))
        finally:
            pool.close()
        return
    print("| memories/s asked | per request | memories | searchable/s | p50 ms | p99 ms | "
          "requests not searchable |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    try:
        for rate in args.rates:
            print(await at_rate(pool, rate, args), flush=True)
    finally:
        pool.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--base-url", default="http://127.0.0.1:8080")
    parser.add_argument("--tenants-file", type=Path, default=DEFAULT_TENANTS)
    parser.add_argument("--tenant", default="demo")
    parser.add_argument("--rates", type=float, nargs="+", default=[20.0, 50.0, 100.0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--patience", type=float, default=30.0)
    parser.add_argument("--per-request", type=int, default=1, help="memories per write request")
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument(
        "--acks", type=int, default=0, help="instead: N sequential writes, time to acknowledge"
    )
    parser.add_argument(
        "--sequential",
        type=int,
        default=0,
        help="instead: N sequential writes, time until a recall with after / a polling recall finds each",
    )
    parser.add_argument(
        "--new-connections",
        action="store_true",
        help="each request on a connection of its own (with STACK_EDGES, any process answers)",
    )
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
