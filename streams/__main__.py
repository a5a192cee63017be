"""``python -m streams``: run the stream worker (settings from ``MNEMO_*`` variables);
``python -m streams consolidate --help``: ask it to consolidate (see :mod:`streams.cli`).
"""

from __future__ import annotations

import asyncio
import logging
import sys

import faust

from storage import MilvusStore
from storage.embedding import Embedder, Hashing, MiniLm
from streams import cli
from streams.app import Services, create_app
from streams.llm import LlmImportance
from streams.settings import WorkerSettings
from streams.topics import ensure_topics


def main() -> None:
    """Read settings, create topics, connect Milvus, load the embedder, run the Faust worker."""
    if len(sys.argv) > 1 and sys.argv[1] == "consolidate":
        raise SystemExit(cli.main(sys.argv[2:]))
    settings = WorkerSettings()
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    asyncio.run(ensure_topics(settings))
    store = MilvusStore(settings.milvus())
    store.connect()
    embedder: Embedder = (
        MiniLm() if settings.embedder == "minilm" else Hashing(settings.embedding_dim)
    )
    if embedder.dim != settings.embedding_dim:
        msg = (
            f"embedder {settings.embedder} makes {embedder.dim} dimensions, "
            f"MNEMO_EMBEDDING_DIM is {settings.embedding_dim}"
        )
        raise SystemExit(msg)
    embedder.start()
    llm = (
        LlmImportance(
            settings.llm_url, settings.llm_model, settings.llm_api_key, settings.llm_timeout_s
        )
        if settings.llm_url
        else None
    )
    app = create_app(settings, Services(store, embedder, llm))
    worker = faust.Worker(app, loglevel=settings.log_level, quiet=True)
    try:
        worker.execute_from_commandline()
    finally:
        store.close()


if __name__ == "__main__":
    main()
