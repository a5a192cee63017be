"""The ranker's own errors for a dependency that cannot answer now (:class:`Unavailable`, HTTP 503
with Retry-After) or refuses for good (:class:`Refused`, HTTP 500).

Vendor errors (aiokafka's) are translated into them where the ranker calls the vendor
(:mod:`ranker.producer`); Milvus errors arrive as :class:`storage.StorageError` already.
"""

from __future__ import annotations

from storage.kafka import permanent


class Unavailable(Exception):  # noqa: N818 - the condition, as callers catch it
    """``dependency`` (``kafka``, ``milvus``) did not answer ``operation`` in time or refused it;
    the same request may succeed after ``retry_after_s``.
    """

    retriable = True

    def __init__(
        self, dependency: str, operation: str, reason: str, retry_after_s: float = 1.0
    ) -> None:
        self.dependency = dependency
        self.operation = operation
        self.reason = reason
        self.retry_after_s = retry_after_s
        super().__init__(f"{dependency} {operation}: {reason} (retriable)")


class Refused(Exception):  # noqa: N818 - the condition, as callers catch it
    """``dependency`` refused ``operation`` in a way a retry cannot mend (an ACL, a credential, a
    size limit: :func:`storage.kafka.permanent`): the deployment must change. Not retriable.
    """

    retriable = False

    def __init__(self, dependency: str, operation: str, reason: str) -> None:
        self.dependency = dependency
        self.operation = operation
        self.reason = reason
        super().__init__(f"{dependency} {operation}: {reason} (not retriable)")


def kafka_error(operation: str, exc: Exception) -> Unavailable | Refused:
    """A Kafka client error of ``operation`` as ours: :class:`Refused` where a retry cannot help
    (an ACL, a size limit: :func:`storage.kafka.permanent`), else :class:`Unavailable`.
    """
    reason = f"{type(exc).__name__}: {exc}"
    return (
        Refused("kafka", operation, reason)
        if permanent(exc)
        else Unavailable("kafka", operation, reason)
    )
