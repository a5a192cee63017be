from __future__ import annotations

import asyncio
import dataclasses
import json
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import pytest

from memcore import InvalidField
from memcore.ids import indexed_text
from memcore.keyword import keyword_text
from storage import Document, Filters, MemoryRow, StorageError, filter_expression, from_us, to_us
from storage.compacted import CompactedLog, CompactedLogError
from storage.milvus import MilvusConfig, MilvusStore, keys_expression, translate
from storage.records import Limits, RecordError, checked_vector, checked_write
from storage.rows import LIVE_FIELDS, MAX_CONTENT_BYTES, search_text_of, with_live
from storage.tenants import TenantRegistry
from tests.rows import make_row

from .helpers import T0, created


def test_filter_expression_quotes_values_and_scopes_the_tenant() -> None:
    expr = filter_expression(
        "acme",
        Filters(
            tiers=("semantic",), tags_any=('x" or 1==1 or "',), session_id="s", created_from_us=5
        ),
    )
    assert expr.startswith('tenant_id == "acme" and state in ["active"]')
    assert '"x\\" or 1==1 or \\""' in expr
    assert "created_at_us >= 5" in expr
    with pytest.raises(InvalidField):
        filter_expression('acme" or "1"=="1', Filters())


def test_the_user_scope_filters_by_exact_match_quoted_like_the_other_scopes() -> None:
    expr = filter_expression(
        "acme", Filters(agent_id="bot", session_id="run-1", user_id='ann" or user_id != "')
    )
    assert 'agent_id == "bot"' in expr
    assert 'user_id == "ann\\" or user_id != \\""' in expr
    assert "user_id" not in filter_expression("acme", Filters(agent_id="bot"))
    assert 'user_id == ""' in filter_expression("acme", Filters(user_id=""))


def test_rows_round_trip_through_entities() -> None:
    state = created(0.7)
    row = MemoryRow.of(state, Document("text", (1.0, 2.0), {"a": 1}))
    assert row.key == "t1/m1"
    assert row.last_access_us == to_us(T0)
    assert from_us(row.created_at_us) == T0
    assert MemoryRow.from_entity(row.to_entity()) == row
    scoped = MemoryRow.of(
        dataclasses.replace(state, user_id="ann", agent_id="bot"), Document("t", (1.0, 2.0), {})
    )
    assert (scoped.user_id, scoped.agent_id, row.user_id) == ("ann", "bot", "")
    assert MemoryRow.from_entity(scoped.to_entity()) == scoped


def test_tenant_registry(tmp_path: Path) -> None:
    path = tmp_path / "tenants.json"
    spec = {
        "tenants": {
            "acme": {"decay": "powermem", "api_keys": ["k" * 20]},
            "globex": {"overrides": {"review": {"reinforcement": 0.2}}},
        }
    }
    path.write_text(json.dumps(spec))
    registry = TenantRegistry.load(path)
    acme = registry.by_api_key("k" * 20)
    assert acme is not None
    assert acme.tenant_id == "acme"
    assert acme.policy.decay.preset.value == "powermem"
    globex = registry.get("globex")
    assert globex is not None
    assert globex.policy.review.reinforcement == 0.2
    assert registry.get("nobody") is None


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"tenants": []}, "tenants"),
        ({"tenants": {"a/b": {}}}, "tenants.a/b"),
        ({"tenants": {"a": {"decay": "x"}}}, "policy.decay.preset"),
        ({"tenants": {"a": {"api_keys": ["short"]}}}, "tenants.a.api_keys"),
        (
            {"tenants": {"a": {"api_keys": ["k" * 16]}, "b": {"api_keys": ["k" * 16]}}},
            "tenants.b.api_keys",
        ),
    ],
)
def test_bad_registries(spec: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidField) as err:
        TenantRegistry.of(spec)
    assert err.value.field == field


def test_unreadable_registry_file(tmp_path: Path) -> None:
    with pytest.raises(InvalidField, match="tenants_file"):
        TenantRegistry.load(tmp_path / "missing.json")


def test_error_translation() -> None:
    from pymilvus.exceptions import MilvusException

    assert translate("upsert", ConnectionError("down")).retriable
    assert translate("upsert", MilvusException(code=2, message="unavailable")).retriable
    assert not translate("upsert", MilvusException(code=1100 + 900, message="bad")).retriable
    invalid = MilvusException(code=1100, message="invalid parameter: length exceeds max length")
    assert not translate("upsert", invalid).retriable  # an input error never heals
    assert not translate("upsert", ValueError("x")).retriable
    err = translate("search", TimeoutError())
    assert isinstance(err, StorageError)
    assert "search" in str(err)


def test_faiss_neighbours_equal_the_pairwise_reference() -> None:
    import random

    from memcore import Item, Lifecycle, Tier
    from memcore.consolidation import pairwise_neighbours
    from storage.similarity import cosine_neighbours

    rng = random.Random(4)
    base = [[rng.gauss(0, 1) for _ in range(16)] for _ in range(20)]
    vectors = [v for b in base for v in (b, [x + rng.gauss(0, 0.15) for x in b])]  # near pairs
    ids = [f"m{i}" for i in range(len(vectors))]
    items = [
        Item(i, i, tuple(v), T0, T0, T0, Tier.WORKING, Lifecycle.ACTIVE, 0.5, 48.0)
        for i, v in zip(ids, vectors, strict=True)
    ]
    for threshold in (0.85, 0.95):
        expected = pairwise_neighbours(items, threshold)
        assert cosine_neighbours(ids, vectors, threshold) == expected
        assert any(expected.values())
    assert cosine_neighbours(["a"], [[1.0, 0.0]], 0.9) == {"a": set()}


def test_faiss_neighbours_stay_on_the_cpu_where_faiss_sees_a_gpu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """faiss-gpu's indexes raise on range_search: with a GPU seen, consolidation must still plan."""
    import faiss

    from storage import similarity

    class GpuIndex:  # what FAISS's GPU flat index does with a range search
        def add(self, x: object) -> None:
            pass

        def range_search(self, x: object, radius: float) -> None:
            raise RuntimeError("Error in virtual void faiss::Index::range_search: not implemented")

    gpu_faiss = SimpleNamespace(
        IndexFlatIP=faiss.IndexFlatIP,
        StandardGpuResources=object,
        get_num_gpus=lambda: 1,
        index_cpu_to_gpu=lambda *_: GpuIndex(),
    )
    monkeypatch.setattr(similarity, "_faiss", lambda: gpu_faiss)
    found = similarity.cosine_neighbours(["a", "b", "c"], [[1, 0], [1, 0.01], [0, 1]], 0.99)
    assert found == {"a": {"b"}, "b": {"a"}, "c": set()}


def test_with_live_equals_a_replace_and_leaves_the_row_alone() -> None:
    row = make_row("acme", "m1", [1.0, 0.0, 0.0, 0.0], importance=0.3, state="archived")
    values = tuple(
        getattr(dataclasses.replace(row, importance=0.9, state="active", access_count=4), name)
        for name in LIVE_FIELDS
    )
    live = with_live(row, values)
    assert live == dataclasses.replace(row, **dict(zip(LIVE_FIELDS, values, strict=True)))
    assert (row.importance, row.state, row.access_count) == (0.3, "archived", 0)
    with pytest.raises(ValueError, match="live values"):
        with_live(row, values[:-1])
    # with_live copies fields without __init__: a check added to the row would be skipped
    assert "__post_init__" not in vars(MemoryRow)


class _Stalled:
    """A producer whose ``send`` never returns (aiokafka waits for metadata while the broker is
    away)."""

    async def send(self, *_args: object, **_kwargs: object) -> None:
        await asyncio.Event().wait()


def test_a_publish_gives_up_at_its_deadline_even_inside_send() -> None:
    log = CompactedLog("127.0.0.1:1", "keys", timeout_s=0.2)
    log._consumer = object()  # started: the test drives publish alone
    log._assigned = ["keys/0"]
    log._producer = _Stalled()

    async def publish() -> None:
        await log.publish([(b"k", b"v")], applied=False)

    with pytest.raises(CompactedLogError, match=r"not acknowledged within 0\.2 s"):
        asyncio.run(asyncio.wait_for(publish(), 10))


@pytest.mark.parametrize(
    ("values", "field", "reason"),
    [
        ([0.0, 0.0, -0.0, 0], "v", "a zero vector has no direction"),
        ([1.0, float("nan"), 0.0, 0.0], "v[1]", "out of float32 range"),
        ([1.0, 0.0, 0.0, -3.5e38], "v[3]", "out of float32 range"),
        ([1.0, float("inf"), float("nan"), 0.0], "v[1]", "out of float32 range"),
        ([1e-7, 0.0, 0.0, 0.0], "v", "norm must be within [1e-06, 1e+18]"),
        ([1e-46, 1e-46, 0.0, 0.0], "v", "norm must be within"),  # zero once stored in float32
        ([1.0, 0.0, 0.0], "v", "expected 4 values"),
    ],
)
def test_a_vector_is_refused_naming_the_value_that_breaks_it(
    values: list[float], field: str, reason: str
) -> None:
    with pytest.raises(RecordError) as refused:
        checked_vector("v", values, 4)
    assert refused.value.field == field
    assert reason in refused.value.reason


def test_a_usable_vector_comes_back_as_given() -> None:
    given = [1e9, -1e-3, 0, 2.5]
    assert checked_vector("v", given, 4) == (1e9, -1e-3, 0, 2.5)


@pytest.mark.parametrize(
    ("change", "field", "reason"),
    [
        ({"embedding": [1.0, 0.5, float("nan"), 0.0]}, "embedding[2]", "must be finite"),
        ({"embedding": [1.0, 0.5, 0.0, float("-inf")]}, "embedding[3]", "must be finite"),
        ({"metadata": {"xs": [1.5, 2**64, 0.5]}}, "metadata.xs[1]", "integer over 64 bits"),
        ({"metadata": {"xs": [0.5, float("inf")]}}, "metadata.xs[1]", "must be finite"),
    ],
)
def test_a_number_json_cannot_carry_is_refused_at_its_path(
    change: dict[str, object], field: str, reason: str
) -> None:
    """Lists of floats (vectors) are checked in one pass; a bad value is still named."""
    limits = Limits(4, 64, TenantRegistry.open_to(["acme"]))
    doc = {"tenant_id": "acme", "content": "x", "at": "2026-01-01T00:00:00+00:00", **change}
    with pytest.raises(RecordError) as refused:
        checked_write(doc, limits, datetime(2026, 1, 1, tzinfo=UTC))
    assert (refused.value.field, refused.value.reason) == (field, reason)


def nested(levels: int) -> object:
    """``levels`` objects, each in the one before (0: a scalar)."""
    value: object = 1
    for _ in range(levels):
        value = {"a": value}
    return value


@pytest.mark.parametrize("levels", [33, 300, 5_000])
def test_metadata_nested_over_the_limit_is_refused_naming_it(levels: int) -> None:
    """orjson refuses to encode past 254 levels (and the recursive checks would pass Python's
    limit): the write is refused naming ``metadata``, as the worker refuses it, not a TypeError."""
    limits = Limits(4, 64, TenantRegistry.open_to(["acme"]))
    doc = {"tenant_id": "acme", "content": "x", "at": "2026-01-01T00:00:00+00:00"}
    with pytest.raises(RecordError) as refused:
        checked_write({**doc, "metadata": nested(levels)}, limits, datetime(2026, 1, 1, tzinfo=UTC))
    assert refused.value.field == "metadata"
    assert "nested over 32 deep" in refused.value.reason
    record, _ = checked_write(
        {**doc, "metadata": nested(32)}, limits, datetime(2026, 1, 1, tzinfo=UTC)
    )
    assert record.metadata == nested(32)


def test_concurrent_first_publishes_make_one_producer(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two publishes racing before the log has a producer used to make one each (one leaked,
    never stopped)."""
    import aiokafka

    made: list[object] = []

    class Producer:
        def __init__(self, **_: object) -> None:
            made.append(self)

        async def start(self) -> None:
            await asyncio.sleep(0.05)  # both publishes are here before either has one

        async def send(self, topic: str, **_: object) -> asyncio.Future[object]:
            done: asyncio.Future[object] = asyncio.get_running_loop().create_future()
            done.set_result(SimpleNamespace(partition=0, offset=0))
            return done

    monkeypatch.setattr(aiokafka, "AIOKafkaProducer", Producer)
    log = CompactedLog("127.0.0.1:1", "keys", timeout_s=5)
    log._consumer = object()  # started: the test drives publish alone
    log._assigned = ["keys/0"]

    async def both() -> None:
        await asyncio.gather(
            log.publish([(b"a", b"1")], applied=False), log.publish([(b"b", b"2")], applied=False)
        )

    asyncio.run(both())
    assert len(made) == 1


class _Consumer:
    """An aiokafka consumer over one partition holding one record. Once assigned (the
    follower), its connection is busy with a long-polling fetch: an end-offsets ask there gets
    no answer (a broker answers one request per connection at a time)."""

    def __init__(self, made: list[_Consumer], **_: object) -> None:
        self.assigned: list[object] = []
        self.read = 0
        self.stopped = False
        self._client = self
        made.append(self)

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        self.stopped = True

    async def force_metadata_update(self) -> None:
        pass

    def partitions_for_topic(self, _topic: str) -> set[int]:
        return {0}

    def assign(self, partitions: list[object]) -> None:
        self.assigned = partitions

    async def seek_to_beginning(self, *_: object) -> None:
        pass

    async def getmany(self, timeout_ms: int, max_records: int) -> dict[str, list[object]]:
        if self.read == 0:
            self.read = 1
            return {"keys/0": [SimpleNamespace(key=b"k", value=b"v", offset=0)]}
        await asyncio.sleep(timeout_ms / 1000)
        return {}

    async def position(self, _partition: object) -> int:
        return self.read

    async def end_offsets(self, partitions: list[object]) -> dict[object, int]:
        if self.assigned:
            await asyncio.Event().wait()  # behind the follower's fetch
        return dict.fromkeys(partitions, 1)


def test_a_catch_up_is_not_held_behind_the_followers_fetch(monkeypatch: pytest.MonkeyPatch) -> None:
    """End offsets are asked through a client of the log's own that never fetches; a restarted
    log asks through its new one."""
    import aiokafka

    made: list[_Consumer] = []
    monkeypatch.setattr(aiokafka, "AIOKafkaConsumer", lambda **kw: _Consumer(made, **kw))

    seen: list[tuple[bytes | None, bytes | None]] = []

    class Log(CompactedLog):
        def apply(self, key: bytes | None, value: bytes | None) -> None:
            seen.append((key, value))

    async def scenario() -> None:
        log = Log("127.0.0.1:1", "keys", timeout_s=5)
        await log.start()
        await log.catch_up()
        assert seen == [(b"k", b"v")]
        await log.stop()
        assert [c.stopped for c in made] == [True, True]
        await log.start()
        await log.catch_up()
        await log.stop()
        assert len(made) == 4
        assert all(c.stopped for c in made)

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_rows_by_id_are_read_by_primary_key_with_every_value_quoted() -> None:
    # exactly ``key in [...]``: Milvus Lite answers that form from its key index, and any
    # other term (a tenant filter, say) would make each read a pass over the whole collection
    assert keys_expression("acme", ["m1", 'a"b']) == 'key in ["acme/m1", "acme/a\\"b"]'
    with pytest.raises(InvalidField):
        keys_expression("acme/evil", ["m1"])


def test_grpc_statuses_are_retriable_only_when_the_server_may_answer_later() -> None:
    """pymilvus's "Retry timeout" after a server stayed unavailable carries the gRPC status, not
    a number (it was final: the worker left rows out); a denied call passed straight through
    as a grpc error was retriable (a revoked token retried for ever)."""
    import grpc
    from pymilvus.exceptions import MilvusException

    class Rpc(grpc.RpcError):  # type: ignore[misc]
        def __init__(self, code: grpc.StatusCode) -> None:
            self._code = code

        def code(self) -> grpc.StatusCode:
            return self._code

    gone = MilvusException(code=grpc.StatusCode.UNAVAILABLE, message="Retry timeout: 10s")
    assert translate("search", gone).retriable
    for later in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        assert translate("query", Rpc(later)).retriable
    for never in (
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.INVALID_ARGUMENT,
    ):
        assert not translate("query", Rpc(never)).retriable


def test_identical_vectors_are_neighbours_at_a_threshold_of_one() -> None:
    """The float64 check ran on float32 unit vectors: a vector's cosine with its copy came out
    ~1e-7 under 1.0 and dedup at min_cosine 1.0 missed a third of the copies."""
    import random

    from storage.similarity import cosine_neighbours

    rng = random.Random(3)
    vectors = []
    for _ in range(150):
        v = [rng.uniform(-1, 1) for _ in range(384)]
        vectors += [v, list(v)]
    ids = [f"m{i}" for i in range(len(vectors))]
    found = cosine_neighbours(ids, vectors, 1.0)
    assert all(found[ids[i]] == {ids[i ^ 1]} for i in range(len(ids)))


def test_a_text_whose_lower_case_passes_the_index_limit_is_refused() -> None:
    """ "Ⱥ" takes 2 bytes and its lower case 3: within the write limit, the indexed words were
    over Milvus's 65,535 bytes and the row was refused for good after the write was accepted."""
    limits = Limits(4, 65_535, TenantRegistry.open_to(["acme"]))
    doc = {"tenant_id": "acme", "content": "Ⱥ" * 30_000, "at": "2026-01-01T00:00:00+00:00"}
    with pytest.raises(RecordError) as refused:
        checked_write(doc, limits, datetime(2026, 1, 1, tzinfo=UTC))
    assert refused.value.field == "content"
    fine = {**doc, "content": "Ⱥ" * 20_000}  # 60,000 bytes indexed once lower-cased
    assert checked_write(fine, limits, datetime(2026, 1, 1, tzinfo=UTC))


def test_a_text_whose_normalised_words_pass_the_index_limit_is_refused() -> None:
    """U+FDFA takes 3 bytes and normalises (NFKC) to 33: 15,000 bytes of it were accepted (under
    three times the limit, so never measured) and the row was refused by Milvus for good."""
    limits = Limits(4, 16_384, TenantRegistry.open_to(["acme"]))
    doc = {"tenant_id": "acme", "content": "\ufdfa" * 5_000, "at": "2026-01-01T00:00:00+00:00"}
    with pytest.raises(RecordError) as refused:
        checked_write(doc, limits, datetime(2026, 1, 1, tzinfo=UTC))
    assert refused.value.field == "content"
    assert "normalised" in refused.value.reason


def test_a_row_keeps_the_indexed_words_that_fit_the_collection() -> None:
    """A memory accepted under an older analysis (rebuilt after an upgrade) is still stored."""
    content = "\ufdfa " * 3_000  # 6,000 words of 33 normalised bytes
    text = search_text_of(content, "a note")
    whole = keyword_text(indexed_text(content, "a note"))
    assert len(whole.encode("utf-8")) > MAX_CONTENT_BYTES >= len(text.encode("utf-8"))
    assert whole.startswith(text + " ")  # cut between two words
    assert search_text_of("Carol lives here", "8 May") == keyword_text("8 May\nCarol lives here")


def test_an_upsert_goes_in_requests_the_server_takes_and_one_over_its_limit_is_not_retried(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A start-up resync's chunk of 1,000 rows of 16 KB words and 32 KB metadata is a 75 MiB
    request, over a Milvus server's 64 MiB: the server refused it as RESOURCE_EXHAUSTED, taken
    as retriable, so each start failed again (and no row alone was tried).
    """
    import grpc
    from pymilvus.client.prepare import Prepare
    from pymilvus.milvus_client.base import BaseMilvusClient

    import storage.milvus

    class TooLarge(grpc.RpcError):  # type: ignore[misc]
        def code(self) -> grpc.StatusCode:
            return grpc.StatusCode.RESOURCE_EXHAUSTED

        def details(self) -> str:
            return "grpc: received message larger than max (78750000 vs. 67108864)"

    assert not translate("upsert", TooLarge()).retriable

    class Client:
        def __init__(self) -> None:
            self.sizes: list[float] = []

        def create_schema(self, **kw: object) -> object:
            return BaseMilvusClient.create_schema(**kw)

        def prepare_index_params(self) -> object:
            return BaseMilvusClient.prepare_index_params()

        def create_collection(self, name: str, schema: object, **kw: object) -> None:
            self.fields = [f.to_dict() for f in schema.fields]  # type: ignore[attr-defined]

        def upsert(
            self, collection: str, entities: list[dict[str, object]], **kw: object
        ) -> object:
            request = Prepare.row_upsert_param(collection, entities, "", self.fields)
            self.sizes.append(request.ByteSize() / limit)
            return {"upsert_count": len(entities)}

    limit = 2**20
    monkeypatch.setattr(storage.milvus, "UPSERT_BYTES", limit)
    store = MilvusStore(MilvusConfig("unused.db", dim=384))
    client = Client()
    store._client = client
    store._create()
    words = "é" * 8_000  # 16,000 bytes
    rows = [
        make_row("acme", f"m{i}", [0.05] * 384, content=words, metadata={"n": "x" * 30_000})
        for i in range(100)
    ]
    sources = tuple(f"s{j:04d}" + "y" * 120 for j in range(1_000))  # a summary's: strings
    summaries = [
        make_row("acme", f"s{i}", [0.05] * 384, summary_of=sources, metadata={}) for i in range(30)
    ]
    assert store.upsert(rows + summaries) == 130
    assert len(client.sizes) > 2
    assert max(client.sizes) <= 1.0  # each request under the limit, as the server measures it


def test_a_follower_whose_offset_is_out_of_range_reads_again_from_the_beginning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """aiokafka's default went to the end: a topic made anew while a ranker ran (or a truncated
    log) had its records skipped for good, a tenant's new key unknown, while caught up."""
    import aiokafka

    made: list[dict[str, object]] = []

    class Consumer:
        def __init__(self, **kwargs: object) -> None:
            made.append(kwargs)

        async def start(self) -> None:
            raise aiokafka.errors.KafkaConnectionError("no broker here")

        async def stop(self) -> None:
            pass

    monkeypatch.setattr(aiokafka, "AIOKafkaConsumer", Consumer)
    log = CompactedLog("127.0.0.1:1", "keys", timeout_s=0.2)
    with pytest.raises(aiokafka.errors.KafkaConnectionError):
        asyncio.run(log.start())
    follower = made[0]
    assert (follower["group_id"], follower["auto_offset_reset"]) == (None, "earliest")
