"""The worker's settings: read once at start-up from ``MNEMO_*`` environment variables."""

from __future__ import annotations

from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from storage.settings import SharedSettings

LIVE_APP_IDS = frozenset({"mnemostream"})
"""The live worker's app id as shipped (the default; k8s's config): a replay must not use it."""
LIVE_COLLECTIONS = frozenset({"memories"})
"""The live worker's Milvus collection as shipped (the default; k8s's config)."""
LIVE_DATA_DIRS = frozenset({"var/worker", "/data/worker"})
"""The live worker's data directory as shipped (the default; the Dockerfile's)."""
LIVE_LITE_FILES = frozenset({"var/milvus.db", "/data/milvus.db"})
"""The live worker's Milvus Lite file as shipped (the default, ``make up``'s; the Dockerfile's
note): one process per Lite file."""


class WorkerSettings(SharedSettings):
    """Everything the stream worker needs to know. Units are in the names."""

    partitions: int = Field(4, ge=1, le=1024)
    kafka_replication: int = Field(
        1, ge=1, le=16, description="replicas of every topic we create, Faust's changelogs included"
    )
    kafka_min_insync: int = Field(
        1, ge=1, le=16, description="min.insync.replicas of those topics (writes use acks=all)"
    )
    log_retention_ms: int = Field(
        -1, ge=-1, description="writes, access and audit topics; -1 keeps forever"
    )
    topic_compression: Literal["zstd", "lz4", "gzip", "snappy", "producer", "uncompressed"] = Field(
        "zstd", description="compression.type of the topics we create (zstd: ~2-4x on JSON)"
    )
    dead_letter_retention_ms: int = Field(
        30 * 86_400_000, ge=-1, description="dead-letter topic: how long rejected records stay"
    )
    keys_compaction_lag_ms: int = Field(
        3_600_000,
        ge=100,
        description="memory-keys topic (segment.ms, max.compaction.lag.ms): an erased memory's key"
        " leaves the broker's disk about this long after the erasure (storage.key_log)",
    )
    milvus_compact_interval_s: float = Field(
        600.0,
        ge=0,
        description="after deleting rows (purges, erasures) ask Milvus to compact at most this"
        " often, so deleted words leave a Milvus server's segments; 0: never",
    )
    milvus_endpoint_file: Path | None = Field(
        None,
        description="write here, at start-up, the address other processes reach this worker's"
        " Milvus at (for a Milvus Lite file: the gRPC server it runs on 127.0.0.1, no"
        " authentication); unset: not written",
    )
    resync: Literal["check", "always"] = Field(
        "check",
        description="at start-up, rewrite every Milvus row from the changelogs only when Milvus"
        " holds another number of rows than they have memories (check), or every time (always)",
    )
    store: Literal["rocksdb", "memory"] = "rocksdb"
    data_dir: Path = Path("var/worker")
    llm_url: str | None = Field(None, description="OpenAI-compatible base URL; unset: rule engine")
    llm_model: str = "gpt-4o-mini"
    llm_api_key: str = ""
    llm_timeout_s: float = Field(2.0, gt=0)
    write_batch_size: int = Field(64, ge=1)
    write_batch_wait_s: float = Field(
        0.03,
        gt=0,
        description="how long the writes agent waits for a batch to fill (seconds): a write's"
        " floor of latency on an idle worker; under load batches fill while the last one applies."
        " Lower means more, smaller batches at moderate rates (each one Milvus upsert and commit)",
    )
    access_batch_size: int = Field(1000, ge=1)
    access_batch_wait_s: float = Field(0.1, gt=0)
    consolidation_interval_s: float = Field(
        3600.0, gt=0, description="how often every tenant is consolidated (a request per interval)"
    )
    session_timeout_s: float = Field(
        30.0,
        gt=0,
        le=90,
        description="the Kafka consumer's session timeout (seconds); at most Faust's request"
        " timeout, 90 s",
    )
    commit_interval_s: float = Field(
        0.25,
        gt=0,
        description="how often the worker commits its consumed offsets (seconds): a ranker in"
        " another process ends a read-your-writes wait at the commit, so this bounds its wait;"
        " each commit is one small broker request (docs/benchmarks.md, 0.25 against 1 s)",
    )
    replay: bool = Field(
        False,
        description="a replay of the log into a new app id (an audit, a check of the state"
        " hash): every event is applied to this app's own tables and Milvus collection, and"
        " nothing is produced: no audit or dead-letter record, no decision (those of the live"
        " worker are in the log and are applied from it), no scheduled consolidation; a"
        " consolidation request is skipped",
    )
    metrics_host: str = Field("127.0.0.1", description="0.0.0.0 to be scraped from outside")
    metrics_port: int = Field(
        9102, ge=0, le=65535, description="GET /metrics of python -m streams; 0: not served"
    )

    @field_validator("llm_url")
    @classmethod
    def _llm_url(cls, url: str | None) -> str | None:
        """An http(s) URL with a host, or unset (None or empty). Refused at start-up: a value the
        HTTP client refuses (a Secret's trailing newline) would leave every write to the rules.
        """
        if not url:
            return url
        if any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in url):
            msg = f"{url!r}: holds a space or control character (a trailing newline?)"
            raise ValueError(msg)
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            msg = f"{url!r}: expected an http:// or https:// URL with a host"
            raise ValueError(msg)
        return url

    @model_validator(mode="after")
    def _replicas(self) -> WorkerSettings:
        if self.kafka_min_insync > self.kafka_replication:
            msg = (
                f"kafka_min_insync={self.kafka_min_insync} exceeds kafka_replication="
                f"{self.kafka_replication}: every write would be refused"
            )
            raise ValueError(msg)
        return self

    @model_validator(mode="after")
    def _replay_apart(self) -> WorkerSettings:
        """A replay with the live worker's app id joins its consumer group (it takes partitions
        and commits offsets for events it produces nothing for), and with its collection or data
        directory writes over the live rows and tables.
        """
        if not self.replay:
            return self
        shared = [
            f"{name} (not {value!r})"
            for name, value, live in (
                ("MNEMO_APP_ID", self.app_id, LIVE_APP_IDS),
                ("MNEMO_MILVUS_COLLECTION", self.milvus_collection, LIVE_COLLECTIONS),
                ("MNEMO_DATA_DIR", str(self.data_dir), LIVE_DATA_DIRS),
                ("MNEMO_MILVUS_URI", _lite_file(self.milvus_uri), LIVE_LITE_FILES),
            )
            if value in live
        ]
        if shared:
            msg = (
                f"MNEMO_REPLAY=true needs its own {', '.join(shared)}: with the live worker's"
                " (the defaults, or what the Dockerfile and k8s set) the replay would join its"
                " consumer group or write over its rows and tables (a Milvus Lite file serves one"
                " process)"
            )
            raise ValueError(msg)
        return self


def _lite_file(uri: str) -> str:
    """``uri`` as :data:`LIVE_LITE_FILES` names it when it is one of them (``make up`` hands its
    processes the absolute path of ``var/milvus.db``); else ``uri``.
    """
    if "://" in uri:
        return uri
    for live in LIVE_LITE_FILES:
        if Path(uri).resolve() == Path(live).resolve():
            return live
    return uri
