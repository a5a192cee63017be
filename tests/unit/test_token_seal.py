"""Read-your-writes tokens are sealed for the tenant they are issued to (ranker.tokens): a tenant
cannot read the offsets of the shared topics in them (the traffic of every other tenant between
two of its own writes), nor forge or alter one, nor use another tenant's; every ranker sharing
the keys topic opens what any of them sealed. The real broker: tests/integration/test_shared_port.py.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Sequence

import httpx
import pytest
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.hashes import SHA256
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from memcore import InvalidField
from ranker.api import create_api
from ranker.applied import Token
from ranker.tokens import KEY_MEMORY, KEY_TENANT, MAX_AFTER_CHARS, MAX_TOKENS, TokenSeal
from storage.key_log import KeyLogError
from storage.sealing import DataKey, KeyRing, key_record, new_key
from storage.tenants import TenantRegistry
from tests.unit.test_api_input_bounds import Asked

pytestmark = pytest.mark.anyio

TOKEN = Token({"memory-writes": {0: 123_456_789, 5: 7}, "access-events": {2: 31_337}})


class Topic:
    """The ``memory-keys`` topic several rankers share: its records, in order."""

    def __init__(self) -> None:
        self.records: list[tuple[bytes, bytes | None]] = []


class Keys:
    """A ranker's :class:`storage.key_log.KeyLog` over ``topic``: it knows what it read."""

    def __init__(self, topic: Topic) -> None:
        self.topic = topic
        self.ring = KeyRing()
        self.read = 0
        self.catch_ups = 0

    def of_memory(self, tenant_id: str, memory_id: str) -> list[DataKey]:
        return self.ring.of_memory(tenant_id, memory_id)

    def data_key(self, tenant_id: str, memory_id: str, key_id: str) -> DataKey | None:
        return self.ring.data_key(tenant_id, memory_id, key_id)

    async def mint(self, memories: Sequence[tuple[str, str, str | None]]) -> list[DataKey]:
        keys = [new_key(*m) for m in memories]
        self.topic.records.extend(key_record(k) for k in keys)
        for key in keys:
            self.ring.add(key)
        return keys

    async def catch_up(self, timeout_s: float | None = None, *, refresh: bool = False) -> None:
        self.catch_ups += 1
        for key, value in self.topic.records[self.read :]:
            self.ring.apply(key, value)
        self.read = len(self.topic.records)
        await asyncio.sleep(0)  # the broker's answer: another ranker may go on meanwhile
        self.check()

    def check(self) -> None:
        """Raise as a topic that cannot be read would."""


def body(text: str) -> bytes:
    sealed = text.split(".", 2)[2]
    return base64.urlsafe_b64decode(sealed + "=" * (-len(sealed) % 4))


async def test_a_token_opens_for_its_tenant_and_shows_no_offset() -> None:
    seal = TokenSeal()
    text = await seal.seal(TOKEN, "acme")
    assert text.startswith("v2.")
    assert await seal.open(text, "acme") == TOKEN
    assert b"123456789" not in body(text)
    assert b"memory-writes" not in body(text)
    again = await seal.seal(TOKEN, "acme")
    assert again != text  # the same offsets twice: a tenant cannot tell its tokens are equal
    assert await seal.open(again, "acme") == TOKEN
    # nor how large the offsets are: their number of digits was the token's length
    lengths = {
        len(await seal.seal(Token({"memory-writes": {p: o}}), "acme"))
        for p in (0, 7, 63)
        for o in (0, 9, 10, 99_999, 10**9, 2**62)
    }
    assert lengths == {len(text)}


async def test_each_token_is_sealed_under_a_key_of_its_own() -> None:
    """Random 96-bit nonces under the service's one key wore it out after 2^32 tokens (~50 days
    at 1,000 writes/s): each token's key is now derived from it and the token's random salt."""
    keys = Keys(Topic())
    seal = TokenSeal(keys)
    texts = [await seal.seal(TOKEN, "acme") for _ in range(3)]
    (service,) = keys.of_memory(KEY_TENANT, KEY_MEMORY)
    aad = f"mnemostream token\0acme\0{service.key_id}".encode()
    salts = set()
    for text in texts:
        sealed = body(text)
        salt, nonce, data = sealed[:16], sealed[16:28], sealed[28:]
        salts.add(salt)
        with pytest.raises(InvalidTag):  # not under the service's key itself
            AESGCM(service.secret).decrypt(nonce, data, aad)
        derive = HKDF(algorithm=SHA256(), length=32, salt=salt, info=b"mnemostream token key")
        own = AESGCM(derive.derive(service.secret)).decrypt(nonce, data, aad)
        assert Token.from_plain(own, text, "after") == TOKEN
    assert len(salts) == len(texts)


async def test_what_the_service_did_not_seal_for_this_tenant_is_refused_alike() -> None:
    seal = TokenSeal()
    text = await seal.seal(TOKEN, "acme")
    head, key_id, sealed = text.split(".")
    flipped = sealed[:10] + ("A" if sealed[10] != "A" else "B") + sealed[11:]
    plain = base64.urlsafe_b64encode(TOKEN.plain()).decode().rstrip("=")
    refused = {
        "another tenant's": (text, "globex"),
        "altered": (f"{head}.{key_id}.{flipped}", "acme"),
        "in the clear, as before": ("v1." + plain, "acme"),
        "in the clear, as now": (f"v2.{key_id}.{plain}", "acme"),
        "another key": (f"v2.{new_key('', 'x').key_id}.{sealed}", "acme"),
        "cut short": (text[:-6], "acme"),
        "no more than a salt": (f"{head}.{key_id}.{sealed[:20]}", "acme"),
        "a salt and a nonce": (f"{head}.{key_id}.{sealed[:38]}", "acme"),
        "not base64": (text + "!", "acme"),
    }
    for why, (given, tenant) in refused.items():
        with pytest.raises(InvalidField) as err:
            await seal.open(given, tenant, "after[2]")
        assert (err.value.field, err.value.value) == ("after[2]", given), why
        assert err.value.reason == "not a token returned by this service", why


async def test_a_requests_tokens_become_one_and_a_bad_one_is_named_by_its_place() -> None:
    seal = TokenSeal()
    first = await seal.seal(Token({"memory-writes": {0: 5, 1: 9}}), "acme")
    second = await seal.seal(Token({"memory-writes": {0: 7}, "access-events": {0: 2}}), "acme")
    both = await seal.read([first, second], "acme")
    assert both == Token({"memory-writes": {0: 7, 1: 9}, "access-events": {0: 2}})
    assert both is not None
    assert both.named("memory-writes", 1) == ("after[0]", first)
    assert await seal.read(first, "acme") == Token({"memory-writes": {0: 5, 1: 9}})
    assert await seal.read(None, "acme") is None
    with pytest.raises(InvalidField) as err:
        await seal.read([first, "v2.x.y"], "acme")
    assert (err.value.field, err.value.value) == ("after[1]", "v2.x.y")
    with pytest.raises(InvalidField) as alone:
        await seal.read(["v2.x.y"], "acme")
    assert alone.value.field == "after"
    # joined with the service's own (a barrier's ends), what the client sent is named as sent:
    # a session end's one wait named a lone after "after[0]", and its ends "after[1]=''"
    ends = Token({"memory-writes": {0: 8, 1: 9}})
    one = Token.union([await seal.read(first, "acme"), ends])  # type: ignore[list-item]
    assert one is not None
    assert one.offsets == {"memory-writes": {0: 8, 1: 9}}
    assert (one.named("memory-writes", 0), one.parts) == (("after", first), ())
    several = Token.union([both, ends])
    assert several is not None
    assert several.named("memory-writes", 1) == ("after[0]", first)
    assert [p.given for p in several.parts] == [first, second]


async def test_rankers_sharing_the_keys_topic_open_each_others_tokens() -> None:
    topic = Topic()
    first, second, later = Keys(topic), Keys(topic), Keys(topic)
    a, b = TokenSeal(first), TokenSeal(second)
    # started together on an empty topic: each mints a key of its own
    await asyncio.gather(a.ready(), b.ready())
    assert len(topic.records) == 2
    from_a, from_b = await a.seal(TOKEN, "acme"), await b.seal(TOKEN, "acme")
    assert from_a.split(".")[1] != from_b.split(".")[1]
    assert await b.open(from_a, "acme") == TOKEN  # a key minted since b read: read again
    assert await a.open(from_b, "acme") == TOKEN
    # a ranker started later (or restarted) takes a key the topic holds and mints none
    c = TokenSeal(later)
    assert await c.open(from_a, "acme") == TOKEN
    assert await c.open(from_b, "acme") == TOKEN
    await c.seal(TOKEN, "acme")
    assert len(topic.records) == 2
    kept = sorted(k.key_id for k in later.of_memory(KEY_TENANT, KEY_MEMORY))
    assert (await c.seal(TOKEN, "acme")).split(".")[1] == kept[0]


class Down(Keys):
    """A keys topic that cannot be read in time (as KeyLog raises it), until ``up``."""

    def __init__(self, topic: Topic) -> None:
        super().__init__(topic)
        self.up = False

    def check(self) -> None:
        if not self.up:
            raise KeyLogError("not read to its end in time")


async def test_callers_share_one_attempt_to_take_the_key_and_its_failure() -> None:
    """Each waited for the one before it, then ran a timeout of its own: the fifth of five
    requests on a fresh ranker failed after five timeouts."""
    keys = Down(Topic())
    seal = TokenSeal(keys)
    failed = await asyncio.gather(*(seal.ready() for _ in range(5)), return_exceptions=True)
    assert [type(f) for f in failed] == [KeyLogError] * 5
    assert keys.catch_ups == 1
    assert not seal.held
    keys.up = True
    await asyncio.gather(*(seal.ready() for _ in range(5)))
    assert (keys.catch_ups, seal.held) == (2, True)
    await seal.ready()
    assert keys.catch_ups == 2  # held: no more reads


async def test_a_ranker_takes_the_key_in_the_background_until_the_topic_gives_it() -> None:
    keys = Down(Topic())
    seal = TokenSeal(keys)
    await seal.start()
    for _ in range(200):
        if keys.catch_ups >= 2:
            break
        await asyncio.sleep(0.01)
    assert not seal.held
    keys.up = True
    for _ in range(300):
        if held(seal):
            break
        await asyncio.sleep(0.01)
    await seal.stop()
    assert held(seal)
    assert len(keys.topic.records) == 1  # minted once


def held(seal: TokenSeal) -> bool:
    """``seal.held`` read anew (mypy keeps a property's earlier answer)."""
    return seal.held


async def test_a_key_id_no_key_can_have_reads_nothing_more_of_the_topic() -> None:
    keys = Keys(Topic())
    seal = TokenSeal(keys)
    text = await seal.seal(TOKEN, "acme")
    read = keys.catch_ups
    _, key_id, sealed = text.split(".")
    for given in (f"v2.{key_id[:-1]}.{sealed}", f"v2.{key_id}!.{sealed}", "v2..", "v2"):
        with pytest.raises(InvalidField):
            await seal.open(given, "acme")
    assert keys.catch_ups == read
    with pytest.raises(InvalidField):  # a well-formed id not known here: the topic is read
        await seal.open(f"v2.{new_key('', 'x').key_id}.{sealed}", "acme")
    assert keys.catch_ups == read + 1


KEY, OTHER = "key-acme-0123456789", "key-globex-0123456789"


async def test_the_api_folds_a_tenants_tokens_and_refuses_anothers() -> None:
    """``POST /v1/tokens``: what the SDK calls to keep a session's tokens one token long."""

    registry = TenantRegistry.of(
        {"tenants": {"acme": {"api_keys": [KEY]}, "globex": {"api_keys": [OTHER]}}}
    )
    seal = TokenSeal()
    api = create_api(Asked(), registry, token_seal=seal)
    first = await seal.seal(Token({"memory-writes": {0: 5}}), "acme")
    second = await seal.seal(Token({"memory-writes": {1: 3}}), "acme")
    transport = httpx.ASGITransport(app=api)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
        mine = {"Authorization": f"Bearer {KEY}"}
        folded = await http.post("/v1/tokens", json={"after": [first, second]}, headers=mine)
        assert folded.status_code == 200, folded.text
        one = folded.json()["token"]
        assert await seal.open(one, "acme") == Token({"memory-writes": {0: 5, 1: 3}})
        theirs = {"Authorization": f"Bearer {OTHER}"}
        refused = await http.post("/v1/tokens", json={"after": [first, second]}, headers=theirs)
        assert (refused.status_code, refused.json()["field"]) == (422, "after[0]")
        empty = await http.post("/v1/tokens", json={"after": []}, headers=mine)
        assert (empty.status_code, empty.json()["field"]) == (422, "after")
        many = await http.post("/v1/tokens", json={"after": [first] * 1025}, headers=mine)
        assert (many.status_code, many.json()["field"]) == (422, "after")
        most = await http.post("/v1/tokens", json={"after": [first] * 1024}, headers=mine)
        assert most.status_code == 200


async def test_a_route_that_cannot_seal_its_token_produces_nothing() -> None:
    """The token was sealed after the write was produced: a ranker that could not read the
    keys topic answered 503 for a write it had produced (retried: counted twice, for accesses)."""
    registry = TenantRegistry.of({"tenants": {"acme": {"api_keys": [KEY]}}})
    api = create_api(Asked(), registry, token_seal=TokenSeal(Down(Topic())))  # produces: a 500
    mine = {"Authorization": f"Bearer {KEY}"}
    transport = httpx.ASGITransport(app=api)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
        wrote = await http.post("/v1/memories", json={"memories": [{"content": "x"}]}, headers=mine)
        accessed = await http.post("/v1/access", json={"memory_ids": ["m1"]}, headers=mine)
        recalled = await http.post("/v1/recall", json={"query": "x"}, headers=mine)
        untracked = await http.post("/v1/recall", json={"query": "x", "track": False}, headers=mine)
    assert [r.status_code for r in (wrote, accessed, recalled)] == [503] * 3, wrote.text
    assert untracked.status_code == 200  # issues no token


class Stuck(Keys):
    """A keys topic whose reads never end (a broker that takes the request and says nothing)."""

    async def catch_up(self, timeout_s: float | None = None, *, refresh: bool = False) -> None:
        self.catch_ups += 1
        await asyncio.Event().wait()


async def test_stop_ends_an_attempt_under_way() -> None:
    """stop() ended the background task only: the attempt it shared went on, and minted a key on
    the keys topic after the process had stopped that topic's client."""
    keys = Stuck(Topic())
    seal = TokenSeal(keys)
    await seal.start()
    waiting = asyncio.ensure_future(seal.ready())
    for _ in range(100):
        if keys.catch_ups:
            break
        await asyncio.sleep(0.01)
    await seal.stop()
    with pytest.raises(asyncio.CancelledError):  # not a TimeoutError: it ended
        await asyncio.wait_for(waiting, 5)
    assert keys.topic.records == []
    assert not seal.held


async def test_a_querys_after_takes_as_many_tokens_as_a_body() -> None:
    registry = TenantRegistry.of({"tenants": {"acme": {"api_keys": [KEY]}}})
    api = create_api(Asked(), registry)
    mine = {"Authorization": f"Bearer {KEY}"}
    transport = httpx.ASGITransport(app=api)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
        for path in ("/v1/memories/m1", "/v1/memories", "/v1/export"):  # counted before opened
            many = await http.get(path, params={"after": ["v2.x"] * 1025}, headers=mine)
            assert (many.status_code, many.json()["field"]) == (422, "after"), path


async def test_a_requests_tokens_take_at_most_a_mebibyte_together() -> None:
    """One 48 MiB token (a body may be 64 MiB) was decoded and decrypted on the event loop:
    ~0.6 s during which no tenant's request was served. Real tokens are ~420 characters."""
    keys = Keys(Topic())
    seal = TokenSeal(keys)
    text = await seal.seal(TOKEN, "acme")
    head, key_id, sealed = text.split(".")
    huge = f"{head}.{key_id}.{sealed * (MAX_AFTER_CHARS // len(sealed) + 1)}"
    parts = [f"{head}.{key_id}.{sealed * 4}"] * (MAX_AFTER_CHARS // (4 * len(sealed)) + 1)
    for given in (huge, [text, huge], parts):
        with pytest.raises(InvalidField) as err:
            await seal.read(given, "acme")
        assert err.value.field == "after"
        assert err.value.reason == f"at most {MAX_AFTER_CHARS} characters of tokens"
    assert await seal.read([text] * MAX_TOKENS, "acme") == TOKEN  # the most tokens, full size
    registry = TenantRegistry.of({"tenants": {"acme": {"api_keys": [KEY]}}})
    api = create_api(Asked(), registry, token_seal=seal)
    mine = {"Authorization": f"Bearer {KEY}"}
    transport = httpx.ASGITransport(app=api)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
        reply = await http.post("/v1/recall", json={"query": "x", "after": huge}, headers=mine)
    assert (reply.status_code, reply.json()["field"]) == (422, "after")
    assert str(MAX_AFTER_CHARS) in reply.json()["detail"]
