"""Storage adapters: the Milvus collection, upsert/search/get/delete, error translation.

No business rules live here; imports only :mod:`memcore` of ours.
"""

from storage.errors import StorageError
from storage.milvus import Filters, Hit, KeywordHit, MilvusConfig, MilvusStore, filter_expression
from storage.rows import Document, MemoryRow, from_us, to_us

__all__ = [
    "Document",
    "Filters",
    "Hit",
    "KeywordHit",
    "MemoryRow",
    "MilvusConfig",
    "MilvusStore",
    "StorageError",
    "filter_expression",
    "from_us",
    "to_us",
]
