"""What a read-your-writes token costs the ranker: sealing one and opening one (not a test).

    python -m bench.tokens [--tokens 20000]

One process, no keys topic (:class:`ranker.tokens.TokenSeal` with a key of its own: the topic is
read once, not per token). Seals a token naming two partitions of ``memory-writes`` and one of
``access-events`` ``--tokens`` times, then opens one as often; prints microseconds per seal and
per open, and the token's length in characters (what a response and a read's ``after`` carry).
"""

from __future__ import annotations

import argparse
import asyncio
import time

from ranker.applied import Token
from ranker.tokens import TokenSeal

TOKEN = Token({"memory-writes": {0: 123_456, 3: 99}, "access-events": {1: 5}})


async def measure(count: int) -> tuple[float, float, int]:
    """(µs per seal, µs per open, characters per token) over ``count`` of each."""
    seal = TokenSeal()
    text = await seal.seal(TOKEN, "acme")
    start = time.perf_counter()
    for _ in range(count):
        await seal.seal(TOKEN, "acme")
    sealed = time.perf_counter()
    for _ in range(count):
        await seal.open(text, "acme")
    opened = time.perf_counter()
    return (sealed - start) / count * 1e6, (opened - sealed) / count * 1e6, len(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=20_000)
    args = parser.parse_args()
    per_seal, per_open, chars = asyncio.run(measure(args.tokens))
    print(f"seal {per_seal:.1f} us, open {per_open:.1f} us, token {chars} characters")


if __name__ == "__main__":
    main()
