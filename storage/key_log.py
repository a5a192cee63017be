"""The ``memory-keys`` topic (compacted): every write's data key and every erasure marker
(:mod:`storage.sealing`), followed in memory by each process that seals or opens memories.

The ranker mints a key per write (:meth:`KeyLog.mint`: acknowledged by every in-sync replica
before the sealed write is produced) and erases (:meth:`KeyLog.erase`: tombstones the memory's
keys and records its erasure marker). The worker opens the sealed writes it applies and the
documents it keeps (:meth:`KeyLog.open`), reading the topic up to its end first when a record
names a key it has not seen yet (:meth:`KeyLog.know`).

Erasure is complete once the broker's log cleaner has compacted the tombstoned keys away: the
topic is created with ``segment.ms`` and ``max.compaction.lag.ms`` set to the worker's
``MNEMO_KEYS_COMPACTION_LAG_MS`` (``streams.topics``); until then the key is still on the
broker's disk (but no longer served by any of our processes).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

import orjson

from storage.compacted import CompactedLog, CompactedLogError
from storage.kafka import KafkaConnection
from storage.sealing import DataKey, KeyRing, erasure_record, key_record, new_key

log = logging.getLogger(__name__)

ROLE = "memory-keys"
"""The topic's role (its name is the topic prefix and this)."""


class KeyLogError(CompactedLogError):
    """The keys topic could not be read or written (:class:`CompactedLogError`)."""

    what = "keys topic"


class KeyLog(CompactedLog):
    """The :class:`~storage.sealing.KeyRing` of the topic; the constructor does no I/O."""

    error = KeyLogError

    def __init__(self, kafka: KafkaConnection | str, topic: str, **timing: float) -> None:
        """``timing``: :class:`~storage.compacted.CompactedLog`'s ``timeout_s`` and ``poll_s``."""
        super().__init__(kafka, topic, **timing)
        self.ring = KeyRing()
        self._erasing = asyncio.Lock()

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        if self.ring.apply(key, value):
            self.applied += 1
        else:
            log.warning("keys topic: skipped a record keyed %r that does not decode", key)

    def open(self, tenant_id: str, memory_id: str, sealed: Mapping[str, Any]) -> Any:  # noqa: ANN401 - JSON
        """See :meth:`storage.sealing.KeyRing.open`."""
        return self.ring.open(tenant_id, memory_id, sealed)

    def data_key(self, tenant_id: str, memory_id: str, key_id: str) -> DataKey | None:
        return self.ring.data_key(tenant_id, memory_id, key_id)

    def erased_memory(self, tenant_id: str, memory_id: str) -> bool:
        """See :meth:`storage.sealing.Opener.erased_memory` (as read so far: no catch-up)."""
        return self.ring.erased_memory(tenant_id, memory_id)

    def is_erased(self, tenant_id: str, memory_id: str, key_id: str) -> bool:
        """See :meth:`storage.sealing.Opener.is_erased` (as read so far: no catch-up)."""
        return self.ring.is_erased(tenant_id, memory_id, key_id)

    def of_memory(self, tenant_id: str, memory_id: str) -> list[DataKey]:
        """See :meth:`storage.sealing.Opener.of_memory` (as read so far: no catch-up)."""
        return self.ring.of_memory(tenant_id, memory_id)

    async def mint(self, memories: Sequence[tuple[str, str, str | None]]) -> list[DataKey]:
        """A fresh key for each ``(tenant, memory, user)``, acknowledged on the topic by every
        in-sync replica before this returns (a sealed write is produced only after its key).
        Raises KeyLogError when the topic does not answer in time.
        """
        keys = [
            new_key(tenant_id, memory_id, user_id) for tenant_id, memory_id, user_id in memories
        ]
        await self.publish([key_record(k) for k in keys], applied=False)
        for key in keys:
            self.ring.add(key)
        return keys

    async def erase(
        self,
        tenant_id: str,
        memory_ids: Iterable[str],
        *,
        users: bool = False,
        only: Mapping[str, Collection[str]] | None = None,
    ) -> dict[str, int]:
        """Erase the keys of ``tenant_id``'s ``memory_ids``: tombstones for each key and the
        memory's erasure marker (every key id erased so far; with ``users``, the users its keys
        named too, until :meth:`forget_users`), applied here before this returns. ``only``: per
        memory, the key ids to erase (its other keys stay live); None: every key it has.
        Returns how many keys each memory had erased. Raises KeyLogError as :meth:`publish` does.
        """
        async with self._erasing:
            await self.catch_up()
            records: list[tuple[bytes, bytes | None]] = []
            erased: dict[str, int] = {}
            for memory_id in dict.fromkeys(memory_ids):
                keys = self.ring.of_memory(tenant_id, memory_id)
                if only is not None:
                    keys = [k for k in keys if k.key_id in only.get(memory_id, ())]
                before = self.ring.erased.get((tenant_id, memory_id), frozenset())
                records.extend((k.record_key, None) for k in keys)
                ids = before | {k.key_id for k in keys}
                if ids != before:
                    named = self.ring.erased_users.get((tenant_id, memory_id), frozenset())
                    if users:
                        named |= {k.user_id for k in keys if k.user_id is not None}
                    records.append(erasure_record(tenant_id, memory_id, ids, named))
                erased[memory_id] = len(keys)
            await self.publish(records)
            return erased

    def memories(self, tenant_id: str, user_id: str | None = None) -> set[str]:
        """See :meth:`storage.sealing.KeyRing.memories` (call :meth:`catch_up` first)."""
        return self.ring.memories(tenant_id, user_id)

    async def forget_users(self, tenant_id: str, memory_ids: Iterable[str]) -> None:
        """Write the erasure markers of ``memory_ids`` again without the users they name (an
        erasure marker is never compacted away: a user's id is kept only until the erasure that
        needed it is done). Raises KeyLogError as :meth:`publish` does.
        """
        async with self._erasing:
            records = [
                erasure_record(tenant_id, m, self.ring.erased.get((tenant_id, m), ()))
                for m in dict.fromkeys(memory_ids)
                if self.ring.erased_users.get((tenant_id, m))
            ]
            if records:
                await self.publish(records)

    def erased_of_user(self, tenant_id: str, user_id: str) -> set[str]:
        """See :meth:`storage.sealing.KeyRing.erased_of_user` (call :meth:`catch_up` first)."""
        return self.ring.erased_of_user(tenant_id, user_id)

    async def know(self, values: Iterable[bytes]) -> None:
        """Read the topic up to its end (once) when a sealed record among ``values`` names a key
        this log has neither seen nor seen erased. While the topic cannot be read, retries
        every second (the batch waits unacknowledged): a write whose key exists is never
        dead-lettered for want of it.
        """
        if any(self._unknown(v) for v in values):
            await self.read_through()

    def _unknown(self, value: bytes) -> bool:
        if b'"sealed"' not in value:  # a record in the clear: nothing to look up
            return False
        try:
            record = orjson.loads(value)
            sealed = record["sealed"]
            tenant_id, memory_id = record["tenant_id"], record["memory_id"]
            key_id = sealed["key_id"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            return False
        if not all(isinstance(x, str) for x in (tenant_id, memory_id, key_id)):
            return False
        ring = self.ring
        known = ring.secret(tenant_id, memory_id, key_id) is not None
        return not known and not ring.is_erased(tenant_id, memory_id, key_id)
