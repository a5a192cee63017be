"""Settings every process shares: the broker, the topics, Milvus, the embedder and the tenants.

Each process has one settings class (read once at start-up from ``MNEMO_*`` variables) that
extends this one with its own fields.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Literal, Self

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from storage.embedding import Embedder, Hashing, MiniLm
from storage.kafka import KafkaConnection, Mechanism, Protocol
from storage.key_log import ROLE as KEYS_ROLE
from storage.key_log import KeyLog
from storage.logs import LogFormat, LogLevel
from storage.milvus import MilvusConfig
from storage.records import Limits
from storage.tenant_log import ROLE as TENANTS_ROLE
from storage.tenant_log import TenantLog
from storage.tenants import TenantRegistry, Tenants


class SharedSettings(BaseSettings):
    """The part of the settings the worker and the ranker have in common. Units are in the names."""

    model_config = SettingsConfigDict(env_prefix="MNEMO_", extra="ignore", frozen=True)

    kafka_bootstrap: str = "127.0.0.1:9092"
    kafka_security_protocol: Protocol = Field(
        "PLAINTEXT", description="PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"
    )
    kafka_sasl_mechanism: Mechanism | None = Field(
        None, description="PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"
    )
    kafka_sasl_username: str | None = None
    kafka_sasl_password: SecretStr | None = None
    kafka_ssl_cafile: str | None = Field(None, description="CA bundle (PEM); unset: the system's")
    kafka_ssl_certfile: str | None = Field(None, description="client certificate for mutual TLS")
    kafka_ssl_keyfile: str | None = None
    app_id: str = Field(
        "mnemostream",
        description="the stream worker's Faust app id (its consumer group; the ranker waits on it"
        " for read-your-writes)",
    )
    topic_prefix: str = Field("", description="prefix of every topic name, e.g. 'staging.'")
    milvus_uri: str = "var/milvus.db"
    milvus_token: SecretStr = Field(
        SecretStr(""), description="a Milvus server's `user:password` or API token; empty: none"
    )
    milvus_collection: str = "memories"
    milvus_partition_key: bool = True
    milvus_full_text: bool = Field(
        True, description="BM25 index of content (Milvus Lite 3.x, server 2.5+); false for 2.3/2.4"
    )
    embedding_dim: int = Field(384, ge=1, le=32_768)
    embedder: Literal["minilm", "hash"] = Field("minilm", description="hash: fast tests only")
    tenants_file: Path | None = None
    tenants: str = Field("", description="comma-separated tenant ids, used when no tenants_file")
    # the tenants topic (storage.tenant_log) adds to and overrides these, without a restart
    max_content_bytes: int = Field(
        16_384, ge=1, le=65_535, description="content (and context) of a write, in UTF-8 bytes"
    )
    max_future_skew_s: float = Field(
        300.0,
        ge=0,
        le=366 * 86_400,
        description="an event dated more than this after it reached Kafka goes to dead-letter (the"
        " HTTP API answers 422: more than this after the server's clock)",
    )
    log_level: LogLevel = Field("info", description="any case (DEBUG or debug)")
    log_format: LogFormat = Field(
        "text",
        description="json: one object per line, with request_id and tenant_id (storage.logs);"
        " text: plain lines (python -m streams: Faust's own)",
    )
    gc_freeze_slow_ms: float = Field(
        50.0,
        ge=0,
        description="a full garbage collection slower than this (ms) freezes its survivors, so"
        " the next ones skip them (storage.heap; 0: every full collection freezes)",
    )

    @field_validator("log_level", mode="before")
    @classmethod
    def _any_case(cls, value: object) -> object:
        return value.lower() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _kafka_connection(self) -> Self:
        """The connection's own checks (SASL fields, TLS files under a protocol without TLS) at
        start-up, with the other settings: every process and command reports them as it reports
        a bad value (:func:`storage.usage.load_settings`), none after it started.
        """
        self.kafka()
        return self

    def kafka(self) -> KafkaConnection:
        """How to reach the brokers; ValueError naming the settings when SASL lacks a field."""
        password = self.kafka_sasl_password
        return KafkaConnection(
            self.kafka_bootstrap,
            self.kafka_security_protocol,
            self.kafka_sasl_mechanism,
            self.kafka_sasl_username,
            password.get_secret_value() if password is not None else None,
            self.kafka_ssl_cafile,
            self.kafka_ssl_certfile,
            self.kafka_ssl_keyfile,
        )

    def topic(self, name: str) -> str:
        """The full name of one of our topics."""
        return f"{self.topic_prefix}{name}"

    def registry(self) -> TenantRegistry:
        """The tenant registry from ``tenants_file``, else from ``tenants``."""
        if self.tenants_file is not None:
            return TenantRegistry.load(self.tenants_file)
        return TenantRegistry.open_to([t.strip() for t in self.tenants.split(",") if t.strip()])

    def tenant_log(
        self, registry: TenantRegistry | None = None, timeout_s: float = 10.0
    ) -> TenantLog:
        """The live registry: the ``tenants`` topic over ``registry`` (default: :meth:`registry`,
        which reads ``tenants_file``); not yet started.
        """
        base = registry if registry is not None else self.registry()
        return TenantLog(self.kafka(), self.topic(TENANTS_ROLE), base, timeout_s=timeout_s)

    def key_log(self, timeout_s: float = 10.0) -> KeyLog:
        """The data keys (the ``memory-keys`` topic, :mod:`storage.key_log`; not yet started)."""
        return KeyLog(self.kafka(), self.topic(KEYS_ROLE), timeout_s=timeout_s)

    def limits(self, registry: Tenants | None = None) -> Limits:
        """What a record must satisfy (the worker's decode and the HTTP edge check the same);
        ``registry``: the tenants (default: :meth:`registry`).
        """
        return Limits(
            self.embedding_dim,
            self.max_content_bytes,
            registry if registry is not None else self.registry(),
            timedelta(seconds=self.max_future_skew_s),
        )

    def milvus(self) -> MilvusConfig:
        return MilvusConfig(
            uri=self.milvus_uri,
            collection=self.milvus_collection,
            dim=self.embedding_dim,
            partition_key=self.milvus_partition_key,
            full_text=self.milvus_full_text,
            token=self.milvus_token.get_secret_value(),
        )

    def make_embedder(self) -> Embedder:
        """The configured embedder, not yet started; its dimension must be ``embedding_dim``."""
        embedder: Embedder = MiniLm() if self.embedder == "minilm" else Hashing(self.embedding_dim)
        if embedder.dim != self.embedding_dim:
            msg = (
                f"embedder {self.embedder} makes {embedder.dim} dimensions, "
                f"MNEMO_EMBEDDING_DIM is {self.embedding_dim}"
            )
            raise SystemExit(msg)
        return embedder
