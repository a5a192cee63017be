"""The ranker's settings: read once at start-up from ``MNEMO_*`` environment variables."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from storage import MilvusConfig
from storage.tenants import TenantRegistry


class RankerSettings(BaseSettings):
    """Everything the recall service needs. Units are in the names."""

    model_config = SettingsConfigDict(env_prefix="MNEMO_", extra="ignore", frozen=True)

    host: str = "127.0.0.1"
    port: int = Field(8080, ge=1, le=65535)
    kafka_bootstrap: str = "127.0.0.1:9092"
    topic_prefix: str = ""
    milvus_uri: str = "var/milvus.db"
    milvus_collection: str = "memories"
    milvus_partition_key: bool = True
    embedding_dim: int = Field(384, ge=1)
    embedder: Literal["minilm", "hash"] = "minilm"
    tenants_file: Path | None = None
    tenants: str = ""
    candidates: int = Field(100, ge=1, le=16_384, description="Milvus hits scored per request")
    batch_max: int = Field(64, ge=1, description="requests scored in one torch pass, at most")
    batch_wait_s: float = Field(0.002, ge=0, description="how long a batch waits to fill")
    queue_max: int = Field(1024, ge=1, description="waiting requests before HTTP 429")

    def topic(self, name: str) -> str:
        return f"{self.topic_prefix}{name}"

    def registry(self) -> TenantRegistry:
        if self.tenants_file is not None:
            return TenantRegistry.load(self.tenants_file)
        return TenantRegistry.open_to([t.strip() for t in self.tenants.split(",") if t.strip()])

    def milvus(self) -> MilvusConfig:
        return MilvusConfig(
            uri=self.milvus_uri,
            collection=self.milvus_collection,
            dim=self.embedding_dim,
            partition_key=self.milvus_partition_key,
        )
