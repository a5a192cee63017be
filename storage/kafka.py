"""How every Kafka client of ours reaches the brokers: address, TLS and SASL, in one value.

The worker (Faust), the ranker's producer and consumers, the CLI and the topic admin all take a
:class:`KafkaConnection` (or a plain ``host:port`` string for a PLAINTEXT broker) and build their
clients from :meth:`KafkaConnection.client`, so a secured cluster is configured once.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from typing import Any, Literal

from memcore import InvalidField

Protocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
Mechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]

PRODUCER_BATCH_BYTES = 512 * 1024
"""The most bytes one producer batch of one partition holds (the service's producers: the
ranker's, the worker's, the compacted logs'; Kafka's default is 16 KiB). A write record with a
384-float vector is ~9 KB, so the default held one or two, and a producer keeps one batch per
partition in flight: 9 KB records went at ~1,700 a second against ~14,000 with 512 KiB
(aiokafka, acks=all, one local broker, 4 partitions). Must stay under the brokers'
``message.max.bytes`` and the topics' ``max.message.bytes`` (default 1 MiB): aiokafka does not
split a batch the broker refuses as too large."""


PERMANENT_ERRORS = frozenset(
    {
        "AuthenticationFailedError",
        "ClusterAuthorizationFailedError",
        "GroupAuthorizationFailedError",
        "TopicAuthorizationFailedError",
        "TransactionalIdAuthorizationFailed",
        "SaslAuthenticationFailed",
        "UnsupportedSaslMechanismError",
        "MessageSizeTooLargeError",
        "RecordTooLargeError",
        "RecordListTooLargeError",
        "InvalidTopicError",
        "PolicyViolationError",
        "UnsupportedCodecError",
        "UnsupportedVersionError",
        "KafkaConfigurationError",
    }
)
"""aiokafka errors (by class name) that the same request meets again until the deployment
changes: an ACL, a credential, a size limit, a codec or version the broker lacks."""


def permanent(exc: BaseException) -> bool:
    """Whether a Kafka client error is one of :data:`PERMANENT_ERRORS` (a retry cannot help),
    whatever aiokafka's own ``retriable`` says: it marks a timeout, a broker away and a producer
    closing not retriable, and those pass.
    """
    return any(cls.__name__ in PERMANENT_ERRORS for cls in type(exc).__mro__)


@dataclass(frozen=True)
class KafkaConnection:
    """The brokers and how to authenticate to them.

    Attributes:
        bootstrap: ``host:port[,host:port...]``.
        security_protocol: PLAINTEXT, SSL (TLS), SASL_PLAINTEXT or SASL_SSL (SASL over TLS).
        sasl_mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (SASL protocols only).
        sasl_username, sasl_password: the SASL credentials (the password is never printed).
        ssl_cafile: CA bundle (PEM) to verify the brokers; None: the system's.
        ssl_certfile, ssl_keyfile: a client certificate and key (PEM) for mutual TLS.
    """

    bootstrap: str
    security_protocol: Protocol = "PLAINTEXT"
    sasl_mechanism: Mechanism | None = None
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None

    def __post_init__(self) -> None:
        if self.sasl and not (self.sasl_mechanism and self.sasl_username and self.sasl_password):
            why = "needs kafka_sasl_mechanism, kafka_sasl_username and kafka_sasl_password"
            raise InvalidField("kafka_security_protocol", self.security_protocol, why)
        given_tls = [n for n in ("cafile", "certfile", "keyfile") if getattr(self, f"ssl_{n}")]
        if given_tls and not self.tls:  # the files would be dropped: no TLS, a password in clear
            why = f"kafka_ssl_{given_tls[0]} is given: TLS needs SSL or SASL_SSL"
            raise InvalidField("kafka_security_protocol", self.security_protocol, why)
        if (self.sasl_username or self.sasl_password) and not self.sasl:
            why = "kafka_sasl_username or kafka_sasl_password is given: SASL needs SASL_SSL or SASL_PLAINTEXT"
            raise InvalidField("kafka_security_protocol", self.security_protocol, why)
        if bool(self.ssl_certfile) != bool(self.ssl_keyfile):
            why = "kafka_ssl_certfile and kafka_ssl_keyfile go together (mutual TLS)"
            raise InvalidField("kafka_ssl_certfile", self.ssl_certfile, why)

    @classmethod
    def of(cls, given: KafkaConnection | str) -> KafkaConnection:
        """``given`` itself, or a PLAINTEXT connection to the bootstrap address it is."""
        return given if isinstance(given, KafkaConnection) else cls(given)

    @property
    def sasl(self) -> bool:
        return self.security_protocol.startswith("SASL_")

    @property
    def tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context (verifying the brokers' certificates), or None without TLS. Reads the
        files named; an unreadable one raises OSError at start-up.
        """
        if not self.tls:
            return None
        context = ssl.create_default_context(cafile=self.ssl_cafile)
        if self.ssl_certfile and self.ssl_keyfile:
            context.load_cert_chain(self.ssl_certfile, self.ssl_keyfile)
        return context

    def client(self) -> dict[str, Any]:
        """Keyword arguments for any aiokafka client (producer, consumer, admin)."""
        kwargs: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap,
            "security_protocol": self.security_protocol,
        }
        if self.tls:
            kwargs["ssl_context"] = self.ssl_context()
        if self.sasl:
            kwargs |= {
                "sasl_mechanism": self.sasl_mechanism,
                "sasl_plain_username": self.sasl_username,
                "sasl_plain_password": self.sasl_password,
            }
        return kwargs
