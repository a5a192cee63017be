"""The writes agent's batch (``StreamWorker.apply_writes``) with in-memory tables and stand-in
services (the Faust wiring is tested in tests/integration): each write's vector is its own
content's, and a failing supersession check costs its tenant's decisions, never the batch's
records."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka.errors import KafkaTimeoutError

from memcore import Lifecycle, Policy, Purge, Retire, Succeeds, Supersede, SupersessionPolicy
from memcore.vectors import cosine
from storage import Filters, Hit, MemoryRow, StorageError
from storage.key_log import KeyLogError
from storage.records import (
    Limits,
    decision_value,
    decode_memory_event,
    encode_access,
    encode_write,
)
from storage.sealing import DataKey, KeyRing, erasure_record, new_key, seal_write
from storage.tenant_log import TenantLog
from storage.tenants import TenantRegistry
from streams import app, topics
from streams import processor as processor_module
from streams.app import Services, StreamWorker, _inbound, applied_again, rescored
from streams.processor import MAX_PARKED_BYTES, Batch, Inbound, Processor
from streams.rebuild import ResyncMarker
from tests.rows import make_row

pytestmark = pytest.mark.anyio

LIMITS = Limits(4, 2000, TenantRegistry.open_to(["acme", "globex"]))
RECEIVED = datetime(2026, 3, 1, 13, tzinfo=UTC)
X, Y = (1.0, 0.0, 0.0, 0.0), (0.0, 1.0, 0.0, 0.0)


@dataclass
class Message:
    topic: str
    partition: int
    offset: int
    key: bytes
    value: bytes | None
    timestamp: float = RECEIVED.timestamp()


@dataclass(eq=False)
class Event:
    message: Message


class Keys:
    """The worker's keys topic: keys and erasure markers in ``ring``; ``arriving``: records
    each read-through applies in turn (the follower meeting what others published since);
    ``erased``: what it was asked to erase, as (tenant, memory ids), and ``only`` the key ids
    of each call (None: every key); the first ``failures`` erasures raise as an unwritable
    topic does.
    """

    def __init__(self, ring: KeyRing | None = None) -> None:
        self.ring = ring or KeyRing()
        self.arriving: list[list[tuple[bytes, bytes]]] = []
        self.erased: list[tuple[str, list[str]]] = []
        self.only: list[dict[str, set[str]] | None] = []
        self.failures = 0
        self.seen: list[tuple[str, bytes, dict[str, Any]]] = []  # what the worker sent
        self.sent_before_erasing: list[list[Any]] = []  # its decisions sent by each erasure

    async def read_through(self) -> None:
        if self.arriving:
            for key, value in self.arriving.pop(0):
                self.ring.apply(key, value)

    async def know(self, values: object) -> None:
        pass

    def erased_memory(self, tenant_id: str, memory_id: str) -> bool:
        return self.ring.erased_memory(tenant_id, memory_id)

    def of_memory(self, tenant_id: str, memory_id: str) -> list[DataKey]:
        return self.ring.of_memory(tenant_id, memory_id)

    async def mint(self, memories: Sequence[tuple[str, str, str | None]]) -> list[DataKey]:
        keys = [new_key(*memory) for memory in memories]
        for key in keys:
            self.ring.add(key)
        return keys

    async def erase(
        self,
        tenant_id: str,
        memory_ids: Sequence[str],
        *,
        users: bool = False,
        only: Mapping[str, Collection[str]] | None = None,
    ) -> dict[str, int]:
        if self.failures:
            self.failures -= 1
            raise KeyLogError("NotEnoughReplicas")
        self.erased.append((tenant_id, list(memory_ids)))
        self.only.append(None if only is None else {m: set(k) for m, k in only.items()})
        decided = [v.get("decision") for role, _, v in self.seen if role == "memory-writes"]
        self.sent_before_erasing.append(decided)
        return dict.fromkeys(memory_ids, 0)


class Topic:
    def __init__(self, role: str, sent: list[tuple[str, bytes, dict[str, Any]]]) -> None:
        self.role = role
        self.sent = sent

    async def send(self, key: bytes, value: bytes) -> asyncio.Future[None]:
        self.sent.append((self.role, key, orjson.loads(value)))
        done = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done


class Store:
    """Keeps the rows upserted; a search finds every row of the tenant at cosine 0.9 (of the
    filters' ``agent_id`` and ``user_id`` where given, as Milvus: "" is a row with none), and
    raises (not retriably) for the tenants in ``refuse``.
    """

    def __init__(self, refuse: Sequence[str] = ()) -> None:
        self.rows: dict[str, MemoryRow] = {}
        self.refuse = set(refuse)
        self.searched: list[Filters] = []

    def upsert(self, rows: Sequence[MemoryRow]) -> int:
        self.rows.update((row.key, row) for row in rows)
        return len(rows)

    def delete(self, tenant_id: str, memory_ids: Sequence[str]) -> int:
        for memory_id in memory_ids:
            self.rows.pop(f"{tenant_id}/{memory_id}", None)
        return len(memory_ids)

    def search(
        self, tenant_id: str, vectors: Sequence[Sequence[float]], n: int, filters: Filters
    ) -> list[list[Hit]]:
        if tenant_id in self.refuse:
            raise StorageError("search", "refused", retriable=False)
        self.searched.append(filters)
        rows = [
            r
            for r in self.rows.values()
            if r.tenant_id == tenant_id
            and filters.agent_id in (None, r.agent_id)
            and filters.user_id in (None, r.user_id)
        ]
        return [[Hit(r, 0.9) for r in rows] for _ in vectors]


class RowStore(Store):
    """A Store that also lists a tenant's rows (what consolidation reads), refusing as a search."""

    def every_row(self, tenant_id: str, states: object) -> list[MemoryRow]:
        if tenant_id in self.refuse:
            raise StorageError("query", "refused", retriable=False)
        return [r for r in self.rows.values() if r.tenant_id == tenant_id]


async def until(check: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Wait until ``check`` holds (a bound on a broken run, not a timing assertion)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "not reached"
        await asyncio.sleep(0.01)


class Embedder:
    """Vectors from a table; a text in ``fail`` makes the call that holds it raise."""

    def __init__(self, table: dict[str, tuple[float, ...]], fail: Sequence[str] = ()) -> None:
        self.table = table
        self.fail = set(fail)
        self.texts: list[str] = []

    def embed(self, texts: Sequence[str]) -> list[tuple[float, ...]]:
        if self.fail & set(texts):
            msg = "embedding service down"
            raise RuntimeError(msg)
        self.texts.extend(texts)
        return [self.table[t] for t in texts]


class Llm:
    """Answers no importance question and every supersession question with ``reply``."""

    def __init__(self, reply: str) -> None:
        self.reply = reply

    async def answers(self, contents: Sequence[str]) -> list[str | None]:
        return [None] * len(contents)

    async def ask(self, prompt: str, hung: object = None) -> str | None:
        return self.reply


class Broker:
    """The consumer's end offsets of the writes partitions (``end``; ``fail``: raised instead):
    an access to an unknown memory waits while the writes agent has not reached them.
    """

    def __init__(self, end: int = 1_000) -> None:
        self._committed_offset: dict[Any, int] = {}
        self.end = end
        self.fail: Exception | None = None

    async def highwaters(self, *tps: Any) -> dict[Any, int]:
        if self.fail is not None:
            raise self.fail
        return dict.fromkeys(tps, self.end)


@dataclass
class App:
    consumer: Broker


@dataclass
class Settings:
    """What the worker reads of its settings here: topic names are the roles themselves."""

    milvus_compact_interval_s: float = 0.0

    def topic(self, role: str) -> str:
        return role


class Acknowledgements:
    """The commit flush (``ExactFlush``): waits until ``acknowledged`` is set; ``broken``: it
    fails instead (the broker went away).
    """

    def __init__(self, *, acknowledged: bool = True, broken: bool = False) -> None:
        self.acknowledged = asyncio.Event()
        if acknowledged:
            self.acknowledged.set()
        self.broken = broken

    def track(self, sent: object) -> None:
        pass

    async def flush(self) -> None:
        if self.broken:
            raise StorageError("commit", "not acknowledged", retriable=True)
        await self.acknowledged.wait()


class Worker:
    """A StreamWorker on dict tables and the stand-ins above; ``sent``: what it produced;
    ``broker``: the end offsets it asks for.
    """

    def __init__(
        self, tmp_path: Path, embedder: Embedder, store: Store | None = None, llm: Llm | None = None
    ) -> None:
        self.sent: list[tuple[str, bytes, dict[str, Any]]] = []
        self.store = store or Store()
        self.offset = 0
        self.broker = Broker()
        worker = StreamWorker.__new__(StreamWorker)
        worker.__dict__.update(
            app=App(self.broker),
            settings=Settings(),
            applied=None,
            services=Services(self.store, embedder, llm),  # type: ignore[arg-type]
            topics={role: Topic(role, self.sent) for role in topics.ROLES},
            processor=Processor({}, {}, {}, {}, LIMITS),
            tenants=LIMITS.registry,
            keys=Keys(),
            keys_read=True,
            tenants_read=True,
            produced=[],
            deliveries=None,
            write_done={},
            compacted_at=float("-inf"),
            compaction=None,
            syncing=asyncio.Lock(),
            marker=ResyncMarker(tmp_path / "app.milvus-resync"),
            owed=[],
        )
        self.worker = worker

    async def writes(self, *values: tuple[str, bytes]) -> list[tuple[str, bytes, dict[str, Any]]]:
        """Apply one batch of (key, value) on partition 0; returns what it produced."""
        events = []
        for key, value in values:
            self.offset += 1
            events.append(Event(Message("memory-writes", 0, self.offset, key.encode(), value)))
        self.sent.clear()
        await self.worker.on_writes(events)
        return list(self.sent)


def access(memory_id: str = "m1", at: str = "2026-03-01T12:05:00+00:00") -> bytes:
    return encode_access({"tenant_id": "acme", "memory_id": memory_id, "at": at, "kind": "get"})


def write(content: str, memory_id: str = "m1", tenant_id: str = "acme", **kw: object) -> bytes:
    at = kw.pop("at", "2026-03-01T12:00:00+00:00")
    value = {"tenant_id": tenant_id, "memory_id": memory_id, "content": content, "at": at}
    return encode_write({**value, "importance": 0.5, **kw})


def letters(sent: list[tuple[str, bytes, dict[str, Any]]]) -> list[tuple[bytes, str, str]]:
    return [(key, v["field"], v["reason"]) for role, key, v in sent if role == "dead-letter"]


# -- each write's vector is its own content's ----------------------------------------------------


async def test_a_batch_that_rewrites_a_memory_and_back_keeps_the_vector_of_its_last_content(
    tmp_path: Path,
) -> None:
    embedder = Embedder({"Xcontent": X, "Ycontent": Y})
    w = Worker(tmp_path, embedder)
    await w.writes(("acme/m1", write("Xcontent")))
    sent = await w.writes(("acme/m1", write("Ycontent")), ("acme/m1", write("Xcontent")))
    assert letters(sent) == []
    found = w.worker.processor.load("acme/m1")
    assert found is not None
    assert (found[1].content, found[1].vector) == ("Xcontent", X)
    assert (w.store.rows["acme/m1"].content, w.store.rows["acme/m1"].vector) == ("Xcontent", X)
    assert embedder.texts == ["Xcontent", "Ycontent", "Xcontent"]  # each text once a batch


async def test_a_batch_that_purges_a_memory_then_writes_its_words_again_embeds_them(
    tmp_path: Path,
) -> None:
    """The write was dead-lettered (no vector): it was judged before the batch applied, when the
    stored document of the same words was still there, and the purge dropped it first.
    """
    w = Worker(tmp_path, Embedder({"Alice drinks tea": X}))
    await w.writes(("acme/m1", write("Alice drinks tea")))
    then = datetime(2026, 3, 1, 12, 30, tzinfo=UTC)
    sent = await w.writes(
        decided("m1", Retire(then, Lifecycle.DELETED, "deleted through the API")),
        decided("m1", Purge(then, "purged through the API")),
        ("acme/m1", write("Alice drinks tea", at="2026-03-01T12:31:00+00:00")),
    )
    assert letters(sent) == []
    found = w.worker.processor.load("acme/m1")
    assert found is not None
    assert (found[0].state, found[0].purged, found[1].vector) == (Lifecycle.ACTIVE, False, X)
    assert w.store.rows["acme/m1"].content == "Alice drinks tea"


def decided(memory_id: str, event: Retire | Purge) -> tuple[str, bytes]:
    return f"acme/{memory_id}", orjson.dumps(decision_value("acme", memory_id, event))


async def test_a_batch_writes_its_rows_only_once_its_changelog_records_are_acknowledged(
    tmp_path: Path,
) -> None:
    """A worker upserted (or deleted) a batch's rows before the broker had its changelog
    records: a worker starting beside it could overwrite the row with its snapshot's older
    version, and its catch-up (``streams.rebuild.settle``) then found no changed record to
    write again, so a purged memory's row came back for good.
    """

    class Deletes(Store):
        def __init__(self) -> None:
            super().__init__()
            self.deleted: list[str] = []

        def delete(self, tenant_id: str, memory_ids: Sequence[str]) -> int:
            self.deleted += memory_ids
            return len(memory_ids)

    store = Deletes()
    w = Worker(tmp_path, Embedder({"Alice drinks tea": X}), store)
    deliveries = Acknowledgements(acknowledged=False)
    w.worker.deliveries = deliveries  # type: ignore[assignment]
    written = asyncio.create_task(w.writes(("acme/m1", write("Alice drinks tea"))))
    await until(lambda: w.worker.processor.state("acme/m1") is not None)  # in the tables
    await asyncio.sleep(0.05)  # time enough to write the row, were it not held
    assert store.rows == {}  # not in Milvus before its record is acknowledged
    deliveries.acknowledged.set()
    await asyncio.wait_for(written, 5)
    assert list(store.rows) == ["acme/m1"]

    deliveries.acknowledged.clear()
    then = datetime(2026, 3, 1, 12, 30, tzinfo=UTC)
    purged = asyncio.create_task(
        w.writes(
            decided("m1", Retire(then, Lifecycle.DELETED, "deleted through the API")),
            decided("m1", Purge(then, "purged through the API")),
        )
    )
    await until(lambda: getattr(w.worker.processor.state("acme/m1"), "purged", False))
    await asyncio.sleep(0.05)
    assert store.deleted == []
    deliveries.acknowledged.set()
    await asyncio.wait_for(purged, 5)
    assert store.deleted == ["m1"]


@pytest.fixture(autouse=True)
def no_embedding_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("streams.app.EMBED_RETRIES_S", (0.0, 0.0, 0.0))


async def test_an_embedding_call_that_fails_for_a_moment_is_tried_again(tmp_path: Path) -> None:
    """It sent every write of the batch to dead-letter: the memories never existed live, while a
    replay, whose call did not fail, made them.
    """

    class Flaky(Embedder):
        def __init__(self) -> None:
            super().__init__({"Xcontent": X, "Other": Y})
            self.failures = 2

        def embed(self, texts: Sequence[str]) -> list[tuple[float, ...]]:
            if self.failures:
                self.failures -= 1
                msg = "CUDA out of memory"
                raise RuntimeError(msg)
            return super().embed(texts)

    w = Worker(tmp_path, Flaky())
    sent = await w.writes(("acme/m1", write("Xcontent")), ("acme/m2", write("Other", "m2")))
    assert letters(sent) == []
    assert w.worker.processor.load("acme/m2") is not None


async def test_a_write_of_new_content_that_could_not_be_embedded_goes_to_dead_letter(
    tmp_path: Path,
) -> None:
    w = Worker(tmp_path, Embedder({"Xcontent": X, "Other": Y}, fail=["Ycontent"]))
    await w.writes(("acme/m1", write("Xcontent")), ("acme/m2", write("Other", "m2")))
    sent = await w.writes(("acme/m1", write("Ycontent")), ("acme/m2", write("Other", "m2")))
    # the new words are not served under the old words' vector; the unchanged rewrite folds
    assert letters(sent) == [
        (b"acme/m1", "embedding", "embedding=None: no vector given or computed")
    ]
    found = w.worker.processor.load("acme/m1")
    assert found is not None
    assert (found[0].write_count, found[1].content, found[1].vector) == (1, "Xcontent", X)
    other = w.worker.processor.load("acme/m2")
    assert other is not None
    assert (other[0].write_count, other[1].vector) == (2, Y)


# -- a failing supersession check -----------------------------------------------------------------


async def stated_after_osaka(w: Worker, tenant_id: str) -> None:
    at = "2026-03-01T10:00:00+00:00"
    older = write("Alice lives in Osaka", "A", tenant_id, at=at, embedding=[1.0, 0.1, 0, 0])
    await w.writes((f"{tenant_id}/A", older))


def newer(tenant_id: str) -> tuple[str, bytes]:
    at = "2026-03-01T11:00:00+00:00"
    value = write("Alice now lives in Lisbon", "B", tenant_id, at=at, embedding=[1.0, 0.1, 0, 0])
    return f"{tenant_id}/B", value


MALFORMED = ("acme/x", b'{"v":1,"tenant_id":"acme"}')


async def test_a_failing_supersession_check_costs_its_tenant_s_decisions_not_the_batch_s_records(
    tmp_path: Path,
) -> None:
    w = Worker(tmp_path, Embedder({}), Store(refuse=["acme"]))
    await stated_after_osaka(w, "acme")
    await stated_after_osaka(w, "globex")
    sent = await w.writes(newer("acme"), MALFORMED, newer("globex"))
    audited = [(key, v["kind"]) for role, key, v in sent if role == "audit"]
    assert audited == [(b"acme/B", "created"), (b"globex/B", "created")]
    (dead, field, _), unchecked = letters(sent)
    assert (dead, field) == (b"acme/x", "content")
    assert unchecked[:2] == (b"acme/B", "$")
    assert unchecked[2].startswith("internal error in the supersession check (write applied):")
    assert "StorageError" in unchecked[2]
    decisions = [(key, v["decision"], v["by"]) for role, key, v in sent if role == "memory-writes"]
    assert decisions == [(b"globex/A", "supersede", "B")]  # the other tenant's check went on
    assert w.worker.processor.state("acme/B") is not None  # applied all the same


async def test_an_llm_reply_nested_deeper_than_the_parser_goes_leaves_the_rule_to_decide(
    tmp_path: Path,
) -> None:
    w = Worker(tmp_path, Embedder({}))
    await stated_after_osaka(w, "acme")
    w.worker.services.llm = Llm('{"replaces": ' + "[" * 100_000 + "}")  # type: ignore[assignment]
    sent = await w.writes(newer("acme"), MALFORMED)
    assert [(key, field) for key, field, _ in letters(sent)] == [(b"acme/x", "content")]
    decisions = [
        (key, v["decision"], v["reason"]) for role, key, v in sent if role == "memory-writes"
    ]
    assert [(key, kind) for key, kind, _ in decisions] == [(b"acme/A", "supersede")]
    assert not decisions[0][2].startswith("llm:")  # the rule's reason


async def test_every_tenant_s_llm_questions_of_a_batch_are_asked_at_once(tmp_path: Path) -> None:
    """A slow or hanging LLM held the batch one timeout per tenant, one tenant after another:
    here the LLM answers only once both tenants' questions are in (else the batch never ends).
    """

    class Together(Llm):
        def __init__(self) -> None:
            super().__init__('{"replaces": [1]}')
            self.asked = 0
            self.both = asyncio.Event()

        async def ask(self, prompt: str, hung: object = None) -> str | None:
            self.asked += 1
            if self.asked == 2:
                self.both.set()
            await self.both.wait()
            return self.reply

    w = Worker(tmp_path, Embedder({}))
    await stated_after_osaka(w, "acme")
    await stated_after_osaka(w, "globex")
    w.worker.services.llm = Together()  # type: ignore[assignment]
    sent = await asyncio.wait_for(w.writes(newer("acme"), newer("globex")), 10)
    decisions = [(key, v["decision"], v["by"]) for role, key, v in sent if role == "memory-writes"]
    assert decisions == [(b"acme/A", "supersede", "B"), (b"globex/A", "supersede", "B")]


# -- a statement supersedes memories of its own user and agent only --------------------------------


def mother(memory_id: str, city: str, hour: int, **scope: str) -> tuple[str, bytes]:
    at = f"2026-03-01T{hour:02d}:00:00+00:00"
    content = f"My mother now lives in {city}" if hour > 10 else f"My mother lives in {city}"
    value = write(content, memory_id, at=at, embedding=[1.0, 0.1, 0, 0], **scope)
    return f"acme/{memory_id}", value


def superseded(sent: list[tuple[str, bytes, dict[str, Any]]]) -> list[tuple[bytes, str]]:
    return [(key, v["by"]) for role, key, v in sent if role == "memory-writes"]


async def test_a_statement_of_another_user_or_agent_supersedes_nothing(tmp_path: Path) -> None:
    """End user u2's "My mother now lives in Lisbon" superseded u1's "My mother lives in Osaka":
    u1's memory got valid_to and superseded_by, and u1's recall (by user_id) found neither.
    """
    w = Worker(tmp_path, Embedder({}))
    await w.writes(mother("osaka", "Osaka", 10, user_id="u1", agent_id="bot", session_id="s1"))
    assert superseded(await w.writes(mother("lisbon", "Lisbon", 11, user_id="u2"))) == []
    other_agent = mother("lisbon2", "Lisbon", 11, user_id="u2", agent_id="bot")
    assert superseded(await w.writes(other_agent)) == []
    assert superseded(await w.writes(mother("rome", "Rome", 12, agent_id="bot"))) == []  # no user
    assert superseded(await w.writes(mother("oslo", "Oslo", 12, user_id="u1", agent_id="x"))) == []
    assert superseded(await w.writes(mother("kyiv", "Kyiv", 12))) == []  # unscoped
    state = w.worker.processor.state("acme/osaka")
    assert state is not None
    assert (state.valid_to, state.superseded_by) == (None, None)
    # each search named its statement's scope ("" for none: the unscoped rows only)
    scopes = [(f.agent_id, f.user_id) for f in w.store.searched]
    assert scopes[1:] == [("", "u2"), ("bot", "u2"), ("bot", ""), ("x", "u1"), ("", "")]
    # the same user and agent restating the fact in a later session still supersede it
    later = mother("kyoto", "Kyoto", 13, user_id="u1", agent_id="bot", session_id="s2")
    assert superseded(await w.writes(later)) == [(b"acme/osaka", "kyoto")]


async def test_without_a_user_a_speaker_s_fact_supersedes_within_its_session_only(
    tmp_path: Path,
) -> None:
    """Two people in two sessions, no ``user_id``: Bert's "My mother now lives in Lisbon" hid
    Anna's "My mother lives in Osaka" (the rule compares agent and user alone). The worker gives
    the rule each memory's session: one session's statement still replaces its own.
    """
    w = Worker(tmp_path, Embedder({}))
    await w.writes(mother("osaka", "Osaka", 10, session_id="anna"))
    assert superseded(await w.writes(mother("lisbon", "Lisbon", 11, session_id="bert"))) == []
    assert superseded(await w.writes(mother("kyoto", "Kyoto", 12, session_id="anna"))) == [
        (b"acme/osaka", "kyoto")
    ]


async def test_a_batch_of_two_users_statements_supersedes_within_each_user_only(
    tmp_path: Path,
) -> None:
    w = Worker(tmp_path, Embedder({}))
    sent = await w.writes(
        mother("osaka", "Osaka", 10, user_id="u1"),
        mother("lisbon", "Lisbon", 11, user_id="u2"),
        mother("kyoto", "Kyoto", 12, user_id="u1", session_id="later"),
        mother("paris", "Paris", 13, user_id="u3"),
    )
    assert superseded(sent) == [(b"acme/osaka", "kyoto")]
    assert sorted((f.agent_id, f.user_id) for f in w.store.searched) == [
        ("", "u1"),
        ("", "u2"),
        ("", "u3"),
    ]  # one search per scope


class NearestStore(Store):
    """A Store whose search returns the ``n`` rows of its scope nearest each query (cosine)."""

    def search(
        self, tenant_id: str, vectors: Sequence[Sequence[float]], n: int, filters: Filters
    ) -> list[list[Hit]]:
        every = super().search(tenant_id, vectors, n, filters)
        ranked = []
        for query, hits in zip(vectors, every, strict=True):
            near = sorted((Hit(h.row, cosine(query, h.row.vector)) for h in hits), key=_nearest)
            ranked.append(near[:n])
        return ranked


def _nearest(hit: Hit) -> float:
    return -hit.similarity


HANOI = (1.0, 0.0, 0.0, 0.0)
TORONTO = (0.25, 0.0, 0.968, 0.0)  # cosine .25 to Hanoi's, as MiniLM gives the two statements
STEM = (0.0, 0.0, 1.0, 0.0)  # "i lives in": near every "I live in ..."


async def user_with_many_memories(w: Worker, tenant_id: str = "acme") -> None:
    """Toronto, then 12 memories of the same user nearer Hanoi's vector than Toronto is."""
    u1 = {"user_id": "u1", "at": "2026-03-01T10:00:00+00:00", "tenant_id": tenant_id}
    toronto = write("I live in Toronto.", "toronto", embedding=TORONTO, **u1)
    await w.writes((f"{tenant_id}/toronto", toronto))
    for i in range(12):
        vector = [1.0, 0.5 + i / 100, 0.0, 0.0]
        chat = write(f"I like jazz record {i}.", f"chat{i}", embedding=vector, **u1)
        await w.writes((f"{tenant_id}/chat{i}", chat))


async def test_a_fact_s_older_version_past_the_nearest_of_its_statement_is_found_by_its_stem(
    tmp_path: Path,
) -> None:
    """Among many memories of one user, MiniLM puts "I live in Toronto." past the 10 nearest of
    "I live in Hanoi now." (96th of 177 short first-person statements): it stayed current. The
    fact's stem, embedded, finds it; its cosine to the statement is the rows' own.
    """
    embedder = Embedder({"I live in Hanoi now.": HANOI, "i lives in": STEM})
    w = Worker(tmp_path, embedder, NearestStore())
    await user_with_many_memories(w)
    hanoi = write("I live in Hanoi now.", "hanoi", user_id="u1")
    assert superseded(await w.writes(("acme/hanoi", hanoi))) == [(b"acme/toronto", "hanoi")]
    assert embedder.texts == ["I live in Hanoi now.", "i lives in"]
    (searched,) = w.store.searched[-1:]
    assert searched.user_id == "u1"  # one search: the statement's vector and its stem's


async def test_a_statement_with_its_own_vector_or_an_embedder_down_is_searched_by_itself(
    tmp_path: Path,
) -> None:
    """A given vector may be of another model than the service's: no stem is embedded for it.
    An embedder that fails on the stem leaves the statement's own search, and no dead letter.
    """
    model = Embedder({"i lives in": STEM})
    given = Worker(tmp_path / "given", model, NearestStore())
    await user_with_many_memories(given)
    hanoi = write("I live in Hanoi now.", "hanoi", user_id="u1", embedding=HANOI)
    assert superseded(await given.writes(("acme/hanoi", hanoi))) == []
    assert model.texts == []
    down = Embedder({"I live in Hanoi now.": HANOI}, fail=["i lives in"])
    w = Worker(tmp_path / "down", down, NearestStore())
    await user_with_many_memories(w)
    sent = await w.writes(("acme/hanoi", write("I live in Hanoi now.", "hanoi", user_id="u1")))
    assert (superseded(sent), letters(sent)) == ([], [])
    assert w.worker.processor.state("acme/hanoi") is not None


async def test_every_tenant_s_stems_are_embedded_in_one_call_a_batch(tmp_path: Path) -> None:
    """Each tenant's check embedded its own stems, one call after another (a remote embedder:
    one round trip per tenant per batch), and the same stem again for each.
    """
    embedder = Embedder({"I live in Hanoi now.": HANOI, "i lives in": STEM})
    w = Worker(tmp_path, embedder, NearestStore())
    for tenant_id in ("acme", "globex"):
        await user_with_many_memories(w, tenant_id)
    hanoi = [
        (f"{t}/hanoi", write("I live in Hanoi now.", "hanoi", t, user_id="u1"))
        for t in ("acme", "globex")
    ]
    assert sorted(superseded(await w.writes(*hanoi))) == [
        (b"acme/toronto", "hanoi"),
        (b"globex/toronto", "hanoi"),
    ]
    assert embedder.texts == ["I live in Hanoi now.", "i lives in"]


FAR_STEM = (0.0, 0.0, 1.0, 0.0)
NEWER = (0.6, 0.0, 0.8, 0.0)  # .8 to the stem, .48 to OLDER
NEARER = (0.6, 0.3, 0.742, 0.0)  # .74 to the stem, .68 to OLDER
OLDER = (0.0, 0.8, 0.6, 0.0)  # .6 to the stem


async def test_an_older_value_written_after_its_newer_one_finds_it_by_its_stem(
    tmp_path: Path,
) -> None:
    """Written first (an import, or two partitions applied out of order), "I live in Hanoi now."
    found nothing. "I live in Toronto.", written last among 12 memories nearer it (.9) than
    Hanoi (.48), was searched by its own vector only (it says nothing is new) and stayed
    current. Its stem finds Hanoi (.8; the others .2), which says it is new: Toronto is
    superseded. A far pair found so whose newer side does not say its value is new is left (at
    .68 the rule would supersede by ``min_cosine``: the stem search does not reach further for
    it), whichever side is written last.
    """
    embedder = Embedder(
        {"I live in Toronto.": OLDER, "I live in Oslo now.": OLDER, "i lives in": FAR_STEM}
    )
    w = Worker(tmp_path, embedder, NearestStore())

    def said(
        user: str, name: str, text: str, hour: int, vector: object = None
    ) -> tuple[str, bytes]:
        at = f"2026-03-01T{hour:02}:00:00+00:00"
        memory = write(text, f"{name}-{user}", user_id=user, at=at, embedding=vector)
        return f"acme/{name}-{user}", memory

    found = {  # user: what the stem search finds (said in turn, one memory), and the last words
        "u1": ([("I live in Hanoi now.", NEWER, 12)], "I live in Toronto."),
        "u2": ([("I live in Hanoi.", NEARER, 12)], "I live in Toronto."),
        "u3": ([("I live in Hanoi now.", NEARER, 8)], "I live in Toronto."),
        "u4": ([("I live in Hanoi.", NEARER, 12)], "I live in Oslo now."),
    }
    for user, (versions, _) in found.items():
        for text, vector, hour in versions:
            await w.writes(said(user, "hanoi", text, hour, vector))
        for i in range(12):
            chat = [0.0, 1.0, 0.2 + i / 100, 0.0]
            await w.writes(said(user, f"chat{i}", f"Do I live in Toronto? {i}", 9, chat))
    last = [said(user, "last", text, 10) for user, (_, text) in found.items()]
    assert superseded(await w.writes(*last)) == [(b"acme/last-u1", "hanoi-u1")]


async def test_a_memory_stated_again_after_a_far_newer_value_supersedes_it_from_then(
    tmp_path: Path,
) -> None:
    """ "I live in Toronto." (8:00), then in one batch "I live in Hanoi now." (10:00, cosine
    .25) and Toronto said again (12:00): the restatement is the newest, and supersedes Hanoi
    from 12:00. Dating the neighbour by its restatement had left both current: the rule then
    asked the restatement, not Hanoi, to say its value is new.
    """
    table: dict[str, tuple[float, ...]] = {
        "I live in Toronto.": TORONTO,
        "I live in Hanoi now.": HANOI,
        "i lives in": STEM,
    }
    w = Worker(tmp_path, Embedder(table), NearestStore())

    def said(memory_id: str, text: str, hour: int) -> tuple[str, bytes]:
        at = f"2026-03-01T{hour:02}:00:00+00:00"
        return f"acme/{memory_id}", write(text, memory_id, user_id="u1", at=at)

    await w.writes(said("toronto", "I live in Toronto.", 8))
    sent = await w.writes(
        said("hanoi", "I live in Hanoi now.", 10), said("toronto", "I live in Toronto.", 12)
    )
    for _ in range(4):  # apply the decisions and those they send
        decided = [
            (key.decode(), orjson.dumps(v)) for role, key, v in sent if role == "memory-writes"
        ]
        if not decided:
            break
        sent = await w.writes(*decided)
    hanoi, toronto = (w.worker.processor.state(f"acme/{m}") for m in ("hanoi", "toronto"))
    assert hanoi is not None
    assert toronto is not None
    assert (hanoi.superseded_by, hanoi.valid_to) == (
        "toronto",
        datetime(2026, 3, 1, 12, tzinfo=UTC),
    )
    assert toronto.valid_to is None


class Miscounting(Embedder):
    """Answers a call of stems with one vector too few."""

    def embed(self, texts: Sequence[str]) -> list[tuple[float, ...]]:
        vectors = super().embed(texts)
        return vectors[:-1] if "i lives in" in texts else vectors


async def test_a_stem_search_is_only_for_a_vector_embedded_here_and_never_fails_a_write(
    tmp_path: Path,
) -> None:
    """A stem's embedding that fails, or comes back miscounted, leaves the statement's own
    search (it had raised, and sent the tenant's statements to dead-letter). A statement whose
    vector is kept from a write that gave it embeds no stem. One not said to be new is searched
    by its stem, but a far older value it finds so stays current: neither says it changed.
    """
    embedder = Miscounting({"I live in Hanoi now.": HANOI, "i lives in": STEM})
    w = Worker(tmp_path / "miscounted", embedder, NearestStore())
    await user_with_many_memories(w)
    sent = await w.writes(("acme/hanoi", write("I live in Hanoi now.", "hanoi", user_id="u1")))
    assert (superseded(sent), letters(sent)) == ([], [])
    plain = Embedder({"I live in Hanoi.": HANOI, "i lives in": STEM})
    w = Worker(tmp_path / "plain", plain, NearestStore())
    await user_with_many_memories(w)
    sent = await w.writes(("acme/hanoi", write("I live in Hanoi.", "hanoi", user_id="u1")))
    assert (superseded(sent), plain.texts) == ([], ["I live in Hanoi.", "i lives in"])
    kept = Embedder({"i lives in": STEM})
    w = Worker(tmp_path / "kept", kept, NearestStore())
    await user_with_many_memories(w)
    given = write("I live in Hanoi now.", "hanoi", user_id="u1", embedding=HANOI)
    await w.writes(("acme/hanoi", given))
    at = "2026-03-01T12:10:00+00:00"
    paris = write("I live in Paris now.", "paris", user_id="u1", embedding=HANOI, at=at)
    decided = [
        (k, v) for role, k, v in await w.writes(("acme/paris", paris)) if role == "memory-writes"
    ]
    await w.writes(*[(key.decode(), orjson.dumps(v)) for key, v in decided])
    state = w.worker.processor.state("acme/hanoi")
    assert state is not None
    assert state.superseded_by == "paris"
    # Hanoi said again, without a vector: reasserted, its given vector kept
    again = write("I live in Hanoi now.", "hanoi", user_id="u1", at="2026-03-01T12:30:00+00:00")
    sent = await w.writes(("acme/hanoi", again))
    assert (superseded(sent), letters(sent), kept.texts) == ([(b"acme/paris", "hanoi")], [], [])


async def test_a_reasserted_given_vector_embeds_no_stem_whatever_else_the_batch_embedded(
    tmp_path: Path,
) -> None:
    """A batch that embedded the same words for another memory marked a reassertion, which
    keeps its given vector, as embedded by the service: its stem was searched in another
    model's space.
    """
    kept = Embedder({"i lives in": STEM, "I live in Hanoi now.": (0.0, 0.0, 0.0, 1.0)})
    w = Worker(tmp_path, kept, NearestStore())
    await user_with_many_memories(w)
    await w.writes(
        ("acme/hanoi", write("I live in Hanoi now.", "hanoi", user_id="u1", embedding=HANOI))
    )
    at = "2026-03-01T12:10:00+00:00"
    paris = write("I live in Paris now.", "paris", user_id="u1", embedding=HANOI, at=at)
    decided = [
        (k, v) for role, k, v in await w.writes(("acme/paris", paris)) if role == "memory-writes"
    ]
    await w.writes(*[(key.decode(), orjson.dumps(v)) for key, v in decided])
    at = "2026-03-01T12:30:00+00:00"
    sent = await w.writes(
        ("acme/other", write("I live in Hanoi now.", "other", user_id="u2", at=at)),
        ("acme/hanoi", write("I live in Hanoi now.", "hanoi", user_id="u1", at=at)),
    )
    assert superseded(sent) == [(b"acme/paris", "hanoi")]
    # u2's write is embedded here, and searched by its stem; u1's Hanoi, by its given vector
    # alone (by the stem it would have reached Toronto)
    assert kept.texts == ["I live in Hanoi now.", "i lives in"]


async def test_a_redelivered_statement_is_searched_by_its_stem_again(tmp_path: Path) -> None:
    """Its first delivery may have died before its decisions were sent: they are made again,
    those the stem found included.
    """
    embedder = Embedder({"I live in Hanoi now.": HANOI, "i lives in": STEM})
    w = Worker(tmp_path, embedder, NearestStore())
    await user_with_many_memories(w)
    hanoi = ("acme/hanoi", write("I live in Hanoi now.", "hanoi", user_id="u1"))
    assert superseded(await w.writes(hanoi)) == [(b"acme/toronto", "hanoi")]
    w.offset -= 1  # the same offset again: skipped by the reducer, checked again
    assert superseded(await w.writes(hanoi)) == [(b"acme/toronto", "hanoi")]


async def test_stems_follow_each_tenant_s_rules_and_failures(tmp_path: Path) -> None:
    """A tenant with supersession off embeds no stem; a stem of another length than the
    statement's vector is left out, not a failure; a tenant whose check fails is dead-lettered
    while the others' stems still serve them.
    """
    embedder = Embedder({"I live in Hanoi now.": HANOI, "i lives in": (0.0, 1.0, 0.0)})
    w = Worker(tmp_path, embedder, NearestStore())
    await user_with_many_memories(w)
    sent = await w.writes(("acme/hanoi", write("I live in Hanoi now.", "hanoi", user_id="u1")))
    assert (superseded(sent), letters(sent)) == ([], [])
    embedder = Embedder(
        {"I live in Hanoi now.": HANOI, "I live in Lisbon now.": HANOI, "i lives in": STEM}
    )
    w = Worker(tmp_path / "two", embedder, NearestStore())
    for t in ("acme", "globex"):
        await user_with_many_memories(w, t)
    real = w.worker.processor.policy
    off = Policy(supersession=SupersessionPolicy(enabled=False))

    def globex_off(tenant_id: str) -> Policy:
        return off if tenant_id == "globex" else real(tenant_id)

    w.worker.processor.policy = globex_off  # type: ignore[method-assign]
    off_hanoi = ("globex/hanoi", write("I live in Hanoi now.", "hanoi", "globex", user_id="u1"))
    assert superseded(await w.writes(off_hanoi)) == []
    assert embedder.texts == ["I live in Hanoi now."]
    embedder.texts.clear()
    w.worker.processor.policy = real  # type: ignore[method-assign]
    checking = False

    def broken(tenant_id: str) -> Policy:
        if checking and tenant_id == "globex":
            raise RuntimeError("policy unreadable")
        return real(tenant_id)

    w.worker.processor.policy = broken  # type: ignore[method-assign]
    supersede = w.worker.supersede

    async def checked(batch: Batch) -> None:
        nonlocal checking
        checking = True
        try:
            await supersede(batch)
        finally:
            checking = False

    w.worker.supersede = checked  # type: ignore[method-assign]
    at = "2026-03-01T12:20:00+00:00"
    lisbon = [
        (f"{t}/lisbon", write("I live in Lisbon now.", "lisbon", t, user_id="u1", at=at))
        for t in ("acme", "globex")
    ]
    sent = await w.writes(*lisbon)
    assert [key for key, _, _ in letters(sent)] == [b"globex/lisbon"]
    assert superseded(sent) == [(b"acme/toronto", "lisbon")]  # by acme's stem


async def test_a_stem_s_hit_without_its_vector_is_left_out_not_a_failed_check(
    tmp_path: Path,
) -> None:
    """The hot cache held its rows without vectors: the cosine of a stem's hit raised, and the
    tenant's whole batch of statements went to dead-letter.
    """
    w = Worker(tmp_path, Embedder({}))
    await user_with_many_memories(w)
    row = w.store.rows["acme/toronto"]
    hits = [Hit(dataclasses.replace(row, vector=()), 0.9), Hit(row, 0.9)]
    assert [round(h.similarity, 3) for h in rescored(HANOI, hits)] == [0.25]


# -- a reasserted memory is dated by its statement --------------------------------------------------


async def test_a_memory_written_again_after_its_supersession_supersedes_the_newer_fact(
    tmp_path: Path,
) -> None:
    w = Worker(tmp_path, Embedder({}))
    await stated_after_osaka(w, "acme")  # A, 10:00
    sent = await w.writes(newer("acme"))  # B, 11:00, supersedes A
    decided = [(key, v) for role, key, v in sent if role == "memory-writes"]
    assert [(key, v["decision"], v["by"]) for key, v in decided] == [(b"acme/A", "supersede", "B")]
    await w.writes(*[(key.decode(), orjson.dumps(v)) for key, v in decided])
    state = w.worker.processor.state("acme/A")
    assert state is not None
    assert state.superseded_by == "B"
    again = "2026-03-01T12:00:00+00:00"
    sent = await w.writes(
        ("acme/A", write("Alice lives in Osaka", "A", at=again, embedding=[1.0, 0.1, 0, 0]))
    )
    current = w.worker.processor.state("acme/A")
    assert current is not None
    assert current.superseded_by is None  # reasserted
    decisions = [(key, v["by"], v["at"]) for role, key, v in sent if role == "memory-writes"]
    # B stated Lisbon at 11:00; A states Osaka again at 12:00: B is the older fact now
    assert decisions == [(b"acme/B", "A", again)]


async def test_a_redelivered_write_checks_its_supersessions_again(tmp_path: Path) -> None:
    # its first delivery reached the tables, and the process died before the decisions were sent
    w = Worker(tmp_path, Embedder({}))
    await stated_after_osaka(w, "acme")
    key, value = newer("acme")
    await w.writes((key, value))
    w.offset -= 1  # the same offset again: the reducer skips the write
    sent = await w.writes((key, value))
    assert [role for role, _, _ in sent if role == "audit"] == []  # skipped: nothing audited
    decisions = [(k, v["decision"], v["by"]) for role, k, v in sent if role == "memory-writes"]
    assert decisions == [(b"acme/A", "supersede", "B")]


async def test_a_record_with_no_value_goes_to_dead_letter_and_its_batch_goes_on(
    tmp_path: Path,
) -> None:
    """A tombstone (or another producer's null) failed the whole batch before: the good records
    of that batch were then acknowledged by Faust without ever reaching the tables."""
    w = Worker(tmp_path, Embedder({"alpha": X, "gamma": X}))
    await w.worker.on_writes(
        [
            Event(Message("memory-writes", 0, 1, b"acme/m1", write("alpha", "m1"))),
            Event(Message("memory-writes", 0, 2, b"acme/m2", None)),
            Event(Message("memory-writes", 0, 3, b"acme/m3", write("gamma", "m3"))),
        ]
    )
    processor = w.worker.processor
    assert processor.state("acme/m1") is not None
    assert processor.state("acme/m3") is not None
    (dead,) = [v for topic, _, v in w.sent if topic == "dead-letter"]
    assert (dead["field"], dead["offset"], dead["payload_bytes"]) == ("$", 2, 0)
    access = orjson.dumps(
        {"v": 1, "tenant_id": "acme", "memory_id": "m1", "at": "2026-03-01T12:30:00+00:00"}
    )
    await w.worker.on_access(
        [
            Event(Message("access-events", 0, 1, b"acme/m1", access)),
            Event(Message("access-events", 0, 2, b"acme/m1", None)),
        ]
    )
    state = processor.state("acme/m1")
    assert state is not None
    assert state.access_count == 1  # the good access of the batch is applied
    assert len([1 for topic, _, _ in w.sent if topic == "dead-letter"]) == 2


class HeldStore(Store):
    """Holds the first upsert after ``hold()`` until ``release`` is set (Milvus slow or down
    for one agent's batch); records the content of every row it stores, in order.
    """

    def __init__(self) -> None:
        super().__init__()
        self.stored: list[str] = []
        self.holding = False
        self.entered = threading.Event()
        self.release = threading.Event()

    def hold(self) -> None:
        self.holding = True

    def upsert(self, rows: Sequence[MemoryRow]) -> int:
        if self.holding:
            self.holding = False
            self.entered.set()
            self.release.wait(10)
        self.stored += [r.content for r in rows]
        return super().upsert(rows)


async def test_a_slow_access_sync_never_lands_after_a_rewrites_row(tmp_path: Path) -> None:
    """The access agent's row, built before a rewrite, landed after the rewrite's row while its
    upsert was slow or retried: Milvus kept the old words, with the rewrite's token satisfied."""
    store = HeldStore()
    w = Worker(tmp_path, Embedder({"alpha fact": X, "beta fact": Y}), store)

    def event(topic: str, offset: int, value: bytes) -> Event:
        return Event(Message(topic, 0, offset, b"acme/m1", value))

    def access(minute: int) -> bytes:
        at = f"2026-03-01T12:{minute}:00+00:00"
        return orjson.dumps({"v": 1, "tenant_id": "acme", "memory_id": "m1", "at": at})

    at = "2026-03-01T12:00:00+00:00"
    await w.worker.on_writes([event("memory-writes", 1, write("alpha fact", "m1", at=at))])
    store.hold()
    accesses = asyncio.ensure_future(  # the third access promotes the tier: the row is rewritten
        w.worker.on_access([event("access-events", i, access(10 + i)) for i in (1, 2, 3)])
    )
    assert await asyncio.to_thread(store.entered.wait, 10)
    at = "2026-03-01T12:20:00+00:00"
    rewrite = asyncio.ensure_future(
        w.worker.on_writes([event("memory-writes", 2, write("beta fact", "m1", at=at))])
    )
    for _ in range(100):  # let the rewrite go as far as it can (its row, unguarded, landed here)
        await asyncio.sleep(0.01)
        if store.stored:
            break
    store.release.set()
    await asyncio.gather(accesses, rewrite)
    assert store.stored[-1] == "beta fact"
    assert store.rows["acme/m1"].content == "beta fact"


async def test_a_replay_applies_the_log_and_produces_nothing(tmp_path: Path) -> None:
    """MNEMO_REPLAY: a replay into a new app id reads the topics the live worker writes. The
    live worker's audit, dead letters and decisions are in the log already: produced again, the
    audit trail held every event twice and the live worker applied the decisions again.
    """
    live, replay = Worker(tmp_path, Embedder({})), Worker(tmp_path, Embedder({}))
    replay.worker.replay = True
    batch = (MALFORMED, ("acme/other", newer("acme")[1]))  # invalid; mis-keyed
    assert {role for role, _, _ in await live.writes(*batch)} == {"dead-letter"}
    assert await replay.writes(*batch) == []
    await stated_after_osaka(live, "acme")
    decided = [(k, v) for role, k, v in await live.writes(newer("acme")) if role != "audit"]
    assert [(k, v["decision"]) for k, v in decided] == [(b"acme/A", "supersede")]
    await stated_after_osaka(replay, "acme")
    assert await replay.writes(newer("acme")) == []  # the decision comes from the log
    decision = [(k.decode(), orjson.dumps(v)) for k, v in decided]
    await live.writes(*decision)
    assert await replay.writes(*decision) == []
    for key in ("acme/A", "acme/B"):
        assert replay.worker.processor.state(key) == live.worker.processor.state(key)
    state = replay.worker.processor.state("acme/A")
    assert state is not None
    assert state.superseded_by == "B"


# -- a batch that fails is applied again, not given up -----------------------------------------


class FlakyStore(Store):
    """Fails the first ``failures`` upserts with an error the worker does not retry itself."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    def upsert(self, rows: Sequence[MemoryRow]) -> int:
        if self.failures:
            self.failures -= 1
            msg = "the connection broke mid-call"
            raise RuntimeError(msg)
        return super().upsert(rows)


async def test_a_batch_that_fails_after_its_reducer_ran_is_applied_again(tmp_path: Path) -> None:
    """Faust acknowledges a failed batch's events all the same: given up, the new version's row
    waited for the next start and its supersession was never sent.
    """
    store = FlakyStore(failures=0)
    w = Worker(tmp_path, Embedder({}), store)
    await stated_after_osaka(w, "acme")
    store.failures = 2
    key, value = newer("acme")
    w.offset += 1
    events = [Event(Message("memory-writes", 0, w.offset, key.encode(), value))]
    w.sent.clear()
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    await applied_again(lambda: w.worker.on_writes(events), "writes", sleep=sleep)
    assert waits == [0.5, 1.0]
    assert "acme/B" in store.rows
    decided = [(k, v["by"]) for role, k, v in w.sent if role == "memory-writes"]
    assert decided == [(b"acme/A", "B")]
    # the first try's audit record, which no later try makes again, is sent once: B's
    # history said nothing of its creation
    audited = [(k, v["kind"]) for role, k, v in w.sent if role == "audit"]
    assert audited == [(b"acme/B", "created")]
    assert w.worker.owed == []
    state = w.worker.processor.state("acme/B")
    assert state is not None
    assert state.write_count == 1  # applied once: the tries after the first skipped it
    store.failures = 10
    with pytest.raises(RuntimeError, match="broke"):  # past the attempts: given up, as before
        await applied_again(lambda: w.worker.on_writes(events), "writes", sleep=sleep)


class BrokenTopic(Topic):
    """Sends ``left`` records, then raises as a producer whose broker went away."""

    def __init__(self, role: str, sent: list[tuple[str, bytes, dict[str, Any]]]) -> None:
        super().__init__(role, sent)
        self.left: int | None = None

    async def send(self, key: bytes, value: bytes) -> asyncio.Future[None]:
        if self.left is not None:
            if self.left == 0:
                raise KafkaTimeoutError("the broker went away")
            self.left -= 1
        return await super().send(key, value)


async def test_audit_records_a_failed_emit_did_not_send_come_first_with_the_next_batch(
    tmp_path: Path,
) -> None:
    """An emit that failed part-way: the records it had not sent go first, in their order,
    with the next batch's, whichever agent emits it; those it sent are not sent again.
    """
    texts = ("Alice drinks tea", "Bob drinks coffee", "Carol drinks water")
    w = Worker(tmp_path, Embedder(dict.fromkeys(texts, X)))
    audit = BrokenTopic(topics.AUDIT, w.sent)
    w.worker.topics[topics.AUDIT] = audit  # type: ignore[assignment]
    audit.left = 1
    with pytest.raises(KafkaTimeoutError):
        await w.writes(
            ("acme/m1", write("Alice drinks tea", "m1")),
            ("acme/m2", write("Bob drinks coffee", "m2")),
            ("acme/m3", write("Carol drinks water", "m3")),
        )
    assert [k for role, k, _ in w.sent if role == "audit"] == [b"acme/m1"]
    assert [o.key for o in w.worker.owed] == [b"acme/m2", b"acme/m3"]
    audit.left = None
    w.sent.clear()
    await w.worker.on_access([Event(Message("memory-access", 0, 9, b"acme/m1", access()))])
    audited = [(k, v["kind"]) for role, k, v in w.sent if role == "audit"]
    assert audited[:2] == [(b"acme/m2", "created"), (b"acme/m3", "created")]
    assert b"acme/m1" not in [k for k, _ in audited[:2]]
    assert w.worker.owed == []


async def test_audit_records_a_failed_consolidation_emit_took_are_owed_again(
    tmp_path: Path,
) -> None:
    """The consolidation agent's emit took the records owed and failed: they were gone."""
    texts = ("Alice drinks tea", "Bob drinks coffee")
    w = Worker(tmp_path, Embedder(dict.fromkeys(texts, X)), RowStore())
    audit = BrokenTopic(topics.AUDIT, w.sent)
    w.worker.topics[topics.AUDIT] = audit  # type: ignore[assignment]
    audit.left = 0
    with pytest.raises(KafkaTimeoutError):
        await w.writes(("acme/m1", write(texts[0], "m1")), ("acme/m2", write(texts[1], "m2")))
    request = orjson.dumps({"v": 1, "tenant_id": "acme", "at": "2026-03-01T12:10:00+00:00"})
    with pytest.raises(KafkaTimeoutError):  # the consolidation agent's emit fails too
        await w.worker.on_consolidation(
            _inbound(Event(Message("memory-consolidation", 0, 1, b"acme", request)))
        )
    audit.left = None
    w.sent.clear()
    await w.worker.on_access([Event(Message("memory-access", 0, 9, b"acme/m1", access()))])
    created = [k for role, k, v in w.sent if role == "audit" and v["kind"] == "created"]
    assert created == [b"acme/m1", b"acme/m2"]


class FailingOnce(dict[bytes, bytes]):
    """A memory table whose next write of ``fail`` raises (a changelog send refused)."""

    fail: bytes | None = None

    def __setitem__(self, key: bytes, value: bytes) -> None:
        if key == self.fail:
            self.fail = None
            raise KafkaTimeoutError("changelog send refused")
        super().__setitem__(key, value)


async def test_an_access_batch_failing_before_its_states_are_written_audits_once(
    tmp_path: Path,
) -> None:
    """Its states never reached the table, so the batch applied again made the same records:
    kept from the failed try too, the revival was in history twice."""
    w = Worker(tmp_path, Embedder({"Alice drinks tea": X}))
    processor = w.worker.processor
    table = FailingOnce(processor.memories)
    processor.memories = table
    await w.writes(("acme/m1", write("Alice drinks tea", "m1")))
    archive = Retire(datetime(2026, 3, 1, 12, 1, tzinfo=UTC), Lifecycle.ARCHIVED, "sweep")
    await w.writes(("acme/m1", orjson.dumps(decision_value("acme", "m1", archive))))
    table.fail = b"acme/m1"
    w.sent.clear()
    events = [Event(Message("memory-access", 0, 9, b"acme/m1", access()))]

    async def no_wait(_: float) -> None:
        return None

    await applied_again(lambda: w.worker.on_access(events), "access", sleep=no_wait)
    revived = [k for role, k, v in w.sent if role == "audit" and v["kind"] == "revived"]
    assert revived == [b"acme/m1"]


async def test_an_access_batch_failing_half_way_through_its_flush_owes_what_it_wrote(
    tmp_path: Path,
) -> None:
    """m1's state written, m2's refused: nothing was owed, and the retry (m1's access skipped
    by offset) made no record of m1's revival."""
    texts = ("Alice drinks tea", "Bob drinks coffee")
    w = Worker(tmp_path, Embedder(dict.fromkeys(texts, X)))
    processor = w.worker.processor
    table = FailingOnce(processor.memories)
    processor.memories = table
    await w.writes(("acme/m1", write(texts[0], "m1")), ("acme/m2", write(texts[1], "m2")))
    archive = Retire(datetime(2026, 3, 1, 12, 1, tzinfo=UTC), Lifecycle.ARCHIVED, "sweep")
    for memory_id in ("m1", "m2"):
        decided = orjson.dumps(decision_value("acme", memory_id, archive))
        await w.writes((f"acme/{memory_id}", decided))
    table.fail = b"acme/m2"
    w.sent.clear()
    events = [
        Event(Message("memory-access", 0, 9, b"acme/m1", access("m1"))),
        Event(Message("memory-access", 0, 10, b"acme/m2", access("m2"))),
    ]

    async def no_wait(_: float) -> None:
        return None

    await applied_again(lambda: w.worker.on_access(events), "access", sleep=no_wait)
    revived = [k for role, k, v in w.sent if role == "audit" and v["kind"] == "revived"]
    assert revived == [b"acme/m1", b"acme/m2"]


async def test_a_parked_access_released_after_the_flush_is_owed_when_the_batch_fails(
    tmp_path: Path,
) -> None:
    """A parked access the batch released after its flush (``expire_parked`` writes the table
    at once), then the Milvus sync failed: its revival was counted and never audited."""
    w = Worker(tmp_path, Embedder({"Alice drinks tea": X}))
    processor = w.worker.processor
    await w.writes(("acme/m1", write("Alice drinks tea", "m1")))
    archive = Retire(datetime(2026, 3, 1, 12, 1, tzinfo=UTC), Lifecycle.ARCHIVED, "sweep")
    await w.writes(("acme/m1", orjson.dumps(decision_value("acme", "m1", archive))))
    parked = {
        "topic": "memory-access",
        "partition": 0,
        "offset": 5,
        "value": base64.b64encode(access("m1")).decode(),
    }
    processor.pending[b"acme/m1"] = orjson.dumps([parked])
    w.broker.end = 0  # the writes are caught up: the parked access is released
    synced = w.worker.sync
    failures = [RuntimeError("milvus did not answer")]

    async def sync(batch: Batch) -> None:
        if failures:
            raise failures.pop()
        await synced(batch)

    w.worker.sync = sync  # type: ignore[method-assign]
    w.sent.clear()
    other = [Event(Message("memory-access", 0, 9, b"acme/other", access("other")))]

    async def no_wait(_: float) -> None:
        return None

    await applied_again(lambda: w.worker.on_access(other), "access", sleep=no_wait)
    state = processor.state("acme/m1")
    assert state is not None
    assert (state.state, state.access_count) == ("active", 1)
    assert [k for role, k, v in w.sent if role == "audit" and v["kind"] == "revived"] == [
        b"acme/m1"
    ]


async def test_a_consolidation_whose_decisions_were_not_sent_owes_no_report(
    tmp_path: Path,
) -> None:
    """Its emit failed on its first decision (lost: the agent does not retry), and its report
    was sent by the next emit: history told of merges that never happened."""
    store = RowStore()
    w = Worker(tmp_path, Embedder({}), store)
    for memory_id in ("a", "b"):
        row = make_row("acme", memory_id, X, content="Ann likes tea.")
        store.rows[row.key] = row
    decisions = BrokenTopic(topics.WRITES, w.sent)
    w.worker.topics[topics.WRITES] = decisions  # type: ignore[assignment]
    decisions.left = 0
    request = orjson.dumps({"v": 1, "tenant_id": "acme", "at": "2026-03-01T12:00:00+00:00"})
    with pytest.raises(KafkaTimeoutError):
        await w.worker.on_consolidation(
            _inbound(Event(Message("memory-consolidation", 0, 1, b"acme", request)))
        )
    assert w.worker.owed == []
    decisions.left = None
    w.sent.clear()
    await w.worker.on_access([Event(Message("memory-access", 0, 9, b"acme/zz", access("zz")))])
    assert not [v for role, _, v in w.sent if role == "audit" and v["kind"] == "consolidation"]


async def test_an_end_offset_the_broker_cannot_give_keeps_parked_accesses_waiting(
    tmp_path: Path,
) -> None:
    w = Worker(tmp_path, Embedder({}))
    w.broker.fail = KafkaTimeoutError("no leader for memory-writes/0")
    assert await w.worker.writes_caught_up(0) is False  # it raised, failing the whole batch


async def test_an_access_parked_before_its_write_outlives_a_crash_before_the_state_is_durable(
    tmp_path: Path,
) -> None:
    """A parked access's offset is committed when it is parked, and the pending table and the
    memory table are two changelog topics: the parked access was dropped with the write that
    applied it, so a crash that kept the drop and lost the state lost the access for good.
    """

    w = Worker(tmp_path, Embedder({"Alice drinks tea": X}))
    deliveries = Acknowledgements(broken=True)
    w.worker.deliveries = deliveries  # type: ignore[assignment]
    processor = w.worker.processor
    await w.worker.on_access([Event(Message("memory-access", 0, 7, b"acme/m1", access()))])
    assert [m.offset for m in processor.parked(b"acme/m1")] == [7]
    with contextlib.suppress(StorageError):  # the batch fails at its commit flush
        await w.writes(("acme/m1", write("Alice drinks tea")))
    state = processor.state("acme/m1")
    assert state is not None
    assert state.access_count == 1  # applied, not yet acknowledged
    processor.memories.clear()  # the crash: the state's changelog record never landed
    processor.documents.clear()
    deliveries.broken = False
    w.offset -= 1  # the write is delivered again: its offset was never committed
    await w.writes(("acme/m1", write("Alice drinks tea")))
    state = processor.state("acme/m1")
    assert state is not None
    assert state.access_count == 1
    assert processor.pending == {}  # dropped once acknowledged


async def test_a_consolidation_of_every_tenant_loses_only_the_decisions_of_a_tenant_that_fails(
    tmp_path: Path,
) -> None:
    """One tenant's failure (a store refusing its read, a policy the plan cannot use) dropped
    the decisions and reports of every tenant, behind one dead letter naming none.
    """

    store = RowStore(refuse=["acme"])
    w = Worker(tmp_path, Embedder({}), store)
    for tenant_id in ("acme", "globex"):
        for memory_id in ("a", "b"):
            row = make_row(tenant_id, memory_id, X, content="Ann likes tea.")
            store.rows[row.key] = row
    request = orjson.dumps({"v": 1, "tenant_id": "*", "at": "2026-03-01T12:00:00+00:00"})
    await w.worker.on_consolidation(
        _inbound(Event(Message("memory-consolidation", 0, 1, b"*", request)))
    )
    reports = [k for role, k, v in w.sent if role == "audit" and v.get("kind") == "consolidation"]
    assert reports == [b"globex"]
    merged = [k for role, k, v in w.sent if role == "memory-writes" and v["decision"] == "absorb"]
    assert merged == [b"globex/a"]
    (letter,) = [v for role, _, v in w.sent if role == "dead-letter"]
    assert letter["field"] == "tenant_id"
    assert letter["reason"].startswith("tenant_id='acme': internal error planning")


async def test_a_parked_access_dead_lettered_by_one_agent_is_not_again_by_the_other(
    tmp_path: Path,
) -> None:
    """While the writes agent waited for its records to be acknowledged, the access agent's batch
    found the same parked access and dead-lettered it a second time.
    """

    w = Worker(tmp_path, Embedder({"Alice drinks tea": X}))
    deliveries = Acknowledgements(acknowledged=False)
    w.worker.deliveries = deliveries  # type: ignore[assignment]
    await w.worker.on_access(
        [Event(Message("memory-access", 0, 3, b"acme/ghost", access("ghost")))]
    )
    w.broker.end = 1  # the writes agent's batch catches the partition up
    writes = asyncio.create_task(w.writes(("acme/m1", write("Alice drinks tea"))))
    await asyncio.sleep(0.05)  # it waits for its acknowledgements now
    other = [Event(Message("memory-access", 0, 4, b"acme/m1", access("m1")))]
    accesses = asyncio.create_task(w.worker.on_access(other))
    await asyncio.sleep(0.05)
    deliveries.acknowledged.set()
    await asyncio.gather(writes, accesses)
    assert [v["offset"] for role, _, v in w.sent if role == "dead-letter"] == [3]
    assert w.worker.processor.pending == {}
    assert w.worker.processor.in_flight == {}


async def test_an_access_parked_while_the_end_offset_is_asked_for_waits_for_its_write(
    tmp_path: Path,
) -> None:
    """The writes agent dead-lettered every access parked in the partition once the broker's
    answer came, one parked while it was on its way too (its write lies past that end offset).
    """

    class Broker:
        """Answers with the end offset as it was when asked, after ``meanwhile`` ran."""

        def __init__(self) -> None:
            self._committed_offset: dict[Any, int] = {}
            self.end = 1_000
            self.meanwhile: Any = None

        async def highwaters(self, *tps: Any) -> dict[Any, int]:
            end, job, self.meanwhile = self.end, self.meanwhile, None
            if job is not None:
                await job()
            return dict.fromkeys(tps, end)

    w = Worker(tmp_path, Embedder({"Alice drinks tea": X, "Bob drinks coffee": Y}))
    w.worker.app.consumer = broker = Broker()  # type: ignore[assignment]
    await w.worker.on_access(
        [Event(Message("memory-access", 0, 1, b"acme/ghost", access("ghost")))]
    )
    broker.end = 2  # one write on the topic (offset 1): m1's

    async def the_app_writes_m2_and_reads_it() -> None:
        broker.end = 3
        read = [Event(Message("memory-access", 0, 2, b"acme/m2", access("m2")))]
        await w.worker.on_access(read)

    broker.meanwhile = the_app_writes_m2_and_reads_it
    sent = await w.writes(("acme/m1", write("Alice drinks tea")))
    assert [key for key, _, _ in letters(sent)] == [b"acme/ghost"]
    await w.writes(("acme/m2", write("Bob drinks coffee", "m2")))
    m2 = w.worker.processor.state("acme/m2")
    assert m2 is not None
    assert m2.access_count == 1


async def test_accesses_parked_in_one_batch_write_the_pending_table_once_each_memory(
    tmp_path: Path,
) -> None:
    """Each parked access rewrote its memory's whole list: 1,000 distinct accesses in one request
    made 1,000 changelog records of up to 250 KB (and 5,000 went past the broker's 1 MiB limit,
    failing the batch on every try).
    """

    class Counted(dict[bytes, bytes]):
        assigned = 0

        def __setitem__(self, key: bytes, value: bytes) -> None:
            Counted.assigned += 1
            super().__setitem__(key, value)

    w = Worker(tmp_path, Embedder({}))
    w.broker.end = 1_000_000  # the writes lag: unknown memories wait
    processor = w.worker.processor
    processor.pending = pending = Counted()
    start = datetime(2026, 3, 1, 10, tzinfo=UTC)

    def at(i: int) -> bytes:
        return access(at=(start + timedelta(seconds=i)).isoformat())  # each one its own

    events = [Event(Message("memory-access", 0, i, b"acme/m1", at(i))) for i in range(1, 1_001)]
    await w.worker.on_access(events)
    assert Counted.assigned == 1
    assert len(processor.parked(b"acme/m1")) == 1_000
    more = [Event(Message("memory-access", 0, i, b"acme/m1", at(i))) for i in range(1_001, 4_001)]
    w.sent.clear()
    await w.worker.on_access(more)
    assert len(pending[b"acme/m1"]) <= MAX_PARKED_BYTES + 1_000  # under what a record may hold
    refused = [v for role, _, v in w.sent if role == "dead-letter"]
    assert refused
    assert {v["field"] for v in refused} == {"memory_id"}
    assert len(processor.parked(b"acme/m1")) + len(refused) == 4_000  # each one or the other


async def test_a_write_to_a_purged_memory_waits_until_the_erasures_are_read(
    tmp_path: Path,
) -> None:
    """An erase racing a write (its key minted elsewhere, erased after): the worker, behind on
    the keys topic, still opened the write and made the erased memory anew, words and all.
    """

    class Reading(Keys):
        reads = 0

        async def read_through(self) -> None:
            Reading.reads += 1

    w = Worker(tmp_path, Embedder({"Ann's PIN is 4711": X, "Bob": Y}))
    w.worker.keys = Reading()  # type: ignore[assignment]
    await w.writes(("acme/m1", write("Ann's PIN is 4711")))
    for decision in ("retire", "purge"):
        value = {
            "v": 1,
            "kind": "decision",
            "tenant_id": "acme",
            "memory_id": "m1",
            "at": "2026-03-01T12:30:00+00:00",
            "decision": decision,
            "reason": "erased through the API",
            **({"to": "deleted"} if decision == "retire" else {}),
        }
        await w.writes(("acme/m1", orjson.dumps(value)))
    assert Reading.reads == 0
    await w.writes(("acme/m2", write("Bob", "m2")))  # another memory: no wait
    assert Reading.reads == 0
    await w.writes(("acme/m1", write("Ann's PIN is 4711")))
    assert Reading.reads == 1


async def test_deletes_within_the_compaction_interval_are_compacted_when_it_ends(
    tmp_path: Path,
) -> None:
    """They waited for a later delete, which might never come: an erased memory's words stayed
    in a Milvus server's segments. A failed ask was not made again either.
    """

    class Compacting(Store):
        def __init__(self) -> None:
            super().__init__()
            self.asked = 0
            self.failures = 1

        def compact(self) -> None:
            self.asked += 1
            if self.failures:
                self.failures -= 1
                raise StorageError("compact", "Milvus is busy", retriable=True)

    store = Compacting()
    w = Worker(tmp_path, Embedder({}), store)
    # an interval far longer than the ask's thread hop (0.05 s was eaten by a loaded machine)
    w.worker.settings = Settings(milvus_compact_interval_s=1.0)  # type: ignore[assignment]
    await w.worker.compact_soon()  # asked at once: fails
    await w.worker.compact_soon()  # within the interval: asked when it ends (once)
    await w.worker.compact_soon()
    assert store.asked == 1
    await until(lambda: store.asked >= 2)
    assert store.asked == 2
    await asyncio.sleep(1.2)  # nothing left to ask for
    assert store.asked == 2


async def test_the_first_batch_waits_until_the_tenants_topic_is_read_to_its_end(
    tmp_path: Path,
) -> None:
    """A tenant of the file that the topic deleted (or gave another policy) was served by the
    file's settings after a restart until the follow happened to read the topic: its writes
    were applied. The keys topic was already read through before the first batch.
    """
    log = TenantLog("127.0.0.1:1", "t.tenants", TenantRegistry.open_to(["acme", "globex"]))
    reads = []

    async def read_through() -> None:  # the topic holds globex's deletion
        reads.append(1)
        log.apply(b"globex", orjson.dumps({"v": 1, "tenant_id": "globex", "deleted": True}))
        log.refresh()

    log.read_through = read_through  # type: ignore[method-assign]
    w = Worker(tmp_path, Embedder({"hello": X}))
    w.worker.tenants = log
    w.worker.tenants_read = False
    w.worker.processor = Processor({}, {}, {}, {}, Limits(4, 2000, log))
    sent = await w.writes(("globex/m1", write("hello", tenant_id="globex")))
    assert [(key, field) for key, field, _ in letters(sent)] == [(b"globex/m1", "tenant_id")]
    await w.writes(("acme/m1", write("hello")))
    assert reads == [1]  # once, before the first batch


async def test_a_version_superseded_by_a_memory_no_longer_held_is_current_after_a_consolidation(
    tmp_path: Path,
) -> None:
    """A version superseded by a memory that left without reinstating it (deleted before
    successors recorded their predecessors, then purged; or gone from the tables) stayed
    superseded for good: nothing asked its successor again.
    """

    store = RowStore()
    w = Worker(tmp_path, Embedder({"Alice lives in Osaka": X}), store)
    await w.writes(("acme/n", write("Alice lives in Osaka", memory_id="n")))
    then = datetime(2026, 3, 1, 12, 30, tzinfo=UTC)
    superseded = Supersede(then, "p", "a newer value")
    await w.writes(("acme/n", orjson.dumps(decision_value("acme", "n", superseded))))
    assert store.rows["acme/n"].superseded_by == "p"
    for row in (  # a version whose successor is live is left alone
        make_row(
            "acme", "q", Y, content="Bob likes tea.", valid_to_us=2_000_000, superseded_by="r"
        ),
        make_row("acme", "r", Y, content="Bob likes coffee now."),
    ):
        store.rows[row.key] = row
    w.sent.clear()
    request = {"v": 1, "tenant_id": "acme", "at": "2026-03-01T12:45:00+00:00"}
    await w.worker.on_consolidation(
        _inbound(Event(Message("memory-consolidation", 0, 1, b"acme", orjson.dumps(request))))
    )
    asked = [(k.decode(), v) for role, k, v in w.sent if role == "memory-writes"]
    assert [(k, v["decision"], v["predecessor"]) for k, v in asked] == [("acme/p", "succeeds", "n")]
    sent = await w.writes(*((k, orjson.dumps(v)) for k, v in asked))  # p is not in the tables
    answered = [(k.decode(), v) for role, k, v in sent if role == "memory-writes"]
    assert [(k, v["decision"], v["by"]) for k, v in answered] == [("acme/n", "reinstate", "p")]
    await w.writes(*((k, orjson.dumps(v)) for k, v in answered))
    state = w.worker.processor.state("acme/n")
    assert state is not None
    assert (state.valid_to, state.superseded_by) == (None, None)
    assert store.rows["acme/n"].superseded_by == ""


async def test_a_succeeds_for_a_memory_not_yet_written_reinstates_nothing(tmp_path: Path) -> None:
    """A ``succeeds`` can overtake its successor's write (the API produces the write and the
    ``supersede`` to two partitions): only a consolidation's recheck, asked because the store
    shows the version superseded by a memory it does not hold, is answered with a reinstate.
    """
    w = Worker(tmp_path, Embedder({}))
    at = datetime(2026, 3, 1, 12, 30, tzinfo=UTC)
    overtaking = Succeeds(at, "n", "n superseded by it")
    sent = await w.writes(("acme/p", orjson.dumps(decision_value("acme", "p", overtaking))))
    assert [v for role, _, v in sent if role == "memory-writes"] == []
    asked = Succeeds(at, "n", "asked by a recheck", recheck=True)
    sent = await w.writes(("acme/p", orjson.dumps(decision_value("acme", "p", asked))))
    answered = [(k, v["decision"], v["by"]) for role, k, v in sent if role == "memory-writes"]
    assert answered == [(b"acme/n", "reinstate", "p")]


def _decisions(sent: list[tuple[str, bytes, dict[str, Any]]]) -> list[tuple[str, str, str]]:
    """The ``(memory key, decision, by)`` of the decisions a batch sent to ``memory-writes``."""
    return [
        (k.decode(), v["decision"], v.get("by", ""))
        for role, k, v in sent
        if role == "memory-writes"
    ]


async def _carry(w: Worker, sent: list[tuple[str, bytes, dict[str, Any]]]) -> None:
    """Apply what a batch sent to ``memory-writes``, and what that sends, to the end."""
    while pending := [(k.decode(), orjson.dumps(v)) for r, k, v in sent if r == "memory-writes"]:
        sent = await w.writes(*pending)


async def test_an_update_whose_version_was_not_applied_supersedes_nothing(tmp_path: Path) -> None:
    """An update produced its version's write and the ``supersede`` of the memory it updated
    together: a version the worker dead-lettered (here its words could not be embedded) left
    that memory superseded by a memory that never was, out of recall until a consolidation's
    recheck. Now the write names the memory it ``supersedes`` and the worker sends the
    ``supersede`` once the version is applied, and again when it meets the write again.
    """
    words = "Alice lives in Porto"
    w = Worker(tmp_path, Embedder({"Alice lives in Osaka": X, words: Y}, fail=[words]))
    await w.writes(("acme/m1", write("Alice lives in Osaka")))
    at = "2026-03-01T12:30:00+00:00"
    version = write(words, "p", at=at, supersedes="m1")
    sent = await w.writes(("acme/p", version))
    assert [field for _, field, _ in letters(sent)] == ["embedding"]
    assert _decisions(sent) == []
    state = w.worker.processor.state("acme/m1")
    assert state is not None
    assert (state.valid_to, state.superseded_by) == (None, None)
    w.worker.services.embedder.fail.clear()  # type: ignore[attr-defined]
    sent = await w.writes(("acme/p", version))  # sent again, and applied
    assert _decisions(sent) == [("acme/m1", "supersede", "p")]
    await _carry(w, sent)
    state, applied = w.worker.processor.state("acme/m1"), w.worker.processor.state("acme/p")
    assert state is not None
    assert applied is not None
    assert (state.valid_to, state.superseded_by) == (datetime.fromisoformat(at), "p")
    assert applied.predecessors == ("m1",)
    assert w.store.rows["acme/m1"].superseded_by == "p"
    w.offset -= 1  # the same write met again by offset (a redelivery): its decision again
    sent = await w.writes(("acme/p", version))
    assert _decisions(sent) == [("acme/m1", "supersede", "p")]


async def test_an_update_s_write_met_again_after_its_version_was_written_anew_supersedes_nothing(
    tmp_path: Path,
) -> None:
    """The version deleted (the memory current again), then written anew under its id by a
    plain write: the update's write met again by offset (a crash before its commit) superseded
    the memory again, as the run without the crash did not.
    """
    w = Worker(tmp_path, Embedder({"Notes from the first draft": X, "Notes, second draft": Y}))
    await w.writes(("acme/m1", write("Notes from the first draft")))
    update = write("Notes, second draft", "v", at="2026-03-01T12:30:00+00:00", supersedes="m1")
    await _carry(w, await w.writes(("acme/v", update)))
    first = w.offset
    gone = Retire(datetime(2026, 3, 1, 12, 45, tzinfo=UTC), Lifecycle.DELETED, "deleted")
    await _carry(w, await w.writes(("acme/v", orjson.dumps(decision_value("acme", "v", gone)))))
    fresh = write("Notes, second draft", "v", at="2026-03-01T12:50:00+00:00")
    assert letters(await w.writes(("acme/v", fresh))) == []
    state = w.worker.processor.state("acme/m1")
    assert state is not None
    assert state.superseded_by is None  # current again since v was deleted
    w.offset = first - 1
    sent = await w.writes(("acme/v", update))  # met again by offset
    assert _decisions(sent) == []


@pytest.mark.parametrize("purged", [False, True])
async def test_an_update_sent_again_after_its_version_left_recall_does_not_make_it_again(
    tmp_path: Path, purged: bool
) -> None:
    """The route refuses the same update sent again once its version was deleted (a 409), but a
    purge it knows only from the state view's last marks; past them the write reached the worker,
    which made the version anew and superseded the memory again, undoing the user's delete.
    """
    w = Worker(tmp_path, Embedder({"Notes from the first draft": X, "Notes, second draft": Y}))
    await w.writes(("acme/m1", write("Notes from the first draft")))
    update = write("Notes, second draft", "v", at="2026-03-01T12:30:00+00:00", supersedes="m1")
    await _carry(w, await w.writes(("acme/v", update)))
    when = datetime(2026, 3, 1, 12, 45, tzinfo=UTC)
    events: list[Retire | Purge] = [Retire(when, Lifecycle.DELETED, "deleted")]
    if purged:
        events.append(Purge(when, "purged", state_changed_at=when))
    for event in events:
        await _carry(
            w, await w.writes(("acme/v", orjson.dumps(decision_value("acme", "v", event))))
        )
    embedded = list(w.worker.services.embedder.texts)  # type: ignore[attr-defined]
    sent = await w.writes(("acme/v", update))  # the same update, sent again
    assert _decisions(sent) == []
    assert letters(sent) == []
    assert w.worker.services.embedder.texts == embedded  # type: ignore[attr-defined]
    (audited,) = [v for role, _, v in sent if role == "audit"]
    assert (audited["kind"], audited["after"]["state"]) == ("ignored", "deleted")
    version, state = w.worker.processor.state("acme/v"), w.worker.processor.state("acme/m1")
    assert version is not None
    assert state is not None
    assert (version.state, version.purged) == (Lifecycle.DELETED, purged)
    assert (state.valid_to, state.superseded_by) == (None, None)
    plain = write("Notes, second draft", "v", at="2026-03-01T12:50:00+00:00")
    await w.writes(("acme/v", plain))  # a write not an update's makes it anew, as ever
    again = w.worker.processor.state("acme/v")
    assert again is not None
    assert again.state is Lifecycle.ACTIVE


async def test_racing_updates_whose_first_version_was_dead_lettered_leave_the_second_current(
    tmp_path: Path,
) -> None:
    """Two updates of one memory that both passed the API's check, the earlier version's write
    dead-lettered: the memory ends superseded by the later version alone (a reinstate answered
    for the unknown version made it current beside the later one, in either order). The words
    state no fact the supersession rule reads: only the updates supersede.
    """
    w = Worker(
        tmp_path,
        Embedder(
            {"Notes from the first draft": X, "Notes from the third draft": Y},
            fail=["Notes from the second draft"],
        ),
    )
    await w.writes(("acme/m1", write("Notes from the first draft")))
    sent = await w.writes(
        (
            "acme/v1",
            write(
                "Notes from the second draft", "v1", at="2026-03-01T12:30:00+00:00", supersedes="m1"
            ),
        ),
        (
            "acme/v2",
            write(
                "Notes from the third draft", "v2", at="2026-03-01T12:40:00+00:00", supersedes="m1"
            ),
        ),
    )
    assert [key for key, _, _ in letters(sent)] == [b"acme/v1"]
    assert _decisions(sent) == [("acme/m1", "supersede", "v2")]
    await _carry(w, sent)
    states = {m: w.worker.processor.state(f"acme/{m}") for m in ("m1", "v1", "v2")}
    assert states["v1"] is None
    assert states["m1"] is not None
    assert states["v2"] is not None
    assert (states["m1"].superseded_by, states["v2"].superseded_by) == ("v2", None)


def marker(memory_id: str) -> tuple[bytes, bytes]:
    """The erasure marker of acme's ``memory_id`` (one key of it, destroyed)."""
    return erasure_record("acme", memory_id, [new_key("acme", memory_id).key_id])


def erased_ring(*erased: str, written_again: Sequence[str] = ()) -> KeyRing:
    """Keys of acme with the erasure markers of ``erased``, and a new key for those
    ``written_again`` since their erasure.
    """
    ring = KeyRing()
    for memory_id in erased:
        ring.apply(*marker(memory_id))
    for memory_id in written_again:
        ring.add(new_key("acme", memory_id))
    return ring


def with_keys(w: Worker, ring: KeyRing) -> Keys:
    keys = Keys(ring)
    w.worker.keys = keys  # type: ignore[assignment]
    w.worker.processor = Processor({}, {}, {}, {}, dataclasses.replace(LIMITS, keys=ring))
    return keys


SUMMARY = "Standup is at nine. Standup ran long."
AT_MERGE = datetime(2026, 1, 1, 12, 30, tzinfo=UTC)


async def test_a_summary_of_a_memory_erased_since_its_plan_is_never_written(
    tmp_path: Path,
) -> None:
    """A consolidation planned from rows read before an erasure wrote, after it, a summary
    quoting the erased memory's sentences: served, and readable from the log under its key.
    """
    w = Worker(tmp_path, Embedder({SUMMARY: X}))
    keys = with_keys(w, erased_ring("c3", written_again=["c3"]))
    keys.arriving = [[marker("c1")]]  # on the topic, not read yet: read before judging
    keys.seen = w.sent  # erased only once the restore is sent: a redelivery decides it again
    sent = await w.writes(
        ("acme/s1", write(SUMMARY, "s1", summary_of=["c1", "c2"])),  # c1 erased since
        ("acme/s2", write(SUMMARY, "s2", summary_of=["c2", "c4"])),
        ("acme/s3", write(SUMMARY, "s3", summary_of=["c3", "c4"])),  # c3 written again since
    )
    assert letters(sent) == []
    assert w.worker.processor.state("acme/s1") is None
    assert sorted(w.store.rows) == ["acme/s2", "acme/s3"]
    assert keys.erased == [("acme", ["s1"])]  # its sealed write never opens again
    assert not [v for role, _, v in sent if role == "audit" and v.get("memory_id") == "s1"]
    told = [(k, v["decision"], v["by"]) for role, k, v in sent if role == "memory-writes"]
    assert told == [(b"acme/c2", "restore", "s1")]  # archived into it by the plan: active again
    assert keys.sent_before_erasing == [["restore"]]


async def test_a_summary_of_a_memory_erased_and_written_again_since_its_plan_is_refused(
    tmp_path: Path,
) -> None:
    """A source erased after the plan and written again under its id before the summary was
    applied had a live key again: the summary was made, quoting the erased words. The plan
    names a key each source had (``source_keys``); the erasure destroyed that one.
    """
    w = Worker(tmp_path, Embedder({SUMMARY: X}))
    planned, kept = new_key("acme", "c3"), new_key("acme", "c4")
    ring = KeyRing()
    ring.add(kept)
    ring.apply(*erasure_record("acme", "c3", [planned.key_id]))  # erased since the plan
    ring.add(new_key("acme", "c3"))  # and written again under its id
    keys = with_keys(w, ring)
    sent = await w.writes(
        (
            "acme/s3",
            write(
                SUMMARY,
                "s3",
                summary_of=["c3", "c4"],
                source_keys={
                    "c3": planned.key_id,
                    "c4": kept.key_id,
                },
            ),
        ),
        (
            "acme/s4",
            write(
                SUMMARY,
                "s4",
                summary_of=["c4", "c5"],
                source_keys={
                    "c4": kept.key_id,
                },
            ),
        ),
    )
    assert letters(sent) == []
    assert sorted(w.store.rows) == ["acme/s4"]  # s4's sources keep the keys it names
    assert w.worker.processor.state("acme/s3") is None
    assert keys.erased == [("acme", ["s3"])]
    told = [(k, v["decision"], v["by"]) for role, k, v in sent if role == "memory-writes"]
    assert told == [(b"acme/c4", "restore", "s3")]  # the written-again c3 is not restored


async def test_a_summary_made_again_under_another_scope_is_refused_and_tells_its_sources(
    tmp_path: Path,
) -> None:
    """A summary's id derives from its sources' ids alone: sources deleted and written again
    under their ids in another session, then compressed again, name the first summary, which
    the worker ignores (a memory keeps its scope). Consolidation had archived them into it, so
    they are told: active again, not archived into a summary that is not theirs.
    """
    w = Worker(tmp_path, Embedder({SUMMARY: X, "a": X, "b": X}))
    made = write(SUMMARY, "s", summary_of=["c1", "c2"], session_id="s1")
    await w.writes(("acme/s", made))
    again = write(SUMMARY, "s", summary_of=["c1", "c2"], session_id="s2", at="2026-03-01T12:30:00Z")
    sent = await w.writes(("acme/s", again))
    assert letters(sent) == []
    (audit,) = [v for role, _, v in sent if role == "audit"]
    assert (audit["kind"], "another session_id" in audit["reason"]) == ("ignored", True)
    told = sorted((k, v["decision"], v["by"]) for role, k, v in sent if role == "memory-writes")
    assert told == [(b"acme/c1", "restore", "s"), (b"acme/c2", "restore", "s")]
    summary = w.worker.processor.state("acme/s")
    assert summary is not None
    assert summary.session_id == "s1"


@pytest.mark.parametrize(
    ("source_keys", "field"),
    [
        ({"c9": "k1"}, "source_keys.c9"),  # not a source
        ({"c1": "not a key/id"}, "source_keys.c1"),
        ({"c1": 5}, "source_keys.c1"),
    ],
)
async def test_a_summarys_source_keys_name_its_sources_and_key_ids(
    tmp_path: Path, source_keys: dict[str, object], field: str
) -> None:
    w = Worker(tmp_path, Embedder({SUMMARY: X}))
    record = write(SUMMARY, "s1", summary_of=["c1", "c2"], source_keys=source_keys)
    sent = await w.writes(("acme/s1", record))
    assert [(k, f) for k, f, _ in letters(sent)] == [(b"acme/s1", field)]


async def test_a_summary_made_as_its_source_is_erased_is_erased_once_its_row_is_in(
    tmp_path: Path,
) -> None:
    """The erasure looks for summaries in Milvus after it wrote its markers; a summary the
    worker had judged before reading them, whose row landed after that search, was served on.
    """
    w = Worker(tmp_path, Embedder({SUMMARY: X, "Standup ran long.": Y}))
    keys = with_keys(w, KeyRing())
    await w.writes(("acme/c2", write("Standup ran long.", "c2")))
    archived = Retire(RECEIVED, Lifecycle.ARCHIVED, "compressed into summary s1", "s1")
    await w.writes(("acme/c2", orjson.dumps(decision_value("acme", "c2", archived))))
    keys.arriving = [[], [marker("c1")]]  # the erasure's markers come after the first read
    sent = await w.writes(("acme/s1", write(SUMMARY, "s1", summary_of=["c1", "c2"])))
    assert "acme/s1" in w.store.rows  # made: its sources were not erased when it was judged
    assert keys.erased == [("acme", ["s1"])]
    decisions = [(k.decode(), v) for role, k, v in sent if role == "memory-writes"]
    assert [(k, v["decision"]) for k, v in decisions] == [
        ("acme/s1", "retire"),
        ("acme/s1", "purge"),
    ]
    sent = await w.writes(*((k, orjson.dumps(v)) for k, v in decisions))
    assert "acme/s1" not in w.store.rows
    restores = [(k.decode(), v) for role, k, v in sent if role == "memory-writes"]
    assert [(k, v["decision"], v["by"]) for k, v in restores] == [
        ("acme/c1", "restore", "s1"),  # erased: ignores it
        ("acme/c2", "restore", "s1"),
    ]
    await w.writes(*((k, orjson.dumps(v)) for k, v in restores))
    state = w.worker.processor.state("acme/s1")
    assert state is not None
    assert state.purged
    source = w.worker.processor.state("acme/c2")
    assert source is not None
    assert (source.state, source.merged_into) == (Lifecycle.ACTIVE, None)
    assert w.store.rows["acme/c2"].state == "active"


async def test_a_summary_met_again_by_offset_is_rechecked_against_erasures(
    tmp_path: Path,
) -> None:
    """A batch applied again, or redelivered after a crash, skips by offset what its first try
    applied: a summary its first try made, and whose source was erased before that try could
    recheck it, was never rechecked (served on, its key live).
    """
    w = Worker(tmp_path, Embedder({SUMMARY: X}))
    keys = with_keys(w, KeyRing())
    value = write(SUMMARY, "s1", summary_of=["c1", "c2"])
    first = Event(Message("memory-writes", 0, 1, b"acme/s1", value))
    await w.worker.on_writes([first])  # made; its recheck found nothing erased yet
    assert keys.erased == []
    keys.ring.apply(*marker("c1"))
    w.sent.clear()
    await w.worker.on_writes([Event(Message("memory-writes", 0, 1, b"acme/s1", value))])
    decided = [(k, v["decision"]) for role, k, v in w.sent if role == "memory-writes"]
    assert decided == [(b"acme/s1", "retire"), (b"acme/s1", "purge")]
    assert keys.erased == [("acme", ["s1"])]


async def test_a_summary_erased_before_is_not_made_anew_from_an_erased_source(
    tmp_path: Path,
) -> None:
    """A summary's id derives from its sources: a second plan of the same cluster, read before
    an erasure, wrote it again over the tombstone the erasure had left."""
    w = Worker(tmp_path, Embedder({SUMMARY: X}))
    keys = with_keys(w, KeyRing())
    await w.writes(("acme/s1", write(SUMMARY, "s1", summary_of=["c1", "c2"])))
    then = datetime(2026, 3, 1, 12, 30, tzinfo=UTC)
    await w.writes(decided("s1", Retire(then, Lifecycle.DELETED, "erased through the API")))
    await w.writes(decided("s1", Purge(then, "erased through the API")))
    keys.ring.apply(*marker("c1"))
    await w.writes(("acme/s1", write(SUMMARY, "s1", summary_of=["c1", "c2"])))
    state = w.worker.processor.state("acme/s1")
    assert state is not None
    assert state.purged
    assert "acme/s1" not in w.store.rows
    assert keys.erased == [("acme", ["s1"])]


async def test_a_replay_refuses_such_a_summary_and_erases_nothing(tmp_path: Path) -> None:
    """A replay produces nothing: its erasures would reach the live deployment's keys topic."""
    w = Worker(tmp_path, Embedder({SUMMARY: X}))
    w.worker.replay = True
    keys = with_keys(w, erased_ring("c1"))
    assert await w.writes(("acme/s1", write(SUMMARY, "s1", summary_of=["c1", "c2"]))) == []
    assert w.worker.processor.state("acme/s1") is None
    assert keys.erased == []


async def test_the_keys_of_a_refused_summary_are_erased_however_long_the_topic_refuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch applied again skips what its first try applied: a failure that ended the batch
    left the summary's key live for good, its sealed write opening on the log.
    """
    monkeypatch.setattr(app, "KEYS_RETRY_S", 0.01)
    w = Worker(tmp_path, Embedder({SUMMARY: X}))
    keys = with_keys(w, erased_ring("c1"))
    keys.failures = 3
    await w.writes(("acme/s1", write(SUMMARY, "s1", summary_of=["c1", "c2"])))
    assert (keys.failures, keys.erased) == (0, [("acme", ["s1"])])


async def test_a_consolidation_never_plans_a_memory_erased_and_awaiting_its_purge(
    tmp_path: Path,
) -> None:
    """Its row is still in Milvus until the worker applies the purge: merged or summarised, its
    words would have lived on in the plan's survivor or summary.
    """
    store = RowStore()
    for memory_id in ("d1", "d2"):
        row = make_row("acme", memory_id, X, content="the same words")
        store.rows[row.key] = row

    async def planned(*arriving: tuple[bytes, bytes]) -> list[dict[str, Any]]:
        w = Worker(tmp_path, Embedder({}), store)
        with_keys(w, KeyRing()).arriving = [list(arriving)]  # read before the plan
        request = {"v": 1, "tenant_id": "acme", "at": "2026-03-01T12:45:00+00:00"}
        message = Message("memory-consolidation", 0, 1, b"acme", orjson.dumps(request))
        await w.worker.on_consolidation(_inbound(Event(message)))
        (report,) = [v for role, _, v in w.sent if v.get("kind") == "consolidation"]
        return list(report["decisions"])

    assert [(d["kind"], d["target"], d["sources"]) for d in await planned()] == [
        ("merge", "d1", ["d2"])
    ]
    assert await planned(marker("d1")) == []


async def test_a_consolidations_summaries_follow_the_archiving_of_their_sources(
    tmp_path: Path,
) -> None:
    """A summary refused (it quoted a memory erased since the plan) sends its sources a restore
    from the summary's partition; the plan's archiving of them, sent by another producer to
    theirs, could land after it and archive them into a summary that never was.
    """

    class Later(Topic):
        """Acknowledges each record only when the loop next runs; notes, for each summary
        write, whether every record sent before it was acknowledged by then.
        """

        def __init__(self, role: str, sent: list[tuple[str, bytes, dict[str, Any]]]) -> None:
            super().__init__(role, sent)
            self.pending: list[asyncio.Future[None]] = []
            self.settled_before_summary: list[bool] = []

        async def send(self, key: bytes, value: bytes) -> asyncio.Future[None]:
            if b'"summary_of"' in value:
                self.settled_before_summary.append(all(f.done() for f in self.pending))
            self.sent.append((self.role, key, orjson.loads(value)))
            done = asyncio.get_running_loop().create_future()
            asyncio.get_running_loop().call_soon(done.set_result, None)
            self.pending.append(done)
            return done

    store = RowStore()
    for memory_id, vector in (("c1", X), ("c2", (1.0, 0.5, 0.0, 0.0))):  # cosine 0.89
        row = make_row("acme", memory_id, vector, content=f"Standup note {memory_id}.")
        store.rows[row.key] = row
    w = Worker(tmp_path, Embedder({}), store)
    ring = KeyRing()
    older, newest = new_key("acme", "c1"), new_key("acme", "c1")
    for key in (older, newest):
        ring.add(key)
    with_keys(w, ring)
    writes = Later(topics.WRITES, w.sent)
    w.worker.topics[topics.WRITES] = writes  # type: ignore[assignment]
    request = {"v": 1, "tenant_id": "acme", "at": "2026-03-01T12:45:00+00:00"}
    message = Message("memory-consolidation", 0, 1, b"acme", orjson.dumps(request))
    await w.worker.on_consolidation(_inbound(Event(message)))
    sent = [
        (k.decode(), v.get("decision", "write")) for role, k, v in w.sent if role == "memory-writes"
    ]
    assert sorted(sent[:2]) == [("acme/c1", "retire"), ("acme/c2", "retire")]
    assert sent[2][1] == "write"  # the summary, last
    assert writes.settled_before_summary == [True]
    # it names a key of each source that has one: their erasure erases it, written again or not
    (summary,) = [v for role, _, v in w.sent if role == "memory-writes" and "summary_of" in v]
    assert summary["source_keys"] == {"c1": newest.key_id}


async def test_a_merged_duplicates_purge_erases_the_key_of_its_words_alone(
    tmp_path: Path,
) -> None:
    """A duplicate merged into a survivor kept its key after its purge (30 days after the
    merge): erasing the survivor then found no row linking to it, so its sealed write stayed
    readable in the log for good. A purge planned for a merged duplicate erases the key of its
    stored document when that is the memory's one key; not when another is minted (a write of
    the same id on its way: an acknowledged write lost), not when it was written twice (a
    replay would bring it back with its other words), not on a user's purge.
    """
    words = "Ann's PIN is 4711"
    w = Worker(tmp_path, Embedder({words: X}))
    ring = KeyRing()
    keys = with_keys(w, ring)
    sealed_by = {m: new_key("acme", m) for m in ("d1", "d2", "d3", "m2")}
    for memory_id, key in sealed_by.items():
        ring.add(key)
        value = seal_write(orjson.loads(write(words, memory_id, at="2026-01-01T12:00:00Z")), key)
        await w.writes((f"acme/{memory_id}", orjson.dumps(value)))
    again = new_key("acme", "d3")  # d3 written twice
    ring.add(again)
    value = seal_write(orjson.loads(write(words, "d3", at="2026-01-01T12:01:00Z")), again)
    await w.writes(("acme/d3", orjson.dumps(value)))
    merged = Retire(AT_MERGE, Lifecycle.DELETED, "merged into s1", "s1")
    deleted = Retire(AT_MERGE, Lifecycle.DELETED, "deleted through the API")
    await w.writes(
        *(
            (f"acme/{m}", orjson.dumps(decision_value("acme", m, merged)))
            for m in ("d1", "d2", "d3")
        ),
        ("acme/m2", orjson.dumps(decision_value("acme", "m2", deleted))),
    )
    ring.add(new_key("acme", "d2"))  # minted for a write of d2 not applied yet
    later = RECEIVED - timedelta(minutes=5)  # 59 days after the merge
    purge = Purge(later, "deleted for more than 720 h", state_changed_at=AT_MERGE, erase=True)
    purges = dict.fromkeys(("d1", "d2", "d3"), purge)
    purges["m2"] = dataclasses.replace(purge, erase=False)
    sent = await w.writes(
        *((f"acme/{m}", orjson.dumps(decision_value("acme", m, p))) for m, p in purges.items())
    )
    assert letters(sent) == []
    assert all(w.worker.processor.state(f"acme/{m}").purged for m in purges)  # type: ignore[union-attr]
    assert keys.erased == [("acme", ["d1"])]
    assert keys.only == [{"d1": {sealed_by["d1"].key_id}}]
    await w.writes(
        *((f"acme/{m}", orjson.dumps(decision_value("acme", m, p))) for m, p in purges.items())
    )
    assert keys.erased == [("acme", ["d1"])]  # redelivered: erased on its first delivery


async def test_a_decoders_bug_dead_letters_its_record_and_the_batch_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A decoder raising anything but RecordError (a sealed write nested past what orjson
    writes raised TypeError) failed the whole batch: its good records were never applied,
    retried until the agent gave up.
    """
    real = decode_memory_event

    def buggy(raw: bytes, limits: Limits) -> Any:
        if b"poison" in raw:
            raise TypeError("Recursion limit reached")
        return real(raw, limits)

    monkeypatch.setattr(processor_module, "decode_memory_event", buggy)
    w = Worker(tmp_path, Embedder({"alpha": X, "gamma": Y, "poison": X}))
    sent = await w.writes(
        ("acme/m1", write("alpha", "m1")),
        ("acme/m2", write("poison", "m2")),
        ("acme/m3", write("gamma", "m3")),
    )
    assert [(k, f) for k, f, _ in letters(sent)] == [(b"acme/m2", "$")]
    assert "internal error: TypeError" in letters(sent)[0][2]
    assert sorted(w.store.rows) == ["acme/m1", "acme/m3"]


async def test_a_refused_summarys_keys_are_erased_only_once_its_decisions_are_acknowledged(
    tmp_path: Path,
) -> None:
    """The restore of its sources goes first: keys erased before the broker acknowledged it,
    a batch that then failed met the summary again unopenable, skipped it, and its sources
    stayed archived into a summary that never was (out of recall for good).
    """
    w = Worker(tmp_path, Embedder({SUMMARY: X}))
    keys = with_keys(w, erased_ring("c1"))
    unacknowledged: list[asyncio.Future[None]] = []

    async def send(key: bytes, value: bytes) -> asyncio.Future[None]:
        w.sent.append(("memory-writes", key, orjson.loads(value)))
        unacknowledged.append(asyncio.get_running_loop().create_future())
        return unacknowledged[-1]

    w.worker.topics["memory-writes"].send = send  # type: ignore[method-assign, assignment]
    batch = asyncio.create_task(
        w.writes(("acme/s1", write(SUMMARY, "s1", summary_of=["c1", "c2"])))
    )
    await until(lambda: bool(unacknowledged))  # the restore of c2, sent
    assert keys.erased == []
    for future in unacknowledged:
        future.set_result(None)
    await batch
    assert keys.erased == [("acme", ["s1"])]


async def test_a_summary_is_rechecked_against_the_erasures_read_after_its_row_landed(
    tmp_path: Path,
) -> None:
    """An erasure writes its markers, then searches Milvus for the summaries: one whose row
    lands between the two is found by neither unless the worker reads the markers after its
    row is in Milvus (the recheck after the sync): then it is deleted, purged, its key erased.
    """
    w = Worker(tmp_path, Embedder({SUMMARY: X}))
    keys = with_keys(w, KeyRing())
    upsert = w.store.upsert

    def racing(rows: Sequence[MemoryRow]) -> int:
        keys.arriving.append([marker("c1")])  # c1's erasure: its search ran just before
        return upsert(rows)

    w.store.upsert = racing  # type: ignore[method-assign]
    sent = await w.writes(("acme/s1", write(SUMMARY, "s1", summary_of=["c1", "c2"])))
    decided = [(k, v["decision"]) for role, k, v in sent if role == "memory-writes"]
    assert (b"acme/s1", "retire") in decided
    assert (b"acme/s1", "purge") in decided
    assert keys.erased == [("acme", ["s1"])]


async def test_a_parked_access_of_a_known_memory_is_applied_before_a_later_one(
    tmp_path: Path,
) -> None:
    """A later access of a memory that still has an access parked releases the parked one
    first: applied after it, the parked one was skipped by its offset (an access lost).
    """
    w = Worker(tmp_path, Embedder({"hello": X}))
    await w.writes(("acme/m1", write("hello")))
    processor, batch = w.worker.processor, Batch()

    def message(offset: int, at: str) -> Inbound:
        return Inbound("access-events", 0, offset, b"acme/m1", access("m1", at))

    processor._park(b"acme/m1", "m1", message(5, "2026-03-01T12:05:00+00:00"), batch)
    processor.access(message(6, "2026-03-01T12:06:00+00:00"), batch, writes_caught_up=True)
    processor.expire_pending(0, batch)
    state = processor.state("acme/m1")
    assert state is not None
    assert state.access_count == 2
    assert [o for o in batch.out if o.role == "dead-letter"] == []


async def test_a_merged_duplicates_key_is_erased_though_its_purges_batch_is_applied_again(
    tmp_path: Path,
) -> None:
    """A batch that failed after the purge was applied (a decision not acknowledged, Milvus
    down) is applied again and meets the purge as done, its document gone: the key was to be
    erased only at the batch's end, and never was. It is erased right after the records.
    """
    words = "Ann's PIN is 4711"
    w = Worker(tmp_path, Embedder({words: X}))
    ring = KeyRing()
    keys = with_keys(w, ring)
    key = new_key("acme", "d1")
    ring.add(key)
    value = seal_write(orjson.loads(write(words, "d1", at="2026-01-01T12:00:00Z")), key)
    await w.writes(("acme/d1", orjson.dumps(value)))
    merged = Retire(AT_MERGE, Lifecycle.DELETED, "merged into s1", "s1")
    await w.writes(("acme/d1", orjson.dumps(decision_value("acme", "d1", merged))))
    purge = Purge(RECEIVED - timedelta(minutes=5), "p", state_changed_at=AT_MERGE, erase=True)
    w.offset += 1
    raw = orjson.dumps(decision_value("acme", "d1", purge))
    events = [Event(Message("memory-writes", 0, w.offset, b"acme/d1", raw))]
    supersede, failed = w.worker.supersede, list[bool]()

    async def failing_once(batch: Any) -> None:
        if not failed:
            failed.append(True)
            raise StorageError("search", "Milvus did not answer", retriable=True)
        await supersede(batch)

    w.worker.supersede = failing_once  # type: ignore[method-assign]

    async def no_wait(_: float) -> None:
        return None

    await applied_again(lambda: w.worker.on_writes(events), "writes", sleep=no_wait)
    assert failed
    state = w.worker.processor.state("acme/d1")
    assert state is not None
    assert state.purged
    assert keys.erased == [("acme", ["d1"])]
    assert keys.only == [{"d1": {key.key_id}}]


async def test_a_memory_erased_before_the_worker_applied_its_purge_is_in_no_llm_question(
    tmp_path: Path,
) -> None:
    """Between an erasure's 200 and this worker applying its purge, the erased memory's row was
    still a neighbour of a new statement: its words went to the LLM in a supersession question,
    and it was superseded."""

    class Asked(Llm):
        def __init__(self) -> None:
            super().__init__('{"replaces": [1]}')
            self.prompts: list[str] = []

        async def ask(self, prompt: str, hung: object = None) -> str | None:
            self.prompts.append(prompt)
            return self.reply

    w = Worker(tmp_path, Embedder({}))
    keys = with_keys(w, KeyRing())
    await stated_after_osaka(w, "acme")
    llm = Asked()
    w.worker.services.llm = llm  # type: ignore[assignment]
    keys.arriving = [[marker("A")]]  # the ranker's erasure of A, on the keys topic by now
    sent = await w.writes(newer("acme"))
    assert not any("Osaka" in prompt for prompt in llm.prompts)
    assert superseded(sent) == []


@pytest.mark.parametrize("one_batch", [False, True])
async def test_a_write_under_a_memory_of_another_user_leaves_it_as_it_was(
    tmp_path: Path, one_batch: bool
) -> None:
    """A caller-chosen id given to two users' memories: the second user's words replaced the
    first's and stood under the first user's scope (returned by that user's recall, never by
    the writer's). The memory now keeps its user and words; the write is audited as ignored.
    Deleted, the id is free for anyone's memory.
    """
    w = Worker(tmp_path, Embedder({"Mia lives in Porto": X, "Ned lives at 9 Elm St": Y}))
    mia = ("acme/card", write("Mia lives in Porto", "card", user_id="mia"))
    ned = ("acme/card", write("Ned lives at 9 Elm St", "card", user_id="ned"))
    sent = await w.writes(mia, ned) if one_batch else [*await w.writes(mia), *await w.writes(ned)]
    assert letters(sent) == []
    kinds = [v["kind"] for role, _, v in sent if role == "audit"]
    assert kinds == ["created", "ignored"]
    (why,) = [v["reason"] for role, _, v in sent if role == "audit" and v["kind"] == "ignored"]
    assert "user_id" in why
    state = w.worker.processor.state("acme/card")
    assert state is not None
    assert (state.user_id, state.write_count) == ("mia", 1)
    assert (w.store.rows["acme/card"].content, w.store.rows["acme/card"].vector) == (
        "Mia lives in Porto",
        X,
    )
    unscoped = await w.writes(("acme/card", write("Someone lives somewhere", "card")))
    assert [v["kind"] for role, _, v in unscoped if role == "audit"] == ["ignored"]
    for moved, field in (({"session_id": "s2"}, "session_id"), ({"agent_id": "bot"}, "agent_id")):
        elsewhere = write("Mia lives in Porto", "card", user_id="mia", **moved)
        sent = await w.writes(("acme/card", elsewhere))  # its session's end would not find it
        (record,) = [v for role, _, v in sent if role == "audit"]
        assert (record["kind"], f"another {field}" in record["reason"]) == ("ignored", True)
    kept = w.worker.processor.state("acme/card")
    assert kept is not None
    assert (kept.session_id, kept.agent_id, kept.write_count) == (None, None, 1)
    gone = Retire(datetime(2026, 3, 1, 12, 45, tzinfo=UTC), Lifecycle.DELETED, "deleted")
    deleted = ("acme/card", orjson.dumps(decision_value("acme", "card", gone)))
    # in one batch too (a replay, a worker catching up): the write after the deletion is
    # embedded, though the memory was another user's when the batch began
    sent = (
        await w.writes(deleted, ned)
        if one_batch
        else [*await w.writes(deleted), *await w.writes(ned)]
    )
    assert letters(sent) == []
    anew = w.worker.processor.state("acme/card")
    assert anew is not None
    assert (anew.user_id, anew.state) == ("ned", Lifecycle.ACTIVE)
    assert w.store.rows["acme/card"].content == "Ned lives at 9 Elm St"
