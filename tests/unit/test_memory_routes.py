"""Listing pages, cursors and the new version an update writes (the routes' own logic)."""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import httpx
import orjson
import pytest
from aiokafka.partitioner import DefaultPartitioner

from memcore import Effect, EffectKind, InvalidField, Lifecycle
from ranker.history import _event, partition_of
from ranker.listing import (
    CHUNK,
    LISTING_CURSOR,
    SCAN_MAX,
    decode_cursor,
    encode_cursor,
    listing_cursor,
    listing_of,
    page,
    read_listing_cursor,
)
from ranker.routes import UpdateBody, new_version
from ranker.service import RecallService
from storage import Filters, MemoryRow, MilvusStore, to_us
from storage.records import Limits, RecordError, decode_write
from storage.tenants import TenantRegistry
from streams.processor import Inbound, audit_value
from tests.rows import make_row
from tests.unit.helpers import created as created_state
from tests.unit.test_user_scope import AUTH, Produced, service_and_client

NOW = datetime(2026, 3, 1, 12, tzinfo=UTC)
LIMITS = Limits(
    2, 16_384, TenantRegistry.of({"tenants": {"a": {"api_keys": ["key-a-0123456789"]}}})
)
LIMITS_ACME = Limits(
    4, 16_384, TenantRegistry.of({"tenants": {"acme": {"api_keys": ["key-a-0123456789"]}}})
)


class RowsStore:
    """What ``page`` asks of Milvus: rows of a tenant among ``filters.memory_ids``, by tag."""

    def __init__(self, rows: Sequence[MemoryRow]) -> None:
        self.rows = rows
        self.asked: list[int] = []

    def query(self, tenant_id: str, filters: Filters, limit: int) -> list[MemoryRow]:
        self.asked.append(len(filters.memory_ids))
        wanted = set(filters.memory_ids)
        return [
            r
            for r in self.rows
            if r.tenant_id == tenant_id
            and r.memory_id in wanted
            and (not filters.tags_any or set(r.tags) & set(filters.tags_any))
        ][:limit]


def store_of(rows: Sequence[MemoryRow]) -> MilvusStore:
    return RowsStore(rows)  # type: ignore[return-value]


def test_pages_walk_every_matching_id_once_in_order_across_chunks() -> None:
    n = CHUNK + 30
    rows = [make_row("a", f"m{i:05d}", (1.0,), tags=("x",) if i % 3 else ()) for i in range(n)]
    ids = sorted([r.memory_id for r in rows] + ["only-in-the-view"])  # no Milvus row for it yet
    fake = store_of(rows)
    seen, after = [], None
    while True:
        got = page(fake, "a", ids, Filters(tags_any=("x",)), after, 100)
        seen += [r.memory_id for r in got.rows]
        if got.cursor is None:
            break
        after = decode_cursor(got.cursor)
    assert seen == [f"m{i:05d}" for i in range(n) if i % 3]
    assert max(fake.asked) <= CHUNK  # type: ignore[attr-defined]


def test_the_last_full_page_has_no_cursor_when_nothing_follows() -> None:
    rows = [make_row("a", f"m{i}", (1.0,)) for i in range(4)]
    assert page(store_of(rows), "a", [r.memory_id for r in rows], Filters(), None, 4).cursor is None
    assert page(store_of(rows), "a", [r.memory_id for r in rows], Filters(), None, 3).cursor


def test_a_cursor_round_trips_and_a_forged_one_names_the_field() -> None:
    assert decode_cursor(encode_cursor("m-abc:1.2_x")) == "m-abc:1.2_x"
    for forged in ("%%%", encode_cursor("a/b"), "", "!"):
        with pytest.raises(InvalidField) as err:
            decode_cursor(forged)
        assert err.value.field == "cursor"


def test_a_listing_cursor_reads_back_and_one_with_a_forged_time_names_the_field() -> None:
    """A cursor carries its listing's time as digits; ``int()`` also took " 12 ", "1_000", "-5"
    and times past Milvus's int64: a caller chose the time its own listing was current at.
    """
    listing = listing_of("a", Filters())
    cursor = listing_cursor(encode_cursor("m-7"), 1_700_000_000_000_000, listing)
    assert read_listing_cursor(cursor, listing) == ("m-7", 1_700_000_000_000_000)
    for as_of in (" 12 ", "1_000", "-5", "+5", "١٢", str(2**63), ""):
        text = f"{LISTING_CURSOR}{listing}/{as_of}/m-7"
        forged = base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")
        with pytest.raises(InvalidField) as err:
            read_listing_cursor(forged, listing)
        assert err.value.field == "cursor"


def version(old: MemoryRow, body: UpdateBody) -> dict[str, Any]:
    """The new version's document (``new_version`` for tenant ``a`` at ``NOW``)."""
    document, at = new_version(old, body, "a", NOW, LIMITS)
    assert at == datetime.fromisoformat(document["at"])
    return document


def test_a_new_version_keeps_what_the_update_leaves_out() -> None:
    old = make_row(
        "a",
        "m1",
        (0.6, 0.8),
        content="Carol works at Initech",
        tags=("job",),
        metadata={"source": "chat"},
        agent_id="agent-7",
        user_id="ann",
        importance=0.7,
        tier="semantic",
    )
    doc = version(old, UpdateBody(importance=0.9))
    assert (doc["content"], doc["tags"], doc["metadata"]) == (
        old.content,
        ["job"],
        {"source": "chat"},
    )
    assert (doc["agent_id"], doc["importance"], doc["memory_type"]) == ("agent-7", 0.9, "semantic")
    assert doc["user_id"] == "ann"  # the scope is kept too
    assert version(old, UpdateBody(user_id="bob"))["user_id"] == "bob"
    unscoped = version(dataclasses.replace(old, user_id=""), UpdateBody(importance=0.9))
    assert "user_id" not in unscoped
    assert doc["embedding"] == [0.6, 0.8]  # same text: the vector is kept, not recomputed
    assert doc["at"] == NOW.isoformat()
    again = version(old, UpdateBody(importance=0.9))["memory_id"]
    other = version(old, UpdateBody(importance=0.8))["memory_id"]
    assert doc["memory_id"] == again != old.memory_id  # the same update twice: one version
    assert other != doc["memory_id"]
    with pytest.raises(InvalidField):
        version(old, UpdateBody(at=NOW.isoformat()))  # changes nothing
    changed = version(old, UpdateBody(content="Carol works at Globex"))
    assert changed["content"] == "Carol works at Globex"
    assert "embedding" not in changed  # new text: the worker embeds it


def test_an_update_takes_run_id_as_its_session_as_a_write_does() -> None:
    """README says run_id is session_id's alias on writes; PATCH answered 422 for it."""
    old = make_row("a", "m1", (0.6, 0.8), session_id="")
    assert version(old, UpdateBody(run_id="r-9"))["session_id"] == "r-9"
    assert "run_id" not in version(old, UpdateBody(run_id="r-9"))
    assert version(old, UpdateBody(run_id="r-9", session_id="r-9"))["session_id"] == "r-9"
    with pytest.raises(RecordError) as err:
        version(old, UpdateBody(run_id="r-9", session_id="s-1"))
    assert err.value.field == "run_id"


async def _patched(monkeypatch: pytest.MonkeyPatch, old: MemoryRow, body: bytes) -> httpx.Response:
    """``PATCH /v1/memories/{old}`` with ``body`` against a service that holds ``old``; asserts
    nothing was produced unless it answered 200.
    """
    produced = Produced()
    service, client = service_and_client(produced)

    async def get(tenant_id: str, memory_id: str, after: object = None) -> MemoryRow | None:
        return old if memory_id == old.memory_id else None

    monkeypatch.setattr(service, "get", get)
    headers = AUTH | {"content-type": "application/json"}
    async with client as http:
        reply = await http.patch(f"/v1/memories/{old.memory_id}", content=body, headers=headers)
    assert reply.status_code == 200 or not produced.values, reply.text
    return reply


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b'{"metadata": {"n": 18446744073709551616}}', "metadata.n"),
        (b'{"metadata": {"\\ud800": 1}}', "metadata.\\ud800"),
        (b'{"metadata": {"a": [1, {"b": "\\udc00"}]}}', "metadata.a[1].b"),
        (b'{"tags": ["a/\\ud800"]}', "tags[0]"),
        (b'{"user_id": "\\ud800"}', "user_id"),
        (b'{"agent_id": "\\ud800"}', "agent_id"),
        (b'{"metadata": ' + b'{"a": ' * 300 + b"1" + b"}" * 301, "metadata"),
        (b'{"content": "  \\n\\t "}', "content"),
        (b'{"content": "\\u3000"}', "content"),
        (b'{"importance": 0.3, "at": ""}', "at"),  # was taken for "now"
        (b'{"user_id": ""}', "user_id"),  # was taken for none: the version left its user
        (b'{"run_id": ""}', "run_id"),
    ],
)
async def test_an_update_a_write_would_refuse_is_the_same_422_naming_the_field(
    monkeypatch: pytest.MonkeyPatch, body: bytes, field: str
) -> None:
    """What ``POST /v1/memories`` refuses (a lone surrogate, an integer over 64 bits) is refused
    by an update too, naming the field, before the new version's id is derived (not a 500)."""
    old = make_row("acme", "m1", (1.0, 0.0, 0.0, 0.0))
    reply = await _patched(monkeypatch, old, body)
    assert (reply.status_code, reply.json()["field"]) == (422, field), reply.text


@pytest.mark.anyio
async def test_an_update_dated_before_the_memory_was_created_is_a_422_naming_at(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The worker ignores a supersession older than the memory it supersedes, which would leave
    both versions current: refused at the edge; from the creation time on it is accepted."""
    created = datetime(2024, 1, 1, tzinfo=UTC)
    old = make_row("acme", "m1", (1.0, 0.0, 0.0, 0.0), created_at_us=to_us(created))
    earlier = b'{"content": "Alice lives in Lisbon", "at": "2023-06-01T00:00:00Z"}'
    refused = await _patched(monkeypatch, old, earlier)
    assert (refused.status_code, refused.json()["field"]) == (422, "at"), refused.text
    assert "2023-06-01T00:00:00Z" in refused.json()["detail"]
    same = b'{"content": "Alice lives in Lisbon", "at": "2024-01-01T00:00:00Z"}'
    accepted = await _patched(monkeypatch, old, same)
    assert accepted.status_code == 200, accepted.text
    assert accepted.json()["supersedes"] == "m1"


def test_history_reads_the_partition_kafkas_default_partitioner_chose() -> None:
    for key in (b"acme/m-1", b"globex/a-very-long-memory-id-0123456789", b"t/x"):
        for n in (1, 3, 8, 12):
            assert partition_of(key, n) == DefaultPartitioner()(key, list(range(n)), [])


@pytest.mark.parametrize("raw", [b"not json", b"[1, 2]", b'"text"', b"{"])
def test_a_record_on_the_audit_topic_that_is_not_an_audit_record_is_left_out(raw: bytes) -> None:
    """Another producer's record under a memory's key was a 500 of the history route."""
    assert _event(raw, "acme") == []
    mine = orjson.dumps({"tenant_id": "acme", "kind": "created", "at": "2026-03-01T12:00:00"})
    assert [e["kind"] for e in _event(mine, "acme")] == ["created"]
    assert _event(mine, "globex") == []


def test_history_shows_no_offset_of_the_topic_every_tenant_shares() -> None:
    """Each record showed its event's offset on ``memory-writes``: two of them told a tenant
    exactly how many records all other tenants wrote to that partition between them (a walk
    counted another tenant's 40 writes so), what tokens are sealed against.
    """
    record = {
        "tenant_id": "acme",
        "kind": "created",
        "reason": "written",
        "at": "2026-03-01T12:00:00+00:00",
        "source": "memory-writes/2",
        "offset": 41,
        "after": {"state": "active"},
    }
    (shown,) = _event(orjson.dumps(record), "acme")
    assert shown == {
        "kind": "created",
        "reason": "written",
        "at": "2026-03-01T12:00:00+00:00",
        "source": "memory-writes/2",
        "after": {"state": "active"},
    }


def test_a_page_looks_at_a_bounded_number_of_ids_and_the_walk_still_finds_all() -> None:
    """A rare filter over a large tenant asked Milvus of every id for one page (120 queries for a
    tag one memory of 60,000 has): a page now ends after SCAN_MAX ids, with a cursor.
    """
    n = 2 * SCAN_MAX + 10
    ids = [f"m{i:06d}" for i in range(n)]
    rows = [make_row("a", m, (1.0,), tags=("x",) if m == ids[-3] else ()) for m in ids]
    fake = store_of(rows)
    pages, after = [], None
    while True:
        asked = len(fake.asked)  # type: ignore[attr-defined]
        got = page(fake, "a", ids, Filters(tags_any=("x",)), after, 10)
        assert len(fake.asked) - asked <= SCAN_MAX // CHUNK  # type: ignore[attr-defined]
        pages.append([r.memory_id for r in got.rows])
        if got.cursor is None:
            break
        after = decode_cursor(got.cursor)
    assert pages == [[], [], [ids[-3]]]  # short pages with cursors, then the last one


def test_ids_the_caller_rules_out_are_never_asked_of_milvus() -> None:
    rows = [make_row("a", f"m{i}", (1.0,)) for i in range(10)]
    fake = store_of(rows)
    purged = {f"m{i}" for i in range(9)}  # tombstones the view keeps
    ids = [r.memory_id for r in rows]
    got = page(fake, "a", ids, Filters(), None, 5, candidate=lambda m: m not in purged)
    assert [r.memory_id for r in got.rows] == ["m9"]
    assert fake.asked == [1]  # type: ignore[attr-defined]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("memory", "field"),
    [
        ({"content": "   "}, "memories[0].content"),
        ({"content": "\n\t\u3000"}, "memories[0].content"),
        ({"content": "Likes tea", "at": ""}, "memories[0].at"),
    ],
)
async def test_a_blank_write_or_an_empty_time_is_a_422_naming_the_field(
    memory: dict[str, str], field: str
) -> None:
    """Every text of nothing but whitespace was accepted as one memory (they all normalise to "",
    one derived id: each overwrote the last), and an empty ``at`` was taken for "now"."""
    produced = Produced()
    _, client = service_and_client(produced)
    async with client as http:
        reply = await http.post("/v1/memories", json={"memories": [memory]}, headers=AUTH)
    assert (reply.status_code, reply.json()["field"]) == (422, field), reply.text
    assert produced.values == []


@pytest.mark.anyio
@pytest.mark.parametrize("path", ["/v1/recall", "/v1/archive/search"])
async def test_a_recall_of_a_blank_query_is_a_422_naming_it(path: str) -> None:
    _, client = service_and_client(Produced())
    async with client as http:
        reply = await http.post(path, json={"query": " \t "}, headers=AUTH)
    assert (reply.status_code, reply.json()["field"]) == (422, "query"), reply.text


@pytest.mark.anyio
async def test_an_update_retried_with_its_time_written_otherwise_is_the_same_version(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The version id hashed the time as sent: a retry writing Z for +00:00 made another version."""
    old = make_row("acme", "m1", (1.0, 0.0, 0.0, 0.0))
    versions = set()
    for at in (
        "2026-03-01T12:00:00+00:00",
        "2026-03-01T12:00:00Z",
        "2026-03-01T12:00:00.000Z",
        "2026-03-01T14:00:00+02:00",
    ):
        body = orjson.dumps({"content": "Alice lives in Porto", "at": at})
        reply = await _patched(monkeypatch, old, body)
        assert reply.status_code == 200, reply.text
        versions.add(reply.json()["memory_id"])
    assert len(versions) == 1
    later = orjson.dumps({"content": "Alice lives in Porto", "at": "2026-03-01T12:00:01Z"})
    assert (await _patched(monkeypatch, old, later)).json()["memory_id"] not in versions


def test_history_shows_times_in_utc_as_every_other_route_does() -> None:
    """An audit record kept the writer's offset (``…T14:00:00+02:00`` beside a memory's
    ``created_at`` of ``…T12:00:00+00:00``): one history mixed offsets, and sorting ``at`` as
    text gave the wrong order. The worker writes UTC; records written before are shown in it."""
    state = dataclasses.replace(
        created_state(), last_access=datetime(2026, 3, 1, 14, tzinfo=timezone(timedelta(hours=2)))
    )
    at = datetime(2026, 3, 1, 15, tzinfo=timezone(timedelta(hours=2)))
    effect = Effect(EffectKind.ACCESSED, "get access #1")
    value = orjson.loads(audit_value(state, effect, Inbound("a", 0, 7, b"k", b"v"), at))
    assert (value["at"], value["after"]["last_access"]) == (
        "2026-03-01T13:00:00+00:00",
        "2026-03-01T12:00:00+00:00",
    )
    old = {**value, "at": "2026-03-01T15:00:00+02:00"}
    old["after"] = {**value["after"], "last_access": "2026-03-01T14:00:00+02:00"}
    (shown,) = _event(orjson.dumps(old), state.tenant_id)
    assert (shown["at"], shown["after"]["last_access"]) == (
        "2026-03-01T13:00:00+00:00",
        "2026-03-01T12:00:00+00:00",
    )


def test_an_audit_record_says_what_a_purge_a_supersession_or_a_merge_left() -> None:
    """A purged memory's records showed ``state: deleted`` alone, and a superseded or merged
    one's nothing of its successor: the history could not tell a user's delete from a purge,
    nor say which memory took over and from when.
    """
    state = dataclasses.replace(
        created_state(),
        state=Lifecycle.DELETED,
        purged=True,
        valid_to=datetime(2026, 3, 2, 14, tzinfo=timezone(timedelta(hours=2))),
        superseded_by="m9",
        merged_into="s1",
    )
    effect = Effect(EffectKind.PURGED, "purged through the API")
    value = orjson.loads(audit_value(state, effect, Inbound("a", 0, 7, b"k", b"v"), NOW))
    after = value["after"]
    assert (after["purged"], after["valid_to"], after["superseded_by"], after["merged_into"]) == (
        True,
        "2026-03-02T12:00:00+00:00",
        "m9",
        "s1",
    )
    current = orjson.loads(
        audit_value(created_state(), effect, Inbound("a", 0, 7, b"k", b"v"), NOW)
    )
    assert current["after"]["valid_to"] is None


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("state", "query", "accessed"),
    [
        ("active", "", True),
        ("archived", "", True),  # brought back by the worker (SPEC section 5)
        ("active", "?track=false", False),
        ("deleted", "", False),  # shown, not accessed: the reducer ignores it
        ("forgotten", "", False),
    ],
)
async def test_reading_a_memory_by_id_is_an_access_of_kind_get(
    monkeypatch: pytest.MonkeyPatch, state: str, query: str, accessed: bool
) -> None:
    """SPEC sections 1 and 5 count "a get" among the accesses: ``GET /v1/memories/{id}``
    recorded none, so reading an archived memory never brought it back and its count and
    recency ignored every read.
    """
    produced = Produced()
    service, client = service_and_client(produced)
    held = make_row("acme", "m1", (1.0, 0.0, 0.0, 0.0), state=state)

    async def get(tenant_id: str, memory_id: str, after: object = None) -> MemoryRow | None:
        return held if memory_id == "m1" else None

    monkeypatch.setattr(service, "get", get)
    async with client as http:
        reply = await http.get(f"/v1/memories/m1{query}", headers=AUTH)
    assert reply.status_code == 200, reply.text
    assert reply.json()["state"] == state  # as it was before this access
    if not accessed:
        assert (produced.values, "token" in reply.json()) == ([], False)
        return
    (event,) = produced.values
    assert (event["memory_id"], event["kind"]) == ("m1", "get")
    assert reply.json()["token"]


async def _update_made(
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[MemoryRow, bytes, str, MemoryRow]:
    """m1, an update of it with its ``at``, the id of the version it makes, and that version's
    row as Milvus would hold it once applied.
    """
    old = make_row("acme", "m1", (1.0, 0.0, 0.0, 0.0))
    body = orjson.dumps({"content": "Alice lives in Porto", "at": "2026-03-01T12:00:00Z"})
    made = (await _patched(monkeypatch, old, body)).json()["memory_id"]
    version = make_row("acme", made, (1.0, 0.0, 0.0, 0.0), content="Alice lives in Porto")
    return old, body, made, version


def _reading(
    monkeypatch: pytest.MonkeyPatch, produced: Produced, rows: dict[str, MemoryRow]
) -> tuple[RecallService, httpx.AsyncClient]:
    """A service and client whose reads by id find what ``rows`` holds when read."""
    service, client = service_and_client(produced)

    async def get(tenant_id: str, memory_id: str, after: object = None) -> MemoryRow | None:
        return rows.get(memory_id)

    monkeypatch.setattr(service, "get", get)
    return service, client


@pytest.mark.anyio
async def test_an_update_sent_again_after_it_was_applied_is_the_same_version_not_a_409(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The SDK's advice after no reply came (``update`` with ``at`` again) met a 409 once the
    first was applied: the version it supersedes was no longer current. The same version is
    answered while it is live (not before it is applied: its write may never be, dead-lettered).
    """
    old, body, made, version = await _update_made(monkeypatch)
    rows: dict[str, MemoryRow] = {}
    produced = Produced()
    _, client = _reading(monkeypatch, produced, rows)
    headers = AUTH | {"content-type": "application/json"}

    async def patch(sent: bytes | dict[str, str], **found: MemoryRow) -> httpx.Response:
        rows.clear()
        rows.update(found)
        content = sent if isinstance(sent, bytes) else orjson.dumps(sent)
        return await http.patch("/v1/memories/m1", content=content, headers=headers)

    applied = dataclasses.replace(old, superseded_by=made)
    async with client as http:
        again = await patch(body, m1=applied, **{made: version})
        assert again.status_code == 200, again.text
        assert again.json() == {"memory_id": made, "supersedes": "m1", "token": None}
        chained = dataclasses.replace(old, superseded_by="m-raced-earlier")  # old -> raced -> made
        assert (await patch(body, m1=chained, **{made: version})).json()["memory_id"] == made
        waiting = await patch(body, m1=applied)  # its supersede applied, its write not (yet)
        assert waiting.status_code == 409, waiting.text
        for state in ("deleted", "forgotten"):
            gone = dataclasses.replace(version, state=state)
            assert (await patch(body, m1=applied, **{made: gone})).status_code == 409
        for other in (
            {"content": "Alice lives in Porto"},  # no time: another version
            {"content": "Alice lives in Porto", "at": "2026-03-01T12:00:01Z"},
            {"content": "Alice lives in Braga", "at": "2026-03-01T12:00:00Z"},
            {"at": "2026-03-01T12:00:00Z"},  # changes nothing: refused as before, a 409 here
        ):
            refused = await patch(other, m1=applied, **{made: version})
            assert refused.status_code == 409, refused.text
            assert f"superseded by {made}" in refused.json()["detail"]
    assert produced.values == []
    deleted = dataclasses.replace(applied, state="deleted")
    assert (await _patched(monkeypatch, deleted, body)).status_code == 409


@pytest.mark.anyio
async def test_an_update_sent_again_after_its_version_was_deleted_does_not_bring_it_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A walk updated m1 with ``at``, deleted the version (m1 current again, as promised), then
    sent the same update again: 200, the deleted version active again and m1 superseded by it,
    undoing the user's delete. Now a 409 names the version and its state; the update with
    another ``at`` makes a new version. A memory deleted after it was superseded is named
    deleted (its successor, maybe deleted too, is not what to update).
    """
    old, body, made, version = await _update_made(monkeypatch)
    rows: dict[str, MemoryRow] = {}
    produced = Produced()
    service, client = _reading(monkeypatch, produced, rows)
    headers = AUTH | {"content-type": "application/json"}
    purged: set[str] = set()
    monkeypatch.setattr(service, "purged", lambda tenant_id, memory_id: memory_id in purged)
    async with client as http:
        for state in ("deleted", "forgotten", "purged"):
            rows["m1"] = old
            if state == "purged":  # no row is read of it: the state view knows it purged
                rows.pop(made)
                purged.add(made)
            else:
                rows[made] = dataclasses.replace(version, state=state)
            refused = await http.patch("/v1/memories/m1", content=body, headers=headers)
            assert refused.status_code == 409, refused.text
            assert f"{made}, is {state}" in refused.json()["detail"]
        assert produced.values == []
        purged.clear()
        rows[made] = version  # live, its supersede not applied yet: the same version again
        again = await http.patch("/v1/memories/m1", content=body, headers=headers)
        assert (again.status_code, again.json()["memory_id"]) == (200, made)
        rows[made] = dataclasses.replace(version, state="deleted")
        later = orjson.dumps({"content": "Alice lives in Porto", "at": "2026-03-01T12:00:01Z"})
        anew = await http.patch("/v1/memories/m1", content=later, headers=headers)
        assert anew.status_code == 200, anew.text
        assert anew.json()["memory_id"] != made
        rows["m1"] = dataclasses.replace(old, state="deleted", superseded_by=made)
        gone = await http.patch("/v1/memories/m1", content=later, headers=headers)
    assert gone.status_code == 409
    assert gone.json()["detail"] == "memory m1 is deleted: not updatable"


def test_every_memory_returned_names_the_memories_it_was_written_related_to() -> None:
    """A write's ``relations`` reached Milvus and GraphRAG but no route showed them: an export
    (the SDK's backup) lost them.
    """
    from mnemostream import Memory
    from ranker.wire import memory_json

    row = make_row("acme", "m1", (1.0,), relations=("m0", "m2"))
    shown = memory_json(row)
    assert shown["relations"] == ["m0", "m2"]
    assert Memory.of(shown).relations == ["m0", "m2"]
    assert memory_json(make_row("acme", "m3", (1.0,)))["relations"] == []


def test_every_memory_shows_when_its_next_review_is_due() -> None:
    """SPEC section 1 lists ``next_review``; the rows held it and no answer showed it, so review
    timing could not be audited but by probing accesses around it.
    """
    from mnemostream import Memory
    from ranker.wire import memory_json

    due = make_row("acme", "m1", (1.0,), next_review_us=1_772_366_400_000_000)
    assert memory_json(due)["next_review"] == "2026-03-01T12:00:00+00:00"
    assert Memory.of(memory_json(due)).next_review == "2026-03-01T12:00:00+00:00"
    assert memory_json(make_row("acme", "m2", (1.0,), next_review_us=0))["next_review"] is None
    for state in ("deleted", "forgotten"):  # no access reaches it: the time never comes
        gone = make_row("acme", "m3", (1.0,), next_review_us=1_772_366_400_000_000, state=state)
        assert memory_json(gone)["next_review"] is None


@pytest.mark.anyio
async def test_an_update_is_one_write_naming_what_it_supersedes_and_no_supersede_of_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The route produced the version's write and the old memory's ``supersede`` together, so a
    version the worker dead-lettered left the old memory superseded by a memory that never was.
    Now it produces the write alone, naming the memory it ``supersedes``; the worker sends the
    ``supersede`` once the version is applied (``tests/unit/test_write_batches.py``).
    """
    produced = Produced()
    service, client = service_and_client(produced)
    old = make_row("acme", "m1", (1.0, 0.0, 0.0, 0.0))

    async def get(tenant_id: str, memory_id: str, after: object = None) -> MemoryRow | None:
        return old if memory_id == old.memory_id else None

    monkeypatch.setattr(service, "get", get)
    body = {"content": "Alice lives in Porto", "at": "2026-03-01T12:30:00+00:00"}
    async with client as http:
        reply = await http.patch("/v1/memories/m1", json=body, headers=AUTH)
    assert reply.status_code == 200, reply.text
    (written,) = produced.values
    assert "decision" not in written
    assert (written["memory_id"], written["supersedes"], written["at"]) == (
        reply.json()["memory_id"],
        "m1",
        "2026-03-01T12:30:00+00:00",
    )
    record = decode_write(orjson.dumps(written), LIMITS_ACME)
    assert record.supersedes == "m1"
