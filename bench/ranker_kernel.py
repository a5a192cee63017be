"""Recall scoring kernel: requests × candidates scored per millisecond (not a test).

    python -m bench.ranker_kernel [--device cpu|cuda] [--requests 64] [--candidates 100]

Compares one torch pass over a padded batch (``ranker.kernel.rank_many``, which includes building
the tensors from Python objects and sorting each request's top k) with memcore's scalar
``rank`` called once per request, on the same random candidates. Run it on a GPU machine with
``--device cuda`` for the CUDA figure.
"""

from __future__ import annotations

import argparse
import random
import time
from datetime import timedelta

import torch

from memcore import Candidate, RankParams, rank
from ranker.kernel import Columns, RankRequest, columns, kernel, rank_many
from storage.rows import from_us

T0 = from_us(1_780_000_000_000_000)


def requests(n: int, width: int, rng: random.Random) -> list[RankRequest]:
    return [
        RankRequest(
            [
                Candidate(
                    f"m{r}-{i}",
                    rng.random(),
                    rng.random(),
                    T0 - timedelta(hours=rng.uniform(0, 500)),
                    T0 - timedelta(days=30),
                    240.0,
                )
                for i in range(width)
            ],
            T0,
            RankParams(k=10),
        )
        for r in range(n)
    ]


def best_of(repeats: int, fn: object) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()  # type: ignore[operator]
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--requests", type=int, nargs="+", default=[1, 16, 64, 256])
    parser.add_argument("--candidates", type=int, default=100)
    args = parser.parse_args()
    device = torch.device(args.device)
    rng = random.Random(1)
    print(f"device {device}; {args.candidates} candidates per request; best of 5")
    print(
        f"{'requests':>8} {'kernel ms':>10} {'kernel req×cand/ms':>19} "
        f"{'batch incl. tensors+top-k ms':>29} {'scalar memcore ms':>18}"
    )
    for n in args.requests:
        batch = requests(n, args.candidates, rng)
        rank_many(batch[:1], device)  # warm-up
        built = columns(batch, device)

        def run_kernel(c: Columns = built) -> None:
            final = kernel(c)[-1]
            torch.topk(final, k=min(10, final.shape[1]), dim=1)
            if device.type == "cuda":
                torch.cuda.synchronize()

        kernel_s = best_of(20, run_kernel)
        whole_s = best_of(5, lambda b=batch: rank_many(b, device))
        scalar_s = best_of(5, lambda b=batch: [rank(r.candidates, r.at, r.params) for r in b])
        rate = n * args.candidates / (kernel_s * 1000)
        print(
            f"{n:>8} {kernel_s * 1000:>10.3f} {rate:>19,.0f} {whole_s * 1000:>29.2f} "
            f"{scalar_s * 1000:>18.2f}"
        )


if __name__ == "__main__":
    main()
