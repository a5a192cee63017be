"""The tenant registry: which tenants exist, their policy, their API keys and their rate limit.

A JSON file::

    {"tenants": {"acme": {"decay": "zeromemory", "lifecycle": "default", "recall": "mnemostream",
                          "overrides": {"review": {"reinforcement": 0.2}}, "api_keys": ["k-..."],
                          "api_key_hashes": ["<sha256 hex>"], "rate_limit_per_s": 50}}}

Every field but the tenant id is optional. Loading validates every policy (InvalidField names it).
Keys are kept only as SHA-256 digests (:func:`key_hash`): a file's plain ``api_keys`` are hashed at
load, ``api_key_hashes`` are taken as they are. The same tenants, as records of the compacted
``tenants`` topic, are :func:`tenant_record` and :func:`decode_tenant_record`
(:mod:`storage.tenant_log` follows that topic).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import orjson

from memcore import InvalidField, Policy
from memcore.ids import check_id
from memcore.supersession import MAX_NEIGHBOURS, MAX_WORDS

VERSION = 1
KEY_ID_CHARS = 12
"""A key is named (listed, revoked) by this many leading hex digits of its hash."""
_HEX64 = re.compile(r"[0-9a-f]{64}")
_POLICY_FIELDS = ("decay", "lifecycle", "recall")
_DEFAULTS = {"decay": "zeromemory", "lifecycle": "default", "recall": "mnemostream"}


def new_api_key() -> str:
    """A new random API key (256 bits); shown once, stored as its digest."""
    return "mk-" + secrets.token_urlsafe(32)


def key_hash(api_key: str) -> str:
    """The SHA-256 hex digest an API key is stored and looked up by."""
    return hashlib.sha256(api_key.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Tenant:
    """One tenant: its validated policy (and the preset names and overrides it was built from),
    the digests of the API keys that act for it, and its request rate limit (None: the ranker's
    default; 0: unlimited). ``history_from_ms``: a tenant made under the id of one deleted with
    ``erase`` shows no audit record logged before it was made (Kafka record time, milliseconds
    since the epoch): the audit topic keeps the erased tenant's records under the same keys.
    """

    tenant_id: str
    policy: Policy = field(default_factory=Policy)
    api_key_hashes: tuple[str, ...] = ()
    rate_limit_per_s: float | None = None
    decay: str = "zeromemory"
    lifecycle: str = "default"
    recall: str = "mnemostream"
    overrides: Mapping[str, Any] = field(default_factory=dict, hash=False)
    history_from_ms: int | None = None

    @property
    def key_ids(self) -> list[str]:
        """How the keys are named to an admin: the first digits of each digest."""
        return [h[:KEY_ID_CHARS] for h in self.api_key_hashes]

    def public(self) -> dict[str, Any]:
        """The tenant as the admin API and CLI show it: no key, no digest; the lifecycle and
        recall presets it runs (an override's ``preset`` over the one named beside it: the
        name given said another formula than its recalls score with), and the decay preset
        as given, the one its rates start from (a decay override's ``preset`` keeps those
        rates and relabels them, the label :func:`memcore.policy.recall_decay` compares;
        shown as the label, then sent back, the rates would have become that preset's).
        """
        return {
            "tenant_id": self.tenant_id,
            "decay": self.decay,
            "lifecycle": self.policy.lifecycle.preset.value,
            "recall": self.policy.recall.preset.value,
            "overrides": dict(self.overrides),
            "rate_limit_per_s": self.rate_limit_per_s,
            "key_ids": self.key_ids,
            "history_from": _iso_ms(self.history_from_ms),
        }


def _iso_ms(ms: int | None) -> str | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, UTC).isoformat()


class Tenants(Protocol):
    """What reads the tenants: a fixed :class:`TenantRegistry` or the live
    :class:`storage.tenant_log.TenantLog`.
    """

    @property
    def tenants(self) -> Mapping[str, Tenant]: ...

    def get(self, tenant_id: str) -> Tenant | None: ...

    def by_api_key(self, api_key: str) -> Tenant | None: ...


@dataclass(frozen=True)
class TenantRegistry:
    """Known tenants by id. A tenant not in it is unknown everywhere. A key digest that two
    tenants claim acts for neither.
    """

    tenants: Mapping[str, Tenant]
    _by_hash: Mapping[str, Tenant] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_hash: dict[str, Tenant] = {}
        claimed: set[str] = set()
        for tenant in self.tenants.values():
            for digest in tenant.api_key_hashes:
                if digest in claimed:
                    by_hash.pop(digest, None)
                else:
                    by_hash[digest] = tenant
                claimed.add(digest)
        object.__setattr__(self, "_by_hash", by_hash)

    def get(self, tenant_id: str) -> Tenant | None:
        return self.tenants.get(tenant_id)

    def by_api_key(self, api_key: str) -> Tenant | None:
        """The tenant an API key acts for, or None (looked up by the key's digest)."""
        return self._by_hash.get(key_hash(api_key))

    def merged(self, records: Mapping[str, Tenant | None]) -> TenantRegistry:
        """These tenants with ``records`` over them: a tenant replaces the one of its id, None
        removes it.
        """
        tenants = dict(self.tenants)
        for tenant_id, tenant in records.items():
            if tenant is None:
                tenants.pop(tenant_id, None)
            else:
                tenants[tenant_id] = tenant
        return TenantRegistry(tenants)

    @classmethod
    def of(cls, spec: Mapping[str, Any]) -> TenantRegistry:
        """Build from the parsed JSON document (see the module docstring); InvalidField naming
        ``tenants`` when it is not an object holding one.
        """
        if not isinstance(spec, Mapping):
            raise InvalidField("tenants", spec, "expected a JSON object with a tenants object")
        tenants = spec.get("tenants")
        if not isinstance(tenants, Mapping):
            raise InvalidField("tenants", tenants, "expected an object of tenant id -> settings")
        out: dict[str, Tenant] = {}
        seen: set[str] = set()
        for tenant_id, given in tenants.items():
            check_id(f"tenants.{tenant_id}", tenant_id)
            entry = given or {}
            if not isinstance(entry, Mapping):
                raise InvalidField(f"tenants.{tenant_id}", entry, "expected an object")
            tenant = tenant_of(tenant_id, entry, f"tenants.{tenant_id}")
            for digest in tenant.api_key_hashes:
                if digest in seen:
                    raise InvalidField(
                        f"tenants.{tenant_id}.api_keys", "***", "a key may act for one tenant only"
                    )
                seen.add(digest)
            out[tenant_id] = tenant
        return cls(out)

    @classmethod
    def load(cls, path: Path) -> TenantRegistry:
        """Read and validate a registry file."""
        try:
            spec = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise InvalidField("tenants_file", str(path), f"cannot read: {exc}") from exc
        return cls.of(spec)

    @classmethod
    def open_to(cls, tenant_ids: list[str]) -> TenantRegistry:
        """Tenants with the default policy and no API keys."""
        return cls({t: Tenant(check_id("tenants", t)) for t in tenant_ids})


def tenant_of(tenant_id: str, entry: Mapping[str, Any], at: str = "") -> Tenant:
    """A validated tenant from its settings (the file's entry, a record, an admin request):
    ``decay``, ``lifecycle``, ``recall``, ``overrides``, ``api_keys`` (plain, hashed here),
    ``api_key_hashes``, ``rate_limit_per_s``. Raises InvalidField naming the field (policy fields
    as ``policy.<section>...``, the others under ``at``).
    """
    prefix = f"{at}." if at else ""
    names = {}
    for name in _POLICY_FIELDS:
        value = entry.get(name)
        value = _DEFAULTS[name] if value is None else value
        if not isinstance(value, str):
            raise InvalidField(f"policy.{name}.preset", value, "expected a preset name")
        names[name] = value
    overrides = entry.get("overrides") or {}
    if not isinstance(overrides, Mapping):
        raise InvalidField("policy", overrides, "overrides: expected an object of sections")
    policy = Policy.build(overrides=overrides, **names)
    digests = [key_hash(k) for k in _plain_keys(entry.get("api_keys"), f"{prefix}api_keys")]
    digests += _digests(entry.get("api_key_hashes"), f"{prefix}api_key_hashes")
    if len(set(digests)) != len(digests):
        raise InvalidField(f"{prefix}api_keys", "***", "the same key twice")
    rate = rate_limit(entry.get("rate_limit_per_s"), f"{prefix}rate_limit_per_s")
    return Tenant(
        tenant_id,
        policy,
        tuple(digests),
        rate,
        decay=names["decay"],
        lifecycle=names["lifecycle"],
        recall=names["recall"],
        overrides=dict(overrides),
    )


def rate_limit(value: object, name: str = "rate_limit_per_s") -> float | None:
    """A tenant's rate limit: None (the default), 0 (unlimited) or requests per second."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidField(name, value, "expected a number of requests per second, or null")
    if not math.isfinite(value) or value < 0:
        raise InvalidField(name, value, "expected a finite number >= 0 (0: unlimited)")
    return float(value)


def _plain_keys(keys: object, name: str) -> list[str]:
    if keys is None:
        return []
    if not isinstance(keys, list | tuple):
        raise InvalidField(name, "***", "expected a list of keys")
    for key in keys:
        if not isinstance(key, str) or len(key) < 16:
            raise InvalidField(name, "***", "keys are strings of 16+ characters")
    return list(keys)


def _digests(digests: object, name: str) -> list[str]:
    if digests is None:
        return []
    if not isinstance(digests, list | tuple):
        raise InvalidField(name, "***", "expected a list of SHA-256 hex digests")
    for digest in digests:
        if not isinstance(digest, str) or not _HEX64.fullmatch(digest):
            # not shown: a plain key put here by mistake would be logged (api_keys masks it too)
            raise InvalidField(name, "***", "expected 64 lower-case hex digits (SHA-256)")
    return list(digests)


# -- the tenants topic ---------------------------------------------------------------------------


class ReusedTenant(Exception):  # noqa: N818 - the condition, as callers catch it
    """A tenant made under the id of one deleted with its memories kept: they would be the new
    tenant's (memories are found by the tenant id alone).
    """

    def __init__(self, tenant_id: str) -> None:
        self.tenant_id = tenant_id
        super().__init__(
            f"tenant {tenant_id} was deleted and the memories written under its id are kept"
            " (if it wrote any): the tenant made now would read them. Say reuse to give them"
            " to it (and to erase them, delete it again with erase, then make it anew)"
        )


def was_erased(value: bytes) -> bool:
    """Whether a deleting ``tenants`` record (:func:`tenant_record`) says the tenant's memories
    were erased first (records written before the flag say no).
    """
    try:
        document = orjson.loads(value)
    except orjson.JSONDecodeError:
        return False
    return isinstance(document, dict) and document.get("erased") is True


def tenant_record(
    tenant: Tenant, *, deleted: bool = False, erased: bool = False
) -> tuple[bytes, bytes]:
    """The key and value of the ``tenants`` topic record that sets ``tenant`` (``deleted``: that
    removes it, the file's tenant of that id included; ``erased``: its memories were erased
    first, so the id may be given to a new tenant). Only key digests are written.
    """
    value = {
        "v": VERSION,
        "tenant_id": tenant.tenant_id,
        "decay": tenant.decay,
        "lifecycle": tenant.lifecycle,
        "recall": tenant.recall,
        "overrides": dict(tenant.overrides),
        "api_key_hashes": list(tenant.api_key_hashes),
        "rate_limit_per_s": tenant.rate_limit_per_s,
        "deleted": deleted,
    }
    if tenant.history_from_ms is not None:
        value["history_from_ms"] = tenant.history_from_ms
    if deleted:
        value["erased"] = erased
    return tenant.tenant_id.encode("utf-8"), orjson.dumps(value)


def decode_tenant_record(key: bytes | None, value: bytes | None) -> tuple[str, Tenant | None]:
    """A ``tenants`` record: the tenant id and the tenant, or None when the record deletes it
    (``deleted``). A tombstone (``value`` None) is not decoded here: it only forgets the topic's
    record of that id. Raises InvalidField naming the first bad field.
    """
    if key is None:
        raise InvalidField("key", None, "a tenants record is keyed by its tenant id")
    try:
        tenant_id = check_id("key", key.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise InvalidField("key", key[:60], "not UTF-8") from exc
    if value is None:
        raise InvalidField("$", None, "a tombstone has no tenant")
    try:
        document = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        raise InvalidField("$", value[:60], f"not JSON: {exc}") from exc
    if not isinstance(document, dict):
        raise InvalidField("$", document, "expected a JSON object")
    if document.get("v") != VERSION:
        raise InvalidField("v", document.get("v"), f"unsupported version; expected {VERSION}")
    if document.get("tenant_id") != tenant_id:
        raise InvalidField("tenant_id", document.get("tenant_id"), "differs from the key")
    deleted = document.get("deleted", False)
    if not isinstance(deleted, bool):
        raise InvalidField("deleted", deleted, "expected true or false")
    if deleted:
        return tenant_id, None
    if document.get("api_keys") is not None:
        raise InvalidField("api_keys", "***", "the topic holds key digests only")
    tenant = tenant_of(tenant_id, document)
    return tenant_id, dataclasses.replace(tenant, history_from_ms=_history_from(document))


def _history_from(document: Mapping[str, Any]) -> int | None:
    value = document.get("history_from_ms")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidField("history_from_ms", value, "expected milliseconds since the epoch")
    return value


def deleted_history_from(value: bytes) -> int | None:
    """The ``history_from_ms`` a deleting ``tenants`` record carried (None: none, or a record
    that does not say): a tenant made again with ``reuse`` goes on from it.
    """
    try:
        document = orjson.loads(value)
        return _history_from(document) if isinstance(document, dict) else None
    except (orjson.JSONDecodeError, InvalidField):
        return None


# -- what an admin changes -------------------------------------------------------------------------


def replaced(current: Tenant | None, tenant_id: str, settings: Mapping[str, Any]) -> Tenant:
    """The tenant ``tenant_id`` with new settings (policy, rate limit), and the keys and
    ``history_from_ms`` it had.
    """
    check_id("tenant_id", tenant_id)
    for name in ("api_keys", "api_key_hashes"):
        if name in settings:
            raise InvalidField(name, "***", "keys are added and revoked on their own")
    keys = current.api_key_hashes if current is not None else ()
    history_from = current.history_from_ms if current is not None else None
    tenant = tenant_of(tenant_id, settings)
    intervals = tenant.policy.review.intervals_hours
    if len(intervals) > MAX_REVIEW_INTERVALS:  # checked where a policy is made, not where read
        why = f"expected at most {MAX_REVIEW_INTERVALS}: every memory's state keeps them all"
        raise InvalidField("policy.review.intervals_hours", f"<{len(intervals)} intervals>", why)
    neighbours = tenant.policy.supersession.neighbours
    if neighbours > MAX_NEIGHBOURS:
        why = f"expected at most {MAX_NEIGHBOURS}: a write is compared with that many at most"
        raise InvalidField("policy.supersession.neighbours", neighbours, why)
    max_words = tenant.policy.supersession.max_words
    if max_words > MAX_WORDS:
        why = f"expected at most {MAX_WORDS}: longer statements are never parsed"
        raise InvalidField("policy.supersession.max_words", max_words, why)
    preset = tenant.policy.recall.preset
    recall = tenant.overrides.get("recall") or {}
    # stored and never read: a recall naming another preset starts from that preset's weights
    # (an mmr_lambda is carried over to it, so it is kept)
    if "weights" in preset.ignores and "weights" in recall:
        why = f"the {preset.value} preset does not use them (SPEC section 6)"
        raise InvalidField("policy.recall.weights", recall["weights"], why)
    return dataclasses.replace(tenant, api_key_hashes=keys, history_from_ms=history_from)


MAX_REVIEW_INTERVALS = 32
"""The most review intervals the admin API and CLI give a policy (a record already on the topic
with more is read as it is: refusing it would close its tenant)."""


def without_keys(tenant: Tenant) -> Tenant:
    """``tenant`` with none of its keys (every request for it is refused; its records are not)."""
    return dataclasses.replace(tenant, api_key_hashes=())


def with_key(tenant: Tenant, api_key: str) -> Tenant:
    """``tenant`` with one more key (its digest)."""
    digest = key_hash(api_key)
    if digest in tenant.api_key_hashes:
        return tenant
    return dataclasses.replace(tenant, api_key_hashes=(*tenant.api_key_hashes, digest))


def without_key(tenant: Tenant, key_id: str) -> Tenant:
    """``tenant`` without the key named by ``key_id``: its digest or a leading part of it (8+ hex
    digits) that names one key only. Raises LookupError when it names none, InvalidField when it
    is malformed or names more than one.
    """
    key_id = key_id.lower()
    if not re.fullmatch(r"[0-9a-f]{8,64}", key_id):
        raise InvalidField("key_id", key_id, "expected 8-64 hex digits of the key's SHA-256")
    found = [h for h in tenant.api_key_hashes if h.startswith(key_id)]
    if not found:
        raise LookupError(key_id)
    if len(found) > 1:
        raise InvalidField("key_id", key_id, "names more than one key: give more digits")
    return dataclasses.replace(
        tenant, api_key_hashes=tuple(h for h in tenant.api_key_hashes if h != found[0])
    )
