"""The composition root: the stream worker and the ranker in one process (``python -m server``).

Milvus Lite allows one process per data file, so the local stack runs both in one process sharing
one Milvus client and one embedder. With a Milvus server, ``python -m streams`` and
``python -m ranker`` run as separate processes instead.
"""
