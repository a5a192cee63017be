"""The ranker's settings: read once at start-up from ``MNEMO_*`` environment variables."""

from __future__ import annotations

from typing import Literal, Self

from pydantic import Field, SecretStr, model_validator

from storage.settings import SharedSettings


class RankerSettings(SharedSettings):
    """What the recall service needs beyond the shared settings. Units are in the names."""

    host: str = "127.0.0.1"
    access_log: Literal["all", "errors"] = Field(
        "all",
        description="all: one log line per request; errors: only requests answered 4xx or 5xx"
        " (a line costs ~4 % of a hot recall's CPU)",
    )
    port: int = Field(8080, ge=1, le=65535)
    reuse_port: bool = Field(
        False,
        description="bind host:port with SO_REUSEPORT, so that several ranker processes of this"
        " user serve one port (the kernel spreads connections; Linux). Every process on the port"
        " must set it",
    )
    candidates: int = Field(100, ge=1, le=16_384, description="Milvus hits scored per request")
    batch_max: int = Field(64, ge=1, description="requests scored in one torch pass, at most")
    batch_wait_s: float = Field(0.002, ge=0, description="how long a batch waits to fill")
    queue_max: int = Field(1024, ge=1, description="waiting requests before HTTP 429")
    kernel_thread: bool | None = Field(
        None,
        description="score every batch in the kernel's thread (true), or a light one (no MMR, at"
        " most 8,192 candidates) on the event loop and the others in that thread (false); unset:"
        " true on CUDA, false on the CPU, where the hop to a thread and back costs more than a"
        " light batch (docs/benchmarks.md)",
    )
    max_in_flight: int = Field(
        256,
        ge=1,
        description="API requests served at once; more get HTTP 429 at once, before any work",
    )
    max_in_flight_per_tenant: int | None = Field(
        None,
        ge=1,
        description="API requests of one tenant served at once; more get HTTP 429 (so a tenant"
        " whose reads wait out their tokens cannot take every slot); unset: half of"
        " MNEMO_MAX_IN_FLIGHT",
    )
    max_body_bytes: int = Field(
        64 * 2**20,
        ge=1024,
        description="the largest API request body, bytes; a larger one gets HTTP 413 (a batch of"
        " 1,000 memories with 384-d vectors and a few KB of text each is ~10 MB)",
    )
    max_body_bytes_in_flight: int | None = Field(
        None,
        ge=1024,
        description="the bytes of all API request bodies being served together (declared or"
        " arrived; a body is parsed at many times its size); more get HTTP 429 with Retry-After,"
        " before the body is read when its Content-Length says so; a body of at most 64 KiB is"
        " counted, never refused (they may add up to MNEMO_MAX_IN_FLIGHT times that). At least"
        " MNEMO_MAX_BODY_BYTES; unset: twice it",
    )
    body_timeout_s: float = Field(
        30.0,
        gt=0,
        description="an API request's body must have arrived this long after the request, or"
        " HTTP 408 (a client that sends headers and then nothing holds no slot for ever)",
    )
    produce_timeout_s: float = Field(
        5.0,
        gt=0,
        le=300,
        description="a write or access not acknowledged by Kafka in this time gets HTTP 503",
    )
    after_timeout_s: float = Field(
        10.0, gt=0, description="how long a read waits for its read-your-writes token, at most"
    )
    scoring_threads: int = Field(
        1,
        ge=1,
        description="CPU threads of torch and FAISS in a batch (the kernel is small: more threads"
        " mostly spin against the event loop and the Milvus client)",
    )
    hot_cache: bool = Field(
        True,
        description="vector candidates of small tenants from the ranker's memory (exact); off:"
        " every vector search goes to Milvus",
    )
    hot_cache_fill: Literal["changelogs", "milvus"] = Field(
        "changelogs",
        description="what a python -m ranker warms its hot cache from at start-up: the rows of"
        " the worker's tables, read from their changelog topics (no pass over Milvus), or one"
        " pass over the Milvus collection (use milvus when several app ids share a collection)."
        " python -m server fills from its worker's start-up read",
    )
    hot_cache_device: Literal["cpu", "cuda"] = Field(
        "cpu",
        description="where the hot cache searches: cpu (numpy), or cuda: a copy of each held"
        " tenant's vectors on the GPU (dim × 4 bytes a row), the product and the top N computed"
        " there. On an H200, cuda was slower for one query a search (0.36 against 0.21 ms at 1,000"
        " rows) and faster for 64 queries of a 16,000-row tenant in one search (docs/benchmarks.md)",
    )
    hot_tenant_max: int = Field(
        16_384, ge=1, le=16_384, description="the largest tenant (rows) the hot cache keeps"
    )
    hot_total_max: int = Field(
        2_000_000,
        ge=1,
        description="rows the hot cache keeps over all tenants (about dim × 4 bytes each plus the"
        " row's text); least recently searched tenants go first",
    )
    admin_key: SecretStr | None = Field(
        None,
        description="opens the admin routes (/v1/admin: tenants, policies, keys); unset: they"
        " answer 403. Never a tenant's key",
    )
    ranker_metrics_port: int = Field(
        0,
        ge=0,
        le=65535,
        description="serve GET /metrics on this port of MNEMO_HOST instead of the API's port"
        " (0: on the API's port; not MNEMO_PORT; one process per host). The metrics count every"
        " tenant's traffic together: where tenants reach the API's port, serve them apart",
    )
    tenant_rate_limit_per_s: float = Field(
        0.0,
        ge=0,
        description="requests per second per tenant when its record sets none (0: unlimited);"
        " over it: HTTP 429 with Retry-After",
    )

    @model_validator(mode="after")
    def _body_budget_fits_a_body(self) -> Self:
        """A budget under the largest body would refuse every body of that size for ever."""
        budget = self.max_body_bytes_in_flight
        if budget is not None and budget < self.max_body_bytes:
            msg = (
                f"MNEMO_MAX_BODY_BYTES_IN_FLIGHT={budget} is under MNEMO_MAX_BODY_BYTES"
                f" ({self.max_body_bytes}): a body of the largest size could never be read;"
                " give at least that, or leave it unset (twice MNEMO_MAX_BODY_BYTES)"
            )
            raise ValueError(msg)
        return self

    @model_validator(mode="after")
    def _metrics_apart(self) -> Self:
        """The metrics' own port is not the API's: the API's socket is bound first and listens
        only once the app started, after the metrics took the port.
        """
        if self.ranker_metrics_port and self.ranker_metrics_port == self.port:
            msg = (
                f"MNEMO_RANKER_METRICS_PORT={self.ranker_metrics_port} is MNEMO_PORT: give"
                " another port, or 0 for /metrics on the API's port"
            )
            raise ValueError(msg)
        return self
