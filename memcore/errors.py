"""The one error type the pure core raises for bad input."""

from __future__ import annotations


class InvalidField(ValueError):  # noqa: N818 - reads as "raise InvalidField(...)"
    """A value that the memory model cannot accept.

    Attributes:
        field: dotted name of the offending field, as the caller spelled it (``policy.weights.similarity``).
        value: the rejected value, unchanged.
        reason: what the field requires, in words.
    """

    def __init__(self, field: str, value: object, reason: str) -> None:
        self.field = field
        self.value = value
        self.reason = reason
        super().__init__(f"{field}={value!r}: {reason}")
