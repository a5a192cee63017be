"""The worker's settings: read once at start-up from ``MNEMO_*`` environment variables."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from storage import MilvusConfig
from storage.tenants import TenantRegistry


class WorkerSettings(BaseSettings):
    """Everything the stream worker needs to know. Units are in the names."""

    model_config = SettingsConfigDict(env_prefix="MNEMO_", extra="ignore", frozen=True)

    kafka_bootstrap: str = "127.0.0.1:9092"
    app_id: str = "mnemostream"
    topic_prefix: str = Field("", description="prefix of every topic name, e.g. 'staging.'")
    partitions: int = Field(4, ge=1, le=1024)
    log_retention_ms: int = Field(
        -1, description="writes, access and audit topics; -1 keeps forever"
    )
    store: Literal["rocksdb", "memory"] = "rocksdb"
    data_dir: Path = Path("var/worker")
    milvus_uri: str = "var/milvus.db"
    milvus_collection: str = "memories"
    milvus_partition_key: bool = True
    embedding_dim: int = Field(384, ge=1, le=32_768)
    embedder: Literal["minilm", "hash"] = Field("minilm", description="hash: fast tests only")
    max_content_bytes: int = Field(16_384, ge=1, le=65_535)
    tenants_file: Path | None = None
    tenants: str = Field("", description="comma-separated tenant ids, used when no tenants_file")
    llm_url: str | None = Field(None, description="OpenAI-compatible base URL; unset: rule engine")
    llm_model: str = "gpt-4o-mini"
    llm_api_key: str = ""
    llm_timeout_s: float = Field(2.0, gt=0)
    write_batch_size: int = Field(64, ge=1)
    write_batch_wait_s: float = Field(0.1, gt=0)
    access_batch_size: int = Field(1000, ge=1)
    access_batch_wait_s: float = Field(0.1, gt=0)
    consolidation_interval_s: float = Field(
        3600.0, gt=0, description="how often every tenant is consolidated (a request per interval)"
    )
    session_timeout_s: float = Field(30.0, gt=0)
    commit_interval_s: float = Field(1.0, gt=0)
    log_level: str = "info"

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
        )
