"""The contract tests' store: one fixture, two backends (Milvus Lite and a real server)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from storage import MilvusConfig, MilvusStore

DIM = 8
_names = itertools.count()


@pytest.fixture(params=["lite", "server"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MilvusStore]:
    if request.param == "lite":
        config = MilvusConfig(uri=str(tmp_path / "milvus.db"), dim=DIM)
    else:
        uri = request.getfixturevalue("milvus_server_uri")
        # Milvus 2.3 loses upserted rows from partition-key filters: the adapter's knob turns it off.
        config = MilvusConfig(
            uri=uri,
            dim=DIM,
            partition_key=False,
            full_text=False,  # Milvus 2.3 has no BM25
            collection=f"c{next(_names)}",
        )
    s = MilvusStore(config)
    s.connect()
    yield s
    s.drop()
    s.close()
