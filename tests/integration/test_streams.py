"""The stream worker on a real Kafka broker and a real Milvus server."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import random
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
from aiokafka.admin import AIOKafkaAdminClient

from memcore import Lifecycle, Purge, Retire
from ranker.view import StateView
from storage import MilvusStore, codec
from storage.changelogs import (
    ChangelogStream,
    Tables,
    changelog_topic,
    read_changelog,
    read_changelog_to,
)
from storage.milvus import ANY_STATE
from storage.records import decision_value
from storage.rows import LIVE_FIELDS, live_values
from streams.rebuild import catch_up
from tests.infra import free_port
from tests.integration.harness import (
    Stack,
    WorkerProcess,
    dead_letters,
    eventually,
    produce,
    read_all,
    table_states,
)

pytestmark = pytest.mark.integration

T0 = datetime(2026, 3, 1, 12, tzinfo=UTC)


def at(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat()


def vector(rng: random.Random, dim: int) -> list[float]:
    return [rng.uniform(-1, 1) for _ in range(dim)]


def write_msg(
    tenant: str, memory_id: str, vec: list[float] | None, **kw: object
) -> tuple[bytes, bytes]:
    # explicit importance: plain text scores 0 by the rules and would fade at its first access
    doc = {
        "v": 1,
        "tenant_id": tenant,
        "memory_id": memory_id,
        "content": f"memory {memory_id} of {tenant}",
        "at": at(0),
        "importance": 0.5,
    }
    if vec is not None:
        doc["embedding"] = vec
    doc.update(kw)
    doc = {k: v for k, v in doc.items() if v is not None}
    return f"{tenant}/{memory_id}".encode(), orjson.dumps(doc)


def access_msg(tenant: str, memory_id: str, seconds: float, kind: str) -> tuple[bytes, bytes]:
    doc = {"v": 1, "tenant_id": tenant, "memory_id": memory_id, "at": at(seconds), "kind": kind}
    return f"{tenant}/{memory_id}".encode(), orjson.dumps(doc)


def milvus_counts(
    store: MilvusStore, tenants: tuple[str, ...]
) -> dict[tuple[str, str], tuple[int, int]]:
    out = {}
    for tenant in tenants:
        for row in store.query(tenant, ANY_STATE):
            out[(tenant, row.memory_id)] = (row.access_count, row.recall_count)
    return out


def table_counts(stack: Stack) -> dict[tuple[str, str], tuple[int, int]]:
    return {
        (s.tenant_id, s.memory_id): (s.access_count, s.recall_count)
        for s in table_states(stack).values()
    }


_ACCESS, _RECALL = LIVE_FIELDS.index("access_count"), LIVE_FIELDS.index("recall_count")


def view_live(stack: Stack, tenants: tuple[str, ...]) -> dict[tuple[str, str], tuple[Any, ...]]:
    """Every memory's live fields as the ranker's state view holds them: a real
    :class:`StateView` that follows the worker's changelog from the beginning and caught up.
    """

    async def run() -> dict[tuple[str, str], tuple[Any, ...]]:
        view = StateView(stack.bootstrap, changelog_topic(stack.app_id, "memories"))
        await view.start()
        try:
            assert await view.caught_up(60)
            return {(t, m): live for t in tenants for m, live in view.tenant(t).items()}
        finally:
            await view.stop()

    return asyncio.run(run())


def seeded_view_live(
    stack: Stack, tenants: tuple[str, ...], latest: dict[bytes, bytes], upto: dict[int, int]
) -> tuple[dict[tuple[str, str], tuple[Any, ...]], list[tuple[Any, ...]]]:
    """What a :class:`StateView` seeded with a read of the changelog (``python -m server``'s
    start) holds once caught up, and every value it told its listeners.
    """

    async def run() -> tuple[dict[tuple[str, str], tuple[Any, ...]], list[tuple[Any, ...]]]:
        view = StateView(stack.bootstrap, changelog_topic(stack.app_id, "memories"))
        told: list[tuple[Any, ...]] = []
        view.listeners.append(lambda _t, _m, values: told.append(tuple(values or ())))
        view.seed(latest, upto)
        await view.start()
        try:
            assert await view.caught_up(60)
            return {(t, m): live for t in tenants for m, live in view.tenant(t).items()}, told
        finally:
            await view.stop()

    return asyncio.run(run())


def view_counts(stack: Stack, tenants: tuple[str, ...]) -> dict[tuple[str, str], tuple[int, int]]:
    return {m: (live[_ACCESS], live[_RECALL]) for m, live in view_live(stack, tenants).items()}


def assert_counts(
    stack: Stack,
    store: MilvusStore,
    tenants: tuple[str, ...],
    expected: dict[tuple[str, str], tuple[int, int]],
    worker: WorkerProcess,
) -> None:
    """Wait until the state view holds every expected access, then require exact counts there
    and in the table. Milvus rows are rewritten only when an access changes a served field (a
    promotion) or a recovery resyncs them: their counters are snapshots, never ahead.
    """
    total = sum(a for a, _ in expected.values())
    eventually(
        lambda: sum(a for a, _ in view_counts(stack, tenants).values()) == total,
        240,
        f"all {total:,} accesses in the state view",
        worker,
    )
    assert view_counts(stack, tenants) == expected
    assert table_counts(stack) == expected
    # the view rebuilt from the compacted changelog equals the worker's table, field by field
    table = {
        (s.tenant_id, s.memory_id): live_values(s)
        for s in table_states(stack).values()
        if not s.purged  # left the serving store: the view drops it
    }
    assert view_live(stack, tenants) == table
    stored = milvus_counts(store, tenants)  # snapshots: never ahead of the table
    assert all(stored[m][0] <= expected[m][0] for m in expected)


def plan_accesses(
    rng: random.Random, memories: list[tuple[str, str]], n: int
) -> tuple[list[tuple[bytes, bytes]], dict[tuple[str, str], tuple[int, int]]]:
    accesses: Counter[tuple[str, str]] = Counter()
    recalls: Counter[tuple[str, str]] = Counter()
    messages = []
    for i in range(n):
        tenant, memory_id = rng.choice(memories)
        kind = rng.choice(["recall", "get", "explicit"])
        accesses[(tenant, memory_id)] += 1
        recalls[(tenant, memory_id)] += kind == "recall"
        messages.append(access_msg(tenant, memory_id, 60 + i * 0.01, kind))
    expected = {m: (accesses[m], recalls[m]) for m in memories}
    return messages, expected


def test_counts_are_exact_in_table_and_milvus(
    make_stack: Callable[..., Stack], workers: list[WorkerProcess]
) -> None:
    tenants = tuple(f"tenant{i}" for i in range(10))
    stack = make_stack(tenants)
    rng = random.Random(7)
    memories = [(t, f"m{j}") for t in tenants for j in range(100)]
    worker = WorkerProcess(stack).start()
    workers.append(worker)
    writes = [write_msg(t, m, vector(rng, stack.dim), importance=0.5) for t, m in memories]
    accesses, expected = plan_accesses(rng, memories, 10_000)
    produce(stack.bootstrap, stack.topic("memory-writes"), writes)
    changelog = changelog_topic(stack.app_id, "memories")
    eventually(
        lambda: len(asyncio.run(read_changelog(stack.bootstrap, changelog))) == len(memories),
        120,
        "every write in the changelog",
        worker,
    )
    # what python -m server's start-up reads, before any access
    latest, upto = asyncio.run(read_changelog_to(stack.bootstrap, changelog))
    keys_topic = stack.topic("memory-keys")
    tables = asyncio.run(Tables.read(stack.bootstrap, stack.app_id, keys_topic))
    produce(stack.bootstrap, stack.topic("access-events"), accesses)
    store = stack.store()
    assert_counts(stack, store, tenants, expected, worker)
    # a start-up's catch-up rounds: the tables read on hold what changed since, and say what
    caught, changed = asyncio.run(tables.since(stack.bootstrap, stack.app_id, keys_topic))
    assert caught.memories == asyncio.run(read_changelog(stack.bootstrap, changelog))
    assert changed >= {f"{t}/{m}".encode() for (t, m), (n, _) in expected.items() if n}
    assert changed <= set(caught.memories)
    assert asyncio.run(caught.since(stack.bootstrap, stack.app_id, keys_topic))[1] == set()
    # a worker starting beside this one rewrites Milvus from that older snapshot (every count 0):
    # its catch-up rounds leave each row as the tables hold it now
    catch_up(
        store,
        tables,
        always=True,
        refresh=lambda t: asyncio.run(t.since(stack.bootstrap, stack.app_id, keys_topic)),
    )
    assert milvus_counts(store, tenants) == expected
    assert dead_letters(stack) == []
    # a view seeded with that read and following the topic from where it stopped equals the
    # table, and replayed nothing before it (a replay would tell each write's state first)
    seeded, told = seeded_view_live(stack, tenants, latest, upto)
    table = {
        (s.tenant_id, s.memory_id): live_values(s)
        for s in table_states(stack).values()
        if not s.purged  # left the serving store: the view drops it
    }
    assert seeded == table
    assert told
    # a read from where that one stopped holds every memory an access changed since, each with
    # its last value (a ranker's fill reads the documents again so)
    since, now = asyncio.run(read_changelog_to(stack.bootstrap, changelog, start=upto))
    assert asyncio.run(read_changelog_to(stack.bootstrap, changelog, start=now)) == ({}, now)
    # the same read streamed batch by batch (a ranker's fill): every record since, in offset
    # order per key, ending where the async read ended
    streamed = ChangelogStream(stack.bootstrap, changelog, start=upto)
    last = {key: value for batch in streamed for key, value in batch}
    assert (last, streamed.ends) == (since, now)
    assert not any(ChangelogStream(stack.bootstrap, changelog, start=now))  # nothing since
    accessed = {f"{t}/{m}".encode() for (t, m), (n, _) in expected.items() if n}
    assert set(since) >= accessed
    for key, value in since.items():
        tenant, _, memory_id = key.decode().partition("/")
        assert live_values(codec.decode(value)) == table[(tenant, memory_id)]
    assert all(values[_ACCESS] >= 1 for values in told)
    # every memory was written once and each tenant holds exactly its own
    for tenant in tenants:
        assert {r.memory_id for r in store.query(tenant, ANY_STATE)} == {
            f"m{j}" for j in range(100)
        }


def test_a_purged_memory_leaves_the_view_and_milvus_while_the_table_keeps_its_tombstone(
    make_stack: Callable[..., Stack], workers: list[WorkerProcess]
) -> None:
    """The worker keeps a purged memory's state (idempotence); the ranker's state view, rebuilt
    from the same changelog, drops it as Milvus does. The comparison of view and table above
    skips purged states, but purges nothing: here two of four memories are deleted and purged
    as ``DELETE ?purge=true`` does it.
    """
    stack = make_stack(("acme",))
    rng = random.Random(3)
    workers.append(worker := WorkerProcess(stack).start())
    writes = [write_msg("acme", f"m{i}", vector(rng, stack.dim)) for i in range(4)]
    produce(stack.bootstrap, stack.topic("memory-writes"), writes)
    gone = T0 + timedelta(seconds=5)
    events = (Retire(gone, Lifecycle.DELETED, "deleted through the API"), Purge(gone, "purged"))
    purges = [
        (f"acme/{m}".encode(), orjson.dumps(decision_value("acme", m, event)))
        for m in ("m1", "m3")
        for event in events
    ]
    produce(stack.bootstrap, stack.topic("memory-writes"), purges)
    eventually(
        lambda: sum(s.purged for s in table_states(stack).values()) == 2,
        120,
        "two purges in the table",
        worker,
    )
    states = table_states(stack).values()
    assert sorted(s.memory_id for s in states if s.purged) == ["m1", "m3"]
    kept = {(s.tenant_id, s.memory_id): live_values(s) for s in states if not s.purged}
    assert sorted(kept) == [("acme", "m0"), ("acme", "m2")]
    assert view_live(stack, ("acme",)) == kept
    store = stack.store()
    eventually(
        lambda: sorted(r.memory_id for r in store.query("acme", ANY_STATE)) == ["m0", "m2"],
        60,
        "the purged rows out of Milvus",
        worker,
    )
    assert dead_letters(stack) == []


def test_an_update_whose_version_was_dead_lettered_supersedes_nothing(
    make_stack: Callable[..., Stack], workers: list[WorkerProcess]
) -> None:
    """An update is one write naming the memory it ``supersedes``
    (``ranker.service.RecallService.update``); the worker sends that memory's ``supersede`` once
    the version is applied. A version it dead-letters (here a vector of the wrong size) left the
    memory superseded by a memory that never was when the API produced the ``supersede`` itself:
    now m0 stays current, while m2, whose version p2 was applied, is superseded by it, in the
    table and in Milvus.
    """
    stack = make_stack(("acme",))
    rng = random.Random(11)
    workers.append(worker := WorkerProcess(stack).start())
    old = [write_msg("acme", m, vector(rng, stack.dim)) for m in ("m0", "m2")]
    versions = [
        write_msg("acme", "p0", vector(rng, stack.dim + 1), at=at(30), supersedes="m0"),
        write_msg("acme", "p2", vector(rng, stack.dim), at=at(30), supersedes="m2"),
    ]
    produce(stack.bootstrap, stack.topic("memory-writes"), old + versions)

    def settled() -> bool:
        states = {s.memory_id: s for s in table_states(stack).values()}
        return "p2" in states and states["p2"].predecessors == ("m2",)

    eventually(settled, 120, "m2 superseded, recorded by p2", worker)
    states = {s.memory_id: s for s in table_states(stack).values()}
    assert "p0" not in states
    assert (states["m0"].valid_to, states["m0"].superseded_by) == (None, None)
    assert (states["m2"].valid_to, states["m2"].superseded_by) == (T0 + timedelta(seconds=30), "p2")
    decided = [
        (k, orjson.loads(v)["decision"])
        for k, v in read_all(stack.bootstrap, stack.topic("memory-writes"))
        if "decision" in orjson.loads(v)
    ]
    assert (b"acme/m2", "supersede") in decided
    assert [k for k, _ in decided if k == b"acme/m0"] == []
    assert [d["field"] for d in dead_letters(stack)] == ["embedding"]
    store = stack.store()
    eventually(
        lambda: (
            {r.memory_id: r.superseded_by for r in store.query("acme", ANY_STATE)}
            == {"m0": "", "m2": "p2", "p2": ""}
        ),
        60,
        "Milvus rows as the table",
        worker,
    )


def test_malformed_events_go_to_dead_letter_and_nothing_else_is_lost(
    make_stack: Callable[..., Stack], workers: list[WorkerProcess]
) -> None:
    stack = make_stack(("acme",))
    rng = random.Random(1)
    workers.append(worker := WorkerProcess(stack, metrics_port=free_port()).start())
    good = [write_msg("acme", f"ok{i}", vector(rng, stack.dim)) for i in range(5)]
    bad_writes = [
        (b"acme/x1", b"not json at all"),
        write_msg("acme", "x2", vector(rng, stack.dim + 1)),
        write_msg("globex", "x3", vector(rng, stack.dim)),
        write_msg("acme", "x4", vector(rng, stack.dim), at="2026-03-01T12:00:00"),
        write_msg("acme", "x5", vector(rng, stack.dim), importance=1.5),
        write_msg("acme", "x6", vector(rng, stack.dim), surprise=True),
        write_msg("acme", "x7", vector(rng, stack.dim), content="x" * 20_000),
        (
            b"acme/x8",
            b'{"v": 1, "tenant_id": "acme", "content": "n", "at": "2026-03-01T12:00:00Z", "importance": NaN}',
        ),
        write_msg("acme", "x9", vector(rng, stack.dim), memory_type="procedural"),
    ]
    produce(stack.bootstrap, stack.topic("memory-writes"), good[:3] + bad_writes + good[3:])
    bad_access = [
        access_msg("acme", "never-written", 5, "recall"),
        (
            b"acme/ok0",
            b'{"v": 1, "tenant_id": "acme", "memory_id": "ok0", '
            b'"at": "2026-03-01T12:00:00Z", "kind": "stare"}',
        ),
    ]
    good_access = [access_msg("acme", "ok0", 10, "recall"), access_msg("acme", "ok4", 11, "get")]
    produce(
        stack.bootstrap,
        stack.topic("access-events"),
        good_access[:1] + bad_access + good_access[1:],
    )
    eventually(
        lambda: len(dead_letters(stack)) == len(bad_writes) + len(bad_access),
        120,
        "dead letters",
        worker,
    )
    letters = dead_letters(stack)
    fields = sorted(d["field"] for d in letters)
    assert fields == sorted(
        [
            "$",
            "embedding",
            "tenant_id",
            "at",
            "importance",
            "surprise",
            "content",
            "$",
            "memory_type",
            "memory_id",
            "kind",
        ]
    )
    for letter in letters:
        assert letter["reason"].startswith(letter["field"])
        assert letter["topic"] in (stack.topic("memory-writes"), stack.topic("access-events"))
    originals = {v for _, v in bad_writes + bad_access}
    assert {base64.b64decode(d["payload"]) for d in letters} == originals
    store = stack.store()
    eventually(
        lambda: (
            view_counts(stack, ("acme",))
            == {
                ("acme", f"ok{i}"): ((1, 1) if i == 0 else (1, 0) if i == 4 else (0, 0))
                for i in range(5)
            }
        ),
        60,
        "the good writes and accesses, nothing more",
        worker,
        show=lambda: (view_counts(stack, ("acme",)), table_counts(stack)),
    )
    assert sorted(milvus_counts(store, ("acme",))) == [("acme", f"ok{i}") for i in range(5)]
    assert_worker_metrics(
        stack,
        worker,
        events={
            stack.topic("memory-writes"): len(good) + len(bad_writes),
            stack.topic("access-events"): len(good_access) + len(bad_access),
        },
        dead_letters={
            **{
                (stack.topic("memory-writes"), field): 2 if field == "$" else 1
                for field in ("$", "embedding", "tenant_id", "at", "importance", "content")
            },
            (stack.topic("memory-writes"), "memory_type"): 1,
            (stack.topic("memory-writes"), "other"): 1,  # "surprise": a name from the input
            (stack.topic("access-events"), "memory_id"): 1,
            (stack.topic("access-events"), "kind"): 1,
        },
        synced_memories=len(good),
    )
    assert worker.proc is not None
    assert worker.proc.poll() is None  # still running


def assert_worker_metrics(
    stack: Stack,
    worker: WorkerProcess,
    events: dict[str, int],
    dead_letters: dict[tuple[str, str], int],
    synced_memories: int,
) -> None:
    """Scrape the worker's ``GET /metrics``: every event counted once on its topic, every dead
    letter by source topic and field, Milvus syncs seen, and no lag once all is committed.
    """

    def by(name: str, *labels: str) -> dict[tuple[str, ...], float]:
        series = worker.metrics().get(name, {})
        return {tuple(dict(k)[label] for label in labels): v for k, v in series.items()}

    def counted() -> dict[str, float]:
        seen = by("mnemostream_worker_events_total", "topic")
        return {topic: seen.get((topic,), 0) for topic in events}

    def letters() -> dict[tuple[str, ...], float]:
        return by("mnemostream_worker_dead_letter_total", "topic", "field")

    eventually(lambda: counted() == events, 60, "events counted", worker, show=counted)
    eventually(lambda: letters() == dead_letters, 60, "dead letters counted", worker, show=letters)
    assert by("mnemostream_worker_batch_size_sum", "agent") == {
        ("writes",): events[stack.topic("memory-writes")],
        ("access",): events[stack.topic("access-events")],
    }
    assert by("mnemostream_worker_milvus_sync_seconds_count")[()] >= 1
    assert by("mnemostream_worker_milvus_rows_total", "operation")[("upsert",)] >= synced_memories
    consumed = (stack.topic("memory-writes"), stack.topic("access-events"))
    caught_up = {(t, str(p)): 0.0 for t in consumed for p in range(stack.partitions)}

    def lags() -> dict[tuple[str, ...], float]:
        lag = by("mnemostream_worker_consumer_lag", "topic", "partition")
        return {k: v for k, v in lag.items() if k[0] in consumed}

    eventually(lambda: lags() == caught_up, 60, "no lag once committed", worker, show=lags)


def hundred_memories(
    stack: Stack, tenants: tuple[str, ...], rng: random.Random, workers: list[WorkerProcess]
) -> tuple[WorkerProcess, MilvusStore, list[tuple[str, str]]]:
    """A first worker that has applied 50 written memories per tenant; it, the store, their keys."""
    memories = [(t, f"m{j}") for t in tenants for j in range(50)]
    first = WorkerProcess(stack, "first").start()
    workers.append(first)
    produce(
        stack.bootstrap,
        stack.topic("memory-writes"),
        [write_msg(t, m, vector(rng, stack.dim)) for t, m in memories],
    )
    store = stack.store()
    total = len(memories)
    eventually(
        lambda: sum(store.count(t, ANY_STATE) for t in tenants) == total, 120, "writes", first
    )
    return first, store, memories


def test_kill_9_mid_stream_loses_and_doubles_nothing(
    make_stack: Callable[..., Stack], workers: list[WorkerProcess]
) -> None:
    tenants = ("acme", "globex")
    stack = make_stack(tenants)
    rng = random.Random(3)
    first, store, memories = hundred_memories(stack, tenants, rng, workers)
    accesses, expected = plan_accesses(rng, memories, 6_000)
    produce(stack.bootstrap, stack.topic("access-events"), accesses)
    eventually(
        lambda: sum(a for a, _ in view_counts(stack, tenants).values()) > 0,
        120,
        "some accesses applied before the kill",
        first,
    )
    first.kill9()
    second = WorkerProcess(stack, "second").start()
    workers.append(second)
    assert_counts(stack, store, tenants, expected, second)


def test_replaying_the_topics_rebuilds_table_and_milvus(
    make_stack: Callable[..., Stack], workers: list[WorkerProcess]
) -> None:
    stack = make_stack(("acme",))
    rng = random.Random(5)
    memories = [("acme", f"m{j}") for j in range(30)]
    workers.append(worker := WorkerProcess(stack).start())
    produce(
        stack.bootstrap,
        stack.topic("memory-writes"),
        [write_msg(t, m, vector(rng, stack.dim)) for t, m in memories],
    )
    accesses, expected = plan_accesses(rng, memories, 500)
    produce(stack.bootstrap, stack.topic("access-events"), accesses)
    eventually(
        lambda: sum(a for a, _ in view_counts(stack, ("acme",)).values()) == 500,
        120,
        "first run",
        worker,
    )
    worker.stop()
    original = {s.memory_id: s for s in table_states(stack).values()}
    # a new app id: an empty table and collection, fed by the same topics from the beginning
    replay = Stack(
        stack.bootstrap,
        stack.milvus_uri,
        stack.workdir,
        stack.tenants,
        name=stack.name,
        app_id=f"{stack.app_id}r",
    )
    workers.append(again := WorkerProcess(replay).start())
    replay_store = replay.store()
    eventually(
        lambda: sum(a for a, _ in view_counts(replay, ("acme",)).values()) == 500,
        120,
        "replay",
        again,
    )
    again.stop()  # Milvus is synced before the changelog is flushed: read the table after a stop
    rebuilt = {s.memory_id: s for s in table_states(replay).values()}
    assert view_counts(replay, ("acme",)) == expected
    assert len(milvus_counts(replay_store, ("acme",))) == len(memories)  # every row rebuilt
    # same events, same state: only the source names in the applied offsets differ
    assert {k: dataclasses.replace(v, offsets=()) for k, v in rebuilt.items()} == {
        k: dataclasses.replace(v, offsets=()) for k, v in original.items()
    }
    assert all(s.state is Lifecycle.ACTIVE for s in rebuilt.values())


def test_writes_without_vectors_are_embedded_with_minilm(
    make_stack: Callable[..., Stack], workers: list[WorkerProcess]
) -> None:
    stack = make_stack(("acme",), dim=384, embedder="minilm")
    workers.append(worker := WorkerProcess(stack).start())
    texts = {
        "py": "Alice prefers Python for backend services",
        "py2": "For backend work Alice likes to use Python",
        "cook": "The soup needs more salt and a bay leaf",
    }
    produce(
        stack.bootstrap,
        stack.topic("memory-writes"),
        [write_msg("acme", m, None, content=t, importance=None) for m, t in texts.items()],
    )
    store = stack.store()
    eventually(lambda: store.count("acme", ANY_STATE) == 3, 180, "embedded writes", worker)
    hits = store.search("acme", [list(store.get("acme", ["py"])["py"].vector)], k=3)[0]
    assert [h.row.memory_id for h in hits][:2] == ["py", "py2"]
    assert hits[1].similarity > hits[2].similarity + 0.2
    norm = sum(x * x for x in hits[0].row.vector) ** 0.5
    assert norm == pytest.approx(1.0, abs=1e-3)
    states = table_states(stack)
    assert {s.importance_source.value for s in states.values()} == {"rules"}


def group_members(stack: Stack) -> int:
    """Members of the worker group once it is stable (4 partitions: each member holds some)."""

    async def run() -> int:
        admin = AIOKafkaAdminClient(bootstrap_servers=stack.bootstrap)
        await admin.start()
        try:
            (response,) = await admin.describe_consumer_groups([stack.app_id])
        finally:
            await admin.close()
        _, _, state, _, _, members, *_ = response.groups[0]
        return len(members) if state == "Stable" else -1

    return asyncio.run(run())


def test_two_workers_with_rebalances_mid_stream_count_exactly(
    make_stack: Callable[..., Stack], workers: list[WorkerProcess]
) -> None:
    tenants = ("acme", "globex")
    stack = make_stack(tenants)
    rng = random.Random(5)
    first, store, memories = hundred_memories(stack, tenants, rng, workers)
    accesses, expected = plan_accesses(rng, memories, 9_000)
    produce(stack.bootstrap, stack.topic("access-events"), accesses[:3_000])
    second = WorkerProcess(stack, "second").start()
    workers.append(second)
    eventually(lambda: group_members(stack) == 2, 120, "partitions shared by two workers", second)
    produce(stack.bootstrap, stack.topic("access-events"), accesses[3_000:6_000])
    eventually(
        lambda: sum(a for a, _ in view_counts(stack, tenants).values()) == 6_000,
        240,
        "applied by both",
        second,
    )
    first.stop()  # another rebalance: the second worker takes every partition
    eventually(lambda: group_members(stack) == 1, 120, "one worker left", second)
    produce(stack.bootstrap, stack.topic("access-events"), accesses[6_000:])
    assert_counts(stack, store, tenants, expected, second)
