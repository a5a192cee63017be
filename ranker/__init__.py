"""The recall service: HTTP API, micro-batcher, torch scoring and FAISS (issue #4).

Its vectorised scoring is tested equal to :func:`memcore.rank`, the scalar reference.
"""
