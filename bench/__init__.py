"""Benchmarks: run as modules (``python -m bench.streams``); figures in docs/benchmarks.md."""
