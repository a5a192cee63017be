"""Read-your-writes under ``python -m server`` does not wait for the worker's offset commit: the
ranker asks the worker in its process what it has applied (``streams.applied.AppliedMarks``).
The worker here commits only every 10 minutes, far past the ranker's ``after`` wait; a recall or
get with the token still sees the write and the access.
"""

from __future__ import annotations

import base64
import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Protocol

import httpx
import orjson
import pytest

from mnemostream import Client, MnemostreamError
from tests.integration.harness import Stack
from tests.integration.test_durability import DIM, KEY, Server, run_cli

pytestmark = pytest.mark.integration


@pytest.fixture
def server(kafka_bootstrap: str, tmp_path: Path) -> Iterator[Server]:
    stack = Stack(kafka_bootstrap, "milvus-lite", tmp_path, ("acme",), dim=DIM)
    stack.create_topics()
    server = Server(stack, tmp_path)
    server.env["MNEMO_COMMIT_INTERVAL_S"] = "600"
    server.env["MNEMO_AFTER_TIMEOUT_S"] = "20"
    server.start()
    yield server
    server.stop()


def axis(i: int) -> list[float]:
    return [1.0 if j == i else 0.0 for j in range(DIM)]


def test_a_write_and_an_access_are_seen_before_the_worker_commits(server: Server) -> None:
    with Client(server.url, KEY) as client:  # read-your-writes: each read carries the tokens
        for round_ in range(3):
            memory_id = client.remember(f"fresh fact {round_}", embedding=axis(round_))
            found = client.recall(vector=axis(round_), k=1, track=False)
            assert [m.memory_id for m in found] == [memory_id], server.log()
            client.access([memory_id], "explicit", None)
            got = client.get(memory_id, track=False)
            assert got is not None, server.log()
            assert got.access_count == 1, server.log()


def test_a_session_hands_its_writes_on_to_another_client_by_its_token(server: Server) -> None:
    """A chat session ends and the next starts at once, in another process: the SDK kept its
    tokens, so the next one's reads missed the last writes. ``token()`` hands them on.
    """
    with Client(server.url, KEY) as first:
        written = [first.remember(f"handed fact {i}", embedding=axis(i)) for i in range(3)]
        first.access(written[:1], "explicit", None)
        handed = first.token()
    assert handed is not None
    with Client(server.url, KEY) as second:
        found = second.get_many(written, after=handed)
        assert sorted(found) == sorted(written), server.log()
        assert found[written[0]].access_count == 1, server.log()
        assert second.history(written[2], after=handed)[0]["kind"] == "created"


@pytest.mark.parametrize("offsets", [{0: 10**9}, {99: 0}])
def test_a_token_the_service_did_not_seal_is_a_422_naming_after(
    server: Server, offsets: dict[int, int]
) -> None:
    """Offsets in the clear (the format before tokens were sealed, or a forgery): past the end of
    a partition, or in a partition the topic lacks, every read waited 20 s here, then got a 503,
    and later the refusal said where the shared partition ended. Refused as not a token.
    """
    written = {"memory-writes": {str(p): o for p, o in offsets.items()}}
    plain = base64.urlsafe_b64encode(orjson.dumps(written)).decode()
    with Client(server.url, KEY) as client:
        for forged in ("v1." + plain, "v2." + plain):
            with pytest.raises(MnemostreamError) as refused:
                client.recall("anything", k=1, after=forged)
            assert (refused.value.status, refused.value.field) == (422, "after"), server.log()
            assert "ends at" not in str(refused.value.detail)
        memory_id = client.remember("a fact after the refusal", embedding=axis(0))
        assert (
            client.get(memory_id, track=False) is not None
        )  # the real token still waits as it should


def wait_preloaded(server: Server) -> None:
    """Until the server's hot cache has read the whole collection (60 s at most)."""
    deadline = time.monotonic() + 60
    while not re.search(r"hot cache: \d+ rows", server.log()):
        assert time.monotonic() < deadline, server.log()
        time.sleep(0.2)


class Serving(Protocol):
    url: str


def metric(server: Serving, name: str) -> float:
    """The value of the sample ``name`` (with its labels) on ``server``'s ``GET /metrics``."""
    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    found = re.search(rf"^{re.escape(name)} ([0-9.e+]+)$", text, re.MULTILINE)
    assert found is not None, text[-2000:]
    return float(found.group(1))


def test_a_tenant_written_after_start_is_recalled_from_the_hot_cache_without_a_milvus_load(
    server: Server,
) -> None:
    """Milvus Lite is the server's own: once the preload read the whole (empty) collection, the
    rows the worker writes for a tenant start its block, and the first recall reads nothing
    back from Milvus (on Lite that read is a pass over the whole collection).
    """
    wait_preloaded(server)
    with Client(server.url, KEY) as client:
        written = [client.remember(f"note {i}", embedding=axis(i)) for i in range(3)]
        for i, memory_id in enumerate(written):
            found = client.recall(vector=axis(i), k=1, track=False)
            assert [m.memory_id for m in found] == [memory_id], server.log()
    assert metric(server, "mnemostream_hot_cache_loads") == 0, server.log()
    assert metric(server, 'mnemostream_vector_searches_total{source="hot"}') >= 3
    assert metric(server, "mnemostream_hot_cache_rows") == 3


def test_the_worker_finds_what_a_fact_supersedes_in_the_hot_cache(server: Server) -> None:
    """The supersession check's nearest memories come from the ranker's cache in the worker's
    process (on Lite a Milvus search is a pass over the whole collection, once per batch), and
    the older fact is still found and superseded.
    """
    wait_preloaded(server)
    t1 = datetime(2026, 3, 1, tzinfo=UTC)
    t2 = t1 + timedelta(days=30)
    with Client(server.url, KEY) as client:
        osaka = client.remember("Alice lives in Osaka.", embedding=axis(0), at=t1)
        nearby = [0.9, 0.1] + [0.0] * (DIM - 2)
        lisbon = client.remember("Alice lives in Lisbon now.", embedding=nearby, at=t2)
        got = client.get_many([osaka, lisbon])
        assert got[osaka].superseded_by == lisbon, server.log()
    searches = httpx.get(f"{server.url}/metrics", timeout=10).text
    name = "mnemostream_worker_supersession_searches_total"
    assert metric(server, f'{name}{{source="hot"}}') >= 1, searches
    assert f'{name}{{source="milvus"}}' not in searches


def test_consolidation_reads_a_tenant_the_hot_cache_holds_from_it(server: Server) -> None:
    """Consolidation's read of a tenant's rows comes from the ranker's cache in the worker's
    process (on Lite a tenant's query is a pass over the whole collection, once per tenant per
    consolidation), and the plan still finds the near duplicates.
    """
    wait_preloaded(server)
    near = [0.0, 0.0, 1.0, 0.2] + [0.0] * (DIM - 4)  # cosine 0.981 to axis(2)
    with Client(server.url, KEY) as client:
        first = client.remember("Alice prefers Python", embedding=axis(2))
        second = client.remember("Alice likes Python best", embedding=near)
        client.remember("An unrelated fact", embedding=axis(5))
        found = client.recall(vector=axis(2), k=2, track=False)
        assert {m.memory_id for m in found} == {first, second}, server.log()
    # "*" from a shell that was not given the server's tenants file: the CLI knows no tenant
    # and takes the reports that come
    env = {k: v for k, v in server.env.items() if k != "MNEMO_TENANTS_FILE"}
    printed = run_cli(env, "consolidate", "--tenant", "*", "--dry-run")
    merges = [line.split() for line in printed.splitlines() if line.strip().startswith("merge")]
    assert [(m[1], m[3].rstrip(":")) for m in merges] in (
        [(first, second)],
        [(second, first)],
    ), printed
    reads = httpx.get(f"{server.url}/metrics", timeout=10).text
    name = "mnemostream_worker_consolidation_reads_total"
    assert metric(server, f'{name}{{source="hot"}}') == 1, reads
    assert f'{name}{{source="milvus"}}' not in reads
