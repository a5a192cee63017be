"""The live tenant registry: the ``tenants`` topic (compacted, keyed by tenant id) over the
file's or the environment's tenants.

:class:`TenantLog` reads the topic from the beginning (no consumer group: every partition,
assigned) and keeps following it, so a tenant created, changed or deleted there is known to every
process without a restart. It reads like a :class:`~storage.tenants.TenantRegistry` (``get``,
``by_api_key``, ``tenants``: always the latest view). :meth:`TenantLog.catch_up` waits until
every record on the topic now is applied; :meth:`TenantLog.publish` produces a record (acks=all)
and waits until this log has applied it (read-your-writes for the admin who made the change).

A record sets the whole tenant (``storage.tenants.tenant_record``); ``deleted`` removes it, the
file's tenant of that id included; a tombstone (null value) forgets the topic's record, so a
tenant the file defines shows through again. A record that does not decode is logged, and its
tenant (when its key is a tenant id) is served by no process, as if deleted: writers validate before
they produce, and keeping the previous record instead made processes disagree once the topic was
compacted (a process started since had only the bad record: the tenant unknown there, served by
the others with its old settings).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from memcore import InvalidField
from memcore.ids import check_id
from storage.compacted import CompactedLog, CompactedLogError
from storage.kafka import KafkaConnection
from storage.tenants import (
    ReusedTenant,
    Tenant,
    TenantRegistry,
    decode_tenant_record,
    deleted_history_from,
    tenant_record,
    was_erased,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Seen:
    """One record of a tenant as read: its offset, the tenant it sets (None: deleted) and, for a
    deletion, whether the tenant's memories were kept (not erased) and the deleted tenant's
    ``history_from_ms`` (:class:`~storage.tenants.Tenant`).
    """

    offset: int
    tenant: Tenant | None
    kept: bool
    history_from_ms: int | None = None


CHANGE_ATTEMPTS = 5
"""How often :meth:`TenantLog.update` makes its change again when others keep overtaking it."""
SEEN = 64
"""Offsets of each tenant's latest records kept (to tell whether a change was overtaken)."""
ROLE = "tenants"
"""The topic's role (its name is the topic prefix and this)."""


class TenantLogError(CompactedLogError):
    """The tenants topic could not be read or written (:class:`CompactedLogError`)."""

    what = "tenants topic"


class TenantLog(CompactedLog):
    """``base`` (the file's or the environment's tenants) with the topic's records over it.

    The constructor does no I/O; :meth:`start` connects and follows the topic in a task of its own
    (waiting for the topic while the worker creates it); :meth:`stop` closes everything.
    ``timeout_s`` bounds :meth:`catch_up` and :meth:`publish`.
    """

    error = TenantLogError

    def __init__(
        self,
        kafka: KafkaConnection | str,
        topic: str,
        base: TenantRegistry,
        *,
        timeout_s: float = 10.0,
        poll_s: float = 0.05,
    ) -> None:
        super().__init__(kafka, topic, timeout_s=timeout_s, poll_s=poll_s)
        self.base = base
        self._records: dict[str, Tenant | None] = {}
        # tenant id -> the record that deleted it, for the ids the topic deleted last
        self.deleted: dict[str, Seen] = {}
        # tenant id -> its latest records read, oldest first (offsets of its partition's: the
        # topic is keyed by tenant id)
        self.seen: dict[str, deque[Seen]] = {}
        self._view = base
        self._writing = asyncio.Lock()

    # -- the registry ------------------------------------------------------------------------

    @property
    def view(self) -> TenantRegistry:
        """The tenants now (a snapshot: later records make a new one)."""
        return self._view

    @property
    def tenants(self) -> Mapping[str, Tenant]:
        return self._view.tenants

    def get(self, tenant_id: str) -> Tenant | None:
        return self._view.get(tenant_id)

    def by_api_key(self, api_key: str) -> Tenant | None:
        return self._view.by_api_key(api_key)

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        """Take one record (see the module doc); the view is rebuilt by :meth:`refresh`."""
        if value is None:
            if key is not None:
                self._records.pop(key.decode("utf-8", "replace"), None)
                self.deleted.pop(key.decode("utf-8", "replace"), None)
            return
        try:
            tenant_id, tenant = decode_tenant_record(key, value)
        except InvalidField as exc:
            log.error("tenants topic: a record keyed %r does not decode: %s", key, exc)
            self._unreadable(key)
            return
        except Exception:  # a record no check foresaw must not cost the batch after it
            log.exception("tenants topic: a record keyed %r does not decode", key)
            self._unreadable(key)
            return
        self._records[tenant_id] = tenant
        kept = tenant is None and not was_erased(value)
        history_from = deleted_history_from(value) if tenant is None else None
        record = Seen(-1 if self.offset is None else self.offset, tenant, kept, history_from)
        if self.offset is not None:
            self.seen.setdefault(tenant_id, deque(maxlen=SEEN)).append(record)
        if tenant is None:
            self.deleted[tenant_id] = record
        else:
            self.deleted.pop(tenant_id, None)
        self.applied += 1

    def _unreadable(self, key: bytes | None) -> None:
        """The tenant a record that does not decode is keyed by is served by no process."""
        try:
            tenant_id = check_id("key", key.decode("utf-8")) if key is not None else None
        except (UnicodeDecodeError, InvalidField):
            return
        if tenant_id is not None:
            self._records[tenant_id] = None

    def refresh(self) -> None:
        """Rebuild the view from ``base`` and the records applied."""
        self._view = self.base.merged(self._records)

    async def update(
        self,
        tenant_id: str,
        change: Callable[[Tenant | None], Tenant | None],
        *,
        erased: bool = False,
        reuse: bool = False,
    ) -> Tenant | None:
        """Read-modify-write one tenant: catch up, ``change`` the current tenant (None: there is
        none) into the new one (None: delete it; ``erased``: its memories were erased first),
        publish that and return it. ``change`` may raise (nothing is published then), and so
        does making a tenant under the id of one deleted with its memories kept
        (:class:`~storage.tenants.ReusedTenant`) unless ``reuse``. Changes made through this log
        are serialised; a change another process published between the record this one was
        computed from and its own (two rankers behind one Service) is not lost: this change is
        made again on that record and published again (the later of two concurrent writers
        redoes its change; ``change`` must give the same result when applied again). When the
        change no longer applies to it (the other deleted the tenant, say), that record is
        published again, so the topic ends as the other left it, and the error is raised. A
        third change made from this one's first record meanwhile may still be lost. Raises
        TenantLogError when the tenant keeps changing under it.
        """
        async with self._writing:
            await self.catch_up()
            seen = self.seen.get(tenant_id)
            base = seen[-1].offset if seen else None
            current = self.get(tenant_id)
            gone = self.deleted.get(tenant_id) if current is None else None
            redo: Seen | None = None
            for _ in range(CHANGE_ATTEMPTS):
                try:
                    new = change(current)
                    if new is not None and current is None:
                        new = self._made_anew(new, gone, reuse)
                except Exception:
                    if redo is not None:
                        await self._restore(tenant_id, redo)
                    raise
                if new is None:
                    record = current or Tenant(tenant_id)
                    ours = await self.publish_tenant(record, deleted=True, erased=erased)
                else:
                    ours = await self.publish_tenant(new)
                redo = None if ours is None else self._overtaking(tenant_id, base, ours)
                if redo is None:
                    return new
                base, current = ours, redo.tenant
                gone = redo if redo.tenant is None else None
            raise self.error(f"tenant {tenant_id} changed under {CHANGE_ATTEMPTS} attempts")

    def _made_anew(self, new: Tenant, gone: Seen | None, reuse: bool) -> Tenant:
        """``new``, made where no tenant is now (``gone``: the deletion, when there was one).
        Raises ReusedTenant for the id of one deleted with its memories kept, unless ``reuse``
        (which goes on from its ``history_from_ms``); after an erasure its history starts now.
        """
        if gone is None:
            return dataclasses.replace(new, history_from_ms=None)
        if gone.kept:
            if not reuse:
                raise ReusedTenant(new.tenant_id)
            return dataclasses.replace(new, history_from_ms=gone.history_from_ms)
        now_ms = int(time.time() * 1000)  # the audit topic's record times are wall clock too
        return dataclasses.replace(new, history_from_ms=now_ms)

    def _overtaking(self, tenant_id: str, base: int | None, ours: int) -> Seen | None:
        """The newest record of ``tenant_id`` that landed after ``base`` (the newest when a change
        was made) and before ``ours`` (its own), or None: the change was made on the tenant
        before that record.
        """
        between = [
            seen
            for seen in self.seen.get(tenant_id, ())
            if (base is None or base < seen.offset) and seen.offset < ours
        ]
        return between[-1] if between else None

    async def _restore(self, tenant_id: str, record: Seen) -> None:
        """Publish ``record`` again."""
        if record.tenant is None:
            gone = Tenant(tenant_id, history_from_ms=record.history_from_ms)
            await self.publish_tenant(gone, deleted=True, erased=not record.kept)
        else:
            await self.publish_tenant(record.tenant)

    async def publish_tenant(
        self, tenant: Tenant, *, deleted: bool = False, erased: bool = False
    ) -> int | None:
        """Produce ``tenant``'s record (acks=all) and wait until this log has applied it; its
        offset. Raises TenantLogError as :meth:`CompactedLog.publish` does.
        """
        offsets = await self.publish([tenant_record(tenant, deleted=deleted, erased=erased)])
        return offsets[0] if offsets else None
