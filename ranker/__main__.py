"""``python -m ranker``: serve the HTTP API (settings from ``MNEMO_*`` variables)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Protocol

import uvicorn
from fastapi import FastAPI

from ranker.api import create_api
from ranker.applied import AppliedOffsets, KafkaOffsets, LocalWorker
from ranker.cached import Cached
from ranker.history import AuditLog
from ranker.hotcache import LOCAL_WRITER_GRACE_S, HotCache, search_device
from ranker.kernel import set_threads
from ranker.listen import listening_socket
from ranker.metrics import Metrics, MetricsPort
from ranker.producer import EventProducer
from ranker.service import RecallService
from ranker.settings import RankerSettings
from ranker.tokens import TokenSeal
from ranker.view import StateView
from ranker.warmup import Changelogs, Warmup
from storage import MilvusStore
from storage.changelogs import changelog_topic
from storage.embedding import Embedder
from storage.heap import freeze_slow_collections
from storage.logs import configure
from storage.tenant_log import TenantLog, TenantLogError
from storage.usage import load_settings, parse_service_args, refusing_start

log = logging.getLogger(__name__)

#: At stop, how long the HTTP server waits for requests in flight before cancelling them (s).
HTTP_GRACE_S = 10


def build(
    settings: RankerSettings,
    store: MilvusStore | None = None,
    embedder: Embedder | None = None,
    metrics: Metrics | None = None,
    worker_ready: Callable[[], bool] | None = None,
    local: LocalWorker | None = None,
) -> FastAPI:
    """The app with its lifespan: Milvus, the embedder and the Kafka producer open at start-up.

    A ``store`` or ``embedder`` passed in is already started and stays open after the app stops
    (a process that also runs the stream worker shares them: Milvus Lite allows one process per file);
    ``metrics`` passed in can serve more registries than the ranker's (that worker's);
    ``worker_ready``: True once that worker's tables have recovered (``GET /readyz`` waits for it);
    ``local``: that worker's applied marks (``after`` waits end on them, not at its next commit,
    and wait for what its batches derived, not all writes). ``app.state.hot_cache``: the hot
    cache (:class:`ranker.hotcache.HotCache`), or None when ``MNEMO_HOT_CACHE`` is off.
    """
    owned, owned_embedder = store is None, embedder is None
    store = MilvusStore(settings.milvus()) if store is None else store
    embedder = settings.make_embedder() if embedder is None else embedder
    kafka = settings.kafka()
    producer = EventProducer(kafka, settings.topic, timeout_s=settings.produce_timeout_s)
    view = StateView(kafka, changelog_topic(settings.app_id, "memories"))
    registry = settings.tenant_log(timeout_s=settings.after_timeout_s)
    tenants_read = TenantsRead(registry)
    keys = settings.key_log(timeout_s=settings.produce_timeout_s)
    seal = TokenSeal(keys)
    cache = _hot_cache(settings, store, view, local_writer=local is not None)
    offsets = KafkaOffsets(
        kafka,
        settings.app_id,
        {role: settings.topic(role) for role in ("memory-writes", "access-events")},
    )

    service = RecallService(
        store,
        embedder,
        producer.send,
        candidates=settings.candidates,
        batch_max=settings.batch_max,
        batch_wait_s=settings.batch_wait_s,
        queue_max=settings.queue_max,
        kernel_thread=settings.kernel_thread,
        scoring_threads=settings.scoring_threads,
        metrics=metrics,
        applied=AppliedOffsets(
            offsets.committed,
            offsets.end_offsets,
            timeout_s=settings.after_timeout_s,
            view_caught_up=view.caught_up,
            local=local,
            refresh=offsets.refresh,
        ),
        view=view,
        cache=cache,
        keys=keys,
    )

    # python -m server (``local``) fills its cache from its worker's start-up read
    fill = _fill_source(settings, keys.topic) if local is None else None
    warmup = Warmup(cache, fill) if cache is not None else None
    # started in this order before the service, stopped in the reverse after it
    followers: tuple[_Started, ...] = (producer, tenants_read, offsets, view, keys, seal)
    if settings.ranker_metrics_port:  # apart from the API (all tenants' traffic); first: a
        # port taken ends the start before any client connects
        port = MetricsPort(service.metrics, settings.host, settings.ranker_metrics_port)
        followers = (port, *followers)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        set_threads(settings.scoring_threads)
        if owned:
            await asyncio.to_thread(store.connect)
        if owned_embedder:
            await asyncio.to_thread(embedder.start)
        for part in followers:
            await part.start()
        await service.start()
        if warmup is not None:
            warmup.start(sorted(registry.tenants))
        log.info("mnemostream ranker ready%s", "" if cache is not None else " (no hot cache)")
        try:
            yield
        finally:
            if warmup is not None:
                await warmup.stop()
            await service.stop()
            for part in reversed(followers):
                await part.stop()
            if owned:
                await asyncio.to_thread(store.close)
            log.info("mnemostream ranker stopped")

    api = create_api(
        service,
        registry,
        settings.limits(registry),
        max_in_flight=settings.max_in_flight,
        max_in_flight_per_tenant=settings.max_in_flight_per_tenant,
        ready={
            **_readiness(store, producer, worker_ready, cache, view, tenants_read.done),
            "token_key": lambda: asyncio.sleep(0, seal.held),  # tokens are sealed with it
        },
        audit=AuditLog(kafka, settings.topic("audit")),
        rate_limit_per_s=settings.tenant_rate_limit_per_s,
        admin_key=settings.admin_key.get_secret_value() if settings.admin_key else None,
        log_every_request=settings.access_log == "all",
        tenants_read=tenants_read.done,
        max_body_bytes=settings.max_body_bytes,
        max_body_bytes_in_flight=settings.max_body_bytes_in_flight,
        body_timeout_s=settings.body_timeout_s,
        token_seal=seal,
        metrics_route=not settings.ranker_metrics_port,
    )
    api.router.lifespan_context = lifespan
    api.state.hot_cache = cache  # a worker in this process looks up neighbours there too
    return api


class _Started(Protocol):
    async def start(self) -> None: ...

    async def stop(self) -> None: ...


def _readiness(
    store: MilvusStore,
    producer: EventProducer,
    worker_ready: Callable[[], bool] | None,
    cache: HotCache | None,
    view: StateView,
    tenants_read: asyncio.Event,
) -> dict[str, Callable[[], Awaitable[bool]]]:
    """``GET /readyz``'s checks: Kafka, Milvus (probed at most every 5 s: probes are frequent),
    the state view read to where the changelog stood at start-up (before, recall would score and
    filter by older states and listing would miss memories), with ``worker_ready`` the worker in
    this process, and with ``cache`` the end of its preload (until then recalls search Milvus: a
    replica routed traffic sooner would answer it slowly; a failed preload counts as ended,
    tenants then load at their first recall).
    """
    milvus = Cached(lambda: asyncio.to_thread(store.reachable), every_s=5.0)
    ready: dict[str, Callable[[], Awaitable[bool]]] = {"kafka": producer.ready, "milvus": milvus}
    ready["state_view"] = lambda: asyncio.sleep(0, view.settled.is_set())
    ready["tenants"] = lambda: asyncio.sleep(0, tenants_read.is_set())
    if worker_ready is not None:
        ready["worker"] = lambda: asyncio.sleep(0, worker_ready())
    if cache is not None:
        ended = cache.preload_ended
        ready["hot_cache"] = lambda: asyncio.sleep(0, ended.is_set())
    return ready


def _hot_cache(
    settings: RankerSettings, store: MilvusStore, view: StateView, *, local_writer: bool
) -> HotCache | None:
    """The hot cache, fed by the state view and, with ``local_writer`` (a worker in this process
    writes through ``store``), by the rows that worker writes, which start new tenants' blocks
    when ``store`` is Milvus Lite (no other process writes it); None when ``MNEMO_HOT_CACHE`` is
    off.
    """
    if not settings.hot_cache:
        return None
    cache = HotCache(
        store,
        view.values,
        ids_of=lambda tenant_id: view.tenant(tenant_id).keys(),
        purged_writes=view.purged_writes,
        tenant_max=settings.hot_tenant_max,
        total_max=settings.hot_total_max,
        writer_grace_s=LOCAL_WRITER_GRACE_S if local_writer else 0.0,
        sole_writer=local_writer and store.embedded,
        device=search_device(settings.hot_cache_device),
    )
    view.listeners.append(cache.on_change)
    if local_writer:
        store.upserted.append(cache.upserted)
        store.upsert_failed.append(cache.upsert_failed)
    return cache


def _fill_source(settings: RankerSettings, keys_topic: str) -> Changelogs | None:
    """Where the hot cache warms from (:mod:`ranker.warmup`): the worker's changelogs, or None:
    a preload from Milvus (``MNEMO_HOT_CACHE_FILL``).
    """
    if settings.hot_cache_fill != "changelogs":
        return None
    return Changelogs(settings.kafka(), settings.app_id, keys_topic)


class TenantsRead:
    """Whether the tenants topic was read to its end since start-up (``GET /readyz``'s
    ``tenants``; until then a request's key is answered 503, :func:`ranker.wire.authenticate`):
    before, keys and tenants made through the admin API are unknown, and keys or tenants the
    topic revoked or deleted would still act. A topic that cannot be read at start-up is read
    again in the background until it is. The constructor does no I/O.
    """

    def __init__(self, registry: TenantLog) -> None:
        self.registry = registry
        self.done = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Follow the topic, and read what it holds before the first request when it can."""
        await self.registry.start()
        try:
            await self.registry.catch_up()
        except TenantLogError as exc:
            log.warning("the tenants topic is not read yet (requests get 503 until it is): %s", exc)
            self._task = asyncio.create_task(self._read_through())
            return
        self.done.set()

    async def _read_through(self) -> None:
        await self.registry.read_through()
        self.done.set()
        log.info("the tenants topic is read")

    async def stop(self) -> None:
        """Stop reading, and following, the topic."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.registry.stop()


def main(prog: str = "python -m ranker") -> None:
    """Serve on ``MNEMO_HOST``:``MNEMO_PORT``. ``prog`` names the command in ``--help`` and
    errors.
    """
    parse_service_args(prog, __doc__ or "", [RankerSettings], sys.argv[1:])
    settings = load_settings(RankerSettings)
    freeze_slow_collections(settings.gc_freeze_slow_ms)
    configure(settings.log_format, settings.log_level.upper())
    sock = listening_socket(settings.host, settings.port, reuse_port=settings.reuse_port)
    with refusing_start():
        app = build(settings)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        log_config=None,
        access_log=False,  # ranker.logs.RequestLog logs every request, with its ids
        # a client stalled mid-request must not hold SIGTERM (nor the lifespan's shutdown)
        timeout_graceful_shutdown=HTTP_GRACE_S,
    )
    log.info(
        "ranker on http://%s:%d", settings.host, settings.port
    )  # uvicorn's line needs its own bind
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
