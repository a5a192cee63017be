"""Settings every process shares: the broker, the topics, Milvus, the embedder and the tenants.

Each process has one settings class (read once at start-up from ``MNEMO_*`` variables) that
extends this one with its own fields.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from storage.embedding import Embedder, Hashing, MiniLm
from storage.milvus import MilvusConfig
from storage.tenants import TenantRegistry


class SharedSettings(BaseSettings):
    """The part of the settings the worker and the ranker have in common. Units are in the names."""

    model_config = SettingsConfigDict(env_prefix="MNEMO_", extra="ignore", frozen=True)

    kafka_bootstrap: str = "127.0.0.1:9092"
    app_id: str = Field(
        "mnemostream",
        description="the stream worker's Faust app id (its consumer group; the ranker waits on it"
        " for read-your-writes)",
    )
    topic_prefix: str = Field("", description="prefix of every topic name, e.g. 'staging.'")
    milvus_uri: str = "var/milvus.db"
    milvus_collection: str = "memories"
    milvus_partition_key: bool = True
    milvus_full_text: bool = Field(
        True, description="BM25 index of content (Milvus Lite 3.x, server 2.5+); false for 2.3/2.4"
    )
    embedding_dim: int = Field(384, ge=1, le=32_768)
    embedder: Literal["minilm", "hash"] = Field("minilm", description="hash: fast tests only")
    tenants_file: Path | None = None
    tenants: str = Field("", description="comma-separated tenant ids, used when no tenants_file")

    def topic(self, name: str) -> str:
        """The full name of one of our topics."""
        return f"{self.topic_prefix}{name}"

    def registry(self) -> TenantRegistry:
        """The tenant registry from ``tenants_file``, else from ``tenants``."""
        if self.tenants_file is not None:
            return TenantRegistry.load(self.tenants_file)
        return TenantRegistry.open_to([t.strip() for t in self.tenants.split(",") if t.strip()])

    def milvus(self) -> MilvusConfig:
        return MilvusConfig(
            uri=self.milvus_uri,
            collection=self.milvus_collection,
            dim=self.embedding_dim,
            partition_key=self.milvus_partition_key,
            full_text=self.milvus_full_text,
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
