"""``python -m streams``: run the stream worker (settings from ``MNEMO_*`` variables), with its
Prometheus metrics at ``GET /metrics`` on ``MNEMO_METRICS_PORT`` (default 9102; 0: not served);
``python -m streams consolidate --help``: ask it to consolidate (see :mod:`streams.cli`);
``python -m streams state-hash | rebuild --help``: hash the tables, rebuild Milvus from them
(see :mod:`streams.rebuild`); ``python -m streams tenants --help``: tenants, policies and API keys
(see :mod:`streams.tenants_cli`).
"""

from __future__ import annotations

import asyncio
import logging
import logging.config
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import faust

from storage import MilvusStore, StorageError
from storage.changelogs import Tables
from storage.heap import freeze_slow_collections, trim_heap
from storage.logs import logging_config
from storage.usage import load_settings, parse_service_args, refusing_start
from streams import cli, rebuild, tenants_cli
from streams.app import Services, create_app
from streams.llm import LlmImportance
from streams.settings import WorkerSettings
from streams.topics import ensure_topics

log = logging.getLogger(__name__)


def prepare(settings: WorkerSettings, *, resync: bool = True) -> Services:
    """Log set-up, the embedder's dimension and the tenants checked, topics created, Milvus
    connected (and resynced, :func:`resync`, unless ``resync`` is False: the caller does it), the
    embedder loaded, the LLM client made.
    """
    config = worker_logging(settings)  # the one decision: Faust's run() applies it too
    if config is None:
        logging.basicConfig(
            level=settings.log_level.upper(),
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        )
    else:
        logging.config.dictConfig(config)
    # checked before anything is created: a collection of the wrong dimension, made before the
    # embedder's check refused the start, would refuse every later start too
    embedder = settings.make_embedder()
    registry = settings.registry()  # MNEMO_TENANTS or MNEMO_TENANTS_FILE, read once
    asyncio.run(ensure_topics(settings))
    store = MilvusStore(settings.milvus())
    store.connect()
    if settings.milvus_endpoint_file is not None:
        publish_endpoint(settings.milvus_endpoint_file, store.endpoint())
    if resync:
        resync_milvus(settings, store)
    embedder.start()
    llm = None
    if settings.llm_url:
        llm = LlmImportance(
            settings.llm_url, settings.llm_model, settings.llm_api_key, settings.llm_timeout_s
        )
    return Services(store, embedder, llm, registry=registry)


def resync_milvus(
    settings: WorkerSettings,
    store: MilvusStore,
    into: rebuild.Fill | None = None,
    read: Callable[[Tables], None] | None = None,
) -> rebuild.Resynced:
    """:func:`streams.rebuild.resync` (before the worker runs), logged; then the heap the
    changelogs' read used is handed back (:func:`storage.heap.trim_heap`: 8.3 -> 4.7 GB RSS in
    ``python -m server`` at 1M memories, docs/benchmarks.md).
    """
    started = time.perf_counter()
    done = rebuild.resync(settings, store, into=into, read=read)
    trim_heap()  # the read is dropped with resync's frame
    compact_at_start(settings, store)
    if done.upserted or done.deleted or done.asked:
        log.info(
            "Milvus resynced from the changelogs (it held %d rows, they hold %d%s): %d rows"
            " upserted, %d purged rows deleted in %.1f s; it holds %d rows",
            done.stored,
            done.rows,
            f"; asked: {done.asked}" if done.asked else "",
            done.upserted,
            done.deleted,
            time.perf_counter() - started,
            done.held,
        )
    else:
        log.info(
            "Milvus holds the %d rows the changelogs hold: not rewritten (checked in %.1f s)",
            done.rows,
            time.perf_counter() - started,
        )
    return done


def compact_at_start(settings: WorkerSettings, store: MilvusStore) -> None:
    """Ask Milvus to compact once at start (unless ``MNEMO_MILVUS_COMPACT_INTERVAL_S`` is 0): the
    compaction a stopped worker owed deletes made within the interval of its last ask (a task
    waiting out the interval ends with the process) and the resync's own deletes. A failure is
    logged; the next delete asks again.
    """
    if not settings.milvus_compact_interval_s:
        return
    try:
        store.compact()
    except StorageError as exc:
        log.warning("asking Milvus to compact at start failed: %s", exc)


def publish_endpoint(path: Path, endpoint: str) -> None:
    """Write ``endpoint`` (:meth:`storage.MilvusStore.endpoint`) to ``path`` whole: a temporary
    file renamed over it, so a reader never sees half an address. Raises OSError.
    """
    partial = path.with_name(path.name + ".partial")
    partial.write_text(endpoint + "\n", encoding="utf-8")
    partial.replace(path)
    log.info("Milvus endpoint %s written to %s", endpoint, path)


def run(
    app: faust.App,
    settings: WorkerSettings,
    services: Services,
    logging_config: dict[str, Any] | None = None,
) -> None:
    """Run the Faust worker until a signal stops it; close Milvus after. ``logging_config``: a
    :func:`logging.config.dictConfig` document for the worker to apply instead of its own
    (coloured lines on stdout).
    """
    worker = faust.Worker(
        app, loglevel=settings.log_level, quiet=True, logging_config=logging_config
    )
    try:
        worker.execute_from_commandline()
    finally:
        services.store.close()


def main(prog: str = "python -m streams") -> None:
    """Read settings, prepare the services, serve the metrics, run the Faust worker. ``prog``
    names the command in ``--help`` and errors.
    """
    if len(sys.argv) > 1 and sys.argv[1] == "consolidate":
        raise SystemExit(cli.main(sys.argv[2:]))
    if len(sys.argv) > 1 and sys.argv[1] == "tenants":
        raise SystemExit(tenants_cli.main(sys.argv[2:]))
    if len(sys.argv) > 1 and sys.argv[1] in ("rebuild", "state-hash"):
        raise SystemExit(rebuild.main(sys.argv[1], sys.argv[2:]))
    parse_service_args(prog, __doc__ or "", [WorkerSettings], sys.argv[1:])
    settings = load_settings(WorkerSettings)
    freeze_slow_collections(settings.gc_freeze_slow_ms)
    with refusing_start():
        services = prepare(settings)
    if settings.metrics_port:
        services.metrics.serve(settings.metrics_host, settings.metrics_port)
    run(create_app(settings, services), settings, services, worker_logging(settings))


def worker_logging(settings: WorkerSettings) -> dict[str, Any] | None:
    """The worker's logging with ``MNEMO_LOG_FORMAT=json`` (:mod:`storage.logs`); None (Faust's
    own lines) with ``text``.
    """
    if settings.log_format == "json":
        return logging_config("json", settings.log_level.upper())
    return None


if __name__ == "__main__":
    main()
