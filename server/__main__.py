"""``python -m server``: the Faust worker and the HTTP API in one event loop (see the package doc)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import Callable

import uvicorn

from ranker.__main__ import HTTP_GRACE_S, build
from ranker.hotcache import HotCache
from ranker.listen import listening_socket
from ranker.metrics import Metrics
from ranker.service import RecallService
from ranker.settings import RankerSettings
from ranker.view import StateView
from ranker.warmup import PRELOAD_STOP_S
from storage.changelogs import Tables, changelog_topic
from storage.heap import freeze_slow_collections
from storage.logs import configure, logging_config
from storage.usage import load_settings, parse_service_args, refusing_start
from streams.__main__ import prepare, resync_milvus, run
from streams.app import create_app
from streams.applied import AppliedMarks
from streams.rebuild import Resynced
from streams.settings import WorkerSettings

log = logging.getLogger(__name__)

#: At stop, how long the worker waits for the HTTP server and the ranker's lifespan shutdown (s)
#: (``scripts/stack.sh`` kills the process after 60 s).
HTTP_STOP_S = HTTP_GRACE_S + PRELOAD_STOP_S + 10


def main(prog: str = "python -m server") -> None:
    """Start the worker; the HTTP server runs as one of its tasks and stops with it. ``prog``
    names the command in ``--help`` and errors.

    The ranker's ``GET /metrics`` (on the API's port, or on ``MNEMO_RANKER_METRICS_PORT``) serves
    the worker's metrics too (``MNEMO_METRICS_PORT`` is for ``python -m streams`` alone).
    """
    parse_service_args(prog, __doc__ or "", [WorkerSettings, RankerSettings], sys.argv[1:])
    worker_settings = load_settings(WorkerSettings)
    ranker_settings = load_settings(RankerSettings)
    freeze_slow_collections(worker_settings.gc_freeze_slow_ms)
    level = worker_settings.log_level.upper()
    configure(ranker_settings.log_format, level)  # start-up lines too; Faust applies it again
    # bound now, listening once the worker runs: a port another process listens on fails here,
    # before the resync
    sock = listening_socket(
        ranker_settings.host, ranker_settings.port, reuse_port=ranker_settings.reuse_port
    )
    with refusing_start():
        services = prepare(worker_settings, resync=False)  # below, once the hot cache exists
        applied = AppliedMarks()
        app = create_app(worker_settings, services, applied)
        api = build(
            ranker_settings,
            store=services.store,
            embedder=services.embedder,
            metrics=Metrics(services.metrics.registry),
            worker_ready=lambda: bool(app.tables.recovery.completed.is_set()),  # type: ignore[attr-defined]
            local=applied,
        )
    cache: HotCache | None = api.state.hot_cache
    if cache is not None and services.store.embedded:
        # the supersession check's searches without a pass over Milvus Lite per batch; this
        # process's worker is then the collection's only writer, so the cache lags no other
        # writer (a Milvus server is searched as before)
        services.neighbours = cache.neighbours
        services.tenant_rows = cache.tenant_rows  # consolidation's reads, likewise
    # before the worker writes a row: the rows the resync reads from the changelogs fill the
    # cache (what a preload would read back from Milvus: a pass of minutes over Milvus Lite at
    # 100k rows, 331 s of tenant queries to a 2.3 server at 1M). On a server too: the state
    # view, seeded with the same read, marks every later change for a re-read, whoever wrote it
    service: RecallService = api.state.service
    done = resync_milvus(
        worker_settings,
        services.store,
        into=cache.fill if cache is not None else None,
        read=seeder(service.view, worker_settings.app_id),
    )
    if cache is not None:
        fill_or_forget(cache, done)

    config = uvicorn.Config(
        api,
        host=ranker_settings.host,
        port=ranker_settings.port,
        log_level=worker_settings.log_level,
        log_config=None,  # uvicorn's loggers go to ours (configure), not to its own handlers
        access_log=False,  # ranker.logs.RequestLog logs every request, with its ids
        timeout_graceful_shutdown=HTTP_GRACE_S,
    )
    server = uvicorn.Server(config)  # Faust owns the signals: uvicorn must not take them
    server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign,assignment]
    served = asyncio.Event()

    @app.task  # type: ignore[untyped-decorator]
    async def http() -> None:
        log.info("ranker on http://%s:%d", ranker_settings.host, ranker_settings.port)
        try:
            await server.serve(sockets=[sock])
        finally:
            served.set()

    @app.on_before_shutdown.connect  # type: ignore[arg-type]  # mode's handler union
    async def stop_http(_sender: object, **_: object) -> None:
        # Faust cancels its tasks only after this signal: stopping uvicorn here lets requests in
        # flight finish (HTTP_GRACE_S at most) and runs the ranker's lifespan shutdown
        if server.started:
            server.should_exit = True
            try:
                await asyncio.wait_for(served.wait(), HTTP_STOP_S)
            except TimeoutError:
                log.warning("the HTTP server did not stop within %d s; stopping on", HTTP_STOP_S)

    run(app, worker_settings, services, logging_config(ranker_settings.log_format, level))


def seeder(view: StateView | None, app_id: str) -> Callable[[Tables], None] | None:
    """What hands the memories changelog the resync read to ``view`` (:meth:`StateView.seed`),
    when ``view`` follows that changelog (the ranker's and the worker's app ids agree), else None:
    the view then replays the topic from its beginning.
    """
    if view is None or view.topic != changelog_topic(app_id, "memories"):
        return None

    def seed(tables: Tables) -> None:
        view.seed(tables.memories, tables.memories_to)
        log.info("state view seeded from the changelog: %d memories", len(tables.memories))

    return seed


def fill_or_forget(cache: HotCache, done: Resynced) -> None:
    """Keep the cache the resync filled when Milvus holds as many rows as it does; else (rows a
    rewrite leaves in Milvus: see :func:`streams.rebuild.catch_up`) drop it: the ranker's
    preload reads the collection instead.
    """
    if done.held == done.rows:
        log.info("hot cache filled from the changelogs: %d rows of %d tenants", *cache.held())
    else:
        log.info(
            "hot cache: Milvus holds %d rows, the changelogs %d: preloaded from Milvus",
            done.held,
            done.rows,
        )
        cache.forget()


if __name__ == "__main__":
    main()
