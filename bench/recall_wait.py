"""Back-to-back recalls of one client through the HTTP API of a running service (``make up``),
with and without waiting for the previous recall's accesses (its token as ``after``).

    make up
    .venv/bin/python -m bench.recall_wait [--recalls 300] [--rounds 2] [--tenant demo]

Each round runs ``--recalls`` tracked recalls (k 10, a random unit vector of ``--dim``
dimensions: the service's, 384 by default) one after another, first each on its own, then each
sending the token the previous one answered with: what a client that waited for its own
recalls' accesses would pay (the access agent's batch window, ``MNEMO_ACCESS_BATCH_WAIT_S``, on
an idle worker). Prints p50/p99 per round and mode. The tenant needs memories (any:
``bench.recall_http`` writes some).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import httpx
import numpy as np

from bench.quality import DEFAULT_TENANTS, api_keys, require_keys
from bench.recall import unit
from bench.stats import p50_p99


def run(http: httpx.Client, dim: int, n: int, wait: bool, rng: np.random.Generator) -> list[float]:
    """Milliseconds per recall; ``wait``: each sends the previous one's token as ``after``."""
    out: list[float] = []
    token: str | None = None
    for vector in unit(rng.standard_normal((n, dim))):
        body = {"vector": vector.tolist(), "k": 10}
        if wait and token is not None:
            body["after"] = token
        start = time.perf_counter()
        reply = http.post("/v1/recall", json=body)
        out.append((time.perf_counter() - start) * 1000)
        reply.raise_for_status()
        token = reply.json()["token"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", default="http://127.0.0.1:8080")
    parser.add_argument("--tenants-file", type=Path, default=DEFAULT_TENANTS)
    parser.add_argument("--tenant", default="demo")
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--recalls", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    keys = api_keys(args.tenants_file, [])
    require_keys(keys, [args.tenant], args.tenants_file)
    rng = np.random.default_rng(7)
    headers = {"Authorization": f"Bearer {keys[args.tenant]}"}
    with httpx.Client(base_url=args.base_url, headers=headers, timeout=30) as http:
        for round_ in range(args.rounds):
            for wait in (False, True):
                p50, p99 = p50_p99(run(http, args.dim, args.recalls, wait, rng))
                mode = "after the last recall's token" if wait else "on its own"
                print(f"round {round_ + 1}, each recall {mode}: p50 {p50:.1f} ms, p99 {p99:.1f} ms")


if __name__ == "__main__":
    main()
