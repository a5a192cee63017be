"""The Python SDK: ``Client`` (sync) and ``AsyncClient`` for the Mnemostream HTTP API.

Both share one implementation of every call (request building and response parsing); only the
transport differs, as with httpx's own ``Client``/``AsyncClient``.
"""

from mnemostream.client import (
    AsyncClient,
    Client,
    Erasure,
    History,
    Memory,
    MnemostreamError,
    Overloaded,
    Recalled,
    Unreachable,
    UserErasure,
)

__all__ = [
    "AsyncClient",
    "Client",
    "Erasure",
    "History",
    "Memory",
    "MnemostreamError",
    "Overloaded",
    "Recalled",
    "Unreachable",
    "UserErasure",
]
