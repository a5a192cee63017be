"""Crypto-shredding: what a memory says is sealed under a data key of its own, so that erasing
the key erases the words from every topic, table and replay at once.

A write's *private fields* (:data:`PRIVATE_FIELDS`: content, context, embedding, metadata) travel
sealed: ``{"sealed": {"key_id", "nonce", "data"}}`` replaces them in the record, ``data`` being
AES-256-GCM over their JSON, bound (as associated data) to the tenant, the memory and the key id,
so a sealed value copied onto another memory does not open. Every write gets a fresh key
(:func:`new_key`); the key lives on the compacted ``memory-keys`` topic only
(:mod:`storage.key_log`), keyed ``tenant/memory/key id``, never on a replayed topic. Erasing a
memory tombstones its keys and records an *erasure marker* (``tenant/memory`` -> the erased key
ids), so a replay meeting the sealed write knows it was erased rather than lost.

What stays in the clear, by design: ids (tenant, memory, scope: ``user_id``, ``agent_id``,
``session_id``), tags, relations, memory type, times and counters: the fields that route, filter
and count. A derived memory id is a hash of the scope and the content (give your own ids to avoid
that fingerprint). Nothing here does I/O or reads the clock; :func:`new_key` reads the operating
system's random source.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

PRIVATE_FIELDS = ("content", "context", "embedding", "metadata")
"""The write fields that are sealed (absent ones are left out)."""
KEY_BYTES = 32
NONCE_BYTES = 12
KEY_ID_BYTES = 12


class Opener(Protocol):
    """What opens sealed values: :class:`KeyRing`, :class:`storage.key_log.KeyLog`."""

    def open(self, tenant_id: str, memory_id: str, sealed: Mapping[str, Any]) -> Any:  # noqa: ANN401 - JSON
        """The payload; raises Erased or SealError (see :meth:`KeyRing.open`)."""
        ...

    def data_key(self, tenant_id: str, memory_id: str, key_id: str) -> DataKey | None:
        """The key itself (to seal more under it); None when unknown or erased."""
        ...

    def erased_memory(self, tenant_id: str, memory_id: str) -> bool:
        """True when the memory was erased and no key was minted for it since (a write after the
        erasure): its words as they were before are gone for good.
        """
        ...

    def is_erased(self, tenant_id: str, memory_id: str, key_id: str) -> bool:
        """True when this key of the memory was erased (whatever keys it has since)."""
        ...

    def of_memory(self, tenant_id: str, memory_id: str) -> list[DataKey]:
        """The memory's live keys, as read so far."""
        ...


class SealError(ValueError):
    """A sealed value that cannot be opened: ``field`` names the part, ``reason`` says why."""

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}")


class Erased(Exception):  # noqa: N818 - a state, not a failure
    """The key a sealed value needs was erased: the memory's words are gone for good."""

    def __init__(self, tenant_id: str, memory_id: str, key_id: str) -> None:
        self.tenant_id = tenant_id
        self.memory_id = memory_id
        self.key_id = key_id
        super().__init__(f"{tenant_id}/{memory_id} was erased (key {key_id})")


@dataclass(frozen=True)
class DataKey:
    """One write's data key.

    Attributes:
        tenant_id: the tenant of the memory it seals.
        memory_id: the memory it seals.
        key_id: its id (URL-safe base64 of 12 random bytes).
        secret: the 32-byte AES-256 key.
        user_id: the memory's user, when it has one (erasing a user finds its keys by it).
    """

    tenant_id: str
    memory_id: str
    key_id: str
    secret: bytes = field(repr=False)
    user_id: str | None = None

    @property
    def record_key(self) -> bytes:
        """Its key on the ``memory-keys`` topic."""
        return f"{self.tenant_id}/{self.memory_id}/{self.key_id}".encode()


def new_key(tenant_id: str, memory_id: str, user_id: str | None = None) -> DataKey:
    """A fresh random data key for one write of ``tenant_id/memory_id``."""
    key_id = base64.urlsafe_b64encode(os.urandom(KEY_ID_BYTES)).decode().rstrip("=")
    return DataKey(tenant_id, memory_id, key_id, os.urandom(KEY_BYTES), user_id)


def _aad(tenant_id: str, memory_id: str, key_id: str) -> bytes:
    return f"{tenant_id}/{memory_id}/{key_id}".encode()


def seal(payload: Mapping[str, Any], key: DataKey) -> dict[str, str]:
    """The sealed form of ``payload`` (JSON-able) under ``key``."""
    nonce = os.urandom(NONCE_BYTES)
    data = AESGCM(key.secret).encrypt(
        nonce, orjson.dumps(payload), _aad(key.tenant_id, key.memory_id, key.key_id)
    )
    return {
        "key_id": key.key_id,
        "nonce": base64.b64encode(nonce).decode(),
        "data": base64.b64encode(data).decode(),
    }


def unseal(sealed: Mapping[str, Any], secret: bytes, tenant_id: str, memory_id: str) -> Any:  # noqa: ANN401 - JSON
    """The payload of ``sealed`` (as :func:`seal` made it for this tenant and memory); raises
    SealError when it is malformed or does not open with ``secret``.
    """
    try:
        # strict_mode: validation in C (b64decode's validate=True runs a regex over the data)
        nonce = binascii.a2b_base64(sealed["nonce"], strict_mode=True)
        data = binascii.a2b_base64(sealed["data"], strict_mode=True)
        key_id = str(sealed["key_id"])
    except (KeyError, TypeError, ValueError) as exc:
        raise SealError("sealed", f"malformed: {exc}") from exc
    try:
        plain = AESGCM(secret).decrypt(nonce, data, _aad(tenant_id, memory_id, key_id))
    except (InvalidTag, ValueError) as exc:
        raise SealError("sealed.data", "does not open with its key for this memory") from exc
    try:
        return orjson.loads(plain)
    except orjson.JSONDecodeError as exc:
        raise SealError("sealed.data", f"opens, but not to JSON: {exc}") from exc


def seal_write(document: Mapping[str, Any], key: DataKey) -> dict[str, Any]:
    """``document`` (a write record) with its private fields sealed under ``key``."""
    private = {name: document[name] for name in PRIVATE_FIELDS if name in document}
    public = {name: value for name, value in document.items() if name not in PRIVATE_FIELDS}
    return {**public, "sealed": seal(private, key)}


# -- the keys topic ------------------------------------------------------------------------------


def key_record(key: DataKey) -> tuple[bytes, bytes]:
    """The ``memory-keys`` record of ``key``."""
    value = {"v": 1, "secret": base64.b64encode(key.secret).decode()}
    if key.user_id is not None:
        value["user_id"] = key.user_id
    return key.record_key, orjson.dumps(value)


def erasure_record(
    tenant_id: str, memory_id: str, key_ids: Iterable[str], users: Iterable[str] = ()
) -> tuple[bytes, bytes]:
    """The erasure marker of a memory: every key id of it erased so far, and ``users``: the
    users those keys named while a user's erasure still needs them (one that failed on the
    summaries' search finds the memories it erased by them when repeated: ``DELETE
    /v1/users/{id}``; :meth:`storage.key_log.KeyLog.forget_users` writes the marker again
    without them once it succeeded: a marker is never compacted away).
    """
    value: dict[str, object] = {"v": 1, "erased": sorted(set(key_ids))}
    named = sorted(set(users))
    if named:
        value["users"] = named
    return f"{tenant_id}/{memory_id}".encode(), orjson.dumps(value)


@dataclass
class KeyRing:
    """The keys and erasure markers of the ``memory-keys`` topic, in memory (what
    :class:`storage.key_log.KeyLog` follows; tests fill one directly).

    ``keys``: (tenant, memory) -> key id -> key; ``erased``: (tenant, memory) -> erased key ids;
    ``erased_users``: (tenant, memory) -> the users its erased keys named (markers that name any).
    """

    keys: dict[tuple[str, str], dict[str, DataKey]] = field(default_factory=dict)
    erased: dict[tuple[str, str], frozenset[str]] = field(default_factory=dict)
    erased_users: dict[tuple[str, str], frozenset[str]] = field(default_factory=dict)

    def apply(self, key: bytes | None, value: bytes | None) -> bool:
        """Take one topic record (None value: a tombstone); False when it does not decode."""
        if key is None:
            return False
        parts = key.decode("utf-8", "replace").split("/")
        if len(parts) == 3:  # a data key, or its tombstone
            tenant_id, memory_id, key_id = parts
            if value is None:
                self._drop((tenant_id, memory_id), {key_id})
                return True
            try:
                v = orjson.loads(value)
                secret = base64.b64decode(v["secret"], validate=True)
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                return False
            user = v.get("user_id")
            found = DataKey(tenant_id, memory_id, key_id, secret, user)
            self.add(found)
            return True
        if len(parts) == 2:  # an erasure marker
            memory = (parts[0], parts[1])
            if value is None:
                self.erased.pop(memory, None)
                self.erased_users.pop(memory, None)
                return True
            try:
                marker = orjson.loads(value)
                erased = _texts(marker["erased"])
            except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
                return False
            try:  # a bad list of users costs the repeat of a user's erasure, not the erasure
                users = _texts(marker.get("users", []))
            except TypeError:
                users = frozenset()
            self.erased[memory] = erased
            if users:
                self.erased_users[memory] = users
            else:
                self.erased_users.pop(memory, None)
            self._drop(memory, erased)  # tombstones this reader may never have seen
            return True
        return False

    def _drop(self, memory: tuple[str, str], key_ids: Collection[str]) -> None:
        """Forget ``key_ids`` of ``memory``, and the memory once it has none (erased memories
        must cost nothing but their marker).
        """
        keys = self.keys.get(memory)
        if keys is None:
            return
        for key_id in key_ids:
            keys.pop(key_id, None)
        if not keys:
            del self.keys[memory]

    def add(self, key: DataKey) -> None:
        """Hold ``key``, unless an erasure marker names it: the marker always wins (a reader
        slower than the topic's tombstone retention may meet the key after its tombstone is gone).
        """
        if self.is_erased(key.tenant_id, key.memory_id, key.key_id):
            return
        self.keys.setdefault((key.tenant_id, key.memory_id), {})[key.key_id] = key

    def data_key(self, tenant_id: str, memory_id: str, key_id: str) -> DataKey | None:
        return self.keys.get((tenant_id, memory_id), {}).get(key_id)

    def secret(self, tenant_id: str, memory_id: str, key_id: str) -> bytes | None:
        found = self.data_key(tenant_id, memory_id, key_id)
        return found.secret if found is not None else None

    def is_erased(self, tenant_id: str, memory_id: str, key_id: str) -> bool:
        return key_id in self.erased.get((tenant_id, memory_id), frozenset())

    def erased_memory(self, tenant_id: str, memory_id: str) -> bool:
        """See :meth:`Opener.erased_memory`."""
        return bool(self.erased.get((tenant_id, memory_id))) and not self.keys.get(
            (tenant_id, memory_id)
        )

    def erased_of_user(self, tenant_id: str, user_id: str) -> set[str]:
        """Ids of ``tenant_id``'s memories erased (:meth:`erased_memory`) whose erased keys
        named ``user_id``.
        """
        return {
            memory_id
            for (tenant, memory_id), users in self.erased_users.items()
            if tenant == tenant_id and user_id in users and self.erased_memory(tenant, memory_id)
        }

    def of_memory(self, tenant_id: str, memory_id: str) -> list[DataKey]:
        return list(self.keys.get((tenant_id, memory_id), {}).values())

    def memories(self, tenant_id: str, user_id: str | None = None) -> set[str]:
        """Ids of ``tenant_id``'s memories with a live key (of ``user_id`` when given)."""
        return {
            memory_id
            for (tenant, memory_id), keys in self.keys.items()
            if tenant == tenant_id
            and keys
            and (user_id is None or any(k.user_id == user_id for k in keys.values()))
        }

    def open(self, tenant_id: str, memory_id: str, sealed: Mapping[str, Any]) -> Any:  # noqa: ANN401 - JSON
        """The payload of ``sealed``; raises Erased when its key was erased, SealError when the
        key is unknown here or the value does not open.
        """
        key_id = str(sealed.get("key_id", "")) if isinstance(sealed, Mapping) else ""
        if self.is_erased(tenant_id, memory_id, key_id):
            raise Erased(tenant_id, memory_id, key_id)
        secret = self.secret(tenant_id, memory_id, key_id)
        if secret is None:
            raise SealError("sealed.key_id", f"unknown key {key_id!r} for {memory_id}")
        return unseal(sealed, secret, tenant_id, memory_id)


def _texts(value: object) -> frozenset[str]:
    """An erasure marker's list of texts; TypeError for anything else (a string is no list of
    key ids: its characters are none).
    """
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TypeError(f"expected a list of texts, not {value!r:.80}")
    return frozenset(value)
