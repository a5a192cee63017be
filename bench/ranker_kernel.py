"""Recall scoring kernel: requests × candidates scored per millisecond (not a test).

    python -m bench.ranker_kernel [--device cpu|cuda] [--requests 1 16 64 256] [--candidates 100]
                                  [--dim 384] [--mmr 0.7]

On the same random requests (query and candidate vectors of ``--dim``): the torch kernel alone on
prepared tensors; a whole batch through ``ranker.kernel.rank_many`` (padding the columns, the
exact query and, with ``--mmr``, pairwise cosines by FAISS on the CPU or matmuls on CUDA, the
kernel, each request's top k); and memcore's scalar ``rank`` called once per request (given the
similarities, so it computes no cosines unless MMR asks for them). The GPU machine runs the
same script with ``--device cuda``.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable
from datetime import timedelta

import torch

from memcore import Candidate, RankParams, rank
from memcore.policy import RecallPolicy
from ranker.kernel import Columns, RankRequest, kernel, rank_many, set_threads
from storage.rows import from_us

T0 = from_us(1_780_000_000_000_000)


Case = tuple[list[Candidate], RankParams, list[float]]


def case(width: int, dim: int, mmr: float | None, rng: random.Random) -> Case:
    query = [rng.gauss(0, 1) for _ in range(dim)]
    candidates = [
        Candidate(
            f"m{i}",
            rng.random(),
            rng.random(),
            T0 - timedelta(hours=rng.uniform(0, 500)),
            T0 - timedelta(days=30),
            240.0,
            vector=tuple(rng.gauss(0, 1) for _ in range(dim)),
        )
        for i in range(width)
    ]
    return candidates, RankParams(k=10, policy=RecallPolicy(mmr_lambda=mmr)), query


def best_of(repeats: int, fn: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--requests", type=int, nargs="+", default=[1, 16, 64, 256])
    parser.add_argument("--candidates", type=int, default=100)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--mmr", type=float, default=None, help="MMR lambda (default: no MMR)")
    parser.add_argument("--threads", type=int, default=1, help="torch and FAISS CPU threads")
    parser.add_argument("--repeats", type=int, default=5, help="whole batches timed (best of)")
    args = parser.parse_args()
    device = torch.device(args.device)
    set_threads(args.threads)
    rng = random.Random(1)
    print(
        f"device {device}; {args.candidates} candidates per request, dim {args.dim}, "
        f"MMR {args.mmr}; best of 20 (kernel), {args.repeats} (whole batch), 5 (scalar)"
    )
    print(
        f"{'requests':>8} {'kernel ms':>10} {'kernel req×cand/ms':>19} "
        f"{'whole batch ms':>15} {'scalar memcore ms':>18}"
    )
    for n in args.requests:
        cases = [case(args.candidates, args.dim, args.mmr, rng) for _ in range(n)]
        batch = [RankRequest.of(c, T0, p, query=q) for c, p, q in cases]
        rank_many(batch[:1], device)  # warm-up
        built = Columns.build(batch, device)

        def run_kernel(c: Columns = built) -> None:
            final = kernel(c)[-1]
            torch.topk(final, k=min(10, final.shape[1]), dim=1)
            if device.type == "cuda":
                torch.cuda.synchronize()

        kernel_s = best_of(20, run_kernel)

        def run_whole(b: list[RankRequest] = batch) -> None:
            rank_many(b, device)

        whole_s = best_of(args.repeats, run_whole)

        def run_scalar(cs: list[Case] = cases) -> None:
            for candidates, params, _ in cs:
                rank(candidates, T0, params)

        scalar_s = best_of(5, run_scalar)
        rate = n * args.candidates / (kernel_s * 1000)
        print(
            f"{n:>8} {kernel_s * 1000:>10.3f} {rate:>19,.0f} {whole_s * 1000:>15.2f} "
            f"{scalar_s * 1000:>18.2f}"
        )


if __name__ == "__main__":
    main()
