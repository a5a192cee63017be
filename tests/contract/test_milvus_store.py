"""One contract, two backends: Milvus Lite (embedded) and a real Milvus server over gRPC."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from memcore.keyword import keyword_text
from storage import Filters, MemoryRow, MilvusConfig, MilvusStore, StorageError
from storage.milvus import ANY_STATE
from storage.rows import ROW_FIELDS
from tests.contract.conftest import DIM
from tests.rows import make_row


def vec(*head: float) -> tuple[float, ...]:
    return (*head, *([0.0] * (DIM - len(head))))


def row(tenant: str, memory_id: str, vector: tuple[float, ...], **kw: object) -> MemoryRow:
    return make_row(tenant, memory_id, vector, **kw)


def test_upsert_then_get_round_trips_every_field(store: MilvusStore) -> None:
    original = row("acme", "m1", vec(1.0, 0.5), relations=("m2",), summary_of=("a", "b"))
    assert store.upsert([original]) == 1
    got = store.get("acme", ["m1"])["m1"]
    assert got.vector == pytest.approx(original.vector)
    assert dataclasses.replace(got, vector=original.vector) == original


def test_listeners_hear_of_the_rows_milvus_took_and_of_nothing_the_store_refused(
    store: MilvusStore,
) -> None:
    heard: list[list[str]] = []

    def broken(_rows: object) -> None:
        raise RuntimeError("a listener's own failure")

    store.upserted.append(broken)  # logged; neither the upsert nor the next listener fails
    store.upserted.append(lambda rows: heard.append([r.memory_id for r in rows]))
    assert store.upsert([row("acme", "m1", vec(1.0)), row("acme", "m2", vec(0.0, 1.0))]) == 2
    assert heard == [["m1", "m2"]]
    assert set(store.get("acme", ["m1", "m2"])) == {"m1", "m2"}  # told after Milvus has them
    with pytest.raises(StorageError):
        store.upsert([row("acme", "m3", (1.0,) * (DIM + 1))])  # a vector of the wrong dimension
    assert heard == [["m1", "m2"]]
    failed: list[list[str]] = []
    store.upsert_failed.append(lambda rows: failed.append([r.memory_id for r in rows]))
    store.drop()  # Milvus itself refuses the next upsert
    with pytest.raises(StorageError):
        store.upsert([row("acme", "m4", vec(1.0))])
    assert failed == [["m4"]]
    assert heard == [["m1", "m2"]]
    store.connect()  # the collection again, for the fixture to drop


def test_an_upsert_split_into_requests_by_size_lands_whole(
    store: MilvusStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows over :data:`storage.milvus.UPSERT_BYTES` go in several requests: every row lands,
    the count is of them all, and the listeners hear of them once."""
    monkeypatch.setattr("storage.milvus.UPSERT_BYTES", 6_000)  # about one row a request
    heard: list[list[str]] = []
    store.upserted.append(lambda rows: heard.append([r.memory_id for r in rows]))
    rows = [row("acme", f"m{i}", vec(1.0, i / 10), content="x" * 3_000) for i in range(5)]
    assert store.upsert(rows) == 5
    assert heard == [[f"m{i}" for i in range(5)]]
    assert sorted(store.get("acme", [f"m{i}" for i in range(5)])) == [f"m{i}" for i in range(5)]


def test_reads_by_id_come_in_chunks_and_stay_in_their_tenant(
    store: MilvusStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("storage.milvus.KEYS_PER_QUERY", 2)  # 16,384 ids at most a query
    store.upsert(
        [row("acme", f"m{i}", vec(1.0, i / 10), relations=(f"m{i + 1}",)) for i in range(5)]
    )
    store.upsert([row("globex", "m9", vec(1.0)), row("globex", "m0", vec(1.0), content="secret")])
    wanted = [f"m{i}" for i in (4, 0, 3, 1, 2, 9, 4)]
    got = store.get("acme", wanted)
    assert sorted(got) == ["m0", "m1", "m2", "m3", "m4"]
    assert all(r.tenant_id == "acme" for r in got.values())
    assert got["m0"].content != "secret"
    assert store.relations("acme", wanted) == {f"m{i}": (f"m{i + 1}",) for i in range(5)}
    slim = {m: dataclasses.replace(r, vector=(), metadata={}) for m, r in got.items()}
    assert store.get_slim("acme", wanted) == slim  # every field but those two, in its tenant


def test_every_row_reads_past_what_one_query_returns(store: MilvusStore) -> None:
    """Consolidation and a user's erasure read every row of a tenant: ``query`` stops at its
    limit (16,384), ``every_row`` pages through them all, in the tenant and filters asked."""
    mine = [
        row("acme", f"m{i:02d}", vec(1.0, i / 100), user_id="ann" if i % 3 else "")
        for i in range(45)
    ]
    store.upsert([*mine, row("globex", "g1", vec(1.0), user_id="ann")])
    assert len(store.query("acme", ANY_STATE, limit=16)) == 16
    got = store.every_row("acme", ANY_STATE, batch_size=16)
    assert sorted(r.memory_id for r in got) == [r.memory_id for r in mine]
    anns = store.every_row("acme", Filters(states=(), user_id="ann"), batch_size=7)
    assert sorted(r.memory_id for r in anns) == [r.memory_id for r in mine if r.user_id == "ann"]
    # the ids alone (a user's erasure lists them so): the same, no vector read
    ids = store.every_id("acme", Filters(states=(), user_id="ann"), batch_size=7)
    assert sorted(ids) == [r.memory_id for r in mine if r.user_id == "ann"]


def test_the_summaries_made_from_given_memories_are_found_in_their_tenant(
    store: MilvusStore,
) -> None:
    """What an erasure asks for (it erases the summaries that quote an erased memory)."""
    store.upsert(
        [
            row("acme", "s1", vec(1.0), summary_of=("m1", "m2")),
            row("acme", "s2", vec(1.0, 0.1), summary_of=("m3",), state="archived"),
            row("acme", "m1", vec(0.5, 1.0)),
            row("globex", "s1", vec(1.0), summary_of=("m1",)),
        ]
    )

    def made_from(*ids: str) -> list[str]:
        found = store.every_row("acme", Filters(states=(), summary_of_any=ids))
        assert {r.tenant_id for r in found} <= {"acme"}
        return sorted(r.memory_id for r in found)

    assert made_from("m1") == ["s1"]
    assert made_from("m2", "m3") == ["s1", "s2"]
    assert made_from("s1", 'm"1') == []


def test_the_memories_merged_into_or_superseded_by_given_ones_are_found(
    store: MilvusStore,
) -> None:
    """What an erasure asks for (it erases the memories that hold an erased memory's words)."""
    store.upsert(
        [
            row("acme", "a1", vec(1.0), superseded_by="n1"),
            row("acme", "a2", vec(1.0, 0.1), merged_into="a1", state="deleted"),
            row("acme", "p1", vec(0.5, 1.0), superseded_by="a1"),
            row("acme", "x", vec(0.2, 1.0)),
            row("globex", "b", vec(1.0), merged_into="a1", state="deleted"),
        ]
    )

    def linked(*ids: str) -> list[str]:
        found = store.every_row("acme", Filters(states=(), derived_from_any=ids))
        assert {r.tenant_id for r in found} <= {"acme"}
        return sorted(r.memory_id for r in found)

    assert linked("a1") == ["a2", "p1"]
    assert linked("n1", "x", "") == ["a1"]
    assert linked('a"1') == linked("") == []  # "" links nothing (not merged, current)


def test_a_read_sees_the_write_just_made(store: MilvusStore) -> None:
    store.upsert([row("acme", "m1", vec(1.0))])
    for n in range(1, 4):
        store.upsert([row("acme", "m1", vec(1.0), access_count=n)])
        assert store.get("acme", ["m1"])["m1"].access_count == n
    assert store.count("acme") == 1


def test_tenants_never_see_each_other(store: MilvusStore) -> None:
    store.upsert(
        [row("acme", "shared-id", vec(1.0)), row("globex", "shared-id", vec(1.0), content="secret")]
    )
    store.upsert([row("globex", f"g{i}", vec(1.0, i / 10)) for i in range(5)])
    hits = store.search("acme", [vec(1.0)], k=10)[0]
    assert [(h.row.tenant_id, h.row.memory_id) for h in hits] == [("acme", "shared-id")]
    assert store.get("acme", ["g1", "shared-id"]).keys() == {"shared-id"}
    assert store.get("acme", ["shared-id"])["shared-id"].content != "secret"
    store.delete("acme", ["shared-id", "g1"])
    assert store.count("acme") == 0
    assert store.count("globex") == 6


def test_relations_are_read_alone_within_the_tenant(store: MilvusStore) -> None:
    store.upsert(
        [
            row("acme", "a", vec(1.0), relations=("b", "c")),
            row("acme", "b", vec(1.0), state="archived"),
            row("globex", "c", vec(1.0), relations=("x",)),
        ]
    )
    assert store.relations("acme", ["a", "b", "c", "nope"]) == {"a": ("b", "c"), "b": ()}
    assert store.relations("globex", ["a", "c"]) == {"c": ("x",)}
    assert store.relations("acme", []) == {}


def test_search_orders_by_cosine_and_applies_filters(store: MilvusStore) -> None:
    store.upsert(
        [
            row("acme", "same", vec(1.0, 0.0)),
            row("acme", "close", vec(1.0, 0.2), tags=("home",)),
            row("acme", "far", vec(0.0, 1.0), tier="semantic", session_id="s2"),
            row("acme", "gone", vec(1.0, 0.0), state="archived"),
            row("acme", "late", vec(1.0, 0.1), created_at_us=5_000_000),
        ]
    )
    hits = store.search("acme", [vec(2.0, 0.0)], k=3)[0]
    assert [h.row.memory_id for h in hits] == ["same", "late", "close"]
    assert hits[0].similarity == pytest.approx(1.0, abs=1e-5)
    only = {
        Filters(tiers=("semantic",)): ["far"],
        Filters(tags_any=("home", "nothing")): ["close"],
        Filters(session_id="s2"): ["far"],
        Filters(created_from_us=2_000_000): ["late"],
        Filters(created_to_us=2_000_000, tiers=("episodic",)): ["same", "close"],
        Filters(states=("archived",)): ["gone"],
    }
    for filters, expected in only.items():
        found = store.search("acme", [vec(1.0, 0.0)], k=10, filters=filters)[0]
        assert [h.row.memory_id for h in found] == expected, filters


def test_query_and_count_by_state(store: MilvusStore) -> None:
    store.upsert(
        [
            row("acme", f"m{i}", vec(1.0, i), state="archived" if i % 2 else "active")
            for i in range(6)
        ]
    )
    assert store.count("acme", Filters()) == 3
    assert store.count("acme", ANY_STATE) == 6
    assert sorted(r.memory_id for r in store.query("acme", Filters(states=("archived",)))) == [
        "m1",
        "m3",
        "m5",
    ]


def test_deleted_rows_stay_deleted_through_a_compaction(store: MilvusStore) -> None:
    store.upsert([row("acme", f"m{i}", vec(1.0, i)) for i in range(4)])
    store.delete("acme", ["m1", "m2"])
    store.compact()  # the server compacts (Lite: nothing); the call is accepted either way
    assert sorted(store.get("acme", ["m0", "m1", "m2", "m3"])) == ["m0", "m3"]
    store.upsert([row("acme", "m1", vec(1.0, 1))])  # a purged id can come back as a new row
    assert sorted(store.get("acme", ["m1", "m2"])) == ["m1"]


def test_multiple_queries_in_one_search(store: MilvusStore) -> None:
    store.upsert([row("acme", "x", vec(1.0, 0.0)), row("acme", "y", vec(0.0, 1.0))])
    first, second = store.search("acme", [vec(1.0, 0.0), vec(0.0, 1.0)], k=1)
    assert (first[0].row.memory_id, second[0].row.memory_id) == ("x", "y")


def test_wrong_dimension_is_a_permanent_error(store: MilvusStore) -> None:
    with pytest.raises(StorageError) as err:
        store.upsert([row("acme", "m", (1.0, 2.0))])
    assert err.value.retriable is False
    with pytest.raises(StorageError):
        store.search("acme", [(1.0,)], k=1)


def test_reopening_with_another_dimension_is_refused(store: MilvusStore) -> None:
    store.upsert([row("acme", "m", vec(1.0))])
    if store.config.uri.startswith("http"):
        other = MilvusStore(dataclasses.replace(store.config, dim=DIM * 2))
        with pytest.raises(StorageError, match="dim") as err:
            other.connect()
        assert err.value.retriable is False
        other.close()


def test_invalid_tenant_ids_are_refused_before_any_call(store: MilvusStore) -> None:
    with pytest.raises(Exception, match="tenant_id"):
        store.search('acme" or tenant_id != "', [vec(1.0)], k=1)


def test_unreachable_server_is_retriable() -> None:
    from tests.infra import free_port

    s = MilvusStore(MilvusConfig(uri=f"http://127.0.0.1:{free_port()}", dim=DIM, timeout_s=2))
    with pytest.raises(StorageError) as err:
        s.connect()
    assert err.value.retriable is True


def test_a_collection_without_every_row_field_is_refused(tmp_path: Path) -> None:
    from pymilvus import DataType, MilvusClient

    uri = str(tmp_path / "old.db")
    client = MilvusClient(uri)
    schema = client.create_schema(auto_id=False)
    schema.add_field("key", DataType.VARCHAR, is_primary=True, max_length=64)
    schema.add_field("vector", DataType.FLOAT_VECTOR, dim=DIM)
    client.create_collection("memories", schema=schema)
    client.close()
    store = MilvusStore(MilvusConfig(uri=uri, dim=DIM))
    with pytest.raises(StorageError, match="lacks fields") as err:
        store.connect()
    assert err.value.retriable is False
    store.close()


def test_a_collection_made_before_user_scopes_names_the_rebuild(tmp_path: Path) -> None:
    """A collection with every field of the version before ``user_id`` (no field can be added
    to a Milvus collection): connecting is refused, naming the collection and the migration.
    """
    from pymilvus import DataType, MilvusClient

    uri = str(tmp_path / "before-users.db")
    client = MilvusClient(uri)
    schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("key", DataType.VARCHAR, is_primary=True, max_length=257)
    for name in ROW_FIELDS:
        if name in ("key", "user_id"):
            continue
        if name == "vector":
            schema.add_field(name, DataType.FLOAT_VECTOR, dim=DIM)
        elif name in ("importance", "tau_hours", "retention"):
            schema.add_field(name, DataType.DOUBLE)
        elif name.endswith("_us") or name.endswith("_count"):
            schema.add_field(name, DataType.INT64)
        elif name in ("tags", "relations", "summary_of"):
            schema.add_field(
                name, DataType.ARRAY, element_type=DataType.VARCHAR, max_capacity=8, max_length=64
            )
        elif name == "metadata":
            schema.add_field(name, DataType.JSON)
        else:
            schema.add_field(name, DataType.VARCHAR, max_length=256)
    index = client.prepare_index_params()
    index.add_index("vector", index_type="FLAT", metric_type="COSINE")
    client.create_collection("mem_v1", schema=schema, index_params=index)
    client.close()
    store = MilvusStore(MilvusConfig(uri=uri, collection="mem_v1", dim=DIM, full_text=False))
    with pytest.raises(StorageError) as err:
        store.connect()
    assert err.value.retriable is False
    message = str(err.value)
    assert "'mem_v1'" in message
    assert "['user_id']" in message
    assert "python -m streams rebuild --collection <new>" in message
    assert "MNEMO_MILVUS_COLLECTION" in message
    store.close()
    fresh = MilvusStore(MilvusConfig(uri=uri, collection="mem_v2", dim=DIM, full_text=False))
    fresh.connect()  # the rebuild's new collection, made by this version, is served
    fresh.upsert([make_row("acme", "m1", vec(1.0), user_id="ann")])
    assert fresh.get("acme", ["m1"])["m1"].user_id == "ann"
    fresh.close()


def test_validity_and_as_of_filters(store: MilvusStore) -> None:
    store.upsert(
        [
            row("acme", "osaka", vec(1.0), created_at_us=100, valid_to_us=200, superseded_by="x"),
            row("acme", "lisbon", vec(1.0), created_at_us=200),
            row("acme", "later", vec(1.0), created_at_us=300),
        ]
    )

    def ids(filters: Filters) -> list[str]:
        return sorted(h.row.memory_id for h in store.search("acme", [vec(1.0)], 10, filters)[0])

    assert ids(Filters(current_at_us=250)) == ["later", "lisbon"]
    assert ids(Filters(current_at_us=150, created_to_inclusive_us=150)) == ["osaka"]
    assert ids(Filters(current_at_us=200, created_to_inclusive_us=200)) == ["lisbon"]
    assert ids(Filters(created_to_inclusive_us=250)) == ["lisbon", "osaka"]  # history


def test_an_empty_scope_filters_the_unscoped_rows_only(store: MilvusStore) -> None:
    """Supersession searches a statement's own user and agent; "" names none (a row holds ""
    where its memory has no user or agent)."""
    store.upsert(
        [
            row("acme", "none", vec(1.0), user_id="", agent_id=""),
            row("acme", "u1", vec(1.0), user_id="u1", agent_id=""),
            row("acme", "bot", vec(1.0), user_id="", agent_id="bot"),
        ]
    )

    def ids(filters: Filters) -> list[str]:
        return sorted(h.row.memory_id for h in store.search("acme", [vec(1.0)], 10, filters)[0])

    assert ids(Filters(user_id="", agent_id="")) == ["none"]
    assert ids(Filters(user_id="u1", agent_id="")) == ["u1"]
    assert ids(Filters()) == ["bot", "none", "u1"]


def test_keyword_search_ranks_by_bm25_within_the_tenant(tmp_path: Path) -> None:
    store = MilvusStore(MilvusConfig(uri=str(tmp_path / "fts.db"), dim=DIM))
    store.connect()
    store.upsert(
        [
            row("acme", "m1", vec(1.0), search_text="Alice adopted a cat named Miso"),
            row("acme", "m2", vec(1.0), search_text="the weather was fine"),
            row("acme", "m3", vec(1.0), search_text="Miso the cat, Miso again", state="archived"),
            row("globex", "g1", vec(1.0), search_text="Miso Miso Miso cat"),
            # words that are all stop words index as nothing: stored, found by vector only
            row("acme", "m4", vec(1.0), search_text=keyword_text("It is what it is!")),
        ]
    )
    (hits,) = store.keyword_search("acme", ["cat Miso"], 10, Filters(states=("active", "archived")))
    assert [h.row.memory_id for h in hits] == ["m3", "m1"]
    assert hits[0].score > hits[1].score > 0
    (active,) = store.keyword_search("acme", ["cat Miso"], 10)
    assert [h.row.memory_id for h in active] == ["m1"]
    assert store.keyword_search("acme", ["is it?"], 10) == [[]]
    (near,) = store.search("acme", [vec(1.0)], 10)
    assert "m4" in {h.row.memory_id for h in near}
    store.close()


def test_keyword_search_without_a_full_text_index_is_a_clear_error(store: MilvusStore) -> None:
    if store.config.full_text:
        pytest.skip("this backend keeps a full-text index")
    with pytest.raises(StorageError, match="full-text") as err:
        store.keyword_search("acme", ["cat"], 5)
    assert err.value.retriable is False


ODD = ["a\x12b", 'q"x', "b\\c", "n\nl", "c\rr", "t\tt", "é\u2028", "\\n", 'x\\"', "plain"]


def test_filters_match_values_with_quotes_escapes_and_control_characters(
    store: MilvusStore,
) -> None:
    store.upsert(
        [
            make_row("acme", f"m{i}", [1.0, *([0.0] * (DIM - 1))], agent_id=v, user_id=v, tags=(v,))
            for i, v in enumerate(ODD)
        ]
    )
    for i, value in enumerate(ODD):
        by_agent = store.query("acme", Filters(states=(), agent_id=value))
        by_tag = store.query("acme", Filters(states=(), tags_any=(value,)))
        by_user = store.query("acme", Filters(states=(), user_id=value))
        assert [r.memory_id for r in by_agent] == [f"m{i}"], repr(value)
        assert [r.memory_id for r in by_user] == [f"m{i}"], repr(value)
        assert [r.memory_id for r in by_tag] == [f"m{i}"], repr(value)
