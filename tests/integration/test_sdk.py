"""`python -m ranker` as a real process, driven by the SDK over HTTP on loopback."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest

from mnemostream import AsyncClient, Client, MnemostreamError
from storage import MilvusConfig, MilvusStore
from tests.infra import ROOT, free_port
from tests.integration.harness import Stack, read_all, wait_for_http
from tests.integration.test_ranker import ALICE, DIM, KEY_A, KEY_B, row
from tests.integration.test_streams import T0

pytestmark = pytest.mark.integration


@pytest.fixture
def ranker(
    make_stack: Callable[..., Stack], milvus_server_uri: str, tmp_path: Path
) -> Iterator[tuple[str, Stack]]:
    stack = make_stack(("acme", "globex"), dim=DIM)
    stack.create_topics()
    collection = f"sdk_{stack.name}"
    store = MilvusStore(
        MilvusConfig(
            milvus_server_uri, collection=collection, dim=DIM, partition_key=False, full_text=False
        )
    )
    store.connect()
    archived = dataclasses.replace(row("acme", "likes-java", 0.5, 0.3, 0.2), state="archived")
    store.upsert([*(row("acme", m, c, i, r) for m, c, i, r in ALICE), archived])
    store.close()
    tenants = tmp_path / "tenants.json"
    tenants.write_text(
        json.dumps(
            {
                "tenants": {
                    "acme": {"api_keys": [KEY_A], "recall": "zeromemory"},  # SPEC's Alice example
                    "globex": {"api_keys": [KEY_B]},
                }
            }
        )
    )
    port = free_port()
    env = {
        **os.environ,
        "MNEMO_PORT": str(port),
        "MNEMO_KAFKA_BOOTSTRAP": stack.bootstrap,
        "MNEMO_TOPIC_PREFIX": f"{stack.name}.",
        "MNEMO_MILVUS_URI": milvus_server_uri,
        "MNEMO_MILVUS_COLLECTION": collection,
        "MNEMO_MILVUS_PARTITION_KEY": "false",
        "MNEMO_MILVUS_FULL_TEXT": "false",
        "MNEMO_EMBEDDING_DIM": str(DIM),
        "MNEMO_EMBEDDER": "hash",
        "MNEMO_TENANTS_FILE": str(tenants),
    }
    log = (tmp_path / "ranker.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "ranker"], cwd=ROOT, env=env, stdout=log, stderr=log
    )
    log.close()
    url = f"http://127.0.0.1:{port}"
    wait_for_http(url, proc, tmp_path / "ranker.log")
    yield url, stack
    proc.terminate()
    proc.wait(30)


def test_sync_client(ranker: tuple[str, Stack]) -> None:
    url, stack = ranker
    # no worker runs here: nothing would apply the writes a read-your-writes read waits for
    with Client(url, KEY_A, read_your_writes=False) as client:
        results = client.recall(vector=[1.0, *([0.0] * (DIM - 1))], k=3, at=T0, track=False)
        assert [m.memory_id for m in results] == [
            "prefers-python",
            "team-fastapi",
            "rust-interesting",
        ]
        assert results[0].scores["final"] == pytest.approx(0.88, abs=1e-3)
        archive = client.archive_search(vector=[1.0, *([0.0] * (DIM - 1))], k=3, at=T0)
        assert [(m.memory_id, m.state) for m in archive] == [("likes-java", "archived")]
        memory_id = client.remember("remember: tea at four", importance=0.7, at=T0)
        assert client.access([memory_id], kind="get", at=T0) == 1
        found = client.get("prefers-python", track=False)
        assert found is not None
        assert found.importance == 0.8
        assert client.get("no-such-memory", track=False) is None
    with Client(url, "wrong-key-0123456789") as stranger, pytest.raises(MnemostreamError) as err:
        stranger.recall("anything")
    assert (err.value.status, err.value.retriable) == (401, False)
    writes = [orjson.loads(v) for _, v in read_all(stack.bootstrap, stack.topic("memory-writes"))]
    assert [(w["tenant_id"], w["memory_id"]) for w in writes] == [("acme", memory_id)]
    sent = [orjson.loads(v) for _, v in read_all(stack.bootstrap, stack.topic("access-events"))]
    assert [(a["memory_id"], a["kind"]) for a in sent] == [(memory_id, "get")]


def test_async_client(ranker: tuple[str, Stack]) -> None:
    url, _ = ranker

    async def run() -> tuple[list[str], object]:
        async with AsyncClient(url, KEY_B) as client:
            results = await client.recall(vector=[1.0, *([0.0] * (DIM - 1))], k=3, at=T0)
            archive = await client.archive_search(vector=[1.0, *([0.0] * (DIM - 1))], at=T0)
            ids = [m.memory_id for m in (*results, *archive)]
            return ids, await client.get("prefers-python", track=False)

    ids, other = asyncio.run(run())
    assert ids == []  # globex sees none of acme's memories, archived or not
    assert other is None


def test_mnemo_load_writes_a_jsonl_file(ranker: tuple[str, Stack], tmp_path: Path) -> None:
    url, stack = ranker
    lines = [
        orjson.dumps({"content": f"fact {i}", "importance": 0.5, "tags": ["load"]})
        for i in range(7)
    ]
    source = tmp_path / "memories.jsonl"
    source.write_bytes(b"\n".join(lines) + b"\n")
    mnemo = Path(sys.executable).parent / "mnemo"
    done = subprocess.run(
        [
            str(mnemo),
            "load",
            str(source),
            "--url",
            url,
            "--api-key",
            KEY_A,
            "--batch",
            "3",
            "--ids",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    ids = done.stdout.split()
    assert len(ids) == 7
    assert "7/7" in done.stderr
    writes = [orjson.loads(v) for _, v in read_all(stack.bootstrap, stack.topic("memory-writes"))]
    assert sorted(w["memory_id"] for w in writes) == sorted(ids)
    assert {w["tenant_id"] for w in writes} == {"acme"}
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"content": "ok"}\nnot json\n')
    refused = subprocess.run(
        [str(mnemo), "load", str(bad), "--url", url, "--api-key", KEY_A],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert refused.returncode != 0
    assert "bad.jsonl:2" in refused.stderr
