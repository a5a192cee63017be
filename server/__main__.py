"""``python -m server``: the Faust worker and the HTTP API in one event loop (see the package doc)."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import faust
import uvicorn

from ranker.__main__ import build
from ranker.settings import RankerSettings
from storage import MilvusStore
from storage.embedding import Embedder, Hashing, MiniLm
from streams.app import Services, create_app
from streams.llm import LlmImportance
from streams.settings import WorkerSettings
from streams.topics import ensure_topics

log = logging.getLogger(__name__)


def main() -> None:
    """Start the worker; the HTTP server runs as one of its tasks and stops with it."""
    worker_settings = WorkerSettings()
    ranker_settings = RankerSettings()
    level = worker_settings.log_level.upper()
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(ensure_topics(worker_settings))
    store = MilvusStore(worker_settings.milvus())
    store.connect()
    embedder: Embedder = (
        MiniLm() if worker_settings.embedder == "minilm" else Hashing(worker_settings.embedding_dim)
    )
    embedder.start()
    llm = None
    if worker_settings.llm_url:
        llm = LlmImportance(
            worker_settings.llm_url,
            worker_settings.llm_model,
            worker_settings.llm_api_key,
            worker_settings.llm_timeout_s,
        )
    app = create_app(worker_settings, Services(store, embedder, llm))
    api = build(ranker_settings, store=store, embedder=embedder)

    @app.task  # type: ignore[untyped-decorator]
    async def http() -> None:
        config = uvicorn.Config(
            api, host=ranker_settings.host, port=ranker_settings.port, log_level="info"
        )
        server = uvicorn.Server(config)  # Faust owns the signals: uvicorn must not take them
        server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign,assignment]
        log.info("ranker on http://%s:%d", ranker_settings.host, ranker_settings.port)
        await server.serve()

    worker = faust.Worker(app, loglevel=worker_settings.log_level, quiet=True)
    try:
        worker.execute_from_commandline()
    finally:
        store.close()


if __name__ == "__main__":
    main()
