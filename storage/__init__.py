"""Storage adapters: the Milvus collection, upsert/search/get/delete, error translation (issue #3).

No business rules live here; imports only :mod:`memcore` of ours.
"""
