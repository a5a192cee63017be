"""Storage errors: every vendor error leaves the adapter as one of these."""

from __future__ import annotations


class StorageError(Exception):
    """A storage operation failed.

    Attributes:
        operation: what was attempted (``upsert``, ``search``, ...).
        retriable: True when the same call may succeed later (server unavailable, timeout);
            False when it never will (bad data, schema mismatch): fix the input or the config.
    """

    def __init__(self, operation: str, message: str, *, retriable: bool) -> None:
        self.operation = operation
        self.retriable = retriable
        super().__init__(
            f"{operation}: {message} ({'retriable' if retriable else 'not retriable'})"
        )
