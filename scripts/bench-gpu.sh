#!/usr/bin/env bash
# The GPU benchmarks (`make bench-gpu`; figures in docs/benchmarks.md): on CUDA, the scoring kernel,
# the hot cache's vector search (numpy against the GPU copy, at 100k and 1M memories), and the
# in-process recall path with its hot cache (searches and scoring) at 100k and 1M memories, with
# the hot cache on the CPU for comparison. Needs a machine where torch sees a GPU; CI has none.
#
#   scripts/bench-gpu.sh [PYTHON]     PYTHON: the interpreter (default .venv/bin/python)
set -euo pipefail
cd "$(dirname "$0")/.."
py=${1:-.venv/bin/python}
"$py" -c 'import torch, sys
if not torch.cuda.is_available():
    sys.exit("bench-gpu: torch sees no CUDA device")
print("torch", torch.__version__, "on", torch.cuda.get_device_name(0))'
"$py" -m bench.hot_search --device cuda
"$py" -m bench.recall --hot-only --no-milvus --hot-device cuda
"$py" -m bench.recall --hot-only --no-milvus --hot-device cpu
"$py" -m bench.hot_search --device cuda --memories 160000 --tenants 10
"$py" -m bench.ranker_kernel --device cuda
"$py" -m bench.hot_search --device cuda --memories 1000000 --tenants 1000
"$py" -m bench.recall --hot-only --no-milvus --hot-device cuda --memories 1000000 --tenants 1000
"$py" -m bench.ranker_kernel --device cuda --mmr 0.7
