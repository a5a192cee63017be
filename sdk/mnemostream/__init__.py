"""The Python SDK: ``Client`` (sync) and ``AsyncClient`` for the Mnemostream HTTP API.

Both share one implementation of every call (request building and response parsing); only the
transport differs, as with httpx's own ``Client``/``AsyncClient``.
"""

from mnemostream.client import (
    AsyncClient,
    Client,
    History,
    Memory,
    MnemostreamError,
    Overloaded,
    Unreachable,
)

__all__ = [
    "AsyncClient",
    "Client",
    "History",
    "Memory",
    "MnemostreamError",
    "Overloaded",
    "Unreachable",
]
