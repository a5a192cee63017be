"""Erasure that holds against the log: `python -m server` on a real broker (Milvus Lite).

Writes go through the HTTP API sealed under per-write data keys (storage.sealing); erasing a user
(and one memory) destroys those keys. The proof: before and after, no topic of the deployment
(the replayable log, the worker's changelogs, audit, dead letters) holds the words in the clear;
after erasure the API and Milvus no longer have the memories, the broker's compaction drops the
keys themselves, no key left on the keys topic opens any sealed copy, no file of Milvus Lite holds
the words once the collection is rebuilt from the tables (Lite keeps deleted rows in its files
until then), a replay of the whole log into a new worker brings none of them back, and another
user's memory is untouched.
"""

from __future__ import annotations

import asyncio
import base64
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import orjson
import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest
from aiokafka.admin import AIOKafkaAdminClient

from mnemostream import Client, MnemostreamError
from storage.changelogs import read_changelog
from storage.sealing import KeyRing, SealError, unseal
from tests.infra import ROOT
from tests.integration.harness import (
    Stack,
    WorkerProcess,
    eventually,
    produce,
    read_all,
    table_states,
)
from tests.integration.test_end_to_end import DIM, KEY, e, serve
from tests.integration.test_streams import T0

pytestmark = pytest.mark.integration
ANN_WORDS = ("PIN is 4711", "walks the dog at dawn", "the office wifi is zebra-99")
BOB_WORDS = "PIN is 1234"


@pytest.fixture
def stack(kafka_bootstrap: str, tmp_path: Path) -> Stack:
    return Stack(kafka_bootstrap, str(tmp_path / "replay.db"), tmp_path, ("acme",), dim=DIM)


def deployment_topics(stack: Stack) -> list[str]:
    """Every topic of this deployment: ours (prefixed) and the worker's changelogs."""

    async def run() -> list[str]:
        admin = AIOKafkaAdminClient(bootstrap_servers=stack.bootstrap)
        await admin.start()
        try:
            return sorted(
                t for t in await admin.list_topics() if t.startswith((stack.name, stack.app_id))
            )
        finally:
            await admin.close()

    return asyncio.run(run())


def clear_words_in_topics(stack: Stack, words: tuple[str, ...]) -> dict[str, list[str]]:
    """The topics whose records (keys or values) contain any of ``words``, and which."""
    found: dict[str, list[str]] = {}
    for topic in deployment_topics(stack):
        for key, value in read_all(stack.bootstrap, topic):
            for word in words:
                if word.encode() in (key or b"") + value:
                    found.setdefault(topic, []).append(word)
    return found


def sealed_copies(stack: Stack, memory_ids: set[str]) -> list[tuple[str, dict[str, str]]]:
    """(memory id, sealed value) of every sealed write and document of ``memory_ids``."""
    copies = []
    for topic in (stack.topic("memory-writes"), f"{stack.app_id}-documents-changelog"):
        for key, value in read_all(stack.bootstrap, topic):
            memory_id = (key or b"").decode().partition("/")[2]
            record = orjson.loads(value)
            if memory_id in memory_ids and "sealed" in record:
                copies.append((memory_id, record["sealed"]))
    return copies


def live_keys(stack: Stack) -> dict[str, bytes]:
    """The keys topic's data keys now on the broker: record key -> secret."""
    return {
        key.decode(): base64.b64decode(orjson.loads(value)["secret"])
        for key, value in read_all(stack.bootstrap, stack.topic("memory-keys"))
        if key is not None and key.count(b"/") == 2
    }


def words_in_lite(path: Path, words: tuple[str, ...]) -> set[str]:
    """The ``words`` found in any file of a Milvus Lite directory: its parquet files' text
    columns (compressed on disk) and every other file's bytes.
    """
    found = set()
    for file in path.rglob("*"):
        if not file.is_file():
            continue
        if file.suffix == ".parquet":
            table = pq.read_table(file)
            text = " ".join(
                str(v) for name in table.column_names for v in table.column(name).to_pylist()
            ).encode()
        else:
            text = file.read_bytes()
        found |= {w for w in words if w.encode() in text}
    return found


def test_erased_memories_cannot_be_read_back_from_any_topic_table_or_milvus(
    stack: Stack, tmp_path: Path
) -> None:
    # one-second key segments: the broker may compact an erased key away a second after it
    serving = serve(stack, tmp_path, MNEMO_KEYS_COMPACTION_LAG_MS="1000")
    server = next(serving)
    try:
        erased, bob, expected = erase_through_the_api(server, stack)
    finally:
        next(serving, None)  # stops the server

    # Milvus Lite keeps deleted rows in its files until the collection is dropped: the rebuild
    # from the tables (README, "Erasure") leaves only what the tables still hold
    lite = tmp_path / "milvus.db"
    env = {**stack.env(), "MNEMO_MILVUS_URI": str(lite), "MNEMO_MILVUS_PARTITION_KEY": "true"}
    rebuilt = subprocess.run(
        [sys.executable, "-m", "streams", "rebuild", "--drop"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert rebuilt.returncode == 0, rebuilt.stderr[-3000:]
    assert words_in_lite(lite, (*ANN_WORDS, BOB_WORDS)) == {BOB_WORDS}
    replay_brings_none_back(stack, tmp_path, erased, bob, expected)


def erase_through_the_api(server: str, stack: Stack) -> tuple[set[str], str, set[str]]:
    """Write, erase and check through the API and the topics; (erased ids, bob's id, the table
    keys a replay must restore).
    """
    with Client(server, KEY) as client:
        ann = [
            client.remember(
                f"Ann: {ANN_WORDS[0]}",
                user_id="ann",
                embedding=e(1.0, 0.1),
                at=T0,
                metadata={"said": ANN_WORDS[1]},
            ),
            client.remember(f"Ann {ANN_WORDS[1]}", user_id="ann", embedding=e(0.9, 0.3), at=T0),
        ]
        shared = client.remember(f"Note: {ANN_WORDS[2]}", embedding=e(0.8, 0.5), at=T0)
        bob = client.remember(f"Bob: {BOB_WORDS}", user_id="bob", embedding=e(0.7, 0.6), at=T0)
        found = client.recall(vector=e(1.0, 0.1), k=10, at=T0, track=False)
        assert {m.memory_id for m in found} == {*ann, shared, bob}
        assert {m.content for m in found} >= {f"Ann: {ANN_WORDS[0]}", f"Bob: {BOB_WORDS}"}
        erased = set(ann) | {shared}
        # sealed from the start: no topic ever held the words in the clear
        assert clear_words_in_topics(stack, (*ANN_WORDS, BOB_WORDS)) == {}
        assert sealed_copies(stack, erased)

        assert sorted(client.erase_user("ann")) == sorted(ann)
        # a PATCH of its tags copies its words into a new version, which its erasure erases too
        # (else the old version, reinstated, or the new one would still hold them)
        copied = client.update(shared, tags=["noted"])
        erased.add(copied)
        assert client.forget(copied, erase=True) >= 2  # sealed: the keys of both destroyed
        with pytest.raises(MnemostreamError) as gone:  # no new version carries its words on
            client.update(shared, tags=["kept"])
        assert client.get(shared, track=False) is None  # not reinstated
        assert gone.value.status == 404
        found = client.recall(vector=e(1.0, 0.1), k=10, at=T0, track=False)
        assert [m.memory_id for m in found] == [bob]
        assert all(client.get(m, track=False) is None for m in erased)
        assert client.get_many([*erased, bob]).keys() == {bob}
        assert {m["memory_id"] for m in client.export()} == {bob}
        assert client.erase_user("ann") == []  # idempotent
        # the erasure markers (never compacted away) keep no user's id once the erasure is done
        markers = {
            key: value
            for key, value in read_all(stack.bootstrap, stack.topic("memory-keys"))
            if key is not None and key.count(b"/") == 1
        }  # the latest value of each, as compaction keeps it
        assert markers.keys() >= {f"acme/{m}".encode() for m in erased}
        assert [v for v in markers.values() if v is None or "users" in orjson.loads(v)] == []

        # the broker compacts the tombstoned keys away (each new write appends a key record,
        # which rolls the keys topic's one-second segments)
        def keys_gone() -> bool:
            client.remember(f"filler {time.monotonic()}", embedding=e(0.1, 1.0), at=T0)
            return not any(k.split("/")[1] in erased for k in live_keys(stack))

        eventually(keys_gone, 180, "erased keys compacted away")
        secrets = list(live_keys(stack).values())
        copies = sealed_copies(stack, erased)
        assert copies  # the sealed records stay in the log: they are only unreadable
        for memory_id, sealed in copies:
            for secret in secrets:
                with pytest.raises(SealError):
                    unseal(sealed, secret, "acme", memory_id)
        assert clear_words_in_topics(stack, ANN_WORDS) == {}
        states = table_states(stack)
        assert all(states[f"acme/{m}"].purged for m in erased)
        documents = documents_now(stack.bootstrap, stack.app_id)
        assert f"acme/{bob}" in documents
        assert not erased & {k.partition("/")[2] for k in documents}  # the purge dropped them
        return erased, bob, set(states) - {f"acme/{m}" for m in erased}


def replay_brings_none_back(
    stack: Stack, tmp_path: Path, erased: set[str], bob: str, expected: set[str]
) -> None:
    """A replay of the whole log into a new worker brings none of ``erased`` back."""
    replay = Stack(
        stack.bootstrap,
        str(tmp_path / "replay.db"),
        tmp_path,
        ("acme",),
        dim=DIM,
        name=stack.name,
        app_id=f"{stack.name}-replay",
    )
    worker = WorkerProcess(replay, "replay").start()
    try:
        # everything but the erased memories comes back (fillers included), and nothing more
        eventually(lambda: set(table_states(replay)) == expected, 180, "replayed", worker)
        assert f"acme/{bob}" in documents_now(stack.bootstrap, replay.app_id)
        assert not erased & {
            k.partition("/")[2] for k in documents_now(stack.bootstrap, replay.app_id)
        }
    finally:
        worker.stop()
    store = replay.store()  # the replay's Milvus, once its worker has let go of the Lite file
    try:
        assert store.get("acme", [*erased, bob]).keys() == {bob}
    finally:
        store.close()


def documents_now(bootstrap: str, app_id: str) -> set[str]:
    """The keys the worker's documents table holds now (its changelog, tombstones applied)."""
    latest = asyncio.run(read_changelog(bootstrap, f"{app_id}-documents-changelog"))
    return {k.decode() for k in latest}


SUMMARISED = {  # three similar semantic memories: consolidation summarises them
    "c1": ([0, 0, 0, 0, 1.0], "Standup is at nine (PIN 4711)."),
    "c2": ([0, 0, 0, 0, 1.0, 0.5], "Standup ran long today."),
    "c3": ([0, 0, 0, 0, 1.0, 0, 0.5], "We talked about standup notes."),
}


def test_erasing_a_memory_erases_the_summaries_made_from_it(stack: Stack, tmp_path: Path) -> None:
    """A summary quotes its sources' sentences: erasing one source left them served, and
    readable from the log under the summary's own key.
    """
    serving = serve(stack, tmp_path)
    server = next(serving)
    try:
        with Client(server, KEY) as client:
            for i, (memory_id, (head, text)) in enumerate(SUMMARISED.items()):
                at = T0 + timedelta(seconds=i)
                client.remember(
                    text, memory_id=memory_id, embedding=e(*head), memory_type="semantic", at=at
                )
            assert all(
                client.get(m, track=False) is not None for m in SUMMARISED
            )  # applied: planned from
            request = {"v": 1, "tenant_id": "acme", "at": (T0 + timedelta(hours=1)).isoformat()}
            request["request_id"] = "summarise"
            produce(
                stack.bootstrap, stack.topic("consolidation"), [(b"acme", orjson.dumps(request))]
            )

            def summary_id() -> str | None:
                for _, value in read_all(stack.bootstrap, stack.topic("audit")):
                    report = orjson.loads(value)
                    if report.get("request_id") == "summarise" and report.get("decisions"):
                        made = [d for d in report["decisions"] if d["kind"] == "summarise"]
                        return str(made[0]["target"])
                return None

            eventually(lambda: summary_id() is not None, 60, "the summary planned")
            summary = summary_id()
            assert summary is not None
            eventually(
                lambda: client.get(summary, track=False) is not None, 60, "the summary written"
            )
            assert "PIN 4711" in client.get(summary, track=False).content  # type: ignore[union-attr]
            assert sealed_copies(stack, {summary})  # sealed under a key of its own
            later = T0 + timedelta(hours=2)
            found = client.recall(vector=e(0, 0, 0, 0, 1.0), k=10, at=later, track=False)
            assert {m.memory_id for m in found} == {summary, *SUMMARISED}

            def states() -> dict[str, tuple[str, str | None]]:
                got = {m: client.get(m, track=False) for m in ("c2", "c3")}
                return {m: (g.state, g.merged_into) for m, g in got.items() if g is not None}

            archived = ("archived", summary)
            eventually(lambda: states() == {"c2": archived, "c3": archived}, 60, "compressed")

            with httpx.Client(base_url=server, headers={"Authorization": f"Bearer {KEY}"}) as http:
                reply = http.delete("/v1/memories/c1", params={"erase": "true"})
                assert reply.status_code == 200, reply.text
                # found by the erasure in Milvus, or erased by the worker first: when the erasure
                # comes while the summary's batch still runs, the worker meets its markers there
                assert reply.json()["summaries_erased"] in ([summary], [])
                after = {"after": reply.json()["token"]}
                assert http.get(f"/v1/memories/{summary}", params=after).status_code == 404
            found = client.recall(vector=e(0, 0, 0, 0, 1.0), k=10, at=later, track=False)
            assert {m.memory_id for m in found} == {"c2", "c3"}
            # archived into the summary, which is no more: active again
            active = ("active", None)
            eventually(lambda: states() == {"c2": active, "c3": active}, 60, "sources restored")
            ring = KeyRing()
            for key, value in read_all(stack.bootstrap, stack.topic("memory-keys")):
                ring.apply(key, value)
            assert ring.erased_memory("acme", summary)
            for memory_id, sealed in sealed_copies(stack, {summary}):
                assert ring.is_erased("acme", memory_id, sealed["key_id"])
    finally:
        next(serving, None)


def test_a_purged_duplicate_leaves_no_key_to_its_words_once_its_survivor_is_erased(
    stack: Stack, tmp_path: Path
) -> None:
    """A duplicate consolidation merged into a survivor is purged 30 days later; its key stayed
    live, and erasing the survivor then (no row left to link them) left the duplicate's
    sealed write readable in the log for good.
    """
    words = "the vault code is 8812"
    serving = serve(stack, tmp_path)
    server = next(serving)

    def consolidate(request_id: str, at: datetime, strategies: list[str]) -> dict[str, Any]:
        body = {"v": 1, "tenant_id": "acme", "at": at.isoformat(), "request_id": request_id}
        body["strategies"] = strategies
        produce(stack.bootstrap, stack.topic("consolidation"), [(b"acme", orjson.dumps(body))])

        def report() -> dict[str, Any] | None:
            for _, value in read_all(stack.bootstrap, stack.topic("audit")):
                found = orjson.loads(value)
                if found.get("request_id") == request_id and "decisions" in found:
                    return dict(found)
            return None

        eventually(lambda: report() is not None, 60, f"consolidation {request_id}")
        found = report()
        assert found is not None
        return found

    def ring() -> KeyRing:
        keys = KeyRing()
        for key, value in read_all(stack.bootstrap, stack.topic("memory-keys")):
            keys.apply(key, value)
        return keys

    try:
        with Client(server, KEY) as client:
            for i, memory_id in enumerate(("d1", "d2")):
                at = T0 + timedelta(seconds=i)
                client.remember(words, memory_id=memory_id, embedding=e(1.0), at=at)
            assert all(client.get(m, track=False) is not None for m in ("d1", "d2"))
            merge = consolidate("dedup", T0 + timedelta(hours=1), ["exact_dedup"])
            ((survivor, duplicate),) = [
                (d["target"], d["sources"][0]) for d in merge["decisions"] if d["kind"] == "merge"
            ]
            sealed = dict(sealed_copies(stack, {"d1", "d2"}))
            purge_at = T0 + timedelta(days=31, hours=2)
            purge = consolidate("purge", purge_at, ["purge"])
            assert [(d["kind"], d["target"]) for d in purge["decisions"]] == [("purge", duplicate)]
            dup_key = sealed[duplicate]["key_id"]
            eventually(lambda: ring().is_erased("acme", duplicate, dup_key), 60, "its key erased")
            assert not ring().is_erased("acme", survivor, sealed[survivor]["key_id"])
            assert (
                client.get(survivor, track=False) is not None
            )  # the survivor is served, words and all
            with httpx.Client(base_url=server, headers={"Authorization": f"Bearer {KEY}"}) as http:
                reply = http.delete(f"/v1/memories/{survivor}", params={"erase": "true"})
                assert reply.status_code == 200, reply.text
        keys = ring()
        copies = sealed_copies(stack, {"d1", "d2"})
        assert {m for m, _ in copies} == {"d1", "d2"}
        for memory_id, copy in copies:  # no key left on the topic opens the words
            assert keys.data_key("acme", memory_id, copy["key_id"]) is None
    finally:
        next(serving, None)
